"""Foreign conventions as data: the keys other instrumentations use for agents, models and
handoffs, one row per key with the convention it comes from.

The auditor reads traces it did not write: the OpenTelemetry GenAI conventions, OpenInference
(Arize), OpenLLMetry (Traceloop), pydantic-ai and Logfire, LangGraph's run metadata, CrewAI and
the Vercel AI SDK each name an agent, a model or a handoff with keys of their own. This module
holds those keys; :mod:`auditor.model.attribution` turns the rows into SQL, so adding a
convention is adding a row here, not a new code path.

Every key is read from a span's ``attributes`` map (or its typed column, when
:mod:`auditor.database.span_table` gives the key one). The order of :data:`AGENT_KEYS` is
the order in which
a span's own keys name its agent; ``docs/trace-schema.md`` documents the whole resolution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from collector import schema as s

__all__ = [
    "AGENT_KEYS",
    "AGENT_NAME_PATTERNS",
    "AGENT_ID",
    "AGENT_RUN_NAMES",
    "AGENT_SPAN",
    "AGENT_TEXT_FIELDS",
    "ARGUMENT_KEYS",
    "CONVERSATION_KEYS",
    "DELEGATE_ARGUMENTS",
    "EVIDENCE",
    "HANDOFF_KEYS",
    "HANDOFF_TOOL",
    "MODEL_KEYS",
    "TEXT_KEYS",
    "TOOL_CALL_KEYS",
    "TOOL_KEYS",
    "TOOL_SPAN",
    "TRANSFER_TOOL",
    "AgentKey",
    "HandoffKeys",
    "KindGuard",
]

# Keys of the conventions (constants so the SQL and the docs share them).
OPENINFERENCE_SPAN_KIND: Final = "openinference.span.kind"
"""OpenInference: ``AGENT``, ``LLM``, ``TOOL``, ``CHAIN`` ..."""
OPENINFERENCE_AGENT_NAME: Final = "agent.name"
"""OpenInference: the agent's name (AGENT spans)."""
OPENINFERENCE_GRAPH_NODE_ID: Final = "graph.node.id"
"""OpenInference: the node (for the OpenAI Agents SDK, the agent) a span stands for."""
OPENINFERENCE_GRAPH_PARENT_ID: Final = "graph.node.parent_id"
"""OpenInference: the node that handed control to this one (on a handoff span, the sender)."""
OPENINFERENCE_MODEL: Final = "llm.model_name"
"""OpenInference: the model of an LLM span."""
OPENINFERENCE_TOOL_NAME: Final = "tool.name"
"""OpenInference: the tool of a TOOL span."""
OPENINFERENCE_METADATA: Final = "metadata"
"""OpenInference: run metadata as a JSON object (LangChain puts LangGraph's node there)."""
LANGGRAPH_NODE: Final = "langgraph_node"
"""LangGraph (in ``metadata``): the graph node a run belongs to."""
LANGGRAPH_CHECKPOINT_NS: Final = "langgraph_checkpoint_ns"
"""LangGraph (in ``metadata``): ``outer_node:id|inner_node:id``; the first node is the agent
when a node is itself a graph (a prebuilt ReAct agent's ``agent`` and ``tools`` nodes)."""
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
"""GenAI: the model that answered (a dated id such as ``gpt-4o-2024-08-06``)."""
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
"""GenAI: the tool of an ``execute_tool`` span."""
OPENLLMETRY_SPAN_KIND: Final = "traceloop.span.kind"
"""OpenLLMetry: ``workflow``, ``agent``, ``tool``, ``task``, ``handoff`` ..."""
OPENLLMETRY_ENTITY_NAME: Final = "traceloop.entity.name"
"""OpenLLMetry: the name of the workflow, agent, task or tool a span stands for."""
OPENLLMETRY_HANDOFF_FROM: Final = "gen_ai.handoff.from_agent"
"""OpenLLMetry (openai-agents): the agent handing off."""
OPENLLMETRY_HANDOFF_TO: Final = "gen_ai.handoff.to_agent"
"""OpenLLMetry (openai-agents): the agent receiving."""
OPENLLMETRY_MODEL: Final = "llm.request.model"
"""OpenLLMetry (before the GenAI keys): the requested model."""
PYDANTIC_AI_AGENT_NAME: Final = "agent_name"
"""pydantic-ai and Logfire: the agent of an agent run span."""
LOGFIRE_HANDOFF_FROM: Final = "from_agent"
"""Logfire (openai-agents ``Handoff: a → b`` spans): the agent handing off."""
LOGFIRE_HANDOFF_TO: Final = "to_agent"
"""Logfire (openai-agents): the agent receiving."""
LOGFIRE_MESSAGE: Final = "logfire.msg"
"""Logfire: the span's rendered message."""
CREWAI_AGENT_ROLE: Final = "crewai.agent.role"
"""CrewAI (OpenLLMetry): the agent's role, which names it."""
OPENINFERENCE_INPUT: Final = "input.value"
"""OpenInference: a span's input (a tool call's arguments, often as JSON)."""
OPENINFERENCE_OUTPUT: Final = "output.value"
"""OpenInference: a span's output (JSON, or the text of the object it returned)."""
GEN_AI_TOOL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
"""GenAI: the arguments of a tool call (JSON)."""
OPENLLMETRY_ENTITY_INPUT: Final = "traceloop.entity.input"
"""OpenLLMetry: the input of a task, tool or agent span (JSON)."""
VERCEL_MODEL: Final = "ai.model.id"
"""Vercel AI SDK: the model."""
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
"""GenAI: the conversation (session, thread) a span belongs to."""
OPENINFERENCE_SESSION_ID: Final = "session.id"
"""OpenInference: the session a span belongs to."""


