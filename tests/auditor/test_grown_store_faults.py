"""A grown store whose kept files are damaged on disk, half-written or never written (a full
disk): its audit computes what it cannot read from the spans, finds what a full audit of the
same data finds, and says so in a line on stderr; the spans appended are never lost.

One store is built for the module (framework fixtures, so that every file kept per trace has
rows); each test damages one file in place and puts it back.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest

from auditor import audit, load_traces
from auditor.cli import main
from auditor.loading.segments import CARRIED_FROM
from tests.auditor.test_grown_store import (
    FRAMEWORKS,
    _compared,
    _loaded,
    _report,
    _requests,
    _split,
    _write,
)
from tests.support.disks import mount_tmpfs, unmount

ROOT = os.geteuid() == 0
SAVED = ".spans_0.parquet.derived"
CARRIED = ".spans_added_000001.carried.parquet"
SEGMENT = "spans_added_000001.parquet"


@dataclass(frozen=True)
class Grown:
    store: Path
    old: Path
    new: Path
    whole: dict[str, Any]
    """The report of a full audit of the old and new files."""


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory) -> Grown:
    folder = tmp_path_factory.mktemp("grown")
    old, new = _split(_requests(FRAMEWORKS), 4)
    old_file = _write(folder / "in" / "a-old.jsonl", old)
    new_file = _write(folder / "in" / "b-new.jsonl", new)
    store = folder / "store"
    # Audited ahead: each rule's findings are kept, and the grown store's audit merges them.
    assert main(["compact", str(old_file), "--out", str(store), "-q"]) == 0
    append = ["compact", str(new_file), "--out", str(store), "--append", "--no-audit"]
    assert main(append) == 0
    whole = _report(audit(load_traces([old_file, new_file])))
    return Grown(store, old_file, new_file, whole)


def _audit(store: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Any, str]:
    """The grown store's first audit, as a user runs it: its JSON report and stderr."""
    capsys.readouterr()
    assert main(["audit", str(store), "--format", "json", "--output", str(out)]) in (0, 1)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return _compared(json.loads(out.read_text(encoding="utf-8"))), err


