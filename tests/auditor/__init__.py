"""Tests of ``auditor``."""
