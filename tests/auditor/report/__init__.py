"""Tests of ``auditor.report``."""
