"""``handoffscope simulate``: run simulated multi-agent workflows into OTLP trace files."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from collector.errors import ConfigurationError
from collector.messages import HANDOFF_MODES, MODE_HANDSHAKE
from collector.progress import progress
from collector.simulator.config import (
    SimulationConfig,
    default_pipeline,
    parse_duration,
    parse_fault,
    parse_pipeline,
    parse_rate,
    parse_start,
)
from collector.simulator.world import check_models

__all__ = ["config_from_args", "simulate"]


def _list_faults(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    # rich, and the simulation with the SDK, load only when asked for: every handoffscope
    # command imports this module to list its options.
    from collector.simulator.report import print_fault_table

    print_fault_table()
    ctx.exit(0)


@click.command(
    "simulate",
    # The same help options however the command is reached, so its help never varies.
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Example: handoffscope simulate --out runs/demo --workflows 1000 "
    "--fault slow-validation=0.02 --fault broken-idempotency-store=0.01",
)
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the trace files and manifest.json (created if missing).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Run every handoff but record and write nothing: the figures only, much faster.",
)
@click.option("--workflows", "-n", default=100, show_default=True, help="Workflows to run.")
@click.option(
    "--agents",
    "-k",
    type=int,
    default=None,
    help="Chain length, using the standard role names (default 5). Exclusive with --pipeline.",
)
@click.option(
    "--pipeline",
    default=None,
    metavar="A,B,C",
    help="Agent names in chain order, e.g. research,write,review,edit,publish.",
)
@click.option(
    "--reliability",
    default="0.95",
    show_default=True,
    metavar="RATE",
    help="Probability that one attempt of one agent's task succeeds (0-1 or a percentage).",
)
@click.option(
    "--base-latency",
    default="100ms",
    show_default=True,
    metavar="DURATION",
    help="Typical validation round trip (e.g. 100ms, 0.2s); tasks take a few times longer.",
)
@click.option("--seed", default=0, show_default=True, help="Seed: same seed, same bytes.")
@click.option(
    "--fault",
    "faults",
    multiple=True,
    metavar="NAME=RATE",
    help="Inject a fault at a rate (repeatable; all=RATE sets every fault). See --list-faults.",
)
@click.option(
    "--mode",
    type=click.Choice(HANDOFF_MODES),
    default=MODE_HANDSHAKE,
    show_default=True,
    help="handshake (propose/validate/commit with per-handoff retries), two-step "
    "(acknowledge, then commit; failures rerun the whole chain) or fire-and-forget.",
)
@click.option(
    "--max-attempts",
    default=3,
    show_default=True,
    help="Attempts per handoff (handshake) or runs per workflow (two-step).",
)
@click.option(
    "--validation-timeout",
    default="2s",
    show_default=True,
    metavar="DURATION",
    help="The validation clock: later answers void the proposal.",
)
@click.option(
    "--deadline",
    default="30s",
    show_default=True,
    metavar="DURATION",
    help="Each task's deadline after proposal.",
)
@click.option(
    "--redelivery-rate",
    default="0.01",
    show_default=True,
    metavar="RATE",
    help="Share of clean commits delivered twice; the idempotency store replays them.",
)
@click.option(
    "--files-per-agent",
    default=2,
    show_default=True,
    help="Replicas of each agent process; each writes its own trace file.",
)
@click.option(
    "--duplicate-rate",
    default="0",
    show_default=True,
    metavar="RATE",
    help="Share of export batches re-sent, as OTLP retries do (duplicate spans).",
)
@click.option(
    "--models",
    default=None,
    metavar="M1,M2",
    help="Models assigned to the agents in turn (default: each role's usual model).",
)
@click.option(
    "--token-scale",
    default=1.0,
    show_default=True,
    help="Multiply every agent's token usage (for cost-heavy runs).",
)
@click.option(
    "--workflow-name",
    default="content-pipeline",
    show_default=True,
    metavar="NAME",
    help="gen_ai.workflow.name of every workflow.",
)
@click.option(
    "--run-id",
    default=None,
    metavar="RUN",
    help=(
        "Workflow ids become wf-RUN-000001...; default: mode, seed and a digest of the run's"
        " settings (e.g. hs0-1a2b3c), so different runs never share one."
    ),
)
@click.option(
    "--start",
    default=None,
    metavar="ISO-TIME",
    help="Virtual time of the first workflow (default 2026-01-01T00:00:00Z).",
)
@click.option("--gzip", "gzip_files", is_flag=True, help="Write .jsonl.gz files.")
@click.option(
    "--jobs",
    "-j",
    type=int,
    default=None,
    help="Processes to use (default: one per replica, up to the CPUs this process may use, "
    "for 2,000 workflows or more; else 1); the output is the same whatever the number.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace the trace files and manifest of an earlier run in --out.",
)
@click.option(
    "--list-faults",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_list_faults,
    help="List every fault, the rule that flags it and its default rate, then exit.",
)
@click.option("--quiet", "-q", is_flag=True, help="Print only the summary line.")
def simulate(
    *, out: Path | None, dry_run: bool, jobs: int | None, force: bool, quiet: bool, **options: Any
) -> None:
    """Simulate multi-agent workflows through the handshake library into trace files.

    Every handoff runs the library's own propose/validate/commit code on a virtual clock, so
    slow validations and long deadlines take no real time. Each agent process writes its
    own OTLP JSON-lines file; manifest.json lists every injected fault and the rule that
    must flag it, plus the run's end-to-end figures.
    """
    # Only when it runs (see _list_faults).
    from collector.simulator.report import print_summary
    from collector.simulator.run import default_jobs, run_simulation

    try:
        config = _build_config(**options)
    except ConfigurationError as e:
        raise click.UsageError(str(e)) from None
    if jobs is None:
        jobs = default_jobs(config)
    if jobs < 1:
        raise click.UsageError("--jobs must be at least 1")
    if out is None and not dry_run:
        raise click.UsageError("--out DIR is required (or --dry-run to write nothing)")
    started = time.perf_counter()
    try:
        with progress(f"simulating {config.workflows:,} workflows"):
            result = run_simulation(config, None if dry_run else out, jobs=jobs, force=force)
    except ConfigurationError as e:
        raise click.UsageError(str(e)) from None
    except OSError as e:
        where = e.filename or out
        raise click.ClickException(f"cannot write {where}: {e.strerror or e}") from None
    print_summary(result, elapsed_s=time.perf_counter() - started, quiet=quiet)


def config_from_args(args: list[str]) -> SimulationConfig:
    """The ``SimulationConfig`` that ``handoffscope simulate --out X ARGS`` would run."""
    ctx = simulate.make_context("simulate", ["--out", "unused", *args])
    params = dict(ctx.params)
    for name in ("out", "dry_run", "jobs", "force", "quiet"):
        params.pop(name, None)
    return _build_config(**params)


def _build_config(
    *,
    workflows: int,
    agents: int | None,
    pipeline: str | None,
    reliability: str,
    base_latency: str,
    seed: int,
    faults: tuple[str, ...],
    mode: str,
    max_attempts: int,
    validation_timeout: str,
    deadline: str,
    files_per_agent: int,
    duplicate_rate: str,
    redelivery_rate: str,
    models: str | None,
    token_scale: float,
    workflow_name: str,
    run_id: str | None,
    start: str | None,
    gzip_files: bool,
) -> SimulationConfig:
    if agents is not None and pipeline is not None:
        raise ConfigurationError("give either --agents or --pipeline, not both")
    names = (
        parse_pipeline(pipeline)
        if pipeline is not None
        else default_pipeline(5 if agents is None else agents)
    )
    chosen: dict[str, float] = {}
    for spec in faults:
        chosen.update(parse_fault(spec, mode=mode))
    model_names = tuple(m.strip() for m in (models or "").split(",") if m.strip())
    check_models(model_names)
    return SimulationConfig(
        workflows=workflows,
        pipeline=names,
        reliability=parse_rate(reliability, option="--reliability"),
        base_latency_s=parse_duration(base_latency, option="--base-latency"),
        seed=seed,
        faults=chosen,
        mode=mode,
        max_attempts=max_attempts,
        validation_timeout_s=parse_duration(validation_timeout, option="--validation-timeout"),
        deadline_s=parse_duration(deadline, option="--deadline"),
        files_per_agent=files_per_agent,
        duplicate_rate=parse_rate(duplicate_rate, option="--duplicate-rate"),
        duplicate_commit_rate=parse_rate(redelivery_rate, option="--redelivery-rate"),
        models=model_names,
        token_scale=token_scale,
        gzip=gzip_files,
        workflow_name=workflow_name,
        run_id=run_id,
        start_ns=None if start is None else parse_start(start),
    )
