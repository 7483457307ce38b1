"""Each rule's findings kept beside a store with the JSON report's text of them: a JSON audit
with new settings splices that text into the report instead of making findings into objects,
and the report is the one a fresh render writes, to the byte.

The reference for the text is ``json.dumps(report_dict(result), indent=2, ensure_ascii=False)``,
which never passes through the splice. Damaged and tampered parts are left alone (the rule
runs again), whatever digest they carry.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.audit import AuditResult, Finding, audit
from auditor.cli import main
from auditor.errors import AuditError
from auditor.figures import Figures
from auditor.findings.rule_findings import RuleFindings
from auditor.loading.load import load_traces
from auditor.model import derived
from auditor.report import render
from auditor.report.json_report import findings_text, report_dict, splice
from auditor.rules import Rule, all_rules
from auditor.settings import AuditSettings
from auditor.stores.kept_parts import FIRST, Parts
from auditor.stores.saved import location
from tests.support.paths import REPO

ROOT = REPO
FRAMEWORK = ROOT / "tests" / "fixtures" / "frameworks" / "openai-agents-openinference"
FAULTS = ROOT / "sample_traces" / "fault-mix"
AGENT = "récherche-研究"
"""What the fault-mix traces' ``research`` agent is called here: text beyond ASCII."""

# Floats Python writes with an exponent, ones that need rounding to 12 digits, and text that
# JSON escapes (a newline among them: the splice re-indents at newlines).
VALUES = [1e-05, 1.5e16, 0.1 + 0.2, 2345.678912345678, -7.25e-9, None, 3.0, 1e300]
TEXTS = ["plain", "agent « écrire » → 日本語 🚀", 'a "quoted"\nline\tand \\ more', "\u2028\x7f\x00"]


def _findings(rule: Rule, n: int) -> list[Finding]:
    return [
        Finding(
            rule.id,
            rule.severity,
            f"{TEXTS[i % len(TEXTS)]} #{i}",
            f"{i:032x}",
            None if i % 3 == 0 else f"{i:016x}",
            f"task-{i}",
            None,
            TEXTS[(i + 1) % len(TEXTS)],
            "write",
            VALUES[i % len(VALUES)],
            i % 4 or None,
        )
        for i in range(n)
    ]


def _pieces(rules: tuple[Rule, ...], sizes: list[int]) -> list[list[Finding]]:
    return [_findings(rule, n) for rule, n in zip(rules, sizes, strict=True)]


def _result(rules: tuple[Rule, ...], found: list[list[Finding]] | list[RuleFindings]) -> Any:
    summary = {"handoffs": 3, "ratio": 1e-07, "\x00": "\x00"}
    figures = Figures(summary=summary, agents=[{"agent": AGENT}])
    options: dict[str, Any] = {"rules": rules, "settings": AuditSettings(), "figures": figures}
    if found and isinstance(found[0], RuleFindings):
        return AuditResult(None, by_rule=found, **options)
    return AuditResult([f for piece in found for f in piece], **options)  # type: ignore[union-attr]


def _reference(result: AuditResult) -> str:
    return json.dumps(report_dict(result), indent=2, ensure_ascii=False) + "\n"


def _parts(folder: Path) -> Parts:
    return Parts(folder, {"store": "test"}, AuditSettings())


RULES = all_rules()[:5]
SIZES = [7, 0, 1, 12, 3]  # several rules with findings, one without, in the middle


def _kept(tmp_path: Path) -> tuple[Any, list[RuleFindings]]:
    """A result made of fresh findings, and the same findings kept and read back."""
    found = _pieces(RULES, SIZES)
    for rule, findings in zip(RULES, found, strict=True):
        _parts(tmp_path).keep_findings(rule, findings)
    read = [_parts(tmp_path).findings(rule) for rule in RULES]
    assert all(piece is not None for piece in read)
    return _result(RULES, found), [piece for piece in read if piece is not None]


