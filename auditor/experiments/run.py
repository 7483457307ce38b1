"""Running the plan: simulate each run into trace files, audit them, keep the figures.

Every run goes the way a user's traces would: the simulator (or the outage driver) writes
OTLP JSON-lines files into a folder, ``auditor.load_traces`` reads them into DuckDB, and
``measure`` queries the ``spans`` table. Only the figures are kept; the folder is deleted
unless ``keep_traces`` names a place for it.

Runs are independent, so several processes can take them (``jobs``); each run's seed is fixed
by the plan, so the figures are the same whatever the number of processes.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from auditor.experiments.measure import Measurement, measure
from auditor.experiments.outage import run_outage_workflows
from auditor.experiments.plan import Plan, Run
from auditor.loading.load import load_traces
from collector import schema
from collector.simulator import SimulationConfig, run_simulation
from collector.simulator.config import default_pipeline

__all__ = ["ExperimentResults", "RunResult", "run_one", "run_plan"]


@dataclass(frozen=True, slots=True)
class RunResult:
    """One run's figures and what producing them cost."""

    run: Run
    measurement: Measurement
    simulate_s: float
    audit_s: float


@dataclass(frozen=True, slots=True)
class ExperimentResults:
    """Every run's result, with the plan and the wall-clock time of the whole experiment."""

    plan: Plan
    results: dict[str, RunResult]
    elapsed_s: float
    jobs: int

    def __getitem__(self, name: str) -> RunResult:
        return self.results[name]

    @property
    def spans(self) -> int:
        """Spans written and audited in all."""
        return sum(r.measurement.spans for r in self.results.values())


def _simulate(run: Run, out: Path) -> None:
    if run.driver == "outage":
        run_outage_workflows(run, out)
        return
    mode = run.protocol.mode
    config = SimulationConfig(
        workflows=run.workflows,
        pipeline=default_pipeline(run.agents),
        reliability=run.reliability,
        seed=run.seed,
        mode=mode,
        max_attempts=1 if mode == schema.MODE_FIRE_AND_FORGET else run.protocol.attempts,
        files_per_agent=1,
        models=run.models,
    )
    run_simulation(config, out, jobs=1)


def run_one(run: Run, *, keep_traces: str | os.PathLike[str] | None = None) -> RunResult:
    """Simulate ``run`` into trace files, audit them and return the figures."""
    if keep_traces is not None:
        out = Path(keep_traces) / run.name
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        cleanup = False
    else:
        out = Path(tempfile.mkdtemp(prefix=f"handoffscope-{run.name}-"))
        cleanup = True
    try:
        t0 = time.perf_counter()
        _simulate(run, out)
        t1 = time.perf_counter()
        traces = load_traces(out)
        figures = measure(traces, agents=run.agents)
        traces.con.close()
        t2 = time.perf_counter()
    finally:
        if cleanup:
            shutil.rmtree(out, ignore_errors=True)
    return RunResult(run=run, measurement=figures, simulate_s=t1 - t0, audit_s=t2 - t1)


def run_plan(
    plan: Plan,
    *,
    jobs: int = 1,
    keep_traces: str | os.PathLike[str] | None = None,
    progress: Callable[[RunResult, int, int], None] | None = None,
) -> ExperimentResults:
    """Run every run of ``plan`` (biggest first) on ``jobs`` processes."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    started = time.perf_counter()
    runs = sorted(plan.runs, key=lambda r: r.spans_estimate, reverse=True)
    results: dict[str, RunResult] = {}
    if jobs == 1:
        for run in runs:
            result = run_one(run, keep_traces=keep_traces)
            results[run.name] = result
            if progress is not None:
                progress(result, len(results), len(runs))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(run_one, run, keep_traces=keep_traces) for run in runs]
            for future in as_completed(futures):
                result = future.result()
                results[result.run.name] = result
                if progress is not None:
                    progress(result, len(results), len(runs))
    ordered = {run.name: results[run.name] for run in plan.runs}
    return ExperimentResults(
        plan=plan, results=ordered, elapsed_s=time.perf_counter() - started, jobs=jobs
    )


def print_progress(result: RunResult, done: int, total: int) -> None:
    """One stderr line per finished run."""
    m = result.measurement
    print(
        f"[{done:>2}/{total}] {result.run.name:<32} {m.count:>5} workflows "
        f"{m.spans:>7} spans  simulate {result.simulate_s:5.1f}s  audit {result.audit_s:4.1f}s",
        file=sys.stderr,
        flush=True,
    )
