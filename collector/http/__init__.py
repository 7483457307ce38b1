"""The handshake across processes: HTTP transport and the published wire protocol.

Needs the ``[http]`` extra (httpx, starlette, uvicorn, jsonschema); ``import collector``
never loads this package. Serve a receiver, and hand work to it from another process::

    # writer.py, run with: handoffscope serve writer:writer --port 8700
    from collector import Receiver, accept

    writer = Receiver(
        "writer",
        validator=lambda work: accept(eta_ms=1500),
        executor=lambda work: {"draft": f"about {work.payload['topic']}"},
    )

    # in the researcher's process
    from collector import Sender
    from collector.http import HttpChannel

    with HttpChannel("http://127.0.0.1:8700", peer="writer") as channel:
        outcome = Sender("researcher").handoff(
            channel,
            task_id="t-1",
            payload={"topic": "otters"},
            output_schema="draft@1",
            idempotency_key="t-1:draft",
        )

``handshake_app(receiver)`` is the ASGI app (mount it in FastAPI or Starlette),
``HttpChannel`` the client, ``schemas`` the JSON Schemas of every message, and ``wire`` the
routes, headers and status codes that ``docs/protocol.md`` describes.
"""

from __future__ import annotations

from collector.http import schemas, wire
from collector.http.client import HttpChannel, HttpStatusError
from collector.http.schemas import InvalidMessage
from collector.http.server import handshake_app

__all__ = [
    "HttpChannel",
    "HttpStatusError",
    "InvalidMessage",
    "handshake_app",
    "schemas",
    "wire",
]
