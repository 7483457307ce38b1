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


def build_env(paths: list[Path], base: dict[str, str] | None = None) -> dict[str, str]:
    """Return the environment for the app: ``base`` plus the absolute trace paths."""
    env = dict(os.environ if base is None else base)
    env[PATHS_ENV] = json.dumps([str(p.resolve()) for p in paths])
    return env


@click.command(
    "dashboard",
    epilog="Example:  handoffscope dashboard sample_traces/ --port 8600",
)
@click.argument(
    "paths",
    nargs=-1,
    type=click.Path(exists=True, path_type=Path),
    metavar="[PATH]...",
)
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
def dashboard(paths: tuple[Path, ...], host: str, port: int, max_upload_mb: int) -> None:
    """Open the dashboard over trace files, directories or a compacted Parquet store.

    PATH may be given several times; with none, the app starts empty and accepts uploaded
    trace files. The server listens on 127.0.0.1 and opens no browser: visit the URL it
    prints.
    """
    if host not in _LOOPBACK:
        click.echo(
            f"handoffscope: warning: listening on {host}; anyone who can reach it can read "
            "these traces.",
            err=True,
        )
    _check_free(host, port)
    command = build_command(host=host, port=port, max_upload_mb=max_upload_mb)
    env = build_env(list(paths))
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
