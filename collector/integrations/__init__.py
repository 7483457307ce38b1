"""Handshake adapters for agent frameworks: the handshake where a framework hands off.

One module per framework, each in its own optional extra, each used where the handoff is
already declared:

* ``collector.integrations.pydantic_ai`` (``handoffscope[pydantic-ai]``): ``handoff_tool()``
  turns a receiving agent into a tool of the sending agent (delegation);
* ``collector.integrations.openai_agents`` (``handoffscope[openai-agents]``):
  ``validated_handoff()`` in place of the SDK's ``handoff()``;
* ``collector.integrations.langgraph`` (``handoffscope[langgraph]``):
  ``validated_handoff_tool()`` returning ``Command(goto=...)`` on accept, and
  ``committed_node()`` around the receiving node.

Before control moves, the receiving agent's validator answers accept (with an ETA) or reject
(with a reason code) within the 2 s clock; a reject or a timeout leaves control with the
sender, whose model reads a tool result naming the reason. The receiving agent's work is the
commit, idempotent on a key made of ids the framework already has, so a retried run replays
the stored result. Importing this package imports no framework; each module imports its own.
"""

from __future__ import annotations

__all__: list[str] = []
