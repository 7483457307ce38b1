"""What the audit made of other frameworks' spans, trace by trace: the agents it found and the
evidence that named each, the delegations it recorded as edges and the kind of evidence of
each, the spans whose tokens it could charge to no agent, and the traces it could not judge.

:func:`explain` reads a prepared connection (the ``hs_fw_*`` macros and views of
:mod:`auditor.model.attribution` and ``views.sql``); ``handoffscope audit --explain`` prints it,
and every report format carries its verdict. A trace is *not judged* when it shows two
agents or more and some of them are in no delegation the audit recognised: the audit says
so instead of passing what it could not see.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from auditor.database.statements import run
from auditor.model.attribution import CALL_ARGS

if TYPE_CHECKING:
    import duckdb

__all__ = ["NOT_JUDGED_EXIT", "Structure", "explain"]

NOT_JUDGED_EXIT: Final = 3
"""The exit code of an audit whose findings pass but which saw agents it could not judge."""

_AGENTS: Final = f"""
-- What each span names itself, read once: filtered outside a materialised CTE, DuckDB would
-- evaluate the agent macros once in the filter and again for the rows that pass.
WITH own AS MATERIALIZED (
    SELECT trace_id, hs_fw_agent({CALL_ARGS}) AS agent, hs_fw_named_by({CALL_ARGS}) AS kind,
           "gen_ai.agent.name" AS key_agent, agent AS span_agent
    FROM spans WHERE span_id IN (SELECT span_id FROM hs_fw_spans)
)
SELECT trace_id, agent, list_sort(list_distinct(list(kind))) AS evidence
FROM (
    SELECT trace_id, agent, kind FROM own
    UNION ALL
    SELECT trace_id, key_agent, 'genai: gen_ai.agent.name' FROM own WHERE span_agent = key_agent
    UNION ALL
    -- A run named by its class only, renamed after the tool its agent's model asked for.
    SELECT trace_id, agent, 'the tool a model call asked for' FROM hs_fw_spans
    WHERE agent_run AND named AND hs_fw_class_run(name)
      AND agent || '.run' <> name
    UNION ALL
    SELECT trace_id, handed, 'a tool call''s arguments' FROM hs_fw_spans
    UNION ALL
    SELECT trace_id, unnest([sender, receiver]), 'a handoff' FROM hs_framework_handoffs_all
) AS named
WHERE agent IS NOT NULL AND kind IS NOT NULL AND trace_id IS NOT NULL
GROUP BY trace_id, agent
-- Agents a run or a key names before those only a tool's arguments or a handoff name (the
-- kind of evidence has a name of its own: ClickHouse reads an output alias in ORDER BY).
ORDER BY trace_id, bool_and(kind IN ('a tool call''s arguments', 'a handoff')), agent
"""
_ARGUMENTS: Final = "a tool call's arguments"
_HANDOFF: Final = "a handoff"
"""An agent only a handoff names (a receiver with no span of its own): listed, as the
summary counts it, only when nothing else names it."""
_EDGES: Final = """
SELECT trace_id, span_id, sender, receiver, convention
FROM hs_framework_handoffs_all
ORDER BY trace_id, start_unix_nano, span_id
"""
_HANDSHAKES: Final = """
SELECT DISTINCT trace_id, unnest([sender, receiver]) AS agent
FROM hs_handoffs_all WHERE mode <> 'framework'
"""
_UNCHARGED: Final = """
SELECT u.trace_id, u.span_id, u.name, u.input_tokens, u.output_tokens
FROM hs_usage_all AS u
JOIN hs_fw_spans AS f ON f.trace_id = u.trace_id AND f.span_id = u.span_id
WHERE NOT f.named
ORDER BY u.trace_id, u.start_unix_nano, u.span_id
"""


@dataclass
class Structure:
    """Per trace of other instrumentations' spans: ``agents`` (each with the evidence that
    named it), ``edges`` (sender, receiver and the kind of evidence), ``uncharged`` (spans
    whose tokens no agent could be charged with) and ``unrecognised`` (the agents in no
    recognised delegation of a trace that shows two agents or more)."""

    traces: list[dict[str, Any]] = field(default_factory=list)
    scattered: list[str] = field(default_factory=list)
    """Agents of several traces (each run in a trace of its own) where no trace holds a
    delegation the audit recognised: delegation not recognised across traces."""

    @property
    def not_judged(self) -> list[dict[str, Any]]:
        """The traces the audit could not judge."""
        return [t for t in self.traces if t["unrecognised"]]

    def verdict(self) -> str | None:
        """Why the verdict cannot be PASS (None when every trace was judged)."""
        traces = self.not_judged
        if self.scattered and not traces:
            names = ", ".join(self.scattered)
            return (
                f"{len(self.scattered)} agents seen, each in traces of its own, delegation"
                f" not recognised: {names}; --explain lists what was found"
            )
        if not traces:
            return None
        first = traces[0]
        agents = len(first["agents"])
        names = ", ".join(first["unrecognised"])
        text = f"{agents} agents seen, delegation not recognised: {names}"
        if len(traces) > 1:
            text += f" (and {len(traces) - 1} more traces)"
        return text + "; --explain lists what was found"

    def uncharged_tokens(self) -> tuple[int, int]:
        """Input and output tokens on spans charged to no agent."""
        spans = [s for t in self.traces for s in t["uncharged"]]
        return (
            sum(s["input_tokens"] or 0 for s in spans),
            sum(s["output_tokens"] or 0 for s in spans),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the JSON report's ``structure``)."""
        return {
            "verdict": self.verdict(),
            "not_judged": len(self.not_judged),
            "scattered": self.scattered,
            "traces": self.traces,
        }


