"""Helpers of the A2A tests: an A2A agent served by uvicorn on 127.0.0.1 in a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from starlette.applications import Starlette

from tests.support.ports import free_port


@contextmanager
def served(build: Any) -> Iterator[str]:
    """Serve ``build(url)`` (a Starlette app) on a free port; yield its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    app: Starlette = build(url)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    give_up = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > give_up:
            raise AssertionError("the A2A test server did not start")
        time.sleep(0.01)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(10)
