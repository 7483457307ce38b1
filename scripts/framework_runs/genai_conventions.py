"""A trace in the OpenTelemetry GenAI conventions for agents, written by convention from the
OpenAI Agents SDK's lifecycle hooks."""

from typing import Any

from .common import MODEL, Recording, add_usage
from .openai_agents_run import agents_scenario


def record_genai_handoff_conventions(rec: Recording) -> dict[str, Any]:
    """The Agents SDK run, traced by its lifecycle hooks in the GenAI conventions.

    No package at these versions emits handoffs in the GenAI conventions, so the spans are
    written here, by convention, with the OpenTelemetry SDK: ``invoke_workflow`` root,
    ``invoke_agent {agent}`` per agent turn, ``chat {model}`` per model call with
    ``gen_ai.usage.*``, ``execute_tool {tool}`` per tool call, and each handoff as an
    ``execute_tool transfer_to_{receiver}`` span carrying
    ``gen_ai.agent.handoff.source.name`` / ``.target.name`` (the proposal in the GenAI
    conventions' repository), its ``gen_ai.agent.name`` the sender.
    """
    from agents import RunHooks, set_tracing_disabled
    from opentelemetry.trace import SpanKind, set_span_in_context

    set_tracing_disabled(True)  # the SDK's own traces: nowhere to go, and not needed
    tracer = rec.tracer_provider.get_tracer("handoffscope.fixtures.genai")
    root = tracer.start_span(
        "invoke_workflow research-and-write",
        attributes={"gen_ai.operation.name": "invoke_workflow"},
    )

    class GenAIConventionHooks(RunHooks[Any]):
        def __init__(self) -> None:
            self.agents: dict[str, dict[str, int]] = {}
            self.handoffs: list[dict[str, str]] = []
            self.agent_span: Any = None
            self.spans: dict[str, Any] = {}
            self.calls: dict[str, str] = {}

        def _under_agent(self) -> Any:
            return set_span_in_context(self.agent_span)

        async def on_agent_start(self, context: Any, agent: Any) -> None:
            self.agent_span = tracer.start_span(
                f"invoke_agent {agent.name}",
                context=set_span_in_context(root),
                kind=SpanKind.INTERNAL,
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": agent.name,
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": MODEL,
                },
            )

        async def on_llm_start(self, context: Any, agent: Any, *_args: Any) -> None:
            self.spans["chat"] = tracer.start_span(
                f"chat {MODEL}",
                context=self._under_agent(),
                kind=SpanKind.CLIENT,
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": MODEL,
                    "gen_ai.agent.name": agent.name,
                },
            )

        async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
            usage = response.usage
            add_usage(self.agents, agent.name, usage.input_tokens, usage.output_tokens)
            span = self.spans.pop("chat")
            span.set_attribute("gen_ai.response.model", MODEL)
            if response.response_id:
                span.set_attribute("gen_ai.response.id", response.response_id)
            span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
            span.end()
            for item in response.output:  # the call ids of the tools the model asked for
                if getattr(item, "type", None) == "function_call":
                    self.calls[item.name] = item.call_id

        async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
            self.spans["tool"] = tracer.start_span(
                f"execute_tool {tool.name}",
                context=self._under_agent(),
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool.name,
                    "gen_ai.tool.type": "function",
                    "gen_ai.tool.call.id": getattr(context, "tool_call_id", ""),
                    "gen_ai.agent.name": agent.name,
                },
            )

        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
            self.spans.pop("tool").end()

        async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
            via = f"transfer_to_{to_agent.name}"
            self.handoffs.append({"sender": from_agent.name, "receiver": to_agent.name, "via": via})
            tracer.start_span(
                f"execute_tool {via}",
                context=self._under_agent(),
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": via,
                    "gen_ai.tool.type": "function",
                    "gen_ai.tool.call.id": self.calls.get(via, ""),
                    "gen_ai.agent.name": from_agent.name,
                    "gen_ai.agent.handoff.source.name": from_agent.name,
                    "gen_ai.agent.handoff.target.name": to_agent.name,
                },
            ).end()
            self.agent_span.end()  # control passes: the sender's turn is over

        async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
            self.agent_span.end()

    reported = agents_scenario(
        "chat_completions",
        hooks=GenAIConventionHooks(),
        instrumentation="scripts/record_framework_traces.py GenAIConventionHooks "
        "(agents.RunHooks -> OpenTelemetry SDK spans)",
        convention="genai",
        written_by="convention",
        notes=[
            "Written by convention: no package at these versions emits "
            "gen_ai.agent.handoff.source.name/.target.name, so the recorder writes the "
            "spans from the real run's lifecycle hooks. The usage and handoffs are still "
            "the SDK's own.",
            "Each handoff is an 'execute_tool transfer_to_<receiver>' span under the "
            "sender's invoke_agent span, gen_ai.agent.name the sender.",
        ],
    )
    root.end()
    return reported
