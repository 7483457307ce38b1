"""How fast ``handoffscope simulate`` is, against the SDK and exporter it writes through.

    .venv/bin/python bench/bench_simulator.py [--workflows N] [--jobs J] [--baseline-spans S]
                                              [--json]

Measures, in one run:

* ``simulate``: N workflows of the 5-agent handshake pipeline written to trace files (wall
  and CPU time, spans per second), with one process and with ``J``;
* ``dry_run``: the same workflows with nothing recorded (the library's own work only);
* ``baseline``: the first ``S`` spans of that run replayed through the bare SDK (same names,
  attributes, events and timestamps) into the same official JSON-lines file exporter: what
  the spans alone cost to create and write, whoever makes them;
* the ratio of the simulator's cost per span to the baseline's, and the virtual time
  simulated per second of real time.

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
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

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


class _Drop(SpanExporter):
    """An exporter that throws batches away: the cost of making the spans alone."""

    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _baseline(spans: list[dict[str, Any]], *, write: bool = True) -> tuple[float, float]:
    """Replay ``spans`` through a bare SDK into the official file exporter; (wall, CPU) s.

    With ``write=False`` the batches are dropped instead of encoded and written.
    """
    exporter = FileSpanExporter(stream=io.StringIO()) if write else _Drop()
    provider = TracerProvider(
        resource=Resource({"service.name": "baseline"}), shutdown_on_exit=False
    )
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_queue_size=len(spans) + 1, max_export_batch_size=512)
    )
    tracer = provider.get_tracer("baseline")
    started, cpu = time.perf_counter(), time.process_time()
    for s in spans:
        span = tracer.start_span(s["name"], attributes=s["attributes"], start_time=s["start"])
        for name, at, attrs in s["events"]:
            span.add_event(name, attrs, timestamp=at)
        span.end(end_time=s["end"])
    provider.shutdown()
    return time.perf_counter() - started, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--baseline-spans", type=int, default=20_000)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)

    config = SimulationConfig(workflows=args.workflows, seed=1)
    figures: dict[str, Any] = {
        "workflows": args.workflows,
        "agents": len(config.pipeline),
        "cpus": os.cpu_count(),
        "jobs": args.jobs,
    }
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for jobs in sorted({1, args.jobs}):
            out = Path(tmp) / f"jobs{jobs}"
            result, wall, cpu = _timed(lambda o=out, j=jobs: run_simulation(config, o, jobs=j))
            runs[jobs] = (result, wall, cpu)
            figures[f"simulate_jobs{jobs}_wall_s"] = round(wall, 2)
            figures[f"simulate_jobs{jobs}_cpu_s"] = round(cpu, 2)
        result, wall1, cpu1 = runs[1]
        spans = result.figures["spans"]
        figures["spans"] = spans
        figures["spans_per_s_jobs1"] = round(spans / wall1)
        figures["cpu_us_per_span"] = round(cpu1 / spans * 1e6, 1)
        virtual_s = (
            result.figures["virtual_end_unix_ns"] - result.figures["virtual_start_unix_ns"]
        ) / 1e9
        figures["virtual_s_simulated"] = round(virtual_s)
        figures["virtual_s_per_real_s"] = round(virtual_s / wall1, 1)
        _, dry_wall, dry_cpu = _timed(lambda: run_simulation(config, None))
        figures["dry_run_wall_s"] = round(dry_wall, 2)
        figures["dry_run_cpu_us_per_span"] = round(dry_cpu / spans * 1e6, 1)
        sample = _sample_spans(Path(tmp) / "jobs1", args.baseline_spans)
        _, base_cpu = _baseline(sample)
        _, create_cpu = _baseline(sample, write=False)
        per_span_base = base_cpu / len(sample)
        figures["baseline_spans"] = len(sample)
        figures["baseline_cpu_us_per_span"] = round(per_span_base * 1e6, 1)
        figures["baseline_create_only_cpu_us_per_span"] = round(create_cpu / len(sample) * 1e6, 1)
        # CPU time, not wall time: other work on the machine cancels out of the ratio.
        figures["ratio_simulate_to_baseline_cpu"] = round(cpu1 / spans / per_span_base, 2)
        figures["share_of_cpu_in_sdk_and_exporter"] = round(per_span_base * spans / cpu1, 2)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        width = max(len(k) for k in figures)
        for key, value in figures.items():
            print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
