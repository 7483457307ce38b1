"""The published JSON Schemas match what collector.messages produces and accepts.

The schemas are the protocol's contract for other implementations; these tests keep them and
the Python messages from drifting apart: same fields, same required fields, same defaults,
every message a real handshake sends validates, and what the schema refuses the decoder
refuses too.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from collector import InProcessChannel, MessageError, Receiver, Sender, accept, decode, reject
from collector.http import schemas, wire
from collector.http.schemas import InvalidMessage
from collector.messages import (
    Ack,
    Answer,
    CommitRequest,
    CommitResult,
    Message,
    Proposal,
    VoidNotice,
)
from tests.support.paths import REPO

ROOT = REPO
CLASSES: dict[str, type[Message]] = {
    "propose": Proposal,
    "answer": Answer,
    "ack": Ack,
    "commit": CommitRequest,
    "commit_result": CommitResult,
    "void": VoidNotice,
}


def _fields(cls: type[Message]) -> list[dataclasses.Field[Any]]:
    return list(dataclasses.fields(cls))  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", [*wire.MESSAGE_KINDS, "error"])
def test_every_schema_is_valid_draft_2020_12_and_versioned(kind: str) -> None:
    schema = schemas.load(kind)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert f"/v{wire.PROTOCOL_VERSION}/{kind}.schema.json" in schema["$id"]


@pytest.mark.parametrize("kind", wire.MESSAGE_KINDS)
def test_schema_fields_are_the_message_fields(kind: str) -> None:
    cls = CLASSES[kind]
    schema = schemas.load(kind)
    names = {f.name for f in _fields(cls)}
    assert set(schema["properties"]) == names | {"kind"}
    required = {
        f.name
        for f in _fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    assert set(schema["required"]) == required | {"kind"}
    assert schema["properties"]["kind"] == {"const": cls.kind, "description": "The message kind."}


@pytest.mark.parametrize("kind", wire.MESSAGE_KINDS)
def test_schema_defaults_are_the_message_defaults(kind: str) -> None:
    props = schemas.load(kind)["properties"]
    for f in _fields(CLASSES[kind]):
        if "default" in props[f.name]:
            assert f.default == props[f.name]["default"], f"{kind}.{f.name}"


class Recording:
    """A channel that keeps every message and reply in wire form."""

    def __init__(self, receiver: Receiver) -> None:
        self.inner = InProcessChannel(receiver, wire=True)
        self.peer = receiver.name
        self.seen: list[dict[str, Any]] = []

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        self.seen.append(json.loads(json.dumps(message)))
        reply = self.inner.request(message)
        self.seen.append(json.loads(json.dumps(reply)))
        return reply

    async def arequest(self, message: dict[str, Any]) -> dict[str, Any]:
        return self.request(message)


def _real_traffic() -> list[dict[str, Any]]:
    from collector import VirtualClock

    clock = VirtualClock()
    seen: list[dict[str, Any]] = []

    def validate(work: Any) -> Any:
        if work.payload.get("busy"):
            return reject("resource_unavailable", detail="queue full")
        return accept(eta_ms=250)

    def fail(work: Any) -> Any:
        if work.payload.get("explode"):
            raise RuntimeError("boom")
        return {
            "STATUS": "complete",
            "TASK_ID": work.task_id,
            "FINDINGS": [],
            "GAPS": [],
            "INSTRUCTIONS_FOR_NEXT": "",
        }

    receiver = Receiver(
        "writer", validator=validate, executor=fail, clock=clock, allow_legacy_modes=True
    )
    channel = Recording(receiver)
    sender = Sender("researcher", clock=clock)
    for n, payload in enumerate([{"t": 1}, {"busy": True}, {"explode": True}, {"t": "é"}]):
        sender.handoff(
            channel,
            task_id=f"t{n}",
            payload=payload,
            output_schema="report@2",
            idempotency_key=f"k{n}",
            max_attempts=2,
        )
    sender.handoff(
        channel, task_id="again", payload={"t": 1}, output_schema="report", idempotency_key="k0"
    )
    sender.handoff(
        channel, task_id="nokey", payload=[1, 2], output_schema="r@1", idempotency_key=None
    )
    sender.handoff(
        channel,
        task_id="two",
        payload=None,
        output_schema="r@1",
        idempotency_key="k-two",
        mode="two-step",
    )
    with sender.open(
        channel, task_id="cancel", payload={}, output_schema="r@1", idempotency_key="k-c"
    ) as h:
        h.propose()
        h.cancel("changed my mind")
        h.commit(unchecked=True)
    seen.extend(channel.seen)
    return seen


TRAFFIC = _real_traffic()


def test_real_traffic_covers_every_kind_and_outcome() -> None:
    kinds = {m["kind"] for m in TRAFFIC}
    assert kinds == set(wire.MESSAGE_KINDS)
    outcomes = {m["outcome"] for m in TRAFFIC if m["kind"] == "commit_result"}
    assert outcomes == {"executed", "replayed", "refused", "failed"}


@pytest.mark.parametrize("n", range(len(TRAFFIC)))
def test_every_message_a_handshake_sends_validates(n: int) -> None:
    message = TRAFFIC[n]
    schemas.validate(message["kind"], message)
    assert decode(message).to_dict() == message  # and the decoder takes it back as is


@pytest.mark.parametrize("kind", wire.MESSAGE_KINDS)
def test_a_missing_required_field_is_named_by_both_schema_and_decoder(kind: str) -> None:
    sample = next(m for m in TRAFFIC if m["kind"] == kind)
    for name in schemas.load(kind)["required"]:
        if name == "kind":
            continue
        broken = {k: v for k, v in sample.items() if k != name}
        with pytest.raises(InvalidMessage) as caught:
            schemas.validate(kind, broken)
        assert caught.value.field == f"/{name}"
        with pytest.raises(MessageError, match=name):
            decode(broken)


@pytest.mark.parametrize(
    ("kind", "field", "value"),
    [
        ("propose", "attempt", "one"),
        ("propose", "attempt", 0),
        ("propose", "deadline_unix_ms", 1.5),
        ("propose", "trace", {"traceparent": 1}),
        ("propose", "output_schema", "@1"),
        ("propose", "mode", "telepathy"),
        ("answer", "eta_ms", -1),
        ("answer", "decision", "maybe"),
        ("commit_result", "outcome", "exploded"),
        ("void", "handoff_id", ""),
    ],
)
def test_a_bad_field_is_named_as_a_json_pointer(kind: str, field: str, value: Any) -> None:
    sample = dict(next(m for m in TRAFFIC if m["kind"] == kind))
    sample[field] = value
    with pytest.raises(InvalidMessage) as caught:
        schemas.validate(kind, sample)
    assert caught.value.field is not None and caught.value.field.startswith(f"/{field}")


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_name = st.text(min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    payload=_json,
    key=st.none() | _name,
    attempt=st.integers(1, 50),
    schema_name=st.from_regex(r"[a-z][a-z0-9_-]{0,8}(@[0-9]{1,3})?", fullmatch=True),
    trace=st.dictionaries(st.sampled_from(["traceparent", "tracestate"]), st.text(max_size=20)),
)
def test_generated_proposals_and_commits_validate(
    payload: Any, key: str | None, attempt: int, schema_name: str, trace: dict[str, str]
) -> None:
    p = decode(
        {
            "kind": "propose",
            "handoff_id": "h",
            "task_id": "t",
            "attempt": attempt,
            "sender": "s",
            "receiver": "r",
            "output_schema": schema_name,
            "deadline_unix_ms": 1_700_000_000_000,
            "idempotency_key": key,
            "payload": payload,
            "trace": trace,
        }
    )
    schemas.validate("propose", p.to_dict())
    assert isinstance(p, Proposal)
    c = CommitRequest(
        handoff_id="h",
        task_id="t",
        attempt=attempt,
        sender="s",
        receiver="r",
        idempotency_key=key,
        payload=payload,
        trace=trace,
    )
    schemas.validate("commit", c.to_dict())


def test_the_protocol_page_describes_every_field_and_schema() -> None:
    page = (ROOT / "docs" / "protocol.md").read_text()
    for kind in wire.MESSAGE_KINDS:
        assert f"{kind}.schema.json" in page, kind
        for name in schemas.load(kind)["properties"]:
            assert f"`{name}`" in page, f"docs/protocol.md does not mention {kind}.{name}"
    for route in (*wire.ROUTES.values(), wire.ROUTE_HEALTH, wire.ROUTE_READY):
        assert f"`{route}`" in page, route
    for code in (
        wire.ERROR_INVALID_JSON,
        wire.ERROR_INVALID_MESSAGE,
        wire.ERROR_UNAUTHORIZED,
        wire.ERROR_PAYLOAD_TOO_LARGE,
        wire.ERROR_UNSUPPORTED_MEDIA_TYPE,
    ):
        assert code in page, code


def test_the_protocol_pages_examples_are_valid_messages() -> None:
    import re

    page = (ROOT / "docs" / "protocol.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"^```json\n(.*?)^```", page, re.S | re.M)]
    kinds = [b.get("kind", "error") for b in blocks]
    assert {"propose", "answer", "commit", "commit_result", "void", "error"} <= set(kinds)
    for block, kind in zip(blocks, kinds, strict=True):
        schemas.validate(kind, block)
        if kind != "error":
            decode(block)
