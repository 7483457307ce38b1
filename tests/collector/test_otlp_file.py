"""``collector.otlp_file``: the same bytes as the official OTLP JSON-lines file exporter.

Every test writes the same SDK spans with both exporters and compares the output byte for
byte (and, for the simulator's and the upstream files, the rows the auditor loads from it).
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

import collector.simulator.writer as writer
from auditor import load_traces
from collector.otlp_file import OtlpJsonLinesExporter
from collector.simulator import SimulationConfig, run_simulation
from tests.support.paths import REPO, TESTS

FIXTURES = TESTS / "fixtures" / "otlp"

EVERY_TYPE: dict[str, Any] = {
    "str": 'quote " backslash \\ newline \n tab \t snowman \u2603 e-acute \u00e9 \U0001f600',
    "empty_str": "",
    "int": -5,
    "zero": 0,
    "int64_max": 2**63 - 1,
    "int64_min": -(2**63),
    "float": 0.1 + 0.2,
    "float_whole": 1.0,
    "negative_zero": -0.0,
    "tiny": 5e-324,
    "huge": 1.7976931348623157e308,
    "nan": float("nan"),
    "inf": float("inf"),
    "minus_inf": float("-inf"),
    "true": True,
    "false": False,
    "bytes": b"\x00\xff binary",
    "empty_bytes": b"",
    "strs": ["a", "", "\u2603"],
    "ints": [1, -2, 2**40],
    "floats": [1.5, float("nan"), -0.0],
    "bools": [True, False],
    "with_none": [None, "x"],
    "empty_list": [],
    "mapping": {"k": "v", "n": 1, "nested": {"deep": [1, 2]}},
    "empty_mapping": {},
}


class _Keep(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Any) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def _both(batches: list[list[ReadableSpan]], **options: Any) -> tuple[str, str]:
    """What the official exporter and ours write for ``batches``."""
    ref, ours = io.StringIO(), io.StringIO()
    official, fast = FileSpanExporter(stream=ref), OtlpJsonLinesExporter(stream=ours, **options)
    for batch in batches:
        assert official.export(batch) == SpanExportResult.SUCCESS
        assert fast.export(batch) == SpanExportResult.SUCCESS
    return ref.getvalue(), ours.getvalue()


def _sdk_spans() -> list[ReadableSpan]:
    """Spans from the real SDK: every attribute type, kind, status, event and link shape,
    two resources that compare equal, a scope with attributes and schema URLs."""
    kept = _Keep()
    spans: list[ReadableSpan] = []
    remote = SpanContext(
        0xABC,
        0xDEF,
        is_remote=True,
        trace_flags=TraceFlags(1),
        trace_state=TraceState([("vendor", "v1"), ("other", "x=y")]),
    )
    for schema_url in ("", "https://opentelemetry.io/schemas/1.26.0"):
        provider = TracerProvider(
            resource=Resource(
                {"service.name": "agent \u00e9", "replica": 2, "ratio": 0.5, "tags": ["a"]},
                schema_url=schema_url or None,
            ),
            shutdown_on_exit=False,
        )
        provider.add_span_processor(SimpleSpanProcessor(kept))
        scoped = provider.get_tracer(
            "handoffscope", "0.1.0", schema_url=schema_url or None, attributes={"scope.n": 1}
        )
        bare = provider.get_tracer("bare")
        with scoped.start_as_current_span("root", kind=SpanKind.SERVER, attributes=EVERY_TYPE) as s:
            s.add_event(
                "with attributes", {"k": 1, "l": ["x"]}, timestamp=1_700_000_000_000_000_001
            )
            s.add_event("", {})
            s.set_status(Status(StatusCode.ERROR, "it broke: \u2603"))
            with bare.start_as_current_span(
                "", kind=SpanKind.CLIENT, links=[Link(remote, {"link.k": "v"}), Link(remote)]
            ) as child:
                child.set_status(StatusCode.OK)
        parent = trace.set_span_in_context(trace.NonRecordingSpan(remote))
        scoped.start_span("remote child", context=parent, kind=SpanKind.CONSUMER).end()
        scoped.start_span("producer", kind=SpanKind.PRODUCER, start_time=1).end(end_time=2)
        scoped.start_span("internal").end()
        spans.extend(kept.spans)
        kept.spans.clear()
    # The same resource again as a distinct object: the reference groups equal resources.
    again = TracerProvider(
        resource=Resource(
            {"service.name": "agent \u00e9", "replica": 2, "ratio": 0.5, "tags": ["a"]}
        ),
        shutdown_on_exit=False,
    )
    again.add_span_processor(SimpleSpanProcessor(kept))
    again.get_tracer("bare").start_span("regrouped").end()
    spans.extend(kept.spans)
    return spans


def test_every_attribute_type_and_span_shape_writes_the_reference_bytes():
    spans = _sdk_spans()
    # One line with everything interleaved, then every span on its own line.
    ref, ours = _both([spans[::-1], spans, *[[s] for s in spans]])
    assert ref == ours
    first = json.loads(ours.splitlines()[0])
    # Equal resources share one block; the regrouped span joined the first resource's block.
    assert len(first["resourceSpans"]) == 2
    attrs = {
        a["key"]: a["value"]
        for a in first["resourceSpans"][0]["scopeSpans"][1]["spans"][-1]["attributes"]
    }
    assert attrs["int"] == {"intValue": "-5"}
    assert attrs["nan"] == {"doubleValue": "NaN"}
    assert attrs["bytes"] == {"bytesValue": base64.b64encode(b"\x00\xff binary").decode()}
    assert attrs["with_none"] == {"arrayValue": {"values": [{}, {"stringValue": "x"}]}}
    assert attrs["empty_list"] == {"arrayValue": {}}
    assert "\\u2603" in ours and "\u2603" not in ours  # ASCII-escaped, as json.dumps does


def test_a_tiny_cache_that_keeps_starting_over_changes_nothing():
    spans = _sdk_spans()
    ref, ours = _both([spans, spans, *[[s] for s in spans]], cache_limit=2)
    assert ref == ours


def test_equal_values_of_different_types_never_share_a_cached_fragment():
    # 1, 1.0 and True are equal dict keys; -0.0 equals 0.0; ("1",) is not (1,).
    values = [1, True, 1.0, 0.0, -0.0, False, 0, ("1",), (1,), (True,), "1"]
    spans = [
        ReadableSpan(name=f"s{i}", context=_context(i + 1), attributes={"k": v}, start_time=1)
        for i, v in enumerate(values * 2)
    ]
    ref, ours = _both([spans, *[[s] for s in spans]])
    assert ref == ours
    assert '"boolValue":true' in ours and '"doubleValue":-0.0' in ours


def test_a_value_otlp_cannot_hold_is_left_out_like_the_reference(caplog):
    # The SDK would have cleaned this away; a hand-made span can still carry it.
    span = ReadableSpan(
        name="odd",
        context=_context(7),
        attributes={"before": "kept", "odd": object(), "after": 3},
        start_time=1,
        end_time=2,
    )
    with caplog.at_level(logging.ERROR):
        ref, ours = _both([[span]])
    assert ref == ours
    assert '"key":"before"' in ours and '"key":"after"' in ours
    assert '"key":"odd"' not in ours
    assert any("Failed to encode key odd" in r.getMessage() for r in caplog.records)


def _context(n: int) -> SpanContext:
    return SpanContext(n, n, is_remote=False, trace_flags=TraceFlags(1))


def test_the_simulators_files_are_the_bytes_the_official_exporter_writes(tmp_path, monkeypatch):
    config = SimulationConfig(
        workflows=30,
        seed=11,
        duplicate_rate=0.2,
        faults={"slow-validation": 0.1, "duplicate-execution": 0.1, "accept-without-eta": 0.1},
    )
    ours = run_simulation(config, tmp_path / "ours")
    monkeypatch.setattr(writer, "OtlpJsonLinesExporter", FileSpanExporter)
    ref = run_simulation(config, tmp_path / "ref")
    names = sorted(p.name for p in (tmp_path / "ours").glob("*.jsonl"))
    assert len(names) == 12 and ours.figures["spans"] > 500
    assert names == sorted(p.name for p in (tmp_path / "ref").glob("*.jsonl"))
    for name in names:
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes()
    assert ours.figures == ref.figures
    assert _rows(tmp_path / "ours") == _rows(tmp_path / "ref")


def _rows(path: Path) -> list[tuple[Any, ...]]:
    ts = load_traces(path)
    return ts.con.execute(
        "SELECT * EXCLUDE (source_file, source_line) FROM spans ORDER BY ALL"
    ).fetchall()


# ---------------------------------------------------------------------- upstream files
def _value(v: dict[str, Any]) -> Any:
    if "stringValue" in v:
        return v["stringValue"]
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "bytesValue" in v:
        return base64.b64decode(v["bytesValue"])
    if "arrayValue" in v:
        return [_value(x) for x in (v["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in v:
        return {kv["key"]: _value(kv.get("value", {})) for kv in v["kvlistValue"].get("values", [])}
    return None


def _attrs(items: list[dict[str, Any]] | None) -> BoundedAttributes:
    return BoundedAttributes(
        attributes={kv["key"]: _value(kv.get("value", {})) for kv in items or []}
    )


def _enum(raw: Any, prefix: str, names: list[str]) -> int:
    if isinstance(raw, str):
        return names.index(raw.removeprefix(prefix))
    return int(raw or 0)


_KINDS = ["UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER"]
_CODES = ["UNSET", "OK", "ERROR"]


def _upstream_spans(path: Path) -> list[ReadableSpan]:
    """An upstream OTLP JSON file's spans, rebuilt as the SDK's ``ReadableSpan`` objects."""
    text = path.read_text()
    documents = (
        [json.loads(line) for line in text.splitlines() if line.strip()]
        if path.suffix == ".jsonl"
        else [json.loads(text)]
    )
    spans = []
    for doc in documents:
        for rs in doc.get("resourceSpans", []):
            resource = Resource(
                _attrs(rs.get("resource", {}).get("attributes")), rs.get("schemaUrl")
            )
            for ss in rs.get("scopeSpans", []):
                scope = ss.get("scope", {})
                sdk_scope = InstrumentationScope(
                    scope.get("name", ""),
                    scope.get("version"),
                    ss.get("schemaUrl"),
                    _attrs(scope.get("attributes")),
                )
                for s in ss.get("spans", []):
                    spans.append(_upstream_span(s, resource, sdk_scope))
    return spans


def _upstream_span(s: dict[str, Any], resource: Resource, scope: InstrumentationScope) -> Any:
    def ctx(trace_id: str, span_id: str, state: str = "", remote: bool = False) -> SpanContext:
        pairs = [tuple(p.split("=", 1)) for p in state.split(",") if "=" in p]
        return SpanContext(
            int(trace_id or "0", 16),
            int(span_id or "0", 16),
            is_remote=remote,
            trace_state=TraceState(pairs),
        )

    parent = s.get("parentSpanId")
    code = _enum(s.get("status", {}).get("code"), "STATUS_CODE_", _CODES)
    return ReadableSpan(
        name=s.get("name", ""),
        context=ctx(s.get("traceId", ""), s.get("spanId", ""), s.get("traceState", "")),
        parent=ctx(s.get("traceId", ""), parent, remote=bool(int(s.get("flags", 0)) & 512))
        if parent
        else None,
        resource=resource,
        attributes=_attrs(s.get("attributes")),
        events=[
            Event(
                e.get("name", ""),
                _attrs(e.get("attributes")),
                timestamp=int(e.get("timeUnixNano", 0)),
            )
            for e in s.get("events", [])
        ],
        links=[
            Link(
                ctx(lk.get("traceId", ""), lk.get("spanId", ""), remote=True),
                _attrs(lk.get("attributes")),
            )
            for lk in s.get("links", [])
        ],
        kind=SpanKind(max(0, _enum(s.get("kind"), "SPAN_KIND_", _KINDS) - 1)),
        status=Status(StatusCode(code), s.get("status", {}).get("message") or None),
        start_time=int(s.get("startTimeUnixNano", 0)),
        end_time=int(s.get("endTimeUnixNano", 0)),
        instrumentation_scope=scope,
    )


UPSTREAM = sorted(p.name for p in FIXTURES.glob("*.json*") if "logs" not in p.name)


def test_the_upstream_fixtures_are_all_here():
    assert len(UPSTREAM) >= 14


@pytest.mark.parametrize("name", UPSTREAM)
def test_upstream_spans_write_the_reference_bytes_and_load_the_same_rows(name, tmp_path):
    spans = _upstream_spans(FIXTURES / name)
    assert spans, name
    ref, ours = _both([spans, *[[s] for s in spans]])
    assert ref == ours
    (tmp_path / "ref.jsonl").write_text(ref)
    (tmp_path / "ours.jsonl").write_text(ours)
    assert _rows(tmp_path / "ours.jsonl") == _rows(tmp_path / "ref.jsonl")


# ---------------------------------------------------------------------- the exporter itself
def test_a_file_exporter_appends_a_flushed_line_per_batch_and_closes_on_shutdown(tmp_path):
    path = tmp_path / "spans.jsonl"
    path.write_text("")
    exporter = OtlpJsonLinesExporter(path)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    for i in range(3):
        tracer.start_span(f"s{i}").end()
    provider.force_flush()
    # Flushed as it goes: readable before shutdown.
    assert (
        sum(
            len(json.loads(x)["resourceSpans"][0]["scopeSpans"][0]["spans"])
            for x in path.read_text().splitlines()
        )
        == 3
    )
    provider.shutdown()
    assert exporter._stream.closed  # noqa: SLF001 - the file it opened is closed
    assert exporter.export([]) == SpanExportResult.FAILURE
    assert load_traces(path).span_count == 3


def test_an_empty_batch_writes_nothing_and_a_broken_stream_fails_without_raising(caplog):
    stream = io.StringIO()
    exporter = OtlpJsonLinesExporter(stream=stream)
    assert exporter.export([]) == SpanExportResult.SUCCESS
    assert stream.getvalue() == ""

    class Broken(io.StringIO):
        def write(self, s: str) -> int:
            raise OSError("disk full")

    broken = OtlpJsonLinesExporter(stream=Broken())
    with caplog.at_level(logging.ERROR):
        assert broken.export(_sdk_spans()[:1]) == SpanExportResult.FAILURE
    assert "disk full" in caplog.text
    closed = io.StringIO()
    closed.close()
    assert OtlpJsonLinesExporter(stream=closed).export(_sdk_spans()[:1]) == SpanExportResult.FAILURE
    with pytest.raises(ValueError, match="both"):
        OtlpJsonLinesExporter("x.jsonl", stream=stream)


def test_importing_the_module_does_not_load_the_sdk():
    code = "import sys, collector.otlp_file; print(sorted(m for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "opentelemetry.sdk" not in out.stdout and "duckdb" not in out.stdout


def test_public_surface_is_pinned():
    import collector.otlp_file as module

    assert module.__all__ == ["OtlpJsonLinesExporter", "SpanLineEncoder"]


DOC = REPO / "docs" / "simulator.md"


@pytest.mark.parametrize("where", ["docs/simulator.md", "module docstring"])
def test_the_documented_example_writes_a_loadable_file(where, tmp_path, monkeypatch):
    import collector.otlp_file as module

    if where == "module docstring":
        # The indented literal block after "::", up to the next unindented line.
        lines = (module.__doc__ or "").split("::\n", 1)[1].splitlines()
        body = [x for x in itertools.takewhile(lambda x: not x or x.startswith("    "), lines)]
        block = textwrap.dedent("\n".join(body))
    else:
        blocks = DOC.read_text(encoding="utf-8").split("```python\n")[1:]
        block = next(b.split("```")[0] for b in blocks if "OtlpJsonLinesExporter" in b)
    assert "OtlpJsonLinesExporter" in block
    monkeypatch.chdir(tmp_path)
    exec(compile(block, where, "exec"), {"__name__": "__docs__"})
    line = json.loads((tmp_path / "spans.jsonl").read_text())
    assert line["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] == "hello"
    assert load_traces(tmp_path / "spans.jsonl").span_count == 1


def test_long_values_are_written_but_not_remembered():
    from collector.otlp_file import CACHED_VALUE_CHARS, SpanLineEncoder

    long = "p" * (CACHED_VALUE_CHARS + 1)
    attributes = {"prompt": long, "short": "s", "parts": (long,), "lanes": ("a", "b")}
    span = ReadableSpan(name="s", context=_context(3), attributes=attributes, start_time=1)
    ref, ours = _both([[span], [span]])
    assert ref == ours and long in ours
    encoder = SpanLineEncoder()
    encoder.line([span])
    remembered = {k for cache in encoder._fragments.values() for k in cache}  # noqa: SLF001
    assert {("short", "s"), ("lanes", ("a", "b"))} <= remembered
    assert not {k for k, _ in remembered} & {"prompt", "parts"}


def test_a_mapping_that_only_looks_like_the_sdks_is_read_through_its_items():
    from collections.abc import Mapping

    class Lookalike(Mapping):
        _dict = {"wrong": "never written"}  # noqa: RUF012

        def __init__(self, data: dict[str, Any]) -> None:
            self.data = data

        def __getitem__(self, key: str) -> Any:
            return self.data[key]

        def __iter__(self) -> Any:
            return iter(self.data)

        def __len__(self) -> int:
            return len(self.data)

    span = ReadableSpan(
        name="s", context=_context(4), attributes=Lookalike({"right": 1}), start_time=1
    )
    ref, ours = _both([[span]])
    assert ref == ours and '"right"' in ours and "never written" not in ours
