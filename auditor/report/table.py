"""The terminal report: summary first, then findings grouped by rule, then the figures."""

from __future__ import annotations

import io
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from auditor.report.explain import explain_lines, shows_structure
from auditor.report.values import (
    NOTHING_TO_JUDGE,
    clean,
    count,
    money,
    ms,
    percent,
    plural,
    runs_word,
    short_id,
    source_text,
    spend,
    verdict_status,
)

if TYPE_CHECKING:
    from rich.console import RenderableType

    from auditor.audit import AuditResult

MAX_FINDINGS = 8
"""Findings shown per rule in the terminal (all of them are in the JSON report)."""
MAX_PROBLEMS = 10
LABEL_MIN = 12
"""Narrowest a figure table's label column (agent, edge, receiver) is squeezed to before its
number columns are split over a second table: below that, names fold into thin slivers."""
_STYLE = {"error": "bold red", "warning": "yellow"}


def _t(value: object, style: str = "") -> Text:
    """Trace content as a Text, so brackets in it are never read as markup."""
    return Text(clean(value), style=style)


def _figure_table(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[Text | str]],
    *,
    width: int,
) -> list[RenderableType]:
    """A figure table: a text label column, then number columns that are never cut.

    Rich fits a table to the width by shrinking every column, numbers included, and cuts them
    with an ellipsis ("21,081,8…"). So each number column gets a fixed width that holds its
    longest value, and rich shrinks (folds) only the label column. When that is not enough,
    headers wrap at their spaces, then the table drops its outer padding, and last the number
    columns are spread over several tables that each repeat the label column.
    """
    cells = [[c if isinstance(c, Text) else Text(c) for c in row] for row in rows]
    longest = [max((r[i].cell_len for r in cells), default=1) for i in range(len(headers))]
    label = max(longest[0], _longest_word(headers[0]))
    wide = [max(longest[i], cell_len(headers[i])) for i in range(1, len(headers))]
    narrow = [max(longest[i], _longest_word(headers[i])) for i in range(1, len(headers))]
    out: list[RenderableType] = []
    # Split only when the numbers leave the labels less than LABEL_MIN; within a table, wrap
    # headers before folding labels.
    for n, group in enumerate(_groups(min(LABEL_MIN, label), narrow, width)):
        widths, compact = _fit(label, [wide[i] for i in group], [narrow[i] for i in group], width)
        table = Table(
            title=title if n == 0 else f"{title} (continued)",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=not compact,
        )
        table.add_column(headers[0], justify="left", overflow="fold")
        for i, w in zip(group, widths, strict=True):
            # A Text header may wrap at its spaces although the column itself does not.
            table.add_column(
                Text(headers[i + 1], no_wrap=False, overflow="fold"),
                justify="right",
                no_wrap=True,
                width=w,
            )
        for row in cells:
            table.add_row(row[0], *(row[i + 1] for i in group))
        out.append(table)
    return out


def _groups(label: int, narrow: Sequence[int], width: int) -> list[list[int]]:
    """The number columns split into the fewest runs that each fit ``width`` beside the label
    column, as even as possible (a second table of one column reads badly)."""
    columns = range(len(narrow))
    for parts in range(1, len(narrow) + 1):
        best: list[list[int]] | None = None
        best_widest = 0
        for cuts in itertools.combinations(range(1, len(narrow)), parts - 1):
            bounds = [0, *cuts, len(narrow)]
            groups = [list(columns[a:b]) for a, b in itertools.pairwise(bounds)]
            sizes = [_table_width(label, [narrow[i] for i in g], compact=True) for g in groups]
            if max(sizes) <= width and (best is None or max(sizes) < best_widest):
                best, best_widest = groups, max(sizes)
        if best is not None:
            return best
    return [[i] for i in columns]  # not even one number fits: rich has the final word


def _fit(label: int, wide: list[int], narrow: list[int], width: int) -> tuple[list[int], bool]:
    """The widest layout of one table that fits: full headers, else as few headers wrapped at
    their spaces as will do (those saving the most first), else also without the outer
    padding (``compact``)."""
    widths = list(wide)
    for i in sorted(range(len(widths)), key=lambda i: narrow[i] - wide[i]):
        if _table_width(label, widths, compact=False) <= width:
            break
        widths[i] = narrow[i]
    return widths, _table_width(label, widths, compact=False) > width


def _longest_word(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=0)


def _table_width(label: int, numbers: Sequence[int], *, compact: bool) -> int:
    """Width of a SIMPLE_HEAD table with these content widths: a one-cell edge at either end,
    a one-cell divider between columns and one cell of padding either side of each, except
    at the two ends when ``compact`` (no ``pad_edge``)."""
    inner = label + sum(numbers) + 3 * len(numbers) + 2
    return inner if compact else inner + 2


