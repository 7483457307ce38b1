"""The keys that price a span's usage, in every convention, as data: the model that answered,
its provider, and the kinds of tokens beyond input and output (cached input read and
written, reasoning).

Input, output and cost keys sit in :mod:`collector.schema` (the loader gives them typed
columns). What is here is read from a usage span's ``attributes`` only when the audit prices
it, so a trace set pays for these lookups on its usage spans alone.

Every convention here counts cached tokens *inside* its input total, as genai-prices counts
them (the GenAI conventions say so; OpenInference's and OpenLLMetry's Anthropic
instrumentations add Anthropic's cache counts to its ``input_tokens``), except where a row of
:data:`INPUT_EXCLUDES_CACHE` says otherwise: for those spans the cached tokens are added to
the input total before pricing. Reasoning tokens are billed inside output tokens everywhere:
they are shown, never added. ``docs/trace-schema.md`` lists each key with the
instrumentation code it was checked against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from auditor.model import conventions as c
from collector import schema as s

__all__ = [
    "CACHE_READ_KEYS",
    "CACHE_WRITE_KEYS",
    "INPUT_EXCLUDES_CACHE",
    "PRICE_MODEL_KEYS",
    "PROVIDER_ALIASES",
    "PROVIDER_KEYS",
    "REASONING_KEYS",
    "ExcludesCache",
    "TokenKey",
]


@dataclass(frozen=True, slots=True)
class TokenKey:
    """A key holding a count of one kind of token, with the convention that writes it."""

    convention: str
    key: str


@dataclass(frozen=True, slots=True)
class ExcludesCache:
    """Spans of an instrumentation scope whose input total leaves the cached tokens out when
    their provider is one of ``providers`` (it passes the provider's own count through)."""

    scope_prefix: str
    providers: tuple[str, ...]


PRICE_MODEL_KEYS: Final = tuple(
    dict.fromkeys(
        (
            c.GEN_AI_RESPONSE_MODEL,
            "llm.response.model_name",
            "ai.response.model",
            *c.MODEL_KEYS,
        )
    )
)
"""The model a usage is priced by, first present wins: the model that answered (a dated id,
``gpt-4o-2024-08-06``) before the one requested (an alias the provider resolved)."""

PROVIDER_KEYS: Final = (
    s.GEN_AI_PROVIDER_NAME,
    "gen_ai.system",
    "llm.provider",
    "llm.system",
    "ai.model.provider",
)
"""The provider of a usage, first present wins: GenAI (current, then deprecated),
OpenInference, OpenLLMetry's older key, the Vercel AI SDK."""

PROVIDER_ALIASES: Final = {
    "gcp.gemini": "google",
    "gcp.vertex_ai": "google",
    "gcp.gen_ai": "google",
    "google.generative-ai": "google",
    "google.vertex": "google",
    "vertexai": "google",
    "aws.bedrock": "aws",
    "amazon-bedrock": "aws",
    "bedrock": "aws",
    "azure.ai.openai": "azure",
    "azure.ai.inference": "azure",
    "mistral_ai": "mistral",
    "mistralai": "mistral",
    "x_ai": "x-ai",
    "xai": "x-ai",
    "openai.chat": "openai",
    "openai.responses": "openai",
    "anthropic.messages": "anthropic",
    "vertex_ai": "google",
    "gemini": "google",
    "together_ai": "together",
    "fireworks_ai": "fireworks",
}
"""The GenAI conventions', the Vercel AI SDK's and LiteLLM's routing prefixes' provider
names that genai-prices spells otherwise (a name not here is given to genai-prices as it
is, then dropped if unknown)."""

CACHE_READ_KEYS: Final = (
    TokenKey("genai", "gen_ai.usage.cache_read.input_tokens"),
    TokenKey("openllmetry", "gen_ai.usage.cache_read_input_tokens"),
    TokenKey("openinference", "llm.token_count.prompt_details.cache_read"),
    TokenKey("pydantic-ai", "gen_ai.usage.details.cache_read_tokens"),
    TokenKey("vercel-ai", "ai.usage.inputTokenDetails.cacheReadTokens"),
    TokenKey("vercel-ai", "ai.usage.cachedInputTokens"),
)
"""Input tokens read from the provider's prompt cache, first present wins."""

CACHE_WRITE_KEYS: Final = (
    TokenKey("genai", "gen_ai.usage.cache_creation.input_tokens"),
    TokenKey("openllmetry", "gen_ai.usage.cache_creation_input_tokens"),
    TokenKey("openinference", "llm.token_count.prompt_details.cache_write"),
    TokenKey("pydantic-ai", "gen_ai.usage.details.cache_write_tokens"),
    TokenKey("vercel-ai", "ai.usage.inputTokenDetails.cacheWriteTokens"),
)
"""Input tokens written to the provider's prompt cache, first present wins."""

REASONING_KEYS: Final = (
    TokenKey("genai", "gen_ai.usage.reasoning.output_tokens"),
    TokenKey("openllmetry", "gen_ai.usage.reasoning_tokens"),
    TokenKey("openinference", "llm.token_count.completion_details.reasoning"),
    TokenKey("pydantic-ai", "gen_ai.usage.details.reasoning_tokens"),
    TokenKey("pydantic-ai", "gen_ai.usage.details.thinking_tokens"),
    TokenKey("vercel-ai", "ai.usage.outputTokenDetails.reasoningTokens"),
    TokenKey("vercel-ai", "ai.usage.reasoningTokens"),
)
"""Output tokens spent reasoning (inside the output total: shown, never added)."""

INPUT_EXCLUDES_CACHE: Final = (
    # OpenInference's agno instrumentation passes agno's metrics through, and agno's Claude
    # model reports Anthropic's own input_tokens.
    ExcludesCache("openinference.instrumentation.agno", ("anthropic",)),
)
"""Spans whose input total leaves the cached tokens out (as Anthropic's own API reports
``input_tokens``): the audit adds the cached tokens read and written to it."""
