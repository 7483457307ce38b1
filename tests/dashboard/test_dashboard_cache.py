"""The spend page's prompt-cache table: each agent's cached share of input, as the audit
counts it."""

from __future__ import annotations

from pathlib import Path

import pytest

from auditor import load_traces
from dashboard import data
from tests.auditor.test_pricing_differential import _calls, _write


def test_each_agent_s_cached_share_is_its_cache_reads_over_its_input(tmp_path: Path) -> None:
    calls = _calls(9, 60)
    path = tmp_path / "calls.jsonl"
    _write(path, calls)
    con = load_traces(str(path)).con

    cached = data.cache_use(con)
    # Every call is its own trace with no agent named: each is charged to its service.
    reads = sum(c["cache_read"] for c in calls)
    total = sum(c["input"] for c in calls)
    assert list(cached["agent"]) == ["app"]
    assert int(cached["cache_read_tokens"][0]) == reads
    assert int(cached["input_tokens"][0]) == total
    assert float(cached["cached_share"][0]) == pytest.approx(reads / total)


def test_agents_that_read_no_cache_are_left_out(tmp_path: Path) -> None:
    calls = [dict(c, cache_read=0, cache_write=0) for c in _calls(10, 20)]
    path = tmp_path / "calls.jsonl"
    _write(path, calls)
    con = load_traces(str(path)).con

    assert data.cache_use(con).empty
