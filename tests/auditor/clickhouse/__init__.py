"""Tests of ``auditor.clickhouse``."""
