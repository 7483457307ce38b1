"""From measured runs to the report's figures: each value, its interval, its analytic value.

Pure functions over ``ExperimentResults``; nothing here simulates, reads files or draws.
Every ``Figure`` holds a value measured from trace files, the confidence interval for it
(see ``stats``) and, where the model has one, the analytic value under independence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from auditor.experiments import analytic, stats
from auditor.experiments.plan import (
    FIRE_AND_FORGET,
    HANDSHAKE,
    PROTOCOLS,
    RELIABILITIES,
    TWO_STEP,
    Protocol,
    handshake,
)
from auditor.experiments.run import ExperimentResults, RunResult
from collector import schema

__all__ = [
    "Figure",
    "LengthCell",
    "OutageRow",
    "ProtocolRow",
    "StepSection",
    "TargetCell",
    "TARGET",
    "attempts_for_target",
    "consistency",
    "coverage",
    "fire_and_forget_reliability_for_target",
    "latency_differences",
    "length_grid",
    "outage_rows",
    "protocol_rows",
    "step_section",
    "target_cells",
]

TARGET = 0.999
"""The end-to-end goal the target section tests."""


@dataclass(frozen=True, slots=True)
class Figure:
    """A measured value, its confidence interval and its analytic value (if the model has one)."""

    value: float
    interval: stats.Interval | None = None
    analytic: float | None = None
    n: int | None = None
    """How many workflows (or trials) the value rests on."""

    @property
    def covers_analytic(self) -> bool | None:
        """Whether the interval holds the analytic value (None when either is missing)."""
        if self.interval is None or self.analytic is None:
            return None
        return self.interval.low - 1e-12 <= self.analytic <= self.interval.high + 1e-12


def rate(successes: int, trials: int, analytic_value: float | None = None) -> Figure:
    """A success rate with its Wilson interval."""
    return Figure(successes / trials, stats.wilson(successes, trials), analytic_value, trials)


def _mean(values: list[float], *, scale: float = 1.0, seed: int = 0) -> Figure:
    if not values:
        return Figure(math.nan)
    iv = stats.bootstrap(values, "mean", seed=seed)
    return Figure(
        scale * sum(values) / len(values),
        stats.Interval(iv.low * scale, iv.high * scale),
        n=len(values),
    )


def _quantile(values: list[float], q: float, *, seed: int = 0) -> Figure:
    import numpy as np  # optional: numpy comes with the [dashboard] extra

    if not values:
        return Figure(math.nan)
    return Figure(
        float(np.quantile(values, q)),
        stats.bootstrap(values, "quantile", q=q, seed=seed),
        n=len(values),
    )


# --------------------------------------------------------------------------------------
# Chain length
# --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LengthCell:
    """End-to-end success of the first ``agents`` agents under one protocol and reliability."""

    protocol: Protocol
    reliability: float
    agents: int
    success: Figure


def length_grid(results: ExperimentResults) -> list[LengthCell]:
    """Every (reliability, protocol, chain length) cell of the chart."""
    cells: list[LengthCell] = []
    for r in RELIABILITIES:
        for p in PROTOCOLS:
            name = f"length-{p.key}-r{round(r * 100)}"
            if name not in results.results:
                continue
            m = results[name].measurement
            for n, workflows, successes, _ in m.prefix:
                expected = analytic.success(p, reliability=r, agents=n)
                cells.append(LengthCell(p, r, n, rate(successes, workflows, expected)))
    return cells


def consistency(results: ExperimentResults) -> list[str]:
    """Where this package's own SQL disagrees with the auditor's figures; empty when none.

    Checks, for every run, that the per-workflow rows add up to the auditor's workflow,
    success, restart and retry counts, and that the full-chain prefix reproduces the
    auditor's observed end-to-end count.
    """
    wrong = []
    for name, res in results.results.items():
        m = res.measurement
        mine = {
            "workflows": len(m.workflows),
            "successes": sum(1 for w in m.workflows if w.ok),
            "restarts": sum(w.runs - 1 for w in m.workflows),
            "retries": sum(w.retries for w in m.workflows),
        }
        theirs = {
            "workflows": m.count,
            "successes": m.successes,
            "restarts": m.restarts,
            "retries": m.retries,
        }
        for key, value in mine.items():
            if value != theirs[key]:
                wrong.append(f"{name}: {key} {value} vs the auditor's {theirs[key]}")
        if m.prefix and m.prefix[-1][2] != m.successes:
            wrong.append(f"{name}: full-chain prefix {m.prefix[-1][2]} vs {m.successes}")
    return wrong


# --------------------------------------------------------------------------------------
# The 4 -> 5 step
# --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StepSection:
    """Fire-and-forget at 95%: four agents, five agents, and the step between them."""

    four: Figure
    five: Figure
    step: Figure
    """Separate runs: four-agent success minus five-agent success (Newcombe interval)."""
    paired: Figure
    """Within the five-agent run: workflows whose first four agents succeeded and whose fifth
    failed (the same step, measured on the same workflows)."""
    prefix_four: Figure | None
    prefix_five: Figure | None
    """The 10-agent run's first four and first five agents, as the chart uses them."""


