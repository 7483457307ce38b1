"""Line numbers of spans read in parallel: the same rows as the exact (numbering) path.

JSON-lines files are parsed on every thread without line numbers, then numbered from the
order the rows were stored in. These tests compare that with the path that numbers lines
as it reads them, and check that a file which cannot be numbered soundly takes that path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from auditor import load_traces
from auditor.loading import reader_sql, readers
from auditor.loading.readers import Reader
from tests.auditor.test_load import export, span_json
from tests.support.paths import REPO

ROOT = REPO


@pytest.fixture
def exact_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files read by the exact path, in order."""
    seen: list[str] = []
    original = Reader._read_exact

    def spy(self: Reader, sources: list[readers.SourceFile]) -> None:
        seen.extend(s.path for s in sources)
        original(self, sources)

    monkeypatch.setattr(Reader, "_read_exact", spy)
    return seen


def rows(path: Path | list[Path]) -> list[tuple[object, ...]]:
    ts = load_traces(path)
    return ts.con.execute(
        "SELECT source_file, source_line, span_id, name FROM spans ORDER BY ALL"
    ).fetchall()


def all_columns_differ(
    path: Path, out: Path, monkeypatch: pytest.MonkeyPatch, exact_reads: list[str]
) -> int:
    """Rows in one path's ``spans`` and not the other's (both ways), over every column."""
    fast = load_traces(path)
    assert exact_reads == []  # else the comparison below compares the exact path with itself
    with monkeypatch.context() as m:
        m.setattr(Reader, "_read_files", Reader._read_exact)
        exact = load_traces(path)
    exact.con.execute("COPY spans TO ? (FORMAT parquet)", [str(out)])
    one = fast.con.execute(
        "SELECT count(*) FROM (SELECT * FROM spans EXCEPT ALL SELECT * FROM read_parquet(?))",
        [str(out)],
    ).fetchone()
    other = fast.con.execute(
        "SELECT count(*) FROM (SELECT * FROM read_parquet(?) EXCEPT ALL SELECT * FROM spans)",
        [str(out)],
    ).fetchone()
    assert fast.problems == exact.problems
    assert fast.duplicate_count == exact.duplicate_count
    assert one is not None and other is not None
    return int(one[0]) + int(other[0])


@pytest.mark.parametrize(
    "folder",
    ["sample_traces", "tests/fixtures/otlp", "tests/fixtures/frameworks", "tests/fixtures"],
)
def test_every_bundled_trace_file_reads_the_same_on_both_paths(
    folder: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exact_reads: list[str]
) -> None:
    out = tmp_path / "exact.parquet"
    assert all_columns_differ(ROOT / folder, out, monkeypatch, exact_reads) == 0
    assert exact_reads  # the second load did take the exact path


def test_blank_and_repeated_lines_are_numbered_without_the_exact_path(
    tmp_path: Path, exact_reads: list[str]
) -> None:
    one = export(span_json("00000000000000a1"), span_json("00000000000000a2"))
    two = export(span_json("00000000000000b1"))
    # Line 4 repeats line 3: the same text, so the runs of spans sit side by side.
    lines = ["", one, two, two, "", "", export(span_json("00000000000000c1")), ""]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "b.jsonl").write_text(two + "\n\n" + one + "\n")
    ts = load_traces(tmp_path)
    assert exact_reads == []
    got = ts.con.execute(
        "SELECT parse_filename(source_file), source_line, span_id FROM spans ORDER BY ALL"
    ).fetchall()
    # b.jsonl repeats a.jsonl's spans: the first file read keeps them.
    assert got == [
        ("a.jsonl", 2, "00000000000000a1"),
        ("a.jsonl", 2, "00000000000000a2"),
        ("a.jsonl", 3, "00000000000000b1"),
        ("a.jsonl", 7, "00000000000000c1"),
    ]
    assert ts.duplicate_count == 4


