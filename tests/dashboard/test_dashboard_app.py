"""Every dashboard page under Streamlit's AppTest, against the bundled sample traces.

The numbers each page shows are checked against the auditor's own figures and findings for
the same traces (``auditor.audit``), formatted the way the dashboard formats them. Empty,
missing and unreadable trace sets must give a message, never an exception, and trace
content holding HTML must reach the page as text.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from auditor import load_traces
from auditor.audit import AuditResult, audit
from dashboard import data, format
from dashboard.source import PATHS_ENV
from dashboard.ui import csv_text
from tests.support.dashboard_scenario import HOSTILE, build
from tests.support.paths import REPO

ROOT = REPO
APP = ROOT / "dashboard" / "app.py"
SAMPLE = ROOT / "sample_traces" / "fault-mix"
PAGES = ["spend", "reliability", "latency", "handoffs", "findings", "trace"]
LOGS = ROOT / "tests" / "fixtures" / "otlp" / "opentelemetry-proto__examples__logs.json"


def _app(monkeypatch: pytest.MonkeyPatch, paths: list[Path] | str | None) -> AppTest:
    if paths is None:
        monkeypatch.delenv(PATHS_ENV, raising=False)
    else:
        value = paths if isinstance(paths, str) else json.dumps([str(p) for p in paths])
        monkeypatch.setenv(PATHS_ENV, value)
    return AppTest.from_file(str(APP), default_timeout=120)


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _no_trouble(at: AppTest) -> None:
    assert not at.exception, [e.message for e in at.exception]
    assert not at.warning, [w.value for w in at.warning]


@pytest.fixture(scope="module")
def expected() -> AuditResult:
    return audit(load_traces(SAMPLE))


@pytest.fixture(scope="module")
def app() -> Iterator[AppTest]:
    """One app session over the sample traces, shared by the page tests (pages run in order)."""
    with pytest.MonkeyPatch.context() as mp:
        at = _app(mp, [SAMPLE]).run()
        yield at


def _page(at: AppTest, name: str) -> AppTest:
    return at.switch_page(f"views/{name}.py").run()


# -----------------------------------------------------------------------------------------
# The numbers on each page
# -----------------------------------------------------------------------------------------
def test_the_overview_shows_the_auditors_figures(app: AppTest, expected: AuditResult) -> None:
    _no_trouble(app)
    shown = _metrics(app)
    e2e, head = expected.figures.reliability, expected.figures.summary
    assert shown["Workflows"] == format.count(e2e["workflows"]) == "150"
    assert shown["End-to-end success"] == format.pct(e2e["observed"])
    assert shown["Projected from per-agent rates"] == format.pct(e2e["projected"])
    assert shown["Handoffs"] == format.count(head["handoffs"])
    assert shown["Total spend"] == format.usd(head["cost_usd"])
    assert shown["Open findings"] == format.count(len(expected.findings))
    assert len(app.get("plotly_chart")) == 1
    sidebar = " ".join(c.value for c in app.sidebar.caption)
    assert f"{head['spans']:,} spans" in sidebar


def test_the_spend_page_adds_up_to_the_auditors_total(app: AppTest, expected: AuditResult) -> None:
    at = _page(app, "spend")
    _no_trouble(at)
    assert _metrics(at)["Total spend"] == format.usd(expected.figures.summary["cost_usd"])
    assert len(at.get("plotly_chart")) == 5
    per_agent = at.dataframe[0].value
    auditor_phases = expected.figures.spend["phases"]
    shown = sorted(per_agent["cost"])
    assert shown == sorted(format.usd(p["cost_usd"]) for p in auditor_phases)
    # What bought nothing: the audit's waste, every cause, the same total.
    waste = expected.figures.spend["waste"]["total"]
    assert _metrics(at)["Spent on nothing"] == format.usd(sum(w["cost_usd"] for w in waste))
    causes = at.dataframe[-1].value
    assert sorted(causes["cause"]) == sorted(w["cause"] for w in waste)


def test_the_reliability_page_shows_observed_and_projected(
    app: AppTest, expected: AuditResult
) -> None:
    at = _page(app, "reliability")
    _no_trouble(at)
    e2e = expected.figures.reliability
    shown = _metrics(at)
    assert shown["Observed end-to-end"] == format.pct(e2e["observed"])
    assert shown["Projected (product of agents)"] == format.pct(e2e["projected"])
    assert shown["Handoff retries / 1,000 workflows"] == f"{e2e['retries_per_1000_workflows']:,.1f}"
    assert shown["Full-chain restarts / 1,000 workflows"] == (
        f"{e2e['restarts_per_1000_workflows']:,.1f}"
    )
    assert len(at.get("plotly_chart")) == 4
    agents = at.dataframe[0].value.set_index("agent")
    for row in expected.figures.agents:
        if row.get("handoffs"):
            assert agents.loc[row["agent"], "handoff_success_rate"] == pytest.approx(
                row["handoff_success_rate"]
            )


def test_the_latency_page_shows_late_answers_and_receivers_over_budget(
    app: AppTest, expected: AuditResult
) -> None:
    at = _page(app, "latency")
    _no_trouble(at)
    receivers = expected.figures.latency["receivers"]
    shown = _metrics(at)
    assert shown["Late answers"] == format.count(sum(r["late"] for r in receivers))
    assert shown["Receivers over budget"] == format.count(sum(r["over_budget"] for r in receivers))
    assert len(at.get("plotly_chart")) == 3
    table = at.dataframe[-2].value.set_index("receiver")
    for row in receivers:
        assert table.loc[row["receiver"], "p95_ms"] == pytest.approx(row["p95_ms"])
    # watch's own rules ran over the same files: one slow-validation alert per slow handoff.
    slow = [f for f in expected.findings if f.rule == "slow-validation"]
    alerts = at.dataframe[0].value
    fired = alerts[(alerts["rule"] == "slow-validation") & (alerts["status"] == "firing")]
    assert len(fired) == len({(f.trace_id, f.task_id, f.receiver) for f in slow}) > 0


def test_a_parquet_store_gets_the_same_watch_alerts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, app: AppTest
) -> None:
    from auditor.stores.compact import write_parquet

    store = tmp_path / "store.parquet"
    write_parquet(load_traces(SAMPLE), store)
    at = _page(_app(monkeypatch, [store]).run(), "latency")
    _no_trouble(at)
    from_files = _page(app, "latency").dataframe[0].value
    from_store = at.dataframe[0].value
    assert len(from_store) == len(from_files) > 0
    assert from_store.to_dict("records") == from_files.to_dict("records")


def test_the_handoffs_page_shows_the_funnel_and_the_flows(app: AppTest) -> None:
    at = _page(app, "handoffs")
    _no_trouble(at)
    assert len(at.get("plotly_chart")) == 3
    reasons = at.dataframe[1].value
    assert reasons["attempts"].sum() > 0 and "timeout" in set(reasons["reason"])


def test_the_findings_page_lists_every_finding(app: AppTest, expected: AuditResult) -> None:
    at = _page(app, "findings")
    _no_trouble(at)
    counts = expected.severity_counts()
    shown = _metrics(at)
    assert shown["Findings"] == format.count(len(expected.findings))
    assert shown["Errors"] == format.count(counts["error"])
    assert shown["Warnings"] == format.count(counts["warning"])
    listed = at.dataframe[1].value
    assert len(listed) == len(expected.findings)
    linked = listed["trace_id"].dropna()
    assert linked.str.startswith("trace?trace=").all()
    at.multiselect(key="findings_rule").select("slow-validation").run()
    slow = sum(1 for f in expected.findings if f.rule == "slow-validation")
    assert _metrics(at)["Findings"] == format.count(slow)


def test_the_trace_page_lists_failed_traces_first(app: AppTest) -> None:
    at = _page(app, "trace")
    _no_trouble(at)
    listing = at.dataframe[0].value
    assert (listing["void"] > 0).any() or (listing["outcome"] != "success").all()
    assert len(at.get("plotly_chart")) == 1


def test_the_trace_page_opens_a_trace_from_its_link(
    monkeypatch: pytest.MonkeyPatch, expected: AuditResult
) -> None:
    finding = next(f for f in expected.findings if f.rule == "slow-validation")
    at = _app(monkeypatch, [SAMPLE])
    at.query_params["trace"] = finding.trace_id  # what a link from the Findings page sets
    at = _page(at.run(), "trace")
    _no_trouble(at)
    assert at.text_input(key="trace").value == finding.trace_id
    waterfall = at.get("plotly_chart")
    assert len(waterfall) == 1
    spans = at.dataframe[1].value
    assert "timeout" in set(spans["decision"].dropna()) or spans["state"].eq("void").any()
    assert len(
        load_traces(SAMPLE)
        .con.execute("SELECT * FROM spans WHERE trace_id = ?", [finding.trace_id])
        .fetchall()
    ) == len(spans)


# -----------------------------------------------------------------------------------------
# Filters
# -----------------------------------------------------------------------------------------
def test_an_agent_filter_keeps_the_workflows_that_involve_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    con = load_traces(SAMPLE).con
    with_review = con.execute(
        """SELECT count(DISTINCT trace_id) FROM spans
           WHERE "gen_ai.operation.name" = 'invoke_workflow' AND trace_id IN (
               SELECT trace_id FROM spans WHERE 'review' IN
                   ("handoff.sender", "handoff.receiver", agent))"""
    ).fetchone()[0]
    at = _app(monkeypatch, [SAMPLE]).run()
    at.sidebar.multiselect(key="filter_agents").select("review").run()
    _no_trouble(at)
    assert _metrics(at)["Workflows"] == format.count(with_review)
    assert 0 < with_review < 150
    assert any("agents ` review `" in c.value for c in at.caption)
    at = _page(at, "spend")
    assert set(at.dataframe[0].value["agent"]) == {"review"}


# -----------------------------------------------------------------------------------------
# Empty, missing and unreadable input
# -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("paths", "says"),
    [
        (None, "No traces loaded yet."),
        ([LOGS], "These traces could not be used."),
        ([Path("/nonexistent/traces")], "These traces could not be used."),
        ('["unterminated', "These traces could not be used."),
    ],
    ids=["nothing", "logs-not-traces", "missing-path", "bad-variable"],
)
def test_bad_input_gets_a_message_on_every_page(
    monkeypatch: pytest.MonkeyPatch, paths: Any, says: str
) -> None:
    at = _app(monkeypatch, paths).run()
    for page in [None, *PAGES]:
        if page is not None:
            at = _page(at, page)
        assert not at.exception, (page, [e.message for e in at.exception])
        shown = [m.value for m in (*at.info, *at.error)]
        assert says in shown, (page, shown)
        assert not at.get("plotly_chart")
    if paths is not None:
        details = " ".join(c.value for c in at.code)
        assert details.strip(), "the reason must be shown"
        if paths and not isinstance(paths, str):
            assert Path(paths[0]).name in details or "Not found" in details


# -----------------------------------------------------------------------------------------
# Trace content is text
# -----------------------------------------------------------------------------------------
def test_html_in_trace_content_is_shown_as_text(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scenario = build(tmp_path)
    at = _app(monkeypatch, [scenario.path]).run()
    _no_trouble(at)
    seen_hostile = False
    for page in PAGES:
        at = _page(at, page)
        _no_trouble(at)
        for md in at.markdown:
            assert not md.proto.allow_html
            assert "<script" not in md.value and "<img" not in md.value
        for frame in at.dataframe:
            cells = frame.value.astype(str).to_numpy().ravel().tolist()
            seen_hostile |= HOSTILE in cells
    assert seen_hostile, "the hostile reason must be shown, verbatim, in a table"
    handoffs = _page(at, "handoffs")
    reasons = handoffs.dataframe[1].value
    assert HOSTILE in set(reasons["reason"])


def test_other_instrumentations_traces_show_their_spend(monkeypatch: pytest.MonkeyPatch) -> None:
    """The upstream OTLP files: no handshake at all, tokens under other libraries' keys, and a
    logs file among them that is listed as a problem while the rest is shown."""
    folder = ROOT / "tests" / "fixtures" / "otlp"
    at = _app(monkeypatch, [folder]).run()
    _no_trouble(at)
    assert _metrics(at)["Handoffs"] == "0"
    # The logs file, and the eight spans of the specification's example with empty ids.
    assert [e.label for e in at.sidebar.expander][0] == "9 input problems"
    problems = " ".join(c.value for c in at.sidebar.code)
    assert LOGS.name in problems and problems.count("no traceId and no spanId") == 8
    at = _page(at, "spend")
    _no_trouble(at)
    assert len(at.get("plotly_chart")) == 5
    for page in ("reliability", "latency", "handoffs", "findings", "trace"):
        at = _page(at, page)
        assert not at.exception, (page, [e.message for e in at.exception])


def test_a_long_findings_table_shows_its_first_rows_and_downloads_them_all(
    monkeypatch: pytest.MonkeyPatch, expected: AuditResult
) -> None:
    from dashboard import ui

    monkeypatch.setattr(ui, "TABLE_ROWS", 5)
    at = _page(_app(monkeypatch, [SAMPLE]).run(), "findings")
    _no_trouble(at)
    assert len(at.dataframe[1].value) == 5
    total = len(expected.findings)
    assert any(f"first 5 of {total:,} findings" in c.value for c in at.caption)
    (button,) = at.get("download_button")
    assert button.proto.label == f"Download {total:,} findings (CSV)"


def test_the_csv_download_quotes_cells_a_spreadsheet_would_run() -> None:
    frame = pd.DataFrame(
        {
            "message": ['=HYPERLINK("http://x")', "+1", "@sum", "plain", "-2", None],
            "value": [-1.5, 2.0, 3.0, 4.0, 5.0, 6.0],
        }
    )
    rows = list(csv.DictReader(io.StringIO(csv_text(frame))))
    assert [r["message"] for r in rows] == [
        '\'=HYPERLINK("http://x")',
        "'+1",
        "'@sum",
        "plain",
        "'-2",
        "",
    ]
    assert [float(r["value"]) for r in rows] == [-1.5, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert frame["message"].iloc[0].startswith("=")  # the frame itself is left alone


def test_the_rules_run_in_the_background_once_and_the_findings_page_reuses_them(
    monkeypatch: pytest.MonkeyPatch, expected: AuditResult
) -> None:
    import threading

    from dashboard import cache, data, ui

    runs: list[str] = []
    real = data.findings

    def counted(*args: Any, **kwargs: Any) -> Any:
        runs.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(data, "findings", counted)
    monkeypatch.setattr(ui, "AUTO_SPANS", 0)  # as on a large set: the overview asks first
    cache.reload()  # nothing cached or started by earlier tests
    at = _app(monkeypatch, [SAMPLE]).run()
    _no_trouble(at)
    for thread in threading.enumerate():
        if thread.name.startswith("handoffscope-findings"):
            thread.join(timeout=120)
    assert len(runs) == 1 and runs[0].startswith("handoffscope-findings"), runs
    at = _page(at, "findings")
    _no_trouble(at)
    assert _metrics(at)["Findings"] == format.count(len(expected.findings))
    assert len(runs) == 1, "the Findings page should read the background run's findings"


def test_the_background_rules_on_a_compacted_store_run_aside_at_low_priority(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, expected: AuditResult
) -> None:
    """A store read in place opens again in the background thread, whose DuckDB threads then
    run at the lowest priority: the pages' own queries keep the CPU."""
    import os
    import threading

    from auditor.cli import main
    from dashboard import cache, data, ui

    store = tmp_path / "store.parquet"
    assert main(["compact", str(SAMPLE), "--out", str(store)]) == 0
    seen: list[tuple[int, int]] = []
    real = data.findings

    def observed(con: Any, **kwargs: Any) -> Any:
        nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        seen.append((id(con), nice))
        return real(con, **kwargs)

    monkeypatch.setattr(data, "findings", observed)
    monkeypatch.setattr(ui, "AUTO_SPANS", 0)  # as on a large set: the overview asks first
    cache.reload()
    at = _app(monkeypatch, [store]).run()
    _no_trouble(at)
    for thread in threading.enumerate():
        if thread.name.startswith("handoffscope-findings"):
            thread.join(timeout=120)
    ((con_id, nice),) = seen
    assert nice == 19
    loaded = cache.load_paths((store,))
    assert loaded.trace_set is not None and con_id != id(loaded.trace_set.con)
    at = _page(at, "findings")
    _no_trouble(at)
    assert _metrics(at)["Findings"] == format.count(len(expected.findings))
    assert len(seen) == 1


