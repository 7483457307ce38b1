"""Segments: sealing, rotation, failed writes, the directory lock and crash repair."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collector.receiver import OPEN_SUFFIX, QUARANTINE_DIR, FsyncPolicy, SegmentPolicy
from collector.receiver.errors import OutDirLocked
from collector.receiver.segments import SegmentWriter, lock_directory, repair_directory


def _line(n: int, spans: int = 1) -> bytes:
    span = {"traceId": f"{n:032x}", "spanId": f"{n + 1:016x}", "name": f"s{n}"}
    request = {"resourceSpans": [{"scopeSpans": [{"spans": [span] * spans}]}]}
    return json.dumps(request).encode() + b"\n"


def _writer(tmp_path: Path, **policy) -> SegmentWriter:
    return SegmentWriter(tmp_path, policy=SegmentPolicy(**policy))


def test_a_segment_appears_under_its_final_name_only_when_sealed(tmp_path, caplog):
    writer = _writer(tmp_path)
    writer.append(_line(1) + _line(2), lines=2, spans=2)
    writer.flush()
    assert list(tmp_path.glob("*.jsonl")) == []
    [part] = tmp_path.glob(f"*{OPEN_SUFFIX}")
    with caplog.at_level(logging.INFO, logger="handoffscope.collect"):
        sealed = writer.seal()
    assert sealed is not None and sealed.path.exists() and not part.exists()
    assert sealed.path.read_bytes() == _line(1) + _line(2)
    assert (sealed.lines, sealed.spans, sealed.bytes) == (2, 2, len(_line(1) + _line(2)))
    [message] = [r.getMessage() for r in caplog.records]
    assert message.startswith("event=sealed segment=" + sealed.path.name)
    assert "lines=2 spans=2" in message
    assert writer.seal() is None  # nothing open any more


def test_rotation_by_size_keeps_lines_whole_and_names_in_time_order(tmp_path):
    writer = _writer(tmp_path, rotate_bytes=2 * len(_line(0)))
    for n in range(7):
        writer.append(_line(n), lines=1, spans=1)
        writer.tick()
    writer.seal()
    segments = sorted(tmp_path.glob("*.jsonl"))
    assert len(segments) == 4
    assert b"".join(p.read_bytes() for p in segments) == b"".join(_line(n) for n in range(7))
    assert [p.stat().st_mtime_ns for p in segments] == sorted(
        p.stat().st_mtime_ns for p in segments
    )
    assert all(p.name.startswith("spans-") for p in segments)


def test_rotation_by_age(tmp_path):
    writer = _writer(tmp_path, rotate_seconds=0.05)
    writer.append(_line(1), lines=1, spans=1)
    assert writer.tick() is None
    deadline = writer.next_deadline()
    assert deadline is not None
    time.sleep(max(0.0, deadline - time.monotonic()) + 0.01)
    sealed = writer.tick()
    assert sealed is not None and sealed.path.read_bytes() == _line(1)
    assert writer.next_deadline() is None  # idle: no empty segment is opened


@pytest.mark.parametrize("policy", list(FsyncPolicy))
def test_every_fsync_policy_seals_the_same_bytes(tmp_path, policy):
    writer = _writer(tmp_path, fsync=policy, fsync_interval_s=0.01)
    writer.append(_line(1), lines=1, spans=1)
    writer.flush(force=True)
    writer.append(_line(2), lines=1, spans=1)
    writer.tick()
    sealed = writer.seal()
    assert sealed is not None and sealed.path.read_bytes() == _line(1) + _line(2)


def test_a_failed_write_leaves_no_partial_line(tmp_path):
    # A real short write: the file-size limit stops the second write halfway (EFBIG).
    script = f"""
import os, resource, signal, sys
from pathlib import Path
from collector.receiver.segments import SegmentWriter, SegmentPolicy
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
writer = SegmentWriter(Path({str(tmp_path)!r}), policy=SegmentPolicy())
writer.append(b"a" * 599 + b"\\n", lines=1, spans=1)
try:
    writer.append(b"b" * 599 + b"\\n", lines=1, spans=1)
except OSError as e:
    print("refused", e.errno)
