"""The ASGI server and the httpx channel, in one process (httpx's ASGI transport).

The same behaviour over real sockets and real processes is in test_http_process.py; here are
the edges that are easier to reach in process: a 409 while a key is in flight and the
client's wait for it, a 5xx retried with the same key, the trace context of a header-only
peer, readiness with a broken store, chunked bodies past the limit.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector import MemoryStore, Receiver, Sender, accept
from collector.http import HttpChannel, HttpStatusError, handshake_app, schemas, wire
from collector.messages import CommitRequest, Proposal, fingerprint
from collector.testing import SpanCapture

TOKEN = "s3cret-token"
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _proposal(handoff_id: str = "h1", key: str | None = "k1", **changes: Any) -> dict[str, Any]:
    import time

    fields: dict[str, Any] = dict(
        handoff_id=handoff_id,
        task_id="t1",
        attempt=1,
        sender="s",
        receiver="w",
        output_schema="draft@1",
        deadline_unix_ms=int(time.time() * 1000) + 60_000,
        idempotency_key=key,
        payload={"topic": "otters"},
    )
    fields.update(changes)
    return Proposal(**fields).to_dict() | {"output_schema": str(fields["output_schema"])}


def _commit(p: dict[str, Any], **changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        k: p[k]
        for k in ("handoff_id", "task_id", "attempt", "sender", "receiver", "idempotency_key")
    }
    fields["payload"] = changes.pop("payload", p["payload"])
    fields["payload_fingerprint"] = fingerprint(fields["payload"])
    fields.update(changes)
    return CommitRequest(**fields).to_dict()


def _receiver(**options: Any) -> Receiver:
    options.setdefault("validator", lambda w: accept(eta_ms=100))
    options.setdefault("executor", lambda w: {"ok": w.task_id})
    return Receiver("w", **options)


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://w")


def _auth() -> dict[str, str]:
    return {"authorization": f"Bearer {TOKEN}"}


async def test_token_is_required_except_for_health() -> None:
    async with _client(handshake_app(_receiver(), token=TOKEN)) as c:
        none = await c.post(wire.ROUTE_PROPOSE, json=_proposal())
        wrong = await c.post(
            wire.ROUTE_PROPOSE, json=_proposal(), headers={"authorization": "Bearer nope"}
        )
        basic = await c.post(
            wire.ROUTE_PROPOSE, json=_proposal(), headers={"authorization": f"Basic {TOKEN}"}
        )
        right = await c.post(wire.ROUTE_PROPOSE, json=_proposal(), headers=_auth())
        health = await c.get(wire.ROUTE_HEALTH)
        ready_without = await c.get(wire.ROUTE_READY)
    for response in (none, wrong, basic):
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["error"] == wire.ERROR_UNAUTHORIZED
    assert right.status_code == 200 and right.json()["decision"] == "accept"
    assert health.status_code == 200 and health.json()["receiver"] == "w"
    assert ready_without.status_code == 401


async def test_bodies_past_the_limit_get_413_declared_or_streamed() -> None:
    app = handshake_app(_receiver(), max_body_bytes=2048)
    big = _proposal(payload={"text": "x" * 4096})

    async def chunks() -> AsyncIterator[bytes]:
        import json

        text = json.dumps(big).encode()
        for i in range(0, len(text), 512):
            yield text[i : i + 512]

    async with _client(app) as c:
        declared = await c.post(wire.ROUTE_PROPOSE, json=big)
        streamed = await c.post(
            wire.ROUTE_PROPOSE, content=chunks(), headers={"content-type": "application/json"}
        )
        small = await c.post(wire.ROUTE_PROPOSE, json=_proposal())
    assert declared.status_code == 413 and streamed.status_code == 413
    assert "2048" in streamed.json()["detail"]
    assert small.status_code == 200


@pytest.mark.parametrize(
    ("route", "body", "content_type", "status", "error", "field"),
    [
        (wire.ROUTE_PROPOSE, b"{not json", "application/json", 400, "invalid_json", None),
        (wire.ROUTE_PROPOSE, b"{}", "text/plain", 415, "unsupported_media_type", None),
        (wire.ROUTE_PROPOSE, b"[]", "application/json", 400, "invalid_message", ""),
        (wire.ROUTE_COMMIT, None, "application/json", 400, "invalid_message", "/kind"),
    ],
)
async def test_bad_requests_are_named(
    route: str, body: bytes | None, content_type: str, status: int, error: str, field: str | None
) -> None:
    import json

    content = body if body is not None else json.dumps(_proposal()).encode()
    async with _client(handshake_app(_receiver())) as c:
        response = await c.post(route, content=content, headers={"content-type": content_type})
    assert response.status_code == status
    assert response.json()["error"] == error
    assert response.json().get("field") == field
    schemas.validate("error", response.json())  # the published shape of an error


async def test_a_malformed_field_is_named_and_the_receiver_never_sees_it() -> None:
    calls: list[str] = []

    def validate(work: Any) -> Any:
        calls.append(work.task_id)
        return accept(eta_ms=1)

    receiver = _receiver(validator=validate)
    bad = _proposal()
    bad["deadline_unix_ms"] = "tomorrow"
    async with _client(handshake_app(receiver)) as c:
        response = await c.post(wire.ROUTE_PROPOSE, json=bad)
    assert response.status_code == 400
    assert response.json()["field"] == "/deadline_unix_ms"
    assert "deadline_unix_ms" in response.json()["detail"]
    assert calls == []


async def test_in_flight_commit_is_409_and_the_channel_waits_for_the_stored_result() -> None:
    release = threading.Event()
    runs: list[int] = []

    def slow(work: Any) -> dict[str, Any]:
        runs.append(1)
        release.wait(10)
        return {"done": len(runs)}

    receiver = _receiver(executor=slow, **_answer_in_progress_at_once())
    app = handshake_app(receiver)
    p = _proposal()
    async with _client(app) as c:
        assert (await c.post(wire.ROUTE_PROPOSE, json=p)).json()["decision"] == "accept"
        first = asyncio.ensure_future(c.post(wire.ROUTE_COMMIT, json=_commit(p)))
        while not runs:
            await asyncio.sleep(0.01)
        second = await c.post(wire.ROUTE_COMMIT, json=_commit(p))
        assert second.status_code == 409
        assert second.headers[wire.HEADER_RETRY_AFTER] == str(wire.IN_FLIGHT_RETRY_AFTER_S)
        assert second.json()["error"] == "CommitInProgress"
        # By default the channel hands the 409's commit_result back for the sender to judge.
        channel = HttpChannel("http://w", peer="w", async_transport=httpx.ASGITransport(app=app))
        at_once = await channel.arequest(_commit(p))
        assert at_once["outcome"] == "refused" and at_once["error"] == "CommitInProgress"
        # With in_flight_wait_s it waits out the 409s itself, for the stored result.
        patient = HttpChannel(
            "http://w",
            peer="w",
            in_flight_wait_s=10,
            async_transport=httpx.ASGITransport(app=app),
        )
        waiting = asyncio.ensure_future(patient.arequest(_commit(p)))
        await asyncio.sleep(0.2)
        release.set()
        executed = (await first).json()
        replayed = await waiting
        await channel.aclose()
        await patient.aclose()
    assert executed["outcome"] == "executed"
    assert replayed["outcome"] == "replayed" and replayed["result"] == executed["result"]
    assert runs == [1]


def _answer_in_progress_at_once() -> dict[str, Any]:
    # A receiver that still waits for a running duplicate is told not to wait.
    import inspect

    return {"wait_s": 0.05} if "wait_s" in inspect.signature(Receiver).parameters else {}


class FailFirst:
    """ASGI middleware answering the first ``n`` requests to ``path`` with a 503."""

    def __init__(self, app: Any, path: str, n: int) -> None:
        self.app, self.path, self.left = app, path, n
        self.seen = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == self.path:
            self.seen += 1
            if self.left > 0:
                self.left -= 1
                response = httpx.Response(503)
                await send({"type": "http.response.start", "status": 503, "headers": []})
                await send({"type": "http.response.body", "body": response.content})
                return
        await self.app(scope, receive, send)


async def test_a_5xx_commit_is_sent_again_with_the_same_key() -> None:
    runs: list[str] = []

    def execute(work: Any) -> str:
        runs.append(work.commit.idempotency_key)
        return "ok"

    receiver = _receiver(executor=execute)
    app = FailFirst(handshake_app(receiver), wire.ROUTE_COMMIT, 2)
    channel = HttpChannel("http://w", peer="w", async_transport=httpx.ASGITransport(app=app))
    outcome = await Sender("s").ahandoff(
        channel, task_id="t", payload={"n": 1}, output_schema="d@1", idempotency_key="k-5xx"
    )
    await channel.aclose()
    assert outcome.committed and outcome.result is not None
    assert outcome.result.outcome == "executed"
    assert app.seen == 3 and runs == ["k-5xx"]


async def test_a_4xx_raises_with_the_servers_words() -> None:
    app = handshake_app(_receiver(), token=TOKEN)
    channel = HttpChannel(
        "http://w", peer="w", token="wrong", async_transport=httpx.ASGITransport(app=app)
    )
    with pytest.raises(HttpStatusError) as caught:
        await channel.arequest(_commit(_proposal()))
    await channel.aclose()
    assert caught.value.status == 401 and caught.value.code == wire.ERROR_UNAUTHORIZED


async def test_readiness_follows_the_store() -> None:
    class Broken(MemoryStore):
        def get(self, receiver: str, key: str) -> Any:
            raise OSError("disk gone")

    async with _client(handshake_app(_receiver(store=Broken()))) as c:
        ready = await c.get(wire.ROUTE_READY)
        health = await c.get(wire.ROUTE_HEALTH)
    assert ready.status_code == 503 and "disk gone" in ready.json()["detail"]
    assert health.status_code == 200


async def test_trace_context_from_headers_joins_a_peer_that_sends_no_trace_field() -> None:
    cap = SpanCapture()
    receiver = cap.receiver("w", validator=lambda w: accept(eta_ms=1), executor=lambda w: 1)
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    p = _proposal()
    c_msg = _commit(p)
    assert p["trace"] == {} and c_msg["trace"] == {}
    headers = {"traceparent": f"00-{trace_id}-{parent}-01"}
    async with _client(handshake_app(receiver)) as c:
        await c.post(wire.ROUTE_PROPOSE, json=p, headers=headers)
        result = await c.post(wire.ROUTE_COMMIT, json=c_msg, headers=headers)
    assert result.json()["outcome"] == "executed"
    (span,) = cap.spans("handoff.commit")
    assert f"{span.context.trace_id:032x}" == trace_id
    assert span.parent is not None and f"{span.parent.span_id:016x}" == parent
    cap.shutdown()


async def test_async_receivers_run_on_the_loop_and_sync_ones_off_it() -> None:
    loop_thread = threading.get_ident()
    where: list[bool] = []

    async def async_exec(work: Any) -> str:
        where.append(threading.get_ident() == loop_thread)
        return "a"

    def sync_exec(work: Any) -> str:
        where.append(threading.get_ident() == loop_thread)
        return "s"

    for executor in (async_exec, sync_exec):
        p = _proposal(handoff_id=executor.__name__, key=executor.__name__)
        async with _client(handshake_app(_receiver(executor=executor))) as c:
            await c.post(wire.ROUTE_PROPOSE, json=p)
            assert (await c.post(wire.ROUTE_COMMIT, json=_commit(p))).json()["outcome"] == (
                "executed"
            )
    assert where == [True, False]


async def test_the_app_mounts_under_a_prefix_and_the_channel_sends_trace_headers() -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    seen: list[dict[str, str]] = []
    inner = handshake_app(_receiver(), token=TOKEN)

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await inner(scope, receive, send)

    app = Starlette(routes=[Mount("/agents/writer", recording)])
    from collector import SystemClock

    cap = SpanCapture(clock=SystemClock())  # the real clock: the receiver's is real too
    channel = HttpChannel(
        "http://w/agents/writer/",
        peer="w",
        token=TOKEN,
        async_transport=httpx.ASGITransport(app=app),
    )
    outcome = await cap.sender("s").ahandoff(
        channel, task_id="t", payload={}, output_schema="d@1", idempotency_key="k-mount"
    )
    await channel.aclose()
    assert outcome.committed
    (handoff,) = cap.spans("handoff")
    trace_id = f"{handoff.context.trace_id:032x}"
    assert len(seen) == 2  # propose, commit
    assert all(h["traceparent"].split("-")[1] == trace_id for h in seen)
    assert all(h["authorization"] == f"Bearer {TOKEN}" for h in seen)
    cap.shutdown()


def test_the_public_surface_is_pinned() -> None:
    import collector.http

    assert collector.http.__all__ == [
        "HttpChannel",
        "HttpStatusError",
        "InvalidMessage",
        "handshake_app",
        "schemas",
        "wire",
    ]


async def test_a_receiver_failure_is_a_500_without_a_traceback_and_a_commit_retries_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Failing(MemoryStore):
        claims = 0

        def claim(self, *args: Any, **kwargs: Any) -> Any:
            Failing.claims += 1
            raise OSError("the disk is full")

    app = handshake_app(_receiver(store=Failing()))
    p = _proposal()
    async with _client(app) as c:
        assert (await c.post(wire.ROUTE_PROPOSE, json=p)).json()["decision"] == "accept"
        raw = await c.post(wire.ROUTE_COMMIT, json=_commit(p))
    assert raw.status_code == 500
    assert raw.json()["error"] == wire.ERROR_INTERNAL and "Traceback" not in raw.text
    assert "the disk is full" not in raw.text  # internals stay in the server's log
    assert "the disk is full" in caplog.text
    channel = HttpChannel(
        "http://w", peer="w", retries=2, backoff_s=0, async_transport=httpx.ASGITransport(app=app)
    )
    Failing.claims = 0
    with pytest.raises(HttpStatusError) as caught:
        await channel.arequest(_commit(p))
    await channel.aclose()
    assert caught.value.status == 500 and Failing.claims == 3  # sent, then again twice


_any_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_fields_of_a_proposal = st.fixed_dictionaries(
    {},
    optional={
        name: _any_json
        for name in ("kind", "handoff_id", "task_id", "attempt", "sender", "receiver",
                     "output_schema", "deadline_unix_ms", "idempotency_key", "payload", "trace",
                     "mode", "validation_timeout_ms")
    },
)  # fmt: skip


_HOSTILE_APP = handshake_app(_receiver())


@settings(max_examples=150, deadline=None)
@given(body=_any_json | _fields_of_a_proposal, route=st.sampled_from(sorted(wire.ROUTES.values())))
def test_hostile_bodies_get_a_named_400_never_a_500(body: Any, route: str) -> None:
    import json

    async def post() -> httpx.Response:
        async with _client(_HOSTILE_APP) as c:
            return await c.post(
                route, content=json.dumps(body), headers={"content-type": "application/json"}
            )

    response = asyncio.run(post())
    assert response.status_code in (200, 400), response.text
    if response.status_code == 400:
        assert response.json()["error"] == wire.ERROR_INVALID_MESSAGE
        assert response.json()["detail"]


async def test_a_store_that_cannot_be_written_is_a_503_naming_it() -> None:
    # The store refuses the claim as a read-only or full one does
    # (tests/collector/test_store_faults.py makes those for real): nothing ran, so the sender
    # may send the same key again later.
    from collector.errors import StoreError

    class Full(MemoryStore):
        def claim(self, *args: Any, **kwargs: Any) -> Any:
            raise StoreError("idempotency store /tmp/k.db cannot be written", path="/tmp/k.db")

    runs: list[int] = []
    receiver = _receiver(store=Full(), executor=lambda w: runs.append(1) or {})
    async with _client(handshake_app(receiver)) as c:
        proposal = _proposal(receiver="w")
        assert (await c.post(wire.ROUTE_PROPOSE, json=proposal)).status_code == 200
        response = await c.post(wire.ROUTE_COMMIT, json=_commit(proposal))
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["error"] == wire.ERROR_STORE_UNAVAILABLE and "/tmp/k.db" in body["detail"]
    assert response.headers["retry-after"]
    schemas.validate("error", body)
    assert runs == []
