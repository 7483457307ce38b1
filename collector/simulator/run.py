"""A whole simulation: prepare the folder, run every replica, merge, write the manifest.

Replicas are independent (each has its own seeded random stream, clock and files), so they
can run in separate processes; the merge is in replica order, so the output is the same
bytes whatever ``jobs`` is.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector import schema
from collector.errors import ConfigurationError
from collector.simulator.config import SimulationConfig
from collector.simulator.engine import NATURAL, ReplicaResult, run_replica
from collector.simulator.manifest import (
    MANIFEST_NAME,
    FaultEntry,
    load_manifest,
    manifest_dict,
    write_manifest,
)
from collector.simulator.stats import analytic_success, wilson_interval
from collector.simulator.writer import trace_file_name

__all__ = ["AUTO_JOBS_WORKFLOWS", "SimulationResult", "default_jobs", "p95", "run_simulation"]

AUTO_JOBS_WORKFLOWS = 2_000
"""From this many workflows on, ``simulate`` runs replicas in parallel unless told otherwise:
below it, starting the processes costs more than it saves."""


@dataclass(frozen=True, slots=True)
class SimulationResult:
    """What a run wrote and measured."""

    config: SimulationConfig
    out_dir: Path | None
    """Where the files went; None for a figures-only run."""
    manifest_path: Path | None
    files: list[dict[str, Any]]
    figures: dict[str, Any]
    faults: list[FaultEntry] = field(default_factory=list)
    waste_usd: dict[str, float] = field(default_factory=dict)
    """What the spend that bought nothing cost, by cause (``collector.simulator.waste``): the
    ground truth of the audit's waste figures. Not written to the manifest."""

    @property
    def expected_findings(self) -> dict[str, int]:
        """How many findings each rule must report on this run's traces."""
        counts: dict[str, int] = {}
        for e in self.faults:
            counts[e.rule] = counts.get(e.rule, 0) + 1
        return dict(sorted(counts.items()))


def p95(values: Iterable[float]) -> float:
    """The 95th percentile by linear interpolation (as DuckDB's ``quantile_cont``)."""
    data = sorted(values)
    if not data:
        return 0.0
    pos = 0.95 * (len(data) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def default_jobs(config: SimulationConfig) -> int:
    """Processes for ``config`` when the user names none: one per replica, up to the CPUs
    this process may run on, for runs of ``AUTO_JOBS_WORKFLOWS`` workflows or more."""
    if config.workflows < AUTO_JOBS_WORKFLOWS:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, config.files_per_agent))


