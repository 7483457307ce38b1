"""The rules: every pass/fail case, the registry, the docs and the schema contract."""

from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from auditor import AuditError, AuditSettings, all_rules, audit, get_rule, load_traces, select_rules
from collector import schema
from tests.support.paths import REPO, TESTS

ROOT = REPO
CASES = TESTS / "cases"
CASE_FILES = sorted(CASES.glob("*/*.json"))

RULE_IDS = [
    "abandoned-accept",
    "accept-without-eta",
    "commit-without-accept",
    "deadline-missed",
    "duplicate-execution",
    "external-effect-without-approval",
    "fire-and-forget",
    "full-chain-restart",
    "illegal-transition",
    "late-validation-used",
    "missing-cost-attribution",
    "missing-handoff-metadata",
    "missing-idempotency-key",
    "reject-without-reason",
    "retry-cap-exceeded",
    "silent-propagation",
    "slow-validation",
    "unvalidated-handoff",
    "validation-p95-over-budget",
]
"""The output contract: these ids, no more, no fewer."""


@pytest.fixture(scope="module")
def case_findings() -> dict[str, collections.Counter[str]]:
    """Findings per case file, from one audit of every case together.

    Each case has its own trace ids and agent names (see tests/cases/build.py), so a
    finding belongs to the case holding its trace, or, for per-receiver findings, its
    receiver.
    """
    ts = load_traces([str(p) for p in CASE_FILES])
    assert ts.problems == []
    result = audit(ts)
    by_trace = dict(ts.con.execute("SELECT DISTINCT trace_id, source_file FROM spans").fetchall())
    by_receiver = dict(
        ts.con.execute(
            'SELECT DISTINCT "handoff.receiver", source_file FROM spans'
            ' WHERE "handoff.receiver" IS NOT NULL'
        ).fetchall()
    )
    found: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for f in result.findings:
        source = by_trace[f.trace_id] if f.trace_id else by_receiver[f.receiver]
        found[source][f.rule] += 1
    return found


