"""The price table the audit estimates cost with (``hs_prices``), and the macros reading what
prices a usage span (its model, provider and kinds of tokens).

Spans that report tokens but no cost are priced by the model that answered, its provider and
the time the request started, from genai-prices' bundled snapshot (never a network fetch):
:func:`price_usage` finds the distinct (model, provider) pairs of the trace set, resolves
each once (:mod:`auditor.model.price_source`) and installs the rows the engine joins. A TOML file of
contract prices wins over genai-prices for every model it names by prefix (``prices =
"prices.toml"`` under ``[tool.handoffscope]``, or ``--prices``)::

    [models]
    "gpt-4o" = [2.50, 10.00]        # US dollars per million input and output tokens
    "claude-sonnet-4-5" = { input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75 }
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from auditor.model import usage_keys as k
from auditor.model.price_source import PRICE_COLUMNS, ContractPrice, PriceRow, resolve_prices
from collector import schema as s
from collector.errors import ConfigurationError

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "PAIRS_SQL",
    "PRICE_ARGS",
    "install_prices",
    "price_usage",
    "prices_sql",
    "read_prices",
]

_KINDS: Final = {
    "input": "input_mtok",
    "output": "output_mtok",
    "cache_read": "cache_read_mtok",
    "cache_write": "cache_write_mtok",
}

PRICE_ARGS: Final = 'attributes, "gen_ai.request.model", "gen_ai.provider.name"'
"""The arguments every ``hs_usage_*`` macro takes, as columns of ``spans``."""


def read_prices(path: str | Path) -> dict[str, ContractPrice]:
    """The contract prices of the TOML file ``path``: ``"model" = [input, output]`` or a
    table with ``input``, ``output`` and optionally ``cache_read`` and ``cache_write``
    (US dollars per million tokens)."""
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
    return {model: _contract(path, model, value) for model, value in models.items()}


def _contract(path: str | Path, model: str, value: Any) -> ContractPrice:
    where = f"{path}: [models] {model!r}"
    if isinstance(value, list):
        if len(value) != 2:
            raise ConfigurationError(
                f"{where} must be [input, output], two prices in US dollars per million"
                f" tokens, not {value!r}"
            )
        value = {"input": value[0], "output": value[1]}
    if not isinstance(value, dict):
        raise ConfigurationError(
            f"{where} must be [input, output] or a table of input, output, cache_read and"
            f" cache_write prices, not {value!r}"
        )
    unknown = sorted(set(value) - set(_KINDS))
    if unknown:
        raise ConfigurationError(
            f"{where} has {', '.join(map(repr, unknown))}: the prices are"
            f" {', '.join(_KINDS)} (US dollars per million tokens)"
        )
    for kind in ("input", "output"):
        if kind not in value:
            raise ConfigurationError(f"{where} needs an {kind} price")
    prices: dict[str, float | None] = {}
    for kind, field in _KINDS.items():
        price = value.get(kind)
        if price is not None and (
            not isinstance(price, (int, float))
            or isinstance(price, bool)
            or not math.isfinite(price)
            or price < 0
        ):
            raise ConfigurationError(
                f"{where}: {kind} must be a price in US dollars per million tokens (a number"
                f" of 0 or more), not {price!r}"
            )
        prices[field] = None if price is None else float(price)
    return ContractPrice(**prices)  # type: ignore[arg-type]


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _first(keys: Sequence[str], typed: Mapping[str, str], cast: str = "") -> str:
    parts = [typed.get(key) or f"attributes[{_lit(key)}]" for key in dict.fromkeys(keys)]
    if cast:
        parts = [f"TRY_CAST({p} AS {cast})" for p in parts]
    return "coalesce(" + ", ".join(parts) + ")"


@cache
def prices_sql() -> str:
    """Statements creating the empty ``hs_prices`` table and the ``hs_usage_*`` macros
    (arguments :data:`PRICE_ARGS`): the model a usage is priced by, its provider, and its
    cached and reasoning tokens."""
    typed = {s.GEN_AI_REQUEST_MODEL: "g_model", s.GEN_AI_PROVIDER_NAME: "g_provider"}
    args = "attributes, g_model, g_provider"
    columns = ", ".join(f"{name} {typ}" for name, typ in PRICE_COLUMNS)
    macros = {
        "price_model": _first(k.PRICE_MODEL_KEYS, typed),
        "provider": _first(k.PROVIDER_KEYS, typed),
        "cache_read": _first([t.key for t in k.CACHE_READ_KEYS], typed, "BIGINT"),
        "cache_write": _first([t.key for t in k.CACHE_WRITE_KEYS], typed, "BIGINT"),
        "reasoning": _first([t.key for t in k.REASONING_KEYS], typed, "BIGINT"),
    }
    excludes = " OR ".join(
        f"(starts_with(scope, {_lit(e.scope_prefix)})"
        f" AND lower(provider) IN ({', '.join(_lit(p) for p in e.providers)}))"
        for e in k.INPUT_EXCLUDES_CACHE
    )
    return (
        f"CREATE OR REPLACE TEMP TABLE hs_prices ({columns});\n"
        + "".join(
            f"CREATE OR REPLACE TEMP MACRO hs_usage_{name}({args}) AS {body};\n"
            for name, body in macros.items()
        )
        + "CREATE OR REPLACE TEMP MACRO hs_usage_input_excludes_cache(scope, provider) AS"
        + f" coalesce({excludes or 'false'}, false);\n"
    )


def install_prices(con: duckdb.DuckDBPyConnection, rows: Sequence[PriceRow]) -> None:
    """Replace ``con``'s price table with ``rows`` (values bound, names never formatted)."""
    con.execute("DELETE FROM hs_prices")
    if rows:
        marks = ", ".join("?" for _ in PRICE_COLUMNS)
        con.executemany(
            f"INSERT INTO hs_prices VALUES ({marks})",
            [[getattr(row, name) for name, _ in PRICE_COLUMNS] for row in rows],
        )


PAIRS_SQL: Final = f"""
SELECT DISTINCT hs_usage_price_model({PRICE_ARGS}) AS model,
       hs_usage_provider({PRICE_ARGS}) AS provider
FROM spans
WHERE cost_usd IS NULL AND (input_tokens IS NOT NULL OR output_tokens IS NOT NULL)
"""
"""The (model, provider) pairs of the usage spans without a cost of their own."""


def price_usage(
    con: duckdb.DuckDBPyConnection, contract: Mapping[str, ContractPrice] | None = None
) -> list[PriceRow]:
    """Fill ``con``'s price table for the usage spans it holds: each distinct (model,
    provider) resolved once, ``contract`` prices first. Returns the rows installed."""
    pairs = [(m, p) for m, p in con.execute(PAIRS_SQL).fetchall() if m]
    rows, _ = resolve_prices(pairs, contract)
    install_prices(con, rows)
    return rows
