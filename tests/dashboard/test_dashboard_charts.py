"""The dashboard's Plotly figures, inspected through the figure each chart function returns."""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd
import plotly.graph_objects as go
import pytest

from collector import schema as s
from dashboard import charts


def _lines(fig: go.Figure) -> dict[str, float]:
    """Threshold lines drawn as shapes: name -> position (x for vertical, y for horizontal)."""
    out = {}
    for shape in fig.layout.shapes:
        vertical = shape.x0 == shape.x1 and shape.xref == "x"
        out[shape.name] = shape.x0 if vertical else shape.y0
    return out


def _latency_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "receiver": ["writer", "review"],
            "validations": [40, 12],
            "p50_ms": [120.0, 90.0],
            "p95_ms": [640.0, 300.0],
            "p99_ms": [2400.0, 410.0],
        }
    )


@pytest.mark.parametrize(("budget_ms", "timeout_ms"), [(500.0, 2000.0), (250.0, 1000.0)])
def test_the_histogram_draws_the_budget_and_timeout_and_the_percentiles(
    budget_ms: float, timeout_ms: float
) -> None:
    bins = pd.DataFrame(
        {
            "bin_start_ms": [0.0, 50.0, 2000.0],
            "bin_end_ms": [50.0, 100.0, 2050.0],
            "count": [7, 3, 1],
        }
    )
    fig = charts.latency_histogram(
        bins, percentiles={"p50": 40.0, "p95": 90.0}, budget_ms=budget_ms, timeout_ms=timeout_ms
    )
    assert _lines(fig) == {charts.BUDGET_LINE: budget_ms, charts.TIMEOUT_LINE: timeout_ms}
    bars = fig.data[0]
    assert list(bars.y) == [7, 3, 1]
    assert list(bars.x) == [25.0, 75.0, 2025.0]
    # Bins past the timeout stand out.
    assert bars.marker.color[2] == charts.STATE_COLORS[s.STATE_VOID]
    assert bars.marker.color[0] != bars.marker.color[2]
    marks = {t.name: t.x[0] for t in fig.data[1:]}
    assert marks == {"p50 40 ms": 40.0, "p95 90 ms": 90.0}


def test_the_default_lines_are_the_protocol_thresholds() -> None:
    fig = charts.latency_by_receiver(_latency_frame())
    assert _lines(fig) == {charts.BUDGET_LINE: 500.0, charts.TIMEOUT_LINE: 2000.0}
    fig = charts.latency_over_time(
        pd.DataFrame(
            {
                "bucket": [datetime(2026, 1, 1)],
                "validations": [3],
                "p50_ms": [1.0],
                "p95_ms": [2.0],
                "p99_ms": [3.0],
            }
        )
    )
    assert _lines(fig) == {charts.BUDGET_LINE: 500.0, charts.TIMEOUT_LINE: 2000.0}


def test_latency_per_receiver_has_one_series_per_percentile_worst_first() -> None:
    fig = charts.latency_by_receiver(_latency_frame(), budget_ms=400, timeout_ms=1500)
    assert [t.name for t in fig.data] == ["p50", "p95", "p99"]
    assert list(fig.data[1].x) == ["writer", "review"]
    assert list(fig.data[1].y) == [640.0, 300.0]
    assert list(fig.data[2].y) == [2400.0, 410.0]
    assert _lines(fig) == {charts.BUDGET_LINE: 400, charts.TIMEOUT_LINE: 1500}


def test_spend_per_agent_stacks_one_bar_per_phase_largest_agent_on_top() -> None:
    frame = pd.DataFrame(
        {
            "agent": ["writer", "writer", "review", "foreign"],
            "phase": [s.PHASE_COMMIT, s.PHASE_VALIDATE, s.PHASE_COMMIT, "other"],
            "cost_usd": [3.0, 0.5, 1.0, 0.25],
        }
    )
    fig = charts.spend_by_agent(frame)
    assert fig.layout.barmode == "stack"
    assert [t.name for t in fig.data] == [s.PHASE_VALIDATE, s.PHASE_COMMIT, "other"]
    commit = fig.data[1]
    assert dict(zip(commit.y, commit.x, strict=True)) == {
        "foreign": 0,
        "review": 1.0,
        "writer": 3.0,
    }
    assert list(fig.layout.yaxis.categoryarray) == ["foreign", "review", "writer"]
    total = sum(sum(t.x) for t in fig.data)
    assert total == pytest.approx(frame["cost_usd"].sum())


