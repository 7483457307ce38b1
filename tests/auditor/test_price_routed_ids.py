"""Routed model ids (``{provider}/{model}``, as LiteLLM, OpenRouter and AI gateways name
models) are priced as the model after the first slash at the provider before it, with the
same rows genai-prices gives the plain id; an id genai-prices knows with its slash
(OpenRouter's own ``anthropic/...`` ids) keeps its own price."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest

from auditor.model.price_source import find_model, resolve_prices

ROUTED = [
    # (routed id, the span's provider, the plain id, its provider)
    ("openai/gpt-4o", "openai", "gpt-4o", "openai"),
    ("openai/gpt-4o", None, "gpt-4o", "openai"),
    ("anthropic/claude-3-5-sonnet-latest", "anthropic", "claude-3-5-sonnet-latest", "anthropic"),
    ("vertex_ai/gemini-1.5-pro", None, "gemini-1.5-pro", "google"),
    ("groq/llama-3.1-8b-instant", None, "llama-3.1-8b-instant", "groq"),
]


@pytest.mark.parametrize(("routed", "provider", "plain", "plain_provider"), ROUTED)
def test_a_routed_id_is_priced_as_its_model(
    routed: str, provider: str | None, plain: str, plain_provider: str
) -> None:
    rows, missing = resolve_prices([(routed, provider)])
    assert missing == [] and rows
    expected, _ = resolve_prices([(plain, plain_provider)])
    # The rows are keyed by the span's own id, so the audit's join finds them.
    assert all(r.model == routed and r.provider == provider for r in rows)
    keyed = [replace(r, model=plain, provider=plain_provider) for r in rows]
    assert [asdict(r) for r in keyed] == [asdict(r) for r in expected]


def test_an_id_genai_prices_knows_with_its_slash_is_not_split() -> None:
    found = find_model("anthropic/claude-3.5-sonnet", "openrouter")
    assert not isinstance(found, str)
    provider, model = found
    assert provider.id == "openrouter"


def test_an_unknown_routed_id_stays_unpriced_and_says_what_was_tried() -> None:
    rows, missing = resolve_prices([("nowhere/no-such-model", "nowhere")])
    assert rows == [] and len(missing) == 1
    assert "no-such-model" in missing[0].reason