def test_a_line_whose_first_resource_has_no_span_takes_the_exact_path(
    tmp_path: Path, exact_reads: list[str]
) -> None:
    late = json.loads(export(span_json("00000000000000d1")))
    late["resourceSpans"].insert(0, {"resource": {}, "scopeSpans": []})
    (tmp_path / "a.jsonl").write_text(
        export(span_json("00000000000000a1")) + "\n" + json.dumps(late) + "\n"
    )
    (tmp_path / "b.jsonl").write_text(export(span_json("00000000000000b1")) + "\n")
    assert rows(tmp_path) == [
        (str(tmp_path / "a.jsonl"), 1, "00000000000000a1", "handoff.validate"),
        (str(tmp_path / "a.jsonl"), 2, "00000000000000d1", "handoff.validate"),
        (str(tmp_path / "b.jsonl"), 1, "00000000000000b1", "handoff.validate"),
    ]
    assert exact_reads == [str(tmp_path / "a.jsonl")]


def test_a_bad_line_sends_only_its_file_down_the_exact_path(
    tmp_path: Path, exact_reads: list[str]
) -> None:
    (tmp_path / "a.jsonl").write_text(
        export(span_json("00000000000000a1")) + "\n{oops\n" + export(span_json("00000000000000a2"))
    )
    (tmp_path / "b.jsonl").write_text("\n" + export(span_json("00000000000000b1")) + "\n")
    ts = load_traces(tmp_path)
    assert exact_reads == [str(tmp_path / "a.jsonl")]
    assert [(Path(p.file).name, p.line) for p in ts.problems] == [("a.jsonl", 2)]
    assert ts.con.execute(
        "SELECT parse_filename(source_file), source_line FROM spans ORDER BY ALL"
    ).fetchall() == [("a.jsonl", 1), ("a.jsonl", 3), ("b.jsonl", 2)]


def test_a_connection_that_may_reorder_rows_reads_the_same_and_keeps_its_setting(
    tmp_path: Path, exact_reads: list[str]
) -> None:
    import duckdb

    from auditor import connect

    for order in ("true", "false"):
        con = duckdb.connect()
        con.execute(f"SET preserve_insertion_order = {order}")
        (tmp_path / "a.jsonl").write_text(
            "\n".join(export(span_json(f"{i:016x}")) for i in range(1, 40)) + "\n"
        )
        ts = load_traces(tmp_path, con=connect(con))
        assert exact_reads == []
        assert ts.con.execute(
            "SELECT count(*) FROM spans WHERE source_line = ('0x' || span_id)::BIGINT"
        ).fetchone() == (39,)
        assert con.execute("SELECT current_setting('preserve_insertion_order')").fetchone() == (
            order == "true",
        )


def test_lines_hashed_on_every_thread_are_numbered_in_the_order_of_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exact_reads: list[str]
) -> None:
    """The scan that numbers lines reads each file in many pieces on four threads, for a
    connection that lets DuckDB store rows in any order: every span still gets its line."""
    import duckdb

    from auditor import connect

    # DuckDB reads a file in pieces of twice the longest line: small pieces, many threads.
    monkeypatch.setattr(readers, "MAX_LINE_BYTES", 2048)
    folder = tmp_path / "in"
    folder.mkdir()
    expected = []
    for name, first in (("a.jsonl", 1), ("b.jsonl", 5001)):
        lines = []
        for n in range(first, first + 600):
            if n % 7 == 0:
                lines.append("")  # blank lines count as lines
            lines.append(export(span_json(f"{n:016x}")))
            expected.append((name, len(lines), f"{n:016x}"))
        (folder / name).write_text("\n".join(lines) + "\n")
    assert (folder / "a.jsonl").stat().st_size > 50 * 2 * 2048  # 50 pieces or more
    con = duckdb.connect()
    con.execute("SET threads = 4")
    con.execute("SET preserve_insertion_order = false")
    ts = load_traces(sorted(folder.iterdir()), con=connect(con))
    assert exact_reads == []
    got = ts.con.execute(
        "SELECT parse_filename(source_file), source_line, span_id FROM spans ORDER BY ALL"
    ).fetchall()
    assert got == sorted(expected)
    assert con.execute("SELECT current_setting('preserve_insertion_order')").fetchone() == (False,)


