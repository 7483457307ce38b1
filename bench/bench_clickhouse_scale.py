"""Benchmark of the audit inside ClickHouse (embedded, chdb) at ten million spans and more,
under a memory cap: time, CPU and the peak resident memory of the auditing process.

    python bench/bench_clickhouse_scale.py --copies 10 --max-memory-gb 14
    python bench/bench_clickhouse_scale.py --copies 10 --max-memory-gb 14 --ddl

The spans of the generated million-span file (``bench/gen_traces.py``, generated when
missing) are loaded once by the auditor's reader and written into the exporter's
``otel_traces`` table of a chdb data directory, then copied inside ClickHouse ``--copies``
times, each copy with its own trace, span, idempotency and workflow ids (the first two hex
digits of the generator's copy number: every copy is a distinct set of workflows that breaks
the rules the same way). With ``--ddl`` the table has the stored columns of ``handoffscope
clickhouse ddl``, computed as the copies arrive.

Each stage runs in a process of its own, so the audit's peak memory is its own: the fill
(DuckDB's load of the file, then the copies), an audit of the first copy alone, and the audit
of every copy with ``max_memory_usage`` set to the cap (each query's memory; the temporary
tables the audit keeps count in the process's resident memory, which is reported). The
findings of the whole must be ``--copies`` times those of one copy. Prints one JSON object.
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

_NAMES = r"(^|\")(idem-|wf-)[0-9a-f]{2}"


def _recopied(column: str, prefix: str) -> str:
    """``column`` (an id, or an array of ids) with its first two hex digits as ``prefix``."""
    return f"if({column} = '', '', concat('{prefix}', substring({column}, 3)))"


def _renamed(attributes: str, prefix: str) -> str:
    """An attribute map whose idempotency and workflow ids carry copy ``prefix``."""
    swap = f"replaceRegexpAll(v, '{_NAMES}', '\\\\1\\\\2{prefix}')"
    return f"mapApply((k, v) -> (k, {swap}), {attributes})"


def _copy_select(source: str, copy: int) -> str:
    from auditor.clickhouse.loader import OTEL_COLUMNS

    prefix = f"{copy:02x}"
    swap = {
        "TraceId": _recopied("TraceId", prefix),
        "SpanId": _recopied("SpanId", prefix),
        "ParentSpanId": _recopied("ParentSpanId", prefix),
        "SpanAttributes": _renamed("SpanAttributes", prefix),
        "Events.Attributes": f"arrayMap(m -> {_renamed('m', prefix)}, `Events.Attributes`)",
        "Links.TraceId": f"arrayMap(x -> {_recopied('x', prefix)}, `Links.TraceId`)",
        "Links.SpanId": f"arrayMap(x -> {_recopied('x', prefix)}, `Links.SpanId`)",
    }
    return ", ".join(f"{swap.get(c, f'`{c}`')} AS `{c}`" for c in OTEL_COLUMNS)


def _fill(folder: str, path: Path, copies: int, ddl: bool) -> dict[str, object]:
    from auditor import load_traces
    from auditor.clickhouse import ChdbEngine, create_table, fill
    from auditor.clickhouse.loader import OTEL_COLUMNS
    from auditor.clickhouse.schema import ddl as ddl_text
    from auditor.clickhouse.schema import statements

    started = time.perf_counter()
    traces = load_traces(str(path))
    engine = ChdbEngine(folder)
    base = create_table(engine, "otel", "one_copy")
    fill(engine, base, traces)
    del traces
    table = create_table(engine, "otel", "otel_traces")
    if ddl:
        for statement in statements(ddl_text(table)):
            engine.command(statement)
    one = create_table(engine, "otel", "first_copy")
    if ddl:
        for statement in statements(ddl_text(one)):
            engine.command(statement)
    columns = ", ".join(f"`{c}`" for c in OTEL_COLUMNS)
    engine.command(f"INSERT INTO {one} ({columns}) SELECT {columns} FROM {base}")
    for copy in range(copies):
        engine.command(
            f"INSERT INTO {table} ({columns}) SELECT {_copy_select(base, copy)} FROM {base}"
        )
    engine.command(f"DROP TABLE {base}")
    _, rows = engine.query(f"SELECT count() FROM {table}")
    engine.close()
    return {"rows": int(rows[0][0]), "fill_s": round(time.perf_counter() - started, 1)}


def _audit(folder: str, table: str, max_memory_gb: float) -> dict[str, object]:
    from auditor.clickhouse import ChdbEngine, audit_engine

    engine = ChdbEngine(folder)
    engine.command(f"SET max_memory_usage = {int(max_memory_gb * 1024**3)}")
    started, cpu = time.perf_counter(), time.process_time()
    result = audit_engine(engine, f"otel.{table}")
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    engine.close()
    return {
        "spans": result.figures.summary["spans"],
        "findings": len(result.findings),
        "audit_s": round(wall, 1),
        "audit_cpu_s": round(cpu, 1),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 2),
    }


def _stage(*args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, __file__, *args], check=True, stdout=subprocess.PIPE, text=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=1_000_000, help="spans of one copy")
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/handoffscope-bench"))
    parser.add_argument("--max-memory-gb", type=float, default=14.0)
    parser.add_argument("--ddl", action="store_true", help="the table with the stored columns")
    parser.add_argument("--stage", choices=("fill", "audit"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--table", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not 1 <= args.copies <= 256:
        parser.error("--copies takes 1 to 256 (a copy is told apart by two hex digits)")

    path = args.dir / f"{args.spans}.jsonl"
    if args.stage == "fill":
        print(json.dumps(_fill(args.folder, path, args.copies, args.ddl)))
        return 0
    if args.stage == "audit":
        print(json.dumps(_audit(args.folder, args.table, args.max_memory_gb)))
        return 0
    if not path.exists():
        args.dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, str(HERE / "gen_traces.py"), "--spans", str(args.spans)]
            + ["--out", str(path)],
            check=True,
        )
    folder = tempfile.mkdtemp(prefix="handoffscope-chdb-")
    common = ["--spans", str(args.spans), "--dir", str(args.dir), "--folder", folder]
    common += ["--max-memory-gb", str(args.max_memory_gb)]
    try:
        filled = _stage(
            "--stage", "fill", "--copies", str(args.copies), *common, *(["--ddl"] * args.ddl)
        )
        one = _stage("--stage", "audit", "--table", "first_copy", *common)
        whole = _stage("--stage", "audit", "--table", "otel_traces", *common)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(
        json.dumps(
            {
                "copies": args.copies,
                "ddl": args.ddl,
                "rows": filled["rows"],
                "fill_s": filled["fill_s"],
                "one_copy": one,
                "all_copies": whole,
                "findings_scale": round(int(whole["findings"]) / max(int(one["findings"]), 1), 3),
                "max_memory_gb": args.max_memory_gb,
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, load "
                + " ".join(f"{x:.1f}" for x in os.getloadavg()),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
