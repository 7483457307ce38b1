"""handoffscope auditor: DuckDB over trace files, protocol rules, spend and reliability.

Quickstart::

    from auditor import load_traces

    traces = load_traces("sample_traces/")      # files, directories, globs, .gz/.zst, Parquet
    print(traces.span_count, "spans")
    for problem in traces.problems:             # torn or malformed lines, non-trace files
        print(problem)
    traces.con.sql("SELECT agent, sum(cost_usd) FROM spans GROUP BY agent").show()

The ``spans`` table and every function here are documented in ``docs/auditor.md``.
"""

from __future__ import annotations

from auditor.errors import AuditError
from auditor.load import LoadProblem, TraceSet, append_lines, connect, load_traces

__all__ = [
    "AuditError",
    "LoadProblem",
    "TraceSet",
    "append_lines",
    "connect",
    "load_traces",
]
