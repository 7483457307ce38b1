"""The JSON report: one document, schema documented in docs/auditor.md."""

from __future__ import annotations

import json
from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final

from auditor.report.values import jsonable, no_gc

if TYPE_CHECKING:
    from auditor.audit import AuditResult, Finding

JSON_FORMAT: Final = 1
"""Version of the JSON report layout (``format``); bumped on any incompatible change."""


def report_dict(result: AuditResult) -> dict[str, Any]:
    """The JSON report as a dict."""
    return _document(result, None)


def _document(result: AuditResult, exponent: Callable[[float], Any] | None) -> dict[str, Any]:
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
        "findings": [],
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
    out: dict[str, Any] = jsonable(doc, exponent=exponent)
    # The findings are most of a large report, each a flat record of scalars: walked here
    # without jsonable's recursion (a hundred thousand of them took it most of a second).
    out["findings"] = _findings(result.findings, exponent)
    return out


def _findings(
    findings: list[Finding], exponent: Callable[[float], Any] | None
) -> list[dict[str, Any]]:
    from auditor.audit import FINDING_FIELDS

    values_of = attrgetter(*FINDING_FIELDS)
    at = FINDING_FIELDS.index("value")
    out = []
    with no_gc():
        for values in map(values_of, findings):
            record = dict(zip(FINDING_FIELDS, values, strict=True))
            # Most findings carry a figure (a float) and text: each checked as jsonable
            # would treat it, without walking the record.
            value = values[at]
            if type(value) is float and value - value == 0:  # not NaN nor infinite
                rounded = float(f"{value:.12g}")  # as jsonable rounds it
                if exponent is not None and "e" in repr(rounded):
                    record["value"] = exponent(rounded)
                else:
                    record["value"] = rounded
            elif value is not None:
                record["value"] = jsonable(value, exponent=exponent)
            if not _PLAIN.issuperset(map(type, values[:at] + values[at + 1 :])):
                for name, field in record.items():
                    if name != "value" and type(field) not in _PLAIN:
                        record[name] = jsonable(field, exponent=exponent)
            out.append(record)
    return out


_PLAIN: Final = frozenset({str, int, bool, type(None)})
"""What jsonable leaves as it is."""


def render_json(result: AuditResult) -> str:
    """The JSON report as text (two-space indent, keys in schema order)."""
    try:
        import orjson
    except ModuleNotFoundError:  # pragma: no cover - orjson comes with the [cli] extra
        return _plain(result)
    # The same text as json.dumps(indent=2, ensure_ascii=False), several times faster: orjson
    # writes every float as Python does but those Python writes with an exponent (1e-05,
    # not 0.00001), which go in as Python's own text.
    doc = _document(result, lambda v: orjson.Fragment(repr(v)))
    try:
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode("utf-8") + "\n"
    except orjson.JSONEncodeError:
        return _plain(result)  # an integer beyond 64 bits, or text that is not Unicode


def _plain(result: AuditResult) -> str:
    return json.dumps(report_dict(result), indent=2, ensure_ascii=False) + "\n"
