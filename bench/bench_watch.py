"""What ``handoffscope watch`` costs: backlog throughput, the price of one poll, alert latency.

    .venv/bin/python bench/bench_watch.py [--workflows N] [--repeats R] [--appends A] [--json]

* **Traces**: ``handoffscope simulate`` with ``N`` five-agent workflows (default 2,000, about
  50,000 spans in 12 files), every fault at 2%, so there is something to alert on.
* **Backlog**: ``watch --once`` over the whole folder (follow, load, slow-validation rule,
  rolling p95, dedupe, state file), against the auditor's ``load_traces`` of the same files
  (the parse into DuckDB that any reader pays) in the same run: the ratio says what watch adds
  on top of parsing.
* **One poll**: with that backlog loaded (the spans of the last ``--horizon`` kept), the cost
  of a poll that finds one new handoff (7 spans) and of a poll that finds nothing. Every
  poll with new data re-runs the rules over the spans kept, so this grows with traffic.
* **Alert latency**: a real ``handoffscope watch --poll-interval 0.5s --jsonl`` process; a
  slow validation is appended ``A`` times; the time from the append to the alert's line in
  the JSON-lines file.

Figures are medians of ``R`` repeats (latency: of ``A`` appends).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from auditor import load_traces  # noqa: E402
from auditor.watch import StreamSink, Watcher, WatchSettings  # noqa: E402
from auditor.watch.watcher import RunSummary  # noqa: E402
from tests.support.watch import otlp_line, validate_span  # noqa: E402

HANDOFFSCOPE = str(Path(sys.executable).with_name("handoffscope"))


def simulate(folder: Path, workflows: int) -> None:
    subprocess.run(
        [
            HANDOFFSCOPE,
            "simulate",
            "--out",
            str(folder),
            "-n",
            str(workflows),
            "--seed",
            "1",
            "--fault",
            "all=0.02",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def time_load(folder: Path) -> tuple[float, int]:
    started = time.perf_counter()
    traces = load_traces(folder)
    took = time.perf_counter() - started
    count = traces.span_count
    traces.con.close()
    return took, count


def time_watch(folder: Path) -> tuple[float, RunSummary]:
    state = folder / ".bench-state.json"
    state.unlink(missing_ok=True)
    started = time.perf_counter()
    watcher = Watcher(
        folder, settings=WatchSettings(), sinks=[StreamSink(io.StringIO())], state_path=state
    )
    summary = watcher.run(once=True)
    return time.perf_counter() - started, summary


def time_polls(folder: Path, repeats: int) -> tuple[float, float, int]:
    """Median seconds of a poll with one new handoff, and of an idle poll."""
    state = folder / ".bench-state.json"
    state.unlink(missing_ok=True)
    watcher = Watcher(
        folder, settings=WatchSettings(), sinks=[StreamSink(io.StringIO())], state_path=state
    )
    summary = RunSummary()
    while watcher.poll(summary):
        pass
    kept = watcher.engine.con.execute("SELECT count(*) FROM spans").fetchone()[0]
    end_s = watcher.engine.watermark_ns / 1e9
    busy, idle = [], []
    extra = folder / "extra.jsonl"
    for i in range(repeats):
        spans = [
            validate_span(trace=10_000 + i * 7 + k, latency_s=0.1, end_s=end_s + i, span=k + 1)
            for k in range(7)
        ]
        with extra.open("a") as f:
            f.write(otlp_line(spans))
        started = time.perf_counter()
        watcher.poll(summary)
        busy.append(time.perf_counter() - started)
        started = time.perf_counter()
        watcher.poll(summary)
        idle.append(time.perf_counter() - started)
    watcher.close()
    extra.unlink()
    return statistics.median(busy), statistics.median(idle), int(kept)


def alert_latency(appends: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        out = folder / "out" / "alerts.jsonl"
        proc = subprocess.Popen(
            [HANDOFFSCOPE, "watch", str(folder), "--poll-interval", "0.5s", "--jsonl", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            proc.stderr.readline()  # type: ignore[union-attr]  # the banner: polling starts
            took = []
            for i in range(appends):
                line = otlp_line([validate_span(trace=i + 1, latency_s=2.5, end_s=1.7e9 + i)])
                started = time.perf_counter()
                with (folder / "agent.jsonl").open("a") as f:
                    f.write(line)
                while not out.exists() or len(out.read_text().splitlines()) <= i:
                    time.sleep(0.005)
                took.append(time.perf_counter() - started)
                time.sleep(0.1)
            return took
        finally:
            proc.terminate()
            proc.wait(timeout=15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--appends", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "traces"
        simulate(folder, args.workflows)
        loads = [time_load(folder) for _ in range(args.repeats)]
        watches = [time_watch(folder) for _ in range(args.repeats)]
        busy, idle, kept = time_polls(folder, max(5, args.repeats * 5))
    spans = loads[0][1]
    load_s = statistics.median(t for t, _ in loads)
    watch_s = statistics.median(t for t, _ in watches)
    latency = alert_latency(args.appends)
    figures = {
        "spans": spans,
        "load_traces_s": round(load_s, 3),
        "watch_once_s": round(watch_s, 3),
        "watch_over_load": round(watch_s / load_s, 2),
        "watch_spans_per_s": round(spans / watch_s),
        "alerts": watches[0][1].alerts,
        "spans_kept": kept,
        "poll_new_handoff_ms": round(busy * 1000, 1),
        "poll_idle_ms": round(idle * 1000, 2),
        "alert_latency_median_s": round(statistics.median(latency), 3),
        "alert_latency_max_s": round(max(latency), 3),
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for name, value in figures.items():
        print(f"{name:24} {value}")


if __name__ == "__main__":
    main()
