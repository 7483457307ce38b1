"""Auditing traces of other instrumentations: agents, models and prices, handoffs as edges,
usage counted once, and summaries that say when there was nothing to judge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from genai_prices import Usage, calc_price
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from auditor import AuditSettings, audit, load_traces
from auditor.model.attribution import attribute
from auditor.model.conventions import AGENT_KEYS
from auditor.report import render
from auditor.settings import resolve
from collector.otlp_file import OtlpJsonLinesExporter
from tests.support.foreign_spans import BUILDERS, openinference_agents, pydantic_ai_delegation  # noqa: E402
from tests.support.paths import TESTS

UPSTREAM = TESTS / "fixtures" / "otlp"


def _run(tmp_path: Path, name: str, settings: AuditSettings | None = None) -> Any:
    path = tmp_path / f"{name}.jsonl"
    expected = BUILDERS[name](path)
    result = audit(load_traces(str(path)), settings)
    return expected, result


def _words(text: str) -> str:
    """The report's text with the box and line wrapping taken out."""
    return " ".join(text.replace("│", " ").split())


def _price(model: str, tokens: tuple[int, int]) -> float:
    """What genai-prices charges for ``(input, output)`` tokens of ``model``."""
    usage = Usage(input_tokens=tokens[0], output_tokens=tokens[1])
    return float(calc_price(usage, model).total_price)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_each_agent_gets_the_tokens_it_used(tmp_path: Path, name: str) -> None:
    expected, result = _run(tmp_path, name)
    got = {
        a["agent"]: (a["input_tokens"], a["output_tokens"])
        for a in result.figures.agents
        if a.get("input_tokens") is not None
    }
    assert got == expected["agents"]
    # Agents, not the service.name every span carries: those that used tokens, and a
    # receiver only a handoff names (as the agents table and --explain list it).
    named = set(expected["agents"]) | {a for edge in expected["edges"] for a in edge}
    assert result.figures.summary["agents"] == len(named)
    assert {a["agent"] for a in result.figures.agents} == named
    assert result.structure is not None
    assert {a["agent"] for t in result.structure.traces for a in t["agents"]} == named


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_framework_handoff_is_an_edge_and_a_finding(tmp_path: Path, name: str) -> None:
    expected, result = _run(tmp_path, name)
    edges = sorted((e["sender"], e["receiver"]) for e in result.figures.edges)
    assert edges == sorted(expected["edges"])
    assert all(e["handoffs"] == 1 for e in result.figures.edges)
    assert result.figures.summary["handoffs"] == len(expected["edges"])
    found = sorted(
        (f.sender, f.receiver) for f in result.findings if f.rule == "unvalidated-handoff"
    )
    assert found == sorted(expected["edges"])
    for f in result.findings:
        assert f"{f.sender} handed work to {f.receiver}" in f.message
        assert "no validation, no idempotency key, no commit record" in f.message
    assert result.exit_code() == 1


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("openinference-agents", "gpt-4o"),
        ("openllmetry-agents", "gpt-4o"),
        ("langgraph-openinference", "gpt-4o"),
        ("pydantic-ai", "gpt-4o"),
    ],
)
def test_tokens_without_a_cost_are_priced_and_marked_estimated(
    tmp_path: Path, name: str, model: str
) -> None:
    expected, result = _run(tmp_path, name)
    for a in result.figures.agents:
        if a["agent"] not in expected["agents"]:
            continue
        want = _price(model, expected["agents"][a["agent"]])
        assert a["cost_usd"] == pytest.approx(want)
        assert a["estimated_cost_usd"] == pytest.approx(want)
        assert all(m.startswith(model) for m in a["models"])
    s = result.figures.summary
    assert s["estimated_cost_usd"] == pytest.approx(s["cost_usd"])
    text = _words(render(result, "table", width=120))
    assert "est." in text and "estimated from model prices" in text


def test_unknown_models_are_counted_as_unpriced_never_as_zero(tmp_path: Path) -> None:
    _, result = _run(tmp_path, "genai")
    billing = next(a for a in result.figures.agents if a["agent"] == "billing")
    assert billing["cost_usd"] is None
    assert (billing["unpriced_input_tokens"], billing["unpriced_output_tokens"]) == (800, 90)
    s = result.figures.summary
    assert s["input_tokens"] == 1300  # every token counted
    assert s["cost_usd"] == pytest.approx(_price("claude-sonnet-4", (500, 20)))
    assert (s["unpriced_input_tokens"], s["unpriced_output_tokens"]) == (800, 90)
    text = _words(render(result, "table", width=140))
    assert "partial: 800 input and 90 output tokens unpriced" in text
    assert "mystery-model" in text  # the report names the model nothing prices
    assert result.figures.spend["unpriced_models"] == [
        {
            "model": "mystery-model",
            "provider": None,
            "spans": 1,
            "input_tokens": 800,
            "output_tokens": 90,
            "agents": ["billing"],
        }
    ]
    assert "$0.0000" not in text and "unknown" in text


