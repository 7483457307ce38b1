"""``handoffscope conformance --binding a2a``: passes against our A2A receiver, and fails,
naming the scenario, against receivers broken on purpose (over real HTTP on 127.0.0.1)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from auditor.cli import main
from collector import MemoryStore, Receiver
from collector.a2a import a2a_app, kit
from collector.http import conformance
from collector.idempotency import StoredResult
from collector.messages import Proposal
from tests.support.a2a import free_port, served

TOKEN_ENV = "A2A_CONFORMANCE_TOKEN"
TOKEN = "conformance-s3cret"


class ForgetfulStore(MemoryStore):
    """Stores no result: every commit of a key runs again (a duplicate runs twice)."""

    def complete(self, token: str, result: StoredResult) -> bool:
        self.release(token)
        return True


class DeadlineBlindReceiver(Receiver):
    """Keeps an accept it sent after the validation clock as if it had been on time."""

    def _save_accept(self, p: Proposal, on_time: bool) -> None:
        super()._save_accept(p, True)


def _verdicts(outcomes: list[Any]) -> dict[str, str]:
    return {o.scenario: o.verdict for o in outcomes}


def test_our_receiver_passes_every_scenario_with_a_token():
    receiver = conformance.build_receiver(store=MemoryStore())
    with served(lambda url: a2a_app(receiver, url=url, token=TOKEN)) as url:
        outcomes = kit.run(url, token=TOKEN)
    assert _verdicts(outcomes) == {s.name: "PASS" for s in kit.SCENARIOS}, [
        (o.scenario, o.detail) for o in outcomes if not o.passed
    ]


def test_a_receiver_that_runs_a_duplicate_twice_fails_replay():
    receiver = conformance.build_receiver(store=ForgetfulStore())
    with served(lambda url: a2a_app(receiver, url=url)) as url:
        outcomes = {o.scenario: o for o in kit.run(url)}
    assert outcomes["replay"].verdict == "FAIL"
    assert outcomes["replay"].detail.startswith("second commit")
    assert outcomes["accept-with-eta"].verdict == "PASS"  # the rest of it still works


def test_a_receiver_that_ignores_the_deadline_fails_timeout():
    receiver = DeadlineBlindReceiver(
        "conformance",
        validator=conformance.validate,
        executor=conformance.execute,
        produces=[conformance.OUTPUT_SCHEMA],
    )
    with served(lambda url: a2a_app(receiver, url=url)) as url:
        outcomes = {o.scenario: o for o in kit.run(url)}
    assert outcomes["timeout"].verdict == "FAIL"
    assert "late-answered" in outcomes["timeout"].detail
    assert outcomes["replay"].verdict == "PASS"


def test_the_cli_names_the_failing_scenario_and_exits_1(capsys):
    receiver = conformance.build_receiver(store=ForgetfulStore())
    with served(lambda url: a2a_app(receiver, url=url)) as url:
        code = main(["conformance", url, "--binding", "a2a", "--format", "text"])
    out = capsys.readouterr().out
    assert code == 1
    assert any(line.startswith("FAIL  replay") for line in out.splitlines()), out


def test_the_cli_rejects_an_unknown_a2a_scenario(capsys):
    code = main(
        ["conformance", "http://127.0.0.1:9", "--binding", "a2a", "--scenario", "agent-crd"]
    )
    assert code == 2
    assert "agent-card" in capsys.readouterr().err


def test_the_cli_says_when_the_card_cannot_be_read(capsys):
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["conformance", url, "--binding", "a2a"]) == 2
    assert "cannot read the Agent Card" in capsys.readouterr().err


@pytest.mark.slow
def test_serve_binding_a2a_passes_the_cli_conformance(tmp_path: Path):
    """The two commands of the docs, in two processes: serve, then conformance."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, TOKEN_ENV: TOKEN}
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "auditor.cli", "serve", "--binding", "a2a",
             "collector.http.conformance:receiver", "--port", str(port),
             "--token-env", TOKEN_ENV, "--log-level", "warning"],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        give_up = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(url + "/.well-known/agent-card.json", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < give_up, log.read_text()
            time.sleep(0.05)
        done = subprocess.run(
            [sys.executable, "-m", "auditor.cli", "conformance", url, "--binding", "a2a",
             "--token-env", TOKEN_ENV, "--format", "text"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(10)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(kit.SCENARIOS)} passed, 0 failed" in done.stdout
    assert "as an A2A agent" in log.read_text()
