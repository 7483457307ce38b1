"""A compacted store grown by ``compact --append``: its audit reads only the new segments and
the traces they touch, and finds exactly what an audit of all the data from scratch finds.

The data is split at random into an old part (compacted) and a new part (appended): spans
of one trace on both sides (a late commit for an old handoff, a parent naming the agent of
spans stored before it), spans sent on both sides (kept once), and whole new traces.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from auditor import audit, load_traces
from auditor.cli import main
from auditor.figures.per_trace import PER_TRACE
from auditor.loading import segments
from auditor.loading.segments import _carries as carries_of
from auditor.loading.segments import carried as carried_path
from auditor.model.price_source import resolve_prices
from auditor.model.prices import PAIRS_SQL
from auditor.report import render
from auditor.report.json_report import findings_text
from auditor.rules import all_rules
from auditor.stores import grown as grown_module
from auditor.stores.grown import ACROSS_TRACES, findings, is_appended, local
from tests.support.paths import REPO

ROOT = REPO
SIMULATED = ROOT / "sample_traces" / "fault-mix"
FRAMEWORKS = ROOT / "tests" / "fixtures" / "frameworks"
UPSTREAM = ROOT / "tests" / "fixtures" / "otlp"


def _requests(folder: Path) -> list[dict[str, Any]]:
    """Every OTLP request (one JSON line or document) of the trace files under ``folder``."""
    out = []
    for path in sorted(folder.rglob("*")):
        if path.name.endswith(".jsonl.gz"):
            text = gzip.decompress(path.read_bytes()).decode()
        elif path.name.endswith((".jsonl", ".json")) and path.name not in (
            "manifest.json",
            "reported.json",
        ):
            text = path.read_text(encoding="utf-8")
        else:
            continue
        try:
            documents = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError:
            documents = [json.loads(text)]  # one pretty-printed document
        out += [d for d in documents if isinstance(d, dict) and "resourceSpans" in d]
    return out


def _split(
    requests: list[dict[str, Any]], seed: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The requests' spans dealt into an old and a new part: whole traces to either side,
    traces cut across the two, and spans sent on both sides."""
    rng = random.Random(seed)
    fate: dict[str, str] = {}
    old: list[dict[str, Any]] = []
    new: list[dict[str, Any]] = []
    for request in requests:
        for side in (old, new):
            side.append({"resourceSpans": []})
        for resource in request["resourceSpans"]:
            halves: list[dict[str, Any]] = [
                {**resource, "scopeSpans": []},
                {**resource, "scopeSpans": []},
            ]
            for scope in resource.get("scopeSpans") or []:
                kept: tuple[list[Any], list[Any]] = ([], [])
                for span in scope.get("spans") or []:
                    trace = span.get("traceId", "")
                    how = fate.setdefault(
                        trace, rng.choices(["old", "new", "cut"], weights=[4, 3, 3])[0]
                    )
                    roll = rng.random()
                    if how == "old" or (how == "cut" and roll < 0.5):
                        kept[0].append(span)
                    elif how == "new" or roll < 0.9:
                        kept[1].append(span)
                    else:
                        kept[0].append(span)
                    if roll > 0.92:  # sent again on the other side too
                        kept[1 if span in kept[0] else 0].append(span)
                for half, spans in zip(halves, kept, strict=True):
                    if spans:
                        half["scopeSpans"].append({**scope, "spans": spans})
            for side, half in zip((old, new), halves, strict=True):
                if half["scopeSpans"]:
                    side[-1]["resourceSpans"].append(half)
    return (
        [r for r in old if r["resourceSpans"]],
        [r for r in new if r["resourceSpans"]],
    )


def _write(path: Path, requests: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in requests), encoding="utf-8")
    return path


def _report(result: Any) -> dict[str, Any]:
    """The JSON report without what says how the data was read (files, load problems and
    the copies dropped while loading, which a store dropped when it was written)."""
    return _compared(json.loads(render(result, "json")))


def _compared(report: dict[str, Any]) -> dict[str, Any]:
    """A JSON report as :func:`_report` gives it."""
    for key in ("files", "problems"):
        report.pop(key)
    for key in ("files", "problems", "duplicate_spans"):
        report["summary"].pop(key)
    report["findings"].sort(key=lambda f: json.dumps(f, sort_keys=True))
    return report


def _loaded(store: Path) -> tuple[Any, list[bool]]:
    """The store loaded, and whether it read the touched traces' stored spans from the copies
    its segments carry (once per load)."""
    read_through: list[bool] = []

    def carries_spy(*args: Any) -> bool:
        read_through.append(carries_of(*args))
        return read_through[-1]

    with patch.object(segments, "_carries", carries_spy):
        return load_traces(store), read_through


