"""What ``handoffscope simulate`` prints: the run's figures, and the fault catalogue."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from collector.simulator.faults import FAULTS
from collector.simulator.run import SimulationResult

__all__ = ["fault_table_markdown", "print_fault_table", "print_summary", "summary_line"]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def summary_line(result: SimulationResult) -> str:
    """One line: workflows, observed vs analytic success, spans, files, faults."""
    f = result.figures
    lo, hi = f["success_interval"]
    return (
        f"{f['workflows']} workflows ({result.config.mode}, {len(result.config.pipeline)} agents "
        f"at {result.config.reliability:.0%}): end-to-end success {_pct(f['success_rate'])} "
        f"observed [{_pct(lo)}-{_pct(hi)}] vs {_pct(f['analytic_success_rate'])} analytic; "
        + (
            "dry run, nothing written"
            if result.out_dir is None
            else f"{f['spans']} spans in {f['files']} files; {len(result.faults)} expected findings"
        )
    )


def print_summary(result: SimulationResult, *, elapsed_s: float, quiet: bool = False) -> None:
    """Print the run's figures to stdout (one line with ``quiet``)."""
    console = Console(highlight=False, soft_wrap=True)
    if quiet:
        console.print(summary_line(result), markup=False)
        return
    f = result.figures
    cfg = result.config
    lo, hi = f["success_interval"]
    console.print(
        f"[bold]Simulated {f['workflows']} workflows[/bold] through "
        f"{' → '.join(cfg.pipeline)} ({cfg.mode}, seed {cfg.seed}) "
        f"in {elapsed_s:.1f} s real time",
    )
    table = Table(
        title="End-to-end success (* this run's mode)", title_justify="left", show_edge=False
    )
    table.add_column("")
    table.add_column("rate", justify="right")
    table.add_column("note")
    table.add_row(
        "observed",
        _pct(f["success_rate"]),
        f"{f['succeeded']} of {f['workflows']} (99.9% CI {_pct(lo)}-{_pct(hi)})",
    )
    notes = {
        "fire-and-forget": f"r^K = {cfg.reliability:g}^{len(cfg.pipeline)}",
        "handshake": f"retries per handoff, {cfg.max_attempts} tries",
        "two-step": f"chain reruns, {cfg.max_attempts} runs",
    }
    for mode, value in f["analytic_by_mode"].items():
        label = f"analytic, {mode}" + (" *" if mode == cfg.mode else "")
        table.add_row(label, _pct(value), notes[mode])
    console.print(table)
    agents = Table(title="Agents", title_justify="left", show_edge=False)
    for col in ("agent", "attempts", "reliability", "validation p95"):
        agents.add_column(col, justify="left" if col == "agent" else "right")
    for name, a in f["agents"].items():
        p95 = a["validation_p95_ms"]
        agents.add_row(
            name,
            str(a["attempts"]),
            _pct(a["reliability"]),
            "-" if not p95 else f"{p95:.0f} ms",
        )
    console.print(agents)
    console.print(
        f"Handoffs {f['handoffs']}, attempts {f['attempts']} "
        f"({f['retries_per_1000_workflows']:.0f} retries per 1,000 workflows), "
        f"full-chain restarts {f['full_chain_restarts']}; spend ${f['cost_usd']:.2f} "
        f"({f['input_tokens']:,} in / {f['output_tokens']:,} out tokens)",
        markup=False,
    )
    if result.faults and result.out_dir is not None:
        found = Table(
            title="Expected findings (manifest.json)", title_justify="left", show_edge=False
        )
        found.add_column("rule")
        found.add_column("count", justify="right")
        for rule, count in result.expected_findings.items():
            found.add_row(rule, str(count))
        console.print(found)
    elif not result.faults:
        console.print("No faults injected: an audit of these traces should find nothing.")
    if result.out_dir is None:
        console.print("Dry run: no span was recorded and nothing was written.")
    else:
        console.print(
            f"Wrote {f['spans']:,} spans ({f['duplicate_spans']:,} re-sent duplicates) to "
            f"{f['files']} files from {f['services']} services in {result.out_dir}",
            markup=False,
        )
    console.print(summary_line(result), markup=False)


def print_fault_table() -> None:
    """Print every fault with the rule it trips, its scope, default rate and modes."""
    console = Console(highlight=False, soft_wrap=False)
    for f in FAULTS:
        console.print(
            f"[bold]{f.name}[/bold]  ->  {f.rule}   "
            f"[dim](per {f.scope}, default {f.default_rate:g}; {', '.join(f.modes)})[/dim]"
        )
        console.print(f"    {f.summary}", markup=False)
    console.print(
        "Use --fault NAME=RATE (repeatable), or --fault all=RATE for every fault the mode "
        "allows. A rule id is accepted in place of the fault that trips it.",
        markup=False,
    )


def fault_table_markdown() -> str:
    """The fault catalogue as the Markdown table ``docs/simulator.md`` embeds."""
    rows = [
        "| option | rule it trips | rate is per | modes | what happens |",
        "| --- | --- | --- | --- | --- |",
    ]
    for f in FAULTS:
        rules = ", ".join(f"`{r}`" for r in (f.rule, *f.also))
        how = f.how.replace("|", "\\|")
        rows.append(
            f"| `{f.name}` | {rules} | {f.scope} | {', '.join(f.modes)} | {f.summary} {how} |"
        )
    return "\n".join(rows) + "\n"
