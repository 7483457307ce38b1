"""Where the repository's folders are, for a test at any depth under ``tests/``."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository's root: ``docs/``, ``sample_traces/``, ``scripts/`` sit here."""

TESTS = REPO / "tests"
"""The test tree, which holds the data every test shares: ``fixtures/`` and ``cases/``."""
