"""The JSON report: one document, schema documented in docs/auditor.md."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

from auditor.report.values import jsonable

if TYPE_CHECKING:
    from auditor.audit import AuditResult

JSON_FORMAT: Final = 1
"""Version of the JSON report layout (``format``); bumped on any incompatible change."""


def report_dict(result: AuditResult) -> dict[str, Any]:
    """The JSON report as a dict."""
    from collector import __version__

    s = result.settings
    counts = result.counts()
    failing = result.failing()
    doc = {
        "format": JSON_FORMAT,
        "tool": {"name": "handoffscope", "version": __version__},
        "settings": {
            "validation_timeout_ms": s.validation_timeout_s * 1000,
            "p95_budget_ms": s.p95_budget_s * 1000,
            "max_attempts": s.max_attempts,
            "fail_on": s.fail_on,
        },
        "verdict": {
            "passed": not failing,
            "exit_code": result.exit_code(),
            "failing_findings": len(failing),
            "findings_by_severity": result.severity_counts(),
        },
        "summary": result.figures.summary,
        "rules": [
            {"id": r.id, "severity": r.severity, "summary": r.summary, "findings": counts[r.id]}
            for r in result.rules
        ],
        "findings": [f.to_dict() for f in result.findings],
        "agents": result.figures.agents,
        "edges": result.figures.edges,
        "reliability": result.figures.reliability,
        "latency": result.figures.latency,
        "spend": result.figures.spend,
        "problems": [
            {"file": p.file, "line": p.line, "message": p.message} for p in result.problems
        ],
        "files": result.files,
    }
    return jsonable(doc)  # type: ignore[no-any-return]


def render_json(result: AuditResult) -> str:
    """The JSON report as text (two-space indent, keys in schema order)."""
    return json.dumps(report_dict(result), indent=2, ensure_ascii=False) + "\n"
