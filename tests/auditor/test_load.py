"""Loading OTLP JSON into the spans table: real upstream files, damaged input, every encoding."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import pytest
import zstandard

from auditor import AuditError, LoadProblem, TraceSet, append_lines, connect, load_traces
from tests.support.paths import REPO, TESTS

FIXTURES = TESTS / "fixtures" / "otlp"

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
    if "file-exporter" in name:
        # The specification's example leaves every id empty: each span is reported.
        assert len(ts.problems) == ts.span_count
        assert all("no traceId and no spanId" in p.message for p in ts.problems)
    else:
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
    files = {p.file.rsplit("/", 1)[-1] for p in ts.problems}
    assert files == {
        "opentelemetry-proto__examples__logs.json",
        # The specification's example, whose spans have empty ids.
        "opentelemetry-specification__specification__protocol__file-exporter.md__traces-example.jsonl",
    }


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


def test_non_utf8_bytes_are_read_as_replacement_characters_and_reported(tmp_path: Path) -> None:
    """Their line once was skipped whole, and its spans lost (``watch`` read them)."""
    lines = [export(span_json(f"{i:016x}")).encode() for i in range(1, 4)]
    lines[1] = lines[1].replace(b"handoff.validate", b"handoff.\xff\xfe")
    # Large enough to be read by DuckDB first, which refuses it and falls back.
    padding = [b"" for _ in range(10)]
    (tmp_path / "t.jsonl").write_bytes(b"\n".join(lines + padding))
    ts = load_traces(tmp_path / "t.jsonl")
    assert ids(ts) == ["0000000000000001", "0000000000000002", "0000000000000003"]
    names = ts.con.execute("SELECT name FROM spans ORDER BY span_id").fetchall()
    assert names[1] == ("handoff.\ufffd\ufffd",)
    byte = lines[1].index(b"\xff") + 1
    assert [str(p).removeprefix(str(tmp_path)) for p in ts.problems] == [
        f"/t.jsonl:2: not UTF-8 text (byte {byte}); it was read as U+FFFD, the replacement"
        " character"
    ]


def test_lines_that_are_not_utf8_are_listed_up_to_the_cap_then_counted(tmp_path: Path) -> None:
    """Every such line was listed: a file of Latin-1 text gave a problem per line."""
    from auditor.loading.problems import MAX_PROBLEMS_PER_FILE
    from auditor.watch.follow import MAX_NOTES_PER_READ, Follower

    lines = [
        export(span_json(f"{i:016x}", name="cafe!")).encode().replace(b"cafe!", b"caf\xe9")
        for i in range(1, MAX_PROBLEMS_PER_FILE + 31)
    ]
    (tmp_path / "t.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    ts = load_traces(tmp_path / "t.jsonl")
    assert ts.span_count == len(lines)
    assert [p.line for p in ts.problems] == [*range(1, MAX_PROBLEMS_PER_FILE + 1), None]
    assert ts.problems[-1].message.startswith("30 more lines that are not UTF-8 text")
    follower = Follower(tmp_path)
    notes = follower.poll().notes
    follower.close()
    assert notes[:MAX_NOTES_PER_READ] == [
        f"t.jsonl:{p.line}: {p.message}" for p in ts.problems[:MAX_NOTES_PER_READ]
    ]
    assert notes[MAX_NOTES_PER_READ:] == [
        f"t.jsonl: {len(lines) - MAX_NOTES_PER_READ} more lines that are not UTF-8 text in"
        " this read are not listed; in each, those bytes were read as U+FFFD"
    ]


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


def test_nothing_usable_names_the_empty_files_and_counts_the_unlisted_problems(
    tmp_path: Path,
) -> None:
    """An empty file is said to be empty, not to hold exports without a span; and problems
    past the first ten, which no report shows when nothing loads, are counted by kind."""
    (tmp_path / "e.jsonl").write_bytes(b"")
    (tmp_path / "blank.jsonl").write_text("\n \n")
    (tmp_path / "bare.jsonl").write_text('{"resourceSpans": []}\n')
    with pytest.raises(AuditError) as raised:
        load_traces([tmp_path / "e.jsonl", tmp_path / "blank.jsonl", tmp_path / "bare.jsonl"])
    said = str(raised.value).replace(f"{tmp_path}/", "").splitlines()
    assert said[1:4] == [
        "  e.jsonl: the file is empty (0 bytes)",
        "  blank.jsonl: the file holds only blank lines",
        "  bare.jsonl: the file holds OTLP trace exports, but without any span",
    ]
    (tmp_path / "odd.jsonl").write_text("{}\n" * 12)
    (tmp_path / "notes.txt").write_text("oops\nnope\n")
    with pytest.raises(AuditError) as raised:
        load_traces([tmp_path / "odd.jsonl", tmp_path / "notes.txt"])
    said = str(raised.value).splitlines()
    assert said[11:14] == [
        "  ... and 3 more problems, by kind:",
        "    2 × JSON, but not an OTLP trace export",
        "    1 × not a trace file",
    ], said


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


def _kv(key: object, value: str = "v") -> dict[str, object]:
    return {"key": key, "value": {"stringValue": value}}


@pytest.mark.parametrize(
    ("attributes", "receiver", "rest"),
    [
        pytest.param([_kv("handoff.receiver", "a")], "a", {}, id="only-typed-keys"),
        pytest.param([], None, {}, id="no-attributes"),
        pytest.param(
            [_kv("handoff.receiver", "a"), _kv("handoff.receiver", "b")],
            "a",
            {},
            id="typed-key-twice",
        ),
        pytest.param(
            [_kv("handoff.receiver", "a"), _kv(None, "b"), {"value": {"stringValue": "c"}}],
            "a",
            {},
            id="keys-missing",
        ),
        pytest.param(
            [_kv("x", "1"), _kv("handoff.receiver", "a"), _kv("x", "2")],
            "a",
            {"x": "1"},
            id="other-key-twice",
        ),
        pytest.param(
            [_kv("handoff.receiver", "a"), _kv("handoff.sender", "s"), _kv("y", "1")],
            "a",
            {"y": "1"},
            id="typed-and-other",
        ),
    ],
)
def test_attributes_without_a_column_go_to_the_map_first_one_winning(
    tmp_path: Path,
    attributes: list[dict[str, object]],
    receiver: str | None,
    rest: dict[str, str],
) -> None:
    events = [{"name": "e", "timeUnixNano": "1", "attributes": attributes}]
    line = export(span_json(attributes=attributes, events=events), service="svc")
    (tmp_path / "a.jsonl").write_text(line + "\n")
    ts = load_traces(tmp_path)
    row = ts.con.execute(
        'SELECT "handoff.receiver", attributes, events[1].attributes FROM spans'
    ).fetchall()
    first: dict[str, str] = {}
    for kv in attributes:
        key, value = kv.get("key"), kv["value"]
        if isinstance(key, str) and isinstance(value, dict):
            first.setdefault(key, value["stringValue"])
    assert row == [(receiver, rest, first)]
    assert ts.problems == []


# ----------------------------------------------------------------------------------------
# Memory: a load that outgrows DuckDB's limit gets more, up to a ceiling
# ----------------------------------------------------------------------------------------
_FAULT_MIX = REPO / "sample_traces" / "fault-mix"


def _limit_mib(con) -> float:
    value, unit = str(
        con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    ).split()
    return float(value) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[unit]


def test_a_load_that_runs_out_of_memory_raises_the_limit_and_loses_nothing():
    from auditor.loading.load import connect

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
    from auditor.cli import main
    from auditor.database import statements
    from auditor.loading.load import connect
    from collector.environment_variables import HANDOFFSCOPE_MEMORY_LIMIT as MEMORY_LIMIT_ENV

    monkeypatch.setattr(statements, "MEMORY_CEILING_BYTES", 8 * 1024**2)
    con = connect()
    con.execute("SET memory_limit = '4MB'")
    with pytest.raises(AuditError, match=f"ran out of memory.*{MEMORY_LIMIT_ENV}"):
        load_traces(_FAULT_MIX, con=con)
    # Through the command line: the message, no traceback. Inputs over 256 MB get a limited
    # connection of their own; a tiny limit and ceiling make the sample run out the same way.
    monkeypatch.setattr("auditor.loading.load.LARGE_INPUT_BYTES", 0)
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "4MB")
    assert main(["audit", str(_FAULT_MIX)]) == 2
    err = capsys.readouterr().err
    assert "out of memory" in err and MEMORY_LIMIT_ENV in err and "Traceback" not in err


# ----------------------------------------------------------------------------------------
# Damaged input: each fault loses only what it touches, and says so
# ----------------------------------------------------------------------------------------
def _cut_emoji_line(*span_ids: str) -> str:
    """An export whose last span's name ends in a lone high surrogate escape (\\ud83d)."""
    spans = [span_json(i, name=f"span {i}") for i in span_ids]
    text = export(*spans)
    assert text.count(f'"span {span_ids[-1]}"') == 1
    return text.replace(f'"span {span_ids[-1]}"', f'"cut {span_ids[-1]} \\ud83d"')