def test_a_report_spliced_from_kept_text_is_a_fresh_render_to_the_byte(tmp_path: Path) -> None:
    fresh, kept = _kept(tmp_path)
    spliced = _result(RULES, kept)
    text = render(spliced, "json")
    assert text == _reference(fresh) == render(fresh, "json")
    assert "1e-05" in text and "1.5e+16" in text and "日本語 🚀" in text and "0.3," in text
    # Nothing was made into objects for it, nor for the verdict.
    assert not any(piece.loaded for piece in kept)
    assert spliced.exit_code() == fresh.exit_code() == 1
    assert spliced.exit_code("never") == 0
    counts = {rule.id: n for rule, n in zip(RULES, SIZES, strict=True)}
    assert spliced.counts() == fresh.counts() == counts
    assert spliced.severity_counts() == fresh.severity_counts()
    assert (
        spliced.failing_count()
        == len(fresh.failing())
        == json.loads(text)["verdict"]["failing_findings"]
    )
    assert not any(piece.loaded for piece in kept)
    moved = dataclasses.replace(spliced, files=["elsewhere"])  # the pieces come along
    assert moved.by_rule == spliced.by_rule and json.loads(render(moved, "json"))["files"]
    assert not any(piece.loaded for piece in kept)
    # Asked for, the findings are the very objects the rules returned (values unrounded).
    assert spliced.findings == fresh.findings
    assert spliced.findings[0].value == VALUES[0] and spliced.findings[2].value == 0.1 + 0.2
    for fmt in ("table", "markdown", "junit"):
        assert render(spliced, fmt) == render(fresh, fmt)


def test_a_table_shows_a_rules_first_findings_without_reading_the_others(
    tmp_path: Path,
) -> None:
    # More findings than a part keeps apart, and fewer: the reports that show a rule's first
    # few are those of the findings themselves, and only the first are made into objects.
    sizes = [FIRST + 5, FIRST, 3]
    rules = RULES[: len(sizes)]
    found = _pieces(rules, sizes)
    for rule, findings in zip(rules, found, strict=True):
        _parts(tmp_path).keep_findings(rule, findings)
    kept = [_parts(tmp_path).findings(rule) for rule in rules]
    assert all(piece is not None for piece in kept)
    pieces = [piece for piece in kept if piece is not None]
    fresh, spliced = _result(rules, found), _result(rules, pieces)
    for fmt in ("table", "markdown"):
        assert render(spliced, fmt) == render(fresh, fmt)
    assert f"and {FIRST + 5 - 8} more" in render(spliced, "table")
    assert not any(piece.loaded for piece in pieces)
    for rule, findings in zip(rules, found, strict=True):
        for limit in (1, 8, FIRST, FIRST + 1, FIRST + 9):
            assert spliced.first_findings(rule.id, limit) == findings[:limit]
    # More than were kept apart, of a rule with more: all of them are read.
    assert pieces[0].loaded and not pieces[1].loaded and not pieces[2].loaded
    mixed = AuditResult([f for piece in found for f in piece], rules=rules)
    assert mixed.first_findings(rules[1].id, 4) == found[1][:4]


def test_each_rules_text_is_the_report_list_of_its_findings(tmp_path: Path) -> None:
    # Spliced in another order, or re-indented otherwise, the report would differ.
    found = _pieces(RULES, SIZES)
    texts = [findings_text(findings) for findings in found]
    assert all(text is not None for text in texts)
    whole = json.dumps(report_dict(_result(RULES, found)), indent=2, ensure_ascii=False)
    assert splice([t for t in texts if t is not None]).decode() in whole
    assert splice([t for t in reversed(texts) if t is not None]).decode() not in whole
    for findings, text in zip(found, texts, strict=True):
        assert text is not None
        records = report_dict(_result(RULES, [findings]))["findings"]
        assert json.loads(text) == records
        assert text.decode() == json.dumps(records, indent=2, ensure_ascii=False).replace(
            "\n", "\n  "
        )
    assert splice([b"[]", b"[]"]) == b"[]"


@settings(max_examples=150, deadline=None)
@given(
    pieces=st.lists(
        st.lists(
            st.tuples(st.text(), st.one_of(st.none(), st.floats()), st.text(max_size=3)),
            max_size=4,
        ),
        min_size=1,
        max_size=4,
    )
)
def test_any_findings_splice_into_the_report_json_writes(
    pieces: list[list[tuple[str, float | None, str]]],
) -> None:
    rules = all_rules()[: len(pieces)]
    found = [
        [Finding(r.id, r.severity, m, None, None, t, None, "a", "b", v, 1) for m, v, t in piece]
        for r, piece in zip(rules, pieces, strict=True)
    ]
    # Made of the rules' own texts, as kept parts are, wherever orjson can write them.
    texts = [findings_text(findings) for findings in found]
    by_rule = [
        RuleFindings(rule, findings, json_text=text)
        for rule, findings, text in zip(rules, found, texts, strict=True)
    ]
    assert render(_result(rules, by_rule), "json") == _reference(_result(rules, found))


