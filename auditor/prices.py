"""The price table the audit estimates cost with, as a table of the connection (``hs_prices``).

Spans that report tokens but no cost are priced by their model from this table (longest known
prefix, as :class:`collector.pricing.PriceTable` looks prices up), and marked estimated. The
built-in table is :data:`collector.pricing.DEFAULT_PRICES`; a TOML file overrides or extends
it (``prices = "prices.toml"`` under ``[tool.handoffscope]``, or ``--prices``)::

    [models]
    "gpt-4o" = [2.50, 10.00]        # US dollars per million input and output tokens
    "my-fine-tune" = [3.00, 12.00]
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from collector.errors import ConfigurationError
from collector.pricing import DEFAULT_PRICES, Price

if TYPE_CHECKING:
    import duckdb

__all__ = ["install_prices", "prices_sql", "read_prices"]


def read_prices(path: str | Path) -> dict[str, Price]:
    """The built-in prices with those of the TOML file ``path`` on top (file wins)."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigurationError(f"{path}: cannot read the prices file ({e})") from e
    models = data.get("models")
    if not isinstance(models, dict) or not models:
        raise ConfigurationError(
            f'{path}: expected a [models] table such as "gpt-4o" = [2.50, 10.00]'
            " (US dollars per million input and output tokens)"
        )
    out = dict(DEFAULT_PRICES)
    for model, pair in models.items():
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in pair)
            or not all(math.isfinite(v) and v >= 0 for v in pair)
        ):
            raise ConfigurationError(
                f"{path}: [models] {model!r} must be [input, output], two prices in US dollars"
                f" per million tokens, not {pair!r}"
            )
        out[model] = Price(float(pair[0]), float(pair[1]))
    return out


def prices_sql(prices: Mapping[str, Price] = DEFAULT_PRICES) -> str:
    """A statement creating ``hs_prices`` (model, input_per_mtok, output_per_mtok)."""
    rows = ", ".join(
        "(" + "'" + m.replace("'", "''") + f"', {p.input_per_mtok!r}, {p.output_per_mtok!r})"
        for m, p in sorted(prices.items())
    )
    return (
        "CREATE OR REPLACE TEMP TABLE hs_prices"
        " (model VARCHAR, input_per_mtok DOUBLE, output_per_mtok DOUBLE);\n"
        + (f"INSERT INTO hs_prices VALUES {rows};\n" if rows else "")
    )


def install_prices(con: duckdb.DuckDBPyConnection, prices: Mapping[str, Price]) -> None:
    """Replace ``con``'s price table with ``prices`` (values bound, names never formatted)."""
    con.execute("DELETE FROM hs_prices")
    con.executemany(
        "INSERT INTO hs_prices VALUES (?, ?, ?)",
        [(m, p.input_per_mtok, p.output_per_mtok) for m, p in prices.items()],
    )
