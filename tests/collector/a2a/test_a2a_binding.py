"""The handshake over A2A: a Receiver served by a2a-sdk's routes, a Sender on A2AChannel.

Real a2a-sdk peers over real HTTP on 127.0.0.1 (uvicorn in a thread): our receiver, a plain
a2a-sdk hello-world agent that knows nothing of the extension, and a2a-sdk's own client.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest
from a2a.client import ClientCallContext, ClientConfig, create_client
from a2a.helpers.proto_helpers import new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from starlette.applications import Starlette

from collector import MemoryStore, Receiver, Sender, SystemClock, accept, reject, schema
from collector.a2a import (
    EXTENSION_URI,
    A2AChannel,
    A2AHandshakeError,
    ExtensionMissing,
    a2a_app,
    extension,
    schemas,
)
from collector.a2a.client import A2ATransport, handshake_message, reply_of
from collector.errors import MessageError, StoreError
from collector.http import HttpChannel, handshake_app
from collector.testing import SpanCapture
from tests.support.a2a import served

TOKEN = "s3cret-a2a"


def _receiver(capture: SpanCapture | None = None, **options: Any) -> Receiver:
    options.setdefault("validator", lambda w: accept(eta_ms=100))
    options.setdefault("executor", lambda w: {"ok": w.task_id, "n": 3, "ratio": 0.5})
    options.setdefault("produces", ["draft@1"])
    if capture is not None:
        return capture.receiver("writer", **options)
    return Receiver("writer", **options)


def _handoff(channel: Any, key: str, payload: Any = None, sender: Sender | None = None) -> Any:
    return (sender or Sender("researcher")).handoff(
        channel,
        task_id=f"task-{key}",
        payload=payload if payload is not None else {"topic": "otters"},
        output_schema="draft@1",
        idempotency_key=key,
    )


# ---------------------------------------------------------------------- the handshake
def test_accept_commit_replay_and_conflict_over_a2a():
    runs: list[Any] = []

    def execute(work: Any) -> dict[str, Any]:
        runs.append(work.payload)
        return {"draft": f"about {work.payload['topic']}", "words": 2, "score": 0.5}

    receiver = _receiver(executor=execute)
    with served(lambda url: a2a_app(receiver, url=url)) as url, A2AChannel(url) as channel:
        assert channel.peer == "writer"
        first = _handoff(channel, "k1", {"topic": "otters", "count": 7})
        assert first.committed and first.result.outcome == schema.OUTCOME_EXECUTED
        # Integers come back as integers, floats as floats, through A2A's Struct of doubles.
        assert first.result.result == {"draft": "about otters", "words": 2, "score": 0.5}
        assert isinstance(first.result.result["words"], int)
        again = _handoff(channel, "k1", {"topic": "otters", "count": 7})
        assert again.committed and again.result.outcome == schema.OUTCOME_REPLAYED
        assert again.result.result == first.result.result
        other = _handoff(channel, "k1", {"topic": "beavers", "count": 7})
        assert not other.committed
        assert other.answer.reason == schema.REJECT_DUPLICATE_KEY_CONFLICT
    assert runs == [{"topic": "otters", "count": 7}]  # the key ran once


def test_async_sender_over_a2a():
    receiver = _receiver()

    async def main(url: str) -> list[Any]:
        async with A2AChannel(url) as channel:
            sender = Sender("researcher")
            return list(
                await asyncio.gather(
                    *(
                        sender.ahandoff(
                            channel,
                            task_id=f"t{i}",
                            payload={"i": i},
                            output_schema="draft@1",
                            idempotency_key=f"ak{i}",
                        )
                        for i in range(6)
                    )
                )
            )

    with served(lambda url: a2a_app(receiver, url=url)) as url:
        outcomes = asyncio.run(main(url))
    assert [o.result.outcome for o in outcomes] == [schema.OUTCOME_EXECUTED] * 6
    assert sorted(o.result.result["ok"] for o in outcomes) == sorted(f"t{i}" for i in range(6))


def test_tasks_end_in_the_states_the_extension_maps_replies_to():
    receiver = _receiver(
        validator=lambda w: (
            reject("resource_unavailable") if w.payload.get("no") else accept(eta_ms=5)
        )
    )
    with served(lambda url: a2a_app(receiver, url=url)) as url:
        transport = A2ATransport(url)
        try:
            proposal = _proposal("h-ok", "key-ok", {"topic": "x"})
            task = _send(transport, proposal)
            assert TaskState.Name(task.status.state) == "TASK_STATE_COMPLETED"
            reply = reply_of(task, url)
            assert reply["decision"] == "accept" and reply["eta_ms"] == 5
            assert task.context_id == "h-ok"  # a handoff's tasks share one A2A context
            schemas.validate("a2a-metadata", reply)
            rejected = _send(transport, _proposal("h-no", "key-no", {"no": True}))
            assert TaskState.Name(rejected.status.state) == "TASK_STATE_REJECTED"
            assert reply_of(rejected, url)["reason"] == "resource_unavailable"
            done = _send(transport, _commit(proposal))
            assert TaskState.Name(done.status.state) == "TASK_STATE_COMPLETED"
            assert [a.name for a in done.artifacts] == ["result"]
            refused = _send(transport, _commit(_proposal("h-never", "key-never", {})))
            assert TaskState.Name(refused.status.state) == "TASK_STATE_REJECTED"
            assert reply_of(refused, url)["error"] == schema.COMMIT_ERROR_WITHOUT_ACCEPT
        finally:
            transport.close()


def _proposal(handoff_id: str, key: str, payload: Any) -> dict[str, Any]:
    from collector.messages import OutputSchema, Proposal, fingerprint

    return Proposal(
        handoff_id=handoff_id,
        task_id=f"task-{handoff_id}",
        attempt=1,
        sender="s",
        receiver="writer",
        output_schema=OutputSchema.parse("draft@1"),
        deadline_unix_ms=int(time.time() * 1000) + 60_000,
        idempotency_key=key,
        payload=payload,
        payload_fingerprint=fingerprint(payload),
    ).to_dict()


def _commit(p: dict[str, Any]) -> dict[str, Any]:
    from collector.messages import CommitRequest, fingerprint

    return CommitRequest(
        handoff_id=p["handoff_id"],
        task_id=p["task_id"],
        attempt=1,
        sender="s",
        receiver="writer",
        idempotency_key=p["idempotency_key"],
        payload=p["payload"],
        payload_fingerprint=fingerprint(p["payload"]),
    ).to_dict()


def _send(transport: A2ATransport, message: dict[str, Any], **options: Any) -> Any:
    return transport.run(transport.send(handshake_message(message), timeout_s=10, **options))


def test_a_payload_integer_beyond_2_53_is_refused_before_sending():
    with pytest.raises(MessageError, match="/payload/big"):
        handshake_message(_proposal("h", "k", {"big": 2**60}))


class FlakyStore(MemoryStore):
    """A store that cannot claim a key the first ``fails`` times (a full disk, say)."""

    def __init__(self, fails: int) -> None:
        super().__init__()
        self.fails = fails

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        if self.fails:
            self.fails -= 1
            raise StoreError("the disk is full")
        return super().claim(*args, **kwargs)


def test_a_commit_the_store_could_not_take_is_sent_again_with_its_key():
    runs: list[Any] = []
    receiver = _receiver(store=FlakyStore(fails=1), executor=lambda w: runs.append(1) or {"n": 1})
    with served(lambda url: a2a_app(receiver, url=url)) as url, A2AChannel(url) as channel:
        outcome = _handoff(channel, "flaky")
    assert outcome.committed and outcome.result.outcome == schema.OUTCOME_EXECUTED
    assert runs == [1]


def test_a_store_failure_is_a_failed_task_naming_it():
    receiver = _receiver(store=FlakyStore(fails=99))
    with served(lambda url: a2a_app(receiver, url=url)) as url:
        transport = A2ATransport(url)
        try:
            p = _proposal("h-st", "k-st", {})
            assert reply_of(_send(transport, p), url)["decision"] == "accept"
            task = _send(transport, _commit(p))
        finally:
            transport.close()
    assert TaskState.Name(task.status.state) == "TASK_STATE_FAILED"
    with pytest.raises(A2AHandshakeError) as raised:
        reply_of(task, url)
    assert raised.value.code == extension.ERROR_STORE_UNAVAILABLE
    assert "disk is full" in str(raised.value)


# ---------------------------------------------------------------------- spans
def _names_and_keys(capture: SpanCapture) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for span in capture.spans():
        keys = {k for k in (span.attributes or {}) if k != schema.HANDOFF_ID}
        out.setdefault(span.name, set()).update(keys)
    return out


def test_spans_are_the_same_as_over_http():
    """Same span names, same attribute keys, one trace per handoff across both sides."""
    seen: dict[str, dict[str, set[str]]] = {}
    for binding in ("http", "a2a"):
        capture = SpanCapture(clock=SystemClock())
        receiver = _receiver(capture)
        sender = capture.sender("researcher")
        if binding == "http":
            with served(lambda url, r=receiver: handshake_app(r)) as url:
                with HttpChannel(url, peer="writer") as channel:
                    _handoff(channel, "k1", sender=sender)
                    _handoff(channel, "k1", sender=sender)
                    _handoff(channel, "k1", {"other": 1}, sender=sender)
        else:
            with served(lambda url, r=receiver: a2a_app(r, url=url)) as url, A2AChannel(url) as ch:
                _handoff(ch, "k1", sender=sender)
                _handoff(ch, "k1", sender=sender)
                _handoff(ch, "k1", {"other": 1}, sender=sender)
        spans = capture.spans()
        by_trace: dict[int, set[str]] = {}
        for span in spans:
            by_trace.setdefault(span.context.trace_id, set()).add(span.name)
        # The receiver's spans joined the sender's traces: three handoffs, three traces.
        assert len(by_trace) == 3, binding
        assert all(schema.SPAN_ANSWER in names for names in by_trace.values()), binding
        seen[binding] = _names_and_keys(capture)
        capture.shutdown()
    assert seen["a2a"] == seen["http"]


def test_header_only_trace_context_joins_the_trace():
    capture = SpanCapture(clock=SystemClock())
    receiver = _receiver(capture)
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    traceparent = f"00-{trace_id}-b7ad6b7169203331-01"
    with served(lambda url: a2a_app(receiver, url=url)) as url:
        transport = A2ATransport(url)
        try:
            _send(
                transport,
                _proposal("h-hdr", "key-hdr", {}),
                headers={"traceparent": traceparent},
            )
        finally:
            transport.close()
    (answer,) = capture.spans(schema.SPAN_ANSWER)
    assert format(answer.context.trace_id, "032x") == trace_id
    capture.shutdown()


# ---------------------------------------------------------------------- isolation
def test_a_slow_validator_does_not_hold_up_the_others():
    """The slow validation waits until a fast one has been answered: were the fast one queued
    behind it (a validator run on the event loop), it could never be, and would time out."""
    fast_answered = threading.Event()

    def validator(work: Any) -> Any:
        if work.payload.get("slow"):
            fast_answered.wait(5)
        return accept(eta_ms=10)

    receiver = _receiver(validator=validator)
    with served(lambda url: a2a_app(receiver, url=url)) as url, A2AChannel(url) as channel:
        results: dict[str, Any] = {}
        slow = threading.Thread(
            target=lambda: results.setdefault("slow", _handoff(channel, "slow", {"slow": True}))
        )
        slow.start()
        time.sleep(0.2)  # the slow proposal is in the receiver first
        fast = _handoff(channel, "fast", {"slow": False})
        fast_answered.set()
        slow.join(10)
    assert fast.committed and fast.attempts == 1
    assert results["slow"].committed


# ---------------------------------------------------------------------- plain A2A peers
class HelloExecutor(AgentExecutor):
    """a2a-sdk's hello-world agent: answers every message with a text message."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await event_queue.enqueue_event(new_text_message("Hello World", role=Role.ROLE_AGENT))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def _hello_app(url: str, extensions: list[str] = ()) -> Starlette:  # type: ignore[assignment]
    card = AgentCard(
        name="hello",
        description="hello world",
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC")],
        capabilities=AgentCapabilities(
            streaming=False, extensions=[AgentExtension(uri=u) for u in extensions]
        ),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
    )
    handler = DefaultRequestHandler(
        agent_executor=HelloExecutor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    return Starlette(
        routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")]
    )


def test_a2a_channel_to_a_plain_agent_fails_clearly_and_at_once():
    with served(_hello_app) as url:
        # Raised by the constructor, from the card alone: no proposal is ever sent to an
        # agent that would take it for text and leave the handshake waiting.
        with pytest.raises(ExtensionMissing) as raised:
            A2AChannel(url)
    message = str(raised.value)
    assert "'hello'" in message and EXTENSION_URI in message and "no extensions" in message


def test_a2a_channel_refuses_another_version_of_the_extension():
    v2 = extension.EXTENSION_URI_PREFIX + "v2"
    with served(lambda url: _hello_app(url, [v2, "https://example.com/other"])) as url:
        with pytest.raises(ExtensionMissing, match="incompatible version") as raised:
            A2AChannel(url)
    assert v2 in str(raised.value)


def test_a2a_channel_names_an_unreachable_agent():
    from collector.errors import HandoffscopeError
    from tests.support.a2a import free_port

    with pytest.raises(HandoffscopeError, match="cannot read the Agent Card"):
        A2AChannel(f"http://127.0.0.1:{free_port()}")


async def _plain_client_send(url: str, text: str, **headers: str) -> Any:
    async with httpx.AsyncClient() as http:
        client = await create_client(
            url, client_config=ClientConfig(streaming=False, httpx_client=http)
        )
        message = Message(message_id="m1", role=Role.ROLE_USER, parts=[Part(text=text)])
        context = ClientCallContext(service_parameters=headers) if headers else None
        async for event in client.send_message(
            SendMessageRequest(message=message), context=context
        ):
            return event


def test_a_plain_a2a_client_gets_an_ordinary_task():
    runs: list[Any] = []
    receiver = _receiver(executor=lambda w: runs.append(w) or {})
    with served(lambda url: a2a_app(receiver, url=url)) as url:
        event = asyncio.run(_plain_client_send(url, "write about otters"))
    assert event.HasField("task")
    task = event.task
    assert TaskState.Name(task.status.state) == "TASK_STATE_REJECTED"
    text = " ".join(p.text for p in task.status.message.parts)
    assert EXTENSION_URI in text and "A2A-Extensions" in text
    assert runs == []


def test_a_plain_handler_answers_plain_clients():
    receiver = _receiver()
    app = lambda url: a2a_app(receiver, url=url, plain=lambda text: f"echo: {text}")  # noqa: E731
    with served(app) as url:
        event = asyncio.run(_plain_client_send(url, "hi"))
    assert TaskState.Name(event.task.status.state) == "TASK_STATE_COMPLETED"
    assert event.task.status.message.parts[0].text == "echo: hi"


def test_handshake_metadata_is_not_acted_on_unless_activated():
    runs: list[Any] = []
    receiver = _receiver(executor=lambda w: runs.append(w) or {})
    with served(lambda url: a2a_app(receiver, url=url)) as url:
        transport = A2ATransport(url)
        try:
            p = _proposal("h-na", "k-na", {})
            task = _send(transport, p, activate=False)
            assert TaskState.Name(task.status.state) == "TASK_STATE_REJECTED"
            with pytest.raises(A2AHandshakeError) as raised:
                reply_of(task, url)
            assert raised.value.code == extension.ERROR_EXTENSION_NOT_ACTIVATED
            done = reply_of(_send(transport, _commit(p)), url)
            assert done["error"] == schema.COMMIT_ERROR_WITHOUT_ACCEPT
        finally:
            transport.close()
    assert runs == []


def test_the_response_echoes_the_activated_extension():
    receiver = _receiver()
    with served(lambda url: a2a_app(receiver, url=url)) as url:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
            },
        }
        on = httpx.post(url + "/", json=body, headers={"A2A-Extensions": EXTENSION_URI})
        off = httpx.post(url + "/", json=body)
    assert on.headers.get("A2A-Extensions") == EXTENSION_URI
    assert "A2A-Extensions" not in off.headers


