"""The handshake for LangGraph handoffs: a handoff tool that validates, a node that commits.

In LangGraph an agent hands off with a tool that returns ``Command(goto=agent)``; the
receiving agent is a node. Put the handshake at both places::

    from collector.integrations.langgraph import committed_node, validated_handoff_tool

    supervisor = create_react_agent(model, [validated_handoff_tool("researcher", validator=check)])
    builder.add_node("supervisor", supervisor, destinations=("researcher",))
    builder.add_node("researcher", committed_node("researcher", research_agent))

When the supervisor's model calls ``transfer_to_researcher``, the researcher's validator
answers within the 2 s clock. On accept the tool returns ``Command(goto="researcher")`` and
the researcher's node is the commit: it runs once per idempotency key,
``{thread id}:{tool call id}``, so a run retried on the same thread (or a tool call delivered
twice) gets the node's stored update instead of a second run; with a ``SQLiteStore`` that
holds across a restart. On reject or timeout the tool returns a ``ToolMessage`` naming the
reason and control stays with the supervisor.

Spans: the ``handoff`` span is a child of the tool's span when OpenInference's LangChain
instrumentation traces the graph (else of the current OpenTelemetry span); ``handoff.commit``
follows it through the trace context the accepted tool message carries. Tokens stay on the
model spans of the instrumentation; the handshake reports none.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import Annotated, Any

from opentelemetry import trace

from collector import schema
from collector.acceptor import Receiver
from collector.channel import InProcessChannel
from collector.clock import Clock
from collector.errors import CommitWithoutAccept, ConfigurationError
from collector.handoff import Handoff
from collector.idempotency import IdempotencyStore
from collector.integrations.handshake import (
    HandshakeSettings,
    default_store,
    outcome_of,
    refusal,
)
from collector.messages import CommitRequest, CommitResult, OutputSchema, decode
from collector.work import Validator, Work

try:
    from langchain_core.messages import (
        BaseMessage,
        ToolMessage,
        message_to_dict,
        messages_from_dict,
    )
    from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
    from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool
    from langgraph.prebuilt import InjectedState
    from langgraph.types import Command
except ImportError as e:  # pragma: no cover - only without the extra
    raise ImportError(
        "collector.integrations.langgraph needs LangGraph: pip install 'handoffscope[langgraph]'"
    ) from e

__all__ = ["ARTIFACT_KEY", "committed_node", "handoff_key", "validated_handoff_tool"]

ARTIFACT_KEY = "handoffscope.commit"
"""Where an accepted handoff's tool message carries its commit request (``artifact``)."""

_MESSAGE = "__handoffscope_message__"
_pending: dict[str, Handoff] = {}  # accepted handoffs, from the tool until the node commits
_pending_lock = threading.Lock()
_executing: ContextVar[Callable[[Work], Any] | None] = ContextVar(
    "handoffscope_langgraph_node", default=None
)


def handoff_key(config: RunnableConfig, tool_call_id: str) -> str:
    """The default idempotency key: the thread id and the tool call id.

    The tool call id is in the checkpointed model message, so a run resumed or replayed on
    the same thread hands off under the same key.
    """
    thread = (config.get("configurable") or {}).get("thread_id")
    return f"{thread}:{tool_call_id}" if thread is not None else tool_call_id