def test_a_prices_file_overrides_the_table(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('[models]\n"mystery-model" = [1.0, 2.0]\n"gpt-4o" = [0, 0]\n')
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.handoffscope]\nprices = "prices.toml"\n')
    settings = resolve({}, env={}, pyproject=pyproject)
    assert settings.prices == str(prices)
    _, result = _run(tmp_path, "genai", settings)
    billing = next(a for a in result.figures.agents if a["agent"] == "billing")
    assert billing["cost_usd"] == pytest.approx((800 * 1.0 + 90 * 2.0) / 1e6)
    assert billing["unpriced_input_tokens"] == 0


def test_a_bad_prices_file_is_a_clear_error(tmp_path: Path) -> None:
    from auditor.model.prices import read_prices
    from collector.errors import ConfigurationError

    bad = tmp_path / "prices.toml"
    bad.write_text('[models]\n"gpt-4o" = [2.5]\n')
    with pytest.raises(ConfigurationError, match=r"prices.toml: \[models\] 'gpt-4o' must be"):
        read_prices(bad)


@pytest.mark.parametrize(
    ("settings", "left"),
    [
        ({"pure_function_receivers": ["writer"]}, [("triage", "researcher")]),
        ({"idempotent_receivers": "researcher"}, [("researcher", "writer")]),
        ({"pass_through_edges": ["triage -> researcher"]}, [("researcher", "writer")]),
        ({"pass_through_edges": ["triage→researcher", "researcher->writer"]}, []),
    ],
)
def test_exemptions_declared_in_settings(
    tmp_path: Path, settings: dict[str, Any], left: list[tuple[str, str]]
) -> None:
    _, result = _run(tmp_path, "openinference-agents", resolve(settings, env={}))
    found = [(f.sender, f.receiver) for f in result.findings if f.rule == "unvalidated-handoff"]
    assert found == left
    # Exempt edges are still edges.
    assert len(result.figures.edges) == 2


def test_a_bad_exemption_names_the_setting(tmp_path: Path) -> None:
    from collector.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="'sender -> receiver'"):
        resolve({"pass_through_edges": ["triage"]}, env={})


def test_a_failed_delegate_lowers_reliability(tmp_path: Path) -> None:
    path = tmp_path / "failing.jsonl"
    pydantic_ai_delegation(path, failing=True)
    result = audit(load_traces(str(path)))
    by = {(e["sender"], e["receiver"]): e for e in result.figures.edges}
    assert by[("planner", "editor")]["handoff_success_rate"] == 0.0
    assert by[("planner", "researcher")]["handoff_success_rate"] == 1.0
    rel = result.figures.reliability
    assert rel["projected"] == pytest.approx(0.0)
    assert rel["observed"] == pytest.approx(0.0)


def _handshake_over_chats(path: Path) -> None:
    """A handshake commit whose executor reported the run's usage (`work.report_usage()`)
    above a pydantic-ai run and its model calls, two levels down."""
    provider = TracerProvider(resource=Resource.create({"service.name": "researcher"}))
    exporter: Any = OtlpJsonLinesExporter(str(path))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ours, theirs = provider.get_tracer("handoffscope"), provider.get_tracer("pydantic-ai")
    common = {
        "handoff.task_id": "t-1",
        "handoff.sender": "planner",
        "handoff.receiver": "researcher",
        "handoff.attempt": 1,
    }
    with ours.start_as_current_span(
        "handoff.commit",
        attributes={
            **common,
            "handoff.phase": "commit",
            "handoff.commit.outcome": "executed",
            "gen_ai.agent.name": "researcher",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.input_tokens": 6600,
            "gen_ai.usage.output_tokens": 1080,
            "handoff.cost_usd": 0.0273,
        },
    ):
        with theirs.start_as_current_span(
            "invoke_agent researcher",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "researcher"},
        ):
            for inp, out in ((2600, 480), (4000, 600)):
                with theirs.start_as_current_span(
                    "chat gpt-4o",
                    attributes={
                        "gen_ai.operation.name": "chat",
                        "gen_ai.request.model": "gpt-4o",
                        "gen_ai.usage.input_tokens": inp,
                        "gen_ai.usage.output_tokens": out,
                    },
                ):
                    pass
        # Work the executor did outside the agent run: only the report above covers it.
    provider.shutdown()


