"""Benchmark of the dashboard's pages inside ClickHouse (embedded, chdb) against the same
pages over DuckDB, for the same spans, in one run.

    python bench/bench_dashboard_clickhouse.py --file /tmp/i19bench/200k.jsonl

One process. The trace file is loaded by the auditor's reader and made ready as the
dashboard makes a trace set ready (``dashboard.data.scope.ready``); the same spans go into a
chdb data directory in the Collector exporter's ``otel_traces`` table (timed apart: a
Collector has already written the table), which the dashboard opens as it opens a
``chdb://`` URL (``dashboard.clickhouse.open_source``: derived tables computed inside
ClickHouse). Then, alternating between the engines, each page's data functions (what the
page calls, without Streamlit's cache), unfiltered and under an agent filter. Prints one
JSON object; each figure is the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def _pages(data: Any) -> dict[str, list[tuple[Callable[..., Any], dict[str, Any]]]]:
    minute = {"width": timedelta(minutes=5)}
    return {
        "overview": [(data.overview, {}), (data.activity_over_time, minute)],
        "spend": [
            (data.agent_spend, {}),
            (data.workflow_spend, {}),
            (data.voided_spend, {}),
            (data.overview, {}),
            (data.model_spend, {}),
            (data.edge_spend, {}),
        ],
        "reliability": [
            (data.overview, {}),
            (data.compounding, {}),
            (data.agent_reliability, {}),
            (data.edge_reliability, {}),
        ],
        "latency": [
            (data.latency_percentiles, {}),
            (data.latency_by, {}),
            (data.latency_histogram, {"bin_ms": 50.0, "cap_ms": 4000.0}),
            (data.latency_over_time, minute),
            (data.latency_by, {"by": "edge"}),
        ],
    }


def _timed(function: Callable[[], Any]) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def _page(con: Any, calls: list[tuple[Callable[..., Any], dict[str, Any]]], filters: Any) -> float:
    start = time.perf_counter()
    for function, options in calls:
        function(con, filters=filters, **options)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, default=Path("/tmp/i19bench/200k.jsonl"))
    parser.add_argument("--repeat", type=int, default=2, help="runs per engine, alternating")
    args = parser.parse_args(argv)

    from auditor import load_traces
    from auditor.clickhouse import ChdbEngine, create_table, fill
    from dashboard import data
    from dashboard.clickhouse import ClickHouseSpec, open_source
    from dashboard.data.scope import ready
    from dashboard.selection import Filters

    out: dict[str, Any] = {"file": str(args.file), "python": platform.python_version()}
    start = time.perf_counter()
    traces = load_traces(args.file)
    out["duckdb_load_s"] = round(time.perf_counter() - start, 2)
    out["duckdb_ready_s"] = round(_timed(lambda: ready(traces)), 2)
    out["spans"] = traces.span_count

    folder = Path(tempfile.mkdtemp(prefix="handoffscope-bench-chdb-"))
    try:
        engine = ChdbEngine(str(folder))
        out["chdb_fill_s"] = round(
            _timed(lambda: fill(engine, create_table(engine, "otel", "otel_traces"), traces)), 2
        )
        start = time.perf_counter()
        source = open_source(ClickHouseSpec(url=f"chdb://{folder}"))
        out["clickhouse_open_s"] = round(time.perf_counter() - start, 2)

        agent = data.bounds(traces.con).agents[0]
        engines = {"duckdb": traces.con, "clickhouse": source}
        pages = _pages(data)
        cases = {"all": Filters(), f"agent={agent}": Filters(agents=(agent,))}
        best: dict[str, float] = {}
        for _ in range(args.repeat):
            for case, filters in cases.items():
                for page, calls in pages.items():
                    for name, con in engines.items():
                        seconds = _page(con, calls, filters)
                        key = f"{page}/{case}/{name}"
                        best[key] = min(best.get(key, seconds), seconds)
            for name, con in engines.items():
                key = f"findings/all/{name}"
                seconds = _page(con, [(data.findings, {})], Filters())
                best[key] = min(best.get(key, seconds), seconds)
        out["page_s"] = {k: round(v, 3) for k, v in sorted(best.items())}
        out["ratio_clickhouse_over_duckdb"] = {
            k.removesuffix("/duckdb"): round(best[k.replace("/duckdb", "/clickhouse")] / v, 1)
            for k, v in sorted(best.items())
            if k.endswith("/duckdb") and v > 0
        }
        source.close()
        engine.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
