"""Tests of ``collector``."""
