"""Hostile and broken input never crashes the loader and never costs a valid line."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from auditor import AuditError, append_lines, connect, load_traces
from auditor.loading.load import TraceSet

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
KEYS = [
    "handoff.attempt",
    "handoff.late",
    "gen_ai.usage.input_tokens",
    "handoff.external_effects",
    "handoff.task_id",
]

text = st.text(max_size=40)
attribute_value = st.one_of(
    text.map(lambda s: {"stringValue": s}),
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(lambda i: {"intValue": str(i)}),
    st.integers(min_value=-(2**53), max_value=2**53).map(lambda i: {"intValue": i}),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: {"doubleValue": f}),
    st.sampled_from(["NaN", "Infinity", "-Infinity"]).map(lambda f: {"doubleValue": f}),
    st.booleans().map(lambda b: {"boolValue": b}),
    st.lists(text, max_size=3).map(
        lambda xs: {"arrayValue": {"values": [{"stringValue": x} for x in xs]}}
    ),
    st.just({"kvlistValue": {"values": [{"key": "k", "value": {"stringValue": "v"}}]}}),
    st.just({}),
)
attributes = st.lists(
    st.tuples(st.one_of(text, st.sampled_from(KEYS)), attribute_value), max_size=6
).map(lambda kvs: [{"key": k, "value": v} for k, v in kvs])


@st.composite
def valid_line(draw: st.DrawFn, ids: list[int]) -> tuple[str, list[str]]:
    """One export request with 1-3 spans, each with a fresh span id.

    A name may end in a lone surrogate (written as its escape, as a model's output cut
    mid-emoji is): the line is still valid and must load, with a problem noting it.
    """
    spans = []
    names = []
    ascii_only = draw(st.booleans())
    cut = st.sampled_from(["", "", "\ud83d", "\udc00"]) if ascii_only else st.just("")
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        ids.append(ids[-1] + 1 if ids else 1)
        span_id = f"{ids[-1]:016x}"
        names.append(span_id)
        start = draw(st.integers(min_value=0, max_value=2**62))
        spans.append(
            {
                "traceId": draw(st.sampled_from([TRACE, TRACE.upper()])),
                "spanId": span_id,
                "name": draw(text) + draw(cut),
                "kind": draw(st.sampled_from([1, 2, "SPAN_KIND_CLIENT", "3", None])),
                "startTimeUnixNano": draw(st.sampled_from([str(start), start])),
                "endTimeUnixNano": str(start + draw(st.integers(min_value=0, max_value=10**12))),
                "attributes": draw(attributes),
                "unknownField": draw(st.one_of(st.none(), text, st.integers())),
            }
        )
    doc = {
        "resourceSpans": [
            {
                "resource": {"attributes": draw(attributes)},
                "scopeSpans": [{"scope": {"name": draw(text)}, "spans": spans}],
            }
        ]
    }
    return json.dumps(doc, ensure_ascii=ascii_only), names


garbage_line = st.one_of(
    text.filter(lambda s: "\n" not in s and "\r" not in s),
    st.sampled_from(
        [
            '{"resourceSpans": "x"}',
            '{"resourceSpans": [{"scopeSpans": [{"spans": [1, 2, "three"]}]}]}',
            '{"resourceLogs": []}',
            "[" * 3000 + "]" * 3000,
            '{"resourceSpans": [' * 500,
            "null",
            '{"a": 1e999999}',
            '{"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": {"k": 1}}]}]}]}',
        ]
    ),
)


@st.composite
def trace_file(draw: st.DrawFn) -> tuple[list[str], set[str], set[int]]:
    """Lines mixing valid exports and garbage: (lines, valid span ids, line numbers that may
    be reported: garbage, or valid lines holding a lone surrogate escape)."""
    ids: list[int] = []
    lines: list[str] = []
    valid: set[str] = set()
    garbage: set[int] = set()
    names: list[str] = []
    for number in range(1, draw(st.integers(min_value=1, max_value=8)) + 1):
        if draw(st.booleans()):
            line, names = draw(valid_line(ids))
            valid.update(names)
            if "\\ud83d" in line or "\\udc00" in line:
                garbage.add(number)
        else:
            line, names = draw(garbage_line), []
            garbage.add(number)
        lines.append(line)
    if draw(st.booleans()):  # a writer killed mid-line: the last line is torn
        last = lines[-1]
        lines[-1] = last[: draw(st.integers(min_value=0, max_value=max(0, len(last) - 1)))]
        garbage.add(len(lines))
        valid -= set(names)  # a torn line's spans are gone; no other line may be lost
    return lines, valid, garbage


def _loaded(ts: TraceSet) -> set[str]:
    return {r[0] for r in ts.con.execute("SELECT span_id FROM spans").fetchall()}


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace_file())
def test_files_never_crash_and_keep_every_valid_line(
    case: tuple[list[str], set[str], set[int]],
) -> None:
    lines, valid, garbage = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        path.write_text("\n".join(lines), encoding="utf-8")
        try:
            ts = load_traces(path)
        except AuditError as e:
            assert not valid, f"valid spans lost: {e}"
            return
        loaded = _loaded(ts)
        assert loaded == valid
        assert {p.line for p in ts.problems if p.line is not None} <= garbage


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace_file())
def test_lines_in_memory_never_crash_and_keep_every_valid_line(
    case: tuple[list[str], set[str], set[int]],
) -> None:
    lines, valid, garbage = case
    ts = TraceSet(con=connect())
    added = append_lines(ts, list(enumerate(lines, start=1)), file="live.jsonl", final=True)
    loaded = _loaded(ts)
    assert loaded == valid and added == len(loaded)
    assert {p.line for p in ts.problems if p.line is not None} <= garbage
