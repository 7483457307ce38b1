"""Confidence intervals for the experiment tables: proportions, their differences, percentiles.

Every figure in ``docs/experiments.md`` is shown with an interval from this module:

* ``wilson`` for an end-to-end success rate (good coverage even for small samples);
* ``clopper_pearson`` where the rate sits at or near 0 or 1 (the 99.9% target), because it
  never under-covers there;
* ``newcombe_difference`` for the gap between two independently measured rates (the 4 -> 5
  agent step);
* ``bootstrap`` for anything without a closed form: latency percentiles, means of per-workflow
  counts (restarts, tokens), and differences between two samples' percentiles.

Only the standard library is needed, except ``bootstrap`` which vectorises with numpy (it
comes with the ``[dashboard]`` extra, like the chart).

>>> round(wilson(774, 1000).low, 4), round(wilson(774, 1000).high, 4)
(0.7471, 0.7988)
>>> [round(x, 4) for x in clopper_pearson(5, 10)]
[0.1871, 0.8129]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import NormalDist
from typing import Final, NamedTuple

__all__ = [
    "CONFIDENCE",
    "Interval",
    "bootstrap",
    "bootstrap_difference",
    "bootstrap_ratio",
    "clopper_pearson",
    "newcombe_difference",
    "required_trials",
    "wilson",
]

CONFIDENCE: Final = 0.95
"""The confidence level of every interval in the experiment tables."""


class Interval(NamedTuple):
    """A two-sided confidence interval ``[low, high]``."""

    low: float
    high: float

    def __contains__(self, value: object) -> bool:
        return isinstance(value, (int, float)) and self.low <= value <= self.high


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def _check_counts(successes: int, trials: int) -> None:
    if trials < 1:
        raise ValueError(f"an interval needs at least one trial, got {trials}")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be between 0 and {trials}, got {successes}")


def wilson(successes: int, trials: int, *, confidence: float = CONFIDENCE) -> Interval:
    """Wilson score interval for a binomial proportion."""
    _check_counts(successes, trials)
    z = _z(confidence)
    p = successes / trials
    z2n = z * z / trials
    centre = (p + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * math.sqrt(p * (1 - p) / trials + z2n / (4 * trials))
    return Interval(max(0.0, centre - half), min(1.0, centre + half))


def clopper_pearson(successes: int, trials: int, *, confidence: float = CONFIDENCE) -> Interval:
    """The exact (Clopper-Pearson) interval: inverts the binomial test, so it never under-covers."""
    _check_counts(successes, trials)
    alpha = 1.0 - confidence
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    k, n = successes, trials
    low = 0.0 if k == 0 else _beta_ppf(alpha / 2, k, n - k + 1)
    high = 1.0 if k == n else _beta_ppf(1 - alpha / 2, k + 1, n - k)
    return Interval(low, high)


def newcombe_difference(
    s1: int, n1: int, s2: int, n2: int, *, confidence: float = CONFIDENCE
) -> Interval:
    """Interval for ``s1/n1 - s2/n2`` from two independent samples (Newcombe's method 10).

    It combines the two Wilson intervals, so it behaves well near 0 and 1 where the plain
    normal approximation does not.
    """
    p1, p2 = s1 / n1, s2 / n2
    l1, u1 = wilson(s1, n1, confidence=confidence)
    l2, u2 = wilson(s2, n2, confidence=confidence)
    d = p1 - p2
    return Interval(
        d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2),
        d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2),
    )


def required_trials(
    rate: float, target: float, *, confidence: float = CONFIDENCE, limit: int = 10**9
) -> int | None:
    """Trials before a true ``rate`` above ``target`` shows an exact lower bound above it.

    A planning figure: the smallest N for which N trials with the expected number of
    failures, ``round(N * (1 - rate))``, give a Clopper-Pearson lower bound at or above
    ``target``; that is how many workflows it takes to *demonstrate* a rate such as 99.9%
    rather than merely fail to rule it out. None when ``rate`` is not above ``target`` (or
    more than ``limit`` trials would be needed).
    """
    if rate <= target:
        return None

    def shows(n: int) -> bool:
        failures = round(n * (1.0 - rate))
        return clopper_pearson(n - failures, n, confidence=confidence).low >= target

    high = 16
    while not shows(high):
        high *= 2
        if high > limit:
            return None
    low = high // 2
    while high - low > 1:
        mid = (low + high) // 2
        if shows(mid):
            high = mid
        else:
            low = mid
    return high


def bootstrap(
    values: Sequence[float],
    statistic: str | Callable[..., object] = "mean",
    *,
    q: float | None = None,
    resamples: int = 1000,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> Interval:
    """Percentile-bootstrap interval of a statistic of ``values``.

    ``statistic`` is ``"mean"`` or ``"quantile"`` (with ``q``, e.g. 0.95 for p95). Resampling
    is seeded, so the same values always give the same interval.
    """
    import numpy as np  # optional: numpy comes with the [dashboard] extra

    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("bootstrap needs at least one value")
    rng = np.random.default_rng(seed)
    stats = _resampled(data, statistic, q, resamples, rng)
    return _percentile_interval(stats, confidence)


def bootstrap_difference(
    a: Sequence[float],
    b: Sequence[float],
    statistic: str = "quantile",
    *,
    q: float | None = 0.5,
    resamples: int = 1000,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> Interval:
    """Bootstrap interval of ``stat(a) - stat(b)`` for two independent samples."""
    import numpy as np  # optional: numpy comes with the [dashboard] extra

    xa = np.asarray(a, dtype=float)
    xb = np.asarray(b, dtype=float)
    if xa.size == 0 or xb.size == 0:
        raise ValueError("bootstrap_difference needs two non-empty samples")
    rng = np.random.default_rng(seed)
    diff = _resampled(xa, statistic, q, resamples, rng) - _resampled(
        xb, statistic, q, resamples, rng
    )
    return _percentile_interval(diff, confidence)


def bootstrap_ratio(
    numerators: Sequence[float],
    denominators: Sequence[float],
    *,
    resamples: int = 1000,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> Interval:
    """Bootstrap interval of ``sum(numerators) / sum(denominators)``, resampling pairs.

    For per-unit ratios such as spend per successful workflow, where both the spend and the
    number of successes vary from sample to sample.
    """
    import numpy as np  # optional: numpy comes with the [dashboard] extra

    num = np.asarray(numerators, dtype=float)
    den = np.asarray(denominators, dtype=float)
    if num.size == 0 or num.size != den.size:
        raise ValueError("bootstrap_ratio needs two non-empty samples of the same length")
    rng = np.random.default_rng(seed)
    out = np.empty(resamples)
    chunk = max(1, min(resamples, 4_000_000 // num.size))
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, num.size, size=(stop - start, num.size))
        with np.errstate(divide="ignore", invalid="ignore"):
            out[start:stop] = num[idx].sum(axis=1) / den[idx].sum(axis=1)
    out = out[np.isfinite(out)]
    if out.size == 0:
        return Interval(math.nan, math.nan)
    return _percentile_interval(out, confidence)


def _resampled(data, statistic, q, resamples, rng):  # type: ignore[no-untyped-def]
    import numpy as np  # optional: numpy comes with the [dashboard] extra

    out = np.empty(resamples)
    # Chunks keep memory flat for large samples: one chunk is at most ~4M indices.
    chunk = max(1, min(resamples, 4_000_000 // max(1, data.size)))
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, data.size, size=(stop - start, data.size))
        sample = data[idx]
        if statistic == "mean":
            out[start:stop] = sample.mean(axis=1)
        elif statistic == "quantile":
            if q is None or not 0.0 <= q <= 1.0:
                raise ValueError("statistic='quantile' needs q between 0 and 1")
            out[start:stop] = np.quantile(sample, q, axis=1)
        elif callable(statistic):
            out[start:stop] = [float(statistic(row)) for row in sample]
        else:
            raise ValueError(f"unknown statistic {statistic!r}; use 'mean' or 'quantile'")
    return out


def _percentile_interval(stats, confidence: float) -> Interval:  # type: ignore[no-untyped-def]
    import numpy as np  # optional: numpy comes with the [dashboard] extra

    alpha = 1.0 - confidence
    low, high = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
    return Interval(float(low), float(high))


# --------------------------------------------------------------------------------------
# The regularised incomplete beta function and its inverse (for Clopper-Pearson)
# --------------------------------------------------------------------------------------
def _betainc(x: float, a: float, b: float) -> float:
    """I_x(a, b) by the continued fraction of Numerical Recipes (modified Lentz)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    # The fraction converges fast only on this side of the mean; use symmetry otherwise.
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(x, a, b) / a
    return 1.0 - math.exp(ln_front) * _betacf(1.0 - x, b, a) / b


def _betacf(x: float, a: float, b: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _beta_ppf(p: float, a: float, b: float) -> float:
    """The ``p`` quantile of Beta(a, b), by bisection on ``_betainc`` (monotone in x)."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if _betainc(mid, a, b) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    return (lo + hi) / 2
