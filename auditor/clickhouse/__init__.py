"""The auditor's rules inside ClickHouse, over the Collector exporter's ``otel_traces``.

The rules and views stay written once, in DuckDB's SQL; :mod:`auditor.clickhouse.dialect`
transpiles them with SQLGlot, and :mod:`auditor.clickhouse.spans` presents the exporter's
table as the ``spans`` relation they read. Only findings and figures leave ClickHouse. Needs
the ``clickhouse`` extra::

    from auditor.clickhouse import TimeRange, audit_clickhouse

    result = audit_clickhouse("chdb://./traces-db")                     # doctest: +SKIP
    result = audit_clickhouse("clickhouse://localhost:8123/otel")       # doctest: +SKIP
    [f.rule for f in result.findings], result.exit_code()               # doctest: +SKIP

To try it without a Collector, fill an embedded data directory from trace files::

    from auditor import load_traces
    from auditor.clickhouse import ChdbEngine, create_table, fill

    engine = ChdbEngine("./traces-db")                                  # doctest: +SKIP
    fill(engine, create_table(engine, "otel", "otel_traces"),           # doctest: +SKIP
         load_traces("sample_traces/"))
"""

from __future__ import annotations

from auditor.clickhouse.audit import ClickHouseConnection, TimeRange, audit_clickhouse, audit_engine
from auditor.clickhouse.dialect import DialectError, to_clickhouse
from auditor.clickhouse.engine import ChdbEngine, ServerEngine, connect, parse_url
from auditor.clickhouse.loader import create_table, fill, table_ddl
from auditor.clickhouse.spans import spans_select

__all__ = [
    "ChdbEngine",
    "ClickHouseConnection",
    "DialectError",
    "ServerEngine",
    "TimeRange",
    "audit_clickhouse",
    "audit_engine",
    "connect",
    "create_table",
    "fill",
    "parse_url",
    "spans_select",
    "table_ddl",
    "to_clickhouse",
]
