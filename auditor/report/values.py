"""Small formatting helpers shared by the report formats."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

MAX_TEXT = 300
"""Longest piece of trace content shown in a report cell (the rest is cut with ...)."""


def clean(value: Any, *, limit: int = MAX_TEXT) -> str:
    """Trace content as one printable line: control characters dropped, length capped."""
    if value is None:
        return ""
    text = "".join(ch if ch.isprintable() else " " for ch in str(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def money(value: float | None) -> str:
    """A cost in US dollars."""
    if value is None:
        return "-"
    if value and abs(value) < 0.01:
        return f"${value:.4f}"
    return f"${value:,.2f}"


def count(value: int | float | None) -> str:
    """A whole number with thousands separators."""
    return "-" if value is None else f"{int(value):,}"


def percent(value: float | None) -> str:
    """A rate as a percentage."""
    return "-" if value is None else f"{value * 100:.1f}%"


def ms(value: float | None) -> str:
    """A duration in milliseconds."""
    return "-" if value is None else f"{value:,.0f} ms"


def short_id(value: str | None) -> str:
    """The first 8 hex digits of an id (full ids are in the JSON report)."""
    return "" if not value else clean(value)[:8]


def jsonable(value: Any) -> Any:
    """``value`` ready for ``json.dumps``: datetimes as ISO text in UTC with a ``Z`` (the
    spans' times are UTC; a reader must not take them for local time), tuples as lists,
    floats to 12 significant digits, NaN and infinities as null."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.isoformat() + "Z"
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        # Parallel sums differ in the last bits from run to run; 12 significant digits do not.
        return float(f"{value:.12g}")
    return value
