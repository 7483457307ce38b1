"""The handshake for OpenAI Agents SDK handoffs: ``validated_handoff()`` for ``handoff()``.

Where you list an agent's handoffs, write ``validated_handoff(agent, validator=...)`` in place
of ``handoff(agent)``::

    from collector.integrations.openai_agents import validated_handoff

    triage = Agent(name="triage", handoffs=[validated_handoff(researcher, validator=check)])

When the triage model calls ``transfer_to_researcher``, the researcher's validator answers
within the 2 s clock, inside the SDK's handoff (its ``on_invoke_handoff``), before control
moves:

* **accept**: the researcher's run is the commit. It runs (as a nested run on the
  conversation so far, inside the SDK's handoff span) once per idempotency key,
  ``{trace id}:{tool call id}``, and its final output is stored; control then moves to the
  researcher, whose turn replays that output without calling its model. A run retried under
  the same trace id (``RunConfig(trace_id=...)``) replays the stored output instead of running
  the researcher again; with a ``SQLiteStore`` that holds across a restart. The nested run's
  usage is added to the run's, so ``result.context_wrapper.usage`` counts every token once.
* **reject or timeout**: the researcher never runs; control stays with the triage agent,
  whose model reads the handoff's tool output naming the reason, and the SDK's handoff span
  carries the refusal as its error.

The handshake's spans go to the tracer provider given (else the global one) under the current
OpenTelemetry span, which is the SDK's handoff span when an OpenTelemetry bridge such as
OpenInference's ``OpenAIAgentsInstrumentor`` traces the run. They report no tokens: the
SDK's generation spans carry them.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace

from collector.clock import Clock
from collector.idempotency import IdempotencyStore
from collector.integrations.handshake import (
    HandshakeSettings,
    arun_handoff,
    default_store,
    expected_schema,
    refusal,
    schema_of,
)
from collector.work import Validator, Work

try:
    from agents import Agent, Handoff, RunContextWrapper, Runner, handoff
    from agents.testing import ScriptedModel, assistant_message
    from agents.tracing import SpanError, get_current_span, get_current_trace
    from pydantic import TypeAdapter
    from pydantic_core import to_jsonable_python
except ImportError as e:  # pragma: no cover - only without the extra
    raise ImportError(
        "collector.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'handoffscope[openai-agents]'"
    ) from e

__all__ = ["ValidatedHandoff", "handoff_key", "validated_handoff"]

# What the last handoff in this task decided, read by ``get_transfer_message`` right after.
_refused: ContextVar[str | None] = ContextVar("handoffscope_openai_refusal", default=None)


def handoff_key(ctx: RunContextWrapper[Any]) -> str:
    """The default idempotency key: the run's trace id and the handoff's tool call id.

    Retry a run with ``RunConfig(trace_id=...)`` set to the failed run's trace id and its
    handoffs replay.
    """
    current = get_current_trace()
    run = getattr(current, "trace_id", None) or "run"
    return f"{run}:{_call_id(ctx) or 'call'}"


@dataclasses.dataclass
class ValidatedHandoff(Handoff[Any, Any]):
    """The SDK's ``Handoff``, whose tool output says why when control did not move."""

    def get_transfer_message(self, agent: Any) -> str:
        refused = _refused.get()
        if refused is not None:
            _refused.set(None)
            return refused
        return super().get_transfer_message(agent)


