"""The simulated world: who the agents are, which models they run, how slow and costly they are.

Nothing here touches telemetry or the protocol; it only describes agents, so the engine can
drive the library with them. Every random draw takes the caller's ``random.Random``, which
keeps a run reproducible from its seed.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Final

from collector.agents import AgentRole
from collector.errors import ConfigurationError
from collector.pricing import Price, PriceTable

__all__ = ["AgentProfile", "MODEL_PROVIDERS", "build_profiles", "check_models"]

MODEL_PROVIDERS: Final = {
    "gpt-4o": "openai",
    "gpt-4o-mini": "openai",
    "gpt-4.1": "openai",
    "gpt-4.1-mini": "openai",
    "gpt-4.1-nano": "openai",
    "o3": "openai",
    "o4-mini": "openai",
    "claude-opus-4": "anthropic",
    "claude-sonnet-4": "anthropic",
    "claude-3-5-haiku": "anthropic",
    "gemini-2.5-pro": "gcp.gemini",
    "gemini-2.5-flash": "gcp.gemini",
    "gemini-2.0-flash": "gcp.gemini",
    "mistral-large": "mistral_ai",
    "mistral-small": "mistral_ai",
}
"""The models the simulator knows, with their ``gen_ai.provider.name``."""

SIMULATED_PRICES: Final = PriceTable(
    {
        "gpt-4o": Price(2.50, 10.00),
        "gpt-4o-mini": Price(0.15, 0.60),
        "gpt-4.1": Price(2.00, 8.00),
        "gpt-4.1-mini": Price(0.40, 1.60),
        "gpt-4.1-nano": Price(0.10, 0.40),
        "o3": Price(2.00, 8.00),
        "o4-mini": Price(1.10, 4.40),
        "claude-opus-4": Price(15.00, 75.00),
        "claude-sonnet-4": Price(3.00, 15.00),
        "claude-3-5-haiku": Price(0.80, 4.00),
        "gemini-2.5-pro": Price(1.25, 10.00),
        "gemini-2.5-flash": Price(0.30, 2.50),
        "gemini-2.0-flash": Price(0.10, 0.40),
        "mistral-large": Price(2.00, 6.00),
        "mistral-small": Price(0.10, 0.30),
    },
    genai_prices=False,
)
"""The list prices a simulated agent pays (per million input and output tokens), fixed in the
simulator and never looked up: a run's costs, and so its trace files, are the same bytes on
every machine and every price snapshot."""

# role -> (model, lanes, out of lane, commit input tokens, commit output tokens)
_ROLES: Final[dict[str, tuple[str, tuple[str, ...], tuple[str, ...], int, int]]] = {
    "orchestrator": ("gpt-4.1-mini", ("plan", "route"), ("write",), 600, 150),
    "research": ("claude-sonnet-4", ("search", "summarise sources"), ("publish",), 6000, 1400),
    "write": ("gpt-4o", ("draft",), ("publish", "fact-check"), 3500, 2200),
    "review": ("claude-3-5-haiku", ("critique",), ("rewrite",), 4200, 600),
    "edit": ("gpt-4.1-mini", ("copy-edit",), ("add claims",), 3800, 2000),
    "publish": ("gemini-2.0-flash", ("format", "post"), ("edit",), 2400, 300),
    "fact-check": ("gemini-2.5-flash", ("verify claims",), ("rewrite",), 5000, 500),
    "translate": ("mistral-large", ("translate",), ("summarise",), 2500, 2500),
    "summarize": ("gpt-4o-mini", ("summarise",), ("publish",), 4000, 400),
    "format": ("gpt-4.1-nano", ("format",), ("rewrite",), 2000, 2000),
    "archive": ("mistral-small", ("store",), ("edit",), 1500, 100),
}
_FALLBACK_MODELS: Final = ("gpt-4o-mini", "claude-3-5-haiku", "gemini-2.0-flash", "mistral-small")


def check_models(models: tuple[str, ...]) -> None:
    """Refuse models the simulator cannot price, suggesting the closest known names."""
    import difflib

    for model in models:
        if model not in MODEL_PROVIDERS:
            close = difflib.get_close_matches(model, list(MODEL_PROVIDERS), n=3, cutoff=0.5)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise ConfigurationError(
                f"--models: unknown model {model!r}{hint} (known: {', '.join(MODEL_PROVIDERS)})"
            )


@dataclass(frozen=True, slots=True)
class AgentProfile:
    """One simulated agent: its role contract, model, token habits and speed."""

    role: AgentRole
    model: str
    provider: str
    commit_tokens: tuple[int, int]
    """Typical (input, output) tokens of one task execution."""
    speed: float
    """Multiplier on the base latency: some agents are slower than others."""

    @property
    def name(self) -> str:
        """The agent's name (its ``service.name`` too)."""
        return self.role.name

    def tokens(self, rng: random.Random, typical: tuple[int, int], scale: float) -> tuple[int, int]:
        """Draw (input, output) tokens around ``typical`` (log-normal, about ±30%)."""
        return (
            max(1, round(typical[0] * scale * rng.lognormvariate(0.0, 0.3))),
            max(1, round(typical[1] * scale * rng.lognormvariate(0.0, 0.3))),
        )

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """List-price cost of the tokens on this agent's model."""
        value = SIMULATED_PRICES.cost(
            self.model, input_tokens=input_tokens, output_tokens=output_tokens
        )
        return 0.0 if value is None else value


def latency(rng: random.Random, typical_s: float, *, spread: float = 0.35) -> float:
    """A log-normal duration around ``typical_s`` (median), never negative."""
    if typical_s <= 0:
        return 0.0
    return typical_s * math.exp(rng.gauss(0.0, spread))


def build_profiles(
    pipeline: tuple[str, ...], *, models: tuple[str, ...], seed: int
) -> dict[str, AgentProfile]:
    """Profiles for the orchestrator and every agent of ``pipeline``, keyed by name."""
    rng = random.Random(f"profiles:{seed}")
    profiles: dict[str, AgentProfile] = {}
    for index, name in enumerate(("orchestrator", *pipeline)):
        default_model, lanes, not_lanes, tin, tout = _ROLES.get(
            name,
            (_FALLBACK_MODELS[index % len(_FALLBACK_MODELS)], ("work",), (), 3000, 800),
        )
        model = models[(index - 1) % len(models)] if models and index > 0 else default_model
        provider = MODEL_PROVIDERS[model]
        profiles[name] = AgentProfile(
            role=AgentRole(
                name,
                lanes=lanes,
                out_of_lane=not_lanes,
                agent_id=f"{name}-agent",
                model=model,
                provider=provider,
            ),
            model=model,
            provider=provider,
            commit_tokens=(tin, tout),
            speed=0.8 + 0.4 * rng.random(),
        )
    return profiles