def _grown_and_whole(
    tmp_path: Path,
    requests: list[dict[str, Any]],
    seed: int,
    *,
    incremental: bool = True,
    ahead: bool = True,
    appends: int = 1,
    carried: bool = True,
    new_model: tuple[str, str] | None = None,
) -> Any:
    """Compact the old part (with ``ahead``, auditing it, which keeps each rule's findings
    beside it), append the new part (in ``appends`` segments), and audit the store as the
    union is audited; without ``carried``, each segment's copy of the stored spans of the
    traces it touches is removed first (the audit finds them among every stored span).
    With ``new_model`` (a model and its new name), the new part's traces that the old part
    does not hold call the model by that name. Returns the grown store as loaded."""
    old, new = _split(requests, seed)
    assert old and new
    if new_model is not None:
        _rename_model(old, new, *new_model)
    old_file = _write(tmp_path / "in" / "a-old.jsonl", old)
    new_files = [
        _write(tmp_path / "in" / f"b-new-{n}.jsonl", new[n::appends]) for n in range(appends)
    ]
    store = tmp_path / "store"
    compact = ["compact", str(old_file), "--out", str(store), "-q"]
    assert main(compact if ahead else [*compact, "--no-audit"]) == 0
    for new_file in new_files:
        append = ["compact", str(new_file), "--out", str(store), "--append", "--no-audit"]
        assert main(append) == 0
    assert len([p for p in store.glob("*.parquet") if is_appended(p)]) == appends
    assert any(is_appended(p) for p in store.glob("*.parquet"))
    carries = sorted(store.glob(".spans_added_*.carried.parquet"))
    assert [p.name for p in carries] == [
        carried_path(p).name for p in sorted(store.glob("spans_added_*.parquet"))
    ]
    if not carried:
        for path in carries:
            path.unlink()
    grown, read_through = _loaded(store)
    assert read_through == [carried]
    assert grown.con.execute("SELECT count(*) FROM hs_touched_ids").fetchone()[0] > 0
    whole = load_traces([old_file, *new_files])
    assert grown.span_count == whole.span_count
    reused: list[str] = []

    def spy(con: Any, rule: Any, settings: Any, **options: Any) -> Any:
        out = findings(con, rule, settings, **options)
        if out is not None:
            reused.append(rule.id)
        return out

    with patch.object(grown_module, "findings", spy):
        result = audit(grown, store=True)
        assert _report(result) == _report(audit(whole))
    # The kept findings merged as kept: the report text, byte for byte, of the objects.
    for piece in result.by_rule:
        if piece.json_text is not None:
            assert bytes(piece.json_text) == findings_text(piece.findings)
    # Each rule local to a trace ran over the touched traces alone, given findings kept.
    expected = {r.id for r in all_rules() if local(r)} if incremental and ahead else set()
    assert set(reused) == expected
    # The saved rows of the untouched traces were read, the touched traces' derived alone.
    derived = grown.con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE table_name LIKE 'hs_touched_%'"
    ).fetchall()
    touched = {"hs_touched_phases", "hs_touched_traces"} <= {r[0] for r in derived}
    assert touched == incremental
    # And the figures read the rows kept per trace, the touched traces' computed afresh.
    per_trace = {f"hs_touched_per_trace_{n}" for n in PER_TRACE}
    assert (per_trace <= {r[0] for r in derived}) == incremental
    # A repeat audit (from the parts the first one kept) says the same.
    again = load_traces(store)
    assert _report(audit(again, store=True)) == _report(audit(load_traces([old_file, *new_files])))
    return grown


def _rename_model(
    old: list[dict[str, Any]], new: list[dict[str, Any]], model: str, name: str
) -> None:
    """Rename ``model`` to ``name`` in the spans of ``new``'s traces that ``old`` has none of."""
    stored = {s.get("traceId") for r in old for s in _spans(r)}
    for request in new:
        for span in _spans(request):
            if span.get("traceId") in stored:
                continue
            for kv in span.get("attributes") or []:
                if kv["value"].get("stringValue") == model:
                    kv["value"] = {"stringValue": name}


def _spans(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        span
        for resource in request["resourceSpans"]
        for scope in resource.get("scopeSpans") or []
        for span in scope.get("spans") or []
    ]


@pytest.mark.parametrize(
    ("seed", "ahead", "appends", "carried"),
    [(1, True, 1, True), (2, True, 2, True), (3, False, 1, False)],
)
def test_simulated_traces_split_at_random(
    tmp_path: Path, seed: int, ahead: bool, appends: int, carried: bool
) -> None:
    _grown_and_whole(
        tmp_path, _requests(SIMULATED), seed, ahead=ahead, appends=appends, carried=carried
    )