def _summary(result: AuditResult) -> RenderableType:
    s = result.figures.summary
    sev = result.severity_counts()
    failing = result.failing_count()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    spans = (
        f"{plural(s.get('spans'), 'span')} "
        f"({plural(s.get('duplicate_spans'), 'duplicate')} dropped)"
    )
    if result.source is not None:  # a table, not files: no file read, no reading problem
        grid.add_row("Input", f"{source_text(result.source)}, {spans}")
    else:
        grid.add_row(
            "Input",
            f"{plural(s.get('files'), 'file')}, {spans}, {plural(s.get('problems'), 'problem')}",
        )
    grid.add_row(
        "Seen",
        f"{plural(s.get('workflows'), 'workflow')}, {plural(s.get('handoffs'), 'handoff')}, "
        f"{plural(s.get('attempts'), 'attempt')}, {plural(s.get('agents'), 'agent')}",
    )
    if s.get("first_start") is not None:
        grid.add_row(
            "Time", f"{s['first_start']:%Y-%m-%d %H:%M:%S} to {s['last_end']:%Y-%m-%d %H:%M:%S} UTC"
        )
    grid.add_row(
        "Spend",
        spend(s),
    )
    rel = result.figures.reliability
    if rel.get("projected") is not None:
        # Without workflow spans each trace's root span is its run: say so, since "Seen"
        # counts workflow spans only.
        runs = (
            "workflows"
            if s.get("workflows")
            else f"{plural(rel.get('workflows'), 'trace')} (no workflow spans: a trace is a run)"
        )
        grid.add_row(
            "Reliability",
            f"{percent(rel.get('observed'))} of {runs} succeeded; "
            f"the per-agent rates multiply to {percent(rel.get('projected'))}",
        )
    verdict = Text()
    not_judged = result.not_judged()
    status = verdict_status(failing, not_judged, s)
    if status == "fail":
        verdict.append("FAIL", style="bold red")
        verdict.append(
            f"  {sev['error']} errors, {sev['warning']} warnings "
            f"(exit 1: findings at or above --fail-on {result.settings.fail_on})"
        )
    elif status == "not_judged":
        verdict.append("NOT JUDGED", style="bold yellow")
        verdict.append(f"  {not_judged} (exit {result.exit_code()})")
    elif status == "nothing_to_judge":
        verdict.append("NOTHING TO JUDGE", style="bold yellow")
        verdict.append(f"  {NOTHING_TO_JUDGE} (--fail-on {result.settings.fail_on})")
    else:
        verdict.append("PASS", style="bold green")
        verdict.append(
            f"  {sev['error']} errors, {sev['warning']} warnings "
            f"(--fail-on {result.settings.fail_on})"
        )
    grid.add_row("Verdict", verdict)
    if failing and not_judged:
        grid.add_row("Not judged", _t(not_judged))
    return Panel(grid, title="handoffscope audit", title_align="left", box=box.ROUNDED)


def _findings(result: AuditResult) -> list[RenderableType]:
    counts = result.counts()
    out: list[RenderableType] = []
    found = [r for r in result.rules if counts[r.id]]
    ordered = sorted(found, key=lambda r: (r.severity != "error", r.id))
    out.append(Text(f"Findings: {len(found)} of {len(result.rules)} rules fired", style="bold"))
    for rule in ordered:
        items = result.first_findings(rule.id, MAX_FINDINGS)
        head = Text()
        head.append(f"\n{rule.id}", style=_STYLE[rule.severity])
        head.append(f"  {rule.severity}, {counts[rule.id]} finding(s): {rule.summary}")
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=False)
        table.add_column("finding", ratio=3, overflow="fold")
        table.add_column("task", ratio=1, overflow="fold")
        table.add_column("trace", no_wrap=True)
        for f in items:
            table.add_row(_t(f.message), _t(f.task_id), Text(short_id(f.trace_id), style="dim"))
        out += [head, Text(f"  why: {rule.why}", style="dim"), table]
        more = counts[rule.id] - len(items)
        if more:
            out.append(Text(f"  ... and {more} more (--format json lists them all)", style="dim"))
    passed = [r.id for r in result.rules if not counts[r.id]]
    if passed:
        line = Text("\nPassed: ", style="bold green")
        line.append(", ".join(passed))
        out.append(line)
    return out