def _loose(name: str) -> str:
    """A name as ``hs_fw_loose`` compares it."""
    return name.lower().replace(" ", "").replace("_", "").replace("-", "")


def explain(con: duckdb.DuckDBPyConnection) -> Structure | None:
    """What the audit found in the spans of other instrumentations on ``con`` (prepared);
    None when there are none (handoffscope's own spans are judged by the handshake rules)."""
    if not run(con, "SELECT count(*) FROM (SELECT 1 FROM hs_fw_spans LIMIT 1)")[0][0]:
        return None
    traces: dict[str, dict[str, Any]] = {}

    def trace(trace_id: str) -> dict[str, Any]:
        # Looked up before a new one is built: called once per agent, edge and span listed.
        found = traces.get(trace_id)
        if found is None:
            found = traces[trace_id] = {
                "trace_id": trace_id,
                "agents": [],
                "edges": [],
                "uncharged": [],
                "unrecognised": [],
            }
        return found

    # Each trace's agents by their loosely compared name (the first listed of each).
    by_loose: dict[tuple[str, str], dict[str, Any]] = {}
    for trace_id, agent, evidence in run(con, _AGENTS):
        # A tool's argument names an agent loosely (a member id for "Research Agent"): one
        # agent, under the name its run gave it.
        key = (trace_id, _loose(agent))
        same = by_loose.get(key)
        # A handoff names the agent only when nothing else does.
        evidence = [e for e in evidence if e != _HANDOFF] or list(evidence)
        if same is None:
            by_loose[key] = entry = {"agent": agent, "evidence": evidence}
            trace(trace_id)["agents"].append(entry)
        elif evidence == [_HANDOFF]:
            continue
        elif evidence == [_ARGUMENTS]:
            same["evidence"] = sorted({*same["evidence"], _ARGUMENTS})
        else:
            same["agent"] = agent
            same["evidence"] = sorted({*same["evidence"], *evidence})
    for trace_id, span_id, sender, receiver, kind in run(con, _EDGES):
        trace(trace_id)["edges"].append(
            {"sender": sender, "receiver": receiver, "evidence": kind, "span_id": span_id}
        )
    for trace_id, span_id, name, tokens_in, tokens_out in run(con, _UNCHARGED):
        trace(trace_id)["uncharged"].append(
            {
                "span_id": span_id,
                "name": name,
                "input_tokens": tokens_in,
                "output_tokens": tokens_out,
            }
        )
    handshakes: dict[str, set[str]] = {}
    for trace_id, agent in run(con, _HANDSHAKES):
        handshakes.setdefault(trace_id, set()).add(agent)
    for t in traces.values():
        agents = [a["agent"] for a in t["agents"]]
        if len(agents) < 2:
            continue
        joined = handshakes.get(t["trace_id"], set()) | {
            name for e in t["edges"] for name in (e["sender"], e["receiver"])
        }
        t["unrecognised"] = [a for a in agents if a not in joined]
    everyone = sorted({a["agent"] for t in traces.values() for a in t["agents"]})
    delegated = handshakes or any(t["edges"] for t in traces.values())
    scattered = everyone if len(everyone) > 1 and not delegated else []
    return Structure(sorted(traces.values(), key=lambda t: str(t["trace_id"])), scattered)