FRAMEWORKS = ROOT / "tests" / "fixtures" / "frameworks"


@pytest.mark.parametrize(
    "scenario", ["openai-agents-openinference", "langgraph-openinference", "pydantic-ai"]
)
def test_a_frameworks_trace_shows_its_agents_handoffs_and_findings(
    monkeypatch: pytest.MonkeyPatch, scenario: str
) -> None:
    """A trace recorded from a real framework: its handoffs are counted, its gpt-4o tokens
    priced (marked estimated where the framework reported no cost) and each unvalidated
    handoff is a finding on the findings page."""
    reported = json.loads((FRAMEWORKS / scenario / "reported.json").read_text())
    expected = audit(load_traces(FRAMEWORKS / scenario / "traces.jsonl"))
    at = _app(monkeypatch, [FRAMEWORKS / scenario / "traces.jsonl"]).run()
    _no_trouble(at)
    shown = _metrics(at)
    head = expected.figures.summary
    assert shown["Handoffs"] == format.count(len(reported["handoffs"]))
    assert shown["Total spend"] == format.usd(
        head["cost_usd"], estimated=head["estimated_cost_usd"]
    )
    assert shown["Total spend"].endswith(" est.") == (head["estimated_cost_usd"] is not None)
    at = _page(at, "spend")
    _no_trouble(at)
    per_agent = at.dataframe[0].value
    assert set(per_agent["agent"]) == set(reported["agents"])
    assert "$0.0000" not in set(per_agent["cost"])
    at = _page(at, "findings")
    _no_trouble(at)
    text = " ".join(str(v) for df in at.dataframe for v in df.value.astype(str).values.ravel())
    for h in reported["handoffs"]:
        assert f"{h['sender']} handed work to {h['receiver']}" in text
    at = _page(at, "handoffs")
    _no_trouble(at)
    with load_traces(FRAMEWORKS / scenario / "traces.jsonl").con as con:
        flows = data.edge_flows(con)
    assert set(zip(flows["sender"], flows["receiver"], flows["state"], strict=True)) == {
        (h["sender"], h["receiver"], "(unvalidated)") for h in reported["handoffs"]
    }
    for page in ("reliability", "latency", "trace"):
        at = _page(at, page)
        assert not at.exception, (page, [e.message for e in at.exception])


def test_traces_without_a_handoff_say_there_was_nothing_to_judge(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files = sorted((ROOT / "tests" / "fixtures" / "otlp").glob("genai-interlingua__*"))
    at = _app(monkeypatch, files).run()
    _no_trouble(at)
    at = _page(at, "findings")
    _no_trouble(at)
    messages = [i.value for i in at.info] + [s.value for s in at.success]
    assert any("nothing to judge" in m for m in messages), messages
    assert not any("every handoff" in m for m in messages)
