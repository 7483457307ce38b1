"""The dashboard's data functions, checked against the spans the SDK produced.

The scripted scenario (tests/support/dashboard_scenario.py) is written to an OTLP JSON
file by the official exporter and kept in memory at the same time; every figure here is read back
through the auditor's loader and DuckDB and compared with the same figure computed in plain
Python from the in-memory spans.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pytest

from auditor import load_traces
from auditor.model.derived import derived_names
from collector import schema as s
from dashboard import data, format, trace_data
from dashboard.data.scope import READY_DERIVED, ready
from dashboard.selection import Filters, scoped, selection_of
from tests.support.dashboard_scenario import HOSTILE, RUNS, SLOW_RUN, Scenario, build
from tests.support.paths import REPO

ROOT = REPO


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    return build(tmp_path_factory.mktemp("scenario"))


@pytest.fixture(scope="module", params=["derived", "as loaded"])
def con(scenario: Scenario, request: pytest.FixtureRequest) -> Any:
    """The trace set as the app holds it (with the derived tables ``ready`` computes) and as
    loaded (every view derived from the spans on each query): every figure must agree."""
    trace_set = load_traces(scenario.path)
    if request.param == "derived":
        ready(trace_set)
        assert derived_names(trace_set.con) == READY_DERIVED
    return trace_set.con


def _when(ns: int) -> datetime:
    return datetime.fromtimestamp(ns // 1000 / 1e6, UTC).replace(tzinfo=None)


def _latency(scenario: Scenario, span: Any) -> float:
    """The auditor's definition: the recorded true latency (the library records it)."""
    return float(scenario.attrs(span)[s.VALIDATION_LATENCY_MS])