def _names(ts: TraceSet) -> dict[str, str]:
    return dict(ts.con.execute("SELECT span_id, name FROM spans").fetchall())


@pytest.mark.parametrize(
    "layout",
    ["alone", "between good lines", "with a non-UTF-8 line", "pretty document"],
)
def test_a_lone_surrogate_escape_is_read_as_a_replacement_character(
    tmp_path: Path, layout: str
) -> None:
    cut = _cut_emoji_line("00000000000000a1", "00000000000000a2")
    good = [export(span_json(f"{i:016x}")) for i in range(1, 3)]
    if layout == "alone":
        data, line = (cut + "\n").encode(), 1
    elif layout == "between good lines":  # DuckDB reads the file, then the line is repaired
        data, line = "\n".join([good[0], cut, good[1], ""]).encode(), 2
    elif layout == "with a non-UTF-8 line":  # DuckDB refuses the file; Python reads it
        data, line = b"\n".join([b"\xff\xfe", cut.encode(), good[0].encode(), b""]), 2
    else:
        data, line = json.dumps(json.loads(cut), indent=2).encode(), 1
    (tmp_path / "t.jsonl").write_bytes(data)
    ts = load_traces(tmp_path / "t.jsonl")
    names = _names(ts)
    assert names["00000000000000a1"] == "span 00000000000000a1"
    assert names["00000000000000a2"] == "cut 00000000000000a2 \ufffd"
    replaced = [p for p in ts.problems if "surrogate" in p.message]
    assert [(p.file, p.line) for p in replaced] == [(str(tmp_path / "t.jsonl"), line)]
    assert "U+FFFD" in replaced[0].message


