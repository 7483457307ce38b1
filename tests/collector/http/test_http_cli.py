"""``handoffscope serve`` and ``conformance``: what a user gets for a wrong argument."""

from __future__ import annotations

import pytest

from auditor.cli import main
from collector import ConfigurationError
from collector.http.cli import load_receiver
from tests.support.paths import REPO


def test_load_receiver_takes_a_receiver_or_a_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    assert load_receiver("tests.support.http_peer:build").name == "peer"
    assert load_receiver("collector.http.conformance:receiver").name == "conformance"


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("http_peer", "not MODULE:RECEIVER"),
        ("no_such_module_here:x", "no module named 'no_such_module_here'"),
        ("collector.http.conformance:recever", "receivers there: receiver"),
        ("collector.http.conformance:OUTPUT_SCHEMA", "is a str, not a collector.Receiver"),
    ],
)
def test_load_receiver_names_what_is_wrong(spec: str, words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        load_receiver(spec)


def test_serve_refuses_a_public_address_without_allow_remote(capsys: pytest.CaptureFixture[str]):
    code = main(["serve", "collector.http.conformance:receiver", "--host", "0.0.0.0"])
    assert code == 2
    assert "--allow-remote" in capsys.readouterr().err


def test_a_token_env_that_is_not_set_is_an_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_TOKEN_VAR", raising=False)
    code = main(
        ["serve", "collector.http.conformance:receiver", "--token-env", "NO_SUCH_TOKEN_VAR"]
    )
    assert code == 2
    assert "NO_SUCH_TOKEN_VAR" in capsys.readouterr().err


def test_an_unknown_scenario_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conformance", "http://127.0.0.1:9", "--scenario", "replya"])
    assert code == 2
    assert "did you mean 'replay'" in capsys.readouterr().err
