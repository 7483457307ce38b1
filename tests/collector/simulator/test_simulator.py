"""``handoffscope simulate``: options, determinism, the virtual clock, faults and ground truth."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from auditor.cli import main
from collector import schema
from collector.errors import ConfigurationError
from collector.simulator import (
    FAULTS,
    SimulationConfig,
    analytic_success,
    fault_by_name,
    load_manifest,
    parse_duration,
    parse_fault,
    run_simulation,
    wilson_interval,
)
from collector.simulator.faults import faults_for_mode
from tests.support.paths import REPO
from tests.support.simulator import (
    audit_keys,
    finding_key,
    findings,
    manifest_keys,
    read_spans,
    trace_files,
)

SMALL = ("research", "write", "review")


def _run(tmp_path: Path, name: str = "run", **options: object):
    config = SimulationConfig(**{"workflows": 20, "pipeline": SMALL, **options})
    return run_simulation(config, tmp_path / name)


def _bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# ---------------------------------------------------------------------------------- options
@pytest.mark.parametrize(
    ("text", "seconds"),
    [("100ms", 0.1), ("2.5s", 2.5), ("1m", 60.0), ("250us", 0.00025), ("3", 3.0), (".5s", 0.5)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["fast", "-1s", "1 parsec", "", "1e400s"])
def test_parse_duration_rejects_with_the_option_name(text):
    with pytest.raises(ConfigurationError, match="--base-latency"):
        parse_duration(text, option="--base-latency")


def test_parse_fault_forms():
    assert parse_fault("slow-validation=0.02") == {"slow-validation": 0.02}
    assert parse_fault("slow-validation=2%") == {"slow-validation": 0.02}
    assert parse_fault("slow-validation") == {"slow-validation": 0.02}
    # A rule id names the fault that trips it.
    assert parse_fault("duplicate-execution=0.1") == {"broken-idempotency-store": 0.1}
    every = parse_fault("all=0.01")
    assert set(every) == {f.name for f in FAULTS} and set(every.values()) == {0.01}
    legacy = parse_fault("all=0.01", mode="fire-and-forget")
    assert "slow-validation" not in legacy and "missing-cost" in legacy


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("slow-valdation=0.1", "did you mean 'slow-validation'"),
        ("dupliate-execution=0.1", "did you mean 'duplicate-execution'"),
        ("slow-validation=2", "between 0 and 1"),
        ("slow-validation=often", "is not a rate"),
        ("all", "needs a rate"),
        ("=0.1", "NAME=RATE"),
    ],
)
def test_parse_fault_errors_are_clear(spec, message):
    with pytest.raises(ConfigurationError, match=message):
        parse_fault(spec)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"workflows": 0}, "--workflows"),
        ({"reliability": 1.5}, "--reliability"),
        ({"mode": "two-step", "faults": {"slow-validation": 0.1}}, "two-step mode"),
        ({"faults": {"slow-validation": 0.6, "missing-cost": 0.6}}, "add up to 1.2"),
        ({"files_per_agent": 0}, "--files-per-agent"),
        ({"run_id": "no spaces please"}, "--run-id"),
    ],
)
def test_config_rejects_bad_values(options, message):
    with pytest.raises(ConfigurationError, match=message):
        SimulationConfig(**options)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fault", "slow-valdation=0.1"], "did you mean 'slow-validation'"),
        (["--agents", "3", "--pipeline", "a,b"], "either --agents or --pipeline"),
        (["--agents", "0"], "--agents must be at least 1, got 0"),
        (["--base-latency", "quick"], "--base-latency: 'quick' is not a duration"),
        (["--pipeline", "research,research"], "appears twice"),
        (["--models", "gpt-5o"], "unknown model 'gpt-5o'"),
        (["--start", "yesterday"], "--start"),
        (["--mode", "fire-and-forget", "--fault", "accept-without-eta=0.1"], "cannot be injected"),
    ],
)
def test_cli_usage_errors_exit_2_without_traceback(tmp_path, capsys, args, message):
    code = main(["simulate", "--out", str(tmp_path / "out"), "--workflows", "3", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_cli_runs_and_prints_observed_and_analytic(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["simulate", "--out", str(out), "--workflows", "12", "--agents", "3"]) == 0
    text = capsys.readouterr().out
    assert "observed" in text and "analytic, fire-and-forget" in text and "77.4%" not in text
    assert "12 workflows (handshake, 3 agents at 95%)" in text
    manifest = load_manifest(out)
    assert manifest["parameters"]["pipeline"] == ["research", "write", "review"]
    assert manifest["figures"]["workflows"] == 12
    # A second run into the same folder must not silently append to the old files.
    assert main(["simulate", "--out", str(out), "--workflows", "12"]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["simulate", "--out", str(out), "--workflows", "5", "-q", "--force"]) == 0
    assert load_manifest(out)["figures"]["workflows"] == 5


def test_an_unwritable_output_folder_is_a_clear_error(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert main(["simulate", "--out", str(blocker / "out"), "--workflows", "2"]) == 2
    err = capsys.readouterr().err
    assert "cannot write" in err and "a-file" in err and "Traceback" not in err
    assert main(["simulate", "--out", str(blocker), "--workflows", "2"]) == 2
    assert "is a file" in capsys.readouterr().err


def test_force_never_deletes_files_it_did_not_write(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "other.jsonl").write_text("{}\n")
    _run(tmp_path, "out", workflows=3)
    run_simulation(SimulationConfig(workflows=3, pipeline=SMALL), out, force=True)
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "other.jsonl").read_text() == "{}\n"


def test_help_documents_every_option():
    from collector.simulator.cli import simulate

    for param in simulate.params:
        if param.name not in ("help",):
            assert getattr(param, "help", None), f"--{param.name} has no help text"


def test_list_faults_names_every_fault_and_rule(capsys):
    assert main(["simulate", "--list-faults"]) == 0
    out = capsys.readouterr().out
    for fault in FAULTS:
        assert fault.name in out and fault.rule in out


# ----------------------------------------------------------------------------- determinism
def test_same_seed_same_bytes_whatever_the_job_count(tmp_path):
    options = {
        "workflows": 30,
        "faults": {"slow-validation": 0.1, "missing-cost": 0.1},
        "duplicate_rate": 0.3,
        "seed": 11,
    }
    config = SimulationConfig(pipeline=SMALL, **options)
    first = run_simulation(config, tmp_path / "a")
    run_simulation(config, tmp_path / "b", jobs=2)
    assert _bytes(tmp_path / "a") == _bytes(tmp_path / "b")
    other = run_simulation(
        SimulationConfig(pipeline=SMALL, **{**options, "seed": 12}), tmp_path / "c"
    )
    assert (
        _bytes(tmp_path / "a")["orchestrator-0.jsonl"]
        != _bytes(tmp_path / "c")["orchestrator-0.jsonl"]
    )
    assert first.figures != other.figures


@pytest.mark.parametrize(
    ("workflows", "replicas", "cpus", "expected"),
    [(1999, 2, 2, 1), (2000, 2, 2, 2), (10_000, 4, 2, 2), (10_000, 1, 8, 1), (5000, 3, 1, 1)],
)
def test_default_jobs_runs_big_runs_on_every_core_it_may_use(
    workflows, replicas, cpus, expected, monkeypatch
):
    from collector.simulator import run

    monkeypatch.setattr(run.os, "sched_getaffinity", lambda pid: set(range(cpus)))
    config = SimulationConfig(workflows=workflows, files_per_agent=replicas)
    assert run.default_jobs(config) == expected


def test_simulate_without_jobs_uses_the_default_and_writes_the_same_bytes(tmp_path, monkeypatch):
    from collector.simulator import run

    monkeypatch.setattr(run, "AUTO_JOBS_WORKFLOWS", 10)
    monkeypatch.setattr(run.os, "sched_getaffinity", lambda pid: {0, 1})
    args = ["simulate", "--workflows", "12", "--pipeline", "research,write", "--seed", "5", "-q"]
    assert main([*args, "--out", str(tmp_path / "auto")]) == 0
    assert main([*args, "--out", str(tmp_path / "one"), "--jobs", "1"]) == 0
    assert _bytes(tmp_path / "auto") == _bytes(tmp_path / "one")


def test_gzip_files_are_reproducible_and_hold_the_same_spans(tmp_path):
    plain = _run(tmp_path, "plain", seed=4)
    packed = _run(tmp_path, "packed", seed=4, gzip=True)
    _run(tmp_path, "again", seed=4, gzip=True)
    assert _bytes(tmp_path / "packed") == _bytes(tmp_path / "again")
    assert [p.name for p in trace_files(tmp_path / "packed")] == [
        p.name + ".gz" for p in trace_files(tmp_path / "plain")
    ]
    spans_plain, _ = read_spans(tmp_path / "plain")
    spans_packed, _ = read_spans(tmp_path / "packed")
    assert spans_plain == spans_packed
    assert plain.figures == packed.figures


def test_runs_that_differ_share_no_id_or_key_and_audit_together_as_their_sum(tmp_path):
    """The same seed in another mode or fault mix draws the same world, but never the same
    ids or idempotency keys: audited together, runs add up and none is taken for another's
    duplicate (the bundled samples audit together)."""
    runs = {
        "handshake": {},
        "fire-and-forget": {"mode": "fire-and-forget"},
        "faulty": {"faults": parse_fault("all=0.05", mode="handshake")},
    }
    ids: dict[str, set[str]] = {}
    keys: dict[str, set[str]] = {}
    for name, options in runs.items():
        _run(tmp_path, name, seed=1, **options)
        spans, _ = read_spans(tmp_path / name)
        ids[name] = {s.span_id for s in spans} | {s.trace_id for s in spans}
        keys[name] = {
            str(s.attrs[schema.IDEMPOTENCY_KEY])
            for s in spans
            if s.attrs.get(schema.IDEMPOTENCY_KEY)
        }
    assert all(keys.values())
    names = list(runs)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not ids[a] & ids[b], (a, b)
            assert not keys[a] & keys[b], (a, b)
    # The same run again draws the same ids.
    _run(tmp_path, "again", seed=1)
    again, _ = read_spans(tmp_path / "again")
    assert {s.span_id for s in again} | {s.trace_id for s in again} == ids["handshake"]

    def keyed(paths: list[Path]) -> list[tuple[str, str | None, str | None, str | None]]:
        found, con = findings(paths)
        spans = con.execute("SELECT count(*) FROM spans").fetchone()[0]
        # The p95 per receiver is over the whole set, so it is not a sum of runs.
        per_trace = [f for f in found if f.trace_id is not None]
        return [("spans", str(spans), None, None)] + sorted(
            finding_key(f.rule, f.trace_id, f.task_id, f.receiver) for f in per_trace
        )

    apart = [keyed([tmp_path / name]) for name in names]
    together = keyed([tmp_path / name for name in names])
    total = sum(int(k[0][1]) for k in apart)
    assert together[0] == ("spans", str(total), None, None)
    assert together[1:] == sorted(key for k in apart for key in k[1:])


def test_two_simulate_runs_of_one_mode_and_seed_audit_together_as_the_sum_of_workflows(
    tmp_path, capsys
):
    """Runs that differ only in size (the same mode and seed) draw distinct workflow ids:
    audited together their workflows add up, none is merged with another run's."""
    from auditor import audit, load_traces

    base = ["simulate", "--pipeline", "research,write", "--seed", "0", "-q"]
    assert main([*base, "--workflows", "25", "--out", str(tmp_path / "big")]) == 0
    assert main([*base, "--workflows", "5", "--out", str(tmp_path / "small")]) == 0
    capsys.readouterr()
    apart = [
        audit(load_traces(tmp_path / name)).figures.reliability["workflows"]
        for name in ("big", "small")
    ]
    assert apart == [25, 5]
    together = audit(load_traces([tmp_path / "big", tmp_path / "small"]))
    assert together.figures.reliability["workflows"] == 30
    # The same command again is the same run: the same ids, byte for byte.
    assert main([*base, "--workflows", "5", "--out", str(tmp_path / "again")]) == 0
    assert _bytes(tmp_path / "small") == _bytes(tmp_path / "again")
    # A run id the user gives is used as it is.
    config = SimulationConfig(pipeline=SMALL, run_id="nightly")
    assert config.workflow_prefix == "wf-nightly-"


