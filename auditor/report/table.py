"""The terminal report: summary first, then findings grouped by rule, then the figures."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from auditor.report.values import clean, count, money, ms, percent, short_id

if TYPE_CHECKING:
    from rich.console import RenderableType

    from auditor.audit import AuditResult

MAX_FINDINGS = 8
"""Findings shown per rule in the terminal (all of them are in the JSON report)."""
MAX_PROBLEMS = 10
_STYLE = {"error": "bold red", "warning": "yellow"}


def _t(value: object, style: str = "") -> Text:
    """Trace content as a Text, so brackets in it are never read as markup."""
    return Text(clean(value), style=style)


def _summary(result: AuditResult) -> RenderableType:
    s = result.figures.summary
    sev = result.severity_counts()
    failing = result.failing()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row(
        "Input",
        f"{count(s.get('files'))} files, {count(s.get('spans'))} spans "
        f"({count(s.get('duplicate_spans'))} duplicates dropped), "
        f"{count(s.get('problems'))} problems",
    )
    grid.add_row(
        "Seen",
        f"{count(s.get('workflows'))} workflows, {count(s.get('handoffs'))} "
        f"handoffs, {count(s.get('attempts'))} attempts, {count(s.get('agents'))} agents",
    )
    if s.get("first_start") is not None:
        grid.add_row(
            "Time", f"{s['first_start']:%Y-%m-%d %H:%M:%S} to {s['last_end']:%Y-%m-%d %H:%M:%S} UTC"
        )
    grid.add_row(
        "Spend",
        f"{money(s.get('cost_usd'))} for {count(s.get('input_tokens'))} input "
        f"and {count(s.get('output_tokens'))} output tokens",
    )
    rel = result.figures.reliability
    if rel.get("projected") is not None:
        grid.add_row(
            "Reliability",
            f"{percent(rel.get('observed'))} of workflows succeeded; "
            f"the per-agent rates multiply to {percent(rel.get('projected'))}",
        )
    verdict = Text()
    if failing:
        verdict.append("FAIL", style="bold red")
        verdict.append(
            f"  {sev['error']} errors, {sev['warning']} warnings "
            f"(exit 1: findings at or above --fail-on {result.settings.fail_on})"
        )
    else:
        verdict.append("PASS", style="bold green")
        verdict.append(
            f"  {sev['error']} errors, {sev['warning']} warnings "
            f"(--fail-on {result.settings.fail_on})"
        )
    grid.add_row("Verdict", verdict)
    return Panel(grid, title="handoffscope audit", title_align="left", box=box.ROUNDED)


def _findings(result: AuditResult) -> list[RenderableType]:
    counts = result.counts()
    out: list[RenderableType] = []
    found = [r for r in result.rules if counts[r.id]]
    ordered = sorted(found, key=lambda r: (r.severity != "error", r.id))
    out.append(Text(f"Findings: {len(found)} of {len(result.rules)} rules fired", style="bold"))
    for rule in ordered:
        items = [f for f in result.findings if f.rule == rule.id]
        head = Text()
        head.append(f"\n{rule.id}", style=_STYLE[rule.severity])
        head.append(f"  {rule.severity}, {counts[rule.id]} finding(s): {rule.summary}")
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=False)
        table.add_column("finding", ratio=3, overflow="fold")
        table.add_column("task", ratio=1, overflow="fold")
        table.add_column("trace", no_wrap=True)
        for f in items[:MAX_FINDINGS]:
            table.add_row(_t(f.message), _t(f.task_id), Text(short_id(f.trace_id), style="dim"))
        out += [head, Text(f"  why: {rule.why}", style="dim"), table]
        if len(items) > MAX_FINDINGS:
            out.append(
                Text(
                    f"  ... and {len(items) - MAX_FINDINGS} more (--format json lists them all)",
                    style="dim",
                )
            )
    passed = [r.id for r in result.rules if not counts[r.id]]
    if passed:
        line = Text("\nPassed: ", style="bold green")
        line.append(", ".join(passed))
        out.append(line)
    return out


def _figures(result: AuditResult) -> list[RenderableType]:
    fig = result.figures
    agents = Table(title="Agents (most expensive first)", title_justify="left", box=box.SIMPLE_HEAD)
    for col in (
        "agent",
        "cost",
        "share",
        "tokens in",
        "tokens out",
        "handoffs",
        "success",
        "1st try",
        "validation p95",
    ):
        agents.add_column(
            col, justify="left" if col == "agent" else "right", no_wrap=col == "agent"
        )
    for a in fig.agents:
        agents.add_row(
            _t(a["agent"]),
            money(a.get("cost_usd")),
            percent(a.get("cost_share")),
            count(a.get("input_tokens")),
            count(a.get("output_tokens")),
            count(a.get("handoffs")),
            percent(a.get("handoff_success_rate")),
            percent(a.get("first_attempt_success_rate")),
            ms((a.get("validation") or {}).get("p95_ms")),
        )
    out: list[RenderableType] = [Text(""), agents]
    if fig.edges:
        edges = Table(
            title="Edges (most expensive first)", title_justify="left", box=box.SIMPLE_HEAD
        )
        for col in (
            "sender → receiver",
            "handoffs",
            "retries",
            "success",
            "cost",
            "p50",
            "p95",
            "p99",
        ):
            edges.add_column(col, justify="left" if col.startswith("sender") else "right")
        for e in fig.edges:
            v = e.get("validation") or {}
            label = _t(e["sender"])
            label.append(" → ")
            label.append_text(_t(e["receiver"]))
            edges.add_row(
                label,
                count(e.get("handoffs")),
                count(e.get("retries")),
                percent(e.get("handoff_success_rate")),
                money(e.get("cost_usd")),
                ms(v.get("p50_ms")),
                ms(v.get("p95_ms")),
                ms(v.get("p99_ms")),
            )
        out.append(edges)
    rel = fig.reliability
    if rel.get("agents"):
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        grid.add_row(
            "Projected end to end",
            f"{percent(rel.get('projected'))} (product of the {rel['agents']} per-agent "
            f"handoff success rates; first attempts only: "
            f"{percent(rel.get('projected_first_attempt'))})",
        )
        grid.add_row(
            "Observed end to end",
            f"{percent(rel.get('observed'))} ({count(rel.get('succeeded_workflows'))} of "
            f"{count(rel.get('workflows'))} workflows)",
        )
        grid.add_row(
            "Retries",
            f"{count(rel.get('handoff_retries'))} per-handoff retries "
            f"({rel.get('retries_per_1000_workflows') or 0:,.0f} per 1,000 workflows) vs "
            f"{count(rel.get('full_chain_restarts'))} full-chain restarts",
        )
        out += [Text("Reliability", style="bold italic"), grid]
    receivers = fig.latency.get("receivers") or []
    if receivers:
        lat = Table(
            title=f"Validation latency per receiver (budget p95 {ms(fig.latency['budget_ms'])})",
            title_justify="left",
            box=box.SIMPLE_HEAD,
        )
        for col in ("receiver", "answers", "p50", "p95", "p99", "max", "late"):
            lat.add_column(col, justify="left" if col == "receiver" else "right")
        for v in receivers:
            style = "red" if v["over_budget"] else ""
            lat.add_row(
                _t(v["receiver"]),
                count(v["answers"]),
                ms(v["p50_ms"]),
                Text(ms(v["p95_ms"]), style=style),
                ms(v["p99_ms"]),
                ms(v["max_ms"]),
                count(v["late"]),
            )
        out += [Text(""), lat]
    return out


def render_table(result: AuditResult, *, width: int = 100, color: bool = False) -> str:
    """The terminal report as text (ANSI colours only when ``color``)."""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        color_system="standard" if color else None,
        force_terminal=color,
        highlight=False,
        emoji=False,
        markup=False,
    )
    parts: list[RenderableType] = [_summary(result)]
    if result.problems:
        lines = Text(
            f"{len(result.problems)} input problem(s); everything else was audited:\n",
            style="yellow",
        )
        for p in result.problems[:MAX_PROBLEMS]:
            lines.append(f"  {clean(p)}\n")
        if len(result.problems) > MAX_PROBLEMS:
            lines.append(f"  ... and {len(result.problems) - MAX_PROBLEMS} more\n")
        parts.append(lines)
    parts += _findings(result)
    parts += _figures(result)
    console.print(Group(*parts))
    return buffer.getvalue()