def test_reliability_shows_first_attempts_against_the_end_result_worst_on_top() -> None:
    frame = pd.DataFrame(
        {
            "agent": ["writer", "review"],
            "handoffs": [10, 20],
            "handoff_success_rate": [0.9, 0.99],
            "first_attempt_success_rate": [0.6, 0.95],
        }
    )
    fig = charts.reliability_by_agent(frame)
    series = {t.name: dict(zip(t.y, t.x, strict=True)) for t in fig.data}
    assert series == {
        "first attempt": {"writer": 0.6, "review": 0.95},
        "after retries": {"writer": 0.9, "review": 0.99},
    }
    # Plotly draws the first category at the bottom: the worst agent ends up on top.
    assert list(fig.data[0].y) == ["review", "writer"]


def test_compounding_shows_observed_projected_and_first_attempts() -> None:
    frame = pd.DataFrame(
        {
            "chain_length": [3, 5],
            "workflows": [100, 80],
            "observed": [0.9, 0.8],
            "projected": [0.857, 0.774],
            "projected_first_attempt": [0.6, 0.4],
        }
    )
    fig = charts.compounding(frame)
    series = {t.name: (list(t.x), list(t.y)) for t in fig.data}
    assert series == {
        "observed": ([3, 5], [0.9, 0.8]),
        "projected (product of agents)": ([3, 5], [0.857, 0.774]),
        "first attempts only (no retries)": ([3, 5], [0.6, 0.4]),
    }
    assert fig.layout.yaxis.tickformat == ".0%"


def test_the_funnel_and_the_sankey_carry_the_counts() -> None:
    funnel = charts.state_funnel(pd.DataFrame({"stage": list(s.STATES), "handoffs": [10, 8, 7, 3]}))
    assert list(funnel.data[0].x) == [10, 8, 7, 3]
    assert list(funnel.data[0].y) == list(s.STATES)
    flows = pd.DataFrame(
        {
            "sender": ["a", "a", "b"],
            "receiver": ["b", "b", "c"],
            "state": [s.STATE_COMMITTED, s.STATE_VOID, s.STATE_COMMITTED],
            "handoffs": [9, 1, 8],
        }
    )
    sankey = charts.edge_sankey(flows).data[0]
    # A chain: each agent is one node, so a → b → c reads left to right.
    assert list(sankey.node.label) == ["a", "b", "c"]
    assert list(sankey.link.value) == [9, 1, 8]
    assert list(sankey.link.source) == [0, 0, 1] and list(sankey.link.target) == [1, 1, 2]


def test_a_sankey_with_a_cycle_puts_senders_and_receivers_in_two_columns() -> None:
    flows = pd.DataFrame(
        {
            "sender": ["a", "b"],
            "receiver": ["b", "a"],
            "state": [s.STATE_COMMITTED, s.STATE_VOID],
            "handoffs": [3, 2],
        }
    )
    sankey = charts.edge_sankey(flows).data[0]
    assert list(sankey.node.label) == ["a", "b", "a", "b"]
    assert list(sankey.link.source) == [0, 1] and list(sankey.link.target) == [3, 2]


def test_void_reasons_put_the_most_frequent_on_top() -> None:
    fig = charts.void_reasons(pd.DataFrame({"reason": ["timeout", "<b>x</b>"], "attempts": [2, 5]}))
    assert list(fig.data[0].y) == ["timeout", "&lt;b&gt;x&lt;/b&gt;"]
    assert list(fig.data[0].x) == [2, 5]