# ----------------------------------------------------------------------------- virtual clock
def test_virtual_clock_takes_no_real_time_but_timestamps_show_it(tmp_path, monkeypatch):
    """Slow validations and deadline misses: no real sleep, no timer thread, true spans."""

    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"the simulation slept {seconds} s of real time")

    monkeypatch.setattr(time, "sleep", no_sleep)
    threads_before = threading.active_count()
    result = _run(
        tmp_path,
        workflows=20,
        faults={"slow-validation": 0.3, "deadline-missed": 0.2},
        deadline_s=30.0,
    )
    assert threading.active_count() == threads_before
    spans, _ = read_spans(tmp_path / "run")
    late = [s for s in spans if s.name == schema.SPAN_VALIDATE and s.attrs.get(schema.LATE)]
    assert late, "the fault must have produced late validations"
    for s in late:
        # The span lasts as long as the answer took: over the 2 s clock, at most ~4 s.
        assert 2.0 < s.duration_s < 4.2
        assert s.attrs[schema.VALIDATION_LATENCY_MS] == pytest.approx(s.duration_s * 1000, abs=1)
    slow_commits = [s for s in spans if s.name == schema.SPAN_COMMIT and s.duration_s > 30]
    assert slow_commits, "deadline-missed must stretch executions past the 30 s deadline"
    first = result.figures["virtual_start_unix_ns"]
    assert first == 1_767_225_600_000_000_000
    assert result.figures["virtual_end_unix_ns"] - first > 30 * 1e9


