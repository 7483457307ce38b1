"""The figures a run is judged by: observed end-to-end success against the analytic value.

The analytic values are the textbook ones for independent failures, per mode:

* fire-and-forget: every agent must succeed first time, ``r ** K``;
* handshake: each handoff is retried up to ``k`` attempts, ``(1 - (1 - r) ** k) ** K``;
* two-step: failures surface only at the end, so the whole chain is rerun up to ``k``
  times, ``1 - (1 - r ** K) ** k``.

Injected faults move the observed figure away from these on purpose; the clean figure is
the yardstick.
"""

from __future__ import annotations

import math

from collector.messages import MODE_FIRE_AND_FORGET, MODE_HANDSHAKE, MODE_TWO_STEP

__all__ = ["analytic_success", "wilson_interval"]


def analytic_success(*, mode: str, reliability: float, agents: int, max_attempts: int) -> float:
    """Expected end-to-end success of ``agents`` chained agents of per-attempt ``reliability``.

    >>> round(analytic_success(mode="fire-and-forget", reliability=0.95, agents=5,
    ...                        max_attempts=3), 4)
    0.7738
    """
    r, k, n = reliability, max_attempts, agents
    if mode == MODE_FIRE_AND_FORGET:
        return r**n
    if mode == MODE_HANDSHAKE:
        return (1.0 - (1.0 - r) ** k) ** n
    if mode == MODE_TWO_STEP:
        return 1.0 - (1.0 - r**n) ** k
    raise ValueError(f"unknown mode {mode!r}")


def wilson_interval(successes: int, trials: int, *, z: float = 3.29) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (``z=3.29``: about 99.9%).

    >>> lo, hi = wilson_interval(774, 1000)
    >>> lo < 0.774 < hi
    True
    """
    if trials <= 0:
        return (0.0, 1.0)
    p = successes / trials
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = (z / (1 + z2 / trials)) * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    return (max(0.0, centre - half), min(1.0, centre + half))
