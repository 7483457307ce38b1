"""``handoffscope serve`` in a subprocess on a free port, for the tests of two processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from collector.http import wire
from tests.support.paths import REPO
from tests.support.ports import free_port

PEER = "tests.support.http_peer:build"
"""The receiver of ``tests.support.http_peer``, as ``handoffscope serve`` names it."""


class Served:
    """``handoffscope serve TARGET`` in a subprocess, with its log in a file."""

    def __init__(self, tmp: Path, target: str = PEER, *args: str, **env: str):
        self.tmp = tmp
        self.target = target
        self.args = args
        self.env = {**os.environ, **env}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tmp / f"serve-{self.port}.log"

    def start(self) -> Served:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "auditor.cli", "serve", self.target,
                 "--port", str(self.port), "--log-level", "warning", *self.args],
                cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        give_up = time.monotonic() + 30
        while time.monotonic() < give_up:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited {self.proc.returncode}: {self.log.read_text()}")
            try:
                if httpx.get(self.url + wire.ROUTE_HEALTH, timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.05)
        raise AssertionError(f"serve did not come up: {self.log.read_text()}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def effects(path: Path) -> list[str]:
    """The lines the peer's executor wrote to ``path`` (``start KEY``, ``done KEY``)."""
    return path.read_text().splitlines() if path.exists() else []
