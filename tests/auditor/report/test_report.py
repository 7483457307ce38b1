"""Golden files for every report format, on the sample traces, the rule cases and the
upstream fixtures. Regenerate with HANDOFFSCOPE_REGEN_GOLDEN=1 and review the diff."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor import AuditResult, all_rules, audit, load_traces
from auditor.report import FORMATS, render, render_chunks
from auditor.report.json_report import report_dict
from auditor.report.markdown import cell
from auditor.report.values import count, money, ms, percent
from tests.support.paths import REPO, TESTS

ROOT = REPO
GOLDEN = TESTS / "fixtures" / "audit_golden"
SUFFIX = {"table": "txt", "json": "json", "markdown": "md", "junit": "xml"}
INPUTS = {
    "samples": "sample_traces",
    "fault-mix": "sample_traces/fault-mix",
    "cases": "tests/cases",
    "upstream": "tests/fixtures/otlp",
}
# The README's first command, `handoffscope audit sample_traces/`, as a reader sees it; its
# thousands of findings are checked in JSON through the smaller fault-mix scenario.
GOLDENS = [("samples", "table"), ("samples", "markdown")] + [
    (name, fmt) for name in ("fault-mix", "cases", "upstream") for fmt in FORMATS
]
REGEN = os.environ.get("HANDOFFSCOPE_REGEN_GOLDEN") == "1"


@pytest.fixture(scope="module")
def results() -> dict[str, AuditResult]:
    cwd = Path.cwd()
    os.chdir(ROOT)  # paths in the reports are relative, as a user would type them
    try:
        out = {}
        for name, path in INPUTS.items():
            if path.startswith("sample_traces") and not any(
                (ROOT / "sample_traces").glob("*/manifest.json")
            ):
                continue
            out[name] = audit(load_traces(path))
        return out
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize(("name", "fmt"), GOLDENS)
def test_golden(name: str, fmt: str, results: dict[str, AuditResult]) -> None:
    if name not in results:
        pytest.skip("sample_traces/ has no scenarios yet")
    text = render(results[name], fmt, width=100)
    golden = GOLDEN / f"{name}.{SUFFIX[fmt]}"
    if REGEN:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    assert golden.exists(), f"no golden file {golden}: run with HANDOFFSCOPE_REGEN_GOLDEN=1"
    assert text == golden.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", ["fault-mix", "cases", "upstream"])
def test_json_chunks_are_the_golden_report(name: str, results: dict[str, AuditResult]) -> None:
    # What `audit --format json` writes, chunk after chunk, is the text render returns.
    if name not in results:
        pytest.skip("sample_traces/ has no scenarios yet")
    chunks = render_chunks(results[name], "json")
    assert len(chunks) > 1  # spliced, not the plain json module's one text
    written = b"".join(chunks)
    assert written == (GOLDEN / f"{name}.json").read_bytes()
    assert written.decode("utf-8") == render(results[name], "json")


def test_json_report_follows_the_documented_schema(results: dict[str, AuditResult]) -> None:
    doc = json.loads(render(results["cases"], "json"))
    assert list(doc) == [
        "format",
        "tool",
        "settings",
        "verdict",
        "summary",
        "rules",
        "findings",
        "agents",
        "edges",
        "reliability",
        "latency",
        "spend",
        "problems",
        "files",
    ]
    assert doc["format"] == 1
    # Times are UTC and say so, as watch's do.
    first = datetime.fromisoformat(doc["summary"]["first_start"])
    assert doc["summary"]["first_start"].endswith("Z") and first.utcoffset() == timedelta(0)
    assert set(doc["findings"][0]) == {
        "rule",
        "severity",
        "message",
        "trace_id",
        "span_id",
        "task_id",
        "idempotency_key",
        "sender",
        "receiver",
        "value",
        "attempt",
    }
    # Every rule, listed whether it found anything or not.
    assert len(doc["rules"]) == len(all_rules()) and sum(
        r["findings"] for r in doc["rules"]
    ) == len(doc["findings"])
    assert doc["verdict"] == {
        "status": "fail",
        "passed": False,
        "exit_code": 1,
        "failing_findings": sum(1 for f in doc["findings"] if f["severity"] == "error"),
        "findings_by_severity": {
            "error": sum(1 for f in doc["findings"] if f["severity"] == "error"),
            "warning": sum(1 for f in doc["findings"] if f["severity"] == "warning"),
        },
    }
    docs = (ROOT / "docs" / "auditor.md").read_text()
    for key in doc:
        assert f"| `{key}` |" in docs, f"docs/auditor.md does not document {key!r}"


def test_junit_has_one_testcase_per_rule_and_fails_only_at_fail_on(
    results: dict[str, AuditResult],
) -> None:
    result = results["cases"]
    tree = ET.fromstring(render(result, "junit"))
    cases = tree.findall(".//testcase")
    assert [c.get("name") for c in cases] == [r.id for r in result.rules]
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    errors = {f.rule for f in result.findings if f.severity == "error"}
    assert failed == errors
    warned = {c.get("name") for c in cases if c.find("system-out") is not None}
    assert warned == {f.rule for f in result.findings if f.severity == "warning"}


def test_the_table_report_puts_the_summary_first_then_findings_then_figures(
    results: dict[str, AuditResult],
) -> None:
    text = render(results["cases"], "table")
    order = [
        text.index(s) for s in ("handoffscope audit", "Verdict", "Findings:", "Agents", "Edges")
    ]
    assert order == sorted(order)


def test_trace_content_is_inert_in_every_format(tmp_path: Path) -> None:
    hostile = "[bold red]boom[/] | **x** <b>y</b> ]]></failure> \x1b[31m"
    doc = json.loads((ROOT / "tests/cases/accept-without-eta/fail.json").read_text())
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for kv in span["attributes"]:
                    if kv["key"] == "handoff.task_id":
                        kv["value"] = {"stringValue": hostile}
    (tmp_path / "t.json").write_text(json.dumps(doc))
    result = audit(load_traces(tmp_path / "t.json"))
    table = render(result, "table")
    assert "[bold red]boom[/]" in table and "\x1b" not in table
    md = render(result, "markdown")
    assert cell(hostile) in md and "<b>y</b>" not in md
    junit = ET.fromstring(render(result, "junit"))  # still well-formed XML
    assert "]]></failure>" in "".join(junit.itertext())
    assert json.loads(render(result, "json"))["findings"][0]["task_id"] == hostile


@pytest.mark.parametrize("width", [60, 80, 100])
def test_the_table_report_never_cuts_a_number(width: int, results: dict[str, AuditResult]) -> None:
    """At any width the figures' numbers appear whole (rich used to cut them to "21,081,8…"
    and "$283…"), each on its agent's row, and no line is wider than asked for."""
    if "samples" not in results:
        pytest.skip("sample_traces/ has no scenarios yet")
    result = results["samples"]
    text = render(result, "table", width=width)
    assert max(len(line) for line in text.splitlines()) <= width
    figures = text[text.index("Agents (most expensive first)") :]
    assert "…" not in figures  # no value, and no header ("validati…"), cut short

    def whole(value: str, lines: list[str]) -> bool:
        pattern = re.compile(rf"(?<![\w.,$]){re.escape(value)}(?![\w.,%])")
        return any(pattern.search(line) for line in lines)

    lines = figures.splitlines()
    for agent in result.figures.agents:
        row = [line for line in lines if line.split()[:1] == [agent["agent"]]]
        values = [
            money(agent.get("cost_usd")),
            percent(agent.get("cost_share")),
            count(agent.get("input_tokens")),
            count(agent.get("output_tokens")),
            count(agent.get("handoffs")),
            percent(agent.get("handoff_success_rate")),
            percent(agent.get("first_attempt_success_rate")),
            ms((agent.get("validation") or {}).get("p95_ms")),
        ]
        for value in values:
            assert whole(value, row), f"{agent['agent']}: {value} at width {width}"
    others = [
        value
        for edge in result.figures.edges
        for value in (
            count(edge.get("handoffs")),
            money(edge.get("cost_usd")),
            *(ms((edge.get("validation") or {}).get(k)) for k in ("p50_ms", "p95_ms", "p99_ms")),
        )
    ] + [
        ms(receiver[k])
        for receiver in result.figures.latency["receivers"]
        for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms")
    ]
    assert others
    for value in others:
        assert whole(value, lines), f"{value} at width {width}"


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    # Surrogates too: text from a broken trace that is not Unicode.
    st.text(st.characters(exclude_categories=())),
    st.datetimes(),
)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(_SCALARS, max_size=6),
    figure=st.dictionaries(st.text(max_size=5), _SCALARS, max_size=4),
    value=st.one_of(st.none(), st.floats()),
    text=st.text(),
)
def test_the_fast_json_report_is_json_dumps_to_the_byte(
    values: list[Any], figure: dict[str, Any], value: float | None, text: str
) -> None:
    # orjson writes the report; json.dumps(indent=2, ensure_ascii=False) defines it: small
    # floats, integers beyond 64 bits, lone surrogates, control characters and times included.
    result = _result(values, figure, value, text)
    assert render(result, "json") == (
        json.dumps(report_dict(result), indent=2, ensure_ascii=False) + "\n"
    )


def _result(values: list[Any], figure: dict[str, Any], value: float | None, text: str) -> Any:
    from auditor.audit import Finding
    from auditor.figures import Figures
    from auditor.rules import all_rules
    from auditor.settings import AuditSettings

    rule = all_rules()[0]
    finding = Finding(rule.id, rule.severity, text, text, None, "t", None, "a", "b", value, 2)
    return AuditResult(
        findings=[finding, finding],
        rules=(rule,),
        settings=AuditSettings(),
        figures=Figures(summary={"values": values, **figure}, agents=[figure], spend={"x": value}),
        files=[text],
    )
