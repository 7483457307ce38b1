"""Model prices, so a phase that reports tokens but no cost still gets ``handoff.cost_usd``.

A :class:`PriceTable` holds contract rates you give it (``prices=`` on ``Sender`` /
``Receiver``, or :func:`set_default_prices`), looked up exactly, then by the longest known
prefix. A model it does not hold is priced from genai-prices when that package is installed
(the ``[pricing]`` extra: its bundled snapshot, never a network fetch), with cached tokens at
their own rates and long-context tiers as the provider bills them; without it, the tokens are
still recorded and the audit prices them later. Nothing here imports genai-prices until a
price is asked for, so ``import collector`` loads only the OpenTelemetry API.

>>> table = PriceTable({"my-model": Price(1.0, 2.0)})
>>> table.cost("my-model", input_tokens=1_000_000, output_tokens=500_000)
2.0
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Price", "PriceTable", "default_prices", "set_default_prices"]


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million tokens: input, output, and the cached input read and written
    (the input price when None, as a provider without a cache discount charges them)."""

    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None


class PriceTable:
    """Contract prices by model name (exact, then the longest known prefix, so dated ids such
    as ``gpt-4o-2024-08-06`` find their family's price), and genai-prices for the rest."""

    def __init__(
        self, prices: Mapping[str, Price] | None = None, *, genai_prices: bool = True
    ) -> None:
        self._prices: dict[str, Price] = dict(prices or {})
        self._by_length = sorted(self._prices, key=len, reverse=True)
        self._genai_prices = genai_prices

    def price(self, model: str) -> Price | None:
        """The contract price of ``model``, or None when the table does not hold it."""
        found = self._prices.get(model)
        if found is not None:
            return found
        for known in self._by_length:
            if model.startswith(known):
                return self._prices[known]
        return None

    def cost(
        self,
        model: str,
        *,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        provider: str | None = None,
    ) -> float | None:
        """Dollar cost of the tokens (``input_tokens`` with the cached ones inside it), or
        None when neither the table nor genai-prices prices the model."""
        p = self.price(model)
        if p is not None:
            cache_read = (
                p.input_per_mtok if p.cache_read_per_mtok is None else p.cache_read_per_mtok
            )
            cache_write = (
                p.input_per_mtok if p.cache_write_per_mtok is None else p.cache_write_per_mtok
            )
            uncached = max(input_tokens - cache_read_tokens - cache_write_tokens, 0)
            return (
                uncached * p.input_per_mtok
                + cache_read_tokens * cache_read
                + cache_write_tokens * cache_write
                + output_tokens * p.output_per_mtok
            ) / 1e6
        if not self._genai_prices:
            return None
        return _genai_cost(
            model, provider, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens
        )

    def with_prices(self, extra: Mapping[str, Price]) -> PriceTable:
        """A new table: this one plus ``extra`` (which wins)."""
        return PriceTable({**self._prices, **extra}, genai_prices=self._genai_prices)

    def __contains__(self, model: object) -> bool:
        return isinstance(model, str) and self.price(model) is not None

    def __repr__(self) -> str:
        source = " + genai-prices" if self._genai_prices else ""
        return f"PriceTable({len(self._prices)} models{source})"


def _genai_cost(
    model: str,
    provider: str | None,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int,
    cache_write_tokens: int,
) -> float | None:
    """genai-prices' price of the usage now, or None (not installed, model unknown, or
    counts it refuses)."""
    try:
        from genai_prices import Usage, calc_price
    except ImportError:
        return None
    usage = Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read_tokens,
        cache_write_tokens=cache_write_tokens,
    )
    for provider_id in (provider, None) if provider else (None,):
        try:
            return float(calc_price(usage, model, provider_id=provider_id).total_price)
        except LookupError:
            continue
        except ValueError:
            return None
    return None


_default = PriceTable()


def default_prices() -> PriceTable:
    """The table used when a sender or receiver is given none (genai-prices alone)."""
    return _default


def set_default_prices(table: PriceTable | Mapping[str, Price]) -> None:
    """Replace the process-wide default price table."""
    global _default
    _default = table if isinstance(table, PriceTable) else PriceTable(table)
