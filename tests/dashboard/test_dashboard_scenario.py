"""The scripted dashboard scenario (tests.support.dashboard_scenario) says what the other
dashboard tests rely on."""

from __future__ import annotations

import pytest

from auditor import load_traces
from collector import schema as s
from tests.support.dashboard_scenario import HOSTILE, RUNS, Scenario, build


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    return build(tmp_path_factory.mktemp("scenario"))


def test_the_scenario_holds_the_scripted_events(scenario: Scenario) -> None:
    validations = [scenario.attrs(sp) for sp in scenario.named(s.SPAN_VALIDATE)]
    assert sum(1 for a in validations if a.get(s.LATE)) == 1
    assert sum(1 for a in validations if a.get(s.REJECT_REASON) == HOSTILE) == 1
    rejected = [a for a in validations if a.get(s.REJECT_REASON) == s.REJECT_RESOURCE_UNAVAILABLE]
    assert len(rejected) == s.DEFAULT_MAX_ATTEMPTS
    outcomes = [
        scenario.attrs(sp)[s.WORKFLOW_OUTCOME]
        for sp in scenario.spans
        if sp.name.startswith(s.SPAN_WORKFLOW_PREFIX)
    ]
    assert outcomes.count(s.WORKFLOW_FAILURE) == 2 and len(outcomes) == RUNS


def test_the_file_holds_every_span(scenario: Scenario) -> None:
    traces = load_traces(scenario.path)
    assert traces.span_count == len(scenario.spans)
    assert traces.problems == []
