"""The dashboard over traces of frameworks the structural model reads (CrewAI, smolagents,
Agno, a CrewAI Flow): its per-agent spend shows the agents the audit finds, with their
tokens, and its handoffs page the edges the framework ran, each unvalidated; then one of them
in a real browser, whose screenshot the docs show."""

from __future__ import annotations

import json
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from auditor import audit, load_traces
from dashboard import data
from tests.support.paths import REPO

ROOT = REPO
APP = ROOT / "dashboard" / "app.py"
FRAMEWORKS = ROOT / "tests" / "fixtures" / "frameworks"
SCENARIOS = [
    "crewai-hierarchical-openinference",
    "smolagents-toolcalling-manager-openinference",
    "agno-team-nested",
    "crewai-flow-openinference",
]


def _reported(name: str) -> dict[str, Any]:
    return dict(json.loads((FRAMEWORKS / name / "reported.json").read_text()))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_agent_and_edge_pages_show_the_agents_and_delegations_that_ran(
    monkeypatch: pytest.MonkeyPatch, scenario: str
) -> None:
    from dashboard.source import PATHS_ENV

    reported = _reported(scenario)
    trace = FRAMEWORKS / scenario / "traces.jsonl"
    expected = audit(load_traces(trace))
    monkeypatch.setenv(PATHS_ENV, json.dumps([str(trace)]))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    assert not at.exception, [e.message for e in at.exception]
    at = at.switch_page("views/spend.py").run()
    assert not at.exception, [e.message for e in at.exception]
    per_agent = at.dataframe[0].value
    assert set(per_agent["agent"]) == set(reported["agents"])
    assert set(per_agent["agent"]) == {a["agent"] for a in expected.figures.agents}
    at = at.switch_page("views/handoffs.py").run()
    assert not at.exception, [e.message for e in at.exception]
    # The page shows the framework's edges, though none entered the handshake's funnel.
    (edges,) = at.dataframe
    assert set(zip(edges.value["sender"], edges.value["receiver"], strict=True)) == {
        (h["sender"], h["receiver"]) for h in reported["handoffs"]
    }
    assert not [i.value for i in at.info if "No handoffs" in i.value]
    with load_traces(trace).con as con:
        flows = data.edge_flows(con)
    assert set(zip(flows["sender"], flows["receiver"], flows["state"], strict=True)) == {
        (h["sender"], h["receiver"], "(unvalidated)") for h in reported["handoffs"]
    }
    at = at.switch_page("views/findings.py").run()
    text = " ".join(str(v) for df in at.dataframe for v in df.value.astype(str).values.ravel())
    for h in reported["handoffs"]:
        assert f"{h['sender']} handed work to {h['receiver']}" in text


@pytest.mark.browser
def test_a_crews_delegations_in_the_browser() -> None:
    """The CrewAI crew whose coworkers have no span of their own, in headless Chromium: the
    handoffs page draws its two delegations (the screenshot in docs/dashboard.md)."""
    from playwright.sync_api import sync_playwright

    from tests.support.browser import (
        ARGS,
        CHROMIUM,
        IDLE,
        IMAGES,
        WAIT_MS,
        dashboard,
    )

    if not CHROMIUM.exists():
        pytest.fail("the browser test needs Debian's Chromium at /usr/bin/chromium")
    trace = FRAMEWORKS / "crewai-hierarchical-openinference" / "traces.jsonl"
    with dashboard(trace) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            tab = browser.new_page(viewport={"width": 1440, "height": 1000})
            errors: list[str] = []
            tab.on("pageerror", lambda e: errors.append(str(e)))
            tab.goto(f"{url}/handoffs")
            tab.wait_for_selector(f"{IDLE} h1:has-text('Handoffs')", timeout=WAIT_MS)
            # The edges' Sankey diagram names the three agents.
            tab.wait_for_function(
                "() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= 1",
                timeout=WAIT_MS,
            )
            assert tab.locator('[data-testid="stException"]').count() == 0
            labels = tab.evaluate(
                "() => [...document.querySelectorAll('.js-plotly-plot .sankey-node text')]"
                ".map(e => e.textContent)"
            )
            assert {"Crew Manager", "Researcher", "Writer"} <= set(labels), labels
            assert "No handoffs match" not in tab.inner_text("body")
            tab.screenshot(path=str(IMAGES / "dashboard-framework-handoffs.png"))
            assert errors == []
        finally:
            browser.close()
