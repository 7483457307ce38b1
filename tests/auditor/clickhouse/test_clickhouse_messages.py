"""What a user sees when a ClickHouse source cannot be opened: one line, exit code 2.

No chdb session is opened here: each source is refused before one would be, and the
tests check that nothing was created on the way.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

pytest.importorskip("chdb")
pytest.importorskip("clickhouse_connect")

from auditor.cli import main  # noqa: E402
from auditor.clickhouse.engine import parse_url  # noqa: E402
from auditor.errors import AuditError  # noqa: E402
from dashboard.clickhouse import ClickHouseSpec, open_source  # noqa: E402


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err and "Stack trace" not in captured.err
    return lines[0]


def test_an_unreachable_server_shows_only_our_line(
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HANDOFFSCOPE_CLICKHOUSE_PASSWORD", "s3cret-value")
    caplog.set_level(logging.DEBUG)
    assert main(["audit", f"clickhouse://127.0.0.1:{port}/otel"]) == 2
    line = _one_line(capsys)
    assert "s3cret-value" not in line + caplog.text
    assert line.startswith(
        f"handoffscope: cannot reach ClickHouse at clickhouse://127.0.0.1:{port}"
    )
    assert "connection refused" in line and "8123" in line
    # The client library's "Unexpected Http Driver Exception" reached no handler: neither
    # Python's last-resort one (the stray stderr line) nor an application's.
    assert not [r for r in caplog.records if r.name.startswith("clickhouse_connect")]
    # ... for this command only: the library's logger is as it was.
    assert logging.getLogger("clickhouse_connect").propagate
    assert not logging.getLogger("clickhouse_connect").handlers


def test_a_url_without_a_port_names_the_port_used() -> None:
    bare = parse_url("clickhouse://")
    assert bare.where == "clickhouse://localhost:8123"
    assert "8123" in bare.defaulted and "None" not in bare.where + bare.defaulted
    assert parse_url("clickhouses://db").where == "clickhouses://db:8443"
    assert parse_url("clickhouse://[::1]:9123/x").where == "clickhouse://[::1]:9123"
    assert parse_url("clickhouse://db:9123").defaulted == ""


def test_a_url_with_a_query_string_is_refused_without_echoing_it() -> None:
    with pytest.raises(AuditError, match="takes no") as refused:
        parse_url("clickhouse://db:8123/otel?password=hunter2")
    assert "hunter2" not in str(refused.value)


@pytest.mark.parametrize(
    "command", [["audit"], ["clickhouse", "ddl", "--apply"]], ids=["audit", "ddl"]
)
def test_a_file_is_no_chdb_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    traces = tmp_path / "traces.jsonl"
    traces.write_text("{}\n")
    assert main([*command, f"chdb://{traces}"]) == 2
    line = _one_line(capsys)
    assert f"{traces} is a file, not a chdb data folder" in line
    assert f"handoffscope audit {traces}" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traces.jsonl"]


@pytest.mark.parametrize(
    "command", [["audit"], ["clickhouse", "ddl", "--apply"]], ids=["audit", "ddl"]
)
def test_a_missing_folder_is_named_and_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    missing = tmp_path / "no" / "such"
    assert main([*command, f"chdb://{missing}"]) == 2
    line = _one_line(capsys)
    assert f"no folder {missing}" in line and "docs/deployment.md" in line
    assert not (tmp_path / "no").exists()


def test_a_folder_without_chdb_data_is_left_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    assert main(["audit", f"chdb://{tmp_path}"]) == 2
    assert "holds no chdb data" in _one_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_the_dashboard_creates_no_folder(tmp_path: Path) -> None:
    missing = tmp_path / "db"
    with pytest.raises(AuditError, match="no folder"):
        open_source(ClickHouseSpec(url=f"chdb://{missing}"))
    assert not missing.exists()
