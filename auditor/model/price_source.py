"""Prices for the models a trace set used, from genai-prices or a contract, as rows the engine
joins: resolved once per distinct (model, provider), never once per span.

genai-prices (its bundled snapshot, never a network fetch) knows each model's prices by
provider and date, its cache read and write prices and its long-context tiers. Its price of
one request is linear in the usage once three things are fixed: which of the model's dated
prices is in force (:class:`genai_prices.types.ConditionalPrice`), which tier the request's
input total falls in, and the provider. So each (model, provider) becomes a few
:class:`PriceRow` s, one per dated price and tier, each holding the dollars per million
tokens of each kind *as genai-prices itself charges them*: the rates are read off
``ModelPrice.calc_price`` on probe usages, so how it splits cached tokens out of the input
total (its unit decomposition) is its own, not a copy.

A span's cost is then, with ``input`` the input total *including* cached tokens (as
genai-prices counts it)::

    per_request + ((input - cache_read - cache_write) * input_mtok
                   + cache_read * cache_read_mtok + cache_write * cache_write_mtok
                   + output * output_mtok) / 1e6

for the row of its (model, provider) whose dated price is the last in force at the span's
start (its ``cond``, the highest whose ``starts_ns`` and time of day admit the span; ``cond``
0 when none does) and whose tier holds its input total (``input_above < input <=
input_upto``). A contract price (:class:`ContractPrice`, from ``--prices``) wins over
genai-prices for every model it names by prefix, longest first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from auditor.model.usage_keys import PROVIDER_ALIASES

if TYPE_CHECKING:
    from genai_prices.types import ModelInfo, ModelPrice, Provider

__all__ = [
    "PRICE_COLUMNS",
    "ContractPrice",
    "PriceRow",
    "Unpriced",
    "resolve_prices",
    "source_version",
]

_MTOK: Final = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class ContractPrice:
    """A negotiated price (US dollars per million tokens); cache prices default to the
    input price, as a provider without a cache discount charges them."""

    input_mtok: float
    output_mtok: float
    cache_read_mtok: float | None = None
    cache_write_mtok: float | None = None


@dataclass(frozen=True, slots=True)
class PriceRow:
    """The rates of one (model, provider) within one dated price and one input tier."""

    model: str
    """The model as the spans name it (the join key)."""
    provider: str | None
    """The provider as the spans name it, or None (the join key)."""
    source: str
    """``genai-prices`` or ``contract``."""
    matched: str
    """What the model was matched to: genai-prices' model id, or the contract's key."""
    provider_id: str | None
    """genai-prices' provider id (None for a contract)."""
    cond: int
    """Which dated price of the model this is (0 for the first, used when no other is in
    force)."""
    starts_ns: int | None
    """In force for spans starting at or after this (UTC midnight of its start date)."""
    tod_from_s: int | None
    """In force only from this second of the UTC day (with ``tod_until_s``)."""
    tod_until_s: int | None
    """... until this one (exclusive; an interval across midnight has from > until)."""
    input_above: int
    """The tier holds input totals above this (-1: from zero)."""
    input_upto: int | None
    """... up to this one, inclusive (None: no upper bound)."""
    per_request: float
    input_mtok: float
    cache_read_mtok: float
    cache_write_mtok: float
    output_mtok: float


PRICE_COLUMNS: Final = (
    ("model", "VARCHAR"),
    ("provider", "VARCHAR"),
    ("source", "VARCHAR"),
    ("matched", "VARCHAR"),
    ("provider_id", "VARCHAR"),
    ("cond", "INTEGER"),
    ("starts_ns", "BIGINT"),
    ("tod_from_s", "INTEGER"),
    ("tod_until_s", "INTEGER"),
    ("input_above", "BIGINT"),
    ("input_upto", "BIGINT"),
    ("per_request", "DOUBLE"),
    ("input_mtok", "DOUBLE"),
    ("cache_read_mtok", "DOUBLE"),
    ("cache_write_mtok", "DOUBLE"),
    ("output_mtok", "DOUBLE"),
)
"""The columns of the price table (``hs_prices``), in the order of :class:`PriceRow`."""