@pytest.mark.parametrize("path", CASE_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_case(path: Path, case_findings: dict[str, collections.Counter[str]]) -> None:
    expected = json.loads(path.read_text())["expect"]
    assert dict(case_findings[str(path)]) == expected


def test_case_files_are_what_the_builder_writes() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("case_builder", CASES / "build.py")
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = builder  # dataclasses look their module up there
    try:
        spec.loader.exec_module(builder)
    finally:
        del sys.modules[spec.name]
    built = builder.build()
    assert sorted(built) == CASE_FILES
    for path, text in built.items():
        assert path.read_text() == text, f"{path} differs: run python tests/cases/build.py"


def test_every_rule_has_a_failing_and_a_passing_case() -> None:
    kinds = collections.defaultdict(set)
    for path in CASE_FILES:
        kinds[path.parent.name].add(path.stem.split("-")[0])
    assert {rule: sorted(k) for rule, k in kinds.items()} == {
        rule: ["fail", "pass"] for rule in RULE_IDS
    }
    for path in CASE_FILES:
        expect = json.loads(path.read_text())["expect"]
        if path.stem.startswith("fail"):
            assert expect.get(path.parent.name, 0) >= 1, path
        else:
            assert path.parent.name not in expect, path


def test_rule_ids_are_the_contract_and_files_are_named_after_them() -> None:
    rules = all_rules()
    assert [r.id for r in rules] == RULE_IDS
    folder = ROOT / "auditor" / "rules"
    assert sorted(p.stem for p in folder.glob("*.sql")) == RULE_IDS


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_rule_header_is_complete(rule_id: str) -> None:
    rule = get_rule(rule_id)
    assert rule.severity in ("error", "warning")
    assert rule.summary.endswith(".") and len(rule.summary) < 100
    assert len(rule.why) > 60
    declared = set(rule.params)
    assert declared == set(re.findall(r"\$([a-z_][a-z0-9_]*)", rule.sql))


def test_a_rule_is_about_one_trace_unless_its_header_says_set() -> None:
    """``scope: set`` marks the rules whose findings name no trace: a subset of the traces
    needs them run again (the dashboard does, for a filter), the others are only selected."""
    from auditor.rules import parse_rule

    scoped = {r.id: r.scope for r in all_rules()}
    assert {rule for rule, scope in scoped.items() if scope == "set"} == {
        "validation-p95-over-budget"
    }
    for rule in all_rules():
        names_a_trace = "NULL::VARCHAR AS trace_id" not in rule.sql
        assert names_a_trace == (rule.scope == "trace"), rule.id
    text = get_rule("slow-validation").sql.replace("-- params:", "-- scope: everything\n-- params:")
    with pytest.raises(AuditError, match=r"x\.sql: scope 'everything' is not one of trace, set"):
        parse_rule(text, source="x.sql")


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_rule_is_documented_with_examples(rule_id: str) -> None:
    docs = (ROOT / "docs" / "rules.md").read_text()
    section = docs.split(f"\n## {rule_id}\n", 1)
    assert len(section) == 2, f"docs/rules.md has no '## {rule_id}' section"
    body = section[1].split("\n## ", 1)[0]
    assert "**Fails**" in body and "**Passes**" in body
    assert "**Looks at**" in body and "**Fires**" in body
    rule = get_rule(rule_id)
    assert f"| `{rule_id}` | {rule.severity} |" in docs


def _schema_names() -> set[str]:
    names: set[str] = set()
    for value in vars(schema).values():
        if isinstance(value, str):
            names.add(value)
        elif isinstance(value, tuple):
            names.update(v for v in value if isinstance(v, str))
    return names


def _sql_texts() -> dict[str, str]:
    texts = {f"rules/{r.id}.sql": r.sql for r in all_rules()}
    texts["views.sql"] = (ROOT / "auditor" / "model" / "views.sql").read_text()
    return texts


def test_every_handoff_name_in_the_sql_is_a_schema_constant() -> None:
    known = _schema_names()
    used: dict[str, set[str]] = {}
    for name, text in _sql_texts().items():
        code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
        found = set(re.findall(r"[\"']((?:handoff|gen_ai)\.[a-z0-9_.]+)[\"']", code))
        used[name] = found
        unknown = sorted(found - known)
        assert unknown == [], f"{name} uses names missing from collector/schema.py: {unknown}"
    assert sum(len(v) for v in used.values()) > 50  # the check really looked at the SQL


def test_every_span_name_and_enum_value_literal_is_a_schema_constant() -> None:
    known = _schema_names() | {"start", "", "other"}
    for name, text in _sql_texts().items():
        code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
        for literal in re.findall(r"'([a-z_.\-]*)'", code):
            if literal.startswith(("handoff", "gen_ai")) or literal in ("invoke_workflow",):
                assert literal in known, (name, literal)


def test_unknown_rule_ids_get_suggestions() -> None:
    with pytest.raises(AuditError, match="did you mean slow-validation"):
        select_rules(["slow-validaton"])
    with pytest.raises(AuditError, match="unknown rule 'nope'"):
        select_rules(skip=["nope"])
    assert [r.id for r in select_rules(["deadline-missed", "fire-and-forget"])] == [
        "deadline-missed",
        "fire-and-forget",
    ]
    assert len(select_rules(skip=["deadline-missed"])) == len(RULE_IDS) - 1
    # Skipping every rule chosen would pass any traces: an error, not an empty audit.
    with pytest.raises(AuditError, match="would check nothing"):
        select_rules(["deadline-missed"], skip=["deadline-missed"])
    with pytest.raises(AuditError, match="would check nothing"):
        select_rules(skip=RULE_IDS)


def test_thresholds_are_bound_parameters(case_findings: Any) -> None:
    path = CASES / "slow-validation" / "pass.json"
    ts = load_traces(path)
    assert [f.rule for f in audit(ts).findings] == ["validation-p95-over-budget"]
    strict = AuditSettings(validation_timeout_s=1.5, p95_budget_s=3.0)
    found = audit(ts, strict).findings
    assert [(f.rule, f.value) for f in found] == [("slow-validation", 2000.0)]
    assert "the timeout is 1500 ms" in found[0].message


def test_a_hostile_attribute_value_cannot_change_a_query(tmp_path: Path) -> None:
    hostile = "t'); DROP TABLE spans; --\" [bold red]x[/] | <script>"
    doc = json.loads((CASES / "reject-without-reason" / "fail.json").read_text())
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for kv in span["attributes"]:
                    if kv["key"] == "handoff.task_id":
                        kv["value"] = {"stringValue": hostile}
    (tmp_path / "hostile.json").write_text(json.dumps(doc))
    ts = load_traces(tmp_path / "hostile.json")
    result = audit(ts)
    assert [f.task_id for f in result.findings] == [hostile]
    assert hostile in result.findings[0].message
    assert ts.span_count == ts.con.execute("SELECT count(*) FROM spans").fetchall()[0][0] > 0