def _prepare(out_dir: Path, config: SimulationConfig, *, force: bool) -> None:
    """Make ``out_dir`` ready; never delete anything but an earlier run's own files."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigurationError(f"--out {out_dir}: exists and is not a folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    ours = {MANIFEST_NAME}
    services = ("orchestrator", *config.pipeline)
    for replica in range(config.files_per_agent):
        for service in services:
            for gz in (False, True):
                ours.add(trace_file_name(service, replica, gzip_files=gz))
    manifest = out_dir / MANIFEST_NAME
    if manifest.exists():
        try:
            for entry in load_manifest(manifest).get("files", []):
                ours.add(str(entry.get("path", "")))
        except (OSError, ValueError, AttributeError):
            pass
    present = sorted(p.name for p in out_dir.iterdir())
    clash = [name for name in present if name in ours]
    if clash and not force:
        raise ConfigurationError(
            f"--out {out_dir}: already holds {', '.join(clash[:3])}"
            f"{' ...' if len(clash) > 3 else ''} from an earlier run; pass --force to replace "
            "them or choose another folder"
        )
    for name in clash:
        path = out_dir / name
        if path.is_file() and name and "/" not in name and os.sep not in name:
            path.unlink()


def run_simulation(
    config: SimulationConfig,
    out_dir: str | os.PathLike[str] | None,
    *,
    jobs: int = 1,
    force: bool = False,
) -> SimulationResult:
    """Run ``config`` into ``out_dir`` with up to ``jobs`` processes; returns the result.

    ``out_dir=None`` records no spans and writes nothing (the library still runs every
    handoff): the figures only, several times faster. Raises ``ConfigurationError`` if the
    folder holds an earlier run and ``force`` is false.
    """
    out = None if out_dir is None else Path(out_dir)
    if out is not None:
        _prepare(out, config, force=force)
    replicas = range(config.files_per_agent)
    if jobs > 1 and config.files_per_agent > 1:
        with ProcessPoolExecutor(max_workers=min(jobs, config.files_per_agent)) as pool:
            results = list(
                pool.map(run_replica, [config] * len(replicas), replicas, [out] * len(replicas))
            )
    else:
        results = [run_replica(config, r, out) for r in replicas]
    return _merge(config, out, results)


def _merge(
    config: SimulationConfig, out: Path | None, results: list[ReplicaResult]
) -> SimulationResult:
    entries: list[FaultEntry] = [e for r in results for e in r.faults]
    latencies: dict[str, list[float]] = {}
    for r in results:
        for receiver, values in r.latencies.items():
            latencies.setdefault(receiver, []).extend(values)
    budget_s = schema.DEFAULT_P95_BUDGET_S
    slow = config.pipeline[min(2, len(config.pipeline) - 1)]
    receiver_p95: dict[str, float] = {}
    for receiver in config.pipeline:
        value = p95(latencies.get(receiver, []))
        receiver_p95[receiver] = round(value * 1000, 3)
        if value > budget_s:
            cause = _p95_cause(
                receiver, slow if config.faults.get("slow-receiver") else None, entries
            )
            entries.append(
                FaultEntry(
                    rule="validation-p95-over-budget",
                    fault=cause,
                    trace_id=None,
                    task_id=None,
                    idempotency_key=None,
                    sender=None,
                    receiver=receiver,
                    value=round(value * 1000, 3),
                )
            )
    files: list[dict[str, Any]] = [
        {
            "path": f.path,
            "service": f.service,
            "spans": f.spans,
            "duplicate_spans": f.duplicate_spans,
            "lines": f.lines,
        }
        for r in results
        for f in r.files
    ]
    files.sort(key=lambda f: f["path"])
    figures = _figures(config, results, files, receiver_p95)
    document = manifest_dict(
        parameters=config.to_dict(), figures=figures, files=files, faults=entries
    )
    manifest_path = None if out is None else out / MANIFEST_NAME
    if manifest_path is not None:
        write_manifest(manifest_path, document)
    ordered = [FaultEntry(**e) for e in document["faults"]]
    return SimulationResult(
        config=config,
        out_dir=out,
        manifest_path=manifest_path,
        files=files,
        figures=figures,
        faults=ordered,
        waste_usd=_waste(results),
    )


def _waste(results: list[ReplicaResult]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in results:
        for cause, cost in r.ledger.by_cause().items():
            out[cause] = out.get(cause, 0.0) + cost
    return dict(sorted(out.items()))


def _p95_cause(receiver: str, slow: str | None, entries: list[FaultEntry]) -> str:
    """What pushed ``receiver`` over the p95 budget: the slow-receiver fault, injected late
    answers, or (when nothing was injected) its own latencies."""
    if receiver == slow:
        return "slow-receiver"
    injected = sorted(
        {e.fault for e in entries if e.rule == "slow-validation" and e.receiver == receiver}
        - {NATURAL}
    )
    return "+".join(injected) if injected else NATURAL


def _figures(
    config: SimulationConfig,
    results: list[ReplicaResult],
    files: list[dict[str, Any]],
    receiver_p95: dict[str, float],
) -> dict[str, Any]:
    workflows = sum(r.workflows for r in results)
    succeeded = sum(r.succeeded for r in results)
    handoffs = sum(r.handoffs for r in results)
    attempts = sum(r.attempts for r in results)
    agents: dict[str, dict[str, Any]] = {}
    for name in config.pipeline:
        tried = sum(r.agent_attempts.get(name, 0) for r in results)
        ok = sum(r.agent_successes.get(name, 0) for r in results)
        agents[name] = {
            "attempts": tried,
            "successes": ok,
            "reliability": round(ok / tried, 6) if tried else None,
            "validation_p95_ms": receiver_p95.get(name),
        }
    k = len(config.pipeline)
    lo, hi = wilson_interval(succeeded, workflows)
    analytic = {
        mode: round(
            analytic_success(
                mode=mode,
                reliability=config.reliability,
                agents=k,
                max_attempts=config.max_attempts,
            ),
            6,
        )
        for mode in schema.MODES
    }
    return {
        "workflows": workflows,
        "succeeded": succeeded,
        "success_rate": round(succeeded / workflows, 6) if workflows else None,
        "success_interval": [round(lo, 6), round(hi, 6)],
        "success_interval_confidence": 0.999,
        "analytic_success_rate": analytic[config.mode],
        "analytic_by_mode": analytic,
        "agents": agents,
        "handoffs": handoffs,
        "attempts": attempts,
        "retries_per_1000_workflows": round((attempts - handoffs) * 1000 / workflows, 3)
        if workflows
        else None,
        "full_chain_restarts": sum(r.restarts for r in results),
        "executions": sum(r.executions for r in results),
        "spans": sum(f["spans"] for f in files),
        "duplicate_spans": sum(f["duplicate_spans"] for f in files),
        "files": len(files),
        "services": len({f["service"] for f in files}),
        "input_tokens": sum(r.input_tokens for r in results),
        "output_tokens": sum(r.output_tokens for r in results),
        "cost_usd": round(sum(r.cost_usd for r in results), 6),
        "virtual_start_unix_ns": min(r.first_ns for r in results),
        "virtual_end_unix_ns": max(r.last_ns for r in results),
    }
