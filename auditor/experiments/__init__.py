"""The experiments behind docs/experiments.md: the protocol's figures, measured from traces.

Quick start (the same as ``handoffscope experiment --quick --no-chart``)::

    from auditor.experiments import build_plan, render, run_plan

    results = run_plan(build_plan(quick=True), jobs=2)
    print(results["ff-5"].measurement.observed)     # five agents at 95%, fire-and-forget
    markdown = render(results)

Each run of the plan is simulated into OTLP trace files (``collector.simulator``, or the
outage driver here for shared outages), loaded with ``auditor.load_traces`` and measured
with SQL over the ``spans`` table; ``render`` writes the figures beside their analytic
values and confidence intervals. Needs the ``[dashboard]`` extra (numpy, plotly) and, for
the PNG chart, Chromium.
"""

from __future__ import annotations

from auditor.experiments.cli import experiment
from auditor.experiments.plan import Outage, Plan, Protocol, Run, build_plan
from auditor.experiments.report import render
from auditor.experiments.run import ExperimentResults, RunResult, run_one, run_plan

__all__ = [
    "ExperimentResults",
    "Outage",
    "Plan",
    "Protocol",
    "Run",
    "RunResult",
    "build_plan",
    "experiment",
    "render",
    "run_one",
    "run_plan",
]