def test_usage_is_counted_once_whatever_the_depth(tmp_path: Path) -> None:
    path = tmp_path / "nested.jsonl"
    _handshake_over_chats(path)
    result = audit(load_traces(str(path)))
    s = result.figures.summary
    assert (s["input_tokens"], s["output_tokens"]) == (6600, 1080)
    assert s["cost_usd"] == pytest.approx(_price("gpt-4o", (6600, 1080)))


def test_a_higher_report_counts_what_nothing_below_reported(tmp_path: Path) -> None:
    # The planner's run total covers its own model call and both delegates' runs; only
    # the model calls count, once each.
    path = tmp_path / "p.jsonl"
    pydantic_ai_delegation(path)
    ts = load_traces(str(path))
    result = audit(ts)
    assert result.figures.summary["input_tokens"] == 700 + 2000 + 1500
    counted = ts.con.sql("SELECT count(*) FROM hs_usage_all").fetchall()[0][0]
    assert counted == 3  # the chat spans; no agent run has anything left over


def test_nothing_to_judge_is_not_a_pass(tmp_path: Path) -> None:
    files = sorted(str(p) for p in UPSTREAM.glob("genai-interlingua__*"))
    result = audit(load_traces(files))
    assert result.figures.summary["handoffs"] == 0
    assert result.exit_code() == 0
    for fmt in ("table", "markdown"):
        text = _words(render(result, fmt, width=120))
        assert "nothing to judge" in text
        assert "PASS" not in text and "All 19 rules pass" not in text


def test_one_of_a_thing_is_singular(tmp_path: Path) -> None:
    _, result = _run(tmp_path, "genai")
    text = render(result, "table", width=120)
    assert "1 file," in text and "1 files" not in text


def test_the_upstream_conventions_name_their_models_and_agents() -> None:
    files = sorted(str(p) for p in UPSTREAM.glob("genai-interlingua__*"))
    ts = load_traces(files)
    result = audit(ts)
    models = {m for a in result.figures.agents for m in (a.get("models") or []) if m}
    assert models, "no model read from the OpenInference/OpenLLMetry/Vercel/LiteLLM files"
    # No span is left to its service.name where an agent key or an ancestor names one.
    assert attribute(ts.con) == 0  # resolving again changes nothing


def test_an_agent_is_inherited_from_the_nearest_named_ancestor(tmp_path: Path) -> None:
    path = tmp_path / "langgraph.jsonl"
    BUILDERS["langgraph-openinference"](path)
    ts = load_traces(str(path))
    rows = dict(
        ts.con.sql(
            "SELECT name || '@' || span_id, agent FROM spans WHERE name = 'LangGraph'"
        ).fetchall()
    )
    assert list(rows.values()) == ["graph-app"]  # nothing above names an agent: service.name
    inner = ts.con.sql(
        "SELECT DISTINCT agent FROM spans WHERE name IN ('agent', 'ChatOpenAI')"
    ).fetchall()
    assert sorted(r[0] for r in inner) == ["researcher", "supervisor", "writer"]


