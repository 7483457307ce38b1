"""A receiver for the HTTP process tests.

Served with ``handoffscope serve tests.support.http_peer:build`` from the repository's root.

Its behaviour comes from the environment, so each test's server process gets its own files:

* ``PEER_STORE``: SQLite file of its idempotency store (memory when unset);
* ``PEER_EFFECTS``: a file the executor appends ``start KEY`` and ``done KEY`` lines to, the
  side effect the tests count;
* ``PEER_BLOCK``: while this file exists, the executor waits between ``start`` and ``done``;
* ``PEER_LEASE_S``: the claim lease (how soon a restarted server may take over a dead run).

Proposals whose payload has ``"busy": true`` are rejected ``resource_unavailable``; a payload
``"slow_ms": N`` makes validation take N milliseconds.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from collector import MemoryStore, Receiver, accept, reject


def _effect(line: str) -> None:
    path = os.environ.get("PEER_EFFECTS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


def validate(work: Any) -> Any:
    payload = work.payload if isinstance(work.payload, dict) else {}
    if payload.get("slow_ms"):
        time.sleep(payload["slow_ms"] / 1000)
    if payload.get("busy"):
        return reject("resource_unavailable", detail="busy")
    return accept(eta_ms=200)


def execute(work: Any) -> dict[str, Any]:
    key = work.commit.idempotency_key
    _effect(f"start {key}")
    block = os.environ.get("PEER_BLOCK")
    while block and Path(block).exists():
        time.sleep(0.02)
    _effect(f"done {key}")
    return {"wrote": work.payload, "pid": os.getpid()}


def build() -> Receiver:
    store: Any
    path = os.environ.get("PEER_STORE")
    if path:
        from collector.sqlite_store import SQLiteStore

        store = SQLiteStore(path)
    else:
        store = MemoryStore()
    return Receiver(
        "peer",
        validator=validate,
        executor=execute,
        store=store,
        lease_s=float(os.environ.get("PEER_LEASE_S", "600")),
    )
