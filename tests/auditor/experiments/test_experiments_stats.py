"""The experiment statistics: interval values, exact coverage, bootstrap behaviour, analytics."""

from __future__ import annotations

import math
import random

import pytest

from auditor.experiments import analytic, stats
from auditor.experiments.plan import FIRE_AND_FORGET, TWO_STEP, handshake


def _binomial_pmf(n: int, p: float) -> list[float]:
    return [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]


def _coverage(interval, n: int, p: float) -> float:
    """Exact coverage: the probability, over Binomial(n, p), that the interval holds p."""
    return sum(pk for k, pk in enumerate(_binomial_pmf(n, p)) if p in interval(k, n))


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        (5, 10, 0.187086, 0.812914),  # textbook Clopper-Pearson
        (0, 10, 0.0, 1 - 0.025 ** (1 / 10)),  # closed form at the edge
        (10, 10, 0.025 ** (1 / 10), 1.0),
        (1, 20, 0.001265, 0.248733),
    ],
)
def test_clopper_pearson_known_values(k, n, low, high):
    iv = stats.clopper_pearson(k, n)
    assert iv.low == pytest.approx(low, abs=2e-6)
    assert iv.high == pytest.approx(high, abs=2e-6)


def test_wilson_known_value_and_symmetry():
    iv = stats.wilson(774, 1000)
    assert (round(iv.low, 4), round(iv.high, 4)) == (0.7471, 0.7988)
    for k in (0, 3, 50, 97, 100):
        a, b = stats.wilson(k, 100), stats.wilson(100 - k, 100)
        assert a.low == pytest.approx(1 - b.high) and a.high == pytest.approx(1 - b.low)
    assert stats.wilson(0, 30).low == 0.0 and stats.wilson(30, 30).high == 1.0


@pytest.mark.parametrize("n", [20, 100])
@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.7738, 0.95, 0.99])
def test_clopper_pearson_never_undercovers(n, p):
    assert _coverage(stats.clopper_pearson, n, p) >= 0.95 - 1e-9


def test_wilson_covers_about_95_percent_on_average():
    cases = [(n, p) for n in (20, 50, 200) for p in (0.1, 0.3, 0.5, 0.7738, 0.9)]
    coverages = [_coverage(stats.wilson, n, p) for n, p in cases]
    assert 0.935 <= sum(coverages) / len(coverages) <= 0.965
    assert min(coverages) >= 0.88


def test_newcombe_difference_covers_the_4_to_5_step():
    rng = random.Random(3)
    p4, p5, n = 0.95**4, 0.95**5, 400
    hits = 0
    reps = 1500
    for _ in range(reps):
        s4 = sum(rng.random() < p4 for _ in range(n))
        s5 = sum(rng.random() < p5 for _ in range(n))
        hits += (p4 - p5) in stats.newcombe_difference(s4, n, s5, n)
    assert 0.93 <= hits / reps <= 0.975


def test_beta_quantile_matches_closed_forms():
    for p in (0.025, 0.5, 0.975):
        assert stats._beta_ppf(p, 1, 7) == pytest.approx(1 - (1 - p) ** (1 / 7), abs=1e-10)
        assert stats._beta_ppf(p, 4, 1) == pytest.approx(p ** (1 / 4), abs=1e-10)


def test_intervals_reject_impossible_counts():
    with pytest.raises(ValueError):
        stats.wilson(5, 0)
    with pytest.raises(ValueError):
        stats.clopper_pearson(11, 10)
    with pytest.raises(ValueError):
        stats.wilson(1, 10, confidence=1.5)


def test_bootstrap_mean_interval_has_the_right_width_and_is_seeded():
    rng = random.Random(11)
    values = [rng.gauss(10.0, 2.0) for _ in range(2000)]
    iv = stats.bootstrap(values, "mean", seed=1)
    assert 10.0 in iv
    half = (iv.high - iv.low) / 2
    assert half == pytest.approx(1.96 * 2.0 / math.sqrt(2000), rel=0.2)
    assert stats.bootstrap(values, "mean", seed=1) == iv
    assert stats.bootstrap(values, "mean", seed=2) != iv


