"""The auditor's rules inside ClickHouse, over the Collector exporter's ``otel_traces``.

The rules and views stay written once, in DuckDB's SQL; :mod:`auditor.clickhouse.dialect`
transpiles them with SQLGlot, and :mod:`auditor.clickhouse.spans` presents the exporter's
table as the ``spans`` relation they read. Needs the ``clickhouse`` extra::

    from auditor.clickhouse import audit_clickhouse

    result = audit_clickhouse("chdb://./traces-db")                     # doctest: +SKIP
    [f.rule for f in result.findings], result.exit_code()               # doctest: +SKIP
"""

from __future__ import annotations
