"""Tests of ``collector.integrations``."""
