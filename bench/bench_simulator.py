"""How fast ``handoffscope simulate`` is, against the SDK and exporters it writes through.

    .venv/bin/python bench/bench_simulator.py [--workflows N] [--jobs J] [--repeat R]
                                              [--baseline-spans S] [--json]

Measures, in one run (each figure the best of ``R`` repeats, the variants interleaved so
that a change in the machine's load hits them alike):

* ``simulate``: N workflows of the 5-agent handshake pipeline written to trace files (wall
  and CPU time, spans per second), with one process and with ``J``;
* ``before``: the same run as the simulator wrote it before its own exporter: through the
  official ``opentelemetry-exporter-otlp-json-file`` exporter, with Python's default garbage
  collector thresholds; its files must be byte for byte the same as ``simulate``'s;
* ``default_gc``: the current exporter with the default collector thresholds, to show what
  each of the two changes is worth;
* ``dry_run``: the same workflows with nothing recorded (the library's own work only);
* ``baseline``: the first ``S`` spans of that run created again with the bare SDK (same
  names, attributes, events and timestamps), then written in batches of 512 by the official
  exporter and by ``collector.otlp_file.OtlpJsonLinesExporter``: what the spans alone cost
  to create and to write, whoever makes them.

The ratios are taken within this run, so the machine's speed cancels out; the absolute
times depend on the machine (and on whatever else runs on it).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.exporter.otlp.json.file import FileSpanExporter  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

import collector.simulator.engine as engine  # noqa: E402
import collector.simulator.writer as writer  # noqa: E402
from collector.otlp_file import OtlpJsonLinesExporter  # noqa: E402
from collector.simulator import SimulationConfig, run_simulation  # noqa: E402


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime + children.ru_utime + children.ru_stime


def _timed(fn: Any) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), _cpu()
    out = fn()
    return out, time.perf_counter() - wall, _cpu() - cpu


def _value(v: dict[str, Any]) -> Any:
    for key, cast in (
        ("stringValue", str),
        ("intValue", int),
        ("doubleValue", float),
        ("boolValue", bool),
    ):
        if key in v:
            return cast(v[key])
    if "arrayValue" in v:
        return [_value(x) for x in v["arrayValue"].get("values", [])]
    return None


def _sample_spans(folder: Path, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` spans written, as plain data to replay."""
    out: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl*")):
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode()
        for line in text.splitlines():
            for rs in json.loads(line)["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    for s in ss["spans"]:
                        out.append(
                            {
                                "name": s["name"],
                                "start": int(s["startTimeUnixNano"]),
                                "end": int(s["endTimeUnixNano"]),
                                "attributes": {
                                    a["key"]: _value(a["value"]) for a in s.get("attributes", [])
                                },
                                "events": [
                                    (
                                        e["name"],
                                        int(e["timeUnixNano"]),
                                        {
                                            a["key"]: _value(a["value"])
                                            for a in e.get("attributes", [])
                                        },
                                    )
                                    for e in s.get("events", [])
                                ],
                            }
                        )
                        if len(out) >= limit:
                            return out
    return out


class _Keep(SpanExporter):
    """An exporter that keeps every span: creating them costs the same, writing is apart."""

    def __init__(self) -> None:
        self.spans: list[Any] = []

    def export(self, spans: Any) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def _create(spans: list[dict[str, Any]]) -> tuple[list[Any], float]:
    """Replay ``spans`` through a bare SDK; the finished spans and the CPU seconds it took."""
    kept = _Keep()
    provider = TracerProvider(
        resource=Resource({"service.name": "baseline"}), shutdown_on_exit=False
    )
    provider.add_span_processor(SimpleSpanProcessor(kept))
    tracer = provider.get_tracer("baseline")
    cpu = time.process_time()
    for s in spans:
        span = tracer.start_span(s["name"], attributes=s["attributes"], start_time=s["start"])
        for name, at, attrs in s["events"]:
            span.add_event(name, attrs, timestamp=at)
        span.end(end_time=s["end"])
    cpu = time.process_time() - cpu
    provider.shutdown()
    return kept.spans, cpu


def _write(spans: list[Any], exporter: Any) -> float:
    """CPU seconds ``exporter`` takes to write ``spans`` in batches of 512 (the SDK default)."""
    cpu = time.process_time()
    for at in range(0, len(spans), 512):
        exporter.export(spans[at : at + 512])
    return time.process_time() - cpu


_VARIANTS = {
    # name: (exporter class, young-generation collection threshold; 0 keeps the default)
    "simulate": (OtlpJsonLinesExporter, engine.GC_YOUNG_THRESHOLD),
    "default_gc": (OtlpJsonLinesExporter, 0),
    "before": (FileSpanExporter, 0),
}


def _simulate(config: SimulationConfig, out: Path, *, variant: str, jobs: int) -> Any:
    exporter, threshold = _VARIANTS[variant]
    saved = writer.OtlpJsonLinesExporter, engine.GC_YOUNG_THRESHOLD
    writer.OtlpJsonLinesExporter, engine.GC_YOUNG_THRESHOLD = exporter, threshold  # type: ignore[misc]
    try:
        return _timed(lambda: run_simulation(config, out, jobs=jobs, force=True))
    finally:
        writer.OtlpJsonLinesExporter, engine.GC_YOUNG_THRESHOLD = saved  # type: ignore[misc]


def _same_files(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.glob("*.jsonl*"))
    return names == sorted(p.name for p in b.glob("*.jsonl*")) and all(
        (a / n).read_bytes() == (b / n).read_bytes() for n in names
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=1, help="best of this many runs")
    parser.add_argument("--baseline-spans", type=int, default=20_000)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)

    config = SimulationConfig(workflows=args.workflows, seed=1)
    figures: dict[str, Any] = {
        "workflows": args.workflows,
        "agents": len(config.pipeline),
        "cpus": os.cpu_count(),
        "jobs": args.jobs,
        "repeat": args.repeat,
        "load_average_before": round(os.getloadavg()[0], 2),
    }
    runs: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        plan = [("simulate", 1), ("default_gc", 1), ("before", 1)]
        if args.jobs > 1:
            plan.append(("simulate", args.jobs))
        result = None
        for _ in range(args.repeat):
            for variant, jobs in plan:
                out = Path(tmp) / f"{variant}-jobs{jobs}"
                res, wall, cpu = _simulate(config, out, variant=variant, jobs=jobs)
                runs.setdefault(f"{variant}_jobs{jobs}", []).append((wall, cpu))
                if variant == "simulate" and jobs == 1:
                    result = res
            _, dry_wall, dry_cpu = _timed(lambda: run_simulation(config, None))
            runs.setdefault("dry_run", []).append((dry_wall, dry_cpu))
        assert result is not None
        spans = result.figures["spans"]
        figures["spans"] = spans
        best = {k: (min(w for w, _ in v), min(c for _, c in v)) for k, v in runs.items()}
        for key, (wall, cpu) in best.items():
            figures[f"{key}_wall_s"] = round(wall, 2)
            figures[f"{key}_cpu_s"] = round(cpu, 2)
            figures[f"{key}_cpu_us_per_span"] = round(cpu / spans * 1e6, 1)
        figures["load_average_after"] = round(os.getloadavg()[0], 2)
        wall1, cpu1 = best["simulate_jobs1"]
        figures["spans_per_s_jobs1"] = round(spans / wall1)
        figures["speedup_cpu_before_to_now"] = round(best["before_jobs1"][1] / cpu1, 2)
        figures["speedup_cpu_default_gc_to_now"] = round(best["default_gc_jobs1"][1] / cpu1, 2)
        figures["same_bytes_as_before"] = _same_files(
            Path(tmp) / "simulate-jobs1", Path(tmp) / "before-jobs1"
        )
        virtual_s = (
            result.figures["virtual_end_unix_ns"] - result.figures["virtual_start_unix_ns"]
        ) / 1e9
        figures["virtual_s_simulated"] = round(virtual_s)
        figures["virtual_s_per_real_s"] = round(virtual_s / wall1, 1)
        sample = _sample_spans(Path(tmp) / "simulate-jobs1", args.baseline_spans)
        costs: dict[str, list[float]] = {}
        for _ in range(args.repeat):
            made, cpu = _create(sample)
            costs.setdefault("create", []).append(cpu)
            for name, make in (
                ("official_exporter", lambda: FileSpanExporter(stream=io.StringIO())),
                ("otlp_file_exporter", lambda: OtlpJsonLinesExporter(stream=io.StringIO())),
            ):
                costs.setdefault(name, []).append(_write(made, make()))
        per_span = {k: min(v) / len(sample) for k, v in costs.items()}
        figures["baseline_spans"] = len(sample)
        for name, value in per_span.items():
            figures[f"baseline_{name}_cpu_us_per_span"] = round(value * 1e6, 1)
        figures["speedup_exporter_official_to_otlp_file"] = round(
            per_span["official_exporter"] / per_span["otlp_file_exporter"], 2
        )
        # CPU time, not wall time: other work on the machine cancels out of the ratio.
        figures["share_of_cpu_in_sdk_and_exporter"] = round(
            (per_span["create"] + per_span["otlp_file_exporter"]) * spans / cpu1, 2
        )
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        width = max(len(k) for k in figures)
        for key, value in figures.items():
            print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
