"""Derived tables saved beside a compacted store: read back only when they still belong to it.

`handoffscope compact` writes them; the dashboard reads them instead of deriving. Each test
compacts the fault-mix samples with the real CLI, so the tables come from the same code path
a user runs.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from auditor import figures, load_traces
from auditor.audit import prepare
from auditor.cli import main
from auditor.figures.per_trace import PER_TRACE
from auditor.model.derived import derive, derived_names
from auditor.stores.saved import KEPT, SAVED, location, restore, save
from tests.support.paths import REPO

ROOT = REPO
SAMPLES = ROOT / "sample_traces" / "fault-mix"


def _compact(tmp_path: Path, out: str = "store.parquet", *extra: str) -> Path:
    assert main(["compact", str(SAMPLES), "--out", str(tmp_path / out), *extra]) == 0
    return tmp_path / out


def _beside(store: Path) -> Path:
    folder = location([str(store)])
    assert folder is not None
    return folder


def _rows(con: Any, name: str) -> list[tuple[Any, ...]]:
    rows = con.execute(f"SELECT * FROM hs_{name}_all").fetchall()
    return sorted(
        (tuple(round(v, 9) if isinstance(v, float) else v for v in r) for r in rows), key=repr
    )


def _figures(con: Any) -> dict[str, Any]:
    def rounded(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return [tuple(round(v, 9) if isinstance(v, float) else v for v in r) for r in rows]

    return {
        "summary": rounded(figures.summary(con).fetchall()),
        "workflows": sorted(rounded(figures.workflow_spend(con).fetchall()), key=repr),
        "reliability": rounded(figures.agent_reliability(con).fetchall()),
        "end_to_end": rounded(figures.end_to_end(con).fetchall()),
    }


def _asked(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[tuple[str, ...]]:
    """Record which tables ``module.derive`` is asked to derive (and still derive them)."""
    from auditor.model.derived import DERIVED

    asked: list[tuple[str, ...]] = []
    real = module.derive

    def recorded(con: Any, names: tuple[str, ...] = DERIVED, **options: Any) -> None:
        asked.append(tuple(names))
        real(con, names, **options)

    monkeypatch.setattr(module, "derive", recorded)
    return asked


def _opened(store: Path) -> Any:
    trace_set = load_traces(store)
    prepare(trace_set.con)
    return trace_set


def test_compact_saves_the_tables_and_a_store_reads_them_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _compact(tmp_path)
    beside = location([str(store)])
    assert beside == tmp_path / ".store.parquet.derived"
    assert f"saved the derived tables in {beside}" in capsys.readouterr().err
    saved = {"manifest.json", "reports", "parts"} | {f"{n}.parquet" for n in KEPT}
    saved |= {f"per_trace_{n}.parquet" for n in PER_TRACE}  # the figures' rows per trace
    # reports and parts: see test_saved_reports.py
    assert {p.name for p in beside.iterdir()} == saved

    derived = _opened(store)
    derive(derived.con, KEPT)
    restored = _opened(store)
    assert restore(restored.con, restored.files, KEPT) == KEPT
    assert derived_names(restored.con) == KEPT
    for name in KEPT:
        assert _rows(restored.con, name) == _rows(derived.con, name), name
    assert _figures(restored.con) == _figures(derived.con)


def test_a_directory_walk_reads_the_store_not_its_saved_tables(tmp_path: Path) -> None:
    store = _compact(tmp_path)
    trace_set = load_traces(tmp_path)
    assert trace_set.files == [str(store)]
    assert not trace_set.problems


def test_a_store_written_again_or_another_version_derives_afresh(tmp_path: Path) -> None:
    store = _compact(tmp_path)
    stat = store.stat()
    os.utime(store, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    trace_set = _opened(store)
    assert restore(trace_set.con, trace_set.files) == ()
    assert derived_names(trace_set.con) == ()

    store = _compact(tmp_path, "store.parquet", "--force")
    manifest = _beside(store) / "manifest.json"
    assert restore(_opened(store).con, [str(store)]) == SAVED
    saved = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**saved, "version": "older"}))
    assert restore(_opened(store).con, [str(store)]) == ()
    manifest.write_text("not json")
    assert restore(_opened(store).con, [str(store)]) == ()


def test_a_damaged_saved_table_costs_nothing_but_time(tmp_path: Path) -> None:
    from auditor import audit

    store = _compact(tmp_path)
    expected = audit(load_traces(store))
    (_beside(store) / "traces.parquet").write_bytes(b"PAR1 not really parquet")
    trace_set = _opened(store)
    assert restore(trace_set.con, trace_set.files) == ()
    assert derived_names(trace_set.con) == ()
    found = audit(load_traces(store))
    assert [f.to_dict() for f in found.findings] == [f.to_dict() for f in expected.findings]


def test_a_folder_store_keeps_its_tables_among_its_files(tmp_path: Path) -> None:
    folder = _compact(tmp_path, "store")
    (written,) = sorted(folder.glob("*.parquet"))  # the samples make one file of the folder
    assert (folder / f".{written.name}.derived" / "manifest.json").is_file()
    trace_set = _opened(folder)
    assert restore(trace_set.con, trace_set.files) == SAVED
    several = [str(folder / "spans_0.parquet"), str(folder / "spans_1.parquet")]
    assert location(several) == folder / ".parquet.derived"
    assert location([str(folder / "a.parquet"), str(tmp_path / "b.parquet")]) is None


def test_saving_leaves_the_connection_without_derived_tables(tmp_path: Path) -> None:
    trace_set = load_traces(SAMPLES)
    prepare(trace_set.con)
    before = _figures(trace_set.con)
    (tmp_path / "x.parquet").write_bytes(b"")  # save() needs only the file's name and stat
    save(trace_set.con, [str(tmp_path / "x.parquet")])
    assert derived_names(trace_set.con) == ()
    assert _figures(trace_set.con) == before


def test_the_dashboard_reads_a_compacted_stores_tables_instead_of_deriving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dashboard import data
    from dashboard.data import scope

    store = _compact(tmp_path)
    asked = _asked(monkeypatch, scope)
    trace_set = load_traces(store)
    scope.ready(trace_set)
    assert asked == [()]
    assert derived_names(trace_set.con) == scope.READY_DERIVED
    plain = load_traces(SAMPLES)
    assert data.overview(trace_set.con).end_to_end == data.overview(plain.con).end_to_end
    assert (
        data.overview(trace_set.con).summary["handoffs"]
        == data.overview(plain.con).summary["handoffs"]
    )


def test_an_audit_of_a_store_reads_its_saved_tables_and_finds_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from auditor import audit
    from auditor.model import derived

    store = _compact(tmp_path)
    asked = _asked(monkeypatch, derived)
    with_saved = audit(load_traces(store))
    assert asked == [()]  # the store keeps the rules' phase spans and transitions too

    shutil.rmtree(_beside(store))
    asked.clear()
    derived_here = audit(load_traces(store))
    assert asked == [derived.DERIVED]
    assert [f.to_dict() for f in with_saved.findings] == [
        f.to_dict() for f in derived_here.findings
    ]
    assert _tree(with_saved.figures.to_dict()) == _tree(derived_here.figures.to_dict())


def _tree(value: Any) -> Any:
    """Figures with floats to 9 significant digits: sums depend on the order of their terms."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {k: _tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_tree(v) for v in value]
    return value


