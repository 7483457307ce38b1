"""What failures cost: the audit's waste by cause against the simulator's own ledger, which
knows every duplicate execution, retry, restart and commit after a void it drove."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from auditor import audit, load_traces
from auditor.audit import prepare
from auditor.figures.waste import CAUSES, handshake_spend, wasted_spend
from auditor.report import render
from collector.simulator import SimulationConfig, run_simulation
from collector.simulator.waste import CAUSE_RANK

FAULTS = {
    "broken-idempotency-store": 0.08,
    "commit-after-void": 0.05,
    "late-answer-used": 0.05,
    "full-chain-restart": 0.1,
    "abandoned-accept": 0.05,
    "slow-validation": 0.08,
    "retry-cap-exceeded": 0.04,
}


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    out = tmp_path_factory.mktemp("waste") / "run"
    config = SimulationConfig(
        workflows=150,
        pipeline=("research", "write", "review"),
        seed=11,
        faults=FAULTS,
        reliability=0.9,
    )
    result = run_simulation(config, out)
    return result, load_traces(str(out))


def test_the_causes_are_ranked_alike() -> None:
    assert CAUSES == CAUSE_RANK


def test_waste_by_cause_is_what_the_simulator_threw_away(simulated: tuple[Any, Any]) -> None:
    result, traces = simulated
    prepare(traces.con)
    got = {cause: cost for cause, _, _, _, cost in wasted_spend(traces.con).fetchall()}
    truth = result.waste_usd
    # Every cause the faults drive is there, and the run is not vacuous.
    assert set(truth) == set(CAUSES), truth
    assert set(got) == set(truth)
    for cause, cost in truth.items():
        assert got[cause] == pytest.approx(cost, rel=1e-9), cause


def test_waste_per_agent_and_edge_add_up_to_the_total(simulated: tuple[Any, Any]) -> None:
    _, traces = simulated
    prepare(traces.con)
    total = {c: cost for c, _, _, _, cost in wasted_spend(traces.con).fetchall()}
    for by in ("agent", "edge"):
        sums: dict[str, float] = {}
        for row in wasted_spend(traces.con, by=by).fetchall():
            sums[row[0]] = sums.get(row[0], 0.0) + row[-1]
        assert sums == pytest.approx(total)


def test_handshake_spend_is_the_propose_and_validate_phases(simulated: tuple[Any, Any]) -> None:
    _, traces = simulated
    prepare(traces.con)
    rows = {r[0]: r for r in handshake_spend(traces.con).fetchall()}
    phases = traces.con.execute(
        "SELECT agent, phase_name, sum(cost_usd) FROM hs_usage_all GROUP BY ALL"
    ).fetchall()
    for agent, phase, cost in phases:
        _, handshake, work, other, _ = rows[agent]
        want = {"propose": handshake, "validate": handshake, "commit": work}.get(phase, other)
        assert cost <= want + 1e-12
    research = rows["research"]
    assert research[1] > 0 and research[2] > 0  # it validates and it works
    assert research[4] == pytest.approx(research[1] / (research[1] + research[2] + research[3]))


def test_every_report_format_shows_the_waste(simulated: tuple[Any, Any]) -> None:
    result, traces = simulated
    audited = audit(traces)
    waste = audited.figures.spend["waste"]
    assert {w["cause"] for w in waste["total"]} == set(result.waste_usd)
    table = render(audited, "table", width=140)
    assert "Wasted" in table and "duplicate" in table
    assert "waste" in render(audited, "json")
    assert "Wasted" in render(audited, "markdown")


def test_a_clean_run_wastes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "clean"
    result = run_simulation(
        SimulationConfig(workflows=20, pipeline=("research", "write"), reliability=1.0), out
    )
    traces = load_traces(str(out))
    prepare(traces.con)
    assert result.waste_usd == {}
    assert wasted_spend(traces.con).fetchall() == []