def validated_handoff(
    agent: Agent[Any],
    *,
    validator: Validator | None = None,
    default_eta_ms: int | None = None,
    tool_name_override: str | None = None,
    tool_description_override: str | None = None,
    on_handoff: Callable[..., Any] | None = None,
    input_type: type[Any] | None = None,
    input_filter: Any = None,
    is_enabled: bool | Callable[..., Any] = True,
    expects: Any = None,
    produces: tuple[str, ...] | None = None,
    store: IdempotencyStore | None = None,
    key: Callable[[RunContextWrapper[Any]], str] = handoff_key,
    max_turns: int = 10,
    validation_timeout_s: float = 2.0,
    deadline_s: float = 300.0,
    late_answer_window_s: float = 60.0,
    clock: Clock | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> ValidatedHandoff:
    """``handoff(agent, ...)`` with the handshake before control moves; same options, plus
    the handshake's.

    ``validator(work)`` sees ``work.payload == {"arguments": {...}}``: the handoff tool call's
    arguments (``input_type``'s fields, validated first as the SDK does). ``expects`` is the
    output type the sender needs (a class or ``"name@version"``), checked against the
    receiver's ``output_type`` (and ``produces``). ``max_turns`` bounds the receiver's run.
    """
    own = schema_of(agent.output_type)
    settings = HandshakeSettings(
        agent.name,
        validator=validator,
        default_eta_ms=default_eta_ms,
        store=store if store is not None else default_store(),
        produces=(own, *(produces or ())),
        validation_timeout_s=validation_timeout_s,
        deadline_s=deadline_s,
        late_answer_window_s=late_answer_window_s,
        clock=clock,
        tracer_provider=tracer_provider,
    )
    wanted = expected_schema(expects, own)
    senders: weakref.WeakKeyDictionary[Any, Agent[Any]] = weakref.WeakKeyDictionary()

    async def enabled(ctx: RunContextWrapper[Any], current: Agent[Any]) -> bool:
        # The SDK asks with the agent that offers the handoff: the sender, if it is called.
        senders[ctx] = current
        if callable(is_enabled):
            verdict = is_enabled(ctx, current)
            return bool(await verdict if inspect.isawaitable(verdict) else verdict)
        return bool(is_enabled)

    options: dict[str, Any] = {
        "tool_name_override": tool_name_override,
        "tool_description_override": tool_description_override,
        "input_filter": input_filter,
        "is_enabled": enabled,
    }
    if input_type is not None:
        options["input_type"] = input_type
        options["on_handoff"] = on_handoff or (lambda ctx, value: None)
    elif on_handoff is not None:
        options["on_handoff"] = on_handoff
    base = handoff(agent, **options)
    adapter = TypeAdapter(input_type) if input_type is not None else None

    async def invoke(ctx: RunContextWrapper[Any], input_json: str | None = None) -> Any:
        arguments = _arguments(input_json, adapter)
        sender = senders.get(ctx)
        sender_name = sender.name if sender is not None else "agent"

        async def execute(work: Work) -> Any:
            result = await Runner.run(
                agent, list(ctx.turn_input) or "", context=ctx.context, max_turns=max_turns
            )
            ctx.usage.add(result.context_wrapper.usage)  # one run's usage, counted once
            return to_jsonable_python(result.final_output)

        outcome = await arun_handoff(
            settings,
            sender=sender_name,
            executor=execute,
            task_id=f"{base.tool_name}:{_call_id(ctx) or 'call'}",
            key=key(ctx),
            payload={"arguments": arguments},
            output_schema=wanted,
        )
        text = refusal(outcome, agent.name, timeout_s=validation_timeout_s)
        if text is not None or sender is None:
            text = text or "handoff not done: the sending agent is unknown"
            _refused.set(text)
            span = get_current_span()
            if span is not None:
                span.set_error(SpanError(message=text, data={"receiver": agent.name}))
            return sender if sender is not None else agent.clone(model=_replay(text))
        await base.on_invoke_handoff(ctx, input_json or "")  # the user's on_handoff, as usual
        assert outcome.result is not None
        return agent.clone(model=_replay(outcome.result.result))

    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.init}
    fields["on_invoke_handoff"] = invoke
    validated = ValidatedHandoff(**fields)
    validated._agent_ref = weakref.ref(agent)
    return validated


def _replay(output: Any) -> ScriptedModel:
    """The receiver's turn after its committed run: says the stored output, calls no model.

    The SDK's own scripted model, so streamed runs replay too; it records no usage.
    """
    text = output if isinstance(output, str) else json.dumps(output)
    return ScriptedModel([[assistant_message(text, item_id="handoffscope-replay")]])


def _call_id(ctx: RunContextWrapper[Any]) -> str | None:
    # The SDK marks a tool call executed just before it invokes the handoff; that record is
    # the only place the handoff's call id is known inside ``on_invoke_handoff``.
    records = getattr(ctx, "_tool_invocations", None) or {}
    running = [cid for cid, r in records.items() if r.executed and not r.completed]
    return running[-1] if running else None


def _arguments(input_json: str | None, adapter: TypeAdapter[Any] | None) -> Any:
    if not input_json:
        return {}
    if adapter is not None:
        return to_jsonable_python(adapter.validate_json(input_json))
    return json.loads(input_json)
