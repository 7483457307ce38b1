"""What ``handoffscope audit`` does with a ``chdb://`` or ``clickhouse://`` source, and the
``handoffscope clickhouse`` commands.

The audit command's options stay in :mod:`auditor.commands`; this module reads the ClickHouse
ones (``--table``, ``--since``, ``--until``) and runs :func:`audit_clickhouse`.
``handoffscope clickhouse ddl`` prints (or, with ``--apply``, runs) the optional stored columns
of :mod:`auditor.clickhouse.schema`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Final

import click

from auditor.audit import AuditResult
from auditor.clickhouse.audit import TimeRange, audit_clickhouse
from auditor.clickhouse.engine import (
    DEFAULT_DATABASE,
    DEFAULT_TABLE,
    connect,
    is_clickhouse_url,
    parse_url,
)
from auditor.clickhouse.schema import ddl as ddl_text
from auditor.clickhouse.schema import statements
from auditor.clickhouse.spans import quoted_ident
from auditor.errors import AuditError, first_line
from auditor.settings import AuditSettings

__all__ = ["audit_source", "clickhouse", "parse_moment", "quiet_client"]

_BACK: Final = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|h|d|w)")
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_moment(text: str | None, *, option: str, now: datetime | None = None) -> datetime | None:
    """An ISO 8601 time (naive means UTC) or a duration back from now (``24h``, ``90m``)."""
    if text is None:
        return None
    back = _BACK.fullmatch(text.strip())
    if back:
        seconds = float(back.group(1)) * _UNITS[back.group(2)]
        return (now or datetime.now(UTC)) - timedelta(seconds=seconds)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as e:
        raise AuditError(
            f"{option} {text!r} is neither a time (2026-01-31T12:00:00Z) nor a duration"
            " back from now (90m, 24h, 7d)"
        ) from e
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@contextmanager
def quiet_client() -> Iterator[None]:
    """clickhouse-connect's log records kept off the terminal while a command runs: it logs a
    warning (``Unexpected Http Driver Exception``) before raising the error that the command
    turns into its own one-line message. Only its logger; handoffscope's messages are not
    log records."""
    logger = logging.getLogger("clickhouse_connect")
    # A handler of its own stops Python's last-resort stderr handler; no propagation keeps
    # the records from an application's root handlers too, for this command only.
    handler = logging.NullHandler()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def audit_source(
    paths: tuple[str, ...],
    settings: AuditSettings,
    *,
    table: str | None,
    since: str | None,
    until: str | None,
) -> AuditResult:
    """Audit the one ClickHouse source in ``paths``."""
    if len(paths) != 1 or not is_clickhouse_url(paths[0]):
        raise AuditError(
            "a chdb:// or clickhouse:// source is audited on its own: give it as the only PATH"
        )
    time_range = TimeRange(
        since=parse_moment(since, option="--since"), until=parse_moment(until, option="--until")
    )
    if time_range.since and time_range.until and time_range.since >= time_range.until:
        raise AuditError("--since must come before --until")
    with quiet_client():
        return audit_clickhouse(
            paths[0], settings, table=table or DEFAULT_TABLE, time_range=time_range
        )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def clickhouse() -> None:
    """Helpers for auditing the OpenTelemetry Collector's ClickHouse table."""


@clickhouse.command()
@click.option(
    "--database",
    default=DEFAULT_DATABASE,
    show_default=True,
    help="The database of the traces table (the exporter's is otel).",
)
@click.option(
    "--table",
    default=DEFAULT_TABLE,
    show_default=True,
    help="The traces table the Collector's ClickHouse exporter writes.",
)
@click.option(
    "--apply",
    "url",
    metavar="URL",
    help="Run the statements on this chdb://PATH or clickhouse://HOST:PORT/DB source instead"
    " of printing them (the database is --database, not the URL's; a chdb folder must"
    " already hold the table).",
)
def ddl(database: str, table: str, url: str | None) -> None:
    """Print the ALTER TABLE statements that make audits of the exporter's table fast.

    They add one MATERIALIZED column per handshake key the audit reads (handoff.id,
    handoff.phase, the agent, tokens, cost ...), computed as spans arrive instead of
    parsed from SpanAttributes by every audit, and compute them for the rows already
    stored. The audit reads these columns when the table has them and the attribute map
    when not, with the same findings. Run it again after upgrading handoffscope: a column
    whose expression changed is updated, and until then the audit reads the map.

    \b
      handoffscope clickhouse ddl | clickhouse-client --multiquery
      handoffscope clickhouse ddl --apply chdb://./traces-db
    """
    qualified = f"{quoted_ident(database)}.{quoted_ident(table)}"
    text = ddl_text(qualified)
    if url is None:
        click.echo(text, nl=False)
        return
    if not is_clickhouse_url(url):
        raise click.BadParameter("give a chdb:// or clickhouse:// URL", param_hint="--apply")
    location = parse_url(url)
    with quiet_client():
        # The statements alter the exporter's table: a chdb folder without it is refused
        # as an audit refuses it, rather than created empty for the ALTER to fail.
        engine = connect(location)
        try:
            for statement in statements(text):
                try:
                    engine.command(statement)
                except Exception as e:
                    raise AuditError(
                        f"{location.where}: ClickHouse refused the DDL for {database}.{table}:"
                        f" {first_line(e)}",
                        title="ddl failed",
                    ) from e
        finally:
            engine.close()
    click.echo(f"stored columns added to {database}.{table} at {location.where}", err=True)
