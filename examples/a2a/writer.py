"""The receiving agent of the A2A example: a writer served as an A2A agent.

Run it (one command, one process)::

    handoffscope serve --binding a2a writer:writer --port 8700 --trace-file writer.jsonl

from this folder. ``WRITER_STORE`` names its SQLite idempotency store (``writer.db`` by
default: a restart replays stored results, never re-runs), ``WRITER_EFFECTS`` a file that
gets one line per execution, the side effect a duplicate must never repeat.
"""

from __future__ import annotations

import json
import os
from typing import Any

from collector import Receiver, SQLiteStore, Work, accept, reject


def validate(work: Work) -> Any:
    """Accept a topic with an ETA; refuse an empty one."""
    topic = work.payload.get("topic") if isinstance(work.payload, dict) else None
    if not topic:
        return reject("schema_mismatch", detail="the payload needs a topic")
    work.report_usage(model="gpt-4o-mini", input_tokens=120, output_tokens=8)
    return accept(eta_ms=1500)


def write(work: Work) -> dict[str, Any]:
    """Draft a text about the topic, once per idempotency key."""
    topic = work.payload["topic"]
    effects = os.environ.get("WRITER_EFFECTS")
    if effects:
        with open(effects, "a", encoding="utf-8") as f:
            key = work.commit.idempotency_key if work.commit else None
            f.write(json.dumps({"key": key, "topic": topic}) + "\n")
    work.report_usage(model="gpt-4o-mini", input_tokens=900, output_tokens=350)
    return {"draft": f"A short piece about {topic}.", "words": 6}


writer = Receiver(
    "writer",
    validator=validate,
    executor=write,
    produces=["draft@1"],
    store=SQLiteStore(os.environ.get("WRITER_STORE", "writer.db")),
)
"""The receiver ``handoffscope serve --binding a2a writer:writer`` serves."""