def test_start_option_moves_every_timestamp(tmp_path):
    _run(tmp_path, "a", workflows=3, start_ns=1_800_000_000_000_000_000)
    spans, _ = read_spans(tmp_path / "a")
    assert min(s.start_ns for s in spans) >= 1_800_000_000_000_000_000


# ----------------------------------------------------------------------------- the model
def test_spans_come_from_several_services_and_files_with_duplicates(tmp_path):
    result = _run(tmp_path, workflows=40, duplicate_rate=0.5, files_per_agent=3)
    spans, total = read_spans(tmp_path / "run")
    files = trace_files(tmp_path / "run")
    assert len(files) == 3 * 4  # three replicas of orchestrator + three agents
    assert {s.service for s in spans} == {"orchestrator", *SMALL}
    assert total > len(spans)  # re-sent batches
    assert total - len(spans) == result.figures["duplicate_spans"]
    assert len(spans) == result.figures["spans"]
    # Every handoff's spans share one trace with its workflow root.
    roots = {s.trace_id for s in spans if s.name.startswith(schema.SPAN_WORKFLOW_PREFIX)}
    assert {s.trace_id for s in spans} == roots


def test_every_phase_span_is_attributed_to_a_priced_agent(tmp_path):
    _run(tmp_path, workflows=10, models=("claude-opus-4", "o3"))
    spans, _ = read_spans(tmp_path / "run")
    commits = [s for s in spans if s.name == schema.SPAN_COMMIT]
    assert commits
    for s in commits:
        assert s.attrs[schema.GEN_AI_AGENT_NAME] == s.attrs[schema.RECEIVER]
        assert s.attrs[schema.COST_USD] > 0
        assert s.attrs[schema.GEN_AI_REQUEST_MODEL] in ("claude-opus-4", "o3")
    proposes = [s for s in spans if s.name == schema.SPAN_PROPOSE]
    assert all(s.attrs[schema.GEN_AI_AGENT_NAME] == s.attrs[schema.SENDER] for s in proposes)


