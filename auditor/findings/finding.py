"""One violation of one rule: :class:`Finding`, and its fields in report order."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Final

__all__ = ["FINDING_FIELDS", "Finding"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One violation of one rule, located as precisely as the trace allows."""

    rule: str
    severity: str
    message: str
    trace_id: str | None
    span_id: str | None
    task_id: str | None
    idempotency_key: str | None
    sender: str | None
    receiver: str | None
    value: float | None
    """The figure behind the finding (latency in ms, runs, attempts ...), if any."""
    attempt: int | None = None
    """The handoff attempt (or workflow run) the finding is about, if any."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the ``findings[]`` items of the JSON report)."""
        # What asdict() returns, field by field: every field is a scalar, and asdict's deep
        # copy took 2 of the 3.5 s a report of 100,000 findings took to render.
        return {name: getattr(self, name) for name in FINDING_FIELDS}


FINDING_FIELDS: Final = tuple(f.name for f in fields(Finding))
"""The fields of a :class:`Finding`, in order (the keys of a JSON report's finding)."""