def validated_handoff_tool(
    agent_name: str,
    *,
    validator: Validator | None = None,
    default_eta_ms: int | None = None,
    name: str | None = None,
    description: str | None = None,
    sender: str | None = None,
    expects: str = "messages@1",
    produces: tuple[str, ...] | None = None,
    store: IdempotencyStore | None = None,
    key: Callable[[RunnableConfig, str], str] = handoff_key,
    parent_graph: bool = True,
    validation_timeout_s: float = 2.0,
    deadline_s: float = 300.0,
    late_answer_window_s: float = 60.0,
    clock: Clock | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> BaseTool:
    """A ``transfer_to_<agent_name>`` tool: validate, then ``Command(goto=agent_name)``.

    ``validator(work)`` sees ``work.payload == {"task": ...}``. ``sender`` names the agent
    using the tool (default: the graph node it runs in). ``parent_graph=True`` sends the
    ``Command`` to the parent graph, as a tool inside an agent subgraph must; pass False in a
    flat graph. Use the same ``store`` for ``committed_node(agent_name, ...)``.
    """
    settings = HandshakeSettings(
        agent_name,
        validator=validator,
        default_eta_ms=default_eta_ms,
        store=store if store is not None else default_store(),
        produces=produces,
        validation_timeout_s=validation_timeout_s,
        deadline_s=deadline_s,
        late_answer_window_s=late_answer_window_s,
        clock=clock,
        tracer_provider=tracer_provider,
    )
    tool_name = name or f"transfer_to_{agent_name}"
    wanted = str(OutputSchema.parse(expects))
    graph = Command.PARENT if parent_graph else None

    def open_handoff(task: str, tool_call_id: str, config: RunnableConfig) -> Handoff:
        receiver = settings.receiver_for(_run_node, tracer_provider)
        s = settings.sender_for(sender or _node_of(config), tracer_provider)
        return s.open(
            InProcessChannel(receiver),
            task_id=f"{tool_name}:{tool_call_id}",
            payload={"task": task},
            output_schema=wanted,
            idempotency_key=key(config, tool_call_id),
            deadline_unix_ms=settings.deadline_unix_ms(s.clock.time_ns()),
            parent=_framework_span(),
        )

    def answered(h: Handoff, state: Any, tool_call_id: str) -> Any:
        if h.state != schema.STATE_VALIDATED:
            h.close()
            text = refusal(outcome_of(h), agent_name, timeout_s=validation_timeout_s)
            return ToolMessage(text, tool_call_id=tool_call_id, name=tool_name, status="error")
        request = h.commit_request()
        _hold(request.handoff_id, h)
        eta = h.answer.eta_ms if h.answer is not None else None
        message = ToolMessage(
            f"{agent_name} accepted the handoff (ETA {eta} ms); control moves to {agent_name}.",
            tool_call_id=tool_call_id,
            name=tool_name,
            artifact={ARTIFACT_KEY: request.to_dict()},
        )
        return Command(
            goto=agent_name,
            graph=graph,
            update={"messages": [*_messages(state), message]},
        )

    def transfer(
        task: str,
        state: Annotated[Any, InjectedState],
        tool_call_id: Annotated[str, InjectedToolCallId],
        config: RunnableConfig,
    ) -> Any:
        h = open_handoff(task, tool_call_id, config)
        h.propose()
        return answered(h, state, tool_call_id)

    async def atransfer(
        task: str,
        state: Annotated[Any, InjectedState],
        tool_call_id: Annotated[str, InjectedToolCallId],
        config: RunnableConfig,
    ) -> Any:
        h = open_handoff(task, tool_call_id, config)
        await h.apropose()
        return answered(h, state, tool_call_id)

    return StructuredTool.from_function(
        func=transfer,
        coroutine=atransfer,
        name=tool_name,
        description=description
        or (
            f"Hand the task to the {agent_name} agent. It may decline (the result then says "
            "why); then answer yourself or choose another agent."
        ),
    )


def committed_node(
    agent_name: str,
    node: Runnable[Any, Any] | Callable[..., Any],
    *,
    store: IdempotencyStore | None = None,
    clock: Clock | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> Runnable[Any, Any]:
    """The receiving agent's node, run as the commit of the handoff that reached it.

    Reached through ``validated_handoff_tool(agent_name)``, the node runs once per key and
    its update is stored (messages as LangChain message dicts); a replay returns the stored
    update. Reached any other way, it runs as it is.
    """
    runnable: Runnable[Any, Any] = node if isinstance(node, Runnable) else RunnableLambda(node)
    shared = store if store is not None else default_store()

    def receiver(execute: Callable[[Work], Any]) -> Receiver:
        return Receiver(
            agent_name, executor=execute, store=shared, clock=clock, tracer_provider=tracer_provider
        )

    def run(state: Any, config: RunnableConfig) -> Any:
        request = _pending_request(state, agent_name)
        if request is None:
            return runnable.invoke(state, config)
        failure: list[BaseException] = []

        def execute(work: Work) -> Any:
            try:
                return _dump(runnable.invoke(state, config))
            except Exception as e:
                failure.append(e)
                raise

        token = _executing.set(execute)
        try:
            h = _take(request.handoff_id)
            if h is not None:
                result = h.commit()
                h.close()
            else:  # the tool ran in another process (or before a restart)
                reply = receiver(execute).respond(request)
                assert isinstance(reply, CommitResult)
                result = reply
        finally:
            _executing.reset(token)
        return _result(result, request, failure)

    async def arun(state: Any, config: RunnableConfig) -> Any:
        request = _pending_request(state, agent_name)
        if request is None:
            return await runnable.ainvoke(state, config)
        failure: list[BaseException] = []

        async def execute(work: Work) -> Any:
            try:
                return _dump(await runnable.ainvoke(state, config))
            except Exception as e:
                failure.append(e)
                raise

        token = _executing.set(execute)
        try:
            h = _take(request.handoff_id)
            if h is not None:
                result = await h.acommit()
                h.close()
            else:
                reply = await receiver(execute).arespond(request)
                assert isinstance(reply, CommitResult)
                result = reply
        finally:
            _executing.reset(token)
        return _result(result, request, failure)

    return RunnableLambda(run, afunc=arun, name=agent_name)


def _run_node(work: Work) -> Any:
    """The executor of a validated handoff: the node ``committed_node`` is running."""
    execute = _executing.get()
    if execute is None:
        raise ConfigurationError(
            f"the handoff to {work.receiver!r} was accepted, but its node is not a "
            f"committed_node({work.receiver!r}, ...): wrap the receiving node"
        )
    return execute(work)


def _result(result: CommitResult, request: CommitRequest, failure: list[BaseException]) -> Any:
    if result.ok:
        return _load(result.result)
    if failure:
        raise failure[0]
    raise CommitWithoutAccept(
        f"{request.receiver} refused to run task {request.task_id!r}: "
        f"{result.detail or result.error}"
    )


def _hold(handoff_id: str, h: Handoff) -> None:
    """Keep an accepted handoff for its node; close those whose deadline passed unclaimed."""
    now_ms = h.clock.time_ns() // 1_000_000
    with _pending_lock:
        lapsed = [k for k, v in _pending.items() if v.spec.deadline_unix_ms < now_ms]
        closing = [_pending.pop(k) for k in lapsed]
        _pending[handoff_id] = h
    for old in closing:
        old.close()  # past its deadline: recorded void (presumed abort)


def _take(handoff_id: str) -> Handoff | None:
    with _pending_lock:
        return _pending.pop(handoff_id, None)


def _pending_request(state: Any, agent_name: str) -> CommitRequest | None:
    """The commit an accepted handoff to this agent left as the state's last message."""
    messages = _messages(state)
    last = messages[-1] if messages else None
    artifact = getattr(last, "artifact", None) if isinstance(last, ToolMessage) else None
    if not isinstance(artifact, dict) or ARTIFACT_KEY not in artifact:
        return None
    request = decode(artifact[ARTIFACT_KEY])
    if not isinstance(request, CommitRequest) or request.receiver != agent_name:
        return None
    return request


def _messages(state: Any) -> list[Any]:
    if isinstance(state, dict):
        return list(state.get("messages") or [])
    return list(getattr(state, "messages", None) or [])


def _node_of(config: RunnableConfig) -> str:
    # "supervisor:<task>|tools:<task>": the outermost node is the agent using the tool.
    namespace = str((config.get("metadata") or {}).get("checkpoint_ns") or "")
    top = namespace.split("|", 1)[0].split(":", 1)[0]
    return top or str((config.get("metadata") or {}).get("langgraph_node") or "agent")


def _framework_span() -> trace.Span | None:
    """The span OpenInference's LangChain instrumentation opened for this tool call."""
    try:
        from openinference.instrumentation.langchain import get_current_span
    except ImportError:
        return None
    span = get_current_span()
    return span if span is not None and span.get_span_context().is_valid else None


def _dump(value: Any) -> Any:
    """A node's update in JSON form: LangChain messages become their dicts."""
    if isinstance(value, BaseMessage):
        return {_MESSAGE: message_to_dict(value)}
    if isinstance(value, dict):
        return {str(k): _dump(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_dump(v) for v in value]
    return value


def _load(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {_MESSAGE}:
            return messages_from_dict([value[_MESSAGE]])[0]
        return {k: _load(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_load(v) for v in value]
    return value
