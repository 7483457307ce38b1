"""handoffscope auditor: DuckDB over trace files, protocol rules, spend and reliability."""