writer.append(b"c" * 299 + b"\\n", lines=1, spans=1)
writer.seal()
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("refused")
    [segment] = tmp_path.glob("*.jsonl")
    assert segment.read_bytes() == b"a" * 599 + b"\n" + b"c" * 299 + b"\n"


def test_the_lock_keeps_a_second_receiver_out(tmp_path):
    fd = lock_directory(tmp_path)
    try:
        with pytest.raises(OutDirLocked, match=f"pid {os.getpid()}"):
            lock_directory(tmp_path)
    finally:
        os.close(fd)
    os.close(lock_directory(tmp_path))  # released with the descriptor


def test_the_lock_is_held_across_processes(tmp_path):
    fd = lock_directory(tmp_path)
    try:
        script = (
            "import sys; from pathlib import Path; "
            "from collector.receiver.segments import lock_directory; "
            f"lock_directory(Path({str(tmp_path)!r}))"
        )
        result = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
        )
        assert result.returncode != 0 and "OutDirLocked" in result.stderr
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------
# Crash repair
# --------------------------------------------------------------------------------------
PART = "spans-20250101T000000.000000Z-000001.jsonl.part"
FINAL = "spans-20250101T000000.000000Z-000001.jsonl"


@pytest.mark.parametrize(
    ("content", "kept", "quarantined"),
    [
        pytest.param(_line(1) + _line(2), _line(1) + _line(2), b"", id="complete"),
        pytest.param(_line(1) + _line(2)[:17], _line(1), _line(2)[:17], id="torn-tail"),
        pytest.param(
            _line(1) + bytes(4096) + b"\n" + _line(3),
            _line(1) + _line(3),
            bytes(4096) + b"\n",
            id="zero-filled-block",
        ),
        pytest.param(
            _line(1) + b"not json\n" + _line(3) + b'{"resourceSp',
            _line(1) + _line(3),
            b'not json\n{"resourceSp',
            id="garbage-and-torn",
        ),
        pytest.param(
            b'{"other": 1}\n' + _line(2),
            _line(2),
            b'{"other": 1}\n',
            id="json-but-not-a-trace-request",
        ),
        pytest.param(b'{"resourceSp', b"", b'{"resourceSp', id="only-torn"),
        pytest.param(b"", b"", b"", id="empty"),
    ],
)
def test_repair_keeps_every_complete_line_and_quarantines_the_rest(
    tmp_path, caplog, content, kept, quarantined
):
    (tmp_path / PART).write_bytes(content)
    with caplog.at_level(logging.INFO, logger="handoffscope.collect"):
        assert repair_directory(tmp_path) == 1
    assert not (tmp_path / PART).exists()
    final = tmp_path / FINAL
    assert (final.read_bytes() if final.exists() else b"") == kept
    torn = tmp_path / QUARANTINE_DIR / (FINAL + ".torn")
    assert (torn.read_bytes() if torn.exists() else b"") == quarantined
    [message] = [r.getMessage() for r in caplog.records]
    assert message.startswith("event=repaired")
    assert f"lines={len(kept.splitlines())}" in message
    assert f"quarantined_bytes={len(quarantined)}" in message


def test_repair_after_an_interrupted_repair(tmp_path):
    # A crash during an earlier repair left its temporary file; the .part is still whole.
    (tmp_path / PART).write_bytes(_line(1) + b"junk\n")
    (tmp_path / (PART + ".repair")).write_bytes(_line(1)[:5])
    repair_directory(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([FINAL, QUARANTINE_DIR])
    assert (tmp_path / FINAL).read_bytes() == _line(1)


def test_sealed_segments_are_left_alone(tmp_path):
    (tmp_path / FINAL).write_bytes(b"anything\n")
    assert repair_directory(tmp_path) == 0
    assert (tmp_path / FINAL).read_bytes() == b"anything\n"


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"rotate_bytes": 0}, "rotate_bytes"),
        ({"rotate_seconds": 0}, "rotate_seconds"),
        ({"prefix": "a/b"}, "prefix"),
        ({"prefix": ".hidden"}, "prefix"),
    ],
)
def test_bad_policies_are_refused(options, problem):
    with pytest.raises(ValueError, match=problem):
        SegmentPolicy(**options)
