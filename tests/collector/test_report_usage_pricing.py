"""``work.report_usage`` with cached and reasoning tokens, two models in one phase: the audit
charges the receiver what genai-prices' ``calc_price`` charges for each model's usage,
whether the library priced it (genai-prices installed) or left it to the audit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from genai_prices import Usage, calc_price

from auditor import audit, load_traces
from collector import (
    InProcessChannel,
    Price,
    PriceTable,
    Receiver,
    Sender,
    accept,
    configure_telemetry,
)
from collector import schema as s

CALLS = [
    # model, provider, input total, cache read, cache write, output, reasoning
    ("claude-sonnet-4-5-20250929", "anthropic", 180_000, 150_000, 20_000, 3_000, 0),
    ("gpt-5-mini", "openai", 12_000, 8_000, 0, 2_500, 1_800),
    ("claude-sonnet-4-5-20250929", "anthropic", 40_000, 30_000, 0, 1_000, 0),
]


def _expected() -> float:
    """calc_price of each model's usage: the two claude calls are one usage of their model
    (their sum passes the 200k tier, as the phase's total of that model does)."""
    by_model: dict[tuple[str, str], list[int]] = {}
    for model, provider, total, read, write, out, _ in CALLS:
        acc = by_model.setdefault((model, provider), [0, 0, 0, 0])
        for i, v in enumerate((total, read, write, out)):
            acc[i] += v
    cost = 0.0
    for (model, provider), (total, read, write, out) in by_model.items():
        usage = Usage(
            input_tokens=total,
            cache_read_tokens=read,
            cache_write_tokens=write,
            output_tokens=out,
        )
        cost += float(calc_price(usage, model, provider_id=provider).total_price)
    return cost


def _run(path: Path, prices: PriceTable) -> None:
    telemetry = configure_telemetry(
        service_name="usage-test", trace_file=str(path), otlp=None, set_global=False
    )

    def execute(work: Any) -> dict[str, bool]:
        for model, provider, total, read, write, out, reasoning in CALLS:
            work.report_usage(
                model=model,
                provider=provider,
                input_tokens=total,
                cache_read_tokens=read,
                cache_write_tokens=write,
                output_tokens=out,
                reasoning_tokens=reasoning,
            )
        return {"done": True}

    writer = Receiver(
        "writer",
        validator=lambda work: accept(eta_ms=100),
        executor=execute,
        tracer_provider=telemetry.tracer_provider,
        prices=prices,
    )
    planner = Sender("planner", tracer_provider=telemetry.tracer_provider)
    outcome = planner.handoff(
        InProcessChannel(writer),
        task_id="t-1",
        payload={"topic": "otters"},
        output_schema="draft@1",
        idempotency_key="t-1:draft",
        deadline_s=60,
    )
    assert outcome.state == "committed"
    telemetry.shutdown()


@pytest.mark.parametrize(
    "prices",
    [PriceTable(), PriceTable(genai_prices=False)],
    ids=["library-priced", "audit-priced"],
)
def test_two_models_in_one_phase_cost_what_calc_price_says(
    tmp_path: Path, prices: PriceTable
) -> None:
    path = tmp_path / "traces.jsonl"
    _run(path, prices)
    result = audit(load_traces(str(path)))
    writer = next(a for a in result.figures.agents if a["agent"] == "writer")
    assert writer["cost_usd"] == pytest.approx(_expected(), rel=1e-9)
    assert writer["input_tokens"] == sum(c[2] for c in CALLS)  # counted once, not twice
    assert writer["cache_read_tokens"] == sum(c[3] for c in CALLS)
    assert writer["reasoning_tokens"] == sum(c[6] for c in CALLS)
    assert writer["unpriced_input_tokens"] == 0
    # Each model's usage is a span of its own under the commit, with the GenAI keys.
    spans = [
        span
        for line in path.read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]
    chats = [sp for sp in spans if sp["name"].startswith("chat ")]
    assert sorted(sp["name"] for sp in chats) == [
        "chat claude-sonnet-4-5-20250929",
        "chat gpt-5-mini",
    ]
    keys = {a["key"] for sp in chats for a in sp["attributes"]}
    assert {
        s.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
        s.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
        s.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
        s.GEN_AI_PROVIDER_NAME,
    } <= keys
    # Priced by the library, the cost is reported; left to the audit, it is estimated.
    estimated = result.figures.summary["estimated_cost_usd"] or 0.0
    assert estimated == (0.0 if "genai" in repr(prices) else pytest.approx(_expected()))


def test_a_contract_price_wins_over_genai_prices() -> None:
    table = PriceTable({"gpt-5-mini": Price(1.0, 2.0, cache_read_per_mtok=0.1)})
    cost = table.cost(
        "gpt-5-mini-2025-08-07", input_tokens=1_000_000, output_tokens=0, cache_read_tokens=500_000
    )
    assert cost == pytest.approx((500_000 * 1.0 + 500_000 * 0.1) / 1e6)


def test_a_validator_s_two_models_are_priced_each_at_its_own_rate(tmp_path: Path) -> None:
    """The answer carries one total back to the sender: the receiver prices it per model."""
    path = tmp_path / "traces.jsonl"
    telemetry = configure_telemetry(
        service_name="usage-test", trace_file=str(path), otlp=None, set_global=False
    )

    def validate(work: Any) -> Any:
        work.report_usage(
            model="gpt-5-mini",
            provider="openai",
            input_tokens=3_000,
            cache_read_tokens=2_000,
            output_tokens=200,
        )
        work.report_usage(
            model="claude-haiku-4-5", provider="anthropic", input_tokens=1_500, output_tokens=100
        )
        return accept(eta_ms=100)

    checker = Receiver(
        "checker",
        validator=validate,
        executor=lambda work: "ok",
        tracer_provider=telemetry.tracer_provider,
    )
    Sender("planner", tracer_provider=telemetry.tracer_provider).handoff(
        InProcessChannel(checker),
        task_id="t-2",
        payload={},
        output_schema="x@1",
        idempotency_key="t-2",
        deadline_s=60,
    )
    telemetry.shutdown()
    result = audit(load_traces(str(path)))
    agent = next(a for a in result.figures.agents if a["agent"] == "checker")
    want = float(
        calc_price(
            Usage(input_tokens=3_000, cache_read_tokens=2_000, output_tokens=200),
            "gpt-5-mini",
            provider_id="openai",
        ).total_price
        + calc_price(
            Usage(input_tokens=1_500, output_tokens=100),
            "claude-haiku-4-5",
            provider_id="anthropic",
        ).total_price
    )
    assert agent["cost_usd"] == pytest.approx(want, rel=1e-9)
    assert agent["unpriced_input_tokens"] == 0
