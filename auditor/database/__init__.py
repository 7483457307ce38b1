"""The bottom of the auditor: DuckDB statements run under the memory limit, transactions,
checkpoints, and the ``spans`` table every other layer reads.

* :mod:`auditor.database.statements`: running a statement (growing the memory limit when it
  runs out), compressing what a load wrote, holding checkpoints off during a block;
* :mod:`auditor.database.transactions`: committing or rolling back an insert;
* :mod:`auditor.database.span_table`: the ``spans`` table's columns, DDL and the SQL that
  shreds an OTLP line into its rows.

Nothing here imports another layer of the auditor (see docs/architecture.md).
"""
