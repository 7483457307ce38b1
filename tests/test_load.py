"""Loading OTLP JSON into the spans table: real upstream files, damaged input, every encoding."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import pytest
import zstandard

from auditor import AuditError, LoadProblem, TraceSet, append_lines, load_traces

FIXTURES = Path(__file__).parent / "fixtures" / "otlp"

# Unique spans per upstream file (fixtures README; the jaeger file repeats one span).
UPSTREAM_SPANS = {
    "opentelemetry-proto__examples__trace.json": 1,
    "opentelemetry-specification__specification__protocol__file-exporter.md__traces-example.jsonl": 8,  # noqa: E501
    "opentelemetry-rust__opentelemetry-otlp__tests__integration_test__expected__traces.json": 2,
    "opentelemetry-rust__opentelemetry-otlp__tests__integration_test__expected__serialized_traces.json": 2,  # noqa: E501
    "elastic-ottl-playground__testdata__traces.json": 2,
    "jaeger__internal__storage__integration__fixtures__traces__example_trace.json": 5,
    "jaeger__internal__storage__integration__fixtures__traces__link_attributes_trace.json": 1,
    "jaeger__internal__storage__integration__fixtures__traces__scope_attributes_trace.json": 1,
    "jaeger__cmd__jaeger__internal__extension__jaegerquery__internal__fixture__otlp2jaeger-in.json": 1,  # noqa: E501
    "genai-interlingua__testdata__raw__in.json": 1,
    "genai-interlingua__testdata__openllmetry__in.json": 2,
    "genai-interlingua__testdata__litellm__in.json": 2,
    "genai-interlingua__testdata__vercel__in.json": 3,
    "genai-interlingua__testdata__openinference__in.json": 1,
}


def span_json(
    span_id: str = "00f067aa0ba902b7",
    *,
    trace_id: str = "4bf92f3577b34da6a3ce929d0e0e4736",
    name: str = "handoff.validate",
    attrs: dict[str, object] | None = None,
    **extra: object,
) -> dict[str, object]:
    """One OTLP span; attributes given as a plain dict are encoded as OTLP AnyValues."""

    def any_value(v: object) -> dict[str, object]:
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        if isinstance(v, float):
            return {"doubleValue": v}
        if isinstance(v, list):
            return {"arrayValue": {"values": [any_value(x) for x in v]}}
        return {"stringValue": str(v)}

    span: dict[str, object] = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000000250000000",
        "attributes": [{"key": k, "value": any_value(v)} for k, v in (attrs or {}).items()],
    }
    span.update(extra)
    return span


def export(*spans: dict[str, object], service: str = "agent-a") -> str:
    """One ExportTraceServiceRequest as a JSON line."""
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {
                        "attributes": [{"key": "service.name", "value": {"stringValue": service}}]
                    },
                    "scopeSpans": [{"scope": {"name": "handoffscope"}, "spans": list(spans)}],
                }
            ]
        }
    )


def ids(ts: TraceSet) -> list[str]:
    return [r[0] for r in ts.con.execute("SELECT span_id FROM spans ORDER BY span_id").fetchall()]


@pytest.mark.parametrize("name", sorted(UPSTREAM_SPANS))
def test_every_upstream_file_loads_with_the_right_span_count(name: str) -> None:
    ts = load_traces(FIXTURES / name)
    assert ts.span_count == UPSTREAM_SPANS[name]
    assert ts.problems == []


def test_the_upstream_logs_file_is_refused_with_a_clear_message() -> None:
    with pytest.raises(AuditError) as info:
        load_traces(FIXTURES / "opentelemetry-proto__examples__logs.json")
    message = str(info.value)
    assert "opentelemetry-proto__examples__logs.json" in message
    assert "OTLP logs, not traces" in message


def test_the_whole_fixture_directory_loads_and_names_the_logs_file() -> None:
    ts = load_traces(FIXTURES)
    # Files repeat spans of other files (same ids): each unique span is counted once.
    assert ts.span_count == 29
    assert ts.duplicate_count == 4
    assert [p.file.rsplit("/", 1)[-1] for p in ts.problems] == [
        "opentelemetry-proto__examples__logs.json"
    ]


def test_attributes_events_links_and_resource_are_kept() -> None:
    ts = load_traces(
        FIXTURES
        / "jaeger__internal__storage__integration__fixtures__traces__link_attributes_trace.json"
    )
    (links,) = ts.con.execute("SELECT links FROM spans").fetchall()[0]
    assert len(links) == 3
    assert links[0]["attributes"]["sameplacelinkattribute2"] == "123"
    ts = load_traces(
        FIXTURES
        / "opentelemetry-rust__opentelemetry-otlp__tests__integration_test__expected__traces.json"
    )
    row = ts.con.execute(
        "SELECT events, resource_attributes['service.name'], scope_name FROM spans"
        " WHERE name = 'operation'"
    ).fetchall()[0]
    assert row[0][0]["name"] == "Nice operation!"
    assert row[0][0]["attributes"] == {"bogons": "100"}
    assert row[1:] == ("basic-otlp-tracing-example", "ex.com/basic")


def test_enum_names_and_numbers_and_string_or_number_int64_read_the_same() -> None:
    ts = load_traces(FIXTURES / "genai-interlingua__testdata__vercel__in.json")
    rows = ts.con.execute(
        "SELECT kind, status_code, input_tokens, output_tokens FROM spans"
        " WHERE name = 'ai.generateText.doGenerate'"
    ).fetchall()
    assert rows == [("INTERNAL", "UNSET", 412, 27)]
    ts = load_traces(FIXTURES / "genai-interlingua__testdata__openinference__in.json")
    assert ts.con.execute("SELECT kind, status_code FROM spans").fetchall() == [("INTERNAL", "OK")]


@pytest.mark.parametrize(
    ("name", "tokens", "cost"),
    [
        ("genai-interlingua__testdata__openinference__in.json", (412, 27), None),
        ("genai-interlingua__testdata__litellm__in.json", (412, 27), 5.88e-05),
        ("genai-interlingua__testdata__openllmetry__in.json", (412, 27), None),
        ("genai-interlingua__testdata__raw__in.json", (412, 27), None),
    ],
)
def test_foreign_token_and_cost_keys_are_normalised(
    name: str, tokens: tuple[int, int], cost: float | None
) -> None:
    ts = load_traces(FIXTURES / name)
    rows = ts.con.execute(
        "SELECT input_tokens, output_tokens, cost_usd FROM spans WHERE input_tokens IS NOT NULL"
    ).fetchall()
    assert rows == [(*tokens, cost)]


def test_self_parenting_span_gets_no_parent() -> None:
    ts = load_traces(FIXTURES / "elastic-ottl-playground__testdata__traces.json")
    rows = dict(ts.con.execute("SELECT name, parent_span_id FROM spans").fetchall())
    assert rows == {"Me too": None, "I'm a server span": "eee19b7ec3c1b173"}


def test_uppercase_and_base64_ids_become_lowercase_hex(tmp_path: Path) -> None:
    trace = bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736")
    span = bytes.fromhex("00f067aa0ba902b7")
    line = export(
        span_json(
            base64.b64encode(span).decode(),
            trace_id=base64.b64encode(trace).decode(),
            parentSpanId="00F067AA0BA902B8",
        )
    )
    (tmp_path / "b64.jsonl").write_text(line + "\n")
    ts = load_traces(tmp_path / "b64.jsonl")
    assert ts.con.execute("SELECT trace_id, span_id, parent_span_id FROM spans").fetchall() == [
        ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "00f067aa0ba902b8")
    ]


def test_torn_last_line_and_malformed_line_are_reported_and_the_rest_loads(tmp_path: Path) -> None:
    good = [export(span_json(f"{i:016x}")) for i in range(1, 5)]
    text = "\n".join([good[0], "{not json", good[1], "", good[2], good[3][: len(good[3]) // 2]])
    (tmp_path / "t.jsonl").write_text(text)
    ts = load_traces(tmp_path)
    assert ids(ts) == [f"{i:016x}" for i in range(1, 4)]
    assert [(p.line, p.message.split(" (")[0]) for p in ts.problems] == [
        (2, "not valid JSON"),
        (6, "the last line is incomplete JSON"),
    ]
    assert str(ts.problems[0]).startswith(f"{tmp_path / 't.jsonl'}:2: ")


def test_duplicates_across_files_and_lines_count_once(tmp_path: Path) -> None:
    line = export(span_json("00000000000000aa"), span_json("00000000000000bb"))
    (tmp_path / "a.jsonl").write_text(line + "\n" + line + "\n")
    (tmp_path / "b.jsonl").write_text(line + "\n")
    ts = load_traces(tmp_path)
    assert ts.span_count == 2
    assert ts.duplicate_count == 4
    assert ts.con.execute("SELECT DISTINCT source_file, source_line FROM spans").fetchall() == [
        (str(tmp_path / "a.jsonl"), 1)
    ]


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_compressed_files_are_recognised_by_content(tmp_path: Path, codec: str) -> None:
    data = (export(span_json()) + "\n").encode()
    packed = gzip.compress(data) if codec == "gzip" else zstandard.ZstdCompressor().compress(data)
    (tmp_path / f"t.jsonl.{'gz' if codec == 'gzip' else 'zst'}").write_bytes(packed)
    assert load_traces(tmp_path).span_count == 1


def test_non_utf8_bytes_lose_only_their_line(tmp_path: Path) -> None:
    lines = [export(span_json(f"{i:016x}")).encode() for i in range(1, 4)]
    lines[1] = lines[1].replace(b"handoff.validate", b"handoff.\xff\xfe")
    # Large enough to be read by DuckDB first, which refuses it and falls back.
    padding = [b"" for _ in range(10)]
    (tmp_path / "t.jsonl").write_bytes(b"\n".join(lines + padding))
    ts = load_traces(tmp_path / "t.jsonl")
    assert ids(ts) == ["0000000000000001", "0000000000000003"]
    assert [p.line for p in ts.problems] == [2]
    assert "UTF-8" in ts.problems[0].message


def test_manifests_in_a_directory_are_skipped_quietly_but_named_files_are_reported(
    tmp_path: Path,
) -> None:
    (tmp_path / "traces.jsonl").write_text(export(span_json()) + "\n")
    (tmp_path / "manifest.json").write_text(json.dumps({"faults": []}, indent=2))
    ts = load_traces(tmp_path)
    assert ts.problems == [] and ts.skipped == [str(tmp_path / "manifest.json")]
    ts = load_traces([tmp_path / "traces.jsonl", tmp_path / "manifest.json"])
    assert [p.message.split(" (")[0] for p in ts.problems] == ["JSON, but not an OTLP trace export"]


def test_globs_and_missing_paths(tmp_path: Path) -> None:
    (tmp_path / "x.jsonl").write_text(export(span_json()) + "\n")
    ts = load_traces([str(tmp_path / "*.jsonl"), str(tmp_path / "nope.jsonl")])
    assert ts.span_count == 1
    assert ts.problems == [
        LoadProblem(str(tmp_path / "nope.jsonl"), None, "no such file or directory")
    ]


def test_nothing_usable_raises_an_audit_error_naming_the_path(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(AuditError, match="no spans found in"):
        load_traces(tmp_path / "empty.jsonl")
    with pytest.raises(AuditError, match="no such file or directory"):
        load_traces(tmp_path / "missing")


def test_pretty_documents_back_to_back(tmp_path: Path) -> None:
    a = json.loads(export(span_json("0000000000000001")))
    b = json.loads(export(span_json("0000000000000002")))
    (tmp_path / "docs.json").write_text(json.dumps(a, indent=2) + "\n" + json.dumps(b, indent=2))
    ts = load_traces(tmp_path / "docs.json")
    assert ids(ts) == ["0000000000000001", "0000000000000002"]
    lines = [r[0] for r in ts.con.execute("SELECT source_line FROM spans ORDER BY 1").fetchall()]
    assert lines[0] == 1 and lines[1] > 10


def test_append_lines_adds_new_spans_once_and_reports_problems(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(export(span_json("0000000000000001")) + "\n")
    ts = load_traces(tmp_path)
    added = append_lines(
        ts,
        [
            (2, export(span_json("0000000000000001"), span_json("0000000000000002"))),
            (3, "garbage"),
            (4, export(span_json("0000000000000002"))),
        ],
        file="live.jsonl",
    )
    assert added == 1
    assert ids(ts) == ["0000000000000001", "0000000000000002"]
    assert ts.duplicate_count == 2
    assert [str(p).split(" (")[0] for p in ts.problems] == ["live.jsonl:3: not valid JSON"]


def test_typed_handoff_columns(tmp_path: Path) -> None:
    attrs = {
        "handoff.task_id": "t-1",
        "handoff.attempt": 2,
        "handoff.late": True,
        "handoff.validation_latency_ms": 2500.5,
        "handoff.external_effects": ["email", "payment"],
        "gen_ai.agent.name": "writer",
        "custom.key": "kept",
    }
    (tmp_path / "a.jsonl").write_text(export(span_json(attrs=attrs)) + "\n")
    ts = load_traces(tmp_path)
    row = ts.con.execute(
        'SELECT "handoff.task_id", "handoff.attempt", "handoff.late",'
        ' "handoff.validation_latency_ms", "handoff.external_effects", agent, attributes'
        " FROM spans"
    ).fetchall()[0]
    assert row == ("t-1", 2, True, 2500.5, ["email", "payment"], "writer", {"custom.key": "kept"})


# ----------------------------------------------------------------------------------------
# Memory: a load that outgrows DuckDB's limit gets more, up to a ceiling
# ----------------------------------------------------------------------------------------
_FAULT_MIX = Path(__file__).resolve().parent.parent / "sample_traces" / "fault-mix"


def _limit_mib(con) -> float:
    value, unit = str(
        con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    ).split()
    return float(value) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[unit]


def test_a_load_that_runs_out_of_memory_raises_the_limit_and_loses_nothing():
    from auditor.load import connect

    expected = load_traces(_FAULT_MIX)
    con = connect()
    # DuckDB's line buffers alone are larger than this: the first statement runs out.
    con.execute("SET memory_limit = '16MB'")
    traces = load_traces(_FAULT_MIX, con=con)
    assert _limit_mib(con) > 16
    assert traces.span_count == expected.span_count > 0
    assert traces.problems == expected.problems
    columns = "trace_id, span_id, name, cost_usd"
    assert (
        con.execute(f"SELECT {columns} FROM spans ORDER BY ALL").fetchall()
        == expected.con.execute(f"SELECT {columns} FROM spans ORDER BY ALL").fetchall()
    )


def test_out_of_memory_at_the_ceiling_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, capsys):
    from auditor import readers
    from auditor.cli import main
    from auditor.load import MEMORY_LIMIT_ENV, connect

    monkeypatch.setattr(readers, "MEMORY_CEILING_BYTES", 8 * 1024**2)
    con = connect()
    con.execute("SET memory_limit = '4MB'")
    with pytest.raises(AuditError, match=f"ran out of memory.*{MEMORY_LIMIT_ENV}"):
        load_traces(_FAULT_MIX, con=con)
    # Through the command line: the message, no traceback. Inputs over 256 MB get a limited
    # connection of their own; a tiny limit and ceiling make the sample run out the same way.
    monkeypatch.setattr("auditor.load.LARGE_INPUT_BYTES", 0)
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "4MB")
    assert main(["audit", str(_FAULT_MIX)]) == 2
    err = capsys.readouterr().err
    assert "out of memory" in err and MEMORY_LIMIT_ENV in err and "Traceback" not in err
