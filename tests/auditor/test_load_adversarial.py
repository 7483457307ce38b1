"""The loader against hostile and damaged input, as an adversarial tester would feed it.

Each case checks the loader's promise: every problem names its file and line, a torn last
line is called torn and a malformed one malformed, a valid line beside a bad one is never
lost, and the parallel path (lines numbered afterwards by their hash) gives exactly the
table and the problems of the exact path (lines numbered as they are read). The cases at
the end are the bugs found this way, each fixed.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import sys
import zlib
from pathlib import Path

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor import (
    AuditError,
    TraceSet,
    append_lines,
    connect,
    load_traces,
)
from auditor.cli import main
from auditor.loading import json_text, readers, sources
from auditor.loading.readers import Reader
from tests.auditor.test_load import export, span_json


def line(number: int, *, name: str = "handoff.validate") -> str:
    """One export line holding one span, whose span id is ``number`` in hex."""
    return export(span_json(f"{number:016x}", name=name))


def without_span_id(number: int) -> str:
    """One export line whose span has no span id (kept, and reported at its line)."""
    span = span_json(f"{number:016x}", name=f"anonymous {number}")
    del span["spanId"]
    return export(span)


def spans(ts: TraceSet) -> list[tuple[str, int, str | None]]:
    """(file name, line, span id) of every row, sorted."""
    found = ts.con.execute(
        "SELECT parse_filename(source_file), source_line, span_id FROM spans ORDER BY ALL"
    ).fetchall()
    return [(str(f), int(n), s) for f, n, s in found]


def where(ts: TraceSet) -> list[tuple[str, int | None]]:
    """(file name, line) of every problem, in the order reported."""
    return [(Path(p.file).name, p.line) for p in ts.problems]


def table(ts: TraceSet) -> list[str]:
    """Every column of every row (as text, to sort rows holding maps and lists)."""
    return sorted(repr(row) for row in ts.con.execute("SELECT * FROM spans").fetchall())


def both_paths(
    path: Path | list[Path], monkeypatch: pytest.MonkeyPatch
) -> tuple[TraceSet, TraceSet]:
    """The load by the parallel path, and by the exact path alone (lines numbered as read)."""
    fast = load_traces(path)
    with monkeypatch.context() as m:
        m.setattr(Reader, "_read_files", Reader._read_exact)
        exact = load_traces(path)
    return fast, exact


def assert_same(fast: TraceSet, exact: TraceSet) -> None:
    assert table(fast) == table(exact)
    assert [str(p) for p in fast.problems] == [str(p) for p in exact.problems]
    assert fast.duplicate_count == exact.duplicate_count
    assert fast.skipped == exact.skipped


GOOD = [line(n) for n in range(1, 7)]
TORN = GOOD[5][:90]
CUT_EMOJI = line(9, name="cut X").replace("cut X", "cut \\ud83d")
"""A line whose span name ends in a lone surrogate escape (a model's output cut mid-emoji)."""


# ----------------------------------------------------------------------------------------
# What holds: odd layouts read the same on both paths, with the right lines and problems
# ----------------------------------------------------------------------------------------
LAYOUTS: dict[str, tuple[bytes, list[int], list[tuple[int, str]]]] = {
    # name: (file content, lines holding the spans, (line, problem's first words))
    "CRLF, a blank CRLF line, torn": (
        "\r\n".join([GOOD[0], "", GOOD[1], "{oops", GOOD[2], TORN]).encode(),
        [1, 3, 5],
        [(4, "not valid JSON"), (6, "the last line is incomplete")],
    ),
    "BOM and CRLF, ends with a newline": (
        b"\xef\xbb\xbf" + "\r\n".join([GOOD[0], GOOD[1], "{oops"]).encode() + b"\r\n",
        [1, 2],
        [(3, "not valid JSON")],
    ),
    "trailing and leading spaces around objects": (
        "\n".join([GOOD[0] + "   ", "  " + GOOD[1], "   ", GOOD[2] + " "]).encode() + b"\n",
        [1, 2, 4],
        [],
    ),
    "a torn last line that happens to end in a brace": (
        "\n".join([GOOD[0], GOOD[1], GOOD[2][:120] + "}"]).encode(),
        [1, 2],
        [(3, "the last line is incomplete")],
    ),
    "no newline after a valid last line": (
        "\n".join([GOOD[0], "", GOOD[1]]).encode(),
        [1, 3],
        [],
    ),
    "NUL bytes between two records of one line": (
        "\n".join([GOOD[0], GOOD[1] + "\x00" * 300 + GOOD[2], GOOD[3]]).encode() + b"\n",
        [1, 2, 2, 3],
        [(2, "300 NUL bytes")],
    ),
    "a lone surrogate escape among repeated lines": (
        "\n".join([GOOD[0], CUT_EMOJI, GOOD[0], GOOD[1], CUT_EMOJI]).encode() + b"\n",
        [1, 2, 4],
        [(2, "a JSON string held a lone UTF-16 surrogate")],  # the same span at line 5
    ),
    "a bad line repeated, and a good line repeated around it": (
        "\n".join([GOOD[0], "{oops", GOOD[0], "{oops", GOOD[1]]).encode() + b"\n",
        [1, 5],
        [(2, "not valid JSON"), (4, "not valid JSON")],
    ),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_odd_layouts_read_the_same_on_both_paths_with_their_lines(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, lines, problems = LAYOUTS[name]
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(data)
    (folder / "b.jsonl").write_text(line(100) + "\n")  # a clean neighbour in the same batch
    fast, exact = both_paths(folder, monkeypatch)
    assert_same(fast, exact)
    assert [n for f, n, _ in spans(fast) if f == "a.jsonl"] == lines
    got = [(p.line, p.message) for p in fast.problems]
    assert len(got) == len(problems)
    for (number, message), (want_number, opening) in zip(got, problems, strict=True):
        assert number == want_number and message.startswith(opening), (number, message)


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_compressed_files_of_several_streams_read_like_one(
    codec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cat a.gz b.gz`` (a rotated log appended to) holds two streams; the first one ends
    without a newline, so its last line and the second stream's first line are one line."""
    first = "\n".join(GOOD[:3]).encode()
    second = ("\n".join(GOOD[3:]) + "\n").encode()
    if codec == "gzip":
        data = gzip.compress(first) + gzip.compress(second)
    else:
        data = zstandard.ZstdCompressor().compress(first)
        data += zstandard.ZstdCompressor().compress(second)
    (tmp_path / "a.jsonl").write_bytes(data)
    fast, exact = both_paths(tmp_path / "a.jsonl", monkeypatch)
    assert_same(fast, exact)
    assert [n for _, n, _ in spans(fast)] == [1, 2, 4, 5]
    assert [(p.line, p.message[:14]) for p in fast.problems] == [(3, "not valid JSON")]


@pytest.mark.parametrize("newline", ["\n", "\r"])
def test_a_gzip_file_cut_short_keeps_every_line_before_the_cut(
    newline: str, tmp_path: Path
) -> None:
    """Also when the cut falls in the first bytes read to see how lines end, or after
    them (a failed read once cost every line the same read had gathered)."""
    lines = [line(n) for n in range(1, 6000)]
    data = gzip.compress((newline.join(lines) + newline).encode())
    cut = data[: len(data) * 3 // 4]
    before_cut = zlib.decompressobj(31).decompress(cut)
    assert len(before_cut) > 1024 * 1024  # the cut is past the first MiB
    whole = before_cut.count(newline.encode())
    (tmp_path / "a.jsonl.gz").write_bytes(cut)
    ts = load_traces(tmp_path / "a.jsonl.gz")
    loaded = [n for _, n, _ in spans(ts)]
    assert loaded == list(range(1, whole + 1))
    assert [(p.line, "cannot be read past" in p.message) for p in ts.problems] == [
        (len(loaded) + 1, True)
    ]


def test_lines_longer_than_the_short_and_the_longest_limit_read_the_same_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch holding a line over :data:`readers.SHORT_LINE_BYTES`, another over
    :data:`readers.MAX_LINE_BYTES` (DuckDB refuses it: that file is read in Python), a bad
    line and a torn one: nothing valid is lost, and both paths agree."""
    # Lowered limits keep the input small; the code paths are those of 2 MB and 16 MB.
    monkeypatch.setattr(readers, "SHORT_LINE_BYTES", 64 * 1024)
    monkeypatch.setattr(readers, "MAX_LINE_BYTES", 512 * 1024)
    long = export(*(span_json(f"{n:016x}", name="x" * 5000) for n in range(100, 130)))
    longest = export(*(span_json(f"{n:016x}", name="y" * 20000) for n in range(200, 230)))
    assert 64 * 1024 < len(long) < 512 * 1024 < len(longest)
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_text("\n".join([GOOD[0], long, "{oops", GOOD[1]]) + "\n")
    (folder / "b.jsonl").write_text("\n".join([GOOD[2], longest, GOOD[3], longest[:999]]))
    (folder / "c.jsonl").write_text(GOOD[4] + "\n")
    fast, exact = both_paths(folder, monkeypatch)
    assert_same(fast, exact)
    assert fast.span_count == 1 + 30 + 1 + 1 + 30 + 1 + 1
    assert where(fast) == [("a.jsonl", 3), ("b.jsonl", 4)]
    assert "incomplete" in fast.problems[1].message


def test_many_small_files_good_and_bad_over_several_batches_keep_the_first_copy_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files are read :data:`readers.BATCH_FILES` at a time; a span sent again in a later
    batch (or a later line) is dropped, the first read by file order then line winning,
    also in a large input's compressed database, which checkpoints between batches."""
    from auditor.loading import load

    monkeypatch.setattr(readers, "BATCH_FILES", 4)
    folder = tmp_path / "in"
    folder.mkdir()
    for number in range(14):
        own = line(1000 + number, name=f"from {number}")
        # Every file resends span 1 and the span of the file before it, with another name.
        again = [line(1, name=f"copy in {number}"), line(999 + number, name=f"resent {number}")]
        body = [own, *again]
        if number % 3 == 0:
            body.insert(1, "{oops")
        if number % 4 == 1:
            body.append(without_span_id(number))
        if number == 13:
            body.append(TORN)
        (folder / f"{number:02d}.jsonl").write_text(
            "\n".join(body) + ("" if number == 13 else "\n")
        )
    fast, exact = both_paths(folder, monkeypatch)
    assert_same(fast, exact)
    names = dict(fast.con.execute("SELECT span_id, name FROM spans").fetchall())
    assert names[f"{1:016x}"] == "copy in 0"
    assert all(names[f"{1000 + n:016x}"] == f"from {n}" for n in range(14))
    assert sorted(where(fast)) == sorted(
        [(f"{n:02d}.jsonl", 2) for n in (0, 3, 6, 9, 12)]
        + [(f"{n:02d}.jsonl", 5 if n % 3 == 0 else 4) for n in (1, 5, 9, 13)]
        + [("13.jsonl", 5)]
    )
    monkeypatch.setattr(load, "LARGE_INPUT_BYTES", 0)
    monkeypatch.setattr(load, "memory_limit", lambda con: 1)  # a checkpoint after each batch
    large = load_traces(folder)
    assert table(large) == table(fast)
    assert large.problems == fast.problems and large.duplicate_count == fast.duplicate_count


def test_append_lines_after_a_load_keeps_the_loaded_copy_and_numbers_the_new_lines(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.jsonl").write_text("\n".join([GOOD[0], line(2, name="loaded")]) + "\n")
    ts = load_traces(tmp_path / "a.jsonl")
    added = append_lines(
        ts,
        [(7, line(2, name="appended")), (8, GOOD[2]), (9, GOOD[2]), (10, TORN)],
        file="live.jsonl",
        final=True,
    )
    assert added == 1
    assert spans(ts) == [
        ("a.jsonl", 1, f"{1:016x}"),
        ("a.jsonl", 2, f"{2:016x}"),
        ("live.jsonl", 8, f"{3:016x}"),
    ]
    assert ts.con.execute(f"SELECT name FROM spans WHERE span_id = '{2:016x}'").fetchall() == [
        ("loaded",)
    ]
    assert ts.duplicate_count == 2
    assert [(p.file, p.line, "incomplete" in p.message) for p in ts.problems] == [
        ("live.jsonl", 10, True)
    ]


# ----------------------------------------------------------------------------------------
# Bugs found this way, each fixed
# ----------------------------------------------------------------------------------------
def test_a_file_named_like_a_glob_pattern_is_read_itself_not_its_neighbour(
    tmp_path: Path,
) -> None:
    (tmp_path / "spans[1].jsonl").write_text(line(0xA1) + "\n")
    (tmp_path / "spans1.jsonl").write_text(line(0xB1) + "\n")
    ts = load_traces(tmp_path / "spans[1].jsonl")
    assert spans(ts) == [("spans[1].jsonl", 1, f"{0xA1:016x}")]


def test_a_folder_holding_a_glob_named_file_loads_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "a*.jsonl").write_text("\n".join([GOOD[0], "{oops", GOOD[1]]) + "\n")
    (tmp_path / "ab.jsonl").write_text(GOOD[2] + "\n")
    ts = load_traces(tmp_path)
    assert spans(ts) == [
        ("a*.jsonl", 1, f"{1:016x}"),
        ("a*.jsonl", 3, f"{2:016x}"),
        ("ab.jsonl", 1, f"{3:016x}"),
    ]
    assert where(ts) == [("a*.jsonl", 2)]


def test_a_store_named_like_a_glob_pattern_is_compacted_and_audited_itself(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.jsonl").write_text(GOOD[0] + "\n" + GOOD[1] + "\n")
    (tmp_path / "b.jsonl").write_text(GOOD[2] + "\n")
    store, neighbour = tmp_path / "s[1].parquet", tmp_path / "s1.parquet"
    assert main(["compact", str(tmp_path / "a.jsonl"), "--out", str(store), "--quiet"]) == 0
    assert main(["compact", str(tmp_path / "b.jsonl"), "--out", str(neighbour), "--quiet"]) == 0
    ts = load_traces(store)
    assert [s for _, _, s in spans(ts)] == [f"{1:016x}", f"{2:016x}"]
    assert ts.problems == []
    out = tmp_path / "report.json"
    main(["audit", str(store), "--format", "json", "--output", str(out), "--quiet"])
    assert json.loads(out.read_text(encoding="utf-8"))["summary"]["spans"] == 2


def test_a_file_read_at_once_reports_after_the_files_queued_before_it(tmp_path: Path) -> None:
    """A file DuckDB cannot be given is read in Python at once: the files queued before it
    are read first, so the problems keep the order of the files."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_text("\n".join([GOOD[0], "{oops", GOOD[1]]) + "\n")
    (folder / "b[1].jsonl").write_text("\n".join([GOOD[2], "{oops", GOOD[3]]) + "\n")
    ts = load_traces(folder)
    assert where(ts) == [("a.jsonl", 2), ("b[1].jsonl", 2)]
    assert ts.span_count == 4


def test_a_damaged_parquet_named_like_a_pattern_is_named_as_given(tmp_path: Path) -> None:
    (tmp_path / "junk[1].parquet").write_bytes(b"PAR1" + b"\0" * 64)
    (tmp_path / "a.jsonl").write_text(GOOD[0] + "\n")
    ts = load_traces([tmp_path / "junk[1].parquet", tmp_path / "a.jsonl"])
    assert ts.span_count == 1
    assert [Path(p.file).name for p in ts.problems] == ["junk[1].parquet"]
    assert "handoffscope-" not in ts.problems[0].message


def test_append_lines_to_a_temporary_view_named_spans_is_refused_too(tmp_path: Path) -> None:
    trace_set = TraceSet(con=connect())
    trace_set.con.execute("CREATE TEMP VIEW spans AS SELECT 1 AS trace_id")
    with pytest.raises(AuditError):
        append_lines(trace_set, [(1, GOOD[0])], file="live.jsonl")


def test_a_store_named_like_a_pattern_where_no_link_can_be_made_is_a_problem_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.jsonl").write_text(GOOD[0] + "\n")
    store = tmp_path / "s[1].parquet"
    assert main(["compact", str(tmp_path / "a.jsonl"), "--out", str(store), "--quiet"]) == 0

    def refuse(*args: object) -> None:
        raise PermissionError("symbolic links are not allowed here")

    monkeypatch.setattr("os.symlink", refuse)
    with pytest.raises(AuditError) as found:
        load_traces(store)
    assert "rename the file" in str(found.value)
    assert "s[1].parquet" in str(found.value)


def test_bytes_after_the_last_zstd_frame_cost_no_line_before_them(tmp_path: Path) -> None:
    lines = [line(n) for n in range(1, 200)]
    data = zstandard.ZstdCompressor().compress(("\n".join(lines) + "\n").encode())
    (tmp_path / "a.jsonl.zst").write_bytes(data + b"\x00" * 64)
    ts = load_traces(tmp_path / "a.jsonl.zst")
    assert ts.span_count == 199
    assert [p.line for p in ts.problems] == [200]


def test_a_zstd_cut_just_after_a_cr_inside_a_line_reports_the_cut_alone(
    tmp_path: Path,
) -> None:
    """In a file of LF lines a CR ends nothing: the part of a line the cut left is not
    taken for a whole line (and reported as a second problem) because it ends in one."""
    zstd = zstandard.ZstdCompressor()
    head = zstd.compress((GOOD[0] + "\n" + '{"resourceSpans":\r').encode())
    rest = zstd.compress(("[]}\n" + GOOD[1] + "\n").encode())
    (tmp_path / "a.jsonl.zst").write_bytes(head + rest[:8])
    ts = load_traces(tmp_path / "a.jsonl.zst")
    assert [n for _, n, _ in spans(ts)] == [1]
    assert [(p.line, "cannot be read past" in p.message) for p in ts.problems] == [(2, True)]


def test_problems_come_in_the_same_order_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_text("\n".join([GOOD[0], without_span_id(2), "{oops"]) + "\n")
    (folder / "b.jsonl").write_text("\n".join([GOOD[3], without_span_id(5)]) + "\n")
    fast, exact = both_paths(folder, monkeypatch)
    assert table(fast) == table(exact)
    # In the order of the files, then of their lines, whatever kind of problem each is.
    assert where(exact) == [("a.jsonl", 2), ("a.jsonl", 3), ("b.jsonl", 2)]
    assert where(fast) == where(exact)


@pytest.mark.parametrize("blank", ["\t", " \t ", "\x0b\x0c", "\u00a0", "\u3000 \x1c"])
def test_a_line_of_tabs_or_other_whitespace_is_blank_like_a_line_of_spaces(
    blank: str, tmp_path: Path
) -> None:
    """Blank on every path: read by DuckDB, and in Python (lines handed over in memory).
    Once a line of no-break spaces was blank in Python only, so the broken line before it
    was called malformed in a file and torn in memory. A newline ended that line: it is
    malformed, not torn, on every path (as ``watch`` has it)."""
    (tmp_path / "mid.jsonl").write_text("\n".join([GOOD[0], blank, GOOD[1]]) + "\n")
    (tmp_path / "end.jsonl").write_text("\n".join([GOOD[0], GOOD[1], TORN, blank]))
    mid = load_traces(tmp_path / "mid.jsonl")
    assert mid.problems == []
    end = load_traces(tmp_path / "end.jsonl")
    assert [(p.line, "incomplete" in p.message) for p in end.problems] == [(3, False)]
    in_memory = TraceSet(con=connect())
    append_lines(
        in_memory,
        list(enumerate([GOOD[0], GOOD[1], TORN, blank], start=1)),
        file=str(tmp_path / "end.jsonl"),
        final=True,
    )
    assert in_memory.problems == end.problems


def test_whitespace_lines_between_documents_are_blank_too(tmp_path: Path) -> None:
    first, second = (json.dumps(json.loads(GOOD[n]), indent=2) for n in (0, 1))
    (tmp_path / "a.json").write_text(first + "\n\x0c\n\u00a0 \n" + second + "\n\x0c")
    ts = load_traces(tmp_path / "a.json")
    assert ts.problems == []
    assert [n for _, n, _ in spans(ts)] == [1, len(first.splitlines()) + 3]


def test_a_repeated_resource_spans_key_is_named_with_the_value_read(tmp_path: Path) -> None:
    """DuckDB reads the first of a repeated key, Python's json the last: the problem says
    what was read, not what Python would have."""
    first_bad = '{"resourceSpans": 5, ' + GOOD[0][1:]
    first_good = GOOD[1][:-1] + ', "resourceSpans": 5}'
    (tmp_path / "a.jsonl").write_text("\n".join([first_bad, first_good, GOOD[2]]) + "\n")
    ts = load_traces(tmp_path / "a.jsonl")
    assert [n for _, n, _ in spans(ts)] == [2, 3]
    assert [(p.line, p.message) for p in ts.problems] == [
        (
            1,
            "resourceSpans is a number, not a list of OTLP ResourceSpans (the key appears"
            " 2 times; the first is read); the line was skipped",
        )
    ]


@pytest.mark.parametrize("bad", [b"\xff", b""])
def test_a_file_of_cr_line_ends_reads_line_by_line_on_every_path(
    bad: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old Mac line ends (CR alone): DuckDB splits such a file at each CR; read in Python
    (a byte that is not UTF-8 sends it there) it was one line, and every span was lost."""
    lines = [GOOD[0].encode(), b'{"x": "' + bad + b'"}', GOOD[1].encode(), b"{oops"]
    (tmp_path / "a.jsonl").write_bytes(b"\r".join(lines) + b"\r")
    fast, exact = both_paths(tmp_path / "a.jsonl", monkeypatch)
    assert_same(fast, exact)
    assert [n for _, n, _ in spans(fast)] == [1, 3]
    assert [(p.line, p.message.split(" (")[0].split(";")[0]) for p in fast.problems] == [
        *([(2, "not UTF-8 text")] if bad else []),
        (2, "JSON, but not an OTLP trace export"),
        (4, "not valid JSON"),
    ]


def test_a_last_line_ending_in_cr_is_complete_only_in_a_file_of_cr_line_ends(
    tmp_path: Path,
) -> None:
    """A writer of CRLF stopped between the CR and the LF left an unfinished line."""
    (tmp_path / "lf.jsonl").write_bytes(f"{GOOD[0]}\n{GOOD[1]}\n{{oops\r".encode())
    (tmp_path / "cr.jsonl").write_bytes(f"{GOOD[0]}\r{GOOD[1]}\r{{oops\r".encode())
    for name, first_words in (("lf", "the last line is incomplete"), ("cr", "not valid JSON")):
        problems = load_traces(tmp_path / f"{name}.jsonl").problems
        assert [(p.line, p.message.startswith(first_words)) for p in problems] == [(3, True)]


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary().map(lambda b: bytes(b"a\r\n"[x % 3] for x in b)),
    chunk=st.integers(1, 5),
    head=st.integers(0, 8),
)
def test_lines_split_at_any_newline_as_python_splits_bytes(
    data: bytes, chunk: int, head: int
) -> None:
    """The chunked splitters against ``bytes.split`` and ``bytes.splitlines``, with a CR at
    a chunk's end and the head read first ending anywhere."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(sources, "_CHUNK_BYTES", chunk)
        anywhere = list(sources._any_newline_lines(data[:head], io.BytesIO(data[head:])))
        at_lf = list(sources._lf_lines(data[:head], io.BufferedReader(io.BytesIO(data[head:]))))
    assert anywhere == data.splitlines(keepends=True)
    assert at_lf == [piece for piece in re.split(b"(?<=\n)", data) if piece]


BIG = export(*(span_json(f"{n:016x}") for n in range(100, 140)))
"""One export line of 40 spans, longer than any read buffer's first fill."""


@pytest.mark.parametrize("compression", ["none", "gzip", "zstd", "gzip, a member a line"])
def test_cr_line_ends_are_found_past_a_long_first_line_and_in_any_stream(
    compression: str, tmp_path: Path
) -> None:
    """How a file ends its lines was once judged from what a read buffer held: a first line
    longer than that (most export lines), or a gzip member ending at the first CR, made a
    file of CR line ends one line, and every span in it was lost."""
    lines = [BIG.encode(), b'{"x": "\xff"}', GOOD[1].encode()]
    data = b"\r".join(lines) + b"\r"
    path = tmp_path / "a.jsonl"
    if compression == "gzip":
        data = gzip.compress(data)
    elif compression == "zstd":
        data = zstandard.ZstdCompressor().compress(data)
    elif compression != "none":
        data = b"".join(gzip.compress(line + b"\r") for line in lines)
    if compression != "none":
        path = tmp_path / ("a.jsonl.zst" if compression == "zstd" else "a.jsonl.gz")
    path.write_bytes(data)
    ts = load_traces(path)
    assert [n for _, n, _ in spans(ts)] == [1] * 40 + [3]
    assert [(p.line, p.message.split(" (")[0]) for p in ts.problems] == [
        (2, "not UTF-8 text"),
        (2, "JSON, but not an OTLP trace export"),
    ]


def test_watch_reads_files_of_cr_line_ends_as_the_audit_does(tmp_path: Path) -> None:
    """``watch`` waited for an LF that never came in a plain file of CR line ends, and read
    a compressed one as one line."""
    from auditor.watch import WatchSettings
    from auditor.watch.dedupe import Cooldown, Deduper
    from auditor.watch.evaluate import Engine
    from auditor.watch.follow import Follower

    folder = tmp_path / "in"
    folder.mkdir()
    lines = [BIG.encode(), b'{"x": "\xff"}', GOOD[1].encode(), GOOD[2].encode()]
    (folder / "a.jsonl").write_bytes(b"\r".join(lines) + b"\r")
    wide = export(*(span_json(f"{n:016x}") for n in range(200, 240))).encode()
    (folder / "b.jsonl.gz").write_bytes(
        gzip.compress(b"\r".join([wide] + [g.encode() for g in GOOD[3:]]))
    )
    query = "SELECT parse_filename(source_file), source_line, span_id FROM spans ORDER BY ALL"
    audited = load_traces(folder).con.execute(query).fetchall()
    assert len(audited) == 40 + 2 + 40 + 3
    follower = Follower(folder, patterns=("*.jsonl", "*.jsonl.gz"))
    batch = follower.poll(final=True)
    follower.close()
    engine = Engine(WatchSettings(), dedupe=Deduper(), cooldown=Cooldown(cooldown_s=300))
    engine.ingest(batch.lines)
    assert engine.con.execute(query).fetchall() == audited


def test_pretty_documents_with_cr_line_ends_are_numbered_by_line_in_audit_and_watch(
    tmp_path: Path,
) -> None:
    """Every document was once line 1, and a broken one lost those after it."""
    from auditor.watch.follow import Follower

    first, second = (json.dumps(json.loads(GOOD[n]), indent=2) for n in (0, 1))
    broken = '{\n  "resourceSpans": [oops\n}'
    text = "\n".join([first, broken, second]) + "\n"
    (tmp_path / "a.json").write_bytes(text.replace("\n", "\r").encode())
    ts = load_traces(tmp_path / "a.json")
    second_at = len(first.splitlines()) + 4
    assert [n for _, n, _ in spans(ts)] == [1, second_at]
    assert [p.line for p in ts.problems] == [len(first.splitlines()) + 1]
    follower = Follower(tmp_path, patterns=("*.json",))
    batch = follower.poll(final=True)
    follower.close()
    assert [line.number for line in batch.lines] == [1, second_at]


@pytest.mark.parametrize("before", ["\n", "\n\n", " \u00a0\n", "\ufeff\n", "\x0c\n"])
def test_blank_lines_before_the_first_document_still_make_a_file_of_documents(
    before: str, tmp_path: Path
) -> None:
    """In audit and watch alike: watch read such a file line by line, reporting each."""
    from auditor.watch.follow import Follower

    first, second = (json.dumps(json.loads(GOOD[n]), indent=2) for n in (0, 1))
    (tmp_path / "a.json").write_text(before + first + "\n" + second + "\n")
    ts = load_traces(tmp_path / "a.json")
    lines = [2 + before.count("\n") - 1, len(first.splitlines()) + before.count("\n") + 1]
    assert ts.problems == []
    assert [n for _, n, _ in spans(ts)] == lines
    follower = Follower(tmp_path, patterns=("*.json",))
    batch = follower.poll(final=True)
    follower.close()
    assert batch.notes == []
    assert [line.number for line in batch.lines] == lines


def test_a_file_of_cr_line_ends_with_a_first_line_longer_than_duckdb_reads_is_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DuckDB gives no line at all, and no error, for such a file: it is read in Python."""
    monkeypatch.setattr(readers, "SHORT_LINE_BYTES", 4096)
    monkeypatch.setattr(readers, "MAX_LINE_BYTES", 4096)
    (tmp_path / "a.jsonl").write_bytes(b"\r".join([BIG.encode(), GOOD[1].encode()]) + b"\r")
    (tmp_path / "b.jsonl").write_text(GOOD[2] + "\n")
    ts = load_traces(tmp_path)
    assert [(f, n) for f, n, _ in spans(ts)] == [("a.jsonl", 1)] * 40 + [
        ("a.jsonl", 2),
        ("b.jsonl", 1),
    ]
    assert ts.problems == []


def test_watch_numbers_compact_documents_appended_to_a_file_of_cr_line_ends(
    tmp_path: Path,
) -> None:
    """Whether a file ends its lines with CR is judged from its start, not from the part
    of it read at each poll (one compact document has no CR inside it)."""
    from auditor.watch.follow import Follower

    pretty = json.dumps(json.loads(GOOD[0]), indent=2).replace("\n", "\r")
    path = tmp_path / "a.json"
    path.write_bytes((pretty + "\r").encode())
    follower = Follower(tmp_path, patterns=("*.json",))
    first = follower.poll(final=True).lines
    later = []
    for more in GOOD[1:3]:
        with path.open("ab") as f:
            f.write((more + "\r").encode())
        later += follower.poll(final=True).lines
    follower.close()
    audited = load_traces(path)
    assert [line.number for line in first + later] == [n for _, n, _ in spans(audited)]
    assert [n for _, n, _ in spans(audited)] == [1, pretty.count("\r") + 2, pretty.count("\r") + 3]


def test_a_crlf_in_a_file_of_cr_line_ends_ends_one_line_in_audit_and_watch(
    tmp_path: Path,
) -> None:
    """A file judged by its first MiB to end its lines with CR that goes on with CRLF:
    watch counted each CRLF as two lines (the audit, one), and so numbered every later
    line wrongly; also when the CR and the LF arrive in different polls."""
    from auditor.watch.follow import Follower

    assert sources.as_lf(b"a\rb\r\nc\r", True) == b"a\nb\r\nc\n"
    assert sources.as_lf(b"\nd\r", True, after_cr=True) == b" d\n"
    assert sources.as_lf(b"\rd\r", True, after_cr=True) == b"\nd\n"  # a blank line
    assert sources.as_lf(b"a\rb\r\n", False) == b"a\rb\r\n"
    head = [line(n).encode() for n in range(1, 3000)]
    assert len(b"\r".join(head)) > sources.LINE_ENDS_BYTES
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"\r".join(head) + b"\r" + line(5000).encode() + b"\r\n")
    follower = Follower(tmp_path, patterns=("*.jsonl",), chunk_bytes=4096)
    got = []

    def poll() -> None:
        while True:
            batch = follower.poll()
            got.extend(batch.lines)
            if not batch.more:
                return

    poll()
    for more in [
        line(5001) + "\r",
        "\n" + line(5002) + "\r\n" + line(5003) + "\r",
        "\r" + line(5004) + "\r",  # a blank line, its CR the first byte of a poll's read
    ]:
        with path.open("ab") as f:
            f.write(more.encode())
        poll()
    follower.close()
    audited = spans(load_traces(path))
    assert len(audited) == len(head) + 5
    assert [
        (g.number, json.loads(g.text)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"])
        for g in got
    ] == [(n, s) for _, n, s in audited]
    assert audited[-1][1] == len(head) + 6


@pytest.mark.parametrize("newline", ["\n", "\r"])
def test_watch_reads_a_line_longer_than_its_chunk_and_skips_one_past_its_bound(
    newline: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line longer than a poll's chunk once stopped the file for good: every poll read
    the same chunk again, found no newline, and asked to be polled again at once."""
    import auditor.watch.follow as follow

    monkeypatch.setattr(follow, "LONGEST_LINE_BYTES", 20_000)
    huge = export(*(span_json(f"{n:016x}") for n in range(300, 400)))
    assert len(BIG) < 20_000 < len(huge)
    text = newline.join([GOOD[0], BIG, huge, GOOD[1]]) + newline
    (tmp_path / "a.jsonl").write_text(text, newline="")
    follower = follow.Follower(tmp_path, patterns=("*.jsonl",), chunk_bytes=4096)
    got, notes = [], []
    for _ in range(50):
        batch = follower.poll(final=True)
        got += [(line.number, line.text[:20]) for line in batch.lines]
        notes += batch.notes
        if not batch.more:
            break
    follower.close()
    assert [n for n, _ in got] == [1, 2, 4]
    assert got[1][1] == BIG[:20]
    assert notes == ["a.jsonl:3: a line of more than 20,000 bytes, too long to hold; skipped"]


@pytest.mark.parametrize("held", [True, False], ids=["held", "past-the-bound"])
def test_watch_judges_cr_line_ends_past_a_first_line_longer_than_its_chunk(
    held: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """How a file ends its lines was judged from the first chunk alone: with no line end in
    it, a file of CR line ends was taken for LF lines, never read, and polled again at once,
    forever. An unfinished long line no longer asks for the next poll at once either."""
    import auditor.watch.follow as follow

    monkeypatch.setattr(follow, "LONGEST_LINE_BYTES", 20_000)
    huge = export(*(span_json(f"{n:016x}") for n in range(300, 400)))
    first = BIG if held else huge
    assert len(BIG) < 20_000 < len(huge)
    path = tmp_path / "a.jsonl"
    path.write_text(first[:9_000], newline="")
    follower = follow.Follower(tmp_path, patterns=("*.jsonl",), chunk_bytes=4096)
    batch = follower.poll()
    assert (batch.lines, batch.more, batch.notes) == ([], False, [])  # unfinished: wait
    with path.open("a", newline="") as f:
        f.write("\r".join([first[9_000:], GOOD[1], GOOD[2]]) + "\r")
    got, notes = [], []
    for _ in range(10):
        batch = follower.poll(final=True)
        got += [line.number for line in batch.lines]
        notes += batch.notes
        if not batch.more:
            break
    assert not batch.more
    follower.close()
    assert got == ([1, 2, 3] if held else [2, 3])
    if held:
        assert notes == []
        assert sorted({n for _, n, _ in spans(load_traces(path))}) == got
    else:
        assert notes == ["a.jsonl:1: a line of more than 20,000 bytes, too long to hold; skipped"]


def test_watch_notes_a_rotated_file_that_ends_inside_a_line_longer_than_its_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A torn tail of a file rotated away is reported when drained, a long one too."""
    import auditor.watch.follow as follow

    monkeypatch.setattr(follow, "ORPHAN_GRACE_S", 0.0)
    path = tmp_path / "a.jsonl"
    path.write_text(GOOD[0] + "\n" + BIG[:9_000])
    follower = follow.Follower(tmp_path, patterns=("*.jsonl",), chunk_bytes=4096)
    assert [line.number for line in follower.poll().lines] == [1]
    path.rename(tmp_path / "a.old")
    batch = follower.poll()
    follower.close()
    assert (batch.lines, batch.more) == ([], False)
    assert batch.notes == [
        "a.jsonl:2: the file ended mid-line (9000 bytes without a newline, a writer stopped"
        " while writing); that fragment was skipped"
    ]


def test_a_cr_inside_the_first_line_of_a_file_of_lf_lines_stays_inside_it(
    tmp_path: Path,
) -> None:
    """A CR is JSON whitespace: a file of LF lines with one inside its first line (which
    DuckDB refuses, so it is read in Python) keeps that line whole."""
    first = GOOD[0].replace(', "scopeSpans"', ',\r"scopeSpans"', 1)
    assert first != GOOD[0]
    (tmp_path / "a.jsonl").write_bytes((first + "\n" + GOOD[1] + "\n").encode())
    ts = load_traces(tmp_path / "a.jsonl")
    assert ts.problems == []
    assert [n for _, n, _ in spans(ts)] == [1, 2]


@pytest.mark.parametrize(
    ("text", "reported"),
    [
        ('{"resourceSpans": 5, "resourceSpans": []}', True),  # 5 is read: not an export
        ('{"resourceSpans": [], "resourceSpans": 5}', False),  # [] is read: nothing in it
    ],
)
def test_a_repeated_key_is_judged_by_its_first_value_everywhere(
    text: str, reported: bool, tmp_path: Path
) -> None:
    """As a JSON line (DuckDB keeps a repeated key's first value), in a file of documents
    (compacted, then read the same way) and for what counts as an empty export."""
    (tmp_path / "a.jsonl").write_text("\n".join([GOOD[0], text, GOOD[1]]) + "\n")
    assert [p.line for p in load_traces(tmp_path / "a.jsonl").problems] == ([2] if reported else [])
    doubled = GOOD[2][:-1] + ', "resourceSpans": []}'
    pretty = json.dumps(json.loads(GOOD[0]), indent=2)
    (tmp_path / "b.json").write_text(pretty + "\n" + doubled + "\n")
    assert [n for _, n, _ in spans(load_traces(tmp_path / "b.json"))] == [
        1,
        len(pretty.splitlines()) + 1,
    ]


def test_a_repeated_key_in_a_document_is_named_as_on_a_line(tmp_path: Path) -> None:
    """A document is compacted for DuckDB: the copy kept its repeated key's first value
    only, and the problem lost the words that say the key was repeated."""
    text = '{"resourceSpans": 5, "resourceSpans": []}'
    (tmp_path / "a.jsonl").write_text("\n".join([GOOD[0], text]) + "\n")
    pretty = json.dumps(json.loads(GOOD[0]), indent=2)
    (tmp_path / "b.json").write_text(pretty + "\n" + text.replace(", ", ",\n") + "\n")
    on_line = load_traces(tmp_path / "a.jsonl").problems
    in_document = load_traces(tmp_path / "b.json").problems
    assert "the key appears 2 times; the first is read" in on_line[0].message
    assert [p.message for p in in_document] == [p.message for p in on_line]
    assert [p.line for p in in_document] == [len(pretty.splitlines()) + 1]


def test_the_whitespace_of_blank_lines_is_all_that_python_strips() -> None:
    every = "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace())
    assert json_text.WHITESPACE == every


def test_a_bad_first_line_costs_no_valid_line_after_it(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("\n".join(["{oops", " " + GOOD[0], GOOD[1]]) + "\n")
    ts = load_traces(tmp_path / "a.jsonl")
    assert [n for _, n, _ in spans(ts)] == [2, 3]
    assert where(ts) == [("a.jsonl", 1)]


def test_a_torn_last_line_after_empty_exports_is_called_torn(tmp_path: Path) -> None:
    """An exporter that just started: an export with no span, then a line being written."""
    (tmp_path / "a.jsonl").write_text('{"resourceSpans": []}\n' + TORN)
    (tmp_path / "b.jsonl").write_text(GOOD[0] + "\n")
    ts = load_traces(tmp_path)
    assert [(p.line, "incomplete" in p.message) for p in ts.problems] == [(2, True)]


def test_append_lines_on_a_compacted_store_is_refused_with_an_audit_error(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.jsonl").write_text(GOOD[0] + "\n")
    load_traces(tmp_path / "a.jsonl").con.execute(
        f"COPY spans TO '{tmp_path / 'store.parquet'}' (FORMAT parquet)"
    )
    store = load_traces(tmp_path / "store.parquet")
    with pytest.raises(AuditError):
        append_lines(store, [(1, GOOD[1])], file="live.jsonl")


def test_a_file_no_line_of_which_is_json_is_one_problem_naming_it(tmp_path: Path) -> None:
    """A README or a program among the trace files (a shell glob): one problem each, with
    the first line's detail, not one per line burying the trace files' own problems. A
    trace file with a damaged line, one that is empty but for an export without spans, and
    a file of one line (a torn first write, maybe) keep theirs, line by line."""
    (tmp_path / "README.md").write_text("# Traces\n\nThese files hold spans.\n- one")
    (tmp_path / "ls.json").write_bytes(b"\x7fELF\x02\x01" + b"\x00" * 9 + b"\xff\xfe\n1\x00{\n")
    (tmp_path / "a.jsonl").write_text("\n".join([GOOD[0], "{oops", GOOD[1], "oops"]) + "\n")
    (tmp_path / "b.jsonl").write_bytes(b'{"resourceSpans": []}\noops\xff\nnope\n')
    (tmp_path / "c.jsonl").write_text("oops\n")
    names = ["README.md", "ls.json", "a.jsonl", "b.jsonl", "c.jsonl"]
    ts = load_traces([tmp_path / n for n in names])
    assert [str(p).removeprefix(f"{tmp_path}/").split(";")[0] for p in ts.problems] == [
        "README.md: not a trace file: none of its 3 lines is JSON (line 1: Expecting value)",
        "ls.json: not a trace file: binary, not text (NUL bytes and bytes that are not UTF-8,"
        " from line 1 on)",
        "a.jsonl:2: not valid JSON (Expecting property name enclosed in double quotes)",
        "a.jsonl:4: not valid JSON (Expecting value)",
        "b.jsonl:2: not UTF-8 text (byte 5)",
        "b.jsonl:2: not valid JSON (Expecting value)",
        "b.jsonl:3: not valid JSON (Expecting value)",
        "c.jsonl:1: not valid JSON (Expecting value)",
    ]
    assert ts.problems[0].line is None
    assert str(ts.problems[0]).endswith("; it was skipped")
    assert len(spans(ts)) == 2