def step_section(results: ExperimentResults) -> StepSection:
    """The figures of the 4 -> 5 agent section."""
    r = 0.95
    four, five = results["ff-4"].measurement, results["ff-5"].measurement
    a4 = analytic.success(FIRE_AND_FORGET, reliability=r, agents=4)
    a5 = analytic.success(FIRE_AND_FORGET, reliability=r, agents=5)
    step = Figure(
        four.observed - five.observed,
        stats.newcombe_difference(four.successes, four.count, five.successes, five.count),
        a4 - a5,
        four.count + five.count,
    )
    by_n = {n: (w, s) for n, w, s, _ in five.prefix}
    w4, s4 = by_n[4]
    _, s5 = by_n[5]
    paired = rate(s4 - s5, w4, a4 - a5)
    prefix4 = prefix5 = None
    name = f"length-{FIRE_AND_FORGET.key}-r95"
    if name in results.results:
        grid = {n: (w, s) for n, w, s, _ in results[name].measurement.prefix}
        prefix4 = rate(grid[4][1], grid[4][0], a4)
        prefix5 = rate(grid[5][1], grid[5][0], a5)
    return StepSection(
        four=rate(four.successes, four.count, a4),
        five=rate(five.successes, five.count, a5),
        step=step,
        paired=paired,
        prefix_four=prefix4,
        prefix_five=prefix5,
    )


# --------------------------------------------------------------------------------------
# Restarts, compute, latency and cost per protocol (five agents at 95%)
# --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ProtocolRow:
    """One protocol's five-agent run at 95%: every per-workflow figure the report shows."""

    protocol: Protocol
    run: str
    success: Figure
    restarts_per_1000: Figure
    retries_per_1000: Figure
    executions_per_1000: Figure
    wasted_executions_per_1000: Figure
    wasted_compute_s_per_1000: Figure
    e2e_p50_s: Figure
    e2e_p95_s: Figure
    validation_p50_s: Figure
    validation_p95_s: Figure
    lost_mean_s: Figure
    lost_p95_s: Figure
    cost_per_workflow: Figure
    cost_per_success: Figure
    tokens_per_success: Figure
    voided_cost_share: float
    wasted_cost_share: float
    spend: list[tuple[str, float, float]] = field(default_factory=list)
    """``(agent, cost, cost on voided attempts)`` per workflow."""


PROTOCOL_RUNS = (("ff-5", FIRE_AND_FORGET), ("two-step-5", TWO_STEP), ("handshake-5", HANDSHAKE))
"""The five-agent, 95% runs compared protocol by protocol."""


