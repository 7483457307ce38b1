"""Rolling p95 per receiver over the loaded spans, its edges, cooldown and alert memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from auditor.audit import prepare
from auditor.loading.load import TraceSet, append_lines, connect
from auditor.watch.dedupe import Cooldown, Deduper
from auditor.watch.p95 import EdgeTracker, Point, SampleWindow
from auditor.watch.state import WatchState, load_state, save_state
from collector.errors import ConfigurationError
from tests.support.watch import otlp_line, validate_span

T0 = 1_700_000_000.0


def fresh() -> TraceSet:
    ts = TraceSet(con=connect())
    prepare(ts.con)
    return ts


def load(ts: TraceSet, spans: list[dict], *, first_line: int = 1) -> None:
    lines = [(first_line + i, otlp_line([sp])) for i, sp in enumerate(spans)]
    append_lines(ts, lines, file="t.jsonl")


def tracker(cooldown_s: float = 0.0, min_samples: int = 5) -> EdgeTracker:
    return EdgeTracker(
        budget_s=0.5, min_samples=min_samples, window_s=60, cooldown=Cooldown(cooldown_s=cooldown_s)
    )


def test_window_p95_is_per_receiver_and_in_event_time():
    ts = fresh()
    window = SampleWindow(ts.con, window_s=10)
    spans = [validate_span(trace=i, latency_s=0.1 * (i + 1), end_s=T0 + i) for i in range(20)]
    spans += [validate_span(trace=100, latency_s=9.0, receiver="editor", end_s=T0)]
    load(ts, spans)
    assert window.ingest() == 21
    points = window.points()
    assert window.points() == []  # each sample is evaluated once
    writer = [p for p in points if p.receiver == "writer"]
    assert [p.samples for p in writer][:3] == [1, 2, 3]
    # At t=19 the 10 s window holds samples 9..19 (inclusive bounds): 11 samples.
    last = writer[-1]
    assert last.samples == 11
    expected = sorted(0.1 * (i + 1) for i in range(9, 20))
    # quantile_cont: linear interpolation between the 10th and 11th of 11 values.
    assert last.p95_s == pytest.approx(expected[9] + 0.5 * (expected[10] - expected[9]))
    (editor,) = [p for p in points if p.receiver == "editor"]
    assert (editor.samples, editor.p95_s) == (1, 9.0)


def test_duplicate_spans_are_one_sample_and_samples_survive_export():
    ts = fresh()
    window = SampleWindow(ts.con, window_s=60)
    load(ts, [validate_span(trace=1, latency_s=1.0, end_s=T0)])
    load(ts, [validate_span(trace=1, latency_s=1.0, end_s=T0)], first_line=2)
    assert window.ingest() == 1
    saved = json.loads(json.dumps(window.export()))
    again = SampleWindow(fresh().con, window_s=60)
    again.restore(saved)
    assert again.export() == saved and again.points() == []


def points(values: list[float], start: float = 0.0, receiver: str = "writer") -> list[Point]:
    return [
        Point(receiver, int((T0 + start + i) * 1e9), v, samples=i + 1) for i, v in enumerate(values)
    ]


def test_one_alert_when_breaching_starts_and_one_when_it_recovers():
    edges = tracker()
    fired = list(edges.feed(points([2.0] * 4 + [2.0] * 10 + [0.2] * 3 + [0.1] * 3)))
    assert [(a.status, a.samples) for a in fired] == [("firing", 5), ("resolved", 15)]
    assert fired[0].rule == "validation-p95-over-budget" and fired[0].receiver == "writer"
    assert fired[0].value == 2.0 and fired[0].threshold == 0.5 and fired[0].window_s == 60
    assert edges.breaching() == []


def test_no_decision_below_min_samples():
    assert list(tracker(min_samples=50).feed(points([9.0] * 49))) == []


def test_cooldown_holds_back_a_new_breach_but_never_a_recovery():
    edges = tracker(cooldown_s=30)
    seq = [1.0] * 6 + [0.1] + [1.0] * 10 + [0.1] * 30 + [1.0] * 5
    fired = [(a.status, round(a.event_time_ns / 1e9 - T0)) for a in edges.feed(points(seq))]
    # Breach at t=4 (the 5th sample), recovery at t=6; the breach from t=7 is inside the
    # 30 s cooldown and held back until it recovers at t=17; the breach at t=47 is past it.
    assert fired == [("firing", 4), ("resolved", 6), ("firing", 47)]


def test_points_older_than_the_last_evaluated_are_ignored_for_edges():
    edges = tracker()
    list(edges.feed(points([0.1] * 10, start=100)))
    assert list(edges.feed(points([9.0] * 10, start=0))) == []


def test_edge_state_and_cooldown_survive_a_restart():
    cooldown = Cooldown(cooldown_s=300)
    edges = EdgeTracker(budget_s=0.5, min_samples=1, window_s=60, cooldown=cooldown)
    assert len(list(edges.feed(points([1.0])))) == 1
    saved = json.loads(json.dumps({"e": edges.to_json(), "c": cooldown.to_json()}))
    cooldown2 = Cooldown(cooldown_s=300)
    cooldown2.load(saved["c"])
    again = EdgeTracker(budget_s=0.5, min_samples=1, window_s=60, cooldown=cooldown2)
    again.load(saved["e"])
    assert again.breaching() == ["writer"]
    assert list(again.feed(points([2.0], start=5))) == []
    assert [a.status for a in again.feed(points([0.1], start=6))] == ["resolved"]


def test_dedupe_is_bounded_by_count_and_event_time():
    d = Deduper(max_keys=3, memory_s=10)
    assert d.first("r", "a", 0) and not d.first("r", "a", 0) and d.first("other", "a", 0)
    for key in "bcd":
        d.first("r", key, int(5e9))
    assert len(d) == 3 and not d.seen("r", "a")
    d.forget_before(int(16e9))
    assert len(d) == 0
    d.first("r", "x", 1)
    restored = Deduper()
    restored.load(json.loads(json.dumps(d.to_json())))
    assert restored.seen("r", "x")


def test_state_file_round_trip_and_damage(tmp_path: Path):
    path = tmp_path / "sub" / "state.json"
    assert load_state(path) == WatchState()
    save_state(path, WatchState(dedupe={"seen": [["t", 1]]}, outbox={"webhook": [{"rule": "x"}]}))
    back = load_state(path)
    assert back.dedupe == {"seen": [["t", 1]]} and back.outbox == {"webhook": [{"rule": "x"}]}
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]  # no temporary left over
    path.write_text('{"version": 1, "files": [{"path": "a"}]')
    with pytest.raises(ConfigurationError, match="damaged.*move it away"):
        load_state(path)
