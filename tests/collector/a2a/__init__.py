"""Tests of ``collector.a2a``."""
