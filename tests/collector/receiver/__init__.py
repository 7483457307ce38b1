"""Tests of ``collector.receiver``."""
