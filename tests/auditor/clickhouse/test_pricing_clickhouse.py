"""The same generated usages priced inside ClickHouse (chdb, the exporter's table): each span
costs what DuckDB's audit and genai-prices' ``calc_price`` say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytest.importorskip("chdb")

from auditor import load_traces  # noqa: E402
from auditor.audit import prepare  # noqa: E402
from tests.auditor.test_pricing_differential import _calls, _expected, _write  # noqa: E402

ROOT = REPO

# chdb's embedded server takes one data path per process, and other test modules open
# theirs: the ClickHouse side runs in a process of its own.
_IN_CHDB = """
import json, sys
from auditor import load_traces
from auditor.clickhouse.audit import ClickHouseConnection
from auditor.clickhouse.engine import ChdbEngine
from auditor.clickhouse.loader import create_table, fill

traces = load_traces(sys.argv[1])
engine = ChdbEngine(sys.argv[2])
table = create_table(engine, "otel", "otel_traces")
# The exporter's table has a partition a day, and the calls span two years of price
# changes: one insert writes them all.
engine.command("SET max_partitions_per_insert_block = 0")
fill(engine, table, traces)
con = ClickHouseConnection(engine, table)
assert con.derive()
rows = con.sql("SELECT span_id, cost_usd, unpriced FROM hs_usage(NULL, NULL, [])").fetchall()
engine.close()
print(json.dumps({s: [c, u] for s, c, u in rows}))
"""


def test_clickhouse_prices_every_usage_as_duckdb_and_calc_price_do(tmp_path: Path) -> None:
    calls = _calls(3, 600)
    path = tmp_path / "calls.jsonl"
    _write(path, calls)
    traces = load_traces(str(path))
    prepare(traces.con)
    duck = dict(traces.con.execute("SELECT span_id, cost_usd FROM hs_usage_all").fetchall())
    done = subprocess.run(
        [sys.executable, "-c", _IN_CHDB, str(path), str(tmp_path / "chdb")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    house = json.loads(done.stdout)
    assert set(house) == set(duck) == {c["span_id"] for c in calls}
    priced = 0
    for call in calls:
        want = _expected(call)
        cost, unpriced = house[call["span_id"]]
        if want is None:
            assert unpriced and cost is None, call
            continue
        priced += 1
        assert cost == pytest.approx(want, rel=1e-9, abs=1e-12), call
        assert cost == pytest.approx(duck[call["span_id"]], rel=1e-12, abs=1e-15), call
    assert priced > 0.9 * len(calls)
