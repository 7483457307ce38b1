"""Benchmark: is the dashboard responsive on a million spans?

Builds a trace set of about 1M spans by copying ``sample_traces/fault-mix`` (every kind of
fault, real library spans) with fresh ids and shifted times, compacts it to Parquet with the
auditor's own writer, then measures in one run:

* the baseline: the auditor loading the Parquet, and one plain DuckDB aggregation over it;
* what the app does once per trace set before the first page (``dashboard.data.scope.ready``:
  the auditor's derived tables, read back from beside the store as ``handoffscope compact``
  saves them, or derived afresh as for trace files, and the per-trace index the filters
  read);
* the data behind each page, uncached (what the first view of a page, or a filter change,
  costs), with and without a filter;
* the real app under Streamlit's AppTest: the first render of the overview (Parquet load
  included), a filter change while every rule still runs in the background and once they
  are done, the first visit of each page under a filter, interactions on the Findings page,
  and pages visited again (served from cache).

Every figure is also given as a ratio to the plain aggregation of the same run. Run::

    .venv/bin/python bench/bench_dashboard.py [--spans 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "sample_traces" / "fault-mix"

# Columns that identify a span, a handoff or a workflow: each copy gets its own values, so
# the copies are independent workflows (no duplicate keys across copies). Every absolute time
# (span times, event times, deadlines) moves with the copy, so each copy breaks exactly the
# rules the seed breaks.
_SUFFIXED = (
    "handoff.id",
    "handoff.task_id",
    "handoff.idempotency_key",
    "handoff.workflow.id",
    "handoff.envelope.id",
    "handoff.consumed.task_id",
)


def build(spans: int, out: Path) -> tuple[Path, int]:
    """Write about ``spans`` spans of copied fault-mix traces to ``out`` (Parquet)."""
    from auditor import TraceSet, load_traces
    from auditor.stores.compact import write_parquet

    seed = load_traces(SEED)
    con = seed.con
    per_copy, first, last = con.execute(
        "SELECT count(*), min(start_unix_nano), max(end_unix_nano) FROM spans"
    ).fetchone()
    copies = max(1, round(spans / per_copy))
    shift = (last - first) + 60 * 10**9  # one copy after the other, a minute apart
    ident = ", ".join(f'"{c}" || \'~\' || copy AS "{c}"' for c in _SUFFIXED)
    con.execute(
        f"""
        CREATE TABLE big AS
        SELECT spans.* REPLACE (
            substr(md5(trace_id || copy), 1, 32) AS trace_id,
            substr(md5(span_id || copy), 1, 16) AS span_id,
            substr(md5(parent_span_id || copy), 1, 16) AS parent_span_id,
            start_unix_nano + copy * $shift AS start_unix_nano,
            end_unix_nano + copy * $shift AS end_unix_nano,
            start_time + to_microseconds(copy * $shift // 1000) AS start_time,
            end_time + to_microseconds(copy * $shift // 1000) AS end_time,
            "handoff.deadline_unix_ms" + copy * $shift // 1000000 AS "handoff.deadline_unix_ms",
            list_transform(events, lambda ev: struct_update(
                ev, time_unix_nano := ev.time_unix_nano + copy * $shift)) AS events,
            map_from_entries(list_transform(map_entries(attributes), lambda kv: {{
                'key': kv.key,
                'value': CASE WHEN kv.key LIKE '%unix_ms' AND TRY_CAST(kv.value AS BIGINT)
                              IS NOT NULL
                         THEN (kv.value::BIGINT + copy * $shift // 1000000)::VARCHAR
                         ELSE kv.value END}})) AS attributes,
            {ident})
        FROM spans, range($copies) AS c(copy)
    """,
        {"shift": shift, "copies": copies},
    )
    con.execute("DROP TABLE spans")
    con.execute("ALTER TABLE big RENAME TO spans")
    total = con.execute("SELECT count(*) FROM spans").fetchone()[0]
    write_parquet(TraceSet(con=con), str(out), force=True)
    return out, int(total)


def saved(store: Path) -> None:
    """Save the store's derived tables beside it, as ``handoffscope compact`` does, unless
    tables saved from this very store by this version are there already."""
    from auditor import load_traces
    from auditor.audit import prepare
    from auditor.stores.saved import restore, save

    con = load_traces(store).con
    prepare(con)
    if not restore(con, [str(store)]):
        save(con, [str(store)])


def derived_afresh(parquet: Path) -> float:
    """Seconds for the app to ready the store without its saved tables, as for trace files
    or a store written by other means: ``ready`` on a copy of the store alone."""
    from auditor import load_traces
    from dashboard.data.scope import ready

    with tempfile.TemporaryDirectory(prefix="handoffscope-bench-") as tmp:
        alone = Path(tmp) / parquet.name
        shutil.copy2(parquet, alone)
        traces = load_traces(alone)
        start = time.perf_counter()
        ready(traces)
        seconds = time.perf_counter() - start
        traces.con.close()
    return seconds


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median wall time of ``repeat`` calls, and the last result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def page_queries(con: Any, filters: Any, whole: Any = None) -> dict[str, Callable[[], Any]]:
    """What each page asks for (uncached), as the pages ask for it. Under a filter, the
    findings are those of the whole set (``whole``, cached by the app) kept for the selected
    traces, with the set-scoped rules run again on them."""
    from dashboard import data, trace_data

    bounds = data.bounds(con)
    width = data.bucket_width(bounds.start, bounds.end)
    return {
        "overview": lambda: (
            data.overview(con, filters=filters),
            data.activity_over_time(con, filters=filters, width=width),
        ),
        "findings (all rules)": (
            (lambda: data.findings(con))
            if whole is None
            else lambda: data.within(
                con, whole, data.set_findings(con, filters=filters), filters=filters
            )
        ),
        "spend": lambda: (
            data.agent_spend(con, filters=filters),
            data.model_spend(con, filters=filters),
            data.workflow_spend(con, filters=filters),
            data.edge_spend(con, filters=filters),
            data.voided_spend(con, filters=filters),
        ),
        "reliability": lambda: (
            data.compounding(con, filters=filters),
            data.agent_reliability(con, filters=filters),
            data.edge_reliability(con, filters=filters),
        ),
        "validation latency": lambda: (
            data.latency_percentiles(con, filters=filters),
            data.latency_by(con, filters=filters),
            data.latency_by(con, filters=filters, by="edge"),
            data.latency_histogram(con, filters=filters),
            data.latency_over_time(con, filters=filters, width=width),
        ),
        "handoffs": lambda: (
            data.state_funnel(con, filters=filters),
            data.void_reasons(con, filters=filters),
            data.edge_flows(con, filters=filters),
        ),
        "trace list": lambda: trace_data.trace_list(con, filters=filters, only="failed"),
    }


def app_timings(parquet: Path) -> dict[str, float]:
    """The real app under AppTest: first render, filter changes, page switches."""
    from streamlit.testing.v1 import AppTest

    from dashboard.source import PATHS_ENV

    os.environ[PATHS_ENV] = json.dumps([str(parquet)])
    app = str(ROOT / "dashboard" / "app.py")
    out: dict[str, float] = {}
    start = time.perf_counter()
    at = AppTest.from_file(app, default_timeout=600).run()
    rendered = time.perf_counter()
    out["first render of the overview (load included)"] = rendered - start
    assert not at.exception, at.exception
    agents = at.multiselect(key="filter_agents").options
    busy, agent = agents[1], agents[-1]
    start = time.perf_counter()
    at.multiselect(key="filter_agents").select(busy).run()
    out[f"filter change (agent {busy}) while the rules run in the background"] = (
        time.perf_counter() - start
    )
    for thread in threading.enumerate():
        if thread.name.startswith("handoffscope-findings"):
            thread.join()
    out["every rule done, in the background (after the first render)"] = (
        time.perf_counter() - rendered
    )
    start = time.perf_counter()
    at.multiselect(key="filter_agents").unselect(busy).select(agent).run()
    out[f"filter change (agent {agent}) on the overview"] = time.perf_counter() - start
    for page in ("spend", "latency", "reliability", "handoffs", "trace"):
        start = time.perf_counter()
        at.switch_page(f"views/{page}.py").run()
        out[f"switch to {page} (first visit, filtered)"] = time.perf_counter() - start
        assert not at.exception, at.exception
    start = time.perf_counter()
    at.switch_page("views/findings.py").run()
    out["switch to findings (first visit, filtered)"] = time.perf_counter() - start
    assert not at.exception, at.exception
    start = time.perf_counter()
    at.multiselect(key="findings_rule").select(at.multiselect(key="findings_rule").options[0])
    at.run()
    out["findings: pick a rule"] = time.perf_counter() - start
    other = at.multiselect(key="filter_agents").options[0]
    start = time.perf_counter()
    at.multiselect(key="filter_agents").unselect(agent).select(other).run()
    out[f"findings: change the agent filter (agent {other})"] = time.perf_counter() - start
    assert not at.exception, at.exception
    start = time.perf_counter()
    at.multiselect(key="filter_agents").unselect(other).select(agent).run()
    out[f"findings: back to agent {agent} (cached)"] = time.perf_counter() - start
    start = time.perf_counter()
    at.switch_page("views/overview.py").run()
    out["back to the overview (cached)"] = time.perf_counter() - start
    start = time.perf_counter()
    at.multiselect(key="filter_agents").unselect(agent).run()
    out["clear the filter (cached)"] = time.perf_counter() - start
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-app", action="store_true", help="skip the AppTest timings")
    parser.add_argument("--store", type=Path, help="build the Parquet here and reuse it if present")
    args = parser.parse_args(argv)

    from auditor import load_traces
    from dashboard.data.scope import ready
    from dashboard.selection import Filters

    with tempfile.TemporaryDirectory(prefix="handoffscope-bench-") as tmp:
        start = time.perf_counter()
        if args.store is not None and args.store.exists():
            parquet = args.store
        else:
            parquet, total = build(args.spans, args.store or Path(tmp) / "spans.parquet")
            print(f"built {total:,} spans in {time.perf_counter() - start:.1f}s")

        saved(parquet)
        afresh_s = derived_afresh(parquet)
        load_s, traces = timed(lambda: load_traces(parquet), 1)
        ready_s, _ = timed(lambda: ready(traces), 1)
        con = traces.con
        total = traces.span_count
        base_s, _ = timed(
            lambda: con.execute(
                "SELECT agent, count(*), sum(cost_usd), quantile_cont(duration_ms, 0.95)"
                " FROM spans GROUP BY agent"
            ).fetchall(),
            args.repeat,
        )
        rows = [
            ("baseline: auditor loads the Parquet", load_s),
            ("the app readies it (derived tables saved by compact, trace index)", ready_s),
            ("... deriving the tables instead (trace files, or a store without them)", afresh_s),
            ("baseline: one DuckDB aggregation over all spans", base_s),
        ]
        agent = traces.con.execute(
            'SELECT "handoff.receiver" FROM spans WHERE "handoff.receiver" IS NOT NULL'
            " GROUP BY 1 ORDER BY count(*) LIMIT 1"
        ).fetchone()[0]
        whole = None
        for label, filters in (("all", Filters()), (f"agent {agent}", Filters(agents=(agent,)))):
            for page, fn in page_queries(con, filters, whole).items():
                seconds, result = timed(fn, args.repeat)
                rows.append((f"{page} data, {label} (uncached)", seconds))
                if whole is None and page.startswith("findings"):
                    whole = result
        print(f"\n{total:,} spans, median of {args.repeat}; ratio = time / one aggregation\n")
        print("| measurement | seconds | ratio |\n|---|---:|---:|")
        for label, seconds in rows:
            print(f"| {label} | {seconds:.3f} | {seconds / base_s:.1f} |")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"\npeak resident memory of this process: {peak:,.0f} MB")
        if not args.no_app:
            print("\nThe app under Streamlit's AppTest (one run each):\n")
            print("| step | seconds |\n|---|---:|")
            for label, seconds in app_timings(parquet).items():
                print(f"| {label} | {seconds:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
