"""Where one audit inside ClickHouse (embedded, chdb) spends its time, statement by statement.

    python bench/bench_clickhouse_statements.py --samples
    python bench/bench_clickhouse_statements.py --folder DIR --table otel.otel_traces

With ``--samples`` the traces of ``sample_traces/`` go into the exporter's table of a new
chdb directory and are audited twice, the second audit measured: the fixed cost every audit
pays whatever its size (planning some 280 statements, transpiling the rules). With
``--folder`` and ``--table`` an existing chdb directory's table is audited once (fill one with
``bench_clickhouse_schema.py``'s loader, or keep the directory of a run of it).

Each statement the audit sends to the engine is timed (wall and the process's CPU, chdb's
threads included); what is left of the audit's CPU is Python's (transpiling, result rows).
Prints the totals, the statements by kind and the heaviest ones.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))


def _kind(sql: str) -> str:
    text = sql.lstrip()
    if text.startswith("DROP"):
        return "drop"
    if text.startswith("DESCRIBE"):
        return "describe"
    if text.startswith("CREATE") and " EMPTY AS" in text[:200]:
        return "create (columns only)"
    if text.startswith("CREATE"):
        return "create"
    if "LIMIT 0" in text[-40:]:
        return "columns"
    return "select"


def _label(sql: str) -> str:
    created = re.findall(r"CREATE TEMPORARY TABLE (\w+)", sql)
    if created:
        return created[0]
    return "... " + " ".join(sql.split()).rsplit(" SETTINGS ", 1)[0][-90:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", action="store_true", help="audit sample_traces/")
    parser.add_argument("--folder", help="an existing chdb data directory")
    parser.add_argument("--table", help="its exporter table, as database.table")
    parser.add_argument("--top", type=int, default=15, help="heaviest statements shown")
    args = parser.parse_args(argv)
    if args.samples == bool(args.folder and args.table):
        parser.error("give --samples, or --folder and --table")

    from auditor.clickhouse import ChdbEngine, audit_engine

    if args.samples:
        from auditor import load_traces
        from auditor.clickhouse import create_table, fill

        engine = ChdbEngine(tempfile.mkdtemp(prefix="handoffscope-chdb-"))
        traces = load_traces(sorted(glob.glob(str(ROOT / "sample_traces" / "*" / "*.json*"))))
        table = create_table(engine, "otel", "otel_traces")
        fill(engine, table, traces)
        audit_engine(engine, table)  # the first audit also loads chdb's own code
    else:
        engine = ChdbEngine(args.folder)
        table = args.table

    log: list[tuple[float, float, str]] = []

    def timed(run: Any) -> Any:
        def wrapper(sql: str, params: dict[str, Any] | None = None) -> Any:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return run(sql, params)
            finally:
                log.append((time.perf_counter() - wall, time.process_time() - cpu, sql))

        return wrapper

    engine.query = timed(engine.query)  # type: ignore[method-assign]
    engine.command = timed(engine.command)  # type: ignore[method-assign]
    wall, cpu = time.perf_counter(), time.process_time()
    result = audit_engine(engine, table)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    engine.close()

    in_engine = sum(c for _, c, _ in log)
    print(
        f"{table}: {result.figures.summary['spans']:,} spans, {len(result.findings):,} findings;"
        f" wall {wall:.2f} s, CPU {cpu:.2f} s ({in_engine:.2f} s in {len(log)} statements,"
        f" {cpu - in_engine:.2f} s outside the engine); load"
        f" {' '.join(f'{x:.1f}' for x in os.getloadavg())}; peak"
        f" {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2:.1f} GB"
    )
    kinds: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for w, c, sql in log:
        kind = kinds[_kind(sql)]
        kind[0] += 1
        kind[1] += w
        kind[2] += c
    for name, (count, w, c) in sorted(kinds.items(), key=lambda k: -k[1][2]):
        print(f"  {name:22s} {int(count):4d} statements  wall {w:6.2f} s  CPU {c:6.2f} s")
    print("heaviest (wall s, CPU s):")
    for w, c, sql in sorted(log, key=lambda x: -x[1])[: args.top]:
        print(f"  {w:6.2f} {c:6.2f}  {_label(sql)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
