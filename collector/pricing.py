"""Model prices, so a phase that reports tokens but no cost still gets ``handoff.cost_usd``.

``DEFAULT_PRICES`` holds list prices in US dollars per million tokens (input, output) for
common models, as the providers published them in 2025. They are a convenience, not a
quote: pass your own ``PriceTable`` (``prices=`` on ``Sender``/``Receiver``) or call
``set_default_prices()`` for contract rates. A model missing from the table gets no cost
(the tokens are still recorded) rather than a guessed one.

>>> table = PriceTable({"my-model": Price(1.0, 2.0)})
>>> table.cost("my-model", input_tokens=1_000_000, output_tokens=500_000)
2.0
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DEFAULT_PRICES", "Price", "PriceTable", "default_prices", "set_default_prices"]


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million input and output tokens."""

    input_per_mtok: float
    output_per_mtok: float


DEFAULT_PRICES: Mapping[str, Price] = {
    # OpenAI
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4o-mini": Price(0.15, 0.60),
    "gpt-4.1": Price(2.00, 8.00),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.40),
    "o3": Price(2.00, 8.00),
    "o4-mini": Price(1.10, 4.40),
    # Anthropic
    "claude-opus-4": Price(15.00, 75.00),
    "claude-sonnet-4": Price(3.00, 15.00),
    "claude-3-5-haiku": Price(0.80, 4.00),
    # Google
    "gemini-2.5-pro": Price(1.25, 10.00),
    "gemini-2.5-flash": Price(0.30, 2.50),
    "gemini-2.0-flash": Price(0.10, 0.40),
    # Mistral
    "mistral-large": Price(2.00, 6.00),
    "mistral-small": Price(0.10, 0.30),
}
"""Per-million-token list prices (2025) of common models; override for real rates."""


class PriceTable:
    """Prices by model name. Lookup is exact, then by the longest known prefix.

    The prefix rule lets dated model ids (``gpt-4o-2024-08-06``) find their family's price.
    """

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        self._prices: dict[str, Price] = dict(DEFAULT_PRICES if prices is None else prices)
        self._by_length = sorted(self._prices, key=len, reverse=True)

    def price(self, model: str) -> Price | None:
        """The price of ``model``, or None when the table does not know it."""
        found = self._prices.get(model)
        if found is not None:
            return found
        for known in self._by_length:
            if model.startswith(known):
                return self._prices[known]
        return None

    def cost(self, model: str, *, input_tokens: int, output_tokens: int) -> float | None:
        """Dollar cost of the tokens, or None for an unknown model."""
        p = self.price(model)
        if p is None:
            return None
        return (input_tokens * p.input_per_mtok + output_tokens * p.output_per_mtok) / 1e6

    def with_prices(self, extra: Mapping[str, Price]) -> PriceTable:
        """A new table: this one plus ``extra`` (which wins)."""
        return PriceTable({**self._prices, **extra})

    def __contains__(self, model: object) -> bool:
        return isinstance(model, str) and self.price(model) is not None

    def __repr__(self) -> str:
        return f"PriceTable({len(self._prices)} models)"


_default = PriceTable()


def default_prices() -> PriceTable:
    """The table used when a sender or receiver is given none."""
    return _default


def set_default_prices(table: PriceTable | Mapping[str, Price]) -> None:
    """Replace the process-wide default price table."""
    global _default
    _default = table if isinstance(table, PriceTable) else PriceTable(table)