def test_surrogate_pairs_and_escaped_backslashes_are_left_alone(tmp_path: Path) -> None:
    line = export(span_json(name="x")).replace('"x"', '"\\ud83d\\ude00 \\\\ud83d \\udc00"')
    (tmp_path / "t.jsonl").write_text(line + "\n")
    ts = load_traces(tmp_path)
    assert list(_names(ts).values()) == ["\U0001f600 \\ud83d \ufffd"]
    assert len(ts.problems) == 1


def test_lines_in_memory_with_lone_surrogates_are_kept(tmp_path: Path) -> None:
    ts = TraceSet(con=connect())
    escaped = _cut_emoji_line("00000000000000b1")
    # A str holding the surrogate itself (not its escape), which cannot be encoded as UTF-8.
    raw = export(span_json("00000000000000b2", name="raw \ud83d")).replace("\\ud83d", "\ud83d")
    assert "\\u" not in raw
    added = append_lines(ts, [(1, escaped), (2, raw)], file="live.jsonl")
    assert added == 2
    assert sorted(_names(ts).values()) == ["cut 00000000000000b1 \ufffd", "raw \ufffd"]
    assert sorted(p.line or 0 for p in ts.problems) == [1, 2]


def _zstd_per_line(lines: list[bytes], ends: list[int] | None = None) -> bytes:
    """One zstd frame with a block per line, as a streaming writer flushing each line;
    ``ends`` receives the size of the stream after each line."""
    import io

    out = io.BytesIO()
    writer = zstandard.ZstdCompressor().stream_writer(out, closefd=False)
    for line in lines:
        writer.write(line)
        writer.flush(zstandard.FLUSH_BLOCK)
        if ends is not None:
            ends.append(out.tell())
    writer.close()
    return out.getvalue()


