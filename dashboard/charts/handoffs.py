"""Handoff charts: the state funnel, the agent-to-agent Sankey and why attempts were voided."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from collector import schema
from dashboard.charts.style import (
    OBSERVED,
    OTHER,
    STATE_COLORS,
    empty,
    figure,
    rgba,
    text,
)


# ---------------------------------------------------------------------------------------
# Handoffs
# ---------------------------------------------------------------------------------------
def state_funnel(frame: pd.DataFrame) -> go.Figure:
    """The handshake funnel: proposed → validated → committed, with void beside it.

    ``frame`` columns: ``stage``, ``handoffs`` in funnel order.
    """
    fig = figure("Handshake funnel")
    if frame.empty:
        return empty(fig)
    fig.add_funnel(
        y=text(frame["stage"]),
        x=frame["handoffs"],
        textinfo="value+percent initial",
        marker={"color": [STATE_COLORS.get(s, OTHER) for s in frame["stage"]]},
    )
    return fig


def edge_sankey(frame: pd.DataFrame) -> go.Figure:
    """Agent-to-agent handoffs as a Sankey diagram, links coloured by final state.

    ``frame`` columns: ``sender``, ``receiver``, ``state``, ``handoffs``. Each agent is one
    node, so a chain reads left to right (orchestrator → research → write ...). When agents
    hand work back and forth (a cycle, which a Sankey cannot draw), senders and receivers
    get a column each instead.
    """
    fig = figure("Handoffs between agents")
    if frame.empty:
        return empty(fig)
    edges = set(zip(frame["sender"].astype(str), frame["receiver"].astype(str), strict=True))
    if _has_cycle(edges):
        senders = sorted({a for a, _ in edges})
        receivers = sorted({b for _, b in edges})
        names = senders + receivers
        source = {n: i for i, n in enumerate(senders)}
        target = {n: len(senders) + i for i, n in enumerate(receivers)}
        colors = [OBSERVED] * len(senders) + [OTHER] * len(receivers)
    else:
        names = sorted({a for a, _ in edges} | {b for _, b in edges})
        source = target = {n: i for i, n in enumerate(names)}
        colors = [OBSERVED] * len(names)
    fig.add_trace(
        go.Sankey(
            arrangement="snap",
            node={"label": text(names), "pad": 18, "thickness": 16, "color": colors},
            link={
                "source": [source[str(a)] for a in frame["sender"]],
                "target": [target[str(b)] for b in frame["receiver"]],
                "value": frame["handoffs"].tolist(),
                "color": [rgba(STATE_COLORS.get(str(v), OTHER), 0.55) for v in frame["state"]],
                "customdata": text(frame["state"]),
                "hovertemplate": "%{source.label} → %{target.label}<br>%{customdata}: "
                "%{value:,}<extra></extra>",
            },
        )
    )
    return fig


def void_reasons(frame: pd.DataFrame) -> go.Figure:
    """Why attempts were voided, most frequent on top.

    ``frame`` columns: ``reason``, ``attempts``.
    """
    fig = figure("Why attempts were voided", xaxis={"title": "attempts"})
    if frame.empty:
        return empty(fig, "No attempt was voided")
    data = frame.sort_values("attempts")
    fig.add_bar(
        y=text(data["reason"]),
        x=data["attempts"],
        orientation="h",
        name="attempts",
        marker_color=STATE_COLORS[schema.STATE_VOID],
        hovertemplate="%{y}: %{x:,} attempts<extra></extra>",
    )
    fig.update_yaxes(automargin=True)
    return fig


def _has_cycle(edges: set[tuple[str, str]]) -> bool:
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    done: set[str] = set()
    for root in list(graph):
        path: set[str] = set()
        stack = [(root, iter(graph.get(root, ())))]
        path.add(root)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.discard(node)
                done.add(node)
            elif child in path:
                return True
            elif child not in done:
                path.add(child)
                stack.append((child, iter(graph.get(child, ()))))
    return False
