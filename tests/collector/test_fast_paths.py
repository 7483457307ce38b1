"""The handshake's shortcuts give exactly what the reference paths give.

Three shortcuts make a handshake cheaper: the canonical JSON of fingerprints calls the C
encoder directly, frozen records set their slots directly (``collector.records``), and W3C
trace context is written and read directly while the default propagator is in place
(``collector.propagation``). Each is checked here against the path it replaces, on real
upstream OTLP files as well as generated data, and the handshake's spans are checked to be
the same with the shortcuts as without them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
from enum import IntEnum

import pytest
from hypothesis import given
from opentelemetry import baggage, propagate, trace
from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from collector import InProcessChannel, Receiver, Sender, VirtualClock, accept, propagation
from collector.errors import MessageError
from collector.handoff import HandoffSpec
from collector.idempotency import Acceptance, Claim, StoredResult
from collector.messages import (
    Ack,
    Answer,
    CommitRequest,
    CommitResult,
    OutputSchema,
    Proposal,
    Usage,
    VoidNotice,
    canonical_json,
    fingerprint,
)
from collector.protocol import Transition
from collector.records import fast_init
from collector.sender import HandoffOutcome
from collector.telemetry import Telemetry
from collector.work import Verdict
from tests.support.paths import TESTS
from tests.support.strategies import json_values

FIXTURES = TESTS / "fixtures" / "otlp"


def _reference(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _fixture_documents() -> list[tuple[str, object]]:
    docs = []
    for path in sorted(FIXTURES.glob("*.json*")):
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".jsonl":
            docs += [
                (f"{path.name}:{i}", json.loads(line))
                for i, line in enumerate(text.splitlines())
                if line.strip()
            ]
        else:
            docs.append((path.name, json.loads(text)))
    return docs


DOCUMENTS = _fixture_documents()


# ---------------------------------------------------------------------- canonical JSON
def test_the_upstream_fixtures_are_there():
    assert len(DOCUMENTS) >= 10


@pytest.mark.parametrize(("name", "doc"), DOCUMENTS, ids=[n for n, _ in DOCUMENTS])
def test_canonical_json_of_real_otlp_files_is_the_reference_text(name, doc):
    assert canonical_json(doc) == _reference(doc)
    expected = hashlib.sha256(_reference(doc).encode("utf-8")).hexdigest()
    assert fingerprint(doc) == expected


@given(json_values)
def test_canonical_json_is_the_reference_text(value):
    assert canonical_json(value) == _reference(value)


def _circular() -> list[object]:
    loop: list[object] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize(
    "value",
    [
        {"x": object()},
        {1: "a", "b": 2},  # keys that cannot be sorted together
        {"set": {1, 2}},
        _circular(),
    ],
    ids=["object", "mixed-keys", "set", "circular"],
)
def test_what_the_reference_refuses_the_fingerprint_refuses(value):
    with pytest.raises((TypeError, ValueError)) as reference:
        _reference(value)
    with pytest.raises(reference.type):
        canonical_json(value)
    with pytest.raises(MessageError, match="not JSON-serialisable"):
        fingerprint(value)


def test_a_circular_payload_does_not_poison_the_next_one():
    with pytest.raises(MessageError):
        fingerprint(_circular())
    shared = ["x"]
    assert canonical_json({"a": shared, "b": shared}) == '{"a":["x"],"b":["x"]}'


@pytest.mark.parametrize(
    "value", [{"e": IntEnum("E", "A").A}, float("nan"), {"big": 10**30}, "plain", True]
)
def test_odd_but_valid_values_encode_as_the_reference_does(value):
    assert canonical_json(value) == _reference(value)


# ---------------------------------------------------------------------- frozen records
RECORDS = [
    OutputSchema,
    Usage,
    Proposal,
    Answer,
    Ack,
    CommitRequest,
    CommitResult,
    VoidNotice,
    StoredResult,
    Claim,
    Acceptance,
    HandoffSpec,
    Transition,
    HandoffOutcome,
    Verdict,
]


def _sample(cls: type) -> dict[str, object]:
    return {f.name: f"{f.name}-value" for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_a_fast_record_has_the_dataclass_signature(cls):
    params = list(inspect.signature(cls).parameters.values())
    fields = dataclasses.fields(cls)
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields, strict=True):
        if f.default is not dataclasses.MISSING:
            assert p.default == f.default
        elif f.default_factory is dataclasses.MISSING:
            assert p.default is inspect.Parameter.empty


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_a_fast_record_is_built_positionally_or_by_keyword_and_stays_frozen(cls):
    values = _sample(cls)
    by_name = cls(**values)
    by_position = cls(*values.values())
    assert by_name == by_position
    assert {n: getattr(by_name, n) for n in values} == values
    with pytest.raises(dataclasses.FrozenInstanceError):
        by_name.__setattr__(next(iter(values)), "changed")
    with pytest.raises(TypeError):
        cls(**values, unknown_field=1)
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    for name in required[:1]:  # a missing required field is refused
        with pytest.raises(TypeError):
            cls(**{n: v for n, v in values.items() if n != name})


def test_defaults_and_factories_are_applied_per_instance():
    a = Proposal("h", "t", 1, "s", "r", OutputSchema("doc"), 1, "k", {})
    b = Proposal("h", "t", 1, "s", "r", OutputSchema("doc"), 1, "k", {})
    assert a.trace == {} and a.trace is not b.trace
    assert (a.payload_version, a.max_attempts, a.mode, a.consumed_status) == (
        "1",
        3,
        "handshake",
        None,
    )
    assert dataclasses.replace(a, attempt=2).attempt == 2
    assert hash(OutputSchema("doc", "2")) == hash(OutputSchema(name="doc", version="2"))


def test_fast_init_refuses_what_it_would_not_reproduce():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        n: int

        def __post_init__(self) -> None:
            raise ValueError

    with pytest.raises(TypeError, match="__post_init__"):
        fast_init(Checked)

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        n: int

    with pytest.raises(TypeError, match="slots"):
        fast_init(NoSlots)


# ---------------------------------------------------------------------- propagation
@pytest.fixture
def default_textmap():
    """The API's default global propagator, restored afterwards."""
    before = propagate.get_global_textmap()
    propagate.set_global_textmap(
        CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
    )
    yield
    propagate.set_global_textmap(before)