def test_an_audit_reads_the_saved_tables_where_they_lie(tmp_path: Path) -> None:
    from auditor import audit

    folder = tmp_path / "it's here"  # a quote in the path: written into each view's SQL
    folder.mkdir()
    store = _compact(folder)
    trace_set = load_traces(store)
    found = audit(trace_set)
    # Nothing was read in: the rules and figures read the Parquet files beside the store.
    assert derived_names(trace_set.con) == ()
    (view,) = trace_set.con.execute(
        "SELECT sql FROM duckdb_views() WHERE view_name = 'hs_phases_all'"
    ).fetchall()[0]
    assert "read_parquet" in view and "phases.parquet" in view
    shutil.rmtree(_beside(store))
    expected = audit(load_traces(store))  # derived from the store's spans
    assert [f.to_dict() for f in found.findings] == [f.to_dict() for f in expected.findings]
    assert _tree(found.figures.to_dict()) == _tree(expected.figures.to_dict())


def test_a_saved_table_damaged_inside_is_derived_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from auditor import audit
    from auditor.model import derived
    from auditor.settings import AuditSettings

    store = _compact(tmp_path)
    settings = AuditSettings(validation_timeout_s=1.7)
    phases = _beside(store) / "phases.parquet"
    data = bytearray(phases.read_bytes())
    # Its footer stays sound (so restoring finds nothing wrong); its pages do not.
    damaged = slice(len(data) // 4, len(data) // 4 + 20_000)
    data[damaged] = bytes((b * 7 + 13) % 256 for b in data[damaged])
    phases.write_bytes(bytes(data))
    asked = _asked(monkeypatch, derived)
    found = audit(load_traces(store), settings)
    assert asked == [(), derived.DERIVED]  # read where they lie, failed, then derived
    shutil.rmtree(_beside(store))
    expected = audit(load_traces(store), settings)
    assert [f.to_dict() for f in found.findings] == [f.to_dict() for f in expected.findings]
    assert _tree(found.figures.to_dict()) == _tree(expected.figures.to_dict())


def test_other_prices_for_a_model_the_store_holds_derive_afresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tokens without a cost of their own, priced by genai-prices when compacted: a contract
    # price for their model makes the saved rows another audit's, one for a model the store
    # never calls leaves them as they were.
    from auditor import audit
    from auditor.model import derived
    from auditor.settings import AuditSettings

    traces = ROOT / "tests" / "fixtures" / "frameworks" / "openai-agents-openinference"
    traces /= "traces.jsonl"
    store = tmp_path / "store.parquet"
    assert main(["compact", str(traces), "--out", str(store), "--no-audit", "-q"]) == 0
    asked = _asked(monkeypatch, derived)
    for model, derives in (("gpt-4o", True), ("claude-opus-4", False)):
        prices = tmp_path / f"{model}.toml"
        prices.write_text(f'[models]\n"{model}" = [7.0, 21.0]\n', encoding="utf-8")
        settings = AuditSettings(prices=str(prices))
        asked.clear()
        found = audit(load_traces(store), settings)
        assert asked == ([derived.DERIVED] if derives else [()])
        expected = audit(load_traces(traces), settings)
        assert _tree(found.figures.to_dict()) == _tree(expected.figures.to_dict())
