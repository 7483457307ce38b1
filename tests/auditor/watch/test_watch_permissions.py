"""Files and folders ``watch`` may not read or write give one clear line, never a traceback.

Root ignores permission bits, so when the tests run as root each command runs without
root's overrides (``setpriv`` drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, the
capabilities that bypass permission bits): it is then held to the bits like any user. The
interpreter may live under root's home, which ``nobody`` cannot enter, so the uid stays 0
and the files it must not read belong to root with no permission bits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.watch import otlp_line, validate_span

HANDOFFSCOPE = str(Path(sys.executable).with_name("handoffscope"))


DROP_OVERRIDES = ["--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]


def run_unprivileged(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``handoffscope ARGS`` as a process that permission bits apply to."""
    command = [HANDOFFSCOPE, *args]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv is not None, "setpriv (util-linux) is needed to drop root's overrides"
        command = [setpriv, *DROP_OVERRIDES, *command]
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=home)


def test_the_commands_here_are_held_to_permission_bits(shared: Path):
    secret = shared / "secret"
    secret.write_text("x")
    secret.chmod(0o000)
    probe = run_unprivileged("--version", home=shared)
    assert probe.returncode == 0, probe.stderr
    command = [sys.executable, "-c", f"open({str(secret)!r}).read()"]
    if os.geteuid() == 0:
        command = [str(shutil.which("setpriv")), *DROP_OVERRIDES, *command]
    assert "PermissionError" in subprocess.run(command, capture_output=True, text=True).stderr


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder the unprivileged user can enter and write (pytest's tmp_path is root's)."""
    folder = Path(tempfile.mkdtemp(prefix="hs-perm-"))
    folder.chmod(0o777)
    try:
        yield folder
    finally:
        for root, dirs, _ in os.walk(folder):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o777)
        shutil.rmtree(folder, ignore_errors=True)


def _traces(folder: Path) -> Path:
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    good = folder / "good.jsonl"
    good.write_text(otlp_line([validate_span(trace=1, latency_s=3.0)]))
    secret = folder / "secret.jsonl"
    secret.write_text(otlp_line([validate_span(trace=2, latency_s=3.0)]))
    good.chmod(0o644)
    secret.chmod(0o000)
    return folder


def _one_clear_line(err: str, *needles: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if all(n in line for n in needles)]
    assert len(lines) == 1, err
    return lines[0]


def test_an_unreadable_file_is_one_line_and_the_others_are_read(shared: Path):
    folder = _traces(shared / "traces")
    watch = run_unprivileged("watch", str(folder), "--once", home=shared)
    line = _one_clear_line(watch.stderr, "secret.jsonl", "Permission denied")
    assert "skipped" in line
    # The readable file was still read and alerted on (exit 1: it alerted).
    assert watch.returncode == 1, watch.stderr
    assert "task-1" in watch.stdout and "task-2" not in watch.stdout
    # audit says the same of the same file.
    audit = run_unprivileged("audit", str(folder), home=shared)
    audit_line = _one_clear_line(audit.stderr, "secret.jsonl", "Permission denied")
    assert "cannot be read" in audit_line and "cannot be read" in line


def test_an_unreadable_sub_folder_is_one_line(shared: Path):
    folder = _traces(shared / "traces")
    (folder / "secret.jsonl").chmod(0o644)
    hidden = folder / "private"
    hidden.mkdir()
    (hidden / "more.jsonl").write_text(otlp_line([validate_span(trace=3, latency_s=3.0)]))
    hidden.chmod(0o000)
    watch = run_unprivileged("watch", str(folder), "--once", home=shared)
    line = _one_clear_line(watch.stderr, "private", "Permission denied")
    assert "cannot be listed" in line
    assert watch.returncode == 1 and "task-1" in watch.stdout and "task-2" in watch.stdout
    audit = run_unprivileged("audit", str(folder), home=shared)
    _one_clear_line(audit.stderr, "private", "Permission denied")


def test_a_read_only_folder_with_the_default_state_is_a_clear_error(shared: Path):
    folder = _traces(shared / "traces")
    (folder / "secret.jsonl").chmod(0o644)
    folder.chmod(0o555)
    watch = run_unprivileged("watch", str(folder), "--once", home=shared)
    assert watch.returncode == 2, watch.stderr
    line = _one_clear_line(watch.stderr, "cannot write the watch state file")
    assert "Permission denied" in line and "--state" in line and "--no-state" in line
    assert watch.stdout == ""
    # It says so before reading anything, and --no-state runs.
    stateless = run_unprivileged("watch", str(folder), "--once", "--no-state", home=shared)
    assert stateless.returncode == 1, stateless.stderr


def test_an_unwritable_state_path_is_a_clear_error(shared: Path):
    folder = _traces(shared / "traces")
    locked = shared / "locked"
    locked.mkdir(mode=0o555)
    locked.chmod(0o555)
    for state in (locked / "state.json", locked / "sub" / "state.json"):
        watch = run_unprivileged("watch", str(folder), "--once", "--state", str(state), home=shared)
        assert watch.returncode == 2, watch.stderr
        line = _one_clear_line(watch.stderr, "cannot write the watch state file")
        assert str(state) in line and "Permission denied" in line