def protocol_row(
    result: RunResult, protocol: Protocol, *, reliability: float = 0.95
) -> ProtocolRow:
    """Every per-protocol figure of one five-agent run."""
    m = result.measurement
    n = result.run.agents
    exp = analytic.expected(protocol, reliability=reliability, agents=n)
    seed = result.run.seed
    runs = m.column("runs")
    restarts = [x - 1 for x in runs]
    ok = [1.0 if w.ok else 0.0 for w in m.workflows]
    total_cost = sum(m.column("cost_usd"))

    def per_1000(values: list[float], expected_value: float | None) -> Figure:
        f = _mean(values, scale=1000.0, seed=seed)
        return Figure(
            f.value, f.interval, None if expected_value is None else 1000 * expected_value, f.n
        )

    def seconds(col: str, q: float) -> Figure:
        f = _quantile([v / 1000 for v in m.column(col)], q, seed=seed)
        return f

    cost_ratio = stats.bootstrap_ratio(m.column("cost_usd"), ok, seed=seed)
    token_ratio = stats.bootstrap_ratio(m.column("tokens"), ok, seed=seed)
    validation = seconds("validation_ms", 0.5)
    expected_validation = None
    if protocol.mode == schema.MODE_HANDSHAKE:
        # One round trip per handoff at the 100 ms base latency, plus any retries.
        expected_validation = (n + exp.retries) * 0.1
    return ProtocolRow(
        protocol=protocol,
        run=result.run.name,
        success=rate(m.successes, m.count, exp.success),
        restarts_per_1000=per_1000(restarts, exp.restarts),
        retries_per_1000=per_1000(m.column("retries"), exp.retries),
        executions_per_1000=per_1000(m.column("executions"), exp.executions),
        wasted_executions_per_1000=per_1000(m.column("wasted_executions"), exp.wasted_executions),
        wasted_compute_s_per_1000=per_1000(
            [v / 1000 for v in m.column("wasted_execution_ms")], None
        ),
        e2e_p50_s=seconds("e2e_ms", 0.5),
        e2e_p95_s=seconds("e2e_ms", 0.95),
        validation_p50_s=Figure(
            validation.value, validation.interval, expected_validation, validation.n
        ),
        validation_p95_s=seconds("validation_ms", 0.95),
        lost_mean_s=_mean([v / 1000 for v in m.column("lost_ms")], seed=seed),
        lost_p95_s=seconds("lost_ms", 0.95),
        cost_per_workflow=_mean(m.column("cost_usd"), seed=seed),
        cost_per_success=Figure(
            total_cost / m.successes if m.successes else math.nan, cost_ratio, n=m.count
        ),
        tokens_per_success=Figure(
            sum(m.column("tokens")) / m.successes if m.successes else math.nan,
            token_ratio,
            n=m.count,
        ),
        voided_cost_share=sum(m.column("voided_cost_usd")) / total_cost if total_cost else 0.0,
        wasted_cost_share=sum(m.column("wasted_cost_usd")) / total_cost if total_cost else 0.0,
        spend=[
            (s.agent, s.cost_usd / m.count, s.voided_cost_usd / m.count)
            for s in m.spend
            if s.cost_usd > 0
        ],
    )


def protocol_rows(results: ExperimentResults) -> list[ProtocolRow]:
    """The three protocols, five agents at 95%."""
    return [protocol_row(results[name], p) for name, p in PROTOCOL_RUNS if name in results.results]


def latency_differences(rows: list[ProtocolRow], results: ExperimentResults) -> dict[str, Figure]:
    """End-to-end p50/p95 of the handshake minus those of the other protocols (bootstrap)."""
    out: dict[str, Figure] = {}
    by = {row.protocol.mode: row for row in rows}
    if schema.MODE_HANDSHAKE not in by:
        return out
    hs = [v / 1000 for v in results[by[schema.MODE_HANDSHAKE].run].measurement.column("e2e_ms")]
    for mode in (schema.MODE_FIRE_AND_FORGET, schema.MODE_TWO_STEP):
        if mode not in by:
            continue
        other = [v / 1000 for v in results[by[mode].run].measurement.column("e2e_ms")]
        for q in (0.5, 0.95):
            import numpy as np  # optional: numpy comes with the [dashboard] extra

            value = float(np.quantile(hs, q) - np.quantile(other, q))
            iv = stats.bootstrap_difference(hs, other, "quantile", q=q, seed=7)
            out[f"{mode}-p{round(q * 100)}"] = Figure(value, iv, n=len(hs) + len(other))
    return out


