"""The ground truth of a run: every injected fault, the rule that must flag it, and the figures.

``manifest.json`` sits next to the trace files. Its ``faults`` list has one entry per place
a rule must fire (the trace, task and idempotency key of the handoff, or the receiver for the
per-receiver latency budget); ``expected_findings`` counts them per rule. A handoff that is
not in the list is clean: no rule may flag it. ``figures`` holds the measured end-to-end
success beside its analytic value, retries, restarts, spans and spend.

The file is written with sorted keys and no wall-clock data, so the same seed gives the same
bytes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

__all__ = ["MANIFEST_FORMAT", "MANIFEST_NAME", "FaultEntry", "load_manifest", "manifest_dict"]

MANIFEST_NAME: Final = "manifest.json"
"""File name of the ground truth, next to the trace files."""
MANIFEST_FORMAT: Final = 1
"""Version of the manifest layout, written as ``format``."""


@dataclass(frozen=True, slots=True, order=True)
class FaultEntry:
    """One place where a rule must fire, and the fault that caused it."""

    rule: str
    """The auditor rule id expected to flag it."""
    fault: str
    """The injected fault (``collector.simulator.faults``) or the run mode that caused it."""
    trace_id: str | None
    """Hex trace id of the workflow; None for per-receiver entries."""
    task_id: str | None
    """The handoff's task id; None for per-receiver and per-workflow entries."""
    idempotency_key: str | None
    """The handoff's idempotency key, when it had one."""
    sender: str | None
    """Who proposed."""
    receiver: str | None
    """Who received (for ``validation-p95-over-budget``: the receiver over budget)."""
    workflow_id: str | None = None
    """``handoff.workflow.id`` of the workflow."""
    attempt: int | None = None
    """The attempt (or, for restarts, the workflow run) the rule fires on, where it matters."""
    value: float | None = None
    """The figure behind the entry, where one applies (e.g. the receiver's p95 in ms)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def manifest_dict(
    *,
    parameters: Mapping[str, Any],
    figures: Mapping[str, Any],
    files: Iterable[Mapping[str, Any]],
    faults: Iterable[FaultEntry],
) -> dict[str, Any]:
    """The manifest document: parameters, files, figures, faults and counts per rule."""
    entries = sorted(faults, key=_order)
    counts = Counter(e.rule for e in entries)
    return {
        "format": MANIFEST_FORMAT,
        "generator": "handoffscope simulate",
        "parameters": dict(parameters),
        "files": list(files),
        "figures": dict(figures),
        "expected_findings": {rule: counts[rule] for rule in sorted(counts)},
        "faults": [e.to_dict() for e in entries],
    }


def _order(e: FaultEntry) -> tuple[str, str, str, str, int]:
    return (e.rule, e.trace_id or "", e.task_id or "", e.receiver or "", e.attempt or 0)


def write_manifest(path: Path, document: Mapping[str, Any]) -> None:
    """Write ``document`` as stable JSON: sorted keys, one fault entry per line.

    The fault list can hold thousands of entries, so each is one compact line (easy to
    grep and to diff); everything else is indented.
    """
    body = {k: v for k, v in document.items() if k != "faults"}
    text = json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False)
    entries = [
        json.dumps(e, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        for e in document.get("faults", [])
    ]
    faults = "[]" if not entries else "[\n    " + ",\n    ".join(entries) + "\n  ]"
    text = text[: text.rindex("}")].rstrip() + f',\n  "faults": {faults}\n}}'
    path.write_text(text + "\n", encoding="utf-8")


def load_manifest(path: str | Path) -> dict[str, Any]:
    """Read a manifest (a file, or the folder holding ``manifest.json``)."""
    p = Path(path)
    if p.is_dir():
        p = p / MANIFEST_NAME
    return json.loads(p.read_text(encoding="utf-8"))