@dataclass(frozen=True, slots=True)
class KindGuard:
    """A key that names an agent only on spans whose ``key`` has one of ``values``."""

    key: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AgentKey:
    """A key whose value names the agent of the span that carries it."""

    convention: str
    key: str
    guard: KindGuard | None = None
    json_path: tuple[str, ...] = ()
    """For a JSON-object attribute: the members to read, first present wins."""
    node_span: bool = False
    """Only on the span of the node itself (its name equals the first member read)."""
    may_hold_id: bool = False
    """Some instrumentations put an agent's id here (:data:`AGENT_ID`): then it names
    nothing and the next key is read."""


@dataclass(frozen=True, slots=True)
class HandoffKeys:
    """Two keys on one span naming the agent handing off and the agent receiving."""

    convention: str
    source: str
    target: str


AGENT_KEYS: Final[tuple[AgentKey, ...]] = (
    AgentKey("genai", s.GEN_AI_AGENT_NAME, may_hold_id=True),
    AgentKey("pydantic-ai", PYDANTIC_AI_AGENT_NAME),
    AgentKey("openinference", OPENINFERENCE_AGENT_NAME),
    AgentKey(
        "openinference",
        OPENINFERENCE_GRAPH_NODE_ID,
        guard=KindGuard(OPENINFERENCE_SPAN_KIND, ("AGENT",)),
    ),
    AgentKey(
        "openllmetry",
        OPENLLMETRY_ENTITY_NAME,
        guard=KindGuard(OPENLLMETRY_SPAN_KIND, ("agent",)),
    ),
    AgentKey(
        "langgraph",
        OPENINFERENCE_METADATA,
        json_path=(LANGGRAPH_NODE, LANGGRAPH_CHECKPOINT_NS),
        node_span=True,
    ),
    AgentKey("crewai", CREWAI_AGENT_ROLE),
)
"""Keys naming a span's own agent, first match wins; without one, the nearest ancestor's."""

MODEL_KEYS: Final = (
    s.GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_MODEL,
    OPENINFERENCE_MODEL,
    OPENLLMETRY_MODEL,
    VERCEL_MODEL,
)
"""Keys naming the model of a span reporting usage, first present wins (a price covers a
model's dated ids too: ``gpt-4o-2024-08-06`` is priced as ``gpt-4o``)."""

HANDOFF_KEYS: Final[tuple[HandoffKeys, ...]] = (
    HandoffKeys("genai", s.GEN_AI_HANDOFF_SOURCE, s.GEN_AI_HANDOFF_TARGET),
    HandoffKeys("openllmetry", OPENLLMETRY_HANDOFF_FROM, OPENLLMETRY_HANDOFF_TO),
    HandoffKeys("logfire", LOGFIRE_HANDOFF_FROM, LOGFIRE_HANDOFF_TO),
)
"""Key pairs that make a span a handoff from one named agent to another."""

OPENINFERENCE_HANDOFF_PREFIX: Final = "handoff to "
"""OpenInference names an OpenAI Agents SDK handoff span ``handoff to {receiver}`` and puts
the sender in ``graph.node.parent_id``."""

TOOL_KEYS: Final = (GEN_AI_TOOL_NAME, OPENINFERENCE_TOOL_NAME)
"""Keys naming the tool a span runs."""

TOOL_SPAN: Final[tuple[KindGuard, ...]] = (
    KindGuard(s.GEN_AI_OPERATION_NAME, ("execute_tool",)),
    KindGuard(OPENINFERENCE_SPAN_KIND, ("TOOL",)),
    KindGuard(OPENLLMETRY_SPAN_KIND, ("tool",)),
)
"""What marks a span as a tool call, in each convention."""

TRANSFER_TOOL: Final = r"^(?:.*[-.:/])?transfer_(?:back_)?to_(.+)$"
"""A handoff tool (GenAI ``execute_tool transfer_to_*``, LangGraph's handoff tools); the
receiver is the rest of the name."""

