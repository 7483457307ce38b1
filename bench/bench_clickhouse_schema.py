"""Benchmark of the audit inside ClickHouse (embedded, chdb) on the exporter's plain table and
on the table with the stored columns of ``handoffscope clickhouse ddl``, against the DuckDB
audit of the same spans, in one run.

    python bench/bench_clickhouse_schema.py --spans 1000000   # generates the file if missing
    python bench/bench_clickhouse_schema.py --spans 1000000 --resent 0.05

One process: the trace file is loaded once by the auditor's reader (``load_traces``); the
spans go into two tables of one chdb data directory, the exporter's ``otel_traces`` as the
Collector creates it, and the same table with the DDL run before the spans arrived. With
``--resent F`` a fraction F of the spans is sent a second time (a later part of the file, and
a later insert into each table), as an at-least-once pipeline delivers them. Then,
alternating, the DuckDB audit of the loaded spans (``audit``: every rule and figure) and the
same audit inside ClickHouse on each table (``audit_engine``). Loading is timed apart: a
Collector has already written the table a ClickHouse audit reads. Prints one JSON object,
with the peak resident memory of the process.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))


def _resent(path: Path, fraction: float) -> Path:
    """A file of the first ``fraction`` of ``path``'s lines: the spans sent again."""
    out = path.with_name(f"{path.stem}.resent-{fraction}.jsonl")
    if not out.exists():
        with path.open("rb") as f:
            lines = f.readlines()
        with out.open("wb") as f:
            f.writelines(lines[: int(len(lines) * fraction)])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/handoffscope-bench"))
    parser.add_argument("--repeat", type=int, default=3, help="audits per engine, alternating")
    parser.add_argument(
        "--resent", type=float, default=0.0, help="fraction of the spans sent twice"
    )
    parser.add_argument(
        "--skip-plain", action="store_true", help="audit only the table with the DDL"
    )
    args = parser.parse_args(argv)

    from auditor import audit, load_traces
    from auditor.clickhouse import ChdbEngine, audit_engine, create_table, fill
    from auditor.clickhouse.schema import ddl, statements

    path = args.dir / f"{args.spans}.jsonl"
    if not path.exists():
        args.dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, str(HERE / "gen_traces.py"), "--spans", str(args.spans)]
            + ["--out", str(path)],
            check=True,
        )
    files = [str(path)] + ([str(_resent(path, args.resent))] if args.resent else [])
    started = time.perf_counter()
    traces = load_traces(files)
    duck_load = time.perf_counter() - started
    again = load_traces(files[1]) if args.resent else None

    folder = tempfile.mkdtemp(prefix="handoffscope-chdb-")
    try:
        engine = ChdbEngine(folder)
        tables = {}
        fill_s = {}
        for name in ("ddl",) if args.skip_plain else ("plain", "ddl"):
            table = create_table(engine, "otel", f"otel_traces_{name}")
            if name == "ddl":
                for statement in statements(ddl(table)):
                    engine.command(statement)
            started = time.perf_counter()
            fill(engine, table, traces)
            if again is not None:
                fill(engine, table, again)
            fill_s[name] = round(time.perf_counter() - started, 1)
            tables[name] = table
        del again
        duck_s: list[float] = []
        duck_cpu: list[float] = []
        ch_s: dict[str, list[float]] = {name: [] for name in tables}
        ch_cpu: dict[str, list[float]] = {name: [] for name in tables}
        duck = None
        same: dict[str, bool] = {}
        copies: dict[str, int] = {}
        for _ in range(args.repeat):
            started, cpu = time.perf_counter(), time.process_time()
            duck = audit(traces)
            duck_s.append(time.perf_counter() - started)
            duck_cpu.append(time.process_time() - cpu)
            for name, table in tables.items():
                started, cpu = time.perf_counter(), time.process_time()
                ch = audit_engine(engine, table)
                ch_s[name].append(time.perf_counter() - started)
                ch_cpu[name].append(time.process_time() - cpu)
                same[name] = [f.to_dict() for f in duck.findings] == [
                    f.to_dict() for f in ch.findings
                ]
                copies[name] = ch.figures.summary["duplicate_spans"]
        assert duck is not None
        engine.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(
        json.dumps(
            {
                "spans": duck.figures.summary["spans"],
                "resent": args.resent,
                "duplicates_dropped": {"duckdb": traces.duplicate_count, **copies},
                "findings": len(duck.findings),
                "same_findings": same,
                "duckdb_load_s": round(duck_load, 1),
                "chdb_fill_s": fill_s,
                "duckdb_audit_s": [round(s, 1) for s in duck_s],
                "chdb_audit_s": {n: [round(s, 1) for s in v] for n, v in ch_s.items()},
                "chdb_over_duckdb": {n: round(min(v) / min(duck_s), 2) for n, v in ch_s.items()},
                "duckdb_audit_cpu_s": [round(s, 1) for s in duck_cpu],
                "chdb_audit_cpu_s": {n: [round(s, 1) for s in v] for n, v in ch_cpu.items()},
                "chdb_over_duckdb_cpu": {
                    n: round(min(v) / min(duck_cpu), 2) for n, v in ch_cpu.items()
                },
                "peak_rss_gb": round(
                    resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 1
                ),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, load "
                + " ".join(f"{x:.1f}" for x in os.getloadavg()),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
