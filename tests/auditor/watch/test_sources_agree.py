"""audit and watch read the same files the same way: the same spans, the same problems.

Damaged input included: a block of NUL bytes a crash leaves in the middle of a line, spans
whose ids are missing or invalid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from auditor import load_traces
from auditor.watch import WatchSettings
from auditor.watch.dedupe import Cooldown, Deduper
from auditor.watch.evaluate import Engine
from auditor.watch.follow import Follower
from tests.support.paths import TESTS
from tests.support.watch import otlp_line, validate_span

SPANS = "SELECT trace_id, span_id, name, source_file, source_line FROM spans ORDER BY ALL"
ZEROS = "\x00" * 4096


def record(trace: int) -> str:
    """One OTLP JSON line holding one span of trace ``trace`` (newline included)."""
    return otlp_line([validate_span(trace=trace, latency_s=0.1, span=trace)])


def audited(folder: Path) -> tuple[list[tuple[Any, ...]], list[str]]:
    """Spans (with file names relative to ``folder``) and problems, as audit reads them."""
    ts = load_traces(folder)
    rows = [
        (t, s, n, str(Path(f).relative_to(folder)), ln)
        for t, s, n, f, ln in ts.con.execute(SPANS).fetchall()
    ]
    problems = [str(p).removeprefix(f"{folder}/") for p in ts.problems]
    ts.con.close()
    return rows, problems


def watched(folder: Path, *patterns: str) -> tuple[list[tuple[Any, ...]], list[str]]:
    """Spans and problems (and notes), as one ``watch --once`` poll reads them."""
    follower = Follower(folder, patterns=patterns or ("*.jsonl",))
    batch = follower.poll(final=True)
    follower.close()
    engine = Engine(WatchSettings(), dedupe=Deduper(), cooldown=Cooldown(cooldown_s=300))
    ingested = engine.ingest(batch.lines)
    rows = engine.con.execute(SPANS).fetchall()
    engine.con.close()
    return rows, batch.notes + [str(p) for p in ingested.problems]


def test_records_after_a_block_of_nul_bytes_are_read_and_the_zeros_reported(tmp_path: Path):
    folder = tmp_path / "traces"
    folder.mkdir()
    cut = record(2)[:70]  # a record the crash cut short, then zeros, then the next record
    (folder / "crashed.jsonl").write_text(
        record(1) + cut + ZEROS + record(3).rstrip("\n") + ZEROS + record(4) + record(5)
    )
    rows, problems = audited(folder)
    assert sorted(int(str(r[0]), 16) for r in rows) == [1, 3, 4, 5]
    assert [r[4] for r in rows] == [1, 2, 2, 3]  # each where its line is
    (problem,) = problems
    assert problem.startswith("crashed.jsonl:2: 8192 NUL bytes")
    assert "2 whole records" in problem and "1 record they cut short" in problem
    assert watched(folder) == (rows, problems)


def test_a_line_of_zeros_then_a_record_loses_nothing(tmp_path: Path):
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "zeros.jsonl").write_text(record(1) + ZEROS + record(2) + record(3))
    rows, problems = audited(folder)
    assert len(rows) == 3
    (problem,) = problems
    assert problem.startswith("zeros.jsonl:2: 4096 NUL bytes") and "1 whole record" in problem
    assert watched(folder) == (rows, problems)


def test_spans_with_missing_or_invalid_ids_are_problems(tmp_path: Path):
    folder = tmp_path / "traces"
    folder.mkdir()
    bad_trace = validate_span(trace=7, latency_s=0.1)
    bad_trace["traceId"] = "zz"
    del bad_trace["spanId"]
    bad_parent = validate_span(trace=8, latency_s=0.1, span=8)
    bad_parent["parentSpanId"] = "not-an-id"
    good = validate_span(trace=9, latency_s=0.1, span=9)
    (folder / "ids.jsonl").write_text(otlp_line([bad_trace, good]) + otlp_line([bad_parent]))
    rows, problems = audited(folder)
    assert len(rows) == 3  # kept (so nothing is lost), but not silently
    assert problems == [
        "ids.jsonl:1: span 'handoff.validate': traceId 'zz' is not 32 hex digits and no spanId;"
        " it was loaded, but cannot be joined to its trace or told apart from other spans:"
        " fix the exporter that wrote it",
        "ids.jsonl:2: span 'handoff.validate': parentSpanId 'not-an-id' is not 16 hex digits;"
        " it was loaded, but cannot be joined to its trace or told apart from other spans:"
        " fix the exporter that wrote it",
    ]
    assert watched(folder) == (rows, problems)


FIXTURES = TESTS / "fixtures" / "otlp"
"""The upstream OTLP files every reader must handle (a copy of the shared fixtures)."""


def test_audit_and_watch_read_the_same_spans_from_every_kind_of_file(tmp_path: Path):
    import gzip
    import json
    import shutil

    import zstandard

    folder = tmp_path / "traces"
    folder.mkdir()
    # gzip under a plain name, zstd in two frames, pretty-printed documents (plain and
    # gzipped), NUL blocks, bad ids, and every upstream OTLP file.
    (folder / "gzipped.jsonl").write_bytes(gzip.compress((record(1) + record(2)).encode()))
    zstd = zstandard.ZstdCompressor()
    (folder / "framed.jsonl.zst").write_bytes(
        zstd.compress(record(3).encode()) + zstd.compress(record(4).encode())
    )

    def pretty(*traces: int) -> str:
        return "".join(json.dumps(json.loads(record(n)), indent=2) + "\n" for n in traces)

    (folder / "pretty.json").write_text(pretty(5, 6))
    (folder / "pretty.json.gz").write_bytes(gzip.compress(pretty(11, 12).encode()))
    (folder / "zeros.jsonl").write_text(record(7) + ZEROS + record(8) + record(9)[:40] + ZEROS)
    (folder / "zeros.jsonl").open("a").write("\n")
    bad = validate_span(trace=10, latency_s=0.1)
    bad["traceId"] = "zz"
    (folder / "ids.jsonl").write_text(otlp_line([bad]))
    sources = sorted(FIXTURES.glob("*.json*"))
    for index, path in enumerate(sources):
        shutil.copy(path, folder / f"{index:02d}-{path.name}")

    rows, problems = audited(folder)
    assert {"gzipped.jsonl", "framed.jsonl.zst", "pretty.json", "pretty.json.gz"} <= {
        str(r[3]) for r in rows
    }
    watch_rows, watch_problems = watched(folder, "*.json", "*.jsonl", "*.jsonl.zst", "*.json.gz")
    assert watch_rows == rows
    assert watch_problems == problems


def legacy(trace: int, scope_spans: object) -> str:
    """``record(trace)`` with its scopes as the ``instrumentationLibrarySpans`` of OTLP
    before 0.15, and ``scope_spans`` as its ``scopeSpans``."""
    import json

    export = json.loads(record(trace))
    resource = export["resourceSpans"][0]
    resource["instrumentationLibrarySpans"] = [
        {"instrumentationLibrary": ss.get("scope", {}), "spans": ss["spans"]}
        for ss in resource.pop("scopeSpans")
    ]
    resource["scopeSpans"] = scope_spans
    return json.dumps(export) + "\n"


def test_scopes_that_are_not_a_list_are_problems_not_a_crash(tmp_path: Path):
    """A number or a boolean where the scopes' list belongs once stopped audit and watch
    alike with a traceback (the check for an empty export looped over it); false, 0, "" or
    {} were taken for an empty export, and said nothing. Old exports' scopes are read when
    ``scopeSpans`` is empty or not a list, as the Collector reads them."""
    folder = tmp_path / "traces"
    folder.mkdir()
    odd = [
        '{"resourceSpans":[{"scopeSpans":5}]}',
        '{"resourceSpans":[{"scopeSpans":true}]}',
        '{"resourceSpans":[{"instrumentationLibrarySpans":1.5}]}',
        '{"resourceSpans":[{"scopeSpans":[{"spans":7}]}]}',
        '{"resourceSpans":[{"scopeSpans":false}]}',
        '{"resourceSpans":[{"scopeSpans":[{"spans":""}]}]}',
        '{"resourceSpans":[{"scopeSpans":{}}]}',
        '{"resourceSpans":[{"scopeSpans":[],"instrumentationLibrarySpans":0}]}',
        '{"resourceSpans":[{"scopeSpans":[{"spans":[]}]}, {}]}',  # empty: nothing to say
    ]
    text = record(1) + "\n".join(odd) + "\n" + legacy(3, []) + legacy(4, False) + record(2)
    (folder / "a.jsonl").write_text(text)
    rows, problems = audited(folder)
    assert sorted((int(r[0], 16), r[4]) for r in rows) == [(1, 1), (2, 13), (3, 11), (4, 12)]
    rest = "; the line was skipped"
    assert [p.split(": ", 1)[1] for p in problems] == [
        f"resourceSpans[0].scopeSpans is a number, not a list{rest}",
        f"resourceSpans[0].scopeSpans is a boolean, not a list{rest}",
        f"resourceSpans[0].instrumentationLibrarySpans is a number, not a list{rest}",
        f"resourceSpans[0].scopeSpans[0].spans is a number, not a list{rest}",
        f"resourceSpans[0].scopeSpans is a boolean, not a list{rest}",
        f"resourceSpans[0].scopeSpans[0].spans is a string, not a list{rest}",
        f"resourceSpans[0].scopeSpans is an object, not a list{rest}",
        f"resourceSpans[0].instrumentationLibrarySpans is a number, not a list{rest}",
    ]
    assert [p.split(":")[1] for p in problems] == [str(n) for n in range(2, 10)]
    assert watched(folder) == (rows, problems)


def test_bytes_that_are_not_utf8_cost_no_document_of_a_file_of_documents(tmp_path: Path):
    """One such byte sent the audit's read of a file of pretty-printed documents to its
    line-by-line read, which lost every document (watch read them): each byte is now read
    as U+FFFD, as in a JSON line, and reported at its line."""
    import json

    folder = tmp_path / "traces"
    folder.mkdir()
    docs = [json.dumps(json.loads(record(n)), indent=2).encode() for n in (1, 2, 3)]
    assert b'"handoff.validate"' in docs[1]
    docs[1] = docs[1].replace(b'"handoff.validate"', b'"handoff.\xff"')
    odd = b'{\n  "resourceSpans": 5,\n  "x": "\xfe"\n}'
    (folder / "a.json").write_bytes(b"\n".join([docs[0], docs[1], odd, docs[2]]) + b"\n")
    rows, problems = audited(folder)
    starts = [1]
    for doc in (docs[0], docs[1], odd):
        starts.append(starts[-1] + doc.count(b"\n") + 1)
    assert [r[4] for r in rows] == [starts[0], starts[1], starts[3]]
    assert "handoff.\ufffd" in [r[2] for r in rows]
    bad_line = starts[1] + docs[1][: docs[1].index(b"\xff")].count(b"\n")
    column = docs[1].index(b"\xff") - docs[1].rindex(b"\n", 0, docs[1].index(b"\xff"))
    assert problems == [
        f"a.json:{bad_line}: not UTF-8 text (byte {column}); it was read as U+FFFD, the"
        " replacement character",
        f"a.json:{starts[2] + 2}: not UTF-8 text (byte 9); it was read as U+FFFD, the"
        " replacement character",
        f"a.json:{starts[2]}: resourceSpans is a number, not a list of OTLP ResourceSpans;"
        " the line was skipped",
    ]
    assert watched(folder, "*.json") == (rows, problems)


def test_a_broken_line_followed_by_an_unfinished_blank_one_is_malformed_not_torn(
    tmp_path: Path,
):
    """Its newline came: the writer finished it. The audit took whitespace after it, with no
    newline of its own, for the end of that line, and called it torn (watch, malformed)."""
    import gzip

    folder = tmp_path / "traces"
    folder.mkdir()
    files = [("a.jsonl", "\n \t"), ("b.jsonl", "\r\n\u3000"), ("c.jsonl.gz", "\n  ")]
    for trace, (name, tail) in enumerate(files, start=3):
        data = (record(trace) + '{"resourceSpans": [' + tail).encode()
        (folder / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    (folder / "d.jsonl").write_text(record(2) + '{"resourceSpans": [')  # torn, for contrast
    rows, problems = audited(folder)
    assert [r[4] for r in rows] == [1, 1, 1, 1]
    assert [p.split(": ", 1)[1].split(" (")[0] for p in problems] == [
        "not valid JSON",
        "not valid JSON",
        "not valid JSON",
        "the last line is incomplete JSON",
    ]
    assert watched(folder, "*.jsonl", "*.jsonl.gz") == (rows, problems[:3])


def test_bytes_that_are_not_utf8_are_placed_and_mended_alike_on_every_path(tmp_path: Path):
    """The byte named: watch counted a byte-order mark in a plain file's first line, and,
    in a file of documents read over two polls, counted from where its second read began.
    The mending: a broken sequence was one U+FFFD in a line, one per byte in a document."""
    import gzip
    import json

    folder = tmp_path / "traces"
    folder.mkdir()
    bad = record(1).encode().replace(b"handoff.", b"handoff.\xe2\x82")
    assert bad != record(1).encode()
    (folder / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + bad)
    (folder / "b.jsonl.gz").write_bytes(gzip.compress(b"\xef\xbb\xbf" + bad.replace(b"1", b"2")))
    pretty = json.dumps(json.loads(record(3)), indent=2).encode()
    docs = folder / "c.json"
    docs.write_bytes(pretty)
    follower = Follower(folder, patterns=("*.jsonl", "*.jsonl.gz", "*.json"))
    first = follower.poll(final=True)
    compact = record(4).encode().strip().replace(b"handoff.", b"handoff.\xe2\x82")
    with docs.open("ab") as f:
        f.write(b"  " + compact + b"\n")
    second = follower.poll(final=True)
    follower.close()
    engine = Engine(WatchSettings(), dedupe=Deduper(), cooldown=Cooldown(cooldown_s=300))
    ingested = engine.ingest(first.lines + second.lines)
    watched_rows = engine.con.execute(SPANS).fetchall()
    rows, problems = audited(folder)
    assert watched_rows == rows
    assert sorted(first.notes + second.notes + [str(p) for p in ingested.problems]) == sorted(
        problems
    )
    column = bad.index(b"\xe2") + 1
    last_line = pretty.count(b"\n") + 1
    in_docs = len(pretty) - (pretty.rindex(b"\n") + 1) + 2 + compact.index(b"\xe2") + 1
    assert sorted(problems) == [
        f"a.jsonl:1: not UTF-8 text (byte {column}); it was read as U+FFFD, the"
        " replacement character",
        f"b.jsonl.gz:1: not UTF-8 text (byte {column}); it was read as U+FFFD, the"
        " replacement character",
        f"c.json:{last_line}: not UTF-8 text (byte {in_docs}); it was read as U+FFFD, the"
        " replacement character",
    ]
    names = {r[2] for r in rows}
    assert {n for n in names if "\ufffd" in n} == {"handoff.\ufffdvalidate"}


def test_a_compressed_file_cut_inside_its_last_line_is_torn_on_every_path(tmp_path: Path):
    """watch reads a compressed segment whole and took its unfinished last line for a
    finished one, malformed; the audit calls it torn. A whole JSON line without a newline
    is read on both."""
    import gzip

    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "a.jsonl.gz").write_bytes(gzip.compress((record(1) + record(2)[:60]).encode()))
    (folder / "b.jsonl.gz").write_bytes(gzip.compress((record(3) + record(4).strip()).encode()))
    rows, problems = audited(folder)
    assert sorted(int(r[0], 16) for r in rows) == [1, 3, 4]
    assert [p.split(": ", 1)[0] for p in problems] == ["a.jsonl.gz:2"]
    assert "the last line is incomplete JSON" in problems[0]
    assert watched(folder, "*.jsonl.gz") == (rows, problems)