def test_fire_and_forget_success_is_within_a_binomial_interval_of_r_to_the_k():
    """2,000 workflows (figures only): the 99.9% Wilson interval contains 0.95^5."""
    result = run_simulation(
        SimulationConfig(workflows=2000, mode="fire-and-forget", seed=21), None, jobs=2
    )
    f = result.figures
    assert f["workflows"] == 2000
    lo, hi = wilson_interval(f["succeeded"], f["workflows"])
    assert lo <= 0.95**5 <= hi
    assert hi - lo < 0.07  # tight enough to tell 77% from, say, 72% or 82%
    # Each agent's observed per-attempt reliability is near the configured 95% too.
    for agent in f["agents"].values():
        lo, hi = wilson_interval(agent["successes"], agent["attempts"])
        assert lo <= 0.95 <= hi


def test_handshake_retries_lift_success_well_above_fire_and_forget():
    kw = {"workflows": 600, "seed": 22}
    shake = run_simulation(SimulationConfig(**kw), None).figures
    lo, hi = wilson_interval(shake["succeeded"], shake["workflows"])
    assert lo <= (1 - 0.05**3) ** 5 <= hi and lo > 0.95**5 + 0.1
    assert shake["attempts"] > shake["handoffs"]  # the lift comes from per-handoff retries


