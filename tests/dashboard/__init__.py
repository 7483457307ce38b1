"""Tests of ``dashboard``."""
