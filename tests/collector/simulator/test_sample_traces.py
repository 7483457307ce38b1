"""The committed ``sample_traces/``: reproducible, audited exactly as their manifests say."""

from __future__ import annotations

from collections import Counter

import pytest

from collector import schema
from collector.simulator import analytic_success, load_manifest, wilson_interval
from collector.simulator.faults import faults_for_mode
from collector.simulator.samples import COMMAND, SCENARIOS, differences, regenerate
from tests.support.paths import REPO
from tests.support.simulator import finding_key, findings, manifest_keys, trace_files

ROOT = REPO / "sample_traces"
NAMES = [s.name for s in SCENARIOS]
# Recorded from real processes (scripts/record_a2a_sample.py), not simulated: not regenerated.
RECORDED = ["a2a"]


@pytest.fixture(scope="module")
def audited():
    """Each sample folder audited once by the real rules: its findings and its connection."""
    return {name: findings([ROOT / name]) for name in NAMES}


def test_every_scenario_is_committed():
    assert sorted(p.name for p in ROOT.iterdir() if p.is_dir()) == sorted(NAMES + RECORDED)
    for name in NAMES + RECORDED:
        assert (ROOT / name / "manifest.json").is_file()
        assert (ROOT / name / "README.md").is_file()
        assert trace_files(ROOT / name)


@pytest.mark.slow
def test_samples_are_byte_identical_to_a_fresh_regeneration(tmp_path):
    regenerate(tmp_path, jobs=2)
    changed = [p for p in differences(ROOT, tmp_path) if p.split("/")[0] not in RECORDED]
    assert changed == [], f"run `{COMMAND}` and commit the result"


@pytest.mark.parametrize("name", NAMES)
def test_each_sample_is_audited_exactly_as_its_manifest_says(audited, name):
    found, _ = audited[name]
    got = sorted(finding_key(f.rule, f.trace_id, f.task_id, f.receiver) for f in found)
    assert got == manifest_keys(ROOT / name)


def test_fault_mix_holds_every_fault_and_trips_every_rule(audited):
    from auditor.rules import all_rules

    doc = load_manifest(ROOT / "fault-mix")
    assert {e["fault"] for e in doc["faults"]} >= {f.name for f in faults_for_mode("handshake")}
    # The samples are the library's own spans; other frameworks' handoffs, which only
    # unvalidated-handoff judges, are in tests/fixtures/frameworks
    # (tests/auditor/test_framework_audit.py).
    library_rules = {r.id for r in all_rules()} - {"unvalidated-handoff"}
    assert set(doc["expected_findings"]) == library_rules
    found, _ = audited["fault-mix"]
    assert {f.rule for f in found} == library_rules


def test_clean_samples_have_no_finding(audited):
    for name in ("handshake", "clean"):
        assert load_manifest(ROOT / name)["faults"] == []
        assert audited[name][0] == []


@pytest.mark.parametrize(
    ("name", "mode"), [("fire-and-forget", "fire-and-forget"), ("handshake", "handshake")]
)
def test_observed_success_is_within_a_binomial_interval_of_the_analytic_value(audited, name, mode):
    """Counted from the workflow root spans themselves, not from the manifest."""
    _, con = audited[name]
    rows = con.execute(
        f'SELECT "{schema.WORKFLOW_OUTCOME}", count(*) FROM spans '
        f'WHERE "{schema.GEN_AI_OPERATION_NAME}" = ? GROUP BY ALL',
        [schema.OPERATION_INVOKE_WORKFLOW],
    ).fetchall()
    outcomes = Counter(dict(rows))
    runs = sum(outcomes.values())
    assert runs == 1000
    lo, hi = wilson_interval(outcomes[schema.WORKFLOW_SUCCESS], runs)
    expected = analytic_success(mode=mode, reliability=0.95, agents=5, max_attempts=3)
    assert lo <= expected <= hi
    figures = load_manifest(ROOT / name)["figures"]
    assert figures["succeeded"] == outcomes[schema.WORKFLOW_SUCCESS]


def test_fire_and_forget_collapses_where_the_handshake_holds(audited):
    ff = load_manifest(ROOT / "fire-and-forget")["figures"]
    hs = load_manifest(ROOT / "handshake")["figures"]
    assert hs["success_rate"] - ff["success_rate"] > 0.15
    assert ff["attempts"] == ff["handoffs"]  # no retries without a handshake
    assert hs["attempts"] > hs["handoffs"]


@pytest.mark.parametrize("name", NAMES)
def test_spans_are_split_across_services_and_files_with_resent_duplicates(audited, name):
    doc = load_manifest(ROOT / name)
    files = doc["files"]
    per_service = Counter(f["service"] for f in files)
    assert len(per_service) >= 4 and min(per_service.values()) >= 2
    assert sum(f["duplicate_spans"] for f in files) > 0
    _, con = audited[name]
    services = {r[0] for r in con.execute("SELECT DISTINCT service_name FROM spans").fetchall()}
    assert services == set(per_service)
    assert con.execute("SELECT count(*) FROM spans").fetchone()[0] == doc["figures"]["spans"]


def test_samples_stay_small():
    total = sum(p.stat().st_size for p in ROOT.rglob("*") if p.is_file())
    assert total < 8_000_000


def test_readmes_show_the_command_that_made_each_sample():
    index = (ROOT / "README.md").read_text(encoding="utf-8")
    assert COMMAND in index and "handoffscope audit sample_traces/" in index
    for s in SCENARIOS:
        assert f"]({s.name}/README.md)" in index
        text = (ROOT / s.name / "README.md").read_text(encoding="utf-8")
        assert f"handoffscope simulate --out sample_traces/{s.name} {s.options}" in text
        assert load_manifest(ROOT / s.name)["parameters"] == s.config.to_dict()


def test_samples_name_nothing_of_the_machine_that_made_them():
    """No stack trace, no checkout path: the same command makes the same bytes anywhere."""
    import gzip

    checkout = str(ROOT.parent)
    for path in ROOT.rglob("*.jsonl.gz"):
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
        assert "exception.stacktrace" not in text, path
        assert checkout not in text, path
