"""The Markdown report: a pull-request comment that reads well collapsed or expanded."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from auditor.report.explain import explain_lines, shows_structure
from auditor.report.values import (
    NOTHING_TO_JUDGE,
    clean,
    count,
    money,
    ms,
    nothing_to_judge,
    percent,
    plural,
    runs_word,
    short_id,
    spend,
    verdict_status,
)

if TYPE_CHECKING:
    from auditor.audit import AuditResult
    from auditor.findings.finding import Finding

MAX_ROWS = 20
"""Findings listed per rule, keeping a comment well under GitHub's 65,536 characters."""
_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|~])")


def cell(value: object) -> str:
    """Trace content made inert in a Markdown table cell (no markup, links or HTML)."""
    return _SPECIAL.sub(r"\\\1", clean(value)) or " "


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _finding_row(f: Finding) -> list[str]:
    edge = f"{cell(f.sender)} → {cell(f.receiver)}" if f.sender or f.receiver else " "
    return [
        cell(f.message),
        cell(f.task_id),
        edge,
        f"`{short_id(f.trace_id)}`" if f.trace_id else " ",
    ]


def render_markdown(result: AuditResult) -> str:
    """The report as GitHub-flavoured Markdown."""
    counts = result.counts()
    sev = result.severity_counts()
    failing = result.failing_count()
    s = result.figures.summary
    not_judged = result.not_judged()
    status = verdict_status(failing, not_judged, s)
    icon = {"fail": "❌", "not_judged": "⚠️", "nothing_to_judge": "➖", "pass": "✅"}[status]
    verdict = {
        "fail": f"{failing} finding(s) at or above `{result.settings.fail_on}`",
        "not_judged": f"not judged: {cell(not_judged)}",
        "nothing_to_judge": NOTHING_TO_JUDGE,
        "pass": "no finding fails the audit",
    }[status]
    lines = [
        f"## {icon} handoffscope audit: {verdict}",
        "",
        f"**{count(s.get('spans'))}** spans · **{count(s.get('handoffs'))}** handoffs · "
        f"**{count(s.get('workflows'))}** workflows · **{count(s.get('agents'))}** agents · "
        f"spend **{spend(s)}** · "
        f"**{sev['error']}** errors, **{sev['warning']}** warnings",
        "",
    ]
    if result.problems:
        lines += [
            f"> ⚠️ {plural(len(result.problems), 'input problem')}; the rest was audited:",
            ">",
        ]
        lines += [f"> - {cell(p)}" for p in result.problems[:10]]
        lines.append("")
    lines += ["### Findings", ""]
    found = sorted(
        (r for r in result.rules if counts[r.id]), key=lambda r: (r.severity != "error", r.id)
    )
    if failing and not_judged:
        lines += [f"> Not judged: {cell(not_judged)}", ""]
    if not found and not_judged:
        lines += [f"No rule fired, but {cell(not_judged)}.", ""]
    elif not found and nothing_to_judge(s):
        lines += [f"No rule fired, but {NOTHING_TO_JUDGE}.", ""]
    elif not found:
        lines += [f"All {len(result.rules)} rules pass.", ""]
    for rule in found:
        items = result.first_findings(rule.id, MAX_ROWS)
        lines += [
            "<details>",
            f"<summary><b>{rule.id}</b> ({rule.severity}): {counts[rule.id]} · "
            f"{cell(rule.summary)}</summary>",
            "",
            *_table(
                ["finding", "task", "sender → receiver", "trace"],
                [_finding_row(f) for f in items],
            ),
        ]
        more = counts[rule.id] - len(items)
        if more:
            lines.append(f"\n… and {more} more (see `--format json`).")
        lines += ["", "</details>", ""]
    passed = [r.id for r in result.rules if not counts[r.id]]
    if found and passed:
        lines += [f"Passing rules: {', '.join(f'`{p}`' for p in passed)}", ""]
    rel = result.figures.reliability
    if rel.get("agents"):
        lines += [
            "### Reliability",
            "",
            *_table(
                [
                    "projected (product of per-agent rates)",
                    "observed",
                    runs_word(s),
                    f"retries / 1,000 {runs_word(s)}",
                    "full-chain restarts",
                ],
                [
                    [
                        percent(rel.get("projected")),
                        percent(rel.get("observed")),
                        count(rel.get("workflows")),
                        f"{rel.get('retries_per_1000_workflows') or 0:,.0f}",
                        count(rel.get("full_chain_restarts")),
                    ]
                ],
            ),
            "",
        ]
    lines += [
        "### Agents",
        "",
        *_table(
            ["agent", "cost", "tokens in / out", "handoff success", "validation p95"],
            [
                [
                    cell(a["agent"]),
                    money(a.get("cost_usd"), estimated=a.get("estimated_cost_usd")),
                    f"{count(a.get('input_tokens'))} / {count(a.get('output_tokens'))}",
                    percent(a.get("handoff_success_rate")),
                    ms((a.get("validation") or {}).get("p95_ms")),
                ]
                for a in result.figures.agents
            ],
        ),
        "",
    ]
    if result.figures.edges:
        lines += [
            "### Edges",
            "",
            *_table(
                ["sender → receiver", "handoffs", "retries", "success", "cost", "validation p95"],
                [
                    [
                        f"{cell(e['sender'])} → {cell(e['receiver'])}",
                        count(e.get("handoffs")),
                        count(e.get("retries")),
                        percent(e.get("handoff_success_rate")),
                        money(e.get("cost_usd")),
                        ms((e.get("validation") or {}).get("p95_ms")),
                    ]
                    for e in result.figures.edges
                ],
            ),
            "",
        ]
    waste = (result.figures.spend.get("waste") or {}).get("total") or []
    if waste:
        total = result.figures.summary.get("cost_usd")
        lines += [
            "### Wasted spend (bought nothing)",
            "",
            *_table(
                ["cause", "cost", "share of spend", "spans", "tokens in / out"],
                [
                    [
                        cell(w["cause"]),
                        money(w["cost_usd"]),
                        percent(w["cost_usd"] / total if total else None),
                        count(w["spans"]),
                        f"{count(w['input_tokens'])} / {count(w['output_tokens'])}",
                    ]
                    for w in waste
                ],
            ),
            "",
        ]
    if result.explained or shows_structure(result):
        # Inside a code block, trace content cannot become Markdown.
        lines += ["### What the audit found in other frameworks' spans", "", "```"]
        lines += [line.replace("`", "'") for line in explain_lines(result)]
        lines += ["```", ""]
    return "\n".join(lines)
