"""The JUnit XML report: one test case per rule, for CI systems."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from auditor.report.explain import explain_lines, shows_structure
from auditor.report.values import clean

if TYPE_CHECKING:
    from auditor.audit import AuditResult
    from auditor.findings.finding import Finding

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
MAX_LISTED = 200
"""Findings listed in one test case's text (all of them are in the JSON report)."""


def _text(value: object) -> str:
    return _NOT_XML.sub(" ", clean(value, limit=2000))


def _line(f: Finding) -> str:
    where = " ".join(
        part
        for part in (
            f"trace={f.trace_id}" if f.trace_id else "",
            f"span={f.span_id}" if f.span_id else "",
            f"task={f.task_id}" if f.task_id else "",
        )
        if part
    )
    return f"{f.message}" + (f" [{where}]" if where else "")


def _structure(suite: ET.Element, result: AuditResult) -> None:
    """A test case for the delegations the audit could not recognise, when it shows them."""
    if not shows_structure(result):
        return
    case = ET.SubElement(suite, "testcase", classname="handoffscope.structure", name="structure")
    text = "\n".join(_text(line) for line in explain_lines(result))
    not_judged = result.not_judged()
    if not_judged and result.exit_code():
        failure = ET.SubElement(case, "failure", message=_text(not_judged), type="not-judged")
        failure.text = text
    else:
        ET.SubElement(case, "system-out").text = text


def render_junit(result: AuditResult) -> str:
    """A JUnit ``testsuites`` document: a rule with failing findings is a failed test."""
    failing = {id(f) for f in result.failing()}
    by_rule: dict[str, list[Finding]] = {r.id: [] for r in result.rules}
    for f in result.findings:
        by_rule.setdefault(f.rule, []).append(f)
    failures = sum(1 for fs in by_rule.values() if any(id(f) in failing for f in fs))
    suites = ET.Element(
        "testsuites",
        name="handoffscope audit",
        tests=str(len(result.rules)),
        failures=str(failures),
    )
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="handoffscope.rules",
        tests=str(len(result.rules)),
        failures=str(failures),
        errors="0",
        skipped="0",
    )
    for rule in result.rules:
        found = by_rule.get(rule.id, [])
        case = ET.SubElement(suite, "testcase", classname="handoffscope.rules", name=rule.id)
        listed = "\n".join(_text(_line(f)) for f in found[:MAX_LISTED])
        if len(found) > MAX_LISTED:
            listed += f"\n... and {len(found) - MAX_LISTED} more (see the JSON report)"
        if any(id(f) in failing for f in found):
            failure = ET.SubElement(
                case,
                "failure",
                message=_text(f"{len(found)} finding(s): {rule.summary}"),
                type=rule.severity,
            )
            failure.text = listed
        elif found:
            out = ET.SubElement(case, "system-out")
            out.text = (
                f"{len(found)} {rule.severity} finding(s), below --fail-on "
                f"{result.settings.fail_on}:\n{listed}"
            )
    _structure(suite, result)
    if result.problems:
        err = ET.SubElement(suite, "system-err")
        err.text = "\n".join(_text(p) for p in result.problems[:MAX_LISTED])
    ET.indent(suites)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    )
