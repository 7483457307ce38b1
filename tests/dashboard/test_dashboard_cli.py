"""``handoffscope dashboard``: the command line it builds, and where the traces come from."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from auditor.cli import main
from collector.errors import ConfigurationError
from dashboard.cli import APP_PATH, build_command, build_env
from dashboard.source import PATHS_ENV, Upload, fingerprint, paths_from_env, save_uploads


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_server_is_loopback_headless_and_private_by_default() -> None:
    command = build_command()
    assert command[1:5] == ["-m", "streamlit", "run", str(APP_PATH)]
    assert _option(command, "--server.address") == "127.0.0.1"
    assert _option(command, "--server.headless") == "true"
    assert _option(command, "--browser.gatherUsageStats") == "false"
    # A failure inside a page shows a message in the browser, never a traceback.
    assert _option(command, "--client.showErrorDetails") == "none"
    assert APP_PATH.exists()


def test_options_reach_the_server() -> None:
    command = build_command(host="::1", port=8600, max_upload_mb=50)
    assert _option(command, "--server.address") == "::1"
    assert _option(command, "--server.port") == "8600"
    assert _option(command, "--server.maxUploadSize") == "50"


def test_the_paths_travel_absolute_in_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "traces").mkdir()
    env = build_env([Path("traces")], base={"KEEP": "1"})
    assert env["KEEP"] == "1"
    assert json.loads(env[PATHS_ENV]) == [str(tmp_path / "traces")]
    assert paths_from_env(env) == [tmp_path / "traces"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", []),
        ('["a b/c.jsonl", "d"]', [Path("a b/c.jsonl"), Path("d")]),
        (f"x{os.pathsep}y", [Path("x"), Path("y")]),
    ],
)
def test_paths_from_the_environment(value: str, expected: list[Path]) -> None:
    assert paths_from_env({PATHS_ENV: value}) == expected


@pytest.mark.parametrize("value", ['["unterminated', '["ok", null]', "[1, 2]"])
def test_a_broken_variable_is_a_clear_error(value: str) -> None:
    with pytest.raises(ConfigurationError, match=PATHS_ENV):
        paths_from_env({PATHS_ENV: value})


def test_uploads_cannot_escape_their_folder(tmp_path: Path) -> None:
    folder = tmp_path / "uploads"
    written = save_uploads(
        [
            Upload("../../etc/passwd", b"a"),
            Upload("C:\\temp\\x.json", b"b"),
            Upload("traces.jsonl", b"c"),
            Upload("traces.jsonl", b"d"),
            Upload("..", b"e"),
        ],
        folder,
    )
    assert all(p.parent == folder for p in written)
    assert [p.read_bytes() for p in written] == [b"a", b"b", b"c", b"d", b"e"]
    assert len({p.name for p in written}) == 5
    assert not (tmp_path / "etc").exists()


def test_the_fingerprint_changes_when_a_collector_appends(tmp_path: Path) -> None:
    trace = tmp_path / "a.jsonl"
    trace.write_text("{}\n")
    before = fingerprint([tmp_path])
    assert fingerprint([tmp_path]) == before
    with trace.open("a") as f:
        f.write("{}\n")
    assert fingerprint([tmp_path]) != before
    (tmp_path / "b.jsonl").write_text("{}\n")
    assert len({before, fingerprint([tmp_path]), fingerprint([trace])}) == 3


def test_help_is_written_for_users(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--host", "--port", "--max-upload-mb"):
        assert option in out
    assert "127.0.0.1" in out and "upload" in out


def test_a_missing_path_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", "/no/such/traces"]) == 2
    err = capsys.readouterr().err
    assert "/no/such/traces" in err and "does not exist" in err


def test_a_port_in_use_is_a_clear_error_before_anything_starts() -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        script = Path(sys.executable).parent / "handoffscope"
        # A subprocess: were the check missing, the command would become the server itself.
        done = subprocess.run(
            [str(script), "dashboard", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    assert f"cannot listen on 127.0.0.1:{port} (in use)" in done.stderr
    assert "dashboard on" not in done.stderr and "Traceback" not in done.stderr
