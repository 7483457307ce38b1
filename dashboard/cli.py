"""``handoffscope dashboard PATH``: serve the Streamlit app over a trace set.

The command only builds a ``streamlit run`` command line and hands over to it. The trace
paths travel to the app in an environment variable (:data:`PATHS_ENV`), so the app reads the
same source whether it was started from here, from ``streamlit run`` or from a test.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import click

from auditor.errors import AuditError
from dashboard.clickhouse import SOURCE_ENV, ClickHouseSpec, check, is_clickhouse_url
from dashboard.source import PATHS_ENV

APP_PATH = Path(__file__).with_name("app.py")
"""The Streamlit entry point: it builds the navigation and nothing else."""

DEFAULT_HOST = "127.0.0.1"
"""Loopback only: trace data can hold prompts and customer identifiers."""
DEFAULT_PORT = 8501
"""Streamlit's usual port."""

_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def build_command(
    *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, max_upload_mb: int = 200
) -> list[str]:
    """Return the ``streamlit run`` argument vector that serves the dashboard.

    The server runs headless (no browser is opened, no e-mail prompt), never reports usage,
    does not watch source files and accepts uploads up to ``max_upload_mb`` megabytes.
    """
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP_PATH),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
        "--server.runOnSave",
        "false",
        "--server.maxUploadSize",
        str(max_upload_mb),
        "--client.showErrorDetails",
        "none",
        "--client.toolbarMode",
        "minimal",
        "--theme.base",
        "light",
    ]


def build_env(
    paths: list[Path],
    base: dict[str, str] | None = None,
    *,
    remote: ClickHouseSpec | None = None,
) -> dict[str, str]:
    """Return the environment for the app: ``base`` plus the absolute trace paths, or the
    ClickHouse source (``remote``)."""
    env = dict(os.environ if base is None else base)
    env[PATHS_ENV] = json.dumps([str(p.resolve()) for p in paths])
    env.pop(SOURCE_ENV, None)
    if remote is not None:
        env[SOURCE_ENV] = remote.to_env()
    return env


@click.command(
    "dashboard",
    epilog="Examples:\n\n\b\n  handoffscope dashboard sample_traces/ --port 8600\n"
    "  handoffscope dashboard clickhouse://localhost:8123/otel --since 24h",
)
@click.argument("paths", nargs=-1, metavar="[PATH | URL]...")
@click.option(
    "--host",
    default=DEFAULT_HOST,
    show_default=True,
    help="Address to listen on. Keep the loopback default unless the network may see traces.",
)
@click.option(
    "--port",
    default=DEFAULT_PORT,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="Port to listen on.",
)
@click.option(
    "--max-upload-mb",
    default=200,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Largest trace file the upload widget accepts, in megabytes.",
)
@click.option(
    "--table",
    default=None,
    help="ClickHouse sources: the traces table (default otel_traces, the exporter's).",
)
@click.option(
    "--since",
    default=None,
    metavar="TIME",
    help="ClickHouse sources: spans that started at or after TIME (ISO 8601, or a duration "
    "back from now: 90m, 24h, 7d).",
)
@click.option(
    "--until",
    default=None,
    metavar="TIME",
    help="ClickHouse sources: spans that started before TIME (ISO 8601, or a duration).",
)
def dashboard(
    paths: tuple[str, ...],
    host: str,
    port: int,
    max_upload_mb: int,
    table: str | None,
    since: str | None,
    until: str | None,
) -> None:
    """Open the dashboard over trace files, directories or a compacted Parquet store.

    PATH may be given several times; with none, the app starts empty and accepts uploaded
    trace files. The server listens on 127.0.0.1 and opens no browser: visit the URL it
    prints.

    A URL instead opens the Collector's ClickHouse table, queried in place: chdb://DIR
    (an embedded data directory) or clickhouse://HOST:PORT/DATABASE. Every page is
    computed inside ClickHouse. The user and password come from HANDOFFSCOPE_CLICKHOUSE_USER
    and HANDOFFSCOPE_CLICKHOUSE_PASSWORD, never from the command line.
    """
    remote, files = _sources(paths, table=table, since=since, until=until)
    if host not in _LOOPBACK:
        click.echo(
            f"handoffscope: warning: listening on {host}; anyone who can reach it can read "
            "these traces.",
            err=True,
        )
    _check_free(host, port)
    command = build_command(host=host, port=port, max_upload_mb=max_upload_mb)
    env = build_env(files, remote=remote)
    click.echo(
        f"handoffscope: dashboard on http://{_url_host(host)}:{port}  (Ctrl-C stops it)",
        err=True,
    )
    if os.name == "posix":
        # Replace this process so signals (Ctrl-C, SIGTERM from a supervisor) reach the
        # server directly and no orphaned child is left behind.
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(command[0], command, env)
    returncode = subprocess.call(command, env=env)  # pragma: no cover - non-POSIX only
    if returncode != 0:  # pragma: no cover
        raise click.ClickException(f"streamlit exited with status {returncode}")


def _sources(
    paths: tuple[str, ...], *, table: str | None, since: str | None, until: str | None
) -> tuple[ClickHouseSpec | None, list[Path]]:
    """The ClickHouse source or the trace paths named on the command line, checked now so
    that a mistake is a one-line error before the server starts."""
    urls = [p for p in paths if is_clickhouse_url(p)]
    if not urls:
        if table or since or until:
            raise click.UsageError("--table, --since and --until apply to ClickHouse sources")
        missing = [p for p in paths if not Path(p).exists()]
        if missing:
            raise click.BadParameter(f"{missing[0]!r} does not exist.", param_hint="PATH")
        return None, [Path(p) for p in paths]
    if len(paths) != 1:
        raise AuditError(
            "a chdb:// or clickhouse:// source is shown on its own: give it as the only PATH"
        )
    spec = ClickHouseSpec(url=urls[0], table=table, since=since, until=until)
    check(spec)
    return spec, []


def _check_free(host: str, port: int) -> None:
    """Fail with a usable message before Streamlit starts, rather than after the URL was
    printed, when nothing can listen there (Streamlit's own message names no way out)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise click.BadParameter(
            f"{host!r} is not an address here: {e}", param_hint="--host"
        ) from e
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # As a server binds: a port in TIME_WAIT after a restart is free to use.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as e:
            hint = "in use" if e.errno == errno.EADDRINUSE else e.strerror or str(e)
            raise click.ClickException(
                f"cannot listen on {_url_host(host)}:{port} ({hint}); choose another "
                "--port, or stop what listens there"
            ) from e


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