def test_analytic_figures():
    kw = {"reliability": 0.95, "agents": 5, "max_attempts": 3}
    assert analytic_success(mode="fire-and-forget", **kw) == pytest.approx(0.7738, abs=1e-4)
    assert analytic_success(mode="handshake", **kw) == pytest.approx((1 - 0.05**3) ** 5)
    assert analytic_success(mode="two-step", **kw) == pytest.approx(1 - (1 - 0.95**5) ** 3)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and 0 < hi < 1


# ------------------------------------------------------------------ faults and ground truth
_ALSO = {
    # A late answer is slow, and enough of them push the receiver's p95 over budget.
    "slow-validation": {"validation-p95-over-budget"},
    "late-answer-used": {"slow-validation", "validation-p95-over-budget"},
}


@pytest.fixture(scope="module")
def fault_runs(tmp_path_factory):
    """One small run per fault, each alone, audited together in one pass.

    Each run has its own agent names and seed, so its receivers' latency figures and its
    traces stay apart from the others' in the shared audit.
    """
    root = tmp_path_factory.mktemp("faults")
    runs = {}
    for i, f in enumerate(FAULTS):
        rate = 0.3 if f.scope != "receiver" else 0.5
        config = SimulationConfig(
            workflows=12,
            pipeline=tuple(f"{name}-{i}" for name in SMALL),
            seed=100 + i,
            faults={f.name: rate},
            duplicate_rate=0.2,
        )
        runs[f.name] = run_simulation(config, root / f.name)
    found, con = findings([root / name for name in runs])
    workflow_of = dict(
        con.execute(
            'SELECT trace_id, any_value("handoff.workflow.id") FROM spans '
            'WHERE "handoff.workflow.id" IS NOT NULL GROUP BY trace_id'
        ).fetchall()
    )
    by_run: dict[str, list] = {name: [] for name in runs}
    prefixes = {r.config.workflow_prefix: name for name, r in runs.items()}
    for finding in found:
        if finding.trace_id is None:  # the per-receiver rule: its receiver names the run
            index = int(finding.receiver.rsplit("-", 1)[1])
            by_run[FAULTS[index].name].append(finding)
            continue
        workflow = workflow_of[finding.trace_id]
        by_run[prefixes[workflow[: workflow.rindex("-") + 1]]].append(finding)
    return runs, by_run


@pytest.mark.parametrize("fault", [f.name for f in FAULTS])
def test_each_fault_produces_exactly_its_manifest_entries(fault_runs, fault):
    """One fault alone: its entries name its rule, and the audit finds exactly them."""
    runs, by_run = fault_runs
    result = runs[fault]
    f = fault_by_name(fault)
    rules = {e.rule for e in result.faults}
    assert f.rule in rules, f"{fault} was never injected"
    assert rules - {f.rule} <= _ALSO.get(fault, set())
    # Nothing but this fault (no natural latency problem either) is in the ground truth ...
    assert {e.fault for e in result.faults} == {fault}
    # ... and the auditor reports exactly that ground truth.
    expected = sorted(finding_key(e.rule, e.trace_id, e.task_id, e.receiver) for e in result.faults)
    got = sorted(finding_key(x.rule, x.trace_id, x.task_id, x.receiver) for x in by_run[fault])
    assert got == expected


@pytest.mark.parametrize("mode", ["handshake", "two-step", "fire-and-forget"])
def test_a_fault_mix_is_audited_exactly_as_the_manifest_says(tmp_path, mode):
    faults = parse_fault("all=0.05", mode=mode)
    result = run_simulation(
        SimulationConfig(
            workflows=40, pipeline=SMALL, seed=8, mode=mode, faults=faults, duplicate_rate=0.2
        ),
        tmp_path / mode,
    )
    injected = {e.fault for e in result.faults} & {f.name for f in faults_for_mode(mode)}
    assert len(injected) >= len(faults_for_mode(mode)) // 2
    assert audit_keys(tmp_path / mode) == manifest_keys(tmp_path / mode)


