"""The global filters in the sidebar: time range, agents and workflow name, on every page.

The widgets live in the app's entry point, which runs before every page, so a choice made on
one page holds on all of them. :func:`sidebar` draws them and returns the
:class:`~dashboard.selection.Filters` every data function takes.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import streamlit as st

from dashboard.data import Bounds, bucket_width
from dashboard.selection import Filters

TIME_KEY = "filter_time"
AGENTS_KEY = "filter_agents"
WORKFLOWS_KEY = "filter_workflows"
_SOURCE_KEY = "filter_source"


def sidebar(bounds: Bounds, *, source_key: str) -> Filters:
    """Draw the filters for a trace set with ``bounds``; return what they select.

    Choices that no longer exist (another trace set was loaded) are dropped rather than
    raising, and the time range resets to the new set's full range.
    """
    state = st.session_state
    if state.get(_SOURCE_KEY) != source_key:
        for key in (TIME_KEY, AGENTS_KEY, WORKFLOWS_KEY):
            state.pop(key, None)
        state[_SOURCE_KEY] = source_key
    for key, options in ((AGENTS_KEY, bounds.agents), (WORKFLOWS_KEY, bounds.workflows)):
        if key in state:
            state[key] = [v for v in state[key] if v in options]

    st.sidebar.subheader("Filters")
    start = end = None
    if bounds.start is not None and bounds.end is not None and bounds.end > bounds.start:
        lo = _floor(bounds.start)
        step = _step(lo, _ceil(bounds.end))
        hi = lo + step * -(-(_ceil(bounds.end) - lo) // step)  # whole steps, so both ends fit
        chosen = st.sidebar.slider(
            "Time range (UTC)",
            min_value=lo,
            max_value=hi,
            value=(lo, hi),
            step=step,
            format="MMM D, HH:mm",
            key=TIME_KEY,
            help="Workflow runs that started in this range.",
        )
        if chosen[0] > lo:
            start = chosen[0]
        if chosen[1] < hi:
            end = chosen[1]
    agents = st.sidebar.multiselect(
        "Agents",
        bounds.agents,
        key=AGENTS_KEY,
        placeholder="All agents",
        help="Workflow runs in which any chosen agent sent, received or did work.",
    )
    workflows = st.sidebar.multiselect(
        "Workflow",
        bounds.workflows,
        key=WORKFLOWS_KEY,
        placeholder="All workflows",
        help="Workflow runs with one of these names (gen_ai.workflow.name).",
    )
    filters = Filters(start=start, end=end, agents=tuple(agents), workflows=tuple(workflows))
    if filters.active:
        st.sidebar.button("Clear filters", on_click=clear, icon=":material/filter_alt_off:")
    return filters


def clear() -> None:
    """Reset every filter to "everything"."""
    for key in (TIME_KEY, AGENTS_KEY, WORKFLOWS_KEY):
        st.session_state.pop(key, None)


def time_bucket(bounds: Bounds, filters: Filters) -> timedelta:
    """The bucket width for time charts over the selected range."""
    return bucket_width(filters.start or bounds.start, filters.end or bounds.end)


def _step(lo: datetime, hi: datetime) -> timedelta:
    span = hi - lo
    for step in (
        timedelta(seconds=1),
        timedelta(minutes=1),
        timedelta(minutes=5),
        timedelta(hours=1),
        timedelta(days=1),
    ):
        if span / step <= 2000:
            return step
    return timedelta(days=1)


def _floor(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def _ceil(moment: datetime) -> datetime:
    floor = _floor(moment)
    return floor if floor == moment else floor + timedelta(minutes=1)
