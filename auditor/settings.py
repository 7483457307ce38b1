"""Audit settings: one value object, read from options, environment and pyproject.toml.

Precedence, highest first: an explicit option, an environment variable, the
``[tool.handoffscope]`` table of the nearest ``pyproject.toml``, the default::

    [tool.handoffscope]
    validation-timeout = "2s"
    p95-budget = "500ms"
    max-attempts = 3
    fail-on = "error"          # error | warning | never
    skip = ["missing-cost-attribution"]
    # Handoffs that need no handshake (the rule unvalidated-handoff leaves them out):
    pure-function-receivers = ["formatter"]    # a receiver with no side effect or state
    idempotent-receivers = ["cache-lookup"]    # a commit that is naturally idempotent
    pass-through-edges = ["router -> billing"] # a payload passed on unchanged
    prices = "prices.toml"                     # model prices ([models] "name" = [in, out])

Durations accept ``ms``, ``s``, ``m`` and ``us`` suffixes (a bare number is seconds).
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from collector import environment_variables as ev
from collector import schema
from collector.errors import ConfigurationError

__all__ = ["AuditSettings", "ENV_VARS", "FAIL_ON", "find_pyproject", "parse_duration", "resolve"]

FAIL_ON: Final = ("error", "warning", "never")
"""``--fail-on`` values: exit 1 on findings at or above this severity (never: always 0)."""

ENV_VARS: Final = {
    "validation_timeout": ev.HANDOFFSCOPE_VALIDATION_TIMEOUT,
    "p95_budget": ev.HANDOFFSCOPE_P95_BUDGET,
    "max_attempts": ev.HANDOFFSCOPE_MAX_ATTEMPTS,
    "fail_on": ev.HANDOFFSCOPE_FAIL_ON,
    "rules": ev.HANDOFFSCOPE_RULES,
    "skip": ev.HANDOFFSCOPE_SKIP,
}
"""Environment variables read by :func:`resolve` (rules and skip are comma-separated)."""

_PYPROJECT_KEYS: Final = {
    "validation-timeout": "validation_timeout",
    "p95-budget": "p95_budget",
    "max-attempts": "max_attempts",
    "fail-on": "fail_on",
    "rules": "rules",
    "skip": "skip",
    "pure-function-receivers": "pure_function_receivers",
    "idempotent-receivers": "idempotent_receivers",
    "pass-through-edges": "pass_through_edges",
    "prices": "prices",
}
_DURATION = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(us|µs|ms|s|m)?\s*$")
_UNITS: Final = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, None: 1.0}


@dataclass(frozen=True, slots=True)
class AuditSettings:
    """Thresholds and selection of one audit."""

    validation_timeout_s: float = schema.DEFAULT_VALIDATION_TIMEOUT_S
    """An answer slower than this is late (``slow-validation``)."""
    p95_budget_s: float = schema.DEFAULT_P95_BUDGET_S
    """Budget for each receiver's p95 validation latency."""
    max_attempts: int = schema.DEFAULT_MAX_ATTEMPTS
    """Retry cap assumed where a span does not record ``handoff.max_attempts``."""
    fail_on: str = "error"
    """Lowest severity that makes the audit fail (exit 1); ``never`` to always pass."""
    rules: tuple[str, ...] = ()
    """Run only these rules (all when empty)."""
    skip: tuple[str, ...] = ()
    """Do not run these rules."""
    pure_function_receivers: tuple[str, ...] = ()
    """Receivers that are pure functions: a framework handoff to them needs no handshake."""
    idempotent_receivers: tuple[str, ...] = ()
    """Receivers whose commit is naturally idempotent: a framework handoff to them is exempt."""
    pass_through_edges: tuple[str, ...] = ()
    """``sender -> receiver`` edges that pass a payload through unchanged: exempt."""
    prices: str | None = None
    """A TOML file of model prices overriding the built-in table (see ``docs/auditor.md``)."""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    """Where each non-default value came from (for ``--explain``-style diagnostics)."""

    def __post_init__(self) -> None:
        for what, seconds in (
            ("validation timeout", self.validation_timeout_s),
            ("p95 budget", self.p95_budget_s),
        ):
            # inf or nan would pass or fail every comparison in the rules' SQL silently.
            if not math.isfinite(seconds):
                raise ConfigurationError(
                    f"{what} must be a finite duration such as 2s or 500ms (got {seconds:g})"
                )
        if not self.validation_timeout_s > 0:
            raise ConfigurationError(
                f"validation timeout must be greater than zero (got {self.validation_timeout_s:g}s)"
            )
        if not self.p95_budget_s > 0:
            raise ConfigurationError(
                f"p95 budget must be greater than zero (got {self.p95_budget_s:g}s)"
            )
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise ConfigurationError(
                f"max attempts must be a whole number (got {self.max_attempts!r})"
            )
        if self.max_attempts < 1:
            raise ConfigurationError(f"max attempts must be at least 1 (got {self.max_attempts})")
        if self.fail_on not in FAIL_ON:
            raise ConfigurationError(
                f"fail-on must be one of {', '.join(FAIL_ON)} (got {self.fail_on!r})"
            )

    def parameters(self) -> dict[str, float | int | list[str]]:
        """The values rules bind, by parameter name."""
        return {
            "validation_timeout_ms": self.validation_timeout_s * 1000,
            "p95_budget_ms": self.p95_budget_s * 1000,
            "default_max_attempts": self.max_attempts,
            "exempt_receivers": [*self.pure_function_receivers, *self.idempotent_receivers],
            "exempt_edges": [_edge(e) for e in self.pass_through_edges],
        }