def _quantile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (DuckDB's quantile_cont)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _roots(scenario: Scenario) -> list[Any]:
    return [sp for sp in scenario.spans if sp.name.startswith(s.SPAN_WORKFLOW_PREFIX)]


# -----------------------------------------------------------------------------------------
# What the filters offer
# -----------------------------------------------------------------------------------------
def test_bounds_list_agents_workflows_and_the_time_range(scenario: Scenario, con: Any) -> None:
    bounds = data.bounds(con)
    assert bounds.agents == ("planner", "research", "writer")
    assert bounds.workflows == ("digest", "report")
    assert bounds.spans == len(scenario.spans)
    assert bounds.start == _when(min(sp.start_time for sp in scenario.spans))
    assert bounds.end == _when(max(sp.start_time for sp in scenario.spans))


@pytest.mark.parametrize(
    ("span", "expected"),
    [
        (timedelta(minutes=10), timedelta(seconds=30)),
        (timedelta(hours=3), timedelta(minutes=5)),
        (timedelta(days=2), timedelta(hours=1)),
        (timedelta(days=400), timedelta(days=7)),
        (timedelta(0), timedelta(minutes=1)),
    ],
)
def test_bucket_width_cuts_a_range_into_at_most_48_round_buckets(
    span: timedelta, expected: timedelta
) -> None:
    start = datetime(2026, 1, 1)
    assert data.bucket_width(start, start + span) == expected


# -----------------------------------------------------------------------------------------
# Handoffs
# -----------------------------------------------------------------------------------------
def test_the_funnel_counts_handoffs_by_how_far_they_got(scenario: Scenario, con: Any) -> None:
    handoffs = scenario.named(s.SPAN_HANDOFF)
    states = Counter(scenario.attrs(h)[s.STATE] for h in handoffs)
    accepted = {
        sp.parent.span_id
        for sp in scenario.named(s.SPAN_VALIDATE)
        if scenario.attrs(sp).get(s.DECISION) == s.DECISION_ACCEPT
    }
    funnel = dict(zip(*data.state_funnel(con).to_dict("list").values(), strict=True))
    assert funnel == {
        s.STATE_PROPOSED: len(handoffs),
        s.STATE_VALIDATED: sum(1 for h in handoffs if h.context.span_id in accepted),
        s.STATE_COMMITTED: states[s.STATE_COMMITTED],
        s.STATE_VOID: states[s.STATE_VOID],
    }
    assert funnel[s.STATE_VOID] == 2


def test_void_reasons_name_each_voided_attempt_verbatim(scenario: Scenario, con: Any) -> None:
    reasons = dict(zip(*data.void_reasons(con).to_dict("list").values(), strict=True))
    assert reasons == {s.REJECT_RESOURCE_UNAVAILABLE: 3, HOSTILE: 1, "timeout": 1}


def test_edge_flows_count_handoffs_per_edge_and_final_state(scenario: Scenario, con: Any) -> None:
    expected = Counter(
        (scenario.attrs(h)[s.SENDER], scenario.attrs(h)[s.RECEIVER], scenario.attrs(h)[s.STATE])
        for h in scenario.named(s.SPAN_HANDOFF)
    )
    flows = data.edge_flows(con)
    got = {(r.sender, r.receiver, r.state): r.handoffs for r in flows.itertuples()}
    assert got == dict(expected)


# -----------------------------------------------------------------------------------------
# Validation latency
# -----------------------------------------------------------------------------------------
def test_the_histogram_counts_every_validation_and_caps_the_slow_ones(
    scenario: Scenario, con: Any
) -> None:
    latencies = [_latency(scenario, sp) for sp in scenario.named(s.SPAN_VALIDATE)]
    bins = data.latency_histogram(con, bin_ms=50, cap_ms=2000)
    assert bins["count"].sum() == len(latencies)
    assert (bins["bin_end_ms"] - bins["bin_start_ms"] == 50).all()
    top = bins[bins["bin_start_ms"] == 2000]["count"].tolist()
    assert top == [sum(1 for v in latencies if v >= 2000)] == [1]


def test_latency_per_receiver_matches_linear_interpolation(scenario: Scenario, con: Any) -> None:
    per: dict[str, list[float]] = {}
    for sp in scenario.named(s.SPAN_VALIDATE):
        per.setdefault(scenario.attrs(sp)[s.RECEIVER], []).append(_latency(scenario, sp))
    frame = data.latency_by(con).set_index("receiver")
    assert set(frame.index) == set(per)
    for receiver, values in per.items():
        row = frame.loc[receiver]
        assert row["answers"] == len(values)
        for q, column in ((0.5, "p50_ms"), (0.95, "p95_ms"), (0.99, "p99_ms")):
            assert row[column] == pytest.approx(_quantile(values, q), rel=1e-9)
        assert row["max_ms"] == pytest.approx(max(values))
    assert frame.loc["writer", "late"] == 1 and frame.loc["research", "late"] == 0
    edges = data.latency_by(con, by="edge").set_index("edge")
    assert edges.loc["research → writer", "answers"] == len(per["writer"])
    overall = data.latency_percentiles(con)
    everything = [v for values in per.values() for v in values]
    assert overall["p95"] == pytest.approx(_quantile(everything, 0.95), rel=1e-9)


def test_latency_over_time_buckets_every_validation(scenario: Scenario, con: Any) -> None:
    frame = data.latency_over_time(con, width=timedelta(minutes=5))
    assert frame["validations"].sum() == len(scenario.named(s.SPAN_VALIDATE))
    assert frame["bucket"].is_monotonic_increasing
    assert (frame["p50_ms"] <= frame["p95_ms"]).all() and (frame["p95_ms"] <= frame["p99_ms"]).all()


# -----------------------------------------------------------------------------------------
# Spend, reliability, overview
# -----------------------------------------------------------------------------------------
def test_spend_per_agent_and_phase_adds_up_the_phase_spans(scenario: Scenario, con: Any) -> None:
    expected: Counter[tuple[str, str]] = Counter()
    tokens: Counter[tuple[str, str]] = Counter()
    for sp in scenario.spans:
        a = scenario.attrs(sp)
        if s.COST_USD in a:
            expected[(a[s.GEN_AI_AGENT_NAME], a[s.PHASE])] += a[s.COST_USD]
            tokens[(a[s.GEN_AI_AGENT_NAME], a[s.PHASE])] += a[s.GEN_AI_USAGE_INPUT_TOKENS]
    frame = data.agent_spend(con)
    got = {(r.agent, r.phase): r.cost_usd for r in frame.itertuples()}
    assert got == pytest.approx(dict(expected))
    assert {(r.agent, r.phase): r.input_tokens for r in frame.itertuples()} == dict(tokens)
    writer_only = data.agent_spend(con, filters=Filters(agents=("writer",)))
    assert set(writer_only["agent"]) == {"writer"}
    models = data.model_spend(con).set_index("model")
    assert models["cost_usd"].sum() == pytest.approx(sum(expected.values()))
    assert set(models.index) == {"gpt-4o", "gpt-4o-mini"}


def test_voided_spend_is_the_cost_of_attempts_that_ended_void(scenario: Scenario, con: Any) -> None:
    attempts: dict[tuple[int, int], list[Any]] = {}
    for sp in scenario.spans:
        a = scenario.attrs(sp)
        if a.get(s.PHASE) is not None:
            attempts.setdefault((sp.parent.span_id, a[s.ATTEMPT]), []).append(a)
    voided = [
        phases for phases in attempts.values() if any(p[s.STATE] == s.STATE_VOID for p in phases)
    ]
    wasted = sum(p.get(s.COST_USD, 0) for phases in voided for p in phases)
    frame = data.voided_spend(con)
    assert frame["cost_usd"].sum() == pytest.approx(wasted) and wasted > 0
    assert frame["attempts"].sum() == len(voided) == 5
    assert frame["handoffs"].sum() == 3
    assert data.edge_spend(con)["cost_usd"].sum() > frame["cost_usd"].sum()
    # The auditor's figure behind it, per agent: the same spend, the same attempts.
    from auditor.figures import voided_spend

    with data.cursor(con, Filters()) as cur:
        per_agent = voided_spend(cur, by="agent").df()
        with pytest.raises(ValueError, match="by must be one of"):
            voided_spend(cur, by="model")
    assert per_agent["cost_usd"].sum() == pytest.approx(wasted)
    tokens = sum(
        p.get(s.GEN_AI_USAGE_INPUT_TOKENS, 0) + p.get(s.GEN_AI_USAGE_OUTPUT_TOKENS, 0)
        for phases in voided
        for p in phases
    )
    assert per_agent["tokens"].sum() == tokens > 0


def test_the_overview_matches_the_workflow_roots_and_handoffs(scenario: Scenario, con: Any) -> None:
    roots = _roots(scenario)
    handoffs = scenario.named(s.SPAN_HANDOFF)
    view = data.overview(con)
    succeeded = sum(1 for r in roots if scenario.attrs(r)[s.WORKFLOW_OUTCOME] == s.WORKFLOW_SUCCESS)
    assert (view.end_to_end["workflows"], view.end_to_end["succeeded_workflows"]) == (
        RUNS,
        succeeded,
    )
    assert view.end_to_end["observed"] == pytest.approx(succeeded / RUNS)
    assert view.summary["handoffs"] == len(handoffs)
    assert view.summary["cost_usd"] == pytest.approx(
        sum(scenario.attrs(sp).get(s.COST_USD, 0) for sp in scenario.spans)
    )
    latencies = [_latency(scenario, sp) for sp in scenario.named(s.SPAN_VALIDATE)]
    assert view.p95_ms == pytest.approx(_quantile(latencies, 0.95), rel=1e-9)
    activity = data.activity_over_time(con, width=timedelta(minutes=5))
    assert activity["workflows"].sum() == RUNS and activity["succeeded"].sum() == succeeded
    assert activity["cost_usd"].sum() == pytest.approx(view.summary["cost_usd"])


def test_workflow_spend_lists_every_cost_and_the_costliest_with_their_latest_run(
    scenario: Scenario, con: Any
) -> None:
    cost: Counter[str] = Counter()
    for sp in scenario.spans:
        cost[f"{sp.context.trace_id:032x}"] += scenario.attrs(sp).get(s.COST_USD, 0)
    workflows: dict[str, dict[str, Any]] = {}
    for root in _roots(scenario):
        a, trace = scenario.attrs(root), f"{root.context.trace_id:032x}"
        w = workflows.setdefault(a[s.WORKFLOW_ID], {"cost": 0.0, "runs": []})
        w["cost"] += cost[trace]
        w["runs"].append((a.get(s.WORKFLOW_ATTEMPT, 1), trace))
    spend = data.workflow_spend(con, top=3)
    assert sorted(spend.costs["cost_usd"]) == pytest.approx(
        sorted(w["cost"] for w in workflows.values())
    )
    costliest = sorted(workflows, key=lambda k: (-workflows[k]["cost"], k))[:3]
    assert spend.top["workflow_id"].tolist() == costliest
    assert spend.top["trace_id"].tolist() == [max(workflows[k]["runs"])[1] for k in costliest]
    assert spend.top["cost_usd"].tolist() == pytest.approx(
        [workflows[k]["cost"] for k in costliest]
    )


def test_compounding_multiplies_the_rates_of_the_agents_along_the_chain(
    scenario: Scenario, con: Any
) -> None:
    states: dict[str, list[bool]] = {}
    for h in scenario.named(s.SPAN_HANDOFF):
        a = scenario.attrs(h)
        states.setdefault(a[s.RECEIVER], []).append(a[s.STATE] == s.STATE_COMMITTED)
    rate = {agent: sum(ok) / len(ok) for agent, ok in states.items()}
    frame = data.compounding(con).set_index("chain_length")
    assert list(frame.index) == [1, 2]
    assert frame.loc[1, "projected"] == pytest.approx(rate["research"])
    assert frame.loc[2, "projected"] == pytest.approx(rate["research"] * rate["writer"])
    assert frame.loc[2, "observed"] == pytest.approx(sum(states["writer"]) / RUNS)
    assert frame.loc[2, "workflows"] == RUNS
    # b-3's first attempt timed out: without retries the writer would have lost it too.
    assert frame.loc[2, "projected_first_attempt"] < frame.loc[2, "projected"]


def test_findings_are_the_auditors_and_point_at_their_traces(scenario: Scenario, con: Any) -> None:
    from auditor.audit import audit

    expected = audit(load_traces(scenario.path)).findings
    found = data.findings(con)

    def key(rule: Any, trace: Any, span: Any) -> tuple[str, str, str]:
        return (rule, "" if pd.isna(trace) else trace, "" if pd.isna(span) else span)

    got = sorted(
        key(*row) for row in zip(found["rule"], found["trace_id"], found["span_id"], strict=True)
    )
    assert got == sorted(key(f.rule, f.trace_id, f.span_id) for f in expected)
    assert {"slow-validation", "validation-p95-over-budget"} <= set(found["rule"])
    slow = found[found["rule"] == "slow-validation"]
    assert slow["trace_id"].tolist() == [_trace_of_run(scenario, SLOW_RUN)]
    assert slow["time"].notna().all()
    assert data.findings(con, validation_timeout_s=3.0).query("rule == 'slow-validation'").empty
    reports = data.trace_ids(con, filters=Filters(workflows=("report",)))
    in_reports = data.findings(con, filters=Filters(workflows=("report",)))
    assert set(in_reports["trace_id"].dropna()) <= reports
    assert set(slow["trace_id"]) <= reports  # run 3 is a report, so its finding stays


@pytest.mark.parametrize(
    "filters",
    [Filters(workflows=("report",)), Filters(agents=("writer",)), Filters(workflows=("none",))],
    ids=["workflow", "agent", "nothing"],
)
def test_a_filter_selects_the_whole_sets_findings_as_the_rules_would_find_them(
    con: Any, filters: Filters
) -> None:
    """The pages take, of the findings on every trace, those of the selected traces, and
    run the set-scoped rules again on the selection: the same as every rule run on it."""
    both = {"validation_timeout_s": 2.0, "p95_budget_s": 0.05}  # every receiver over budget

    def keys(frame: pd.DataFrame) -> list[tuple[str, str, str, str]]:
        columns = ("rule", "trace_id", "span_id", "message")
        return sorted(
            tuple("" if pd.isna(v) else str(v) for v in row)
            for row in zip(*(frame[c] for c in columns), strict=True)
        )

    selected = data.within(
        con,
        data.findings(con, **both),
        data.set_findings(con, filters=filters, **both),
        filters=filters,
    )
    rerun = data.findings(con, filters=filters, **both)
    assert keys(selected) == keys(rerun)
    assert list(selected.columns) == list(rerun.columns)
    if filters.workflows != ("none",):
        assert {"validation-p95-over-budget", "slow-validation"} <= set(selected["rule"])
    if filters.workflows == ("report",):
        # Half the runs: the p95 is recomputed on them, not kept from the whole set.
        whole = data.findings(con, **both)
        p95 = "rule == 'validation-p95-over-budget'"
        assert keys(selected.query(p95)) != keys(whole.query(p95))
    elif filters.workflows:
        assert selected.empty
    only_set = data.set_findings(con, filters=filters, **both)
    assert set(only_set["rule"]) <= {"validation-p95-over-budget"}


def test_retries_count_reproposals_per_thousand_workflows(scenario: Scenario, con: Any) -> None:
    extra = sum(scenario.attrs(h)[s.ATTEMPTS] - 1 for h in scenario.named(s.SPAN_HANDOFF))
    frame = data.retries(data.overview(con).end_to_end).set_index("kind")
    assert frame.loc["per-handoff retries", "count"] == extra == 3
    assert frame.loc["per-handoff retries", "per_1000_workflows"] == pytest.approx(
        extra / RUNS * 1000
    )
    assert frame.loc["full-chain restarts", "count"] == 0


# -----------------------------------------------------------------------------------------
# Filters
# -----------------------------------------------------------------------------------------
def test_a_workflow_filter_keeps_only_runs_of_that_name(scenario: Scenario, con: Any) -> None:
    reports = [r for r in _roots(scenario) if scenario.attrs(r)[s.GEN_AI_WORKFLOW_NAME] == "report"]
    view = data.overview(con, filters=Filters(workflows=("report",)))
    assert view.end_to_end["workflows"] == len(reports) == RUNS // 2
    trace_ids = data.trace_ids(con, filters=Filters(workflows=("report",)))
    assert trace_ids == {f"{r.context.trace_id:032x}" for r in reports}


def test_a_time_range_keeps_runs_that_started_inside_it(scenario: Scenario, con: Any) -> None:
    starts = sorted(_when(r.start_time) for r in _roots(scenario))
    middle = starts[4]

    def workflows(filters: Filters) -> int:
        return data.overview(con, filters=filters).end_to_end["workflows"]

    assert (workflows(Filters(end=middle)), workflows(Filters(start=middle))) == (4, RUNS - 4)
    first, second = Filters().halves(starts[0], starts[-1])
    assert workflows(first) + workflows(second) == RUNS


@pytest.mark.parametrize(
    "hostile",
    ["x') OR 1=1 --", "'; DROP TABLE spans; --", '" OR ""="', HOSTILE],
)
def test_hostile_filter_values_select_nothing_and_change_nothing(con: Any, hostile: str) -> None:
    before = con.execute("SELECT count(*) FROM spans").fetchone()[0]
    filters = Filters(agents=(hostile,), workflows=(hostile,))
    assert data.overview(con, filters=filters).end_to_end["workflows"] == 0
    assert data.state_funnel(con, filters=filters).empty
    assert con.execute("SELECT count(*) FROM spans").fetchone()[0] == before


def test_a_scoped_cursor_never_changes_what_the_connection_sees(con: Any) -> None:
    total = con.execute("SELECT count(*) FROM spans").fetchone()[0]
    with scoped(con, Filters(workflows=("report",))) as cursor:
        assert 0 < cursor.execute("SELECT count(*) FROM spans").fetchone()[0] < total
        assert con.execute("SELECT count(*) FROM spans").fetchone()[0] == total
    # The filtered cursor is kept for the next query with the same filter, and only a few.
    with scoped(con, Filters(workflows=("report",))) as again:
        assert again is cursor
    for i in range(8):
        with scoped(con, Filters(workflows=(f"w{i}",))) as other:
            assert other.execute("SELECT count(*) FROM spans").fetchone()[0] == 0
    with scoped(con, Filters(workflows=("report",))) as fresh:
        assert fresh is not cursor
        assert 0 < fresh.execute("SELECT count(*) FROM spans").fetchone()[0] < total


def test_every_query_can_follow_another_on_a_kept_cursor(con: Any) -> None:
    """A filter's cursor is reused; no query may leave it holding an unfinished result."""
    f = Filters(workflows=("report",))
    width = timedelta(minutes=5)
    calls = [
        lambda: data.overview(con, filters=f),
        lambda: data.latency_percentiles(con, filters=f),
        lambda: data.latency_by(con, filters=f),
        lambda: data.state_funnel(con, filters=f),
        lambda: data.void_reasons(con, filters=f),
        lambda: data.activity_over_time(con, filters=f, width=width),
        lambda: data.agent_spend(con, filters=f),
        lambda: data.compounding(con, filters=f),
        lambda: data.findings(con, filters=f),
        lambda: data.trace_ids(con, filters=f),
        lambda: trace_data.trace_list(con, filters=f),
        lambda: data.bounds(con),
    ]
    for call in calls + calls:
        call()


def test_filtered_queries_from_many_threads_agree(con: Any) -> None:
    """Streamlit serves each session on its own thread; filters must not leak across them."""
    expected = data.state_funnel(con, filters=Filters(workflows=("digest",)))["handoffs"].tolist()
    results: list[list[int]] = []

    def work(i: int) -> None:
        f = Filters(workflows=("digest",)) if i % 2 else Filters(workflows=("digest", f"n{i}"))
        results.append(data.state_funnel(con, filters=f)["handoffs"].tolist())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 8
    assert expected != data.state_funnel(con)["handoffs"].tolist()


def test_a_filter_keeping_most_traces_joins_those_left_out_with_the_same_figures(
    scenario: Scenario,
) -> None:
    """A filter keeping most traces joins the few it leaves out (the cheaper join); every
    figure must equal that of the selected traces joined directly, as a trace set without
    the app's index does."""
    starts = sorted(_when(r.start_time) for r in _roots(scenario))
    indexed = load_traces(scenario.path)
    ready(indexed)
    plain = load_traces(scenario.path).con
    width = timedelta(minutes=5)
    figures = {
        "summary": lambda c, f: data.overview(c, filters=f).summary,
        "end to end": lambda c, f: data.overview(c, filters=f).end_to_end,
        "agent spend": lambda c, f: data.agent_spend(c, filters=f),
        "edge spend": lambda c, f: data.edge_spend(c, filters=f),
        "voided spend": lambda c, f: data.voided_spend(c, filters=f),
        "workflow spend": lambda c, f: data.workflow_spend(c, filters=f).top,
        "funnel": lambda c, f: data.state_funnel(c, filters=f),
        "latency": lambda c, f: data.latency_by(c, filters=f),
        "activity": lambda c, f: data.activity_over_time(c, filters=f, width=width),
        "compounding": lambda c, f: data.compounding(c, filters=f),
        "findings": lambda c, f: data.findings(c, filters=f, p95_budget_s=0.05),
        "traces": lambda c, f: data.trace_ids(c, filters=f),
    }
    most, half = Filters(start=starts[1]), Filters(workflows=("report",))
    for filters, excluded in ((most, True), (half, False)):
        with scoped(indexed.con, filters) as cursor:
            chosen = selection_of(cursor)
            assert chosen is not None and chosen.excluded is excluded
        with scoped(plain, filters) as cursor:
            chosen = selection_of(cursor)
            assert chosen is not None and not chosen.excluded
        for name, figure in figures.items():
            got, expected = figure(indexed.con, filters), figure(plain, filters)
            if isinstance(expected, pd.DataFrame):
                pd.testing.assert_frame_equal(got, expected, check_dtype=False, obj=name)
            elif isinstance(expected, dict):
                # Sums of floats: the join order changes their last bits.
                assert got.keys() == expected.keys(), name
                for key, value in expected.items():
                    if isinstance(value, float):
                        assert got[key] == pytest.approx(value, rel=1e-12), (name, key)
                    else:
                        assert got[key] == value, (name, key)
            else:
                assert got == expected, name
    assert data.overview(indexed.con, filters=most).end_to_end["workflows"] == RUNS - 1
    assert len(data.trace_ids(indexed.con, filters=most)) == RUNS - 1


# -----------------------------------------------------------------------------------------
# Trace
# -----------------------------------------------------------------------------------------
def _trace_of_run(scenario: Scenario, run: int) -> str:
    handoff = next(
        h for h in scenario.named(s.SPAN_HANDOFF) if scenario.attrs(h)[s.TASK_ID] == f"b-{run}"
    )
    return f"{handoff.context.trace_id:032x}"


def test_a_trace_is_listed_parents_first_with_depth_and_offsets(
    scenario: Scenario, con: Any
) -> None:
    trace_id = _trace_of_run(scenario, SLOW_RUN)
    spans = trace_data.trace_spans(con, trace_id)
    mine = [sp for sp in scenario.spans if f"{sp.context.trace_id:032x}" == trace_id]
    assert len(spans) == len(mine)
    position = {sid: i for i, sid in enumerate(spans["span_id"])}
    for row in spans.itertuples():
        if isinstance(row.parent_span_id, str):
            assert position[row.parent_span_id] < position[row.span_id]
    depth = dict(zip(spans["name"], spans["depth"], strict=False))
    assert depth[s.SPAN_HANDOFF] == 1 and depth[s.SPAN_VALIDATE] == 2
    assert spans["offset_ms"].min() == 0
    late = spans[(spans["name"] == s.SPAN_VALIDATE) & (spans["decision"] == s.DECISION_TIMEOUT)]
    assert late["duration_ms"].tolist() == [pytest.approx(2500, abs=1)]
    assert trace_data.trace_spans(con, "no-such-trace").empty


def test_span_details_keep_hostile_text_verbatim(scenario: Scenario, con: Any) -> None:
    span = next(
        sp
        for sp in scenario.named(s.SPAN_VALIDATE)
        if scenario.attrs(sp).get(s.REJECT_REASON) == HOSTILE
    )
    trace_id, span_id = f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"
    attributes = trace_data.span_attributes(con, trace_id, span_id)
    values = dict(zip(attributes["key"], attributes["value"], strict=False))
    assert values[s.REJECT_REASON] == HOSTILE
    assert set(attributes["section"]) == {"span", "attribute", "resource", "source"}
    events = trace_data.span_events(con, trace_id, span_id)
    assert f"{s.TRANSITION_TO}={s.STATE_VOID}" in " ".join(events["attributes"])


def test_the_failed_trace_list_holds_the_failed_runs(scenario: Scenario, con: Any) -> None:
    failed = {
        f"{r.context.trace_id:032x}"
        for r in _roots(scenario)
        if scenario.attrs(r)[s.WORKFLOW_OUTCOME] != s.WORKFLOW_SUCCESS
    }
    assert set(trace_data.trace_list(con, only="failed")["trace_id"]) == failed
    expensive = trace_data.trace_list(con, only="expensive")
    assert expensive["cost_usd"].is_monotonic_decreasing and len(expensive) == RUNS
    # Each trace's cost is the auditor's: together, the total the other pages show.
    total = data.overview(con).summary["cost_usd"]
    assert expensive["cost_usd"].sum() == pytest.approx(total)
    listed = trace_data.trace_list(con).set_index("trace_id")
    voided = Counter(
        f"{h.context.trace_id:032x}"
        for h in scenario.named(s.SPAN_HANDOFF)
        if scenario.attrs(h)[s.STATE] == s.STATE_VOID
    )
    assert {t: n for t, n in listed["void"].items() if n} == dict(voided)
    assert listed["started"].is_monotonic_decreasing


# -----------------------------------------------------------------------------------------
# Pure helpers: number formats, "what changed", alerts in the selection
# -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("function", "value", "text"),
    [
        (format.usd, 1234.5, "$1,234.50"),
        (format.usd, 0.00042, "$0.0004"),
        (format.usd, None, "unknown"),
        (format.pct, 0.774, "77.4%"),
        (format.pct, float("nan"), "—"),
        (format.ms, 412.4, "412 ms"),
        (format.ms, 2512.0, "2,512 ms"),
        (format.ms, 12_500.0, "12.5 s"),
        (format.ms, 3.25, "3.2 ms"),
        (format.count, 1234567, "1,234,567"),
    ],
)
def test_numbers_read_as_people_write_them(function: Any, value: Any, text: str) -> None:
    assert function(value) == text