def test_a_first_line_longer_than_the_bytes_looked_at_is_read_as_json_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exact_reads: list[str]
) -> None:
    """An exporter that writes large batches writes lines longer than the first bytes the
    loader looks at to spot pretty-printed documents: such a file is still JSON lines."""
    from auditor.loading.json_text import FIRST_LINE_BYTES

    documents: list[str] = []
    original = Reader._read_documents

    def spy(self: Reader, source: readers.SourceFile) -> bool:
        documents.append(source.path)
        return original(self, source)

    monkeypatch.setattr(Reader, "_read_documents", spy)
    batch = export(*(span_json(f"{n:016x}") for n in range(1, 400)))
    assert len(batch) > FIRST_LINE_BYTES
    (tmp_path / "a.jsonl").write_text(batch + "\n" + export(span_json(f"{999:016x}")) + "\n")
    ts = load_traces(tmp_path)
    assert documents == [] and exact_reads == []
    assert ts.problems == []
    lines = ts.con.execute("SELECT source_line, count(*) FROM spans GROUP BY ALL ORDER BY ALL")
    assert lines.fetchall() == [(1, 399), (2, 1)]


def test_the_lines_scanned_are_parsed_without_a_filter_before_them(tmp_path: Path) -> None:
    """Nothing filters the lines between DuckDB's scan and the parse. A filter there, even
    ``text IS NOT NULL``, kept the scan's buffers alive: a million spans written in lines of
    1.3 MB (a Collector's large batches) ran out of memory at 8 GB, and loads in 870 MB
    without it. (Reproducing that takes half a gigabyte of input, so the plan is checked.)"""
    import duckdb

    from auditor.database.span_table import flatten_sql

    file = tmp_path / "a.jsonl"
    file.write_text(export(span_json()) + "\n")
    sql = f"SELECT count(*) FROM ({flatten_sql(reader_sql.UNNUMBERED_LINES, legacy=False)})"
    params = [[str(file)], "none", readers.MAX_LINE_BYTES]
    plan = json.loads(
        duckdb.connect().execute("EXPLAIN (FORMAT json) " + sql, params).fetchall()[0][1]
    )

    def path_to_scan(node: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The operators from ``node`` down to the scan, the scan last."""
        if node["name"] == "READ_CSV":
            return [node]
        for child in node.get("children", []):
            found = path_to_scan(child)
            if found is not None:
                return [node, *found]
        return None

    path = path_to_scan(plan[0])
    assert path is not None
    # From the scan up to the first UNNEST: the lines, before any span is unnested.
    chain = []
    for operator in reversed(path):
        if operator["name"] == "UNNEST":
            break
        chain.append(operator)
    assert chain[0]["name"] == "READ_CSV" and len(chain) < len(path)
    assert [n["name"] for n in chain if n["name"] == "FILTER"] == []
    assert "Filters" not in chain[0].get("extra_info", {})


def test_files_are_read_allowing_short_lines_first_and_long_ones_when_they_hold_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exact_reads: list[str]
) -> None:
    """The parallel path reads files allowing short lines (DuckDB's buffers for the longest
    lines cost a third more CPU near the memory limit), and a file holding a longer line
    with the longest allowed, still on every thread and numbered alike."""
    monkeypatch.setattr(readers, "SHORT_LINE_BYTES", 4096)
    allowed: list[object] = []
    real_run = readers.run

    def spy(con, sql, params=None):  # type: ignore[no-untyped-def]
        if sql.startswith("INSERT INTO spans SELECT") and str(reader_sql.TAGGED) in sql:
            allowed.append(params[2])
        return real_run(con, sql, params)

    monkeypatch.setattr(readers, "run", spy)
    short = [export(span_json(f"{n:016x}")) for n in range(1, 4)]
    long = export(*(span_json(f"{n:016x}") for n in range(100, 130)))
    assert len(max(short, key=len)) < 4096 < len(long) < readers.MAX_LINE_BYTES
    (tmp_path / "short").mkdir()
    (tmp_path / "short" / "a.jsonl").write_text("\n".join(short) + "\n")
    (tmp_path / "long").mkdir()
    (tmp_path / "long" / "b.jsonl").write_text("\n".join([*short, long]) + "\n")
    loaded = [load_traces(tmp_path / name) for name in ("short", "long")]
    assert allowed == [4096, readers.MAX_LINE_BYTES]
    assert exact_reads == []
    assert [ts.problems for ts in loaded] == [[], []]
    lines = loaded[1].con.execute("SELECT source_line, count(*) FROM spans GROUP BY ALL ORDER BY 1")
    assert lines.fetchall() == [(1, 1), (2, 1), (3, 1), (4, 30)]


@pytest.mark.parametrize(
    ("bad", "parses", "reported"),
    [
        (None, [False], []),  # every line whole JSON: parsed without error handling
        ("{oops", [True], [2]),  # a line that is plainly not: with it from the start
        ('{"resourceSpans": [}', [False, True], [2]),  # looks whole, is not: again, with it
        ("   ", [True], []),  # only whitespace, which the parse refuses (and is no problem)
    ],
)
def test_lines_that_all_look_like_json_objects_are_parsed_without_error_handling(
    bad: str | None,
    parses: list[bool],
    reported: list[int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    exact_reads: list[str],
) -> None:
    """The parse that lets a line yield nothing costs a good part of the flatten: files
    whose lines all look like whole JSON objects are parsed without it, and when one turns
    out not to be, the insert runs again with it; only the bad line's file takes the exact
    path, and the bad line is reported where it is."""
    tried: list[bool] = []
    real_run = readers.run

    def spy(con, sql, params=None):  # type: ignore[no-untyped-def]
        if sql.startswith("INSERT INTO spans SELECT") and str(reader_sql.TAGGED) in sql:
            tried.append("try(from_json(text, " in sql)
        return real_run(con, sql, params)

    monkeypatch.setattr(readers, "run", spy)
    lines = [export(span_json("00000000000000a1")), export(span_json("00000000000000a2"))]
    if bad is not None:
        lines.insert(1, bad)
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "b.jsonl").write_text(export(span_json("00000000000000b1")) + "\n")
    ts = load_traces(tmp_path)
    assert tried == parses
    assert ts.con.execute(
        "SELECT parse_filename(source_file), source_line, span_id FROM spans ORDER BY ALL"
    ).fetchall() == [
        ("a.jsonl", 1, "00000000000000a1"),
        ("a.jsonl", 3 if bad else 2, "00000000000000a2"),
        ("b.jsonl", 1, "00000000000000b1"),
    ]
    assert [(Path(p.file).name, p.line) for p in ts.problems] == [("a.jsonl", n) for n in reported]
    assert exact_reads == ([str(tmp_path / "a.jsonl")] if bad else [])


def test_lines_repeated_anywhere_in_a_file_each_get_their_spans(
    tmp_path: Path, exact_reads: list[str]
) -> None:
    """An exporter's retry writes the same line again, later or at once; spans without ids
    are kept from every copy, each with its own line. A line may even hold a span twice."""
    no_ids = span_json(name="anonymous")
    del no_ids["traceId"], no_ids["spanId"]
    twice = span_json("00000000000000e1")
    one = export(span_json("00000000000000a1"), no_ids, twice, twice)
    two = export(span_json("00000000000000b1"), span_json("00000000000000b2"))
    lines = [one, two, one, "", two, one, export(span_json("00000000000000c1")), one]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    ts = load_traces(tmp_path)
    assert exact_reads == []
    anonymous = ts.con.execute(
        "SELECT source_line FROM spans WHERE span_id IS NULL ORDER BY ALL"
    ).fetchall()
    assert anonymous == [(1,), (3,), (6,), (8,)]
    assert ts.con.execute(
        "SELECT span_id, source_line FROM spans WHERE span_id IS NOT NULL ORDER BY ALL"
    ).fetchall() == [
        ("00000000000000a1", 1),
        ("00000000000000b1", 2),
        ("00000000000000b2", 2),
        ("00000000000000c1", 7),
        ("00000000000000e1", 1),
    ]
    # Copies beyond the first: a1 x3, e1 x7 (twice in each of 4 lines, one kept), b1/b2 x1.
    assert ts.duplicate_count == 3 + 7 + 2
    # The spans without ids are reported, each at its own line.
    assert [p.line for p in ts.problems if "no traceId" in p.message] == [1, 3, 6, 8]


def _legacy(line: str) -> str:
    """The same export as OTLP before 0.15 wrote it (instrumentationLibrarySpans)."""
    doc = json.loads(line)
    for resource in doc["resourceSpans"]:
        resource["instrumentationLibrarySpans"] = [
            {"instrumentationLibrary": s["scope"], "spans": s["spans"]}
            for s in resource.pop("scopeSpans")
        ]
    return json.dumps(doc)


def test_lines_of_otlp_before_0_15_load_like_current_ones(
    tmp_path: Path, exact_reads: list[str]
) -> None:
    lines = [export(span_json(f"{i:016x}", name=f"s{i}")) for i in range(1, 5)]
    (tmp_path / "current.jsonl").write_text("\n".join(lines) + "\n")
    mixed = [_legacy(lines[0]), lines[1], "", _legacy(lines[2]), lines[3]]
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "mixed.jsonl").write_text("\n".join(mixed) + "\n")
    (tmp_path / "old" / "legacy.jsonl").write_text("\n".join(map(_legacy, lines)) + "\n")
    columns = "source_line, span_id, name, scope_name, service_name"
    current = load_traces(tmp_path / "current.jsonl")
    assert exact_reads == []
    want = current.con.execute(f"SELECT {columns} FROM spans ORDER BY ALL").fetchall()
    assert len(want) == 4 and want[0][3] == "handoffscope"
    for name, numbers in (("legacy.jsonl", [1, 2, 3, 4]), ("mixed.jsonl", [1, 2, 4, 5])):
        got = load_traces(tmp_path / "old" / name)
        rows = got.con.execute(f"SELECT {columns} FROM spans ORDER BY ALL").fetchall()
        assert [r[0] for r in rows] == numbers
        assert [r[1:] for r in rows] == [w[1:] for w in want]
        assert got.problems == []
    assert exact_reads == [str(tmp_path / "old" / n) for n in ("legacy.jsonl", "mixed.jsonl")]


def test_running_out_of_memory_mid_read_grows_the_limit_and_keeps_the_parallel_path(
    exact_reads: list[str],
) -> None:
    import duckdb

    from auditor import connect

    folder = ROOT / "sample_traces" / "fault-mix"
    expected = rows(folder)
    con = connect(duckdb.connect())
    # DuckDB's line buffers alone are larger than this: the first read runs out.
    con.execute("SET memory_limit = '16MB'")
    ts = load_traces(folder, con=con)
    assert exact_reads == []
    got = ts.con.execute(
        "SELECT source_file, source_line, span_id, name FROM spans ORDER BY ALL"
    ).fetchall()
    assert got == expected
    assert con.execute("SELECT current_setting('preserve_insertion_order')").fetchone() == (True,)


@pytest.mark.parametrize("fault", ["interrupt", "runtime"])
def test_an_interrupted_read_is_not_taken_for_a_refused_file(
    fault: str, monkeypatch: pytest.MonkeyPatch, exact_reads: list[str]
) -> None:
    """Ctrl-C during the parallel read reaches the caller (DuckDB raises its
    InterruptException, or a RuntimeError); the insertion-order setting is restored."""
    import duckdb

    from auditor import connect

    real_run = readers.run

    def interrupted(con, sql, params=None):  # type: ignore[no-untyped-def]
        if sql.startswith("INSERT INTO spans SELECT"):
            # Fail the statement for real first, so the transaction is aborted as it is
            # after an interrupt.
            with pytest.raises(duckdb.Error):
                real_run(con, "SELECT error('interrupted')")
            if fault == "interrupt":
                raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")
            raise RuntimeError("Query interrupted")
        return real_run(con, sql, params)

    monkeypatch.setattr(readers, "run", interrupted)
    con = connect(duckdb.connect())
    expected = duckdb.InterruptException if fault == "interrupt" else RuntimeError
    with pytest.raises(expected):
        load_traces(ROOT / "sample_traces" / "fault-mix", con=con)
    assert exact_reads == []
    monkeypatch.setattr(readers, "run", real_run)
    assert con.execute("SELECT current_setting('preserve_insertion_order')").fetchone() == (True,)


def test_repeated_lines_with_bad_ids_read_the_same_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exact_reads: list[str]
) -> None:
    """Spans with valid ids from a repeated line keep one copy (the first line's); spans
    whose ids are missing or malformed are kept or reported from every copy, at its line."""
    no_ids = span_json(name="anonymous")
    del no_ids["spanId"]
    malformed = span_json("zz0000000000000z", name="malformed")
    bad_parent = span_json("00000000000000f1", parentSpanId="not-a-parent")
    one = export(span_json("00000000000000a1"), no_ids, malformed, bad_parent)
    two = export(span_json("00000000000000b1"), span_json("00000000000000a1"))
    lines = [two, one, "", one, two, export(span_json("00000000000000c1")), one]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "in" / "b.jsonl").write_text(one + "\n" + two + "\n")
    out = tmp_path / "exact.parquet"
    assert all_columns_differ(tmp_path / "in", out, monkeypatch, exact_reads) == 0
    ts = load_traces(tmp_path / "in")
    assert [(Path(p.file).name, p.line) for p in ts.problems if "malformed" in p.message] == [
        ("a.jsonl", 2),
        ("a.jsonl", 4),
        ("a.jsonl", 7),
        ("b.jsonl", 1),
    ]
    assert ts.con.execute(
        "SELECT parse_filename(source_file), source_line FROM spans WHERE span_id IS NULL"
        " ORDER BY ALL"
    ).fetchall() == [("a.jsonl", 2), ("a.jsonl", 4), ("a.jsonl", 7), ("b.jsonl", 1)]


def test_problems_of_files_read_again_together_come_in_the_order_of_the_files(
    tmp_path: Path,
) -> None:
    """Two files sent down the exact path together report their problems file by file, in
    the order given, however DuckDB groups their rows."""
    no_ids = span_json(name="anonymous")
    del no_ids["spanId"]
    good = [export(span_json(f"{n:016x}")) for n in range(1, 30)]
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "b.jsonl").write_text("\n".join([*good, "{oops", export(no_ids)]) + "\n")
    (folder / "c.jsonl").write_text("\n".join(good[:20]) + "\n" + good[20][:50])
    for _ in range(10):
        assert [(Path(p.file).name, p.line) for p in load_traces(folder).problems] == [
            ("b.jsonl", 30),  # "{oops"
            ("b.jsonl", 31),  # no span id (by line, whatever the kind of problem)
            ("c.jsonl", 21),  # torn
        ]


def test_a_large_input_compresses_its_spans_with_a_thread_more_then_as_many_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint that compresses a large load's spans runs with one DuckDB thread more
    (a thread of it may wait on spilled rows), and the load goes on with as many as before."""
    from auditor.database import statements
    from auditor.loading import load

    folder = tmp_path / "in"
    folder.mkdir()
    for number in range(3):
        first = 100 * number + 1
        lines = [export(span_json(f"{n:016x}")) for n in range(first, first + 20)]
        (folder / f"{number}.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(readers, "BATCH_FILE_BYTES", 1)  # a batch per file
    monkeypatch.setattr(load, "LARGE_INPUT_BYTES", 0)
    monkeypatch.setattr(load, "memory_limit", lambda con: 1)  # compress after every batch
    during: list[int] = []
    real_grown = statements.grown

    def spy(con, sql, params=None):  # type: ignore[no-untyped-def]
        if sql == "CHECKPOINT":
            during.append(int(con.execute("SELECT current_setting('threads')").fetchone()[0]))
        return real_grown(con, sql, params)

    monkeypatch.setattr(statements, "grown", spy)
    usual = int(duckdb.connect().execute("SELECT current_setting('threads')").fetchall()[0][0])
    large = load_traces(folder)
    assert during == [usual + 1] * 3
    assert large.con.execute("SELECT current_setting('threads')").fetchone() == (usual,)
    assert large.span_count == 60


@pytest.mark.parametrize("every", [None, 2])
def test_a_large_input_compresses_its_spans_a_memory_limit_s_worth_of_files_at_a_time(
    every: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files read one batch at a time into a large input's database are compressed once
    about a memory limit's worth of them has been read, never at each commit; the rows are
    those of a small input's load."""
    from auditor.loading import load

    folder = tmp_path / "in"
    folder.mkdir()
    for number in range(4):
        first = 100 * number + 1
        lines = [export(span_json(f"{n:016x}")) for n in range(first, first + 30)]
        (folder / f"{number}.jsonl").write_text("\n".join([*lines, lines[0]]) + "\n")
    small = load_traces(folder)
    monkeypatch.setattr(readers, "BATCH_FILE_BYTES", 1)  # a batch per file
    monkeypatch.setattr(load, "LARGE_INPUT_BYTES", 0)
    if every is not None:  # a memory limit of about this many files
        size = (folder / "0.jsonl").stat().st_size
        monkeypatch.setattr(load, "memory_limit", lambda con: int(size * (every - 0.5)))
    real_connect = load.connect

    def connect(con=None, *, large=False):  # type: ignore[no-untyped-def]
        made = real_connect(con, large=large)
        # Files this small never fill DuckDB's own threshold (16 MiB): one that every
        # commit does shows whether the load keeps its commits from checkpointing.
        made.execute("SET checkpoint_threshold = '1KB'")
        return made

    monkeypatch.setattr(load, "connect", connect)
    loose: list[int] = []
    real_run = readers.run

    def spy(con, sql, params=None):  # type: ignore[no-untyped-def]
        if sql.startswith("INSERT INTO spans SELECT") and str(reader_sql.TAGGED) in sql:
            found = real_run(
                con,
                "SELECT count(*) FILTER (WHERE NOT persistent) FROM pragma_storage_info('spans')",
            )
            loose.append(int(found[0][0]))  # type: ignore[call-overload]
        return real_run(con, sql, params)

    monkeypatch.setattr(readers, "run", spy)
    large = load_traces(folder)
    setting = large.con.execute("SELECT current_setting('checkpoint_threshold')").fetchone()
    assert setting == ("1000 bytes",)  # put back once the files are read
    # Deleting the duplicates then costs the last checkpoint no rewrite of the row groups.
    vacuum = large.con.execute("SELECT current_setting('max_vacuum_tasks')").fetchone()
    assert vacuum == (0,)
    # Each batch begins with the rows of those since the last checkpoint uncompressed.
    if every is None:
        assert loose[0] == 0 and all(n > 0 for n in loose[1:]) and len(loose) == 4
    else:
        assert [n > 0 for n in loose] == [False, True, False, True]
    stored = large.con.execute(
        "SELECT count(*) FILTER (WHERE NOT persistent) FROM pragma_storage_info('spans')"
    ).fetchone()
    assert stored == (0,)  # all compressed once loaded
    out = tmp_path / "small.parquet"
    small.con.execute("COPY spans TO ? (FORMAT parquet)", [str(out)])
    differ = large.con.execute(
        "SELECT (SELECT count(*) FROM (SELECT * FROM spans EXCEPT ALL"
        "  SELECT * FROM read_parquet($1)))"
        " + (SELECT count(*) FROM (SELECT * FROM read_parquet($1) EXCEPT ALL"
        "  SELECT * FROM spans))",
        [str(out)],
    ).fetchone()
    assert differ == (0,)
    assert large.duplicate_count == small.duplicate_count == 4
    assert large.problems == small.problems == []