def test_agents_walked_a_share_of_the_traces_at_a_time_are_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large input's ancestors are walked a share of its traces at a time, so that the
    walk stays within the memory limit: every span gets the agent one walk gives it."""
    import auditor.model.attribution as attribution
    from auditor.database import statements

    for name in ("langgraph-openinference", "openinference-agents"):
        BUILDERS[name](tmp_path / f"{name}.jsonl")
    files = [str(p) for p in sorted(tmp_path.glob("*.jsonl"))]
    files += sorted(str(p) for p in UPSTREAM.glob("genai-interlingua__*"))
    query = "SELECT trace_id, span_id, agent FROM spans ORDER BY ALL"
    whole = load_traces(files).con.execute(query).fetchall()
    walks: list[object] = []
    resolved: list[object] = []
    real_grown = statements.grown

    def spy(con, sql, params=None):  # type: ignore[no-untyped-def]
        done = real_grown(con, sql, params)
        if "hs_resolved_agents" in sql and "WITH RECURSIVE" in sql:
            walks.append(params["share"])
            resolved.append(con.execute("SELECT count(*) FROM hs_resolved_agents").fetchall())
        return done

    monkeypatch.setattr(attribution, "grown", spy)
    monkeypatch.setattr(attribution, "WALK_SPANS", 7)
    shared = load_traces(files)
    spans = shared.con.execute("SELECT count(*) FROM spans").fetchall()[0][0]
    assert walks == list(range(-(-spans // 7)))
    assert len(walks) > 3
    # Each span is resolved by one share only (the shares part the traces).
    unnamed = shared.con.execute(
        'SELECT count(*) FROM spans WHERE "gen_ai.agent.name" IS NULL'
        " AND trace_id IS NOT NULL AND span_id IS NOT NULL"
    ).fetchall()
    assert resolved[-1] == unnamed
    assert shared.con.execute(query).fetchall() == whole
    assert len({agent for _, _, agent in whole}) > 5  # names other than the services'


def test_the_cli_takes_a_prices_file_and_refuses_a_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from auditor.cli import main

    path = tmp_path / "genai.jsonl"
    BUILDERS["genai"](path)
    good = tmp_path / "good.toml"
    good.write_text('[models]\n"mystery-model" = [1.0, 2.0]\n')
    assert main(["audit", str(path), "--prices", str(good), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["unpriced_input_tokens"] == 0
    bad = tmp_path / "bad.toml"
    bad.write_text("models = 3\n")
    assert main(["audit", str(path), "--prices", str(bad)]) == 2
    assert "bad.toml: expected a [models] table" in capsys.readouterr().err


def test_a_root_span_in_error_is_a_failed_workflow(tmp_path: Path) -> None:
    ok, failed = tmp_path / "ok.jsonl", tmp_path / "failed.jsonl"
    openinference_agents(ok)
    openinference_agents(failed, root_error=True)
    rel = audit(load_traces([str(ok), str(failed)])).figures.reliability
    assert (rel["workflows"], rel["succeeded_workflows"]) == (2, 1)
    assert rel["observed"] == pytest.approx(0.5)
    assert rel["projected"] == pytest.approx(1.0)  # every handoff itself went through


def test_lines_appended_as_they_arrive_get_their_agents(tmp_path: Path) -> None:
    from auditor.loading.load import TraceSet, append_lines, connect

    path = tmp_path / "oi.jsonl"
    BUILDERS["openinference-agents"](path)
    lines = list(enumerate(path.read_text().splitlines(), start=1))
    ts = TraceSet(con=connect())
    half = len(lines) // 2
    append_lines(ts, lines[:half], file=str(path))
    append_lines(ts, lines[half:], file=str(path), final=True)
    llm_agents = ts.con.sql(
        "SELECT DISTINCT agent FROM spans WHERE name = 'response' ORDER BY 1"
    ).fetchall()
    assert [r[0] for r in llm_agents] == ["researcher", "triage", "writer"]


def _key_case(row: Any) -> dict[str, Any]:
    if row.json_path:
        import json

        return {row.key: json.dumps({row.json_path[0]: "named", row.json_path[1]: "named:1"})}
    attrs: dict[str, Any] = {row.key: "named"}
    if row.guard is not None:
        attrs[row.guard.key] = row.guard.values[0]
    return attrs


@pytest.mark.parametrize(
    "row",
    AGENT_KEYS,
    ids=lambda r: f"{r.convention}:{r.key}",
)
def test_every_agent_key_names_the_agent_of_its_span_and_descendants(
    tmp_path: Path, row: Any
) -> None:
    path = tmp_path / "k.jsonl"
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    exporter: Any = OtlpJsonLinesExporter(str(path))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("some-framework")
    with tracer.start_as_current_span("named", attributes=_key_case(row)):
        with tracer.start_as_current_span("step"):
            with tracer.start_as_current_span(
                "llm", attributes={"llm.model_name": "gpt-4o", "llm.token_count.prompt": 10}
            ):
                pass
    with tracer.start_as_current_span("unrelated"):
        pass
    provider.shutdown()
    agents = dict(load_traces(str(path)).con.sql("SELECT name, agent FROM spans").fetchall())
    assert agents == {"named": "named", "step": "named", "llm": "named", "unrelated": "svc"}
    if row.guard is not None:  # without its guard, the key names nothing
        other = tmp_path / "g.jsonl"
        provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
        exporter = OtlpJsonLinesExporter(str(other))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        provider.get_tracer("x").start_span("named", attributes={row.key: "named"}).end()
        provider.shutdown()
        agents = dict(load_traces(str(other)).con.sql("SELECT name, agent FROM spans").fetchall())
        assert agents == {"named": "svc"}
