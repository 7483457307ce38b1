"""The conformance contract, and a receiver that keeps it.

``handoffscope conformance URL`` needs the receiver under test to behave in known ways, so
the kit's proposals ask for them in their payload. A receiver passes the kit when it:

* produces the output schema ``conformance@1`` and no schema named ``not-produced``;
* answers a proposal whose ``payload.conformance.reject`` is a reason code by rejecting it
  with that reason;
* waits ``payload.conformance.delay_ms`` milliseconds before answering, when given;
* otherwise accepts with the ETA ``payload.conformance.eta_ms`` (1000 when absent);
* runs a commit by returning any JSON result that differs between two executions (the
  shipped receiver returns a fresh ``run_id``), so a replay can be told from a re-run.

Serve the shipped one with ``handoffscope serve collector.http.conformance:receiver``;
``HANDOFFSCOPE_CONFORMANCE_STORE`` names a SQLite file to keep its idempotency store in
(memory by default).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Final

from collector import environment_variables as ev
from collector.acceptor import Receiver
from collector.idempotency import IdempotencyStore
from collector.memory_store import MemoryStore
from collector.sqlite_store import SQLiteStore
from collector.work import Verdict, Work, accept, reject

__all__ = [
    "CONTRACT_FIELD",
    "DEFAULT_ETA_MS",
    "OUTPUT_SCHEMA",
    "STORE_ENV",
    "UNKNOWN_SCHEMA",
    "build_receiver",
    "receiver",
]

OUTPUT_SCHEMA: Final = "conformance@1"
"""The output schema a receiver under test must produce."""
UNKNOWN_SCHEMA: Final = "not-produced@1"
"""An output schema it must reject with ``schema_mismatch``."""
CONTRACT_FIELD: Final = "conformance"
"""The payload field carrying the kit's requests: ``reject``, ``delay_ms``, ``eta_ms``."""
DEFAULT_ETA_MS: Final = 1000
STORE_ENV: Final = ev.HANDOFFSCOPE_CONFORMANCE_STORE


def _asks(work: Work) -> dict[str, Any]:
    payload = work.payload
    asks = payload.get(CONTRACT_FIELD) if isinstance(payload, dict) else None
    return asks if isinstance(asks, dict) else {}


def validate(work: Work) -> Verdict:
    """Answer as the proposal's ``conformance`` field asks."""
    asks = _asks(work)
    delay = asks.get("delay_ms")
    if isinstance(delay, int) and delay > 0:
        time.sleep(delay / 1000)
    reason = asks.get("reject")
    if isinstance(reason, str) and reason:
        return reject(reason, detail="the conformance kit asked for this reject")
    eta = asks.get("eta_ms")
    return accept(eta_ms=eta if isinstance(eta, int) and eta >= 0 else DEFAULT_ETA_MS)


def execute(work: Work) -> dict[str, Any]:
    """A result that differs per execution: a replay returns the stored one unchanged."""
    return {"run_id": uuid.uuid4().hex, "task_id": work.task_id}


def build_receiver(name: str = "conformance", *, store: IdempotencyStore | None = None) -> Receiver:
    """A receiver keeping the conformance contract."""
    if store is None:
        path = ev.read(STORE_ENV)
        if path:
            store = SQLiteStore(path)
        else:
            store = MemoryStore()
    return Receiver(
        name, validator=validate, executor=execute, produces=[OUTPUT_SCHEMA], store=store
    )


receiver = build_receiver()
"""The shipped conformance receiver (``collector.http.conformance:receiver``)."""
