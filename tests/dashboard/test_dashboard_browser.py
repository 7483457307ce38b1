"""The real dashboard in a real browser: ``handoffscope dashboard`` driven by headless Chromium.

Starts the command line on a free loopback port over the sample traces, visits every page
with Debian's Chromium (through Playwright, never a downloaded browser), checks that the
charts render and that no error element appears, uploads a trace file holding HTML and
script in its attributes, and saves the screenshots the README shows (docs/images/).
Without Chromium the test fails and says how to install it: a skipped browser test would
pass off as coverage.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import (
    ARGS,
    CHROMIUM,
    IDLE,
    IMAGES,
    WAIT_MS,
    charts_drawn,
    dashboard,
    open_page,
)
from tests.support.dashboard_scenario import build
from tests.support.paths import REPO

ROOT = REPO
SAMPLE = ROOT / "sample_traces" / "fault-mix"
# page path -> (title, charts it must show, screenshot name or None)
PAGES = {
    "": ("Overview", 1, "dashboard-overview.png"),
    "spend": ("Spend", 5, "dashboard-spend.png"),
    "reliability": ("Reliability", 4, "dashboard-reliability.png"),
    "latency": ("Validation latency", 3, "dashboard-latency.png"),
    "handoffs": ("Handoffs", 3, "dashboard-handoffs.png"),
    "findings": ("Findings", 0, "dashboard-findings.png"),
    "trace": ("Trace", 1, "dashboard-trace.png"),
}

pytestmark = pytest.mark.browser


def _listening(port: int) -> set[str]:
    """Local addresses listening on ``port`` (IPv4, from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if int(hex_port, 16) == port and state == "0A":
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """``handoffscope dashboard`` over the sample traces, as a user would start it."""
    if not CHROMIUM.exists():
        pytest.fail(
            "the browser test needs Debian's Chromium at /usr/bin/chromium: "
            "sudo apt-get install -y chromium (scripts/test installs it when run as root)"
        )
    with dashboard(SAMPLE) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def page(server: str, browser: Any) -> Iterator[Any]:
    """One browser tab on the dashboard, kept across the tests like a user's session."""
    tab = browser.new_page(viewport={"width": 1440, "height": 1000})
    tab.errors = []
    tab.on("pageerror", lambda e: tab.errors.append(str(e)))
    open_page(tab, server, "Overview")
    yield tab
    tab.close()


def _visit(page: Any, title: str) -> None:
    """Open a page through the navigation bar, as a user does (the session is kept)."""
    page.locator('[data-testid="stTopNavLink"]', has_text=title).first.click()
    page.wait_for_selector(f"{IDLE} h1:has-text('{title}')", timeout=WAIT_MS)


def test_the_server_listens_on_loopback_only(server: str) -> None:
    port = int(server.rsplit(":", 1)[1])
    assert _listening(port) == {"127.0.0.1"}


def test_every_page_renders_its_charts_without_an_error(page: Any) -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    for path, (title, charts, image) in PAGES.items():
        if path:
            _visit(page, title)
            assert page.url.split("?")[0].rstrip("/").endswith(path)
        assert page.locator('[data-testid="stException"]').count() == 0, path
        charts_drawn(page, charts)
        assert "could not be computed" not in page.inner_text("body"), path
        if image:
            page.screenshot(path=str(IMAGES / image))
    assert page.errors == []


def test_an_upload_is_analysed_and_its_html_stays_text(page: Any, tmp_path: Path) -> None:
    scenario = build(tmp_path)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    _visit(page, "Handoffs")
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(scenario.path))
    page.wait_for_selector(f"{IDLE} :text('spans from {scenario.path.name}')", timeout=WAIT_MS)
    assert page.locator('[data-testid="stException"]').count() == 0
    charts_drawn(page, 3)
    # The reject reason holds a <script> and an <img onerror>: neither may run.
    assert page.evaluate("() => window.__handoffscope_xss === undefined")
    assert page.locator("img[src='x']").count() == 0
    # The upload lives in this session: its failed traces are the ones the Trace page offers.
    _visit(page, "Trace")
    charts_drawn(page, 1)
    assert page.locator('[data-testid="stException"]').count() == 0
    assert dialogs == [] and page.evaluate("() => window.__handoffscope_xss === undefined")
    assert page.errors == []


def test_a_link_to_a_trace_opens_it(server: str, page: Any) -> None:
    from auditor import load_traces

    trace_id = (
        load_traces(SAMPLE)
        .con.execute(
            'SELECT trace_id FROM spans WHERE "handoff.late" GROUP BY 1 ORDER BY 1 LIMIT 1'
        )
        .fetchone()[0]
    )
    open_page(page, f"{server}/trace?trace={trace_id}", "Trace")
    charts_drawn(page, 1)
    assert page.locator('[data-testid="stException"]').count() == 0
    assert trace_id in page.inner_text("body")


def test_a_frameworks_trace_shows_its_handoffs_estimated_spend_and_findings(page: Any) -> None:
    """An OpenAI Agents SDK run traced by OpenInference, uploaded as a user would: its two
    handoffs are counted, its gpt-4o spend is marked estimated, and each handoff is a finding
    naming sender and receiver."""
    import json

    folder = ROOT / "tests" / "fixtures" / "frameworks" / "openai-agents-openinference"
    reported = json.loads((folder / "reported.json").read_text())
    _visit(page, "Overview")
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(
        str(folder / "traces.jsonl")
    )
    page.wait_for_selector(f"{IDLE} :text('spans from traces.jsonl')", timeout=WAIT_MS)
    assert page.locator('[data-testid="stException"]').count() == 0
    handoffs = page.locator('[data-testid="stMetric"]', has_text="Handoffs").first
    assert handoffs.locator('[data-testid="stMetricValue"]').inner_text().strip() == str(
        len(reported["handoffs"])
    )
    spend = page.locator('[data-testid="stMetric"]', has_text="Total spend").first
    assert spend.locator('[data-testid="stMetricValue"]').inner_text().strip().endswith("est.")
    _visit(page, "Findings")
    for h in reported["handoffs"]:
        # The findings grid draws on a canvas; its cells are in the page, not visible.
        page.wait_for_selector(
            f"{IDLE} :text('{h['sender']} handed work to {h['receiver']}')",
            timeout=WAIT_MS,
            state="attached",
        )
    assert page.locator('[data-testid="stException"]').count() == 0
    assert page.errors == []