def _figures(result: AuditResult, *, width: int) -> list[RenderableType]:
    fig = result.figures
    agents = [
        (
            _t(a["agent"]),
            money(a.get("cost_usd"), estimated=a.get("estimated_cost_usd")),
            percent(a.get("cost_share")),
            count(a.get("input_tokens")),
            count(a.get("output_tokens")),
            count(a.get("handoffs")),
            percent(a.get("handoff_success_rate")),
            percent(a.get("first_attempt_success_rate")),
            ms((a.get("validation") or {}).get("p95_ms")),
        )
        for a in fig.agents
    ]
    out: list[RenderableType] = [Text("")]
    out += _figure_table(
        "Agents (most expensive first)",
        (
            "agent",
            "cost",
            "share",
            "tokens in",
            "tokens out",
            "handoffs",
            "success",
            "1st try",
            "validation p95",
        ),
        agents,
        width=width,
    )
    if fig.edges:
        edges = []
        for e in fig.edges:
            v = e.get("validation") or {}
            label = _t(e["sender"])
            label.append(" → ")
            label.append_text(_t(e["receiver"]))
            edges.append(
                (
                    label,
                    count(e.get("handoffs")),
                    count(e.get("retries")),
                    percent(e.get("handoff_success_rate")),
                    money(e.get("cost_usd")),
                    ms(v.get("p50_ms")),
                    ms(v.get("p95_ms")),
                    ms(v.get("p99_ms")),
                )
            )
        out += _figure_table(
            "Edges (most expensive first)",
            ("sender → receiver", "handoffs", "retries", "success", "cost", "p50", "p95", "p99"),
            edges,
            width=width,
        )
    out += _waste(fig.spend, fig.summary.get("cost_usd"), width=width)
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
            f"{count(rel.get('workflows'))} {runs_word(result.figures.summary)})",
        )
        grid.add_row(
            "Retries",
            f"{count(rel.get('handoff_retries'))} per-handoff retries "
            f"({rel.get('retries_per_1000_workflows') or 0:,.0f} per 1,000 "
            f"{runs_word(result.figures.summary)}) vs "
            f"{count(rel.get('full_chain_restarts'))} full-chain restarts",
        )
        out += [Text("Reliability", style="bold italic"), grid]
    receivers = fig.latency.get("receivers") or []
    if receivers:
        latency = [
            (
                _t(v["receiver"]),
                count(v["answers"]),
                ms(v["p50_ms"]),
                Text(ms(v["p95_ms"]), style="red" if v["over_budget"] else ""),
                ms(v["p99_ms"]),
                ms(v["max_ms"]),
                count(v["late"]),
            )
            for v in receivers
        ]
        out.append(Text(""))
        out += _figure_table(
            f"Validation latency per receiver (budget p95 {ms(fig.latency['budget_ms'])})",
            ("receiver", "answers", "p50", "p95", "p99", "max", "late"),
            latency,
            width=width,
        )
    return out


def _waste(spend: dict[str, Any], total: float | None, *, width: int) -> list[RenderableType]:
    """Spend that bought nothing, by cause, and what the handshake's rounds cost."""
    out: list[RenderableType] = []
    waste = (spend.get("waste") or {}).get("total") or []
    if waste:
        rows = [
            (
                _t(w["cause"]),
                money(w["cost_usd"]),
                percent(w["cost_usd"] / total if total else None),
                count(w["spans"]),
                count(w["input_tokens"]),
                count(w["output_tokens"]),
            )
            for w in waste
        ]
        out += _figure_table(
            "Wasted spend (bought nothing), by cause",
            ("cause", "cost", "share", "spans", "tokens in", "tokens out"),
            rows,
            width=width,
        )
    handshake = spend.get("handshake") or []
    rounds = sum(h["handshake_usd"] for h in handshake)
    work = sum(h["work_usd"] for h in handshake)
    if rounds:
        out += [
            Text(
                f"Handshake rounds (propose and validate) cost {money(rounds)} beside"
                f" {money(work)} of committed work."
            ),
            Text(""),
        ]
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
            f"{plural(len(result.problems), 'input problem')}; everything else was audited:\n",
            style="yellow",
        )
        for p in result.problems[:MAX_PROBLEMS]:
            lines.append(f"  {clean(p)}\n")
        if len(result.problems) > MAX_PROBLEMS:
            lines.append(f"  ... and {len(result.problems) - MAX_PROBLEMS} more\n")
        parts.append(lines)
    parts += _findings(result)
    parts += _figures(result, width=width)
    if result.explained or shows_structure(result):
        lines = Text("\nWhat the audit found in other frameworks' spans:\n", style="bold")
        lines.append("\n".join(explain_lines(result)) + "\n", style="")
        parts.append(lines)
    console.print(Group(*parts))
    return buffer.getvalue()
