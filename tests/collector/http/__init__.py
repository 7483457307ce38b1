"""Tests of ``collector.http``."""
