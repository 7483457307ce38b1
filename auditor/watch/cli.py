"""``handoffscope watch``: the command line over :class:`~auditor.watch.watcher.Watcher`."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

from auditor.settings import find_pyproject, parse_duration, resolve
from auditor.watch import settings as defaults
from auditor.watch.follow import DEFAULT_PATTERNS
from auditor.watch.settings import WatchSettings
from auditor.watch.sinks import (
    DEFAULT_EXEC_TIMEOUT_S,
    DEFAULT_OUTBOX_SIZE,
    DEFAULT_WEBHOOK_RETRIES,
    DEFAULT_WEBHOOK_TIMEOUT_S,
    WEBHOOK_FORMATS,
    ExecSink,
    JsonlSink,
    Sink,
    StreamSink,
    WebhookSink,
    log_stderr,
)
from auditor.watch.state import STATE_FILE_NAME
from auditor.watch.watcher import DEFAULT_FLUSH_TIMEOUT_S, Watcher
from collector import environment_variables as ev
from collector.errors import ConfigurationError

EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
"""Exit code when the reader of stdout, the only sink, closed it: as a shell reports a
process SIGPIPE stopped, and as ``handoffscope audit`` ends then."""


class Duration(click.ParamType):
    """A duration such as ``500ms``, ``2s`` or ``5m`` (a bare number is seconds)."""

    name = "duration"

    def __init__(self, *, allow_zero: bool = False) -> None:
        self.allow_zero = allow_zero

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        option = param.opts[0] if param is not None and param.opts else "duration"
        if self.allow_zero and str(value).strip().rstrip("ms").strip() in ("0", "0.0"):
            return 0.0
        try:
            return parse_duration(value, option=option)
        except ConfigurationError as e:
            self.fail(str(e).removeprefix(f"{option}: "), param, ctx)


DURATION = Duration()
DURATION_OR_ZERO = Duration(allow_zero=True)


def _header(value: str) -> tuple[str, str]:
    name, sep, content = value.partition(":")
    if not sep or not name.strip() or any(c in value for c in "\r\n"):
        raise click.BadParameter(f"{value!r}: write a header as 'Name: value'")
    return name.strip(), content.strip()


def _check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise click.BadParameter(
            f"{url!r} is not an http(s) URL; give the full address, e.g."
            " https://hooks.slack.com/services/...",
            param_hint="--webhook",
        )
    return url


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM end the loop cleanly (flush, save); a second one stops at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt  # a second signal: stop now, without flushing
        stop.set()

    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@click.command(name="watch")
@click.argument(
    "directory",
    type=click.Path(exists=True, file_okay=False, dir_okay=True, path_type=Path),
)
@click.option(
    "--once",
    is_flag=True,
    help=(
        "Evaluate what is there, then exit: 1 if it alerted, 0 if not, 2 on unusable input "
        "or lost alerts."
    ),
)
@click.option(
    "--state",
    "state_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help=(
        f"State file (read positions, alert memory, undelivered alerts). Default: "
        f"DIRECTORY/{STATE_FILE_NAME}."
    ),
)
@click.option(
    "--no-state",
    is_flag=True,
    help=(
        "Keep no state: every run starts from the beginning and may repeat alerts; alerts "
        "not delivered by exit are lost (listed on stderr, exit 2)."
    ),
)
@click.option(
    "--from-end",
    is_flag=True,
    help="On the first run (no state yet), skip the data already in DIRECTORY.",
)
@click.option(
    "--pattern",
    "patterns",
    multiple=True,
    metavar="GLOB",
    help=f"File names to follow (repeatable). Default: {', '.join(DEFAULT_PATTERNS)}.",
)
@click.option(
    "--poll-interval",
    type=DURATION,
    default=defaults.DEFAULT_POLL_INTERVAL_S,
    show_default="0.5s",
    help="How often to look for new data.",
)
@click.option(
    "--validation-timeout",
    type=DURATION,
    help=(
        "Alert on every validation answer slower than this. Default: 2s, or as set for audit "
        "(HANDOFFSCOPE_VALIDATION_TIMEOUT, [tool.handoffscope])."
    ),
)
@click.option(
    "--p95-budget",
    type=DURATION,
    help=(
        "Alert when a receiver's rolling p95 validation latency goes over this. Default: "
        "500ms, or as set for audit."
    ),
)
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    help=(
        "Retry cap --rule retry-cap-exceeded assumes where spans record none. Default: 3, or "
        "as set for audit."
    ),
)
@click.option(
    "--window",
    type=DURATION,
    default=defaults.DEFAULT_WINDOW_S,
    show_default="5m",
    help="Rolling window of the p95, in event time (span timestamps).",
)
@click.option(
    "--min-samples",
    type=click.IntRange(min=1),
    default=defaults.DEFAULT_MIN_SAMPLES,
    show_default=True,
    help="Validations a window needs before its p95 can breach or recover.",
)
@click.option(
    "--cooldown",
    type=DURATION_OR_ZERO,
    default=defaults.DEFAULT_COOLDOWN_S,
    show_default="5m",
    help="After a p95 breach alert for a receiver, wait this long before the next one.",
)
@click.option(
    "--rule",
    "rules",
    multiple=True,
    metavar="ID",
    help="Also alert on this auditor rule (repeatable), e.g. commit-without-accept.",
)
@click.option(
    "--settle",
    type=DURATION_OR_ZERO,
    default=defaults.DEFAULT_SETTLE_S,
    show_default="10s",
    help="How long a --rule finding must hold before it alerts (late spans may clear it).",
)
@click.option(
    "--horizon",
    type=DURATION,
    default=defaults.DEFAULT_HORIZON_S,
    show_default="15m",
    help="How much recent trace data (event time) --rule queries see.",
)
@click.option(
    "--jsonl",
    "jsonl_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append each alert's JSON payload to this file.",
)
@click.option(
    "--webhook",
    "webhook_url",
    envvar=ev.HANDOFFSCOPE_WEBHOOK_URL,
    metavar="URL",
    help="POST each alert as JSON to this URL (or set HANDOFFSCOPE_WEBHOOK_URL).",
)
@click.option(
    "--webhook-format",
    type=click.Choice(WEBHOOK_FORMATS),
    default="json",
    show_default=True,
    help="json: the documented payload; slack: a Slack incoming-webhook message.",
)
@click.option(
    "--webhook-header",
    "webhook_headers",
    multiple=True,
    metavar="'NAME: VALUE'",
    help="Extra HTTP header for the webhook (repeatable), e.g. 'Authorization: Bearer ...'.",
)
@click.option(
    "--webhook-timeout",
    type=DURATION,
    default=DEFAULT_WEBHOOK_TIMEOUT_S,
    show_default="5s",
    help="Timeout of one webhook request.",
)
@click.option(
    "--webhook-retries",
    type=click.IntRange(min=0),
    default=DEFAULT_WEBHOOK_RETRIES,
    show_default=True,
    help=(
        "Retries of an alert the webhook refuses (4xx); an unreachable webhook is retried "
        "until it is back."
    ),
)
@click.option(
    "--outbox-size",
    type=click.IntRange(min=1),
    default=DEFAULT_OUTBOX_SIZE,
    show_default=True,
    help="Alerts kept per sink while it is down; beyond this the oldest are dropped.",
)
@click.option(
    "--exec",
    "exec_command",
    metavar="CMD",
    help="Run this shell command per alert, with the alert's JSON payload on stdin.",
)
@click.option(
    "--exec-timeout",
    type=DURATION,
    default=DEFAULT_EXEC_TIMEOUT_S,
    show_default="30s",
    help="Kill an --exec command that runs longer than this.",
)
@click.option(
    "--stdout/--no-stdout",
    "stdout",
    default=None,
    help=(
        "Print a line per alert on stdout. Default: on unless --jsonl, --webhook or --exec is "
        "given."
    ),
)
@click.option(
    "--flush-timeout",
    type=DURATION,
    default=DEFAULT_FLUSH_TIMEOUT_S,
    show_default="10s",
    help=(
        "At exit, how long to keep delivering queued alerts; the rest are saved and sent on "
        "the next start (lost with --no-state)."
    ),
)
def watch(
    directory: Path,
    *,
    once: bool,
    state_path: Path | None,
    no_state: bool,
    from_end: bool,
    patterns: tuple[str, ...],
    poll_interval: float,
    validation_timeout: float | None,
    p95_budget: float | None,
    max_attempts: int | None,
    window: float,
    min_samples: int,
    cooldown: float,
    rules: tuple[str, ...],
    settle: float,
    horizon: float,
    jsonl_path: Path | None,
    webhook_url: str | None,
    webhook_format: str,
    webhook_headers: tuple[str, ...],
    webhook_timeout: float,
    webhook_retries: int,
    outbox_size: int,
    exec_command: str | None,
    exec_timeout: float,
    stdout: bool | None,
    flush_timeout: float,
) -> int:
    """Alert on validation latency (and any auditor rule) as traces arrive in DIRECTORY.

    DIRECTORY holds OTLP JSON-lines trace files: the sealed segments `handoffscope collect`
    writes, or files the OpenTelemetry JSON file exporter appends to. Pretty-printed OTLP
    JSON files (one document, or several back to back) are read too, each document once it
    is complete (add --pattern '*.json'). Only new data is read, also across restarts (see
    --state). Alerts: every validation slower than
    --validation-timeout (one per handoff), a receiver's rolling p95 going over --p95-budget
    and back (one alert each way), and any --rule. Stop with Ctrl-C or SIGTERM; queued
    alerts are delivered or saved first.
    """
    if no_state and state_path is not None:
        raise click.UsageError("--state and --no-state exclude each other")
    # The same thresholds as `handoffscope audit`: option > environment > pyproject > default.
    thresholds = resolve(
        {
            "validation_timeout": validation_timeout,
            "p95_budget": p95_budget,
            "max_attempts": max_attempts,
        },
        pyproject=find_pyproject(),
    )
    settings = WatchSettings(
        validation_timeout_s=thresholds.validation_timeout_s,
        p95_budget_s=thresholds.p95_budget_s,
        max_attempts=thresholds.max_attempts,
        window_s=window,
        min_samples=min_samples,
        cooldown_s=cooldown,
        rules=tuple(dict.fromkeys(rules)),
        settle_s=settle,
        horizon_s=max(horizon, window) if horizon == defaults.DEFAULT_HORIZON_S else horizon,
        poll_interval_s=poll_interval,
    )
    headers = dict(_header(h) for h in webhook_headers)
    if webhook_url is not None:
        _check_url(webhook_url)
    state_file = None if no_state else (state_path or directory / STATE_FILE_NAME)

    sinks: list[Sink] = []
    if stdout or (stdout is None and not (jsonl_path or webhook_url or exec_command)):
        sinks.append(StreamSink(outbox_size=outbox_size))
    if jsonl_path is not None:
        try:
            sinks.append(JsonlSink(jsonl_path, outbox_size=outbox_size))
        except OSError as e:
            raise click.BadParameter(
                f"cannot append to {jsonl_path}: {e.strerror}", param_hint="--jsonl"
            ) from e
    if webhook_url is not None:
        sinks.append(
            WebhookSink(
                webhook_url,
                fmt=webhook_format,
                headers=headers,
                timeout_s=webhook_timeout,
                retries=webhook_retries,
                outbox_size=outbox_size,
            )
        )
    if exec_command is not None:
        sinks.append(ExecSink(exec_command, timeout_s=exec_timeout, outbox_size=outbox_size))

    try:
        watcher = Watcher(
            directory,
            settings=settings,
            sinks=sinks,
            state_path=state_file,
            patterns=patterns or DEFAULT_PATTERNS,
            exclude=[jsonl_path] if jsonl_path is not None else [],
            start_at_end=from_end,
            flush_timeout_s=flush_timeout,
        )
    except BaseException:
        for sink in sinks:
            sink.close(timeout_s=0)
        raise

    if not once:
        shown = ", ".join(sink.name for sink in sinks)
        log_stderr(
            f"watch: following {directory} (state: {state_file or 'none'}); alerts to {shown};"
            " stop with Ctrl-C"
        )
    stop = threading.Event()
    with _stop_on_signals(stop):
        summary = watcher.run(once=once, stop=stop)
    if once:
        delivery = ""
        if summary.lost:
            delivery += f", {summary.lost} not delivered (lost)"
        if summary.undelivered and state_file is not None:
            delivery += f", {summary.undelivered} saved to deliver on the next run"
        click.echo(
            f"watch: {summary.lines} new lines, {summary.spans} new spans, {summary.alerts} alerts"
            f"{delivery}",
            err=True,
        )
        if summary.lines and not summary.spans and summary.problems:
            click.echo(
                f"watch: none of the new data in {directory} could be used (see above);"
                " point watch at OTLP JSON-lines trace files",
                err=True,
            )
            return 2
    # Alerts that reached no one are a failed run, not a quiet one (see "Exit codes").
    if summary.lost:
        return 2
    if once:
        return 1 if summary.alerts else 0
    if summary.sink_error is not None:
        # Stopped because its last sink failed: a reader that closed stdout (`| head`) ends
        # it as SIGPIPE would, as it ends `audit`; any other failure is an error.
        return EXIT_BROKEN_PIPE if isinstance(summary.sink_error, BrokenPipeError) else 2
    return 0
