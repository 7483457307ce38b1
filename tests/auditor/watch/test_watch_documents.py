"""``watch`` on pretty-printed OTLP files: whole documents, read as ``handoffscope audit``
reads them, once each, however the file arrives."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

import auditor.watch.follow as follow
from auditor import load_traces
from auditor.cli import main
from auditor.loading.json_text import opens_document
from auditor.watch import StreamSink, Watcher, WatchSettings
from auditor.watch.dedupe import Cooldown, Deduper
from auditor.watch.evaluate import Engine
from auditor.watch.follow import Cursor, Follower
from auditor.watch.watcher import RunSummary
from tests.support.paths import TESTS
from tests.support.watch import otlp_line, validate_span

FIXTURES = TESTS / "fixtures" / "otlp"
LOGS = "opentelemetry-proto__examples__logs.json"
PATTERNS = ("*.json", "*.jsonl")
SPANS = "SELECT trace_id, span_id, name, source_file, source_line FROM spans ORDER BY ALL"


def upstream(folder: Path) -> Path:
    """Every upstream OTLP file (``tests/fixtures/otlp``) copied into ``folder``."""
    folder.mkdir()
    for path in FIXTURES.glob("*.json*"):
        shutil.copy(path, folder / path.name)
    return folder


def watcher(folder: Path, notes: list[str], out: io.StringIO | None = None) -> Watcher:
    return Watcher(
        folder,
        settings=WatchSettings(),
        sinks=[StreamSink(out if out is not None else io.StringIO())],
        state_path=folder / ".state.json",
        patterns=PATTERNS,
        log=notes.append,
    )


def pretty_traces(trace: int, latency_s: float = 2.5) -> str:
    """A slow validation as one OTLP document, indented as the upstream files are."""
    return json.dumps(
        json.loads(otlp_line([validate_span(trace=trace, latency_s=latency_s)])), indent=2
    )


def texts(follower: Follower, *, final: bool = False) -> list[tuple[str, int, str]]:
    return [(line.path, line.number, line.text) for line in follower.poll(final=final).lines]


# ----------------------------------------------------------------------------------------
# The upstream files: what audit reads, watch reads
# ----------------------------------------------------------------------------------------
def test_watch_reads_every_upstream_file_as_audit_does(tmp_path: Path):
    folder = upstream(tmp_path / "otlp")
    audited = load_traces(folder)
    expected = audited.con.execute(SPANS).fetchall()
    audit_problems = [str(p) for p in audited.problems]
    audited.con.close()
    assert len(expected) == 29  # the README's table, duplicates counted once

    # What one poll hands to watch's evaluation (before old spans are pruned by --horizon).
    follower = Follower(folder, patterns=PATTERNS)
    batch = follower.poll(final=True)
    follower.close()
    assert batch.notes == [] and not batch.more
    engine = Engine(WatchSettings(), dedupe=Deduper(), cooldown=Cooldown(cooldown_s=300))
    ingested = engine.ingest(batch.lines)
    # Not just as many: the very same spans, from the same file and line.
    seen = engine.con.execute(SPANS).fetchall()
    engine.con.close()
    relative = [(t, s, n, str(Path(f).relative_to(folder)), ln) for t, s, n, f, ln in expected]
    assert seen == relative
    assert ingested.spans == 29
    # The same problems, named by the path each reader was given.
    assert len(ingested.problems) == len(audit_problems)
    for problem, audit_problem in zip(ingested.problems, audit_problems, strict=True):
        assert audit_problem.endswith(str(problem))
    (logs,) = [p for p in ingested.problems if p.file == LOGS]
    assert str(logs).startswith(f"{LOGS}:1: OTLP logs, not traces")


def test_watch_once_on_the_upstream_files_counts_the_spans_audit_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    folder = upstream(tmp_path / "otlp")
    args = ["watch", str(folder), "--once", "--no-state", "--pattern", "*.json"]
    assert main([*args, "--pattern", "*.jsonl"]) == 0
    err = capsys.readouterr().err
    assert "18 new lines, 29 new spans, 0 alerts" in err  # 14 documents and 4 lines
    assert f"{LOGS}:1: OTLP logs, not traces" in err and "not valid JSON" not in err

    # The logs file alone is new data of which nothing can be used.
    only_logs = tmp_path / "logs"
    only_logs.mkdir()
    shutil.copy(folder / LOGS, only_logs / LOGS)
    assert main(["watch", str(only_logs), "--once", "--no-state", "--pattern", "*.json"]) == 2
    err = capsys.readouterr().err
    assert f"{LOGS}:1: OTLP logs, not traces" in err and "resourceSpans" in err


@pytest.mark.parametrize(
    ("head", "pretty"),
    [
        (b'{\n  "n": 1\n}\n', True),
        (b"\xef\xbb\xbf[\r\n  1\r\n]\r\n", True),
        (b'  {"resourceSpans": [\n  ]}\n', True),
        (b'{"resourceSpans": []}\n{\n', False),  # a whole JSON-lines record
        (b"{", False),  # not finished: decides nothing yet
        (b"not json\n{\n", False),
        (b"{" + b" " * follow.FIRST_LINE_BYTES + b"\n}\n", False),  # a long JSON-lines record
    ],
)
def test_a_document_file_is_one_whose_first_line_opens_a_value_it_does_not_close(
    head: bytes, pretty: bool
):
    assert opens_document(head) is pretty


# ----------------------------------------------------------------------------------------
# Arriving, growing, changing
# ----------------------------------------------------------------------------------------
def test_a_document_written_in_two_parts_is_read_once_whole_and_alerts(tmp_path: Path):
    text = pretty_traces(7)
    target = tmp_path / "copy.json"
    notes: list[str] = []
    out = io.StringIO()
    w = watcher(tmp_path, notes, out)
    summary = RunSummary()
    half = len(text) // 2
    with target.open("w") as f:
        f.write(text[:half])
        f.flush()
        w.poll(summary)
        w.poll(summary)
        assert summary.lines == 0 and out.getvalue() == "" and notes == []
        f.write(text[half:])
    w.poll(summary)
    w.poll(summary)
    w.close()
    assert summary.lines == 1 and summary.spans == 1 and summary.problems == 0
    assert notes == []
    (alert,) = out.getvalue().splitlines()
    assert "task-7" in alert and "[copy.json:1]" in alert

    # A restart does not read it again.
    again: list[str] = []
    w = watcher(tmp_path, again)
    summary = RunSummary()
    w.poll(summary)
    w.close()
    assert summary.lines == 0 and again == []


def test_documents_appended_later_are_read_and_earlier_ones_are_not_read_again(tmp_path: Path):
    target = tmp_path / "t.json"
    target.write_text('{\n  "n": 1\n}')
    follower = Follower(tmp_path, patterns=PATTERNS)
    assert texts(follower) == [("t.json", 1, '{"n":1}')]
    with target.open("a") as f:
        f.write('\n{\n  "n": 2\n}\n{"n": 3}\n{\n  "n":')
    assert texts(follower) == [("t.json", 4, '{"n":2}'), ("t.json", 7, '{"n":3}')]
    saved = [Cursor.from_json(c.to_json()) for c in follower.cursors()]
    follower.close()
    assert [c.documents for c in saved] == [True]
    with target.open("a") as f:
        f.write(" 4\n}\n")
    restarted = Follower(tmp_path, patterns=PATTERNS, cursors=saved)
    assert texts(restarted) == [("t.json", 8, '{"n":4}')]
    assert texts(restarted) == []
    restarted.close()


def test_from_the_end_a_document_being_written_is_read_once_complete(tmp_path: Path):
    """Starting at the end of a file of documents went past the one still being written,
    so its rest was read from its middle: a note of text that is not JSON, and it was lost."""
    target = tmp_path / "t.json"
    target.write_text('{\n  "n": 1\n}\n{\n  "n":')
    follower = Follower(tmp_path, patterns=PATTERNS, start_at_end=True)
    assert texts(follower) == []
    with target.open("a") as f:
        f.write(' 2\n}\n{"n": 3}\n')
    batch = follower.poll(final=True)
    assert [(line.number, line.text) for line in batch.lines] == [(4, '{"n":2}'), (7, '{"n":3}')]
    assert batch.notes == []
    follower.close()


def test_an_incomplete_document_is_reported_only_once_it_stops_growing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    target = tmp_path / "t.json"
    target.write_text('{\n  "n": 1,\n  "m": tr')
    follower = Follower(tmp_path, patterns=PATTERNS)
    batch = follower.poll()
    assert batch.lines == [] and batch.notes == []
    monkeypatch.setattr(follow, "DOCUMENT_SETTLE_S", 0.0)
    batch = follower.poll()
    assert batch.lines == []
    (note,) = batch.notes
    assert note.startswith("t.json:1: this JSON document is not complete yet")
    assert "line 3 column 8" in note and "not valid JSON" not in note
    assert follower.poll().notes == []  # said once
    with target.open("a") as f:
        f.write("ue\n}\n")
    batch = follower.poll()
    assert [line.text for line in batch.lines] == ['{"n":1,"m":true}'] and batch.notes == []


def test_once_reports_an_incomplete_document_and_reads_it_when_complete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    text = pretty_traces(3)
    target = tmp_path / "copy.json"
    target.write_text(text[:-40])
    assert main(["watch", str(tmp_path), "--once", "--pattern", "*.json"]) == 0
    err = capsys.readouterr().err
    assert "copy.json:1: this JSON document is not complete yet" in err
    assert "0 new lines" in err
    target.write_text(text)
    assert main(["watch", str(tmp_path), "--once", "--pattern", "*.json"]) == 1
    err = capsys.readouterr().err
    assert "1 new lines, 1 new spans, 1 alerts" in err and "not complete" not in err


def test_text_between_documents_is_skipped_and_reported_as_audit_does(tmp_path: Path):
    target = tmp_path / "t.json"
    target.write_text('{\n  "n": 1\n}\noops\n{\n  "n": 2\n}\n')
    follower = Follower(tmp_path, patterns=PATTERNS)
    batch = follower.poll()
    assert [(line.number, line.text) for line in batch.lines] == [(1, '{"n":1}'), (5, '{"n":2}')]
    (note,) = batch.notes
    assert note.startswith("t.json:4: not valid JSON at line 4 column 1")
    assert "reading went on at line 5" in note
    # Broken text at the end is said at once: no amount of writing makes it a document.
    with target.open("a") as f:
        f.write("oops\n")
    batch = follower.poll()
    assert batch.lines == []
    (note,) = batch.notes
    assert note.startswith("t.json:8: not valid JSON at line 8 column 1")
    follower.close()


def test_a_file_that_only_looks_like_a_document_is_read_as_lines(tmp_path: Path):
    target = tmp_path / "t.jsonl"
    target.write_text("[\nnot json\n")
    follower = Follower(tmp_path)
    assert texts(follower) == [("t.jsonl", 1, "["), ("t.jsonl", 2, "not json")]
    with target.open("a") as f:
        f.write('{"n": 3}\n')
    assert texts(follower) == [("t.jsonl", 3, '{"n": 3}')]
    follower.close()


def test_a_broken_first_line_before_json_lines_reads_them_as_audit_does(tmp_path: Path):
    # A cut first record followed by whole ones: audit reads the whole ones as documents
    # and reports the cut one; watch does the same once the file has stopped growing.
    target = tmp_path / "t.jsonl"
    target.write_text('{"n":\n{"n": 2}\n')
    follower = Follower(tmp_path)
    assert texts(follower) == []  # still a document that may be being written
    batch = follower.poll(final=True)
    assert [(line.number, line.text) for line in batch.lines] == [(2, '{"n":2}')]
    (note,) = batch.notes
    assert note.startswith("t.jsonl:1: not valid JSON") and "reading went on at line 2" in note
    follower.close()


def test_a_document_file_rewritten_in_place_is_read_again(tmp_path: Path):
    target = tmp_path / "t.json"
    target.write_text('{\n  "n": 1\n}\n')
    follower = Follower(tmp_path, patterns=PATTERNS)
    assert texts(follower) == [("t.json", 1, '{"n":1}')]
    target.write_text('{\n  "n": 22\n}\n')  # same inode, longer, different start
    batch = follower.poll()
    assert [line.text for line in batch.lines] == ['{"n":22}']
    assert any("reading it again from the start" in note for note in batch.notes)
    target.write_text('{"n": 3}\n')  # shrunk, and now JSON-lines
    batch = follower.poll()
    assert [line.text for line in batch.lines] == ['{"n": 3}']
    follower.close()


def test_from_end_skips_a_document_file_and_reads_what_is_appended(tmp_path: Path):
    target = tmp_path / "t.json"
    target.write_text('{\n  "n": 1\n}')
    follower = Follower(tmp_path, patterns=PATTERNS, start_at_end=True)
    assert texts(follower) == []
    with target.open("a") as f:
        f.write('\n{\n  "n": 2\n}\n')
    assert texts(follower) == [("t.json", 4, '{"n":2}')]
    follower.close()
