"""The dashboard over ClickHouse (embedded through chdb) against the dashboard over files.

One chdb table for the module, created with the Collector exporter's DDL and filled with the
sample traces by the loader the ClickHouse audit tests use. Every page's data functions,
with and without filters, must give what they give on DuckDB for the same traces; every
page under AppTest must show the metrics the DuckDB dashboard shows; a bad source must be a
one-line message. Nothing here states an expected number: the DuckDB dashboard is the
reference.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.support.paths import REPO

pytest.importorskip("chdb")

from streamlit.testing.v1 import AppTest  # noqa: E402

from auditor import load_traces  # noqa: E402
from auditor.cli import main  # noqa: E402
from auditor.clickhouse.cursor import ClickHouseSource  # noqa: E402
from auditor.clickhouse.engine import ChdbEngine  # noqa: E402
from auditor.clickhouse.loader import create_table, fill  # noqa: E402
from auditor.errors import AuditError  # noqa: E402
from auditor.loading.load import TraceSet  # noqa: E402
from dashboard import cache, data, trace_data  # noqa: E402
from dashboard.clickhouse import SOURCE_ENV, ClickHouseSpec  # noqa: E402
from dashboard.data.scope import ready  # noqa: E402
from dashboard.selection import Filters  # noqa: E402
from dashboard.source import PATHS_ENV  # noqa: E402

ROOT = REPO
APP = ROOT / "dashboard" / "app.py"
SAMPLE = ROOT / "sample_traces" / "fault-mix"
PAGES = ["spend", "reliability", "latency", "handoffs", "findings"]


@pytest.fixture(scope="module")
def chdb_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A chdb data directory holding the sample traces in the exporter's table."""
    folder = tmp_path_factory.mktemp("chdb-dashboard")
    engine = ChdbEngine(str(folder))
    fill(engine, create_table(engine, "otel", "otel_traces"), load_traces(SAMPLE))
    yield folder
    engine.close()


@pytest.fixture(scope="module")
def sources(chdb_dir: Path) -> Iterator[tuple[TraceSet, Any]]:
    """The same traces as the DuckDB dashboard loads them and as a ClickHouse source."""
    traces = load_traces(SAMPLE)
    ready(traces)
    # Through the app's own cache: the ClickHouse app below finds this source opened.
    loaded = cache.load_clickhouse(ClickHouseSpec(url=f"chdb://{chdb_dir}"))
    assert loaded.source is not None, loaded.error
    yield traces, loaded.source
    # chdb serves one data directory per process: close every session this module's apps
    # opened (their script runs keep their own loaded sources), so that the next module run
    # by this process (tests run in several) can open a directory of its own.
    cache.reload()
    gc.collect()
    for opened in [o for o in gc.get_objects() if isinstance(o, ClickHouseSource)]:
        opened.close()


def _same(a: Any, b: Any, path: str = "") -> list[str]:
    """Where ``a`` and ``b`` differ; numbers within 1e-9 (sums in another order), integer
    and float columns alike (DuckDB sums to HUGEINT, shown as float)."""
    if isinstance(a, pd.DataFrame):
        if list(a.columns) != list(b.columns) or len(a) != len(b):
            return [f"{path}: {list(a.columns)} x {len(a)} against {list(b.columns)} x {len(b)}"]
        return _same(a.to_dict("records"), b.to_dict("records"), path)
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return [
            d
            for f in dataclasses.fields(a)
            for d in _same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
        ]
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in _same(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{path}: {len(a)} against {len(b)} items"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _same(x, y, f"{path}[{i}]")
        ]
    if _missing(a) and _missing(b):
        return []
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool):
        ok = math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
        return [] if ok else [f"{path}: {a!r} against {b!r}"]
    return [] if a == b else [f"{path}: {a!r} against {b!r}"]


def _missing(value: Any) -> bool:
    return value is None or value is pd.NaT or (isinstance(value, float) and value != value)


FUNCTIONS: list[tuple[str, Callable[..., Any], dict[str, Any]]] = [
    ("overview", data.overview, {}),
    ("activity", data.activity_over_time, {"width": timedelta(minutes=1)}),
    ("agent_spend", data.agent_spend, {}),
    ("model_spend", data.model_spend, {}),
    ("workflow_spend", data.workflow_spend, {}),
    ("edge_spend", data.edge_spend, {}),
    ("voided_spend", data.voided_spend, {}),
    ("agent_reliability", data.agent_reliability, {}),
    ("edge_reliability", data.edge_reliability, {}),
    ("compounding", data.compounding, {}),
    ("latency_by_receiver", data.latency_by, {}),
    ("latency_by_edge", data.latency_by, {"by": "edge"}),
    ("latency_percentiles", data.latency_percentiles, {}),
    ("latency_histogram", data.latency_histogram, {"bin_ms": 50.0, "cap_ms": 4000.0}),
    ("latency_over_time", data.latency_over_time, {"width": timedelta(seconds=30)}),
    ("set_findings", data.set_findings, {}),
    ("trace_ids", data.trace_ids, {}),
]