def test_a_truncated_zstd_file_keeps_what_precedes_the_cut_and_says_so(tmp_path: Path) -> None:
    lines = [(export(span_json(f"{i:016x}")) + "\n").encode() for i in range(1, 4)]
    ends: list[int] = []
    data = _zstd_per_line(lines, ends)
    (tmp_path / "whole.jsonl.zst").write_bytes(data)
    (tmp_path / "cut.jsonl.zst").write_bytes(data[: ends[1] + 4])  # inside the third block
    whole = load_traces(tmp_path / "whole.jsonl.zst")
    assert whole.span_count == 3 and whole.problems == []
    ts = load_traces(tmp_path / "cut.jsonl.zst")
    assert ids(ts) == ["0000000000000001", "0000000000000002"]
    assert [(p.file, p.line) for p in ts.problems] == [(str(tmp_path / "cut.jsonl.zst"), 3)]
    assert "truncated" in ts.problems[0].message


def test_a_truncated_single_block_zstd_file_is_named_as_truncated(tmp_path: Path) -> None:
    data = zstandard.ZstdCompressor().compress((export(span_json()) + "\n").encode())
    (tmp_path / "cut.jsonl.zst").write_bytes(data[:-10])
    with pytest.raises(AuditError, match=r"cut\.jsonl\.zst:1: .*truncated"):
        load_traces(tmp_path / "cut.jsonl.zst")


