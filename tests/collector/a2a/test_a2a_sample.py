"""sample_traces/a2a, a recorded two-process A2A run: the audit agrees with the ground truth
the processes themselves reported (the researcher's outcomes, the writer's executions)."""

from __future__ import annotations

import json

import pytest

from auditor import audit, load_traces
from collector import schema
from tests.support.paths import REPO

FOLDER = REPO / "sample_traces" / "a2a"


@pytest.fixture(scope="module")
def audited():
    traces = load_traces(FOLDER)
    return traces, audit(traces)


@pytest.fixture(scope="module")
def truth() -> dict:
    manifest = json.loads((FOLDER / "manifest.json").read_text())
    return manifest["ground_truth"]


def test_the_run_kept_the_protocol(truth):
    assert truth["most_executions_of_one_key"] == 1
    assert truth["executed"] == truth["keys_executed"] == truth["fresh"]
    assert truth["replayed"] == truth["duplicates"] > 0
    assert truth["refused_conflicts"] == truth["conflicts"] > 0


def test_the_audit_finds_every_handoff_on_its_edge_and_no_finding(audited, truth):
    traces, result = audited
    assert traces.problems == []
    assert result.findings == []
    assert result.figures.summary["handoffs"] == truth["handoffs"]
    edges = {f"{e['sender']} -> {e['receiver']}": e["handoffs"] for e in result.figures.edges}
    assert edges == truth["edges"]


def test_each_handoff_s_spans_say_what_the_sender_saw(audited, truth):
    traces, _ = audited
    rows = traces.con.execute(
        f'SELECT "{schema.HANDOFF_ID}", any_value("{schema.COMMIT_OUTCOME}"), '
        f'any_value("{schema.REJECT_REASON}") FROM spans '
        f"WHERE name IN (?, ?) GROUP BY 1",
        [schema.SPAN_COMMIT, schema.SPAN_ANSWER],
    ).fetchall()
    seen = {handoff: outcome or reason for handoff, outcome, reason in rows}
    expected = {handoff: outcome for handoff, _key, _kind, outcome in truth["outcomes"]}
    assert seen == expected
