"""Long work says how far it has got on a terminal's stderr, and prints nothing extra when
piped: the console script runs here with its stderr on a pseudo-terminal, and piped."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from collector.progress import SHOW_AFTER_ENV, Display, progress, step
from tests.support.paths import REPO
from tests.support.terminal import read_terminal

ROOT = REPO
SAMPLE = ROOT / "sample_traces" / "fault-mix"
SCRIPT = Path(sys.executable).parent / "handoffscope"


def _run(args: list[str], *, terminal: bool, cwd: Path) -> tuple[int, str, str]:
    """Run the console script with stdout piped and stderr on a pseudo-terminal (or piped):
    (exit code, stdout, what stderr showed)."""
    import fcntl
    import pty
    import struct
    import termios

    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env[SHOW_AFTER_ENV] = "0"  # show at once: the inputs here are small
    env.pop("TERM", None)
    if not terminal:
        done = subprocess.run(
            [str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
        )
        return done.returncode, done.stdout, done.stderr
    main_fd, tty = pty.openpty()
    fcntl.ioctl(tty, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    # stdout goes to a file: a pipe nobody reads while the terminal is read would fill up.
    stdout = (cwd / "stdout.txt").open("w+b")
    with (
        stdout,
        subprocess.Popen(
            [str(SCRIPT), *args], stdout=stdout, stderr=tty, env=env, cwd=cwd
        ) as process,
    ):
        os.close(tty)
        shown = read_terminal(main_fd)
        code = process.wait(timeout=300)
        stdout.seek(0)
        out = stdout.read().decode()
    os.close(main_fd)
    return code, out, shown.decode(errors="replace")


@pytest.mark.parametrize(
    ("args", "title"),
    [
        (["audit", str(SAMPLE), "--format", "json"], "auditing"),
        (["compact", str(SAMPLE), "--out", "store.parquet"], "compacting"),
        (["simulate", "--workflows", "20", "--out", "sim", "--quiet"], "simulating 20 workflows"),
    ],
    ids=["audit", "compact", "simulate"],
)
def test_progress_shows_at_a_terminal_and_not_when_piped(
    tmp_path: Path, args: list[str], title: str
) -> None:
    code, out, shown = _run(args, terminal=True, cwd=tmp_path)
    assert code in (0, 1), shown
    assert "Traceback" not in shown
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)
    assert title in plain
    assert "\x1b[" in shown  # drawn in place, then removed
    for leftover in (tmp_path / "store.parquet", tmp_path / ".store.parquet.derived"):
        if leftover.is_dir():
            __import__("shutil").rmtree(leftover)
        elif leftover.exists():
            leftover.unlink()
    __import__("shutil").rmtree(tmp_path / "sim", ignore_errors=True)
    piped_code, piped_out, piped_err = _run(args, terminal=False, cwd=tmp_path)
    assert piped_code == code
    assert title not in piped_err and "\x1b[" not in piped_err
    if args[0] == "audit":
        # The report itself is the same, whether stderr is a terminal or not.
        report, piped = json.loads(out), json.loads(piped_out)
        assert report["findings"] == piped["findings"] and report["findings"]


def test_step_without_a_display_does_nothing_and_a_display_counts() -> None:
    step("nobody is looking", done=1, total=2)  # no display open: nothing happens
    with progress("work", enabled=False) as display:
        step("reading a.jsonl", done=1, total=4)
        assert display.text == "reading a.jsonl"
        assert display.fraction() == 0.25
        assert display.line().startswith("work: reading a.jsonl (")
        step("removing duplicates")
        assert display.fraction() is None
    step("after the block")
    assert display.text == "removing duplicates"


def test_a_display_never_reports_more_than_done() -> None:
    display = Display("work", done=7, total=5)
    assert display.fraction() == 1.0