def test_zstd_truncation_is_spotted_from_frame_headers(tmp_path: Path) -> None:
    from auditor.loading.sources import zstd_truncated

    payload = b"".join((export(span_json(f"{i:016x}")) + "\n").encode() for i in range(200))
    skippable = b"\x50\x2a\x4d\x18" + (3).to_bytes(4, "little") + b"abc"
    frames = {
        "one frame": zstandard.ZstdCompressor().compress(payload),
        "checksum": zstandard.ZstdCompressor(write_checksum=True).compress(payload),
        "blocks": _zstd_per_line([payload[:5000], payload[5000:]]),
        "two frames": zstandard.ZstdCompressor().compress(payload) * 2,
        "skippable": skippable + zstandard.ZstdCompressor().compress(payload),
    }
    for name, data in frames.items():
        path = tmp_path / f"{name}.zst"
        path.write_bytes(data)
        assert not zstd_truncated(str(path)), name
        for cut in (1, 3, 4, len(data) // 3):
            path.write_bytes(data[:-cut])
            assert zstd_truncated(str(path)), (name, cut)


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("codec", ["none", "gzip", "zstd"])
@pytest.mark.parametrize("shape", ["lines", "pretty"])
def test_a_leading_byte_order_mark_is_skipped(tmp_path: Path, codec: str, shape: str) -> None:
    if shape == "pretty":
        text = (FIXTURES / "opentelemetry-proto__examples__trace.json").read_bytes()
    else:
        text = "".join(export(span_json(f"{i:016x}")) + "\n" for i in range(1, 4)).encode()
    data = BOM + text
    if codec == "gzip":
        data = gzip.compress(data)
    elif codec == "zstd":
        data = zstandard.ZstdCompressor().compress(data)
    (tmp_path / "t.json").write_bytes(data)
    ts = load_traces(tmp_path / "t.json")
    assert ts.problems == []
    assert ts.span_count == (1 if shape == "pretty" else 3)


def test_a_byte_order_mark_on_lines_in_memory_is_skipped() -> None:
    ts = TraceSet(con=connect())
    first = "\ufeff" + export(span_json("0000000000000001"))
    assert append_lines(ts, [(1, first), (2, export(span_json("0000000000000002")))], file="f") == 2
    assert ts.problems == []


def test_a_named_pipe_in_a_walked_folder_is_skipped_not_read(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "good.jsonl").write_text(export(span_json()) + "\n")
    os.mkfifo(folder / "pipe.jsonl")
    # Opening the pipe would block forever: load in a child process that a timeout can end.
    script = (
        "import sys; from auditor import load_traces; ts = load_traces(sys.argv[1]);"
        " print(ts.span_count); print(*ts.problems, sep='\\n')"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    assert out == [
        "1",
        f"{folder / 'pipe.jsonl'}: not a regular file: a named pipe (FIFO); skipped",
    ]


def _store(tmp_path: Path, name: str, change: str) -> Path:
    import duckdb

    traces = load_traces(FIXTURES / "opentelemetry-proto__examples__trace.json")
    out = tmp_path / name
    traces.con.execute(f"COPY (SELECT {change} FROM spans) TO '{out}' (FORMAT parquet)")
    assert duckdb.execute(f"SELECT count(*) FROM '{out}'").fetchall() == [(1,)]
    return out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            "* REPLACE (CAST(start_unix_nano AS VARCHAR) AS start_unix_nano)",
            "column start_unix_nano is VARCHAR, not BIGINT",
        ),
        ("* EXCLUDE (trace_id)", "no column trace_id"),
    ],
)
def test_parquet_with_the_store_columns_but_not_their_types_is_refused_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str, message: str
) -> None:
    from auditor.cli import main

    good = _store(tmp_path, "good.parquet", "*")
    assert load_traces(good).span_count == 1
    bad = _store(tmp_path, "bad.parquet", change)
    with pytest.raises(AuditError, match=f"bad.parquet: .*{message}"):
        load_traces(bad)
    # Read along with other files, it is one problem and the rest loads.
    ts = load_traces([good, bad])
    assert ts.span_count == 1 and [p.file for p in ts.problems] == [str(bad)]
    assert main(["audit", str(bad)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("codec", ["none", "gzip"])
@pytest.mark.parametrize("newline", [True, False])
def test_only_an_unterminated_last_line_is_called_torn(
    tmp_path: Path, codec: str, newline: bool
) -> None:
    good = [export(span_json(f"{i:016x}")) for i in range(1, 4)]
    data = ("\n".join([*good, "garbage"]) + ("\n" if newline else "")).encode()
    (tmp_path / "t.jsonl").write_bytes(gzip.compress(data) if codec == "gzip" else data)
    ts = load_traces(tmp_path / "t.jsonl")
    assert ts.span_count == 3
    assert [p.line for p in ts.problems] == [4]
    torn = "incomplete" in ts.problems[0].message
    assert torn is not newline
    if newline:
        assert ts.problems[0].message.startswith("not valid JSON")


def test_one_bad_line_between_pretty_documents_loses_only_itself(tmp_path: Path) -> None:
    a = json.dumps(json.loads(export(span_json("0000000000000001"))), indent=2)
    b = json.dumps(json.loads(export(span_json("0000000000000002"))), indent=2)
    c = json.dumps(json.loads(export(span_json("0000000000000003"))), indent=2)
    torn = b[: len(b) // 2]
    (tmp_path / "docs.json").write_text("\n".join([a, "garbage", torn, c, torn]))
    ts = load_traces(tmp_path / "docs.json")
    assert ids(ts) == ["0000000000000001", "0000000000000003"]
    first = a.count("\n") + 2
    assert [p.line for p in ts.problems] == [
        first,
        first + 1,
        first + 2 + torn.count("\n") + c.count("\n") + 1,
    ]
    assert "reading went on at line" in ts.problems[0].message


def test_attribution_that_runs_out_of_memory_raises_the_limit_and_resolves_the_same():
    """The walk up the ancestors holds every unnamed span; a small limit grows, as a load's."""
    from auditor.model.attribution import attribute

    fixture = TESTS / "fixtures" / "frameworks" / "langgraph-openinference"
    expected = load_traces(fixture)
    traces = load_traces(fixture)
    query = "SELECT span_id, agent FROM spans ORDER BY ALL"
    traces.con.execute('UPDATE spans SET agent = NULL WHERE "gen_ai.agent.name" IS NULL')
    traces.con.execute("SET memory_limit = '256KB'")
    assert attribute(traces.con) > 0
    assert _limit_mib(traces.con) > 0.25
    assert traces.con.execute(query).fetchall() == expected.con.execute(query).fetchall()


def test_a_command_that_runs_out_of_memory_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys
):
    """Wherever DuckDB runs out, the user reads what happened and what to set, not a trace."""
    import duckdb

    from auditor import commands
    from auditor.cli import main
    from collector.environment_variables import HANDOFFSCOPE_MEMORY_LIMIT as MEMORY_LIMIT_ENV

    def exhausted(*args: object, **kwargs: object) -> None:
        raise duckdb.OutOfMemoryException(
            "Out of Memory Error: failed to pin block of size 256.0 KiB\n\nPossible solutions:"
        )

    monkeypatch.setattr(commands, "load_traces", exhausted)
    assert main(["audit", str(_FAULT_MIX)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "Possible solutions" not in err
    assert "failed to pin block" in err and MEMORY_LIMIT_ENV in err


@pytest.mark.parametrize("set_by_user", [False, True])
def test_a_load_of_more_spans_than_a_limit_is_meant_for_leaves_that_limit_per_as_many(
    set_by_user: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an audit derives grows with the spans: a large load leaves it the starting limit
    per as many spans as that limit is meant for (else the derived tables spill to disk
    although the machine has the memory), unless the user set the limit."""
    from auditor import audit
    from auditor.database import statements
    from collector.environment_variables import HANDOFFSCOPE_MEMORY_LIMIT as MEMORY_LIMIT_ENV

    monkeypatch.setattr("auditor.loading.load.LARGE_INPUT_BYTES", 0)
    if set_by_user:
        monkeypatch.setenv(MEMORY_LIMIT_ENV, "640MB")
    else:
        monkeypatch.delenv(MEMORY_LIMIT_ENV, raising=False)
    traces = load_traces(_FAULT_MIX)  # fewer spans than the limit is meant for
    spans = traces.span_count
    before = _limit_mib(traces.con)
    assert round(before) == 610
    monkeypatch.setattr(statements, "SPANS_PER_LIMIT", spans // 3)
    traces = load_traces(_FAULT_MIX)
    audit(traces)
    wanted = before if set_by_user else before * spans / (spans // 3)
    # DuckDB shows a limit of gigabytes to a tenth of one.
    assert _limit_mib(traces.con) == pytest.approx(wanted, abs=103)


def test_a_large_input_gets_a_compressed_database_and_the_same_audit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from auditor import audit
    from auditor.loading.load import LARGE_DATABASE
    from auditor.report.json_report import render_json

    expected = audit(load_traces(_FAULT_MIX))
    monkeypatch.setattr("auditor.loading.load.LARGE_INPUT_BYTES", 0)
    traces = load_traces(_FAULT_MIX)
    assert traces.con.execute("SELECT current_database()").fetchone() == (LARGE_DATABASE,)
    assert round(_limit_mib(traces.con)) == 610  # 640MB, in MiB
    result = audit(traces)
    assert render_json(result) == render_json(expected)


def test_large_values_nothing_reads_are_left_out_and_read_ones_kept(tmp_path: Path) -> None:
    from auditor.loading.read_keys import LARGE_VALUE_CHARS, READ_KEYS
    from auditor.model import conventions

    large = "x" * (LARGE_VALUE_CHARS + 1)
    unread = "llm.input_messages.0.message.content"
    assert unread not in READ_KEYS
    # Every key a convention names is kept, whatever its size.
    assert {*conventions.ARGUMENT_KEYS, *conventions.CONVERSATION_KEYS} <= set(READ_KEYS)
    attrs = {
        unread: large,
        # Read only through patterns: a large value keeps what they match, and no more.
        conventions.OPENINFERENCE_INPUT: '{"member_id": "researcher", "pad": "' + large + '"}',
        conventions.OPENINFERENCE_OUTPUT: f"AgentSetup(current_agent_name='writer', {large})",
        conventions.GEN_AI_TOOL_ARGUMENTS: '{"q": "' + large + '"}',
        "custom.small": "kept",
        "custom.at_the_limit": large[:-1],
    }
    line = export(span_json("0000000000000001", name="tool", attrs=attrs))
    (tmp_path / "a.jsonl").write_text(line + "\n")
    ts = load_traces(tmp_path)
    # The same through the lines handed over in memory (watch's path).
    append_lines(ts, [(1, line.replace("0000000000000001", "0000000000000002"))], file="m.jsonl")
    rows = ts.con.execute("SELECT attributes, agent FROM spans ORDER BY span_id").fetchall()
    assert len(rows) == 2
    for found, agent in rows:
        assert found == {
            conventions.OPENINFERENCE_INPUT: '"member_id": "researcher"',
            conventions.OPENINFERENCE_OUTPUT: "current_agent_name='writer\"",
            conventions.GEN_AI_TOOL_ARGUMENTS: "",
            "custom.small": "kept",
            "custom.at_the_limit": large[:-1],
        }
        assert agent == "writer"  # read from what was kept of the output


# Text the patterns that read a span's input, output and arguments may meet: escaped JSON,
# reprs, names in the wrong field, matches that overlap, a capture cut by the end.
_PATTERN_TEXTS = [
    "AgentSetup(input='hi', current_agent_name='triage', x=1)",
    '{"current_agent_name": "triage", "agent_name": "bob"}',
    '{\\"current_agent_name\\": \\"triage\\", \\"member_id\\": \\"res\\"}',
    '{"agent_name": "bob", "current_agent_name": "to_agent"}',
    'current_agent_name="agent_name": "x"',
    'xcurrent_agent_name="a" current_agent_name="b"',
    '"to_agent" "agent_name":"q"',
    '"agent_name": "current_agent_name=\'zz", y',
    "current_agent_name='cut at the end",
    '"coworker": "',
    "nothing to read",
]


def test_what_is_kept_of_a_large_value_reads_as_the_whole_value() -> None:
    import duckdb

    from auditor.database.span_table import _matches
    from auditor.loading.read_keys import LARGE_VALUE_CHARS, LEFT_OUT
    from auditor.model.attribution import PATTERN_READS

    pad = "p" * LARGE_VALUE_CHARS
    values = [v for t in _PATTERN_TEXTS for v in (t, pad + t + pad, pad + t, t + " " + t)]
    con = duckdb.connect()
    con.execute("CREATE TABLE v AS SELECT unnest($1::VARCHAR[]) AS v", [values])
    matched = 0
    # Every pattern that reads these keys is searched only in values holding its words.
    assert {p for _, ps in PATTERN_READS for p in ps} == {p for p, w in LEFT_OUT.words if w}
    for key, patterns in PATTERN_READS:
        for pattern in patterns:
            for words in ((), LEFT_OUT.words):
                kept = _matches("v", patterns, words)
                rows = con.execute(
                    f"SELECT regexp_extract(v, $1, 1), regexp_extract({kept}, $1, 1) FROM v",
                    [pattern],
                ).fetchall()
                assert [kept for _, kept in rows] == [whole for whole, _ in rows], key
            matched += sum(whole != "" for whole, _ in rows)
    assert matched > 40  # the texts do hold what the patterns read


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        (r'\\?"(?:coworker|member_id)\\?"\s*:', ("coworker", "member_id")),
        (r"\b(?:current_agent_name)\s*=", ("current_agent_name",)),
        (r"[(|](?:ab|cd)+z", ("ab", "cd")),  # a class or an escape holds no alternative
        (r"\((?:ab)\)|x", ()),  # an alternative at the top: x matches without the words
        (r"(?:ab|cd)?z", ()),  # the group may be skipped
        (r"(?:ab){0,2}z", ()),
        (r"y((?:ab|cd))", ()),  # inside another group (which could be optional)
        (r"(?i)(?:ab|cd)", ()),  # flags: AB matches too
        (r"(?:a.b|cd)", ()),  # not plain words
    ],
)
def test_a_pattern_is_searched_only_in_values_holding_its_words(
    pattern: str, words: tuple[str, ...]
) -> None:
    import re

    from auditor.loading.read_keys import required_words

    assert required_words(pattern) == words
    # A match always holds one of the words.
    for text in ("x", "z", "abz", "ABz", "cdcdz", "(ab)", "yab", '"coworker":', "a.b"):
        if words and re.search(pattern, text):
            assert any(w in text for w in words), (pattern, text)
