"""Tests of ``collector.simulator``."""
