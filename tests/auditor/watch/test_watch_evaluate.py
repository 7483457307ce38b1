"""``auditor.watch.evaluate_traces``: watch's alerts over a trace set that is already loaded,
including a Parquet store, which ``watch`` itself cannot follow."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from auditor import load_traces
from auditor.stores.compact import write_parquet
from auditor.watch import Alert, Watcher, WatchSettings, evaluate_traces
from tests.support.paths import REPO

SAMPLES = REPO / "sample_traces"


class _Collect:
    name = "collect"

    def __init__(self) -> None:
        self.alerts: list[Alert] = []

    def send(self, alert: Alert) -> None:
        self.alerts.append(alert)

    def pending(self) -> list[Alert]:
        return []

    def close(self, *, timeout_s: float) -> None:
        return None


def _key(alert: Alert) -> tuple[object, ...]:
    return (alert.rule, alert.status, alert.key, alert.event_time_ns, alert.value, alert.summary)


def _watch_once(folder: Path, settings: WatchSettings) -> list[Alert]:
    sink = _Collect()
    Watcher(folder, settings=settings, sinks=[sink], state_path=None).run(once=True)
    return sink.alerts


def test_same_alerts_as_watch_once_on_files_and_on_their_parquet_store(tmp_path: Path):
    folder = tmp_path / "fault-mix"
    shutil.copytree(SAMPLES / "fault-mix", folder)
    settings = WatchSettings(validation_timeout_s=2.0, p95_budget_s=0.5)
    expected = sorted(map(_key, _watch_once(folder, settings)))
    rules = {k[0] for k in expected}
    # The sample breaks both alert rules, so an evaluation that misses one cannot pass.
    assert {"slow-validation", "validation-p95-over-budget"} <= rules

    from_files = evaluate_traces(load_traces(folder), settings)
    assert sorted(map(_key, from_files)) == expected
    assert [a.event_time_ns for a in from_files] == sorted(a.event_time_ns for a in from_files)

    store = tmp_path / "store.parquet"
    write_parquet(load_traces(folder), store)
    assert sorted(map(_key, evaluate_traces(load_traces(store), settings))) == expected


def test_repeated_evaluations_are_independent_and_follow_the_thresholds(tmp_path: Path):
    traces = load_traces(SAMPLES / "fault-mix")
    strict = WatchSettings(validation_timeout_s=0.05, p95_budget_s=0.01)
    loose = WatchSettings(validation_timeout_s=60.0, p95_budget_s=60.0)
    first = evaluate_traces(traces, strict)
    # A second run on the same trace set starts from nothing: no sample or alert memory leaks.
    assert sorted(map(_key, evaluate_traces(traces, strict))) == sorted(map(_key, first))
    slow = [a for a in first if a.rule == "slow-validation"]
    assert slow and all(a.value is not None and a.value > 0.05 for a in slow)
    assert evaluate_traces(traces, loose) == []
    # The trace set itself is untouched: its own connection holds no watch table.
    tables = traces.con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_name = 'watch_samples'"
    ).fetchall()
    assert tables == []


def test_the_docs_example_runs_and_prints_the_alerts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    docs = (SAMPLES.parent / "docs" / "watch.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", docs, re.S) if "evaluate_traces" in b]
    monkeypatch.chdir(SAMPLES.parent)
    exec(compile(block, "docs/watch.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    expected = evaluate_traces(load_traces(SAMPLES / "fault-mix"), WatchSettings())
    assert printed == [f"{a.rule} {a.status} {a.summary}" for a in expected] != []


def test_a_validation_that_never_got_an_answer_alerts(tmp_path: Path):
    from collector import schema as s
    from tests.support.watch import otlp_line, validate_span

    def unanswered(trace: int, waited_s: float) -> dict[str, object]:
        span = validate_span(trace=trace, latency_s=waited_s, decision=s.DECISION_TIMEOUT)
        span["attributes"] = [a for a in span["attributes"] if a["key"] != s.VALIDATION_LATENCY_MS]
        return span

    # Trace 1 waited out the 2 s clock with no answer; trace 2's reply failed at once.
    (tmp_path / "spans.jsonl").write_text(
        otlp_line([unanswered(1, 2.5), unanswered(2, 0.003)]), encoding="utf-8"
    )
    alerts = evaluate_traces(load_traces(tmp_path), WatchSettings())
    assert [(a.rule, a.trace_id, a.value) for a in alerts] == [
        ("slow-validation", f"{1:032x}", None)
    ]
    assert "got no answer (timeout 2s)" in alerts[0].summary
    sink = _watch_once(tmp_path, WatchSettings())
    assert [(a.rule, a.summary) for a in sink] == [(a.rule, a.summary) for a in alerts]