def _reference_inject(ctx: Context) -> dict[str, str]:
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=ctx)
    return carrier


def _span_context(ctx: Context) -> trace.SpanContext:
    return trace.get_current_span(ctx).get_span_context()


def _same_context(a: Context, b: Context) -> None:
    assert sorted(a) == sorted(b)
    assert _span_context(a) == _span_context(b)
    assert _span_context(a).is_remote == _span_context(b).is_remote
    assert dict(baggage.get_all(a)) == dict(baggage.get_all(b))


def _fixture_ids() -> list[tuple[str, str]]:
    """(trace id, span id) pairs in lower-case hex, from the upstream OTLP files."""
    found = []
    for _, doc in DOCUMENTS:
        for rs in doc.get("resourceSpans", []) if isinstance(doc, dict) else []:
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    t, s = span.get("traceId", ""), span.get("spanId", "")
                    if len(t) == 32 and len(s) == 16:
                        found.append((t.lower(), s.lower()))
    return sorted(set(found))


FIXTURE_IDS = _fixture_ids()


def test_the_fixtures_hold_trace_ids():
    assert len(FIXTURE_IDS) >= 10


@pytest.mark.parametrize("flags", [0, 1])
@pytest.mark.parametrize("state", [None, trace.TraceState([("vendor", "v1"), ("other", "x")])])
def test_inject_writes_what_the_global_propagator_writes(default_textmap, flags, state):
    for trace_id, span_id in FIXTURE_IDS:
        sc = trace.SpanContext(
            int(trace_id, 16),
            int(span_id, 16),
            is_remote=False,
            trace_flags=trace.TraceFlags(flags),
            trace_state=state,
        )
        ctx = trace.set_span_in_context(trace.NonRecordingSpan(sc), Context())
        assert propagation.inject(ctx) == _reference_inject(ctx)


def test_inject_carries_baggage_and_odd_contexts_as_the_global_propagator_does(default_textmap):
    sc = trace.SpanContext(1, 2, is_remote=False)
    ctx = trace.set_span_in_context(trace.NonRecordingSpan(sc), Context())
    with_baggage = baggage.set_baggage("tenant", "acme", context=ctx)
    zero_span = trace.set_span_in_context(
        trace.NonRecordingSpan(trace.SpanContext(1, 0, is_remote=False)), Context()
    )
    for c in (with_baggage, zero_span, Context()):
        assert propagation.inject(c) == _reference_inject(c)
    assert propagation.inject(with_baggage)["baggage"] == "tenant=acme"