def test_bootstrap_quantile_and_difference():
    rng = random.Random(5)
    a = [rng.random() for _ in range(3000)]
    b = [rng.random() for _ in range(3000)]
    assert 0.95 in stats.bootstrap(a, "quantile", q=0.95)
    observed = sorted(a)[1500] - sorted(b)[1500]
    same = stats.bootstrap_difference(a, b, "quantile", q=0.5)
    assert observed in same and same.high - same.low < 0.08
    shifted = [x + 1.0 for x in b]
    diff = stats.bootstrap_difference(shifted, a, "quantile", q=0.5)
    assert 1.0 - observed in diff
    assert diff.high - diff.low == pytest.approx(same.high - same.low, rel=0.3)
    with pytest.raises(ValueError):
        stats.bootstrap(a, "median-ish")


def test_bootstrap_ratio_of_spend_per_success():
    cost = [1.0] * 80 + [1.0] * 20
    ok = [1.0] * 80 + [0.0] * 20
    iv = stats.bootstrap_ratio(cost, ok, seed=0)
    assert 1.25 in iv
    assert iv.low > 1.1 and iv.high < 1.45
    assert stats.bootstrap_ratio([2.0] * 10, [1.0] * 10) == stats.Interval(2.0, 2.0)


def test_required_trials_for_the_target():
    assert stats.required_trials(0.999, 0.999) is None
    # With no failure expected, the exact bound is (2.5%)^(1/N): N >= ln 0.025 / ln 0.999.
    assert stats.required_trials(0.99999, 0.999) == math.ceil(math.log(0.025) / math.log(0.999))
    n = stats.required_trials(0.99938, 0.999)
    assert n is not None and 20_000 < n < 35_000
    for trials, shown in ((n, True), (int(n * 0.9), False)):
        failures = round(trials * (1 - 0.99938))
        assert (stats.clopper_pearson(trials - failures, trials).low >= 0.999) is shown


@pytest.mark.parametrize(
    ("protocol", "expected"),
    [
        (FIRE_AND_FORGET, 0.95**5),
        (TWO_STEP, 1 - (1 - 0.95**5) ** 3),
        (handshake(1), 0.95**5),
        (handshake(3), (1 - 0.05**3) ** 5),
    ],
)
def test_analytic_success(protocol, expected):
    assert analytic.success(protocol, reliability=0.95, agents=5) == pytest.approx(expected)


def test_analytic_counts_follow_the_model():
    ff = analytic.expected(FIRE_AND_FORGET, reliability=0.95, agents=5)
    assert ff.executions == 5 and ff.restarts == ff.retries == 0
    assert ff.wasted_executions == pytest.approx(5 * (1 - 0.95**5))
    ts = analytic.expected(TWO_STEP, reliability=0.95, agents=5)
    q = 1 - 0.95**5
    assert ts.restarts == pytest.approx(q + q * q)
    hs = analytic.expected(handshake(3), reliability=0.95, agents=5)
    assert hs.retries == pytest.approx(
        sum(0.9998750**i for i in range(5)) * (0.05 + 0.0025), rel=1e-4
    )
    perfect = analytic.expected(handshake(3), reliability=1.0, agents=5)
    assert perfect.wasted_executions == pytest.approx(0.0)
    assert perfect.executions == pytest.approx(5.0)


def test_reject_share_is_the_simulators():
    # The analytic execution counts assume the simulator's split of handshake failures.
    from collector.simulator import handoffs

    assert analytic.REJECT_SHARE == handoffs.REJECT_SHARE


def test_budgets_that_reach_the_target():
    from auditor.experiments import analysis

    assert [analysis.attempts_for_target(r) for r in (0.90, 0.95, 0.99)] == [4, 3, 2]
    assert analysis.attempts_for_target(0.5) is None
    assert analysis.fire_and_forget_reliability_for_target() == pytest.approx(0.9998, abs=1e-4)