def test_deltas_compare_against_the_earlier_value() -> None:
    assert format.delta_pct(110, 100) == "+10.0%"
    assert format.delta_pct(90, 100) == "-10.0%"
    assert format.delta_pct(5, 0) is None and format.delta_pct(None, 1) is None


def test_halves_compare_the_first_and_second_half_of_the_buckets() -> None:
    start = datetime(2026, 1, 1)
    activity = pd.DataFrame(
        {
            "bucket": [start + timedelta(minutes=5 * i) for i in range(4)],
            "workflows": [10, 10, 20, 0],
            "succeeded": [9, 7, 10, 0],
            "cost_usd": [1.0, 1.0, 3.0, 0.0],
        }
    )
    changed = data.halves(activity)
    assert changed["workflows"] == (20, 20)
    assert changed["success"] == (0.8, 0.5)
    assert changed["cost_usd"] == (2.0, 3.0)
    assert data.halves(activity.head(1)) == {}


def test_alerts_follow_the_filters() -> None:
    from dashboard.alerts import ALERT_COLUMNS, filter_alerts

    at = datetime(2026, 1, 1, 12)
    alerts = pd.DataFrame(
        [
            [at, "slow-validation", "firing", "error", "s", "writer", "r", "t1", 2.5, 2.0, "aa"],
            [at, "slow-validation", "firing", "error", "s", "writer", "r", "t2", 2.6, 2.0, "bb"],
            [
                at,
                "validation-p95-over-budget",
                "firing",
                "warning",
                "p",
                "writer",
                None,
                None,
                0.9,
                0.5,
                None,
            ],
            [
                at,
                "validation-p95-over-budget",
                "firing",
                "warning",
                "p",
                "review",
                None,
                None,
                0.9,
                0.5,
                None,
            ],
        ],
        columns=list(ALERT_COLUMNS),
    )
    assert filter_alerts(alerts, Filters(), set()).equals(alerts)
    kept = filter_alerts(alerts, Filters(agents=("writer",)), {"aa"})
    assert kept["task_id"].fillna("-").tolist() == ["t1", "-"]
    assert kept["receiver"].tolist() == ["writer", "writer"]
    later = filter_alerts(alerts, Filters(start=at + timedelta(hours=1)), {"aa", "bb"})
    assert later["rule"].tolist() == ["slow-validation", "slow-validation"]