def test_a_store_audit_with_new_settings_splices_its_kept_findings(
    source: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store.parquet"
    assert main(["compact", str(source), "--out", str(store), "--quiet"]) == 0
    # The library's audit: the rules a new timeout does not touch come as kept text.
    timeout = AuditSettings(validation_timeout_s=0.05)
    result = audit(load_traces([str(store)]), timeout, store=True)
    kept = [piece for piece in result.by_rule if not piece.loaded]
    assert {piece.rule.id for piece in kept if piece.rule} == {
        r.id for r in all_rules() if "validation_timeout_ms" not in r.params
    }
    assert sum(piece.count for piece in kept) > 0
    assert not any(piece.loaded for piece in kept)
    assert result.exit_code() == 1 and not any(piece.loaded for piece in kept)
    # The command: its report, byte for byte, is the report of the same audit with nothing kept.
    spliced = _json_audit(store, tmp_path / "spliced.json", "--validation-timeout", "50ms")
    _forget(store)
    fresh = _json_audit(store, tmp_path / "fresh.json", "--validation-timeout", "50ms")
    assert _beside(store).is_dir()  # it ran: its parts were kept again
    assert spliced == fresh
    assert spliced == json.dumps(json.loads(spliced), indent=2, ensure_ascii=False) + "\n"
    report = json.loads(spliced)
    assert sum(1 for rule in report["rules"] if rule["findings"]) >= 5
    assert any(AGENT in json.dumps(f, ensure_ascii=False) for f in report["findings"])
    # And the findings, asked for, are those of an audit with nothing kept.
    assert result.findings == audit(load_traces([str(source)]), timeout).findings


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """The framework's traces and the handshake library's faults, one agent renamed."""
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(FRAMEWORK / "traces.jsonl", folder / "framework.jsonl")
    lines = gzip.decompress((FAULTS / "orchestrator-0.jsonl.gz").read_bytes())
    (folder / "faults.jsonl").write_bytes(lines.replace(b"research", AGENT.encode()))
    return folder


def test_a_table_audit_keeps_findings_without_json_text_and_json_reports_them_all(
    source: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store.parquet"
    assert main(["compact", str(source), "--out", str(store), "--quiet"]) == 0
    table = tmp_path / "table.txt"
    args = ["audit", str(store), "--validation-timeout", "50ms", "--quiet"]
    assert main([*args, "--output", str(table)]) == 1
    # The rules the new timeout ran again kept their findings without the JSON text.
    lines = [part.read_bytes().split(b"\n", 2)[1] for part in _beside(store).glob("*.part")]
    # A rule's part has a head of fields; the figures' part, its CRC-32.
    heads = [head for head in map(json.loads, lines) if isinstance(head, dict)]
    rerun = [h for h in heads if "rule" not in h and h.get("text", 0) is None]
    assert any(h["count"] > 0 for h in rerun)
    assert all(h["text"] is not None for h in heads if h not in rerun and "text" in h)
    # A JSON report with those settings encodes them: the same bytes as with nothing kept.
    spliced = _json_audit(store, tmp_path / "spliced.json", "--validation-timeout", "50ms")
    _forget(store)
    fresh = _json_audit(store, tmp_path / "fresh.json", "--validation-timeout", "50ms")
    assert _beside(store).is_dir()  # it ran: its parts were kept again
    assert spliced == fresh
    # And the table, with nothing kept, is the table of the parts.
    _forget(store)
    assert main([*args, "--output", str(tmp_path / "again.txt")]) == 1
    assert (tmp_path / "again.txt").read_text(encoding="utf-8") == table.read_text(encoding="utf-8")


def _json_audit(store: Path, out: Path, *extra: str) -> str:
    main(["audit", str(store), "--format", "json", "--output", str(out), "--quiet", *extra])
    return out.read_text(encoding="utf-8")


def _beside(store: Path) -> Path:
    folder = location([str(store)])
    assert folder is not None
    return folder / "parts"


def _forget(store: Path) -> None:
    """Remove the parts and the reports audits kept beside ``store`` (not its tables)."""
    for folder in (_beside(store), _beside(store).parent / "reports"):
        shutil.rmtree(folder, ignore_errors=True)
    assert not _beside(store).exists()


# Damage and tampering: the rule runs again rather than a report taking such a part.


def _rewrite(path: Path, text: bytes, **head: Any) -> None:
    """Rewrite a rule's part with another ``text`` and its head made to match, as someone who
    knows the layout would (with ``head``'s fields as given)."""
    key, old_head, body = path.read_bytes().split(b"\n", 2)
    fields = json.loads(old_head)
    body = body[: fields["columns"]] + text + body[len(body) - fields["first"] :]
    fields.update(text=len(text), crc32=zlib.crc32(body), **head)
    path.write_bytes(b"\n".join([key, json.dumps(fields).encode(), body]))


def _tamper(name: str, path: Path) -> None:
    data = path.read_bytes()
    key, head, body = data.split(b"\n", 2)
    if name == "truncated":
        path.write_bytes(data[:-10])
    elif name == "a letter changed":  # in the text, which still reads as JSON
        at = data.rindex(b'"rule": "') + 9
        path.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :])
    elif name == "the older layout":  # the key line, then the columns alone
        path.write_bytes(key + b"\n" + body[: json.loads(head)["columns"]])
    elif name == "text breaking out of the list":
        _rewrite(path, text=b'[\n    1], "verdict": {"passed": true}, "x": [2\n  ]')
    elif name == "fewer values than counted":
        _rewrite(path, text=b"[\n    {}\n  ]")
    elif name == "text that is not UTF-8":
        _rewrite(path, text=b'[\n    "\xff\xfe",\n    1\n  ]')
    elif name == "an empty list spaced as a full one":  # spliced, it would leave a stray comma
        _rewrite(path, text=b"[\n    \n  ]", count=0)
    elif name == "a count that cannot be":
        fields = json.loads(head)
        start = fields["columns"]
        _rewrite(path, text=body[start : start + fields["text"]], count=-1)
    elif name == "a letter changed in the first findings":  # the table's rows, at the end
        at = data.rindex(b"task-")
        path.write_bytes(data[:at] + b"T" + data[at + 1 :])
    else:
        raise AssertionError(name)


