"""Small formatting helpers shared by the report formats."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


UNKNOWN_COST = "unknown"
"""How every format shows a cost nobody reported and no price covers (never as $0)."""


def money(value: float | None, *, estimated: float | None = None) -> str:
    """A cost in US dollars; ``estimated`` (the part priced from the price table) marks it
    ``est.``."""
    if value is None:
        return UNKNOWN_COST
    text = f"${value:.4f}" if value and abs(value) < 0.01 else f"${value:,.2f}"
    return text + " est." if estimated else text


def plural(n: int | float | None, word: str, words: str | None = None) -> str:
    """``1 file``, ``2 files`` (with thousands separators)."""
    number = 0 if n is None else int(n)
    return f"{number:,} {word if number == 1 else (words or word + 's')}"


def source_text(source: dict[str, Any]) -> str:
    """A table read in place (a ClickHouse audit's ``source``) for people:
    ``otel.otel_traces on chdb://./db``, with the time range of the spans when one was
    given."""
    text = f"{source.get('table')} on {source.get('url')}"
    bounds = [
        f"{word} {source[key]}"
        for key, word in (("since", "at or after"), ("until", "before"))
        if source.get(key)
    ]
    if bounds:
        text += f" (spans started {', '.join(bounds)})"
    return clean(text)


def spend(summary: dict[str, Any]) -> str:
    """The spend line of a summary: cost (marked estimated), tokens, unpriced tokens and
    the tokens charged to no agent."""
    if summary.get("input_tokens") is None and summary.get("output_tokens") is None:
        if summary.get("cost_usd") is None:
            return f"{UNKNOWN_COST}: no span reported tokens or a cost"
    text = (
        f"{money(summary.get('cost_usd'), estimated=summary.get('estimated_cost_usd'))} for "
        f"{count(summary.get('input_tokens'))} input and "
        f"{count(summary.get('output_tokens'))} output tokens"
    )
    est = summary.get("estimated_cost_usd")
    if est:
        text += f" ({money(est)} of it estimated from model prices)"
    unpriced_in = summary.get("unpriced_input_tokens") or 0
    unpriced_out = summary.get("unpriced_output_tokens") or 0
    if unpriced_in or unpriced_out:
        models = [m or "no model named" for m in summary.get("unpriced_models") or []]
        named = f": {', '.join(models)}" if models else ""
        text += (
            f"; partial: {count(unpriced_in)} input and {count(unpriced_out)} output tokens"
            f" unpriced (no price for their model{named})"
        )
    uncharged_in = summary.get("uncharged_input_tokens") or 0
    uncharged_out = summary.get("uncharged_output_tokens") or 0
    if uncharged_in or uncharged_out:
        cost = summary.get("uncharged_cost_usd")
        priced = "" if cost is None else f" ({money(cost)})"
        text += (
            f"; {count(uncharged_in)} input and {count(uncharged_out)} output tokens{priced}"
            " not charged to any agent"
        )
    return text


def runs_word(summary: dict[str, Any]) -> str:
    """What the reliability figures count as a run: workflows, or (when no span is a
    workflow's) traces, so that every place a report counts them says the same."""
    return "workflows" if summary.get("workflows") else "traces"


def nothing_to_judge(summary: dict[str, Any]) -> bool:
    """True when the traces hold no handoff at all, so no protocol rule had anything to check."""
    return not summary.get("handoffs")


NOTHING_TO_JUDGE = "no handoff in these traces, so there was nothing to judge"
"""What every format says instead of PASS when :func:`nothing_to_judge`."""


VERDICTS = ("fail", "not_judged", "nothing_to_judge", "pass")
"""The verdicts every report format names, most severe first (the JSON report's
``verdict.status``; FAIL, NOT JUDGED, NOTHING TO JUDGE and PASS in the table)."""


def verdict_status(failing: int, not_judged: str | None, summary: dict[str, Any]) -> str:
    """The one verdict of an audit, so that no two formats can disagree: ``fail`` when a
    finding fails, else ``not_judged`` when agents were seen whose delegation the audit could
    not recognise, else ``nothing_to_judge`` when no handoff was found, else ``pass``."""
    if failing:
        return "fail"
    if not_judged:
        return "not_judged"
    return "nothing_to_judge" if nothing_to_judge(summary) else "pass"


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


def jsonable(value: Any, *, exponent: Callable[[float], Any] | None = None) -> Any:
    """``value`` ready for ``json.dumps``: datetimes as ISO text in UTC with a ``Z`` (the
    spans' times are UTC; a reader must not take them for local time), tuples as lists,
    floats to 12 significant digits, NaN and infinities as null. ``exponent``, when given,
    replaces each float Python writes with an exponent (``1e-05``, ``1e+16``)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v, exponent=exponent) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, exponent=exponent) for v in value]
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
        rounded = float(f"{value:.12g}")
        if exponent is not None and "e" in repr(rounded):
            return exponent(rounded)
        return rounded
    return value


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small acyclic records (the
    findings of a large report): each collection it runs meanwhile walks every object the
    process holds, and reference counting frees such records anyway."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
