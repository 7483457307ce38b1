"""``handoffscope serve`` (a handshake receiver over HTTP) and ``handoffscope conformance``."""

from __future__ import annotations

import importlib
import ipaddress
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import click

from collector import environment_variables as ev
from collector.acceptor import Receiver
from collector.errors import ConfigurationError, HandoffscopeError
from collector.http import wire

__all__ = ["conformance", "load_receiver", "serve"]

_TOKEN_HELP = (
    "Environment variable holding the bearer token (never pass a token on the command line, "
    "where other users can read it in ps)."
)


def load_receiver(spec: str) -> Receiver:
    """The ``Receiver`` named by ``MODULE:ATTRIBUTE`` (an attribute that is a factory is called).

    The current directory is searched first, as ``python -m`` and uvicorn do.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"{spec!r} is not MODULE:RECEIVER (e.g. agents.writer:receiver)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            raise ConfigurationError(f"no module named {module_name!r} (from {spec!r})") from e
        raise
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            names = [n for n in dir(module) if isinstance(getattr(module, n), Receiver)]
            hint = f"; receivers there: {', '.join(names)}" if names else ""
            raise ConfigurationError(f"module {module_name!r} has no {attr!r}{hint}")
        target = getattr(target, part)
    if not isinstance(target, Receiver) and callable(target):
        target = target()
    if not isinstance(target, Receiver):
        raise ConfigurationError(
            f"{spec} is a {type(target).__name__}, not a collector.Receiver (or a function "
            "returning one)"
        )
    return target


def _token(env: str, *, explicit: bool) -> str | None:
    # Ours (the default) through the registry; a name chosen with --token-env as it is.
    token = ev.read(env) if env in ev.ALL else os.environ.get(env)
    if token is None:
        if explicit:
            raise ConfigurationError(f"--token-env {env}: that environment variable is not set")
        return None
    if not token or token != token.strip():
        raise ConfigurationError(
            f"the token in {env} must be non-empty and have no surrounding whitespace"
        )
    return token


def _a2a(module: str) -> Any:
    """A module of ``collector.a2a``, or a one-line install hint when a2a-sdk is missing."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != "a2a":
            raise
        raise click.ClickException(
            "--binding a2a needs a2a-sdk: pip install 'handoffscope[a2a]'"
        ) from e


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("target", metavar="MODULE:RECEIVER")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8700,
    show_default=True,
    help="Port to listen on.",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow --host to be an address other machines can reach (use a token, or TLS in front).",
)
@click.option(
    "--token-env",
    default=wire.TOKEN_ENV,
    show_default=True,
    help=_TOKEN_HELP + " Requests must then carry 'Authorization: Bearer TOKEN'.",
)
@click.option(
    "--max-body-size",
    type=click.IntRange(min=1),
    default=wire.DEFAULT_MAX_BODY_BYTES,
    show_default=True,
    help="Largest request body in bytes; larger ones get 413.",
)
@click.option(
    "--max-concurrent",
    type=click.IntRange(min=1),
    default=None,
    help="Requests handled at once; above it uvicorn answers 503 (a commit is then sent "
    "again by the channel). Unlimited by default.",
)
@click.option(
    "--trace-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the receiver's spans to this OTLP JSON file (installs the SDK globally "
    "before MODULE is imported).",
)
@click.option(
    "--binding",
    type=click.Choice(["http", "a2a"]),
    default="http",
    show_default=True,
    help="http: the protocol of docs/protocol.md. a2a: an A2A agent declaring the handshake "
    "extension (docs/a2a.md; needs the [a2a] extra).",
)
@click.option(
    "--public-url",
    default=None,
    metavar="URL",
    help="With --binding a2a: the URL clients reach the agent at, written into its Agent "
    "Card (default http://HOST:PORT).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="Least important log line shown.",
)
def serve(
    target: str,
    host: str,
    port: int,
    allow_remote: bool,
    token_env: str,
    max_body_size: int,
    max_concurrent: int | None,
    trace_file: Path | None,
    log_level: str,
    binding: str = "http",
    public_url: str | None = None,
) -> int:
    """Serve a handshake receiver over HTTP (the protocol of docs/protocol.md) or as an A2A
    agent (--binding a2a, docs/a2a.md).

    MODULE:RECEIVER names a collector.Receiver, or a function returning one, e.g.
    collector.http.conformance:receiver. Stops on Ctrl-C or SIGTERM.
    """
    # The server stack (uvicorn, starlette) loads only for `serve`, not for every command.
    import uvicorn

    from collector.http.server import handshake_app

    if not _loopback(host) and not allow_remote:
        raise click.UsageError(
            f"--host {host} is reachable from other machines; pass --allow-remote to mean it"
        )
    explicit = click.get_current_context().get_parameter_source("token_env") is not (
        click.core.ParameterSource.DEFAULT
    )
    token = _token(token_env, explicit=explicit)
    setup = None
    if trace_file is not None:
        from collector.configure import configure_telemetry  # the SDK: the [sdk] extra

        setup = configure_telemetry(
            service_name=f"handoffscope-serve:{target}", otlp=None, trace_file=trace_file
        )
    try:
        receiver = load_receiver(target)
        if binding == "a2a":
            a2a_app = _a2a("collector.a2a.server").a2a_app
            url = public_url or f"http://{host}:{port}"
            app = a2a_app(receiver, url=url, token=token, max_body_bytes=max_body_size)
            what = f"as an A2A agent (handshake extension v{wire.PROTOCOL_VERSION})"
        else:
            app = handshake_app(receiver, token=token, max_body_bytes=max_body_size)
            what = f"(protocol v{wire.PROTOCOL_VERSION})"
        logging.basicConfig(level=log_level.upper(), format="%(message)s")
        auth = f"bearer token from {token_env}" if token else "no token"
        click.echo(
            f"handoffscope: serving receiver {receiver.name!r} on http://{host}:{port} "
            f"{what}, {auth}",
            err=True,
        )
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            access_log=log_level == "debug",
            limit_concurrency=max_concurrent,
        )
        # uvicorn re-raises the SIGTERM it handled once it has shut down; the default action
        # would end the process before the spans are flushed below.
        previous = signal.signal(signal.SIGTERM, lambda *_: None)
        try:
            uvicorn.Server(config).run()
        finally:
            signal.signal(signal.SIGTERM, previous)
    finally:
        if setup is not None:
            setup.shutdown()
    return 0


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("url")
@click.option("--token-env", default=wire.TOKEN_ENV, show_default=True, help=_TOKEN_HELP)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "table", "text", "json"]),
    default="auto",
    show_default=True,
    help="auto: a table at a terminal, plain lines when piped.",
)
@click.option(
    "--scenario",
    "only",
    multiple=True,
    metavar="NAME",
    help="Run only this scenario (repeatable). Names: see the protocol doc.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds to wait for each HTTP answer.",
)
@click.option(
    "--binding",
    type=click.Choice(["http", "a2a"]),
    default="http",
    show_default=True,
    help="http: URL serves docs/protocol.md. a2a: URL is an A2A agent (docs/a2a.md; needs "
    "the [a2a] extra).",
)
def conformance(
    url: str,
    token_env: str,
    fmt: str,
    only: tuple[str, ...],
    timeout_s: float,
    binding: str = "http",
) -> int:
    """Run the protocol's scenarios against the receiver at URL.

    The receiver must keep the conformance contract (docs/protocol.md), as
    collector.http.conformance:receiver does. Exit 0 when every scenario passes, 1 when one
    fails, 2 when URL cannot be reached.
    """
    # The client stack (httpx) loads only for `conformance`.
    import httpx

    from collector.http import kit

    if binding == "a2a":
        a2a_kit = _a2a("collector.a2a.kit")
        scenarios: Any = a2a_kit.SCENARIOS
    else:
        scenarios = kit.SCENARIOS
    names = [s.name for s in scenarios]
    for name in only:
        if name not in names:
            import difflib

            near = difflib.get_close_matches(name, names, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise click.BadParameter(f"unknown scenario {name!r}{hint}", param_hint="--scenario")
    explicit = click.get_current_context().get_parameter_source("token_env") is not (
        click.core.ParameterSource.DEFAULT
    )
    token = _token(token_env, explicit=explicit)
    if binding == "a2a":
        # Reading the Agent Card is the reachability check (a HandoffscopeError when it fails).
        outcomes = a2a_kit.run(url, token=token, timeout_s=timeout_s, only=only)
    else:
        try:
            httpx.get(url.rstrip("/") + wire.ROUTE_HEALTH, timeout=timeout_s)
        except httpx.HTTPError as e:
            raise HandoffscopeError(f"cannot reach {url}: {type(e).__name__}: {e}") from e
        outcomes = kit.run(url, token=token, timeout_s=timeout_s, only=only)
    if fmt == "auto":
        fmt = "table" if sys.stdout.isatty() else "text"
    failed = sum(not o.passed and not o.skipped for o in outcomes)
    if fmt == "json":
        doc = {
            "url": url,
            "binding": binding,
            "protocol_version": wire.PROTOCOL_VERSION,
            "passed": failed == 0,
            "scenarios": [o.to_dict() for o in outcomes],
        }
        click.echo(json.dumps(doc, indent=2))
    elif fmt == "table":
        _table(url, outcomes)
    else:
        for o in outcomes:
            click.echo(f"{o.verdict}  {o.scenario}  {o.detail}")
        click.echo(_tally(outcomes))
    return 1 if failed else 0


def _table(url: str, outcomes: list[Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"Handshake conformance: {url}", title_justify="left")
    table.add_column("scenario")
    table.add_column("result")
    table.add_column("ms", justify="right")
    table.add_column("detail", overflow="fold")
    for o in outcomes:
        style = {"PASS": "green", "FAIL": "bold red", "SKIP": "yellow"}[o.verdict]
        verdict = Text(o.verdict, style=style)
        table.add_row(Text(o.scenario), verdict, f"{o.elapsed_ms:.0f}", Text(o.detail))
    console = Console()
    console.print(table)
    console.print(Text(_tally(outcomes)))


def _tally(outcomes: list[Any]) -> str:
    passed = sum(o.passed for o in outcomes)
    skipped = sum(o.skipped for o in outcomes)
    tally = f"{passed} passed, {len(outcomes) - passed - skipped} failed"
    return tally + (f", {skipped} skipped" if skipped else "")
