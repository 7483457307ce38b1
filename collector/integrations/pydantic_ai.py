"""The handshake for pydantic-ai delegation: a receiving agent as a tool of the sending agent.

pydantic-ai hands work on by delegation: one agent runs inside another agent's tool. Where
you would write that tool, write ``handoff_tool(receiving_agent, validator=...)``::

    from collector import RejectReason, accept, reject
    from collector.integrations.pydantic_ai import handoff_tool

    def can_research(work):
        if "classified" in work.payload["task"]:
            return reject(RejectReason.RESOURCE_UNAVAILABLE, detail="no clearance")
        return accept(eta_ms=1_500)

    writer = Agent(model, name="writer", tools=[handoff_tool(researcher, validator=can_research)])

When the writer's model calls the tool, the researcher's validator answers within the 2 s
clock, before the researcher runs. On accept the researcher's run is the commit: it runs once
per idempotency key, ``{run id}:{tool call id}``, so a retried run (same ``run_id``) or a
duplicated tool call gets the stored output back instead of a second run; give the tool a
``SQLiteStore`` and that survives a restart. On reject or timeout the researcher never runs
and the writer's model reads a tool result naming the reason.

The handshake's spans nest in pydantic-ai's own trace (under its ``execute_tool`` span, with
the delegate's ``invoke_agent`` span under ``handoff.commit``) and go to the tracer the run
uses. They report no tokens: pydantic-ai's ``chat`` spans carry them, and the delegate's
usage is added to the sender's run as pydantic-ai does it (``usage=ctx.usage``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

from collector.clock import Clock
from collector.errors import ConfigurationError
from collector.idempotency import IdempotencyStore
from collector.integrations.handshake import (
    HandshakeSettings,
    TracerProviderOf,
    arun_handoff,
    default_store,
    expected_schema,
    refusal,
    schema_of,
)
from collector.work import Validator, Work

try:
    from pydantic_ai import Agent, RunContext, Tool
    from pydantic_core import to_jsonable_python
except ImportError as e:  # pragma: no cover - only without the extra
    raise ImportError(
        "collector.integrations.pydantic_ai needs pydantic-ai: "
        "pip install 'handoffscope[pydantic-ai]'"
    ) from e

__all__ = ["handoff_key", "handoff_tool"]


def handoff_key(ctx: RunContext[Any]) -> str:
    """The default idempotency key: the run's id and the tool call's id.

    A run retried with the same ``run_id`` (durable execution replays it) and a tool call
    delivered twice get the same key, hence the stored result.
    """
    return f"{ctx.run_id}:{ctx.tool_call_id}"


def handoff_tool(
    agent: Agent[Any, Any],
    *,
    validator: Validator | None = None,
    default_eta_ms: int | None = None,
    name: str | None = None,
    description: str | None = None,
    expects: Any = None,
    produces: Iterable[str] | None = None,
    store: IdempotencyStore | None = None,
    deps: Callable[[RunContext[Any]], Any] | None = None,
    key: Callable[[RunContext[Any]], str] = handoff_key,
    validation_timeout_s: float = 2.0,
    deadline_s: float = 300.0,
    max_attempts: int = 1,
    late_answer_window_s: float = 60.0,
    clock: Clock | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> Tool[Any]:
    """A tool that hands ``task`` to ``agent`` through the handshake; add it to the sender.

    ``validator(work)`` sees ``work.payload == {"task": ...}`` and answers
    ``accept(eta_ms=...)`` or ``reject(reason)``; without one, ``default_eta_ms`` accepts.
    ``expects`` is the output type the sender needs (a class or ``"name@version"``); the
    receiver produces its ``output_type`` (and whatever ``produces`` adds), so a mismatch is
    rejected as ``schema_mismatch`` before the agent runs. ``deps(ctx)`` gives the receiving
    agent its dependencies. ``key(ctx)`` overrides the idempotency key. The run's deadline
    (``RunContext.deadline``) is the handoff's when it has one, else ``deadline_s``.
    """
    receiver = agent.name
    if not receiver:
        raise ConfigurationError("handoff_tool() needs an agent with a name: Agent(..., name=...)")
    own = schema_of(agent.output_type)
    can_produce = (own, *(produces or ()))
    wanted = expected_schema(expects, own)
    settings = HandshakeSettings(
        receiver,
        validator=validator,
        default_eta_ms=default_eta_ms,
        store=store if store is not None else default_store(),
        produces=can_produce,
        validation_timeout_s=validation_timeout_s,
        deadline_s=deadline_s,
        max_attempts=max_attempts,
        late_answer_window_s=late_answer_window_s,
        clock=clock,
        tracer_provider=tracer_provider,
    )
    tool_name = name or f"delegate_to_{receiver}"

    async def delegate(ctx: RunContext[Any], task: str) -> Any:
        async def execute(work: Work) -> Any:
            result = await agent.run(
                work.payload["task"],
                usage=ctx.usage,
                usage_limits=ctx.usage_limits,
                deps=deps(ctx) if deps is not None else None,
            )
            return to_jsonable_python(result.output)

        sender = ctx.agent.name if ctx.agent is not None and ctx.agent.name else "agent"
        outcome = await arun_handoff(
            settings,
            sender=sender,
            executor=execute,
            task_id=f"{tool_name}:{ctx.tool_call_id}",
            key=key(ctx),
            payload={"task": task},
            output_schema=wanted,
            tracer_provider=_provider(ctx),
            deadline_s=_seconds_left(ctx.deadline),
        )
        text = refusal(outcome, receiver, timeout_s=validation_timeout_s)
        if text is not None:
            return text
        assert outcome.result is not None
        return outcome.result.result

    return Tool(
        delegate,
        takes_ctx=True,
        name=tool_name,
        description=description
        or (
            f"Hand a task to the {receiver} agent. It may decline (the result then says why); "
            "then answer yourself or choose another agent."
        ),
    )


def _provider(ctx: RunContext[Any]) -> Any:
    # pydantic-ai's run tracer, unless instrumentation is off (then the global provider).
    tracer = ctx.tracer
    if tracer is None or isinstance(tracer, trace.NoOpTracer):
        return None
    return TracerProviderOf(tracer)


def _seconds_left(deadline: datetime | None) -> float | None:
    if deadline is None:
        return None
    moment = deadline if deadline.tzinfo is not None else deadline.replace(tzinfo=UTC)
    return max(0.0, (moment - datetime.now(UTC)).total_seconds())
