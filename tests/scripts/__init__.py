"""Tests of the scripts in ``scripts/``."""
