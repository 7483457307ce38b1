"""Tests of ``auditor.experiments``."""
