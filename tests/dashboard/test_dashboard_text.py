"""Trace content is shown as the text it is, on every page: no link, no image, no dash.

A workflow named like a Markdown image pointing at a URL, and an agent whose name holds
`` -- `` (which Streamlit turns into an em dash in Markdown text), are written by the real
library; the dashboard is checked under AppTest and in headless Chromium.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from streamlit.testing.v1 import AppTest

from auditor import load_traces
from collector import InProcessChannel, accept, workflow
from collector.testing import SpanCapture
from dashboard.source import PATHS_ENV
from dashboard.ui import md
from tests.support.paths import REPO

ROOT = REPO
APP = ROOT / "dashboard" / "app.py"
WORKFLOW = "![x](http://host/img.png)"
AGENT = "writer -- v2 -> www.example.com :smile:"
PAGES = ["spend", "reliability", "latency", "handoffs", "findings", "trace"]


@pytest.mark.parametrize(
    "text",
    [
        WORKFLOW,
        AGENT,
        "`tick` ``two`` ```",
        " leading and trailing ",
        "<b>bold</b> & *em* _u_ [link](http://x) $x$ :red[red] # h",
        "   ",
        "line\nbreak",
    ],
)
def test_md_shows_text_verbatim_as_code(text: str) -> None:
    html = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md(text))
    assert "<a" not in html and "<img" not in html
    code = MarkdownIt("commonmark").parseInline(md(text))[0].children
    assert code is not None and [c.type for c in code] == ["code_inline"]
    assert code[0].content == " ".join(text.splitlines())


def test_md_of_nothing_is_nothing() -> None:
    assert md("") == ""


def build(folder: Path) -> Path:
    """Two workflow runs named ``WORKFLOW`` handing off to the agent ``AGENT``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "hostile-names.jsonl"
    cap = SpanCapture(service_name="names")
    cap.tracer_provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(str(path))))
    writer = cap.receiver(
        AGENT, validator=lambda w: accept(eta_ms=100), executor=lambda w: {"ok": True}
    )
    planner = cap.sender("planner")
    for run in range(2):
        with workflow(WORKFLOW, clock=cap.clock, tracer_provider=cap.tracer_provider):
            planner.handoff(
                InProcessChannel(writer),
                task_id=f"t-{run}",
                payload={},
                output_schema="doc@1",
                idempotency_key=f"t-{run}",
            )
    cap.shutdown()
    return path


def _markdown_of(at: AppTest) -> list[str]:
    """Every Markdown text of the page: captions, markdown, labels of metrics and widgets."""
    texts = [e.value for e in (*at.caption, *at.markdown, *at.sidebar.caption)]
    texts += [m.label for m in at.metric] + [m.value for m in at.metric]
    return [str(t) for t in texts]


def test_hostile_names_reach_markdown_only_as_code(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = build(tmp_path)
    monkeypatch.setenv(PATHS_ENV, json.dumps([str(path)]))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.sidebar.multiselect(key="filter_agents").select(AGENT).run()
    at.sidebar.multiselect(key="filter_workflows").select(WORKFLOW).run()
    assert not at.exception
    seen = set()
    for page in [None, *PAGES]:
        if page is not None:
            at = at.switch_page(f"views/{page}.py").run()
        assert not at.exception, (page, [e.message for e in at.exception])
        for text in _markdown_of(at):
            for name in (WORKFLOW, AGENT):
                if name in text:
                    # Only ever inside a code span.
                    assert md(name) in text, (page, text)
                    assert text.replace(md(name), "").count(name) == 0, (page, text)
                    seen.add(name)
    assert seen == {WORKFLOW, AGENT}
    trace = at.switch_page("views/trace.py").run()
    (caption,) = [c.value for c in trace.caption if "· trace" in c.value]
    assert caption.startswith(md(WORKFLOW) + " · trace ")


# ---------------------------------------------------------------------------------------
# In a real browser
# ---------------------------------------------------------------------------------------
@pytest.mark.browser
def test_hostile_names_show_as_text_in_chromium(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    from tests.support.browser import (
        ARGS,
        CHROMIUM,
        IDLE,
        WAIT_MS,
        charts_drawn,
        dashboard,
        open_page,
    )

    assert CHROMIUM.exists(), "install Debian's Chromium: apt-get install -y chromium"
    path = build(tmp_path / "traces")
    trace_id = load_traces(path).con.execute("SELECT min(trace_id) FROM spans").fetchone()
    assert trace_id is not None
    with dashboard(path) as url, sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = chromium.new_page(viewport={"width": 1440, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        open_page(page, f"{url}/trace?trace={trace_id[0]}", "Trace")
        charts_drawn(page, 1)
        main = page.locator('[data-testid="stMain"]')
        # The workflow name: its text, verbatim, and neither an image nor a link.
        assert main.locator("code", has_text=WORKFLOW).count() >= 1
        assert page.locator("img[src*='host']").count() == 0
        assert page.locator("a[href*='host']").count() == 0
        # The agent: chosen in the filter, the caption names it as it is.
        sidebar = page.locator('[data-testid="stSidebar"]')
        sidebar.locator('[data-testid="stMultiSelect"]').first.click()
        page.locator('[role="option"]', has_text="writer").first.click()
        page.keyboard.press("Escape")
        page.wait_for_selector(f"{IDLE} [data-testid='stCaptionContainer'] code", timeout=WAIT_MS)
        page.wait_for_function(
            "(agent) => [...document.querySelectorAll('[data-testid=stMain] code')]"
            ".some(c => c.textContent === agent)",
            arg=AGENT,
            timeout=WAIT_MS,
        )
        shown = main.inner_text()
        assert AGENT in shown and WORKFLOW in shown
        for converted in ("writer — v2", "v2 → www", "😄"):
            assert converted not in shown
        assert page.locator("a[href*='example.com']").count() == 0
        chromium.close()
        assert errors == []


def test_an_outcome_a_trace_file_claims_is_shown_as_code(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The Trace page's Outcome metric: a metric's value is Markdown in Streamlit."""
    path = build(tmp_path)
    claimed = "done -- see ![x](http://host/o.png)"
    text = path.read_text()
    assert text.count('"success"') >= 2
    path.write_text(text.replace('"success"', json.dumps(claimed)))
    trace_id = load_traces(path).con.execute("SELECT min(trace_id) FROM spans").fetchone()
    assert trace_id is not None
    monkeypatch.setenv(PATHS_ENV, json.dumps([str(path)]))
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.query_params["trace"] = trace_id[0]
    at = at.run().switch_page("views/trace.py").run()
    assert not at.exception
    outcome = {m.label: m.value for m in at.metric}["Outcome"]
    assert outcome == md(claimed)