def _filters(traces: TraceSet) -> dict[str, Filters]:
    bounds = data.bounds(traces.con)
    assert bounds.start and bounds.end and bounds.agents and bounds.workflows
    return {
        "none": Filters(),
        "agent": Filters(agents=(bounds.agents[-1],)),
        "later-half": Filters(start=bounds.start + (bounds.end - bounds.start) / 2),
        "workflow-and-end": Filters(
            workflows=bounds.workflows[:1], end=bounds.start + (bounds.end - bounds.start) / 3
        ),
    }


@pytest.mark.parametrize("filtered", ["none", "agent", "later-half", "workflow-and-end"])
def test_every_page_query_gives_the_duckdb_answer(
    sources: tuple[TraceSet, Any], filtered: str
) -> None:
    traces, remote = sources
    filters = _filters(traces)[filtered]
    differences = {}
    for name, function, options in FUNCTIONS:
        want = function(traces.con, filters=filters, **options)
        got = function(remote, filters=filters, **options)
        if name == "trace_ids":
            assert want == got
            continue
        found = _same(want, got, name)
        if found:
            differences[name] = found[:3]
    assert not differences


def test_bounds_and_findings_agree(sources: tuple[TraceSet, Any]) -> None:
    traces, remote = sources
    assert _same(data.bounds(traces.con), data.bounds(remote)) == []
    want, got = data.findings(traces.con), data.findings(remote)
    assert len(want) > 0
    assert _same(want, got) == []
    # A filter keeps the findings about its traces, and the set-level ones of the selection.
    filters = _filters(traces)["agent"]
    kept = data.within(
        traces.con, want, data.set_findings(traces.con, filters=filters), filters=filters
    )
    kept_ch = data.within(remote, got, data.set_findings(remote, filters=filters), filters=filters)
    assert 0 < len(kept_ch) < len(got)
    assert _same(kept, kept_ch) == []


def test_filters_narrow_what_clickhouse_computes(sources: tuple[TraceSet, Any]) -> None:
    _, remote = sources
    everything = data.overview(remote).summary
    filters = _filters(sources[0])
    later = data.overview(remote, filters=filters["later-half"]).summary
    agent = data.overview(remote, filters=filters["agent"]).summary
    assert 0 < later["traces"] < everything["traces"]
    assert 0 < agent["traces"] < everything["traces"]


# -----------------------------------------------------------------------------------------
# The app itself
# -----------------------------------------------------------------------------------------
def _app(
    monkeypatch: pytest.MonkeyPatch, *, paths: list[Path] | None = None, spec: str | None = None
) -> AppTest:
    monkeypatch.delenv(PATHS_ENV, raising=False)
    monkeypatch.delenv(SOURCE_ENV, raising=False)
    if paths is not None:
        monkeypatch.setenv(PATHS_ENV, str(paths[0]))
    if spec is not None:
        monkeypatch.setenv(SOURCE_ENV, spec)
    return AppTest.from_file(str(APP), default_timeout=180)


def _shown(at: AppTest) -> dict[str, Any]:
    assert not at.exception, [e.message for e in at.exception]
    assert not at.warning, [w.value for w in at.warning]
    assert not at.error, [e.value for e in at.error]
    return {
        "metrics": {m.label: m.value for m in at.metric},
        "charts": len(at.get("plotly_chart")),
        "tables": [len(d.value) for d in at.dataframe],
    }


class _Apps:
    """The DuckDB dashboard and the ClickHouse dashboard over the same traces; each runs
    with its own source in the environment (the app reads it on every run)."""

    def __init__(self, chdb_dir: Path) -> None:
        self.envs = [
            {PATHS_ENV: str(SAMPLE)},
            {SOURCE_ENV: ClickHouseSpec(url=f"chdb://{chdb_dir}").to_env()},
        ]
        self.apps = [AppTest.from_file(str(APP), default_timeout=180) for _ in self.envs]

    def run(self, index: int, step: Callable[[AppTest], AppTest]) -> AppTest:
        with pytest.MonkeyPatch.context() as mp:
            for name in (PATHS_ENV, SOURCE_ENV):
                mp.delenv(name, raising=False)
            for name, value in self.envs[index].items():
                mp.setenv(name, value)
            return step(self.apps[index])

    def both(self, step: Callable[[AppTest], AppTest]) -> tuple[dict[str, Any], dict[str, Any]]:
        return _shown(self.run(0, step)), _shown(self.run(1, step))