def _edge(text: str) -> str:
    """``a->b``, ``a -> b`` and ``a → b`` all read as ``a -> b``."""
    sender, _, receiver = text.replace("→", "->").partition("->")
    return f"{sender.strip()} -> {receiver.strip()}"


def parse_duration(text: str | float | int, *, option: str) -> float:
    """Seconds in ``text`` (``"2s"``, ``"500ms"``, ``"1.5"``); errors name ``option``."""
    if isinstance(text, bool):
        raise ConfigurationError(f"{option}: expected a duration such as 2s or 500ms, got {text!r}")
    if isinstance(text, (int, float)):
        try:
            value = float(text)
        except OverflowError:  # an int from pyproject.toml too big for a float
            value = math.inf
    else:
        match = _DURATION.match(str(text))
        if not match:
            raise ConfigurationError(
                f"{option}: {text!r} is not a duration; write it like 2s, 500ms or 1.5s"
            )
        value = float(match.group(1)) * _UNITS[match.group(2)]
    # Checked before the sign: "1e400" overflows to inf, and "greater than zero" would mislead.
    if not math.isfinite(value):
        raise ConfigurationError(
            f"{option}: must be a finite duration such as 2s or 500ms (got {text!r})"
        )
    if not value > 0:
        raise ConfigurationError(f"{option}: the duration must be greater than zero (got {text!r})")
    return value


def _whole_number(value: Any, where: str) -> int:
    """``value`` as an int; floats and booleans are refused rather than truncated."""
    # int(2.7) would quietly give 2 and int(True) 1: a typo must not change the threshold.
    if isinstance(value, bool) or isinstance(value, float):
        raise ConfigurationError(f"{where}: expected a whole number such as 3, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ConfigurationError(f"{where}: expected a whole number such as 3, got {value!r}")


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest ``pyproject.toml`` at or above ``start`` (the current directory)."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _from_pyproject(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigurationError(f"{path}: cannot read [tool.handoffscope] ({e})") from e
    table = data.get("tool", {}).get("handoffscope", {})
    if not isinstance(table, dict):
        raise ConfigurationError(f"{path}: [tool.handoffscope] must be a table")
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key not in _PYPROJECT_KEYS:
            # An ignored misspelling would leave the default in force without a word.
            close = difflib.get_close_matches(key, _PYPROJECT_KEYS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigurationError(
                f"{path}: [tool.handoffscope] has an unknown key {key!r}; {hint}"
                f"valid keys: {', '.join(_PYPROJECT_KEYS)}"
            )
        out[_PYPROJECT_KEYS[key]] = (value, f"{path} [tool.handoffscope] {key}")
    return out


def _from_env(env: Mapping[str, str] | None) -> dict[str, Any]:
    return {
        name: (value, f"environment variable {var}")
        for name, var in ENV_VARS.items()
        if (value := ev.read(var, env) or "").strip()
    }


def _ids(value: Any, where: str, *, what: str = "rule ids (a list of strings)") -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(v.strip() for v in value if v.strip())
    raise ConfigurationError(f"{where}: expected {what}")


def _prices_path(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{where}: expected the path of a prices TOML file")
    path = Path(value.strip())
    if not path.is_absolute() and " [tool.handoffscope]" in where:
        # Relative to the pyproject.toml that names it, not to the current directory.
        path = Path(where.split(" [tool.handoffscope]")[0]).parent / path
    return str(path)


def resolve(
    options: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    pyproject: Path | None = None,
) -> AuditSettings:
    """Settings from ``options`` (None values are unset) > ``env`` > ``pyproject`` > defaults.

    ``options`` keys: validation_timeout, p95_budget, max_attempts, fail_on, rules, skip,
    prices, pure_function_receivers, idempotent_receivers, pass_through_edges.
    """
    layers = [
        _from_pyproject(pyproject),
        _from_env(env),
        {
            k: (v, f"option --{k.replace('_', '-')}")
            for k, v in (options or {}).items()
            if v is not None and v != ()
        },
    ]
    merged: dict[str, tuple[Any, str]] = {}
    for layer in layers:
        merged.update(layer)
    kwargs: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, (value, where) in merged.items():
        sources[name] = where
        if name in ("validation_timeout", "p95_budget"):
            kwargs[f"{name}_s"] = parse_duration(value, option=where)
        elif name == "max_attempts":
            kwargs[name] = _whole_number(value, where)
            if kwargs[name] < 1:
                raise ConfigurationError(f"{where}: must be at least 1 (got {kwargs[name]})")
        elif name == "fail_on":
            kwargs[name] = str(value).strip().lower()
        elif name == "prices":
            kwargs[name] = _prices_path(value, where)
        elif name == "pass_through_edges":
            kwargs[name] = _ids(value, where, what="edges (a list of 'sender -> receiver')")
            bad = [e for e in kwargs[name] if "->" not in e.replace("→", "->")]
            if bad:
                raise ConfigurationError(
                    f"{where}: {bad[0]!r} is not an edge; write it as 'sender -> receiver'"
                )
        elif name in ("pure_function_receivers", "idempotent_receivers"):
            kwargs[name] = _ids(value, where, what="agent names (a list of strings)")
        else:
            kwargs[name] = _ids(value, where)
    try:
        return AuditSettings(**kwargs, sources=sources)
    except ConfigurationError as e:
        origin = sources.get("fail_on") if "fail-on" in str(e) else None
        raise ConfigurationError(f"{origin}: {e}" if origin else str(e)) from e
