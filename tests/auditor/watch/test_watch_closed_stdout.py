"""Alerts on a stdout that cannot take them: a pipe whose reader is gone, a full device.

The pipes are real (``os.pipe`` with its reading end closed), so the writes fail with the
kernel's own EPIPE, as under ``handoffscope watch DIR | head -1``.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from auditor.cli import main
from auditor.watch import JsonlSink, StreamSink, Watcher, WatchSettings
from tests.support.watch import write_handoffs

HANDOFFSCOPE = str(Path(sys.executable).with_name("handoffscope"))
STATE = ".handoffscope-watch.json"


def closed_pipe() -> io.TextIOWrapper:
    """The writing end of a pipe whose reader has already gone."""
    read, write = os.pipe()
    os.close(read)
    return open(write, "w", encoding="utf-8")  # noqa: SIM115 - closed by the test


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four slow validations: four alerts."""
    folder = tmp_path_factory.mktemp("closed-stdout")
    write_handoffs(folder / "traces.jsonl", [2.5, 3.0, 2.2, 4.0])
    return folder


def test_alerts_a_closed_stdout_never_printed_are_said_once_and_printed_on_the_next_run(
    traces: Path, tmp_path: Path
):
    directory = tmp_path / "traces"
    directory.mkdir()
    (directory / "traces.jsonl").write_bytes((traces / "traces.jsonl").read_bytes())
    logged = tmp_path / "alerts.jsonl"
    notes: list[str] = []
    pipe = closed_pipe()
    first = Watcher(
        directory,
        settings=WatchSettings(),
        sinks=[StreamSink(pipe), JsonlSink(logged)],
        state_path=directory / STATE,
        log=notes.append,
    )
    summary = first.run(once=True)
    # The file sink still got every alert; the closed pipe is said once, not once per alert.
    assert summary.alerts == 4
    assert len(logged.read_text().splitlines()) == 4
    failure, saved_note = notes
    assert failure.startswith("watch: stdout was closed by its reader (Broken pipe)")
    assert "other sinks (jsonl) still get every alert" in failure
    assert saved_note.startswith("watch: 4 undelivered alerts are saved in"), notes
    # Not delivered, so not recorded as delivered: saved for the next start, not lost.
    assert summary.undelivered == 4 and summary.lost == 0
    saved = json.loads((directory / STATE).read_text())["outbox"]
    assert len(saved["stdout"]) == 4 and "jsonl" not in saved
    with pytest.raises(BrokenPipeError):
        pipe.close()  # what it still buffers cannot be written either

    out = io.StringIO()
    again = Watcher(
        directory,
        settings=WatchSettings(),
        sinks=[StreamSink(out)],
        state_path=directory / STATE,
        log=notes.append,
    )
    again.run(once=True)
    printed = out.getvalue().splitlines()
    assert len(printed) == 4 and all("slow-validation" in line for line in printed)
    assert json.loads((directory / STATE).read_text())["outbox"] == {}


def test_a_stdout_on_a_full_device_loses_alerts_without_a_state_file_exit_2(
    traces: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    full = open("/dev/full", "w", encoding="utf-8")  # noqa: SIM115 - closed below
    monkeypatch.setattr(sys, "stdout", full)
    try:
        code = main(["watch", str(traces), "--once", "--no-state"])
    finally:
        monkeypatch.undo()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, full.fileno())  # drop what it still buffers
        os.close(null)
        full.close()
    err = capsys.readouterr().err.splitlines()
    assert code == 2, err
    assert sum("stdout" in line for line in err) == 2, err  # the failure, then what is lost
    assert any("No space left on device" in line for line in err), err
    assert any("4 alerts not delivered to stdout are lost" in line for line in err), err
    assert not any("failed on alert" in line for line in err), err


def test_watch_into_a_pipe_its_reader_closed_exits_2_and_says_so_once(traces: Path):
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [HANDOFFSCOPE, "watch", str(traces), "--once", "--no-state"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    err = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert sum("Broken pipe" in line for line in err) == 1, done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr
    assert err[-1].startswith("watch: ") and "4 not delivered (lost)" in err[-1], done.stderr
