"""Contract prices from a TOML file: cache prices, precedence over genai-prices, and errors
that name the file, the model and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from auditor import AuditSettings, audit, load_traces
from auditor.model.prices import read_prices
from collector.errors import ConfigurationError


def _span_file(path: Path) -> None:
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.agent.name": "writer",
        "gen_ai.request.model": "claude-sonnet-4-5",
        "gen_ai.response.model": "claude-sonnet-4-5-20250929",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.usage.input_tokens": 100_000,
        "gen_ai.usage.cache_read.input_tokens": 80_000,
        "gen_ai.usage.cache_creation.input_tokens": 10_000,
        "gen_ai.usage.output_tokens": 2_000,
    }
    span = {
        "traceId": "1" * 32,
        "spanId": "2" * 16,
        "name": "chat claude-sonnet-4-5",
        "kind": 3,
        "startTimeUnixNano": "1760000000000000000",
        "endTimeUnixNano": "1760000001000000000",
        "attributes": [
            {"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}
            for k, v in attrs.items()
        ],
    }
    doc = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "app"}, "spans": [span]}]}]}
    path.write_text(json.dumps(doc) + "\n")


def test_a_contract_with_cache_prices_wins_over_genai_prices(tmp_path: Path) -> None:
    traces = tmp_path / "t.jsonl"
    _span_file(traces)
    prices = tmp_path / "prices.toml"
    prices.write_text(
        '[models]\n"claude-sonnet-4-5" = { input = 2.0, output = 10.0, cache_read = 0.2 }\n'
    )
    default = audit(load_traces(str(traces)))
    contract = audit(load_traces(str(traces)), AuditSettings(prices=str(prices)))
    writer = next(a for a in contract.figures.agents if a["agent"] == "writer")
    # Uncached 10,000 and written 10,000 at the input price (no cache_write given), read
    # 80,000 at 0.2, output at 10.
    assert writer["cost_usd"] == pytest.approx(
        (10_000 * 2.0 + 10_000 * 2.0 + 80_000 * 0.2 + 2_000 * 10.0) / 1e6
    )
    assert writer["cache_read_tokens"] == 80_000
    assert writer["cached_share"] == pytest.approx(0.8)
    before = next(a for a in default.figures.agents if a["agent"] == "writer")
    assert before["cost_usd"] != pytest.approx(writer["cost_usd"])


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('"m" = { input = 1.0 }', "needs an output price"),
        ('"m" = { input = 1.0, output = 2.0, cached = 0.1 }', "'cached'"),
        ('"m" = [1.0]', "must be [input, output]"),
        ('"m" = { input = -1.0, output = 2.0 }', "input must be a price"),
        ('"m" = "cheap"', "must be [input, output] or a table"),
    ],
)
def test_a_bad_price_names_the_file_the_model_and_the_fix(
    tmp_path: Path, text: str, words: str
) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(f"[models]\n{text}\n")
    with pytest.raises(ConfigurationError) as caught:
        read_prices(prices)
    message = str(caught.value)
    assert str(prices) in message and "'m'" in message and words in message