def test_the_waterfall_places_each_span_at_its_offset() -> None:
    frame = pd.DataFrame(
        {
            "span_id": ["1", "2", "3"],
            "label": ["handoff", " propose", " validate"],
            "offset_ms": [0.0, 0.0, 1.5],
            "duration_ms": [900.0, 0.0, 2500.0],
            "phase": [None, s.PHASE_PROPOSE, s.PHASE_VALIDATE],
            "state": [s.STATE_COMMITTED, s.STATE_PROPOSED, s.STATE_VOID],
            "agent": [None, "a", "b"],
            "cost_usd": [None, 0.001, 0.002],
        }
    )
    bars = charts.trace_waterfall(frame).data[0]
    assert list(bars.base) == [0.0, 0.0, 1.5]
    # A zero-length span still gets a visible sliver.
    assert list(bars.x) == [900.0, 0.5, 2500.0]
    assert bars.marker.color[2] == charts.PHASE_COLORS[s.PHASE_VALIDATE]
    assert bars.marker.color[0] == charts.STATE_COLORS[s.STATE_COMMITTED]


def test_activity_splits_runs_into_succeeded_and_not() -> None:
    start = datetime(2026, 1, 1)
    frame = pd.DataFrame(
        {
            "bucket": [start, start + timedelta(minutes=5)],
            "workflows": [10, 4],
            "succeeded": [9, 4],
            "cost_usd": [1.0, 0.5],
        }
    )
    fig = charts.activity_over_time(frame)
    series = {t.name: list(t.y) for t in fig.data}
    assert series == {"succeeded": [9, 4], "did not succeed": [1, 0], "cost (USD)": [1.0, 0.5]}


@pytest.mark.parametrize(
    "build",
    [
        lambda f: charts.spend_by_agent(f),
        lambda f: charts.latency_histogram(f),
        lambda f: charts.latency_by_receiver(f),
        lambda f: charts.edge_sankey(f),
        lambda f: charts.trace_waterfall(f),
        lambda f: charts.compounding(f),
        lambda f: charts.state_funnel(f),
        lambda f: charts.void_reasons(f),
    ],
)
def test_an_empty_frame_gives_a_figure_that_says_so(build: object) -> None:
    fig = build(pd.DataFrame())  # type: ignore[operator]
    assert fig.data == ()
    assert "No" in fig.layout.annotations[0].text


@pytest.mark.parametrize(
    "name", ["<script>alert(1)</script>", '<a href="javascript:alert(1)">x</a>', "<b>bold</b>"]
)
def test_trace_content_reaches_plotly_escaped(name: str) -> None:
    """Plotly renders a subset of HTML in labels; trace content must show literally."""
    fig = charts.spend_by_agent(
        pd.DataFrame({"agent": [name], "phase": ["commit"], "cost_usd": [1.0]})
    )
    label = fig.data[0].y[0]
    assert "<" not in label and "&lt;" in label
    sankey = charts.edge_sankey(
        pd.DataFrame({"sender": [name], "receiver": ["x"], "state": ["void"], "handoffs": [1]})
    )
    assert all("<" not in label for label in sankey.data[0].node.label)
    assert charts.text([name]) == [
        name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    ]


def test_cost_per_workflow_bins_every_workflow_and_marks_the_mean() -> None:
    costs = [0.01] * 30 + [0.03] * 9 + [0.5]
    fig = charts.cost_per_workflow(pd.DataFrame({"cost_usd": costs}))
    bars = fig.data[0]
    assert sum(bars.y) == len(costs)
    assert len(bars.x) == 40
    # Each bar spans its bin: the costs fall in the bins the bars cover.
    lows = [x - w / 2 for x, w in zip(bars.x, bars.width, strict=True)]
    highs = [x + w / 2 for x, w in zip(bars.x, bars.width, strict=True)]
    assert lows[0] == pytest.approx(0.01) and highs[-1] == pytest.approx(0.5)
    assert (bars.y[0], bars.y[1], bars.y[-1]) == (30, 9, 1)
    mean = sum(costs) / len(costs)
    assert [s.x0 for s in fig.layout.shapes] == [pytest.approx(mean)]
    assert charts.cost_per_workflow(pd.DataFrame({"cost_usd": []})).data == ()
