"""The audit's estimated cost against genai-prices' own ``calc_price``, usage by usage.

Thousands of generated model calls (models of many providers, cache reads and writes,
reasoning, input totals either side of every tier boundary, start times either side of
every dated price change and of off-peak hours), written in the GenAI, OpenInference and
OpenLLMetry conventions, are audited; each span's cost must equal what ``calc_price`` gives
for the same usage, model, provider and time.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest
from genai_prices import Usage, calc_price
from genai_prices.data_snapshot import get_snapshot
from genai_prices.types import StartDateConstraint, TieredPrices, TimeOfDateConstraint

from auditor import load_traces
from auditor.audit import prepare
from auditor.model.price_source import find_model

# Models people run, across providers, as (model id in the spans, provider in the spans).
CURRENT = [
    ("gpt-5", "openai"),
    ("gpt-5-mini", "openai"),
    ("gpt-5-nano", None),
    ("gpt-4o-2024-08-06", "openai"),
    ("gpt-4.1", "openai"),
    ("o3", "openai"),
    ("o4-mini", None),
    ("claude-sonnet-4-5-20250929", "anthropic"),
    ("claude-opus-4-1", "anthropic"),
    ("claude-haiku-4-5", "anthropic"),
    ("claude-3-5-haiku-latest", None),
    ("gemini-2.5-pro", "gcp.gemini"),
    ("gemini-2.5-flash", "google"),
    ("gemini-2.5-flash-lite", None),
    ("deepseek-chat", "deepseek"),
    ("deepseek-reasoner", "deepseek"),
    ("mistral-large-latest", "mistral_ai"),
    ("grok-4", "x_ai"),
    ("command-r-plus", "cohere"),
]


def _dated_and_tiered(limit: int) -> list[tuple[str, str]]:
    """Models (genai-prices' own ids) whose prices change by date, by time of day, or by
    input tier: the cases a flat table gets wrong."""
    out = []
    for provider in get_snapshot().providers:
        for model in provider.models:
            prices = model.prices if isinstance(model.prices, list) else []
            dated = any(
                isinstance(c.constraint, (StartDateConstraint, TimeOfDateConstraint))
                for c in prices
            )
            standard = prices[0].prices if prices else model.prices
            tiered = any(isinstance(v, TieredPrices) for v in vars(standard).values())
            found = find_model(model.id, provider.id)
            if (dated or tiered) and not isinstance(found, str) and found[1] is model:
                out.append((model.id, provider.id))
    random.Random(7).shuffle(out)
    return out[:limit]


def _boundaries(model: str, provider: str | None) -> tuple[list[int], list[datetime]]:
    """The tier starts and the price-change instants of a model (empty when none)."""
    found = find_model(model, provider)
    assert not isinstance(found, str), found
    _, info = found
    tiers: set[int] = set()
    instants: list[datetime] = []
    conditions = info.prices if isinstance(info.prices, list) else []
    for cond in conditions or [None]:
        prices = cond.prices if cond is not None else info.prices
        for value in vars(prices).values():
            if isinstance(value, TieredPrices):
                tiers.update(t.start for t in value.tiers)
        constraint = cond.constraint if cond is not None else None
        if isinstance(constraint, StartDateConstraint):
            day: date = constraint.start_date
            instants.append(datetime(day.year, day.month, day.day, tzinfo=UTC))
        elif isinstance(constraint, TimeOfDateConstraint):
            for t in (constraint.start_time, constraint.end_time):
                at = datetime.combine(date(2025, 11, 3), t)
                at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
                instants.append(at)
    return sorted(tiers), instants


CONVENTIONS = ("genai", "openinference", "openllmetry")


def _attributes(convention: str, call: dict[str, Any]) -> dict[str, Any]:
    model, provider = call["model"], call["provider"]
    if convention == "genai":
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model.split("-20")[0],
            "gen_ai.response.model": model,
            "gen_ai.usage.input_tokens": call["input"],
            "gen_ai.usage.output_tokens": call["output"],
            "gen_ai.usage.cache_read.input_tokens": call["cache_read"],
            "gen_ai.usage.cache_creation.input_tokens": call["cache_write"],
            "gen_ai.usage.reasoning.output_tokens": call["reasoning"],
        }
        if provider:
            attrs["gen_ai.provider.name"] = provider
    elif convention == "openinference":
        attrs = {
            "openinference.span.kind": "LLM",
            "llm.model_name": model,
            "llm.token_count.prompt": call["input"],
            "llm.token_count.completion": call["output"],
            "llm.token_count.prompt_details.cache_read": call["cache_read"],
            "llm.token_count.prompt_details.cache_write": call["cache_write"],
            "llm.token_count.completion_details.reasoning": call["reasoning"],
        }
        if provider:
            attrs["llm.provider"] = provider
    else:
        attrs = {
            "traceloop.span.kind": "llm",
            "gen_ai.request.model": model,
            "gen_ai.usage.prompt_tokens": call["input"],
            "gen_ai.usage.completion_tokens": call["output"],
            "gen_ai.usage.cache_read_input_tokens": call["cache_read"],
            "gen_ai.usage.cache_creation_input_tokens": call["cache_write"],
            "gen_ai.usage.reasoning_tokens": call["reasoning"],
        }
        if provider:
            attrs["gen_ai.system"] = provider
    return attrs


def _otlp_value(value: Any) -> dict[str, Any]:
    if isinstance(value, int):
        return {"intValue": str(value)}
    return {"stringValue": str(value)}


def _calls(seed: int, count: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    models = CURRENT + _dated_and_tiered(40)
    calls = []
    for i in range(count):
        model, provider = models[i % len(models)]
        tiers, instants = _boundaries(model, provider)
        # An input total either side of a tier boundary, or anywhere.
        if tiers and rng.random() < 0.6:
            boundary = rng.choice(tiers)
            total = max(0, boundary + rng.choice((-1, 0, 1, 2, -5000, 7000)))
        else:
            total = rng.randint(0, 300_000)
        cache_read = rng.randint(0, total) if rng.random() < 0.6 else 0
        cache_write = rng.randint(0, total - cache_read) if rng.random() < 0.4 else 0
        output = rng.randint(0, 40_000)
        reasoning = rng.randint(0, output) if rng.random() < 0.3 else 0
        # A start either side of a price change, or any day of the last two years.
        if instants and rng.random() < 0.6:
            start = rng.choice(instants) + timedelta(seconds=rng.choice((-1, 0, 1, -86_400)))
        else:
            start = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(
                seconds=rng.randint(0, 700 * 86_400)
            )
        calls.append(
            {
                "span_id": f"{i + 1:016x}",
                "model": model,
                "provider": provider,
                "input": total,
                "cache_read": cache_read,
                "cache_write": cache_write,
                "output": output,
                "reasoning": reasoning,
                "start": start,
                "convention": CONVENTIONS[i % len(CONVENTIONS)],
            }
        )
    return calls


def _write(path: Path, calls: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i, call in enumerate(calls):
            start_ns = int(call["start"].timestamp()) * 1_000_000_000
            span = {
                "traceId": f"{i + 1:032x}",
                "spanId": call["span_id"],
                "name": f"chat {call['model']}",
                "kind": 3,
                "startTimeUnixNano": str(start_ns),
                "endTimeUnixNano": str(start_ns + 1_000_000),
                "attributes": [
                    {"key": k, "value": _otlp_value(v)}
                    for k, v in _attributes(call["convention"], call).items()
                ],
            }
            record = {
                "resourceSpans": [
                    {
                        "resource": {
                            "attributes": [{"key": "service.name", "value": {"stringValue": "app"}}]
                        },
                        "scopeSpans": [{"scope": {"name": "app.llm"}, "spans": [span]}],
                    }
                ]
            }
            out.write(json.dumps(record) + "\n")


def _expected(call: dict[str, Any]) -> float | None:
    usage = Usage(
        input_tokens=call["input"],
        cache_read_tokens=call["cache_read"],
        cache_write_tokens=call["cache_write"],
        output_tokens=call["output"],
    )
    found = find_model(call["model"], call["provider"])
    if isinstance(found, str):
        return None
    provider, _ = found
    try:
        price = calc_price(
            usage, call["model"], provider_id=provider.id, genai_request_timestamp=call["start"]
        )
    except (LookupError, ValueError):
        return None
    return float(price.total_price)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_audit_charges_what_genai_prices_charges(tmp_path: Path, seed: int) -> None:
    calls = _calls(seed, 1_500)
    path = tmp_path / "calls.jsonl"
    _write(path, calls)
    ts = load_traces(str(path))
    assert ts.problems == []
    prepare(ts.con)
    got = {
        span_id: (cost, estimated, unpriced)
        for span_id, cost, estimated, unpriced in ts.con.execute(
            "SELECT span_id, cost_usd, cost_estimated, unpriced FROM hs_usage_all"
        ).fetchall()
    }
    assert len(got) == len(calls)
    priced = 0
    for call in calls:
        want = _expected(call)
        cost, estimated, unpriced = got[call["span_id"]]
        where = f"{call} (convention {call['convention']})"
        if want is None:
            assert unpriced and cost is None, where
            continue
        priced += 1
        assert estimated and not unpriced, where
        assert cost == pytest.approx(want, rel=1e-9, abs=1e-12), where
    # Nearly every generated usage is priceable: the comparison is not vacuous.
    assert priced > 0.9 * len(calls)


def test_a_price_change_and_a_tier_change_the_cost(tmp_path: Path) -> None:
    """Either side of a boundary, the cost differs as genai-prices says (a check that the
    generated cases do cross boundaries, so the differential test can fail)."""
    calls = [
        {
            "span_id": f"{i + 1:016x}",
            "model": "gemini-2.5-pro",
            "provider": "google",
            "input": total,
            "cache_read": 0,
            "cache_write": 0,
            "output": 1_000,
            "reasoning": 0,
            "start": datetime.combine(date(2025, 9, 1), time(12), tzinfo=UTC),
            "convention": "genai",
        }
        for i, total in enumerate((200_000, 200_001))
    ]
    path = tmp_path / "tier.jsonl"
    _write(path, calls)
    ts = load_traces(str(path))
    prepare(ts.con)
    costs = dict(ts.con.execute("SELECT span_id, cost_usd FROM hs_usage_all").fetchall())
    below, above = (costs[c["span_id"]] for c in calls)
    assert above > below * 1.5  # the long-context tier charges every token more
    assert below == pytest.approx(_expected(calls[0]))
    assert above == pytest.approx(_expected(calls[1]))
