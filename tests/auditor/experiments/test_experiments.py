"""`handoffscope experiment`: the quick plan end to end, the key cell, the outage driver."""

from __future__ import annotations

import dataclasses
import json
import re
import struct
from importlib import resources
from pathlib import Path

import pytest

import auditor.experiments as experiments
from auditor import load_traces
from auditor.cli import main
from auditor.experiments import analysis, build_plan, run_one
from auditor.experiments.chart import HEIGHT, WIDTH
from auditor.experiments.measure import measure
from auditor.experiments.outage import run_outage_workflows
from auditor.experiments.plan import FIRE_AND_FORGET, HANDSHAKE, OUTAGE_MODELS, Outage, Run
from auditor.experiments.report import SECTIONS, render
from auditor.experiments.run import ExperimentResults
from collector import schema


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One quick run of the whole command: markdown, chart and JSON."""
    out = tmp_path_factory.mktemp("experiment")
    code = main(
        [
            "experiment",
            "--quick",
            "--out",
            str(out / "experiments.md"),
            "--json",
            str(out / "results.json"),
            "--jobs",
            "2",
            "--quiet",
        ]
    )
    return code, out


def test_quick_plan_runs_end_to_end_through_trace_files_and_the_auditor(quick):
    code, out = quick
    assert code == 0
    document = json.loads((out / "results.json").read_text())
    plan = build_plan(quick=True)
    assert set(document["runs"]) == {r.name for r in plan.runs}
    for run in plan.runs:
        figures = document["runs"][run.name]
        # Every workflow the plan asked for came back from the trace files.
        assert figures["workflows"] == run.workflows, run.name
        assert figures["spans"] > run.workflows and figures["files"] >= 2, run.name
        assert figures["problems"] == 0, run.name
        # The chain-prefix rule reproduces the auditor's observed end-to-end count exactly,
        # and the per-workflow rows add up to the auditor's counts.
        n, workflows, successes, _ = figures["prefix"][-1]
        assert (n, workflows, successes) == (run.agents, run.workflows, figures["successes"])
        e2e = figures["end_to_end"]
        assert figures["per_workflow_rows"] == {
            "workflows": e2e["workflows"],
            "successes": e2e["succeeded_workflows"],
            "restarts": e2e["full_chain_restarts"],
            "retries": e2e["handoff_retries"],
        }, run.name
        assert {a["agent"] for a in figures["agents"]} <= set(_pipeline(run.agents)), run.name


def _pipeline(agents: int) -> tuple[str, ...]:
    from collector.simulator.config import default_pipeline

    return default_pipeline(agents)


def test_markdown_has_every_section_in_order_and_the_figures(quick):
    _, out = quick
    text = (out / "experiments.md").read_text()
    positions = [text.index(heading) for heading in SECTIONS]
    assert positions == sorted(positions)
    assert "0.95^5 = 77.38%" in text
    assert re.search(r"\*\*Measured against analytic:\*\* \d+ of the \d+ intervals", text)
    assert "Checks that failed" not in text
    assert "--quick" in text  # how to rerun this very page
    assert re.search(r"\*\*(\d+ min )?\d+ s\*\* on 2 processes", text)
    # Every run of the plan is listed with its seed.
    for run in build_plan(quick=True).runs:
        assert f"| {run.name} |" in text and f"| {run.seed} |" in text
    # The length tables hold ten chain lengths for each reliability.
    assert text.count("\n| 10 | ") == 3
    assert "![End-to-end success vs chain length](images/experiments-success-vs-length.png)" in text


def test_chart_is_a_real_png_of_the_figure_size(quick):
    _, out = quick
    png = (out / "images" / "experiments-success-vs-length.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (WIDTH, HEIGHT)
    assert len(png) > 20_000  # a blank page compresses to a few kB


def test_five_agents_at_95_percent_fire_and_forget_reproduces_0_7738(tmp_path):
    plan = build_plan()
    cell = dataclasses.replace(plan.get("ff-5"), workflows=300)
    result = run_one(cell, keep_traces=tmp_path)
    m = result.measurement
    figure = analysis.rate(m.successes, m.count, 0.95**5)
    assert figure.interval is not None and 0.7738 in figure.interval
    assert figure.covers_analytic
    # The auditor's count agrees with what the simulator says it did.
    manifest = json.loads((tmp_path / "ff-5" / "manifest.json").read_text())
    assert manifest["figures"]["succeeded"] == m.successes
    assert m.count == 300 and m.retries == 0 and m.restarts == 0


def _always_down(protocol, *, reliability: float, workflows: int) -> Run:
    """Five agents whose shared provider is down from the first moment of every workflow."""
    return Run(
        name=f"always-down-{protocol.key}",
        protocol=protocol,
        agents=5,
        reliability=reliability,
        workflows=workflows,
        seed=4,
        outage=Outage(down_share=1.0, mean_duration_s=1e9, onset_window_s=0.0),
        driver="outage",
        models=OUTAGE_MODELS,
    )


def test_outage_that_never_ends_fails_every_handshake_at_validation(tmp_path):
    run = _always_down(HANDSHAKE, reliability=0.95, workflows=12)
    spans = run_outage_workflows(run, tmp_path)
    traces = load_traces(tmp_path)
    assert traces.span_count == spans
    m = measure(traces, agents=5)
    # The first agent runs on the provider that is down: no workflow gets past it, every
    # attempt is rejected at validation, and nothing is ever executed.
    assert m.count == 12 and m.successes == 0
    assert sum(w.executions for w in m.workflows) == 0
    first = next(a for a in m.agents if a.agent == "research")
    assert (first.handoffs, first.attempts, first.succeeded) == (12, 36, 0)
    reasons = traces.con.execute(
        f'SELECT DISTINCT "{schema.REJECT_REASON}" FROM spans WHERE name = ?',
        [schema.SPAN_VALIDATE],
    ).fetchall()
    assert reasons == [(schema.REJECT_RESOURCE_UNAVAILABLE,)]


def test_outage_hits_fire_and_forget_downstream_and_spares_other_providers(tmp_path):
    run = _always_down(FIRE_AND_FORGET, reliability=1.0, workflows=8)
    run_outage_workflows(run, tmp_path)
    m = measure(load_traces(tmp_path), agents=5)
    rates = {a.agent: a.attempt_rate for a in m.agents}
    # Nobody checks: all five agents run every time; only the openai ones fail.
    assert m.successes == 0 and all(a.attempts == 8 for a in m.agents)
    assert rates == {"research": 0.0, "write": 0.0, "review": 1.0, "edit": 0.0, "publish": 1.0}


def test_experiment_refuses_to_start_without_chromium(monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(["experiment", "--quick", "--out", "/nonexistent/x.md"]) == 2
    err = capsys.readouterr().err
    assert "apt-get install -y chromium" in err and "--no-chart" in err


def test_experiment_names_a_missing_extra(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "plotly" else real(name, *a)
    )
    assert main(["experiment", "--quick", "--out", "/nonexistent/x.md"]) == 2
    assert "pip install 'handoffscope[dashboard]'" in capsys.readouterr().err


def test_experiment_help_and_bad_options(capsys):
    assert main(["experiment", "--help"]) == 0
    text = capsys.readouterr().out
    for option in ("--quick", "--out", "--jobs", "--seed", "--scale", "--no-chart", "--json"):
        assert option in text
    assert main(["experiment", "--scale", "0"]) == 2
    assert "--scale" in capsys.readouterr().err


def test_public_surface_is_sorted_and_importable():
    assert experiments.__all__ == sorted(experiments.__all__)
    for name in experiments.__all__:
        assert hasattr(experiments, name), name


def test_sql_names_only_keys_of_the_trace_schema():
    known = {v for v in vars(schema).values() if isinstance(v, str)}
    folder = resources.files("auditor.experiments").joinpath("sql")
    files = [p for p in folder.iterdir() if p.name.endswith(".sql")]
    assert files
    for path in files:
        text = Path(str(path)).read_text()
        for key in re.findall(r'"((?:handoff|gen_ai)\.[a-z_.]+)"', text):
            assert key in known, f"{path.name}: {key} is not in collector.schema"


@pytest.fixture(scope="module")
def stand_in_results():
    """Results for every run of the quick plan, all copied from one two-workflow run.

    The figures are meaningless, but every section renders: enough to test what the page
    links to without the minute-long quick plan.
    """
    plan = build_plan(quick=True)
    one = run_one(dataclasses.replace(plan.get("ff-5"), workflows=2))
    runs = {run.name: dataclasses.replace(one, run=run) for run in plan.runs}
    return ExperimentResults(plan=plan, results=runs, elapsed_s=1.0, jobs=1)


def test_no_chart_leaves_the_image_link_out(tmp_path, monkeypatch, capsys, stand_in_results):
    import auditor.experiments.run as run_module

    monkeypatch.setattr(run_module, "run_plan", lambda plan, **kwargs: stand_in_results)
    out = tmp_path / "e" / "x.md"
    assert main(["experiment", "--quick", "--out", str(out), "--no-chart", "-q"]) == 0
    text = out.read_text()
    assert ".png" not in text and "](images/" not in text
    assert "No chart was drawn for this run (`--no-chart`)" in text
    assert not (tmp_path / "e" / "images").exists()
    assert "experiments-success-vs-length.png" not in capsys.readouterr().out


def test_the_chart_link_follows_the_images_folder(stand_in_results):
    text = render(stand_in_results, chart="../img/experiments-success-vs-length.png")
    assert "![End-to-end success vs chain length](../img/experiments-success-vs-length.png)" in (
        text
    )
    assert "No chart was drawn" not in text
