"""The structural model inside ClickHouse (embedded through chdb): on the same spans, the
audit of the Collector's table gives the file audit's verdict, exit code and ``--explain``
section, NOT JUDGED included. Recorded framework fixtures and a built trace are loaded by
the auditor's reader and written into a table made with the exporter's own DDL."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("chdb")

from auditor import AuditResult, audit, load_traces  # noqa: E402
from auditor.clickhouse.audit import audit_engine  # noqa: E402
from auditor.clickhouse.engine import ChdbEngine  # noqa: E402
from auditor.clickhouse.loader import create_table, fill  # noqa: E402
from auditor.report import render  # noqa: E402
from tests.support.paths import TESTS  # noqa: E402
from tests.support.structure_spans import unrecognised  # noqa: E402

FRAMEWORKS = TESTS / "fixtures" / "frameworks"
SETS: dict[str, tuple[list[str], int]] = {
    # Three agents, each in a trace of its own, whom autogen-core never says who picked:
    # not judged across traces.
    "selector-core": ([str(FRAMEWORKS / "autogen-selector-core" / "traces.jsonl")], 3),
    # In one table: coworkers named only by a manager's tool calls (no token in the trace),
    # a selector's tokens charged to no agent beside three agents' runs, and a trace of two
    # agents that no evidence ties (not judged, besides the findings of the others).
    "mixed": (
        [
            str(FRAMEWORKS / "crewai-hierarchical-openinference-crewai-only" / "traces.jsonl"),
            str(FRAMEWORKS / "autogen-selector-openinference" / "traces.jsonl"),
            "",
        ],
        1,
    ),
}


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Per set: (DuckDB's audit, ClickHouse's audit)."""
    engine = ChdbEngine(str(tmp_path_factory.mktemp("chdb")))
    out: dict[str, tuple[AuditResult, AuditResult]] = {}
    try:
        for name, (paths, _) in SETS.items():
            if "" in paths:
                built = tmp_path_factory.mktemp("built") / "two-agents.jsonl"
                unrecognised(built)
                paths = [p or str(built) for p in paths]
            traces = load_traces(paths)
            table = create_table(engine, "otel", name.replace("-", "_"))
            fill(engine, table, traces)
            out[name] = (audit(traces), audit_engine(engine, table))
        yield out
    finally:
        engine.close()


@pytest.mark.parametrize("name", list(SETS))
def test_the_verdict_and_exit_code_are_the_files(audited: Any, name: str) -> None:
    duck, ch = audited[name]
    assert ch.exit_code() == duck.exit_code() == SETS[name][1]
    assert ch.not_judged() == duck.not_judged()
    assert "delegation not recognised" in (ch.not_judged() or "")


@pytest.mark.parametrize("name", list(SETS))
def test_explain_lists_the_same_agents_edges_and_uncharged_spans(audited: Any, name: str) -> None:
    duck, ch = audited[name]
    assert duck.structure is not None and ch.structure is not None
    assert ch.structure.to_dict() == duck.structure.to_dict()
    duck.explained = ch.explained = True
    for fmt in ("table", "markdown"):
        # The reports differ only in their input line (files read against a table).
        want = [ln for ln in render(duck, fmt, width=160).splitlines() if "Input" not in ln]
        got = [ln for ln in render(ch, fmt, width=160).splitlines() if "Input" not in ln]
        assert got == want, fmt
    assert "charged to no agent" in "\n".join(want) or name == "selector-core"


def test_tokens_of_no_agent_are_said_on_both_engines(audited: Any) -> None:
    duck, ch = audited["mixed"]
    keys = ("uncharged_input_tokens", "uncharged_output_tokens")
    assert [ch.figures.summary[k] for k in keys] == [duck.figures.summary[k] for k in keys]
    # The selector's three calls, and the built trace's one model call under no agent.
    assert [duck.figures.summary[k] for k in keys] == [1580 + 50, 6 + 5]
    agents = {a["agent"] for a in ch.figures.agents}
    assert agents == {a["agent"] for a in duck.figures.agents}
    assert "autogen-selector-openinference-fixture" not in agents