def test_clean_run_has_no_expected_finding_and_the_audit_agrees(tmp_path):
    result = _run(tmp_path, workflows=30, duplicate_rate=0.3, duplicate_commit_rate=0.3)
    assert result.faults == []
    assert audit_keys(tmp_path / "run") == []
    spans, _ = read_spans(tmp_path / "run")
    outcomes = Counter(
        s.attrs.get(schema.COMMIT_OUTCOME) for s in spans if s.name == schema.SPAN_COMMIT
    )
    assert outcomes["replayed"] > 0  # re-delivered commits were answered from the store


def test_high_base_latency_is_recorded_as_natural_violations(tmp_path):
    """No fault injected, but 900 ms validations: the ground truth says what happened."""
    result = _run(tmp_path, workflows=15, base_latency_s=0.9)
    causes = Counter((e.rule, e.fault) for e in result.faults)
    assert causes[("validation-p95-over-budget", "latency")] >= 1
    assert all(e.fault == "latency" for e in result.faults)
    assert audit_keys(tmp_path / "run") == manifest_keys(tmp_path / "run")


def test_manifest_entries_point_at_real_spans(tmp_path):
    result = _run(
        tmp_path,
        workflows=30,
        faults={"missing-idempotency-key": 0.2, "broken-idempotency-store": 0.2},
    )
    spans, _ = read_spans(tmp_path / "run")
    by_task = {(s.trace_id, s.attrs.get(schema.TASK_ID)) for s in spans}
    for e in result.faults:
        assert (e.trace_id, e.task_id) in by_task
        if e.rule == "missing-idempotency-key":
            assert e.idempotency_key is None
        else:
            executions = [
                s
                for s in spans
                if s.name == schema.SPAN_COMMIT
                and s.attrs.get(schema.IDEMPOTENCY_KEY) == e.idempotency_key
                and s.attrs.get(schema.COMMIT_OUTCOME) == "executed"
            ]
            assert len(executions) == 2
    doc = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert doc["expected_findings"] == dict(sorted(Counter(e.rule for e in result.faults).items()))


# ------------------------------------------------------------------------------------ docs
DOC = REPO / "docs" / "simulator.md"


def _between(text: str, start: str, end: str) -> str:
    return text[text.index(start) + len(start) : text.index(end)].strip("\n")


def test_docs_fault_table_is_the_catalogue():
    from collector.simulator.report import fault_table_markdown

    doc = DOC.read_text(encoding="utf-8")
    table = _between(doc, "<!-- faults:start -->", "<!-- faults:end -->")
    assert table == fault_table_markdown().strip("\n")
    for f in FAULTS:
        assert f"| `{f.name}` | `{f.rule}`" in table


def test_docs_command_reference_is_the_current_help():
    import click

    from collector.simulator.cli import simulate

    # As the root command builds it: `-h` is a help option everywhere.
    ctx = click.Context(
        simulate,
        info_name="handoffscope simulate",
        terminal_width=100,
        max_content_width=100,
        help_option_names=["-h", "--help"],
    )
    doc = DOC.read_text(encoding="utf-8")
    block = _between(doc, "<!-- help:start -->", "<!-- help:end -->")
    assert block.strip("`\n") == simulate.get_help(ctx).strip("\n")


def test_public_surface_is_sorted_and_pinned():
    import collector.simulator as sim

    assert sim.__all__ == sorted(sim.__all__)
    assert sim.__all__ == [
        "DEFAULT_PIPELINE",
        "FAULTS",
        "Fault",
        "FaultEntry",
        "MANIFEST_NAME",
        "SimulationConfig",
        "SimulationResult",
        "analytic_success",
        "fault_by_name",
        "fault_names",
        "load_manifest",
        "parse_duration",
        "parse_fault",
        "parse_pipeline",
        "run_simulation",
        "wilson_interval",
    ]
    for name in sim.__all__:
        assert hasattr(sim, name), name
