"""The same generated usages priced inside ClickHouse (chdb, the exporter's table): each span
costs what DuckDB's audit and genai-prices' ``calc_price`` say."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("chdb")

from test_pricing_differential import _calls, _expected, _write  # noqa: E402

from auditor import load_traces  # noqa: E402
from auditor.audit import prepare  # noqa: E402
from auditor.clickhouse.audit import ClickHouseConnection  # noqa: E402
from auditor.clickhouse.engine import ChdbEngine  # noqa: E402
from auditor.clickhouse.loader import create_table, fill  # noqa: E402


def test_clickhouse_prices_every_usage_as_duckdb_and_calc_price_do(tmp_path: Path) -> None:
    calls = _calls(3, 600)
    path = tmp_path / "calls.jsonl"
    _write(path, calls)
    traces = load_traces(str(path))
    prepare(traces.con)
    duck = {
        span_id: cost
        for span_id, cost in traces.con.execute(
            "SELECT span_id, cost_usd FROM hs_usage_all"
        ).fetchall()
    }
    engine = ChdbEngine(str(tmp_path / "chdb"))
    try:
        table = create_table(engine, "otel", "otel_traces")
        # The exporter's table has a partition a day, and the calls span two years of
        # price changes: one insert writes them all.
        engine.command("SET max_partitions_per_insert_block = 0")
        fill(engine, table, traces)
        con = ClickHouseConnection(engine, table)
        assert con.derive()
        house = {
            span_id: (cost, unpriced)
            for span_id, cost, unpriced in con.sql(
                "SELECT span_id, cost_usd, unpriced FROM hs_usage(NULL, NULL, [])"
            ).fetchall()
        }
    finally:
        engine.close()
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