AGENT_SPAN: Final[tuple[KindGuard, ...]] = (
    KindGuard(s.GEN_AI_OPERATION_NAME, ("invoke_agent",)),
    KindGuard(OPENINFERENCE_SPAN_KIND, ("AGENT",)),
    KindGuard(OPENLLMETRY_SPAN_KIND, ("agent",)),
)
"""What marks a span as an agent's run (so is a span carrying ``agent_name``)."""

AGENT_RUN_NAMES: Final = (r"^[A-Za-z_]*Agent\.run$",)
"""Span names that make a span an agent's run whatever its kind: a class named ``Agent`` or
``...Agent`` running (Haystack's ``Agent.run``, which OpenInference marks ``CHAIN``). Such a
run is named by the tool its enclosing agent's model call asked for (:data:`TOOL_CALL_KEYS`),
else by its class."""

TOOL_CALL_KEYS: Final = tuple(
    f"llm.output_messages.0.message.tool_calls.{i}.tool_call.function.name" for i in range(4)
)
"""Keys of a model call naming the tools its answer asked for, in order (OpenInference): an
agent's run nested beside it in the same parent, after it, is the work of one of those tools
(an agent called as a tool), the n-th such run after the call doing the n-th tool's work."""

AGENT_NAME_PATTERNS: Final = (
    r"^invoke_agent (.+)$",
    r"^Agent: (.+)$",
    r"^(.+)\.run$",
    r"^(.+)\.agent$",
)
"""How an agent's run span (:data:`AGENT_SPAN`) names its agent when no key does: the first
pattern that matches the span's name gives it (GenAI ``invoke_agent {name}``, ``Agent: {name}``,
OpenInference's smolagents and Agno ``{name}.run``, OpenLLMetry ``{name}.agent``)."""

DELEGATE_ARGUMENTS: Final = ("coworker", "member_id", "agent_name", "to_agent")
"""Arguments of a tool call that name the agent the tool hands work to (CrewAI's delegation
tools, Agno's ``delegate_task_to_member``, LlamaIndex's ``handoff``, routers): the tool's work
is that agent's, inside the call or, when it only passes the turn, after it."""

AGENT_TEXT_FIELDS: Final = ("current_agent_name",)
"""Fields that name the agent whose turn a span runs in, read from the span's input or output
text (:data:`TEXT_KEYS`, the input first) when no key names its agent: a workflow's events
carry them (LlamaIndex's ``AgentSetup(..., current_agent_name='triage')``), in a repr or as
JSON, escaped or not."""

TEXT_KEYS: Final = (OPENINFERENCE_INPUT, OPENINFERENCE_OUTPUT)
"""Keys holding a span's input and output as text (:data:`AGENT_TEXT_FIELDS`)."""

ARGUMENT_KEYS: Final = (OPENINFERENCE_INPUT, GEN_AI_TOOL_ARGUMENTS, OPENLLMETRY_ENTITY_INPUT)
"""Keys holding a tool call's arguments (read as text: an argument is found at any depth)."""

CONVERSATION_KEYS: Final = (GEN_AI_CONVERSATION_ID, OPENINFERENCE_SESSION_ID)
"""Keys naming the conversation a span belongs to, first present wins: traces holding the
same value are one conversation, as are traces tied by span links (a runtime that starts a
trace per message). A receiver's turn after a handoff is read across its conversation."""

HANDOFF_TOOL: Final = r"(?i)^(?:transfer|handoff|hand_off|delegate|route)"
"""A tool whose call passes the turn to another agent even when it does not name it: the
receiver is the next other agent to run."""

EVIDENCE: Final = {
    "delegation": "an agent's run inside another agent's tool call",
    "nested-run": "an agent's run inside another agent's run (at any depth)",
    "agent-tool": "a tool call whose tool is an agent, or whose arguments name one"
    f" ({', '.join(DELEGATE_ARGUMENTS)})",
    "graph-parent": "a run whose graph.node.parent_id names another agent's run",
    "span-link": "a run linked to another agent's span",
    "turn-passing": "a handoff tool call, then the turn passing to another agent's run",
    "run-sequence": "the turn passing from one agent's run to the next, inside no other"
    " agent's run (a flow's or a pipeline's wiring); the turn coming back to the trace's first"
    " agent from the one it gave the turn to is an answer returning, no edge",
    "transfer-tool": "a handoff tool (transfer_to_{receiver})",
    "graph-transition": "control passing between the agents' nodes of one graph",
}
"""Each kind of evidence of a delegation, besides handoff spans (:data:`HANDOFF_KEYS`, named
by their convention). The same delegation seen through two kinds is one edge."""

AGENT_ID: Final = r"^(?:[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$"
"""A ``gen_ai.agent.name`` that is an id, not a name (CrewAI's own tracing writes an agent's
key there): the span's other keys name the agent, and the id only when none does."""
