"""``handoffscope experiment``: rerun every experiment and rewrite docs/experiments.md."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import click

from auditor.experiments.analysis import length_grid
from auditor.experiments.chart import find_chromium, success_figure, write_png
from auditor.experiments.plan import build_plan
from auditor.experiments.report import CHART, render
from auditor.experiments.run import print_progress, run_plan

__all__ = ["experiment"]

DEFAULT_OUT = "docs/experiments.md"


def _default_jobs() -> int:
    return max(1, min(2, os.cpu_count() or 1))


@click.command(
    "experiment",
    epilog="Example: handoffscope experiment --quick --out /tmp/experiments.md",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_OUT,
    show_default=True,
    help="Markdown file to write the results to.",
)
@click.option(
    "--images",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder for the chart PNG [default: images/ next to --out].",
)
@click.option("--quick", is_flag=True, help="Every experiment at a tiny size, in seconds.")
@click.option(
    "--scale",
    type=click.FloatRange(min=0.01, max=100.0),
    default=1.0,
    show_default=True,
    help="Multiply every run's workflow count (0.5: about half the time, wider intervals).",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1, max=64),
    default=_default_jobs,
    show_default="up to 2",
    help="Processes running simulations side by side; the figures are the same for any value.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the whole plan.")
@click.option(
    "--keep-traces",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep every run's trace files in this folder (one sub-folder per run).",
)
@click.option("--no-chart", is_flag=True, help="Skip the PNG chart (no Chromium needed).")
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write every run's figures as JSON to this file.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
def experiment(
    *,
    out: Path,
    images: Path | None,
    quick: bool,
    scale: float,
    jobs: int,
    seed: int,
    keep_traces: Path | None,
    no_chart: bool,
    json_out: Path | None,
    quiet: bool,
) -> None:
    """Reproduce the handshake's reliability figures from simulated traces.

    Simulates every run of the plan into OTLP trace files, audits each folder with the
    auditor, and writes the measured figures, their analytic values and 95% intervals to
    --out (docs/experiments.md) with a chart of success vs chain length. The full plan takes
    a few minutes on two cores; --quick runs the same steps at a tiny size.
    """
    _require("numpy", *(() if no_chart else ("plotly",)))
    if not no_chart:
        find_chromium()  # fail before minutes of simulation, not after
    plan = build_plan(seed=seed, quick=quick, scale=scale)
    if not quiet:
        click.echo(
            f"handoffscope experiment: {len(plan.runs)} runs, "
            f"{sum(r.workflows for r in plan.runs):,} workflows, {jobs} process(es)",
            err=True,
        )
    results = run_plan(
        plan, jobs=jobs, keep_traces=keep_traces, progress=None if quiet else print_progress
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    image_dir = images if images is not None else out.parent / Path(CHART).parent
    command = _command(quick=quick, scale=scale, seed=seed, out=out)
    chart: str | None = None  # --no-chart: the page must not link to an image never drawn
    if not no_chart:
        chart = Path(os.path.relpath(image_dir / Path(CHART).name, out.parent)).as_posix()
    out.write_text(render(results, command=command, chart=chart), encoding="utf-8")
    written = [str(out)]
    if not no_chart:
        png = write_png(success_figure(length_grid(results)), image_dir / Path(CHART).name)
        written.append(str(png))
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "seed": seed,
            "quick": quick,
            "scale": scale,
            "elapsed_s": round(results.elapsed_s, 3),
            "jobs": jobs,
            "runs": {
                name: {
                    "protocol": r.run.protocol.key,
                    "agents": r.run.agents,
                    "reliability": r.run.reliability,
                    "outage": r.run.outage is not None,
                    "seed": r.run.seed,
                    **r.measurement.to_dict(),
                }
                for name, r in results.results.items()
            },
        }
        json_out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        written.append(str(json_out))
    click.echo(
        f"{len(results.results)} runs, {results.spans:,} spans audited in "
        f"{results.elapsed_s:.0f} s; wrote {', '.join(written)}"
    )


def _require(*modules: str) -> None:
    """Stop with an install hint when an optional dependency is missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise click.ClickException(
            f"'experiment' needs {', '.join(missing)}: pip install 'handoffscope[dashboard]'"
        )


def _command(*, quick: bool, scale: float, seed: int, out: Path) -> str:
    parts = ["handoffscope experiment"]
    if quick:
        parts.append("--quick")
    if scale != 1.0:
        parts.append(f"--scale {scale:g}")
    if seed:
        parts.append(f"--seed {seed}")
    if out.as_posix() != DEFAULT_OUT:
        parts.append(f"--out {out.as_posix()}")
    return " ".join(parts)