def test_a_trace_set_too_big_to_derive_is_still_served(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of memory at the ceiling while deriving (not reachable on a test machine: the
    ceiling is half of RAM), the app drops what it derived and reads the spans instead."""
    from auditor.errors import AuditError
    from auditor.model.derived import derive as real_derive
    from dashboard.data import scope

    def derive_then_fail(con: Any, names: tuple[str, ...], **options: Any) -> None:
        real_derive(con, names[:2], **options)
        raise AuditError("DuckDB ran out of memory", title="out of memory")

    monkeypatch.setattr(scope, "derive", derive_then_fail)
    plain = load_traces(scenario.path)
    trace_set = load_traces(scenario.path)
    ready(trace_set)
    assert derived_names(trace_set.con) == ()
    f = Filters(workflows=("report",))
    assert _same(data.overview(trace_set.con, filters=f), data.overview(plain.con, filters=f))
    assert _same(data.overview(trace_set.con), data.overview(plain.con))


def _same(a: data.Overview, b: data.Overview) -> bool:
    """Equal, floats to the last few bits: a sum of floats depends on the order of its terms."""

    def close(x: Any, y: Any) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return math.isclose(x, y, rel_tol=1e-12)
        return bool(x == y)

    return (
        a.summary.keys() == b.summary.keys()
        and a.end_to_end.keys() == b.end_to_end.keys()
        and all(close(a.summary[k], b.summary[k]) for k in a.summary)
        and all(close(a.end_to_end[k], b.end_to_end[k]) for k in a.end_to_end)
        and close(a.p95_ms, b.p95_ms)
    )


@pytest.mark.parametrize("derive", [True, False], ids=["derived", "as loaded"])
def test_a_restarted_workflow_links_to_its_latest_run(derive: bool) -> None:
    """sample_traces/fault-mix restarts some workflows from the top: the workflow's row
    sums every run and links to the trace of the last one."""
    trace_set = load_traces(ROOT / "sample_traces" / "fault-mix")
    if derive:
        ready(trace_set)
    runs = trace_set.con.execute(
        f"""SELECT "{s.WORKFLOW_ID}", arg_max(trace_id, "{s.WORKFLOW_ATTEMPT}"), count(*)
            FROM spans WHERE name LIKE '{s.SPAN_WORKFLOW_PREFIX}%' GROUP BY 1"""
    ).fetchall()
    latest = {w: trace for w, trace, _ in runs}
    restarted = {w for w, _, count in runs if count > 1}
    spend = data.workflow_spend(trace_set.con, top=len(runs))
    assert len(spend.top) == len(spend.costs) == len(runs)
    assert restarted & set(spend.top["workflow_id"])
    assert dict(zip(spend.top["workflow_id"], spend.top["trace_id"], strict=True)) == latest
    assert dict(zip(spend.top["workflow_id"], spend.top["runs"], strict=True)) == {
        w: count for w, _, count in runs
    }
