"""What ``handoffscope audit`` does with a ``chdb://`` or ``clickhouse://`` source.

The command's options stay in :mod:`auditor.commands`; this module reads the ClickHouse
ones (``--table``, ``--since``, ``--until``) and runs :func:`audit_clickhouse`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Final

from auditor.audit import AuditResult
from auditor.clickhouse.audit import TimeRange, audit_clickhouse
from auditor.clickhouse.engine import DEFAULT_TABLE, is_clickhouse_url
from auditor.errors import AuditError
from auditor.settings import AuditSettings

__all__ = ["audit_source", "parse_moment"]

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
    return audit_clickhouse(paths[0], settings, table=table or DEFAULT_TABLE, time_range=time_range)