@contextmanager
def _damaged(grown: Grown, how: str, *names: str) -> Iterator[None]:
    """The files ``names`` of the store damaged ``how`` (in their body, their footer sound;
    or cut short), and put back afterwards, with what an audit kept for the grown store."""
    originals = {name: (grown.store / name).read_bytes() for name in names}
    for name, original in originals.items():
        data = bytearray(original)
        if how == "body":
            # A Parquet file ends with its footer, its length and PAR1: the pages lie before.
            footer = int.from_bytes(data[-8:-4], "little")
            end = len(data) - 8 - footer
            damaged = slice(4 + (end - 4) // 4, 4 + 3 * (end - 4) // 4)
            data[damaged] = bytes((b * 7 + 13) % 256 for b in data[damaged])
        else:
            del data[len(data) // 2 :]
        (grown.store / name).write_bytes(bytes(data))
    try:
        yield
    finally:
        for name, original in originals.items():
            (grown.store / name).write_bytes(original)
        shutil.rmtree(grown.store / ".parquet.derived", ignore_errors=True)


def test_kept_files_damaged_inside_are_computed_from_the_spans(
    grown: Grown, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The rows kept per trace for the framework figures (read as the audit goes, so found
    # damaged only then) and the append's copy of the touched traces' stored spans.
    with _damaged(grown, "body", f"{SAVED}/per_trace_fw_spans.parquet", CARRIED):
        report, err = _audit(grown.store, tmp_path / "report.json", capsys)
    assert report == grown.whole
    # One line each, saying what could not be read and what the audit did instead.
    for note in ("a table kept beside the store", "the copies of stored spans"):
        lines = [line for line in err.splitlines() if note in line]
        assert len(lines) == 1, err
        assert "could not be read" in lines[0]


def test_kept_files_cut_short_are_not_read(
    grown: Grown, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Cut short, a file's footer is gone: it is passed over before anything is read of it,
    # a saved table with a line saying so; the copy as if it had never been written.
    with _damaged(grown, "cut", f"{SAVED}/per_trace_waste.parquet", CARRIED):
        report, err = _audit(grown.store, tmp_path / "report.json", capsys)
    assert report == grown.whole
    lines = [line for line in err.splitlines() if "could not be read" in line]
    assert len(lines) == 1, err
    assert "a table kept beside the store" in lines[0]
    assert "per_trace_waste.parquet" in lines[0]


def test_a_copy_in_another_table_layout_is_not_read(grown: Grown, tmp_path: Path) -> None:
    # Copied from the very files, but written by another version of the store's table.
    carried = grown.store / CARRIED
    original = carried.read_bytes()
    con = duckdb.connect()
    stamp = con.execute(
        "SELECT value FROM parquet_kv_metadata($p) WHERE key = $k",
        {"p": str(carried), "k": CARRIED_FROM},
    ).fetchall()[0][0]
    other = tmp_path / "other.parquet"
    con.execute(
        "COPY (FROM read_parquet($p)) TO $out (FORMAT parquet, KV_METADATA"
        f" {{handoffscope_table: '0', {CARRIED_FROM}: $stamp}})",
        {"p": str(carried), "out": str(other), "stamp": bytes(stamp).decode()},
    )
    con.close()
    try:
        shutil.copyfile(other, carried)
        trace_set, read_through = _loaded(grown.store)
        assert read_through == [False]
        assert trace_set.span_count == load_traces([grown.old, grown.new]).span_count
    finally:
        carried.write_bytes(original)


def test_damaged_findings_and_what_a_killed_write_leaves_are_not_read(
    grown: Grown, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each part of the old store's findings damaged in its body: each rule runs over every
    # trace instead of merging them. And a compact or append killed while writing leaves its
    # hidden partial files: half of the next segment, of its copy, of a saved table, a part.
    parts = sorted((grown.store / SAVED / "parts").glob("*.part"))
    assert parts
    originals = [p.read_bytes() for p in parts]
    segment = (grown.store / SEGMENT).read_bytes()
    left = [
        grown.store / ".spans_added_000002.parquet.partial",
        grown.store / ".spans_added_000002.carried.parquet.partial",
        grown.store / ".parquet.derived" / "parts" / "tmp1234.partial",
    ]
    saved = grown.store / f"{SAVED}.partial"
    try:
        for path, data in zip(parts, originals, strict=True):
            middle = len(data) * 3 // 4
            path.write_bytes(data[:middle] + bytes([data[middle] ^ 0x20]) + data[middle + 1 :])
        for path in left:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(segment[: len(segment) // 2])
        saved.mkdir()
        (saved / "phases.parquet").write_bytes(segment[: len(segment) // 3])
        report, err = _audit(grown.store, tmp_path / "report.json", capsys)
        assert report == grown.whole
        assert "could not be read" not in err
    finally:
        for path, data in zip(parts, originals, strict=True):
            path.write_bytes(data)
        shutil.rmtree(saved, ignore_errors=True)
        shutil.rmtree(grown.store / ".parquet.derived", ignore_errors=True)
        for path in left[:2]:
            path.unlink(missing_ok=True)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs to fill."""
    where = tmp_path / "disk"
    where.mkdir()
    if not mount_tmpfs(where, "8m"):
        pytest.skip("mounting a tmpfs failed")
    try:
        yield where
    finally:
        unmount(where)


def _leave_free(folder: Path, free: int) -> None:
    """Fill the disk of ``folder`` until about ``free`` bytes are left."""
    info = os.statvfs(folder)
    filler = folder / "filler"
    filler.write_bytes(b"\0" * max(0, info.f_bavail * info.f_frsize - free))


@pytest.mark.skipif(not ROOT, reason="filling a disk needs a tmpfs (root)")
@pytest.mark.parametrize("room", ["segment only", "nothing"])
def test_a_full_disk_never_costs_the_appended_spans(
    grown: Grown,
    disk: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    room: str,
) -> None:
    store = disk / "store"
    store.mkdir()
    # The store before the append, its saved tables still its own (same sizes and times).
    shutil.copy2(grown.store / "spans_0.parquet", store / "spans_0.parquet")
    shutil.copytree(grown.store / SAVED, store / SAVED, ignore=shutil.ignore_patterns("parts"))
    size = (grown.store / SEGMENT).stat().st_size
    carried = (grown.store / CARRIED).stat().st_size
    # Room for the segment but not for its copy of the stored spans, or not even for it.
    _leave_free(disk, size + carried // 3 if room == "segment only" else size // 2)
    before = sorted(p.name for p in store.iterdir())
    capsys.readouterr()
    code = main(["compact", str(grown.new), "--out", str(store), "--append", "--no-audit"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    # Nothing half-written is left behind.
    assert not [p for p in store.rglob("*.partial")]
    if room == "nothing":
        assert code == 2
        assert "could not append" in err
        assert sorted(p.name for p in store.iterdir()) == before
        return
    assert code == 0, err
    assert (store / SEGMENT).is_file()
    assert not (store / CARRIED).exists()
    (line,) = [line for line in err.splitlines() if "no copy" in line]
    assert "No space left on device" in line
    # Audited on the full disk, where nothing can be kept beside it: the same report.
    report, _ = _audit(store, tmp_path / "full.json", capsys)
    assert report == grown.whole
    assert not (store / ".parquet.derived" / "parts").exists() or not any(
        (store / ".parquet.derived" / "parts").glob("*.partial")
    )


def test_a_segment_cut_short_is_a_problem_and_the_rest_is_audited(
    grown: Grown, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A copy of the store taken while a segment was written: the segment is named as a
    # problem, and the stored spans are audited as an audit of the old file alone audits them.
    with _damaged(grown, "cut", SEGMENT):
        out = tmp_path / "report.json"
        assert main(["audit", str(grown.store), "--format", "json", "--output", str(out)]) in (0, 1)
        report = json.loads(out.read_text(encoding="utf-8"))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (problem,) = report["problems"]
    assert SEGMENT in json.dumps(problem) and "not a readable Parquet file" in json.dumps(problem)
    assert _compared(report) == _report(audit(load_traces(grown.old)))
