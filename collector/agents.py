"""Role contracts: what an agent declares it does and does not do.

An agent's ``AgentRole`` is recorded on every span of the phases it performs
(``gen_ai.agent.name``, ``handoff.agent.lanes``, ``handoff.agent.out_of_lane``), so an
auditor can compare what an agent did with what it said it does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collector import schema

__all__ = ["AgentRole"]


@dataclass(frozen=True, slots=True)
class AgentRole:
    """An agent's name and declared lanes (what it does) and out-of-lane work (what it won't)."""

    name: str
    lanes: tuple[str, ...] = ()
    out_of_lane: tuple[str, ...] = ()
    agent_id: str | None = None
    model: str | None = None
    provider: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("an agent needs a non-empty name")
        object.__setattr__(self, "lanes", tuple(self.lanes))
        object.__setattr__(self, "out_of_lane", tuple(self.out_of_lane))

    def attributes(self) -> dict[str, Any]:
        """The span attributes that declare this role."""
        attrs: dict[str, Any] = {schema.GEN_AI_AGENT_NAME: self.name}
        if self.agent_id:
            attrs[schema.GEN_AI_AGENT_ID] = self.agent_id
        if self.lanes:
            attrs[schema.AGENT_LANES] = list(self.lanes)
        if self.out_of_lane:
            attrs[schema.AGENT_NOT_LANES] = list(self.out_of_lane)
        return attrs
