"""The dashboard in headless Chromium: the command on a free port, and waiting for its pages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import REPO
from tests.support.ports import free_port

CHROMIUM = Path("/usr/bin/chromium")
"""Debian's Chromium: Playwright drives it, and never downloads a browser."""
HANDOFFSCOPE = Path(sys.executable).with_name("handoffscope")
IMAGES = REPO / "docs" / "images"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
"""The app once its script has run."""
WAIT_MS = 120_000  # generous: CI machines can be slow, and a timeout here is not a finding


@contextmanager
def dashboard(traces: Path) -> Iterator[str]:
    """``handoffscope dashboard TRACES`` on a free loopback port; yields its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [str(HANDOFFSCOPE), "dashboard", str(traces), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "HOME": os.environ.get("HOME", "/tmp")},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                output = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"the dashboard did not start:\n{output}")
            time.sleep(0.2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def open_page(page: Any, url: str, title: str) -> None:
    """Go to ``url`` and wait until the page titled ``title`` has run."""
    page.goto(url)
    page.wait_for_selector(f"{IDLE} h1:has-text('{title}')", timeout=WAIT_MS)


def charts_drawn(page: Any, charts: int) -> None:
    """Wait until ``charts`` Plotly charts have drawn their SVG, then check there are no more."""
    page.wait_for_function(
        f"() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= {charts}",
        timeout=WAIT_MS,
    )
    assert page.locator(".js-plotly-plot").count() == charts
