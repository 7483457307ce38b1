"""How numbers read on the dashboard: money, rates, latencies and counts, as plain text."""

from __future__ import annotations

import math

from auditor.report.values import UNKNOWN_COST

__all__ = ["count", "delta_pct", "ms", "pct", "usd"]


def _missing(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def usd(value: float | None, *, estimated: float | None = None) -> str:
    """``$1,234.56``; sub-dollar amounts keep four decimals (one phase can cost $0.0004).
    A cost partly ``estimated`` from the price table reads ``$0.0108 est.``, as in reports."""
    if _missing(value):
        return UNKNOWN_COST  # as every report says it: an unknown cost is never $0
    assert value is not None
    text = f"${value:,.2f}" if abs(value) >= 1 else f"${value:,.4f}"
    return text + " est." if estimated and not _missing(estimated) else text


def pct(value: float | None, *, digits: int = 1) -> str:
    """A 0..1 rate as a percentage: ``77.4%``."""
    if _missing(value):
        return "—"
    assert value is not None
    return f"{value * 100:.{digits}f}%"


def ms(value: float | None) -> str:
    """Milliseconds, switching to seconds from 10 s: ``412 ms``, ``2,512 ms``, ``12.5 s``."""
    if _missing(value):
        return "—"
    assert value is not None
    if abs(value) >= 10_000:
        return f"{value / 1000:,.1f} s"
    return f"{value:,.0f} ms" if abs(value) >= 10 else f"{value:.1f} ms"


def count(value: float | None) -> str:
    """A count with thousands separators."""
    if _missing(value):
        return "—"
    assert value is not None
    return f"{int(value):,}"


def delta_pct(now: float | None, before: float | None) -> str | None:
    """Relative change from ``before`` to ``now`` as ``+12.3%``; None when not comparable."""
    if _missing(now) or _missing(before) or not before:
        return None
    assert now is not None and before is not None
    return f"{(now - before) / abs(before) * 100:+.1f}%"
