"""Tests of ``auditor.watch``."""