def test_inject_of_a_span_carries_the_current_baggage_as_the_global_propagator_does(
    default_textmap,
):
    span = trace.NonRecordingSpan(trace.SpanContext(3, 4, is_remote=False))
    assert propagation.inject_span(span) == _reference_inject(trace.set_span_in_context(span))
    token = otel_context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        carrier = propagation.inject_span(span)
        assert carrier == _reference_inject(trace.set_span_in_context(span))
        assert carrier["baggage"] == "tenant=acme"
    finally:
        otel_context.detach(token)


def _carriers() -> list[dict[str, str]]:
    t, s = FIXTURE_IDS[0]
    good = f"00-{t}-{s}-01"
    return [
        *(
            {"traceparent": f"00-{a}-{b}-0{f}"}
            for (a, b), f in zip(FIXTURE_IDS, [0, 1] * 99, strict=False)
        ),
        {"traceparent": good.upper()},
        {"traceparent": f"  {good} "},
        {"traceparent": f"ff-{t}-{s}-01"},
        {"traceparent": f"01-{t}-{s}-01-extra"},
        {"traceparent": f"00-{t}-{s}-01-extra"},
        {"traceparent": f"00-{'0' * 32}-{s}-01"},
        {"traceparent": f"00-{t}-{'0' * 16}-01"},
        {"traceparent": "garbage"},
        {"traceparent": good, "tracestate": "vendor=v1"},
        {"traceparent": good, "baggage": "tenant=acme"},
        {"tracestate": "vendor=v1"},
        {"baggage": "tenant=acme"},
    ]


@pytest.mark.parametrize(
    "carrier", _carriers(), ids=lambda c: "|".join(f"{k}={v}" for k, v in c.items())[:60]
)
def test_extract_reads_what_the_global_propagator_reads(default_textmap, carrier):
    _same_context(propagation.extract(carrier), propagate.extract(dict(carrier)))


def test_another_global_propagator_is_used_as_it_is(default_textmap):
    propagate.set_global_textmap(TraceContextTextMapPropagator())  # no baggage
    t, s = FIXTURE_IDS[0]
    carrier = {"traceparent": f"00-{t}-{s}-01", "baggage": "tenant=acme"}
    extracted = propagation.extract(carrier)
    assert dict(baggage.get_all(extracted)) == {}
    _same_context(extracted, propagate.extract(carrier))
    ctx = baggage.set_baggage(
        "tenant",
        "acme",
        context=trace.set_span_in_context(
            trace.NonRecordingSpan(trace.SpanContext(1, 2, False)), Context()
        ),
    )
    assert (
        propagation.inject(ctx)
        == _reference_inject(ctx)
        == {"traceparent": f"00-{1:032x}-{2:016x}-00"}
    )


# ---------------------------------------------------------------------- spans
class _Counting(IdGenerator):
    def __init__(self) -> None:
        self.n = 0

    def generate_span_id(self) -> int:
        self.n += 1
        return self.n

    def generate_trace_id(self) -> int:
        self.n += 1
        return self.n


def _run_handshakes(monkeypatch: pytest.MonkeyPatch | None) -> list[str]:
    if monkeypatch is not None:  # the reference paths the shortcuts replace
        monkeypatch.setattr(propagation, "_default", lambda textmap: False)
    exporter = InMemorySpanExporter()
    tp = TracerProvider(id_generator=_Counting(), resource=Resource({"service.name": "fast"}))
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    clock = VirtualClock()
    tel = Telemetry(tracer_provider=tp)
    ids = iter(f"h{i}" for i in range(10))
    recv = Receiver(
        "writer",
        validator=lambda w: accept(eta_ms=100),
        executor=lambda w: {"ok": True, "got": w.payload},
        clock=clock,
        telemetry=tel,
    )
    sender = Sender("planner", clock=clock, telemetry=tel, id_factory=lambda: next(ids))
    channel = InProcessChannel(recv)
    for i, payload in enumerate([{"i": 1}, DOCUMENTS[0][1], {"é": [1.5, None]}]):
        sender.handoff(
            channel,
            task_id=f"t{i}",
            payload=payload,
            output_schema="doc@1",
            idempotency_key=f"k{i}",
        )
    return [s.to_json(indent=None) for s in exporter.get_finished_spans()]


def test_a_handshake_records_the_same_spans_with_and_without_the_shortcuts(
    default_textmap, monkeypatch
):
    fast = _run_handshakes(None)
    reference = _run_handshakes(monkeypatch)
    assert len(fast) == 15  # five spans a handshake, the receiver's answer among them
    assert fast == reference