@pytest.fixture(scope="module")
def apps(chdb_dir: Path, sources: tuple[TraceSet, Any]) -> _Apps:
    return _Apps(chdb_dir)


@pytest.mark.parametrize("page", ["overview", *PAGES])
def test_each_page_shows_what_the_duckdb_dashboard_shows(apps: _Apps, page: str) -> None:
    want, got = apps.both(lambda at: at.switch_page(f"views/{page}.py").run())
    assert want["metrics"] or want["charts"], page
    if page == "latency":  # watch's alerts follow trace files: the DuckDB page adds them
        watched = {k: v for k, v in want["metrics"].items() if k.endswith("(firing)")}
        assert watched
        want["metrics"] = {k: v for k, v in want["metrics"].items() if k not in watched}
    assert got["metrics"] == want["metrics"]
    assert got["charts"] == want["charts"]
    if page != "latency":  # the DuckDB page adds watch's alerts, which follow files
        assert got["tables"] == want["tables"]
    caption = " ".join(c.value for c in apps.apps[1].sidebar.caption)
    assert "Queried inside ClickHouse" in caption


def test_a_sidebar_filter_changes_the_page_as_on_duckdb(apps: _Apps) -> None:
    before = _shown(apps.run(1, lambda at: at.switch_page("views/spend.py").run()))

    def choose(at: AppTest) -> AppTest:
        at.switch_page("views/spend.py").run()
        agents = at.sidebar.multiselect(key="filter_agents")
        return agents.select(agents.options[-1]).run()

    want, got = apps.both(choose)
    assert got["metrics"] == want["metrics"]
    assert got["metrics"]["Total spend"] != before["metrics"]["Total spend"]
    for index in (0, 1):
        apps.run(index, lambda at: at.sidebar.multiselect(key="filter_agents").set_value([]).run())


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("clickhouse://alice:secret@localhost:8123/otel", "credentials do not belong in the URL"),
        ("clickhouse://localhost:port/otel", "the port is not a number"),
        ("chdb://", "name the data directory"),
    ],
)
def test_a_bad_url_is_one_line_on_the_command_line(
    url: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dashboard", url, "--port", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1
    assert "Traceback" not in err and "secret" not in err


def test_a_bad_source_in_the_app_is_a_message(
    monkeypatch: pytest.MonkeyPatch, chdb_dir: Path
) -> None:
    spec = ClickHouseSpec(url="clickhouse://bob:hunter2@localhost:8123/otel").to_env()
    at = _app(monkeypatch, spec=spec).run()
    assert not at.exception
    shown = " ".join(str(c.value) for c in at.code)
    assert "credentials do not belong in the URL" in shown
    assert "hunter2" not in shown
    # A table that is not there names the table and the option.
    spec = ClickHouseSpec(url=f"chdb://{chdb_dir}", table="otel_trace").to_env()
    at = _app(monkeypatch, spec=spec).run()
    assert not at.exception
    shown = " ".join(str(c.value) for c in at.code)
    assert "has no table 'otel_trace'" in shown and "--table" in shown
    # A time range without spans says so rather than showing empty pages.
    spec = ClickHouseSpec(url=f"chdb://{chdb_dir}", since="2100-01-01T00:00:00").to_env()
    at = _app(monkeypatch, spec=spec).run()
    assert not at.exception
    assert "no span in this table and time range" in " ".join(str(c.value) for c in at.code)


def _sourceless(frame: pd.DataFrame) -> pd.DataFrame:
    """A span's details without the ``source`` rows: the exporter keeps no file and line."""
    return frame[frame["section"] != "source"].reset_index(drop=True)


def _picked_traces(traces: TraceSet) -> list[str]:
    """A few traces worth reading: the first two with failures and the most expensive."""
    failed = trace_data.trace_list(traces.con, only="failed", limit=2)["trace_id"].tolist()
    costly = trace_data.trace_list(traces.con, only="expensive", limit=1)["trace_id"].tolist()
    return list(dict.fromkeys(failed + costly))


def _same_trace(traces: TraceSet, remote: Any, trace_id: str) -> int:
    """Assert that one trace's spans, and each span's details and events, read the same on
    both engines; the number of events with attributes compared."""
    spans = trace_data.trace_spans(traces.con, trace_id)
    assert len(spans) > 1
    assert _same(spans, trace_data.trace_spans(remote, trace_id), trace_id) == []
    events = 0
    for span_id in spans["span_id"]:
        want = trace_data.span_events(traces.con, trace_id, span_id)
        assert _same(want, trace_data.span_events(remote, trace_id, span_id), span_id) == []
        events += int(want["attributes"].str.contains("=").sum())
        want = _sourceless(trace_data.span_attributes(traces.con, trace_id, span_id))
        got = trace_data.span_attributes(remote, trace_id, span_id)
        assert _same(want, got, span_id) == []
    return events


def test_the_trace_page_queries_give_the_duckdb_answer(sources: tuple[TraceSet, Any]) -> None:
    traces, remote = sources
    agent = _filters(traces)["agent"]
    for only in ("failed", "expensive", "all"):
        for filters in (Filters(), agent):
            want = trace_data.trace_list(traces.con, filters=filters, only=only, limit=50)
            got = trace_data.trace_list(remote, filters=filters, only=only, limit=50)
            assert len(want) > 0
            assert _same(want, got, only) == []
    events = sum(_same_trace(traces, remote, trace_id) for trace_id in _picked_traces(traces))
    assert events > 0  # events with attributes were compared
    assert trace_data.trace_spans(remote, "0" * 32).empty


def test_a_framework_trace_reads_the_same(chdb_dir: Path, sources: tuple[TraceSet, Any]) -> None:
    """A trace another framework wrote (its own attributes, events with attributes), in a
    table of its own beside the module's (chdb opens one data directory per process)."""
    from dashboard.clickhouse import open_source

    fixture = ROOT / "tests" / "fixtures" / "frameworks" / "langgraph-openinference"
    traces = load_traces(fixture)
    ready(traces)
    engine = ChdbEngine(str(chdb_dir))
    fill(engine, create_table(engine, "otel", "framework_traces"), traces)
    engine.close()
    remote: Any = open_source(ClickHouseSpec(url=f"chdb://{chdb_dir}", table="framework_traces"))
    try:
        listed = trace_data.trace_list(traces.con)
        assert _same(listed, trace_data.trace_list(remote)) == []
        (trace_id,) = listed["trace_id"]
        assert _same_trace(traces, remote, trace_id) > 0
    finally:
        remote.close()


def test_the_trace_page_shows_what_the_duckdb_dashboard_shows(
    apps: _Apps, sources: tuple[TraceSet, Any]
) -> None:
    traces, _ = sources
    trace_id = _picked_traces(traces)[0]
    spans = trace_data.trace_spans(traces.con, trace_id)
    index = next(
        i
        for i, span_id in enumerate(spans["span_id"])
        if not trace_data.span_events(traces.con, trace_id, span_id).empty
    )

    def open_trace(at: AppTest) -> AppTest:
        at.switch_page("views/trace.py").run()
        at.text_input(key="trace").set_value(trace_id).run()
        return at.selectbox(key="trace_span").set_value(index).run()

    want, got = apps.both(open_trace)
    assert want["metrics"] and got["metrics"] == want["metrics"]
    assert got["charts"] == want["charts"] == 1
    frames = [[d.value for d in apps.apps[i].dataframe] for i in (0, 1)]
    assert len(frames[0]) == len(frames[1]) == 4  # the list, spans, details, events
    for ours, theirs in zip(*frames, strict=True):
        if "section" in ours.columns:
            ours = _sourceless(ours)
        assert _same(ours.reset_index(drop=True), theirs.reset_index(drop=True)) == []
    events = [f for f in frames[1] if "attributes" in f.columns]
    assert len(events) == 1 and len(events[0]) > 0


def test_the_source_travels_to_the_app_in_the_environment(tmp_path: Path) -> None:
    from dashboard.cli import build_env
    from dashboard.clickhouse import spec_from_env

    spec = ClickHouseSpec(url=f"chdb://{tmp_path}", table="spans", since="24h", until=None)
    env = build_env([], base={SOURCE_ENV: "stale"}, remote=spec)
    assert spec_from_env(env) == spec
    assert json.loads(env[PATHS_ENV]) == []
    assert SOURCE_ENV not in build_env([tmp_path], base=env)
    with pytest.raises(AuditError, match=SOURCE_ENV):
        spec_from_env({SOURCE_ENV: "{not json"})
