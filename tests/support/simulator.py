"""Helpers for the simulator and sample-trace tests: read what a run wrote, audit it.

The span reader here is deliberately independent of the auditor (plain ``json`` over the
files), so the tests can check the simulator's output without trusting the code under test
elsewhere.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.simulator import load_manifest


@dataclass
class Span:
    """One span as written: ids, name, times, service, flattened attributes, events."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    service: str
    attrs: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def _value(v: dict[str, Any]) -> Any:
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "arrayValue" in v:
        return [_value(x) for x in v["arrayValue"].get("values", [])]
    return None


def _attrs(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {kv["key"]: _value(kv.get("value", {})) for kv in items}


def trace_files(folder: Path) -> list[Path]:
    """The trace files of a run folder, sorted."""
    return sorted(p for p in folder.iterdir() if p.name.endswith((".jsonl", ".jsonl.gz")))


def read_text(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.name.endswith(".gz") else data).decode("utf-8")


def read_spans(folder: Path) -> tuple[list[Span], int]:
    """Every unique span of a run folder, and how many span records there were in all."""
    seen: dict[tuple[str, str], Span] = {}
    total = 0
    for path in trace_files(folder):
        for line in read_text(path).splitlines():
            doc = json.loads(line)
            for rs in doc["resourceSpans"]:
                service = _attrs(rs["resource"]["attributes"])["service.name"]
                for ss in rs["scopeSpans"]:
                    for s in ss["spans"]:
                        total += 1
                        span = Span(
                            trace_id=s["traceId"],
                            span_id=s["spanId"],
                            parent_span_id=s.get("parentSpanId", ""),
                            name=s["name"],
                            start_ns=int(s["startTimeUnixNano"]),
                            end_ns=int(s["endTimeUnixNano"]),
                            service=service,
                            attrs=_attrs(s.get("attributes", [])),
                            events=[
                                (e["name"], _attrs(e.get("attributes", [])))
                                for e in s.get("events", [])
                            ],
                        )
                        seen.setdefault((span.trace_id, span.span_id), span)
    return list(seen.values()), total


def finding_key(
    rule: str, trace_id: str | None, task_id: str | None, receiver: str | None
) -> tuple[str, str | None, str | None, str | None]:
    """What identifies one expected finding: rule, trace, task (receiver for the p95 rule)."""
    per_receiver = rule == "validation-p95-over-budget"
    return (rule, trace_id, task_id, receiver if per_receiver else None)


def manifest_keys(folder: Path) -> list[tuple[str, str | None, str | None, str | None]]:
    """The manifest's expected findings, as sorted keys."""
    doc = load_manifest(folder)
    return sorted(
        finding_key(e["rule"], e["trace_id"], e["task_id"], e["receiver"]) for e in doc["faults"]
    )


def findings(paths: list[Path]) -> tuple[list[Any], Any]:
    """Run every auditor rule (not the figures) over ``paths``; the findings and connection."""
    from auditor import load_traces
    from auditor.audit import prepare, run_rule
    from auditor.rules import all_rules

    files = [str(p) for folder in paths for p in trace_files(folder)]
    con = load_traces(files).con
    prepare(con)
    return [f for rule in all_rules() for f in run_rule(con, rule)], con


def audit_keys(folder: Path) -> list[tuple[str, str | None, str | None, str | None]]:
    """What the auditor's rules find in a run folder, as sorted keys."""
    found, _ = findings([folder])
    return sorted(finding_key(f.rule, f.trace_id, f.task_id, f.receiver) for f in found)
