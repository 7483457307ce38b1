"""The seeded fault campaign (``fault_campaign``): every promise of exactly-once, checked.

CI runs a short campaign (``HANDOFFSCOPE_CAMPAIGN_KEYS``, 800 keys by default, about a
minute); a longer one is the same test with more keys, or ``python tests/support/fault_campaign.py
--keys 5000``. ``HANDOFFSCOPE_CAMPAIGN_SEED`` picks the fault schedule; the seed is in the
report, so a failing schedule can be run again.
"""

from __future__ import annotations

import os

import pytest

from tests.support.fault_campaign import Report, run_campaign

pytestmark = pytest.mark.slow

KEYS = int(os.environ.get("HANDOFFSCOPE_CAMPAIGN_KEYS", "800"))
SEED = int(os.environ.get("HANDOFFSCOPE_CAMPAIGN_SEED", "1"))


def test_a_seeded_fault_campaign_keeps_every_promise():
    report = run_campaign(keys=KEYS, seed=SEED)
    print(report.summary())
    expected = {"kill", "stop", "clock", "stall"} | ({"full"} if report.disk == "tmpfs" else set())
    assert expected <= set(report.faults), report.faults  # every fault was mixed in
    assert report.run_twice == [], report.summary()
    assert report.lost == [], report.summary()
    assert report.stuck == [], report.summary()
    # Every key the settling pass found in doubt is listed by the store, and nothing else.
    assert sorted(report.in_doubt_listed) == sorted(report.in_doubt_answered)
    assert report.timeouts_missing_from_audit == [], report.summary()
    assert report.timeouts_seen <= report.slow_validation_findings
    assert sum(report.executions.values()) == KEYS and set(report.executions) <= {0, 1}
    assert report.ok


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("run_twice", ["k1"]),
        ("lost", ["k1"]),
        ("stuck", ["k1"]),
        ("in_doubt_unlisted", ["k1"]),
        ("timeouts_missing_from_audit", ["k1#1#planner"]),
        ("in_doubt_listed", ["k1"]),
    ],
)
def test_a_report_with_any_broken_promise_is_not_ok(field, value):
    report = Report(seed=1, keys=1)
    assert report.ok
    setattr(report, field, value)
    assert not report.ok
    assert "seed 1" in report.summary()
