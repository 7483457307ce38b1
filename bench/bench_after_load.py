"""Benchmark: what an audit does after the load, step by step.

Loads a spans table once (from a Parquet file ``handoffscope compact`` wrote, or a load's
``spans`` table copied out with ``COPY spans TO 'x.parquet'``, copied into a table as a load
leaves it), then times, in wall and CPU seconds: agent attribution's query, the spans of
other instrumentations held in a table, each derived table, each rule, the figures' queries
and the explanation of other frameworks' spans, as ``handoffscope audit`` runs them (with
Python's cycle collector paused, as the audit pauses it).
Prints one line per step and a digest of the findings and figures, so that two versions of
the auditor can be compared on the same input, runs interleaved (the machine is shared)::

    .venv/bin/python bench/bench_after_load.py STORE.parquet [--threads 1]
    PYTHONPATH=/tmp/before .venv/bin/python bench/bench_after_load.py STORE.parquet [--collect]

(``/tmp/before`` holding ``git archive``'s ``auditor`` and ``collector`` of the version
to compare against).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import os
import resource
import time
from typing import Any


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _rounded(value: Any) -> Any:
    # Sums of floats vary in their last digits with the order threads add them in.
    if isinstance(value, float):
        return float(f"{value:.7g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


def _digest(value: Any) -> str:
    text = json.dumps(_rounded(value), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", help="a Parquet file of spans (handoffscope compact)")
    parser.add_argument("--threads", type=int, default=0, help="DuckDB threads (0: default)")
    parser.add_argument(
        "--collect",
        action="store_true",
        help="leave Python's cycle collector running (as a version before the audit paused it)",
    )
    args = parser.parse_args()

    import auditor
    from auditor.audit import prepare, run_rule
    from auditor.database.statements import grown
    from auditor.figures import figure_rows
    from auditor.loading.load import connect
    from auditor.model import derived
    from auditor.model.attribution import resolve_sql
    from auditor.model.structure import explain
    from auditor.rules import all_rules

    con = connect(large=True)
    con.execute("INSERT INTO spans SELECT * FROM read_parquet(?)", [args.store])
    con.execute("CHECKPOINT")
    if args.threads:
        con.execute(f"SET threads = {int(args.threads)}")
    prepare(con)
    steps: list[tuple[str, float, float]] = []

    def timed(name: str, step: Any) -> None:
        wall, cpu = time.perf_counter(), _cpu()
        step()
        steps.append((name, time.perf_counter() - wall, _cpu() - cpu))

    sql = "CREATE OR REPLACE TEMP TABLE hs_resolved_agents AS " + resolve_sql(by_file=True)
    timed("attribution", lambda: grown(con, sql, {"file": None, "shares": None, "share": 0}))
    con.execute("DROP TABLE temp.hs_resolved_agents")
    findings: dict[str, Any] = {}
    if not args.collect:
        gc.disable()
    # A version before the spans of other instrumentations were held has no such step.
    held = getattr(derived, "fw_spans_held", None)
    with contextlib.ExitStack() as stack, derived.uncompressed(con):
        if held is not None:
            timed("other frameworks' spans held", lambda: stack.enter_context(held(con)))
        for name in derived.DERIVED:
            timed(name, lambda name=name: derived.derive(con, (name,)))
        for rule in all_rules():
            wall, cpu = time.perf_counter(), _cpu()
            findings[rule.id] = [f.to_dict() for f in run_rule(con, rule)]
            steps.append((f"rule {rule.id}", time.perf_counter() - wall, _cpu() - cpu))
        wall, cpu = time.perf_counter(), _cpu()
        figures = figure_rows(con)
        steps.append(("figures", time.perf_counter() - wall, _cpu() - cpu))
        wall, cpu = time.perf_counter(), _cpu()
        structure = explain(con)
        steps.append(("explanation", time.perf_counter() - wall, _cpu() - cpu))
    gc.enable()
    for name, wall, cpu in steps:
        print(f"{name:40s} {wall:6.2f} s {cpu:6.2f} CPU s")
    print(f"{'total':40s} {sum(s[1] for s in steps):6.2f} s {sum(s[2] for s in steps):6.2f} CPU s")
    print(f"auditor {os.path.dirname(auditor.__file__)}")
    count = sum(len(f) for f in findings.values())
    print(f"findings {count} digest {_digest(findings)}, figures digest {_digest(figures)}")
    print(f"structure digest {_digest(None if structure is None else structure.to_dict())}")


if __name__ == "__main__":
    main()
