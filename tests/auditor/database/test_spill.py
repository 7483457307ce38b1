"""Spill folders of large loads: removed by the next load once their process is gone,
whether it ended well or was killed, and never while it runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from auditor.database import spill
from auditor.loading.load import connect
from collector import environment_variables as ev

_HOLD = (
    "from auditor.database import spill; folder, _ = spill.make();"
    " print(folder, flush=True); import time; time.sleep(60)"
)


def _holder(root: Path) -> tuple[subprocess.Popen[str], Path]:
    """A process that made a spill folder under ``root`` and still runs."""
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLD],
        env={**os.environ, "TMPDIR": str(root)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    return process, Path(process.stdout.readline().strip())


def test_a_killed_loads_folder_is_swept_and_a_running_ones_kept(tmp_path: Path) -> None:
    killed, gone = _holder(tmp_path)
    running, kept = _holder(tmp_path)
    try:
        (gone / "spill").mkdir()
        (gone / "spill" / "duckdb_temp_block-0.block").write_bytes(b"\0" * 4096)
        assert spill.sweep(str(tmp_path)) == []  # both still run
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert spill.sweep(str(tmp_path)) == [str(gone)]
        assert not gone.exists() and kept.is_dir()
    finally:
        for process in (killed, running):
            process.kill()
            process.wait()
    assert spill.sweep(str(tmp_path)) == [str(kept)]


def test_a_folder_being_made_is_left_alone(tmp_path: Path) -> None:
    # No lock in it yet: the process making it has not locked it.
    (tmp_path / f"{spill.PREFIX}abc").mkdir()
    assert spill.sweep(str(tmp_path)) == []


def test_a_large_load_leaves_no_folder_and_sweeps_a_stopped_ones(tmp_path: Path) -> None:
    # A SIGTERM Python does not handle ends the process without its finalizers.
    stopped, left = _holder(tmp_path)
    stopped.send_signal(signal.SIGTERM)
    stopped.wait()
    assert left.is_dir()
    code = "from auditor.loading.load import connect; connect(large=True)"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    assert list(tmp_path.iterdir()) == []


def test_a_memory_limit_that_is_no_size_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from collector.errors import ConfigurationError

    monkeypatch.setenv(ev.HANDOFFSCOPE_MEMORY_LIMIT, "abc")
    with pytest.raises(ConfigurationError, match="HANDOFFSCOPE_MEMORY_LIMIT='abc' is not a"):
        connect(large=True)
