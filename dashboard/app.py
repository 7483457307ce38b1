"""The dashboard's entry point: the shared sidebar, then the page navigation.

Run it with ``handoffscope dashboard PATH`` (or ``streamlit run dashboard/app.py`` with the
paths in ``HANDOFFSCOPE_DASHBOARD_PATHS``). Each page is a short script in ``views/``.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from dashboard import cache, sidebar

# Not "pages/": a folder of that name beside the entry point switches Streamlit to its legacy
# multipage mode, which runs a page without this script (and so without the sidebar).
PAGES = Path(__file__).with_name("views")

st.set_page_config(page_title="handoffscope", page_icon=":material/handshake:", layout="wide")

navigation = st.navigation(
    [
        st.Page(PAGES / "overview.py", title="Overview", icon=":material/dashboard:", default=True),
        st.Page(PAGES / "spend.py", title="Spend", icon=":material/payments:"),
        st.Page(PAGES / "reliability.py", title="Reliability", icon=":material/verified:"),
        st.Page(
            PAGES / "latency.py",
            title="Validation latency",
            icon=":material/timer:",
            url_path="latency",
        ),
        st.Page(PAGES / "handoffs.py", title="Handoffs", icon=":material/swap_horiz:"),
        st.Page(PAGES / "findings.py", title="Findings", icon=":material/report:"),
        st.Page(PAGES / "trace.py", title="Trace", icon=":material/account_tree:"),
    ],
    position="top",
)
current = sidebar.render()
try:
    navigation.run()
finally:
    # Once the page is drawn, every rule starts over the whole set in the background: the
    # Findings page, and the overview's findings, are then ready or under way when asked.
    if current is not None:
        cache.warm_findings(current.loaded, **current.thresholds.options())