@pytest.mark.parametrize(("seed", "ahead"), [(4, True), (5, False)])
def test_framework_fixtures_split_at_random(tmp_path: Path, seed: int, ahead: bool) -> None:
    _grown_and_whole(tmp_path, _requests(FRAMEWORKS), seed, ahead=ahead)


def test_a_model_new_to_the_store_leaves_the_audit_incremental(tmp_path: Path) -> None:
    # The new spans bring a model the store never priced: the price table grows, but the
    # saved rows of the untouched traces were priced from rows that did not change.
    grown = _grown_and_whole(
        tmp_path, _requests(FRAMEWORKS), 8, new_model=("gpt-4o", "gpt-4o-mini")
    )
    pairs = [(m, p) for m, p in grown.con.execute(PAIRS_SQL).fetchall() if m]
    rows, _ = resolve_prices(pairs)
    assert {"gpt-4o-mini", "gpt-4o"} <= {row.model for row in rows}
    stored = grown.con.execute(
        "SELECT count(*) FROM read_parquet($p) WHERE \"gen_ai.request.model\" = 'gpt-4o-mini'",
        {"p": str(tmp_path / "store" / "spans_0.parquet")},
    ).fetchone()
    assert stored == (0,)


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.id)
def test_a_rule_reused_per_trace_groups_only_within_a_trace(rule: Any) -> None:
    # Findings kept for untouched traces stand only for rules that never compare traces:
    # each grouping of one names the trace (a handoff key starts with its trace id).
    groupings = re.findall(r"(?:PARTITION|GROUP) BY ([^)\n]*)", rule.sql)
    within = all("handoff_key" in g or "trace_id" in g for g in groupings)
    assert local(rule) == (within and rule.scope == "trace"), groupings
    assert (rule.id in ACROSS_TRACES) == (not within and rule.scope == "trace")


def test_spans_without_a_trace_id_derive_afresh(tmp_path: Path) -> None:
    # Upstream files hold spans with no trace id: rows of no trace, so nothing is reused.
    _grown_and_whole(tmp_path, _requests(UPSTREAM), 6, incremental=False)


def test_append_keeps_a_span_sent_again_once_and_adds_nothing_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = _split(_requests(SIMULATED), 7)
    old_file = _write(tmp_path / "a.jsonl", old)
    store = tmp_path / "store"
    assert main(["compact", str(old_file), "--out", str(store), "--no-audit", "-q"]) == 0
    # Everything there already: no segment.
    assert main(["compact", str(old_file), "--out", str(store), "--append", "-q"]) == 0
    assert "nothing appended" in capsys.readouterr().err
    assert [p.name for p in store.glob("*.parquet")] == ["spans_0.parquet"]
    both = _write(tmp_path / "b.jsonl", old + new)
    assert main(["compact", str(both), "--out", str(store), "--append", "--no-audit"]) == 0
    assert main(["compact", str(both), "--out", str(store), "--append", "--no-audit"]) == 0
    assert sorted(p.name for p in store.glob("*.parquet")) == [
        ".spans_added_000001.carried.parquet",  # the stored spans of the traces it touches
        "spans_0.parquet",
        "spans_added_000001.parquet",
    ]
    grown = load_traces(store)
    assert grown.span_count == load_traces([old_file, both]).span_count
    copies = grown.con.execute(
        "SELECT count(*) FROM (SELECT trace_id, span_id FROM spans"
        " GROUP BY ALL HAVING count(*) > 1)"
    ).fetchone()
    assert copies == (0,)
    touched = grown.con.execute("SELECT count(*) FROM hs_touched_spans").fetchall()
    # A stored file changed since the append: its carried copy is not read, the store is.
    stored = store / "spans_0.parquet"
    os.utime(stored, ns=(stored.stat().st_atime_ns, stored.stat().st_mtime_ns + 10**9))
    again, read_through = _loaded(store)
    assert read_through == [False]
    assert again.span_count == grown.span_count
    assert again.con.execute("SELECT count(*) FROM hs_touched_spans").fetchall() == touched


@pytest.mark.parametrize(
    ("target", "extra", "message"),
    [
        ("store.parquet", [], "a single .parquet file cannot grow"),
        ("empty", [], "holds no store files"),
        ("store", ["--force"], "--force would replace it"),
    ],
)
def test_append_refuses_what_it_cannot_grow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, extra: list[str], message: str
) -> None:
    source = _write(tmp_path / "in" / "a.jsonl", _requests(SIMULATED)[:5])
    assert main(["compact", str(source), "--out", str(tmp_path / "store.parquet"), "-q"]) == 0
    assert main(["compact", str(source), "--out", str(tmp_path / "store"), "-q"]) == 0
    (tmp_path / "empty").mkdir()
    args = ["compact", str(source), "--out", str(tmp_path / target), "--append", *extra]
    assert main(args) == 2
    assert message in capsys.readouterr().err