@dataclass(frozen=True, slots=True)
class Unpriced:
    """A (model, provider) nothing could price, and why."""

    model: str
    provider: str | None
    reason: str


def source_version() -> str:
    """Which price source the audit uses: genai-prices and its version."""
    import genai_prices  # optional: the [cli] extra

    return f"genai-prices {genai_prices.__version__}"


def resolve_prices(
    pairs: Iterable[tuple[str, str | None]],
    contract: Mapping[str, ContractPrice] | None = None,
) -> tuple[list[PriceRow], list[Unpriced]]:
    """The price rows of each distinct (model, provider) of ``pairs``, and those nothing
    prices. A contract key that prefixes the model (longest first) wins over genai-prices."""
    by_length = sorted(contract or {}, key=len, reverse=True)
    rows: list[PriceRow] = []
    missing: list[Unpriced] = []
    for model, provider in sorted(set(pairs), key=lambda p: (p[0], p[1] or "")):
        key = next((k for k in by_length if model.startswith(k)), None)
        if key is not None and contract is not None:
            rows.append(_contract_row(model, provider, key, contract[key]))
            continue
        found = _genai_rows(model, provider)
        if isinstance(found, str):
            missing.append(Unpriced(model, provider, found))
        else:
            rows.extend(found)
    return rows, missing


def _contract_row(model: str, provider: str | None, key: str, price: ContractPrice) -> PriceRow:
    return PriceRow(
        model=model,
        provider=provider,
        source="contract",
        matched=key,
        provider_id=None,
        cond=0,
        starts_ns=None,
        tod_from_s=None,
        tod_until_s=None,
        input_above=-1,
        input_upto=None,
        per_request=0.0,
        input_mtok=price.input_mtok,
        cache_read_mtok=(
            price.input_mtok if price.cache_read_mtok is None else price.cache_read_mtok
        ),
        cache_write_mtok=(
            price.input_mtok if price.cache_write_mtok is None else price.cache_write_mtok
        ),
        output_mtok=price.output_mtok,
    )


def find_model(model: str, provider: str | None) -> tuple[Provider, ModelInfo] | str:
    """genai-prices' provider and model for a span's (model, provider), or why there are none.

    A provider is tried as genai-prices spells it
    (:data:`auditor.model.usage_keys.PROVIDER_ALIASES`),
    then as the spans do; one genai-prices does not know (a gateway's name) is dropped, and the
    model alone chooses, as genai-prices does when it is given no provider. A routed id that
    none of these finds (``openai/gpt-4o``, as LiteLLM and gateways name models) is tried as
    the model after its first slash at the provider before it."""
    from genai_prices.data_snapshot import get_snapshot  # optional: the [cli] extra

    snapshot = get_snapshot()
    tried: list[str] = []
    names = [PROVIDER_ALIASES.get(provider.lower()), provider] if provider else []
    for provider_id in [*dict.fromkeys(n for n in names if n), None]:
        try:
            return snapshot.find_provider_model(model, None, provider_id, None)
        except LookupError as e:
            tried.append(str(e))
    prefix, slash, rest = model.partition("/")
    if slash and prefix and rest:
        # A routed id, ``{provider}/{model}`` (LiteLLM, OpenRouter, gateways): the model after
        # the first slash, at the provider before it.
        found = find_model(rest, prefix)
        if not isinstance(found, str):
            return found
        tried.append(found)
    return "; ".join(tried)