# --------------------------------------------------------------------------------------
# Correlated failures
# --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OutageRow:
    """One protocol with and without a shared outage."""

    protocol: Protocol
    independent: Figure
    outage: Figure
    predicted: float
    """What independence predicts from the outage run's own per-agent attempt rates."""
    projected: float
    """The auditor's projection for the outage run: product of per-agent handoff rates."""
    attempt_rates: list[tuple[str, float]]
    wasted_executions_per_1000: Figure
    cost_per_success: Figure


def _independent_prediction(protocol: Protocol, rates: list[float]) -> float:
    k = protocol.attempts
    if protocol.mode == schema.MODE_FIRE_AND_FORGET:
        return math.prod(rates)
    if protocol.mode == schema.MODE_TWO_STEP:
        return 1.0 - (1.0 - math.prod(rates)) ** k
    return math.prod(1.0 - (1.0 - p) ** k for p in rates)


def outage_rows(results: ExperimentResults) -> list[OutageRow]:
    """The correlated-failure table: each protocol, independent vs shared outage."""
    rows = []
    for p in (FIRE_AND_FORGET, TWO_STEP, HANDSHAKE):
        ind_name, out_name = f"independent-{p.key}", f"outage-{p.key}"
        if ind_name not in results.results or out_name not in results.results:
            continue
        ind, out = results[ind_name], results[out_name]
        r, n = out.run.reliability, out.run.agents
        expected = analytic.success(p, reliability=r, agents=n)
        mo = out.measurement
        rates = [a.attempt_rate for a in mo.agents]
        wasted = _mean(mo.column("wasted_executions"), scale=1000.0, seed=out.run.seed)
        ok = [1.0 if w.ok else 0.0 for w in mo.workflows]
        cost_total = sum(mo.column("cost_usd"))
        rows.append(
            OutageRow(
                protocol=p,
                independent=rate(ind.measurement.successes, ind.measurement.count, expected),
                outage=rate(mo.successes, mo.count, expected),
                predicted=_independent_prediction(p, rates),
                projected=mo.projected,
                attempt_rates=[(a.agent, a.attempt_rate) for a in mo.agents],
                wasted_executions_per_1000=wasted,
                cost_per_success=Figure(
                    cost_total / mo.successes if mo.successes else math.nan,
                    stats.bootstrap_ratio(mo.column("cost_usd"), ok, seed=out.run.seed),
                    n=mo.count,
                ),
            )
        )
    return rows


# --------------------------------------------------------------------------------------
# 99.9% end to end for five agents
# --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TargetCell:
    """One (reliability, attempts) configuration of five agents against the 99.9% goal."""

    reliability: float
    attempts: int
    run: str
    successes: int
    workflows: int
    interval: stats.Interval
    """Clopper-Pearson: exact, and never too narrow near 1."""
    analytic: float

    @property
    def observed(self) -> float:
        """Observed end-to-end success."""
        return self.successes / self.workflows

    @property
    def verdict(self) -> str:
        """``reached``, ``short`` or ``open`` (the interval straddles the goal)."""
        if self.interval.low >= TARGET:
            return "reached"
        if self.interval.high < TARGET:
            return "short"
        return "open"

    @property
    def workflows_to_show(self) -> int | None:
        """Workflows needed for the interval to clear 99.9% if the analytic rate is true."""
        return stats.required_trials(self.analytic, TARGET)