def test_an_a2a_0_3_client_activates_the_extension_with_its_own_header():
    runs: list[Any] = []
    receiver = _receiver(executor=lambda w: runs.append(w) or {"ok": 1})
    with served(lambda url: a2a_app(receiver, url=url)) as url:
        transport = A2ATransport(url)
        try:
            old = {extension.HEADER_EXTENSIONS_V0_3: EXTENSION_URI}
            p = _proposal("h-03", "k-03", {})
            answer = _send(transport, p, activate=False, headers=old)
            assert reply_of(answer, url)["decision"] == "accept"
            done = _send(transport, _commit(p), activate=False, headers=old)
            assert reply_of(done, url)["outcome"] == schema.OUTCOME_EXECUTED
        finally:
            transport.close()
    assert len(runs) == 1


# ---------------------------------------------------------------------- the token
def test_token_guards_every_route_but_the_card():
    receiver = _receiver()
    with served(lambda url: a2a_app(receiver, url=url, token=TOKEN)) as url:
        card = httpx.get(url + "/.well-known/agent-card.json")
        assert card.status_code == 200
        assert "bearer" in card.json()["securitySchemes"]
        refused = httpx.post(url + "/", json={"jsonrpc": "2.0", "id": 1, "method": "x"})
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        wrong = httpx.post(url + "/", json={}, headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
        with A2AChannel(url, token=TOKEN) as channel:
            assert _handoff(channel, "tk").committed


def test_a_body_over_the_limit_is_refused():
    receiver = _receiver()
    with served(lambda url: a2a_app(receiver, url=url, max_body_bytes=2048)) as url:
        response = httpx.post(url + "/", content=b"x" * 4096)
    assert response.status_code == 413


# ---------------------------------------------------------------------- leases
def test_a_commit_while_its_key_runs_elsewhere_is_refused_in_progress_then_replayed():
    """The key's lease is the receiver's, as behind HTTP: a second commit of a key whose first
    execution is still running is refused CommitInProgress (HTTP's 409), never run beside it,
    and once the first has finished the same commit is replayed."""
    started, release = threading.Event(), threading.Event()
    runs: list[str] = []

    def execute(work: Any) -> dict[str, Any]:
        runs.append(work.commit.handoff_id)
        started.set()
        release.wait(10)
        return {"draft": "done"}

    receiver = _receiver(executor=execute)
    with served(lambda url: a2a_app(receiver, url=url)) as url:
        transport = A2ATransport(url)
        try:
            one, two = (_proposal(h, "shared", {"topic": "otters"}) for h in ("h-1", "h-2"))
            for p in (one, two):
                assert reply_of(_send(transport, p), url)["decision"] == "accept"
            first = transport.submit(transport.send(handshake_message(_commit(one)), timeout_s=20))
            assert started.wait(10)
            busy = _send(transport, _commit(two))
            assert TaskState.Name(busy.status.state) == "TASK_STATE_REJECTED"
            assert reply_of(busy, url)["error"] == schema.COMMIT_ERROR_IN_PROGRESS
            release.set()
            done = reply_of(first.result(20), url)
            assert done["outcome"] == schema.OUTCOME_EXECUTED
            again = reply_of(_send(transport, _commit(two)), url)
            assert again["outcome"] == schema.OUTCOME_REPLAYED
            assert again["result"] == done["result"]
        finally:
            release.set()
            transport.close()
    assert runs == ["h-1"]