DAMAGE = [
    "truncated",
    "a letter changed",
    "the older layout",
    "text breaking out of the list",
    "fewer values than counted",
    "text that is not UTF-8",
    "an empty list spaced as a full one",
    "a count that cannot be",
    "a letter changed in the first findings",
]


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_or_tampered_part_is_not_read(damage: str, tmp_path: Path) -> None:
    rule = RULES[0]
    _parts(tmp_path).keep_findings(rule, _findings(rule, 2))
    (path,) = tmp_path.iterdir()
    assert _parts(tmp_path).findings(rule) is not None
    _tamper(damage, path)
    assert _parts(tmp_path).findings(rule) is None


def test_the_figures_kept_with_a_digit_changed_on_disk_are_not_read(tmp_path: Path) -> None:
    rows = {"summary": [{"spans": 1285, "cost_usd": 0.25}]}
    _parts(tmp_path).keep_figures(rows)
    assert _parts(tmp_path).figures() == rows
    (path,) = tmp_path.iterdir()
    data = path.read_bytes()
    at = data.rindex(b"1285")
    # Still JSON, and another figure: only the digest tells.
    path.write_bytes(data[:at] + b"7" + data[at + 1 :])
    assert _parts(tmp_path).figures() is None
    path.write_bytes(data[: len(data) // 2])
    assert _parts(tmp_path).figures() is None


@pytest.mark.parametrize("damage", ["a letter changed", "text breaking out of the list"])
def test_a_store_audit_runs_a_rule_again_rather_than_take_a_damaged_part(
    damage: str, source: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store.parquet"
    assert main(["compact", str(source), "--out", str(store), "--quiet"]) == 0
    first = _json_audit(store, tmp_path / "1.json", "--fail-on", "never")
    for path in _beside(store).iterdir():
        data = path.read_bytes()
        if b'"figures": true' not in data.split(b"\n", 1)[0] and data.endswith(b"\n  ]"):
            _tamper(damage, path)  # each rule's part with findings
    again = _json_audit(store, tmp_path / "2.json", "--fail-on", "warning")
    assert json.loads(again)["findings"] == json.loads(first)["findings"]
    assert again == json.dumps(json.loads(again), indent=2, ensure_ascii=False) + "\n"


def test_kept_columns_that_do_not_match_their_text_fail_when_read(tmp_path: Path) -> None:
    # Columns and text under a sound digest that disagree (only someone writing parts by
    # hand makes these): the JSON report takes the text; asking for objects says what is wrong.
    rule = RULES[0]
    _parts(tmp_path).keep_findings(rule, _findings(rule, 2))
    (path,) = tmp_path.iterdir()
    key, head, body = path.read_bytes().split(b"\n", 2)
    fields = json.loads(head)
    text = body[fields["columns"] :]
    columns = json.dumps([[1]] * 9, separators=(",", ":")).encode()
    fields.update(columns=len(columns), crc32=zlib.crc32(columns + text))
    path.write_bytes(b"\n".join([key, json.dumps(fields).encode(), columns + text]))
    piece = _parts(tmp_path).findings(rule)
    assert piece is not None and piece.count == 2
    with pytest.raises(AuditError, match=rf"{rule.id} cannot be read"):
        _ = piece.findings


# A rule or two run again create only the helper views they read.


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.id)
def test_a_rule_finds_the_same_with_only_the_views_it_reads(rule: Rule) -> None:
    from auditor.audit import prepare, run_rule
    from auditor.model.macros import views_for

    alone = load_traces([str(FAULTS), str(FRAMEWORK / "traces.jsonl")])
    alone.con.execute(views_for("hs_prices " + rule.sql)).fetchall()
    everything = load_traces([str(FAULTS), str(FRAMEWORK / "traces.jsonl")])
    prepare(everything.con)
    # Derived or read from the spans, as an audit finds them.
    with derived.for_rules(alone.con, [rule]), derived.for_rules(everything.con, [rule]):
        found = run_rule(alone.con, rule)
        assert found == run_rule(everything.con, rule)
    assert found == run_rule(alone.con, rule)
    names = {n for (n,) in alone.con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
    assert "hs_traces_all" not in names or "hs_traces_all" in rule.sql


def test_a_new_setting_over_a_damaged_saved_table_derives_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store.parquet"
    assert main(["compact", str(FAULTS), "--out", str(store), "--quiet"]) == 0
    phases = _beside(store).parent / "phases.parquet"
    data = bytearray(phases.read_bytes())
    # Its footer stays sound (so restoring finds nothing wrong); its pages do not.
    damaged = slice(len(data) // 4, len(data) // 4 + 20_000)
    data[damaged] = bytes((b * 7 + 13) % 256 for b in data[damaged])
    phases.write_bytes(bytes(data))
    asked: list[tuple[str, ...]] = []
    real = derived.derive

    def recorded(con: Any, names: tuple[str, ...] = derived.DERIVED, **options: Any) -> None:
        asked.append(tuple(names))
        real(con, names, **options)

    monkeypatch.setattr(derived, "derive", recorded)
    timeout = AuditSettings(validation_timeout_s=0.05)
    found = audit(load_traces([str(store)]), timeout, store=True)
    assert asked == [(), ("phases",)]  # read where it lies, failed, then derived
    assert sum(not piece.loaded for piece in found.by_rule) == len(all_rules()) - 2
    expected = audit(load_traces([str(FAULTS)]), timeout)
    assert found.findings == expected.findings
    for key in ("findings", "verdict", "rules"):
        assert json.loads(render(found, "json"))[key] == json.loads(render(expected, "json"))[key]


@pytest.mark.parametrize(
    ("value", "attempt", "message"),
    [
        (float("nan"), 1, "é\n"),
        (float("-inf"), 2, "é\n"),
        (0.5, 2**70, "beyond 64 bits"),
        (1e-300, None, "not Unicode: \ud800"),
    ],
)
def test_kept_findings_read_back_as_they_were(
    value: float, attempt: int | None, message: str, tmp_path: Path
) -> None:
    rule = RULES[0]
    (finding,) = _findings(rule, 1)
    finding = dataclasses.replace(finding, value=value, attempt=attempt, message=message)
    _parts(tmp_path).keep_findings(rule, [finding, finding])
    piece = _parts(tmp_path).findings(rule)
    assert piece is not None and not piece.loaded and piece.count == 2
    assert repr(piece.findings[1]) == repr(finding)
    fresh = _result((rule,), [[finding] * 2])
    assert render(_result((rule,), [piece]), "json") == _reference(fresh)


def test_a_rule_returning_other_columns_cannot_run() -> None:
    # Findings are built from a rule's row by position: a row of another shape is refused.
    from auditor.audit import run_rule

    rule = dataclasses.replace(RULES[0], sql="SELECT 1 AS trace_id, 2 AS span_id", params=())
    trace_set = load_traces([str(FAULTS)])
    with pytest.raises(AuditError, match=rf"rule {rule.id} returned 2 columns"):
        run_rule(trace_set.con, rule)