def attempts_for_target(reliability: float, *, agents: int = 5, limit: int = 10) -> int | None:
    """The fewest handshake attempts per handoff that reach ``TARGET`` analytically."""
    for k in range(1, limit + 1):
        if analytic.success(handshake(k), reliability=reliability, agents=agents) >= TARGET:
            return k
    return None


def fire_and_forget_reliability_for_target(*, agents: int = 5) -> float:
    """Per-agent reliability fire-and-forget needs to reach ``TARGET``: TARGET^(1/n)."""
    return TARGET ** (1.0 / agents)


def target_cells(results: ExperimentResults) -> list[TargetCell]:
    """Five-agent handshake configurations, from the dedicated runs and the length grid."""
    cells: dict[tuple[float, int], TargetCell] = {}

    def add(r: float, k: int, name: str, successes: int, workflows: int) -> None:
        current = cells.get((r, k))
        if current is not None and current.workflows >= workflows:
            return
        cells[(r, k)] = TargetCell(
            reliability=r,
            attempts=k,
            run=name,
            successes=successes,
            workflows=workflows,
            interval=stats.clopper_pearson(successes, workflows),
            analytic=analytic.success(handshake(k), reliability=r, agents=5),
        )

    for r in RELIABILITIES:
        for k in (1, 2, 3):
            name = f"length-{handshake(k).key}-r{round(r * 100)}"
            if name in results.results:
                prefix = {n: (w, s) for n, w, s, _ in results[name].measurement.prefix}
                if 5 in prefix:
                    add(r, k, f"{name} (first 5 agents)", prefix[5][1], prefix[5][0])
    for name, res in results.results.items():
        run = res.run
        if run.protocol.mode == schema.MODE_HANDSHAKE and run.agents == 5 and run.outage is None:
            m = res.measurement
            add(run.reliability, run.protocol.attempts, name, m.successes, m.count)
    return sorted(cells.values(), key=lambda c: (c.reliability, c.attempts))


# --------------------------------------------------------------------------------------
# How often the intervals hold the analytic value
# --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Coverage:
    """How many intervals on the page hold their analytic value, and which do not."""

    covered: int
    total: int
    misses: list[str]


def coverage(results: ExperimentResults) -> Coverage:
    """Count the figures whose interval holds the analytic value (about 95% should).

    Only figures with both an analytic value and an interval of non-zero width count (a
    fire-and-forget run's restarts, always 0 of 0, would say nothing).
    """
    named: list[tuple[str, Figure]] = []
    for c in length_grid(results):
        agents = f"{c.agents} agent{'s' if c.agents > 1 else ''}"
        named.append((f"{c.protocol.label}, {agents} at {c.reliability:.0%}", c.success))
    if "ff-4" in results.results and "ff-5" in results.results:
        st = step_section(results)
        named += [
            ("4 agents", st.four),
            ("5 agents", st.five),
            ("4 -> 5 step", st.step),
            ("4 -> 5 step, same workflows", st.paired),
        ]
    for row in protocol_rows(results):
        for label, f in (
            ("success", row.success),
            ("restarts", row.restarts_per_1000),
            ("retries", row.retries_per_1000),
            ("executions", row.executions_per_1000),
            ("wasted executions", row.wasted_executions_per_1000),
        ):
            named.append((f"{row.protocol.label}, {label}", f))
    for o in outage_rows(results):
        named.append((f"{o.protocol.label}, independent (outage driver)", o.independent))
    for t in target_cells(results):
        named.append(
            (
                f"{t.attempts} attempts at {t.reliability:.0%}",
                Figure(t.observed, t.interval, t.analytic, t.workflows),
            )
        )
    covered, total, misses = 0, 0, []
    for label, f in named:
        if f.interval is None or f.analytic is None or f.interval.high - f.interval.low <= 0:
            continue
        total += 1
        if f.covers_analytic:
            covered += 1
        else:
            misses.append(label)
    return Coverage(covered, total, misses)
