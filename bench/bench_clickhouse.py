"""Benchmark of the audit inside ClickHouse (embedded, chdb) against the DuckDB audit of the
same spans, in one run.

    python bench/bench_clickhouse.py --spans 1000000      # generates the file if missing

One process: the trace file is loaded once by the auditor's reader (``load_traces``); the
spans go into a chdb data directory in the Collector exporter's ``otel_traces`` table; then,
alternating, the DuckDB audit of the loaded spans (``audit``: 18 rules and every figure)
and the same audit inside ClickHouse (``audit_engine``: the same rules and figures,
transpiled, over the exporter's table). Loading is timed apart: a Collector has already
written the table a ClickHouse audit reads. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/handoffscope-bench"))
    parser.add_argument("--repeat", type=int, default=2, help="audits per engine, alternating")
    args = parser.parse_args(argv)

    from auditor import audit, load_traces
    from auditor.clickhouse import ChdbEngine, audit_engine, create_table, fill

    path = args.dir / f"{args.spans}.jsonl"
    if not path.exists():
        args.dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                str(HERE / "gen_traces.py"),
                "--spans",
                str(args.spans),
                "--out",
                str(path),
            ],
            check=True,
        )
    started = time.perf_counter()
    traces = load_traces(str(path))
    duck_load = time.perf_counter() - started

    folder = tempfile.mkdtemp(prefix="handoffscope-chdb-")
    try:
        engine = ChdbEngine(folder)
        table = create_table(engine, "otel", "otel_traces")
        started = time.perf_counter()
        rows = fill(engine, table, traces)
        ch_fill = time.perf_counter() - started
        duck_s: list[float] = []
        ch_s: list[float] = []
        duck = ch = None
        for _ in range(args.repeat):
            started = time.perf_counter()
            duck = audit(traces)
            duck_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            ch = audit_engine(engine, table)
            ch_s.append(time.perf_counter() - started)
        assert duck is not None and ch is not None
        same = [f.to_dict() for f in duck.findings] == [f.to_dict() for f in ch.findings]
        engine.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(
        json.dumps(
            {
                "spans": rows,
                "findings": len(duck.findings),
                "same_findings": same,
                "duckdb_load_s": round(duck_load, 1),
                "chdb_fill_s": round(ch_fill, 1),
                "duckdb_audit_s": [round(s, 1) for s in duck_s],
                "chdb_audit_s": [round(s, 1) for s in ch_s],
                "chdb_over_duckdb": round(min(ch_s) / min(duck_s), 2),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, load "
                + " ".join(f"{x:.1f}" for x in os.getloadavg()),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