def _genai_rows(model: str, provider: str | None) -> list[PriceRow] | str:
    found = find_model(model, provider)
    if isinstance(found, str):
        return f"genai-prices does not know it ({found})"
    found_provider, info = found
    conditions: list[tuple[Any, ModelPrice]]
    if isinstance(info.prices, list):
        conditions = [(c.constraint, c.prices) for c in info.prices]
    else:
        conditions = [(None, info.prices)]
    rows: list[PriceRow] = []
    for cond, (constraint, price) in enumerate(conditions):
        starts_ns = tod_from = tod_until = None
        if cond and constraint is not None:
            starts_ns, tod_from, tod_until = _constraint(constraint)
        try:
            for above, upto, rates in _tiers(price):
                rows.append(
                    PriceRow(
                        model=model,
                        provider=provider,
                        source="genai-prices",
                        matched=info.id,
                        provider_id=found_provider.id,
                        cond=cond,
                        starts_ns=starts_ns,
                        tod_from_s=tod_from,
                        tod_until_s=tod_until,
                        input_above=above,
                        input_upto=upto,
                        **rates,
                    )
                )
        except (ValueError, ArithmeticError) as e:
            return f"genai-prices cannot price its tokens ({e})"
    return rows


def _constraint(constraint: Any) -> tuple[int | None, int | None, int | None]:
    """(starts_ns, tod_from_s, tod_until_s) of a genai-prices constraint."""
    start = getattr(constraint, "start_date", None)
    if isinstance(start, date):
        midnight = datetime(start.year, start.month, start.day, tzinfo=UTC)
        return int(midnight.timestamp()) * 1_000_000_000, None, None
    begin, end = getattr(constraint, "start_time", None), getattr(constraint, "end_time", None)
    if isinstance(begin, time) and isinstance(end, time):
        return None, _utc_second(begin), _utc_second(end)
    raise ValueError(f"a price constraint handoffscope does not know: {constraint!r}")


def _utc_second(value: time) -> int:
    if value.tzinfo is not None:
        value = datetime.combine(date(1970, 1, 1), value).astimezone(UTC).time()
    return value.hour * 3600 + value.minute * 60 + value.second


def _tiers(price: ModelPrice) -> list[tuple[int, int | None, dict[str, float]]]:
    """(input_above, input_upto, rates) of each input tier of ``price``: every tier start
    of any of its prices is a boundary, since genai-prices picks every price's tier by the
    same input total."""
    from genai_prices.types import TieredPrices  # optional: the [cli] extra

    starts = sorted(
        {
            tier.start
            for value in vars(price).values()
            if isinstance(value, TieredPrices)
            for tier in value.tiers
        }
    )
    bounds = [-1, *starts]
    out = []
    for i, above in enumerate(bounds):
        upto = bounds[i + 1] if i + 1 < len(bounds) else None
        out.append((above, upto, _rates(price, max(above + 1, 1), upto)))
    return out


def _rates(price: ModelPrice, probe: int, upto: int | None) -> dict[str, float]:
    """The per-request price and the dollars per million tokens of each kind in the tier
    holding input totals ``probe`` and ``probe + 1``, read off genai-prices' own calculation:
    within one tier, the price is linear in each count."""
    from genai_prices.types import Usage  # optional: the [cli] extra

    if upto is not None and probe + 1 > upto:
        raise ValueError(f"an input tier too narrow to read its rates (up to {upto})")

    def cost(input_total: int = probe, **counts: int) -> Decimal:
        return price.calc_price(Usage(input_tokens=input_total, **counts))["total_price"]

    base = cost()
    per_input = cost(probe + 1) - base
    rates = {"per_request": base - probe * per_input, "input_mtok": per_input * _MTOK}
    for kind in ("cache_read", "cache_write"):
        # One input token read from (or written to) the cache instead of uncached.
        rates[f"{kind}_mtok"] = (per_input + cost(**{f"{kind}_tokens": 1}) - base) * _MTOK
    rates["output_mtok"] = (cost(output_tokens=1) - base) * _MTOK
    return {k: float(v) for k, v in rates.items()}
