"""``handoffscope watch`` in process: --once and its exit codes, sinks, torn lines, rotation,
usage errors, help. Spans come from the handshake library through the OTLP JSON file exporter.
"""

from __future__ import annotations

import io
import json
import textwrap
import time
from pathlib import Path

import pytest

from auditor.cli import main
from auditor.watch import JsonlSink, StreamSink, Watcher, WatchSettings
from auditor.watch.watcher import RunSummary
from collector.errors import ConfigurationError
from tests.support.paths import REPO, TESTS
from tests.support.watch import commit_span, otlp_line, validate_span, webhook, write_handoffs

STATE = ".handoffscope-watch.json"


def watcher(directory: Path, **kwargs) -> tuple[Watcher, io.StringIO]:
    out = io.StringIO()
    w = Watcher(
        directory,
        settings=WatchSettings(),
        sinks=[StreamSink(out)],
        state_path=directory / STATE,
        **kwargs,
    )
    return w, out


def alerts(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


# ----------------------------------------------------------------------------------------
# Following files
# ----------------------------------------------------------------------------------------
def test_a_torn_line_alerts_once_it_is_complete_and_is_never_an_error(tmp_path: Path):
    line = otlp_line([validate_span(trace=7, latency_s=2.5)])
    target = tmp_path / "exporter.jsonl"
    notes: list[str] = []
    w, out = watcher(tmp_path, log=notes.append)
    summary = RunSummary()
    with target.open("a") as f:
        f.write(line[:100])
        f.flush()
        w.poll(summary)
        w.poll(summary)
        assert alerts(out) == [] and notes == [] and summary.lines == 0
        f.write(line[100:])
    w.poll(summary)
    w.close()
    (alert,) = alerts(out)
    assert "task-7" in alert and "[exporter.jsonl:1]" in alert
    assert notes == [] and summary.problems == 0


def test_rotation_keeps_every_line_once(tmp_path: Path):
    log = tmp_path / "out" / "alerts.jsonl"
    current = tmp_path / "traces.jsonl"
    out = io.StringIO()
    w = Watcher(
        tmp_path,
        settings=WatchSettings(),
        sinks=[JsonlSink(log), StreamSink(out)],
        state_path=tmp_path / STATE,
        exclude=[log],
    )
    summary = RunSummary()
    write_handoffs(current, [2.5], prefix="a")
    w.poll(summary)
    # Rotated away under a name that is no longer followed, then a new file under the old one.
    write_handoffs(current, [2.5], prefix="b", start_s=1_767_230_000)
    current.rename(tmp_path / "traces.jsonl.1")
    write_handoffs(current, [2.5], prefix="c", start_s=1_767_240_000)
    w.poll(summary)
    w.poll(summary)
    w.close()
    tasks = [json.loads(x)["task_id"] for x in log.read_text().splitlines()]
    assert tasks == ["a-0", "b-0", "c-0"]
    assert summary.problems == 0


# ----------------------------------------------------------------------------------------
# Auditor rules
# ----------------------------------------------------------------------------------------
def test_rule_alerts_match_the_simulator_ground_truth(tmp_path: Path):
    traces = tmp_path / "traces"
    assert (
        main(
            [
                "simulate",
                "--out",
                str(traces),
                "-n",
                "20",
                "--seed",
                "7",
                "--fault",
                "commit-without-accept=0.2",
                "--fault",
                "slow-validation=0.1",
            ]
        )
        == 0
    )
    manifest = json.loads((traces / "manifest.json").read_text())
    log = tmp_path / "alerts.jsonl"
    assert (
        main(
            [
                "watch",
                str(traces),
                "--once",
                "--jsonl",
                str(log),
                "--rule",
                "commit-without-accept",
            ]
        )
        == 1
    )
    got = [json.loads(line) for line in log.read_text().splitlines()]

    def expected(rule: str) -> set[tuple[str, str, str]]:
        return {
            (f["trace_id"], f["task_id"], f["receiver"])
            for f in manifest["faults"]
            if f["rule"] == rule
        }

    def alerted(rule: str) -> list[tuple[str, str, str]]:
        return [(a["trace_id"], a["task_id"], a["receiver"]) for a in got if a["rule"] == rule]

    for rule in ("commit-without-accept", "slow-validation"):
        assert expected(rule), rule  # the faults were injected
        assert sorted(alerted(rule)) == sorted(expected(rule)), rule  # each once, none extra
    assert {a["rule"] for a in got} <= {
        "commit-without-accept",
        "slow-validation",
        "validation-p95-over-budget",
    }


def test_a_rule_finding_waits_to_settle_and_a_late_span_clears_it(tmp_path: Path):
    out = io.StringIO()
    w = Watcher(
        tmp_path,
        settings=WatchSettings(rules=("fire-and-forget",), settle_s=0.3),
        sinks=[StreamSink(out)],
        state_path=None,
    )
    summary = RunSummary()
    with (tmp_path / "a.jsonl").open("a") as f:
        f.write(otlp_line([commit_span(trace=1), commit_span(trace=2)]))
    w.poll(summary)
    assert alerts(out) == []  # both commits lack a validation, for now
    with (tmp_path / "a.jsonl").open("a") as f:
        f.write(otlp_line([validate_span(trace=1, latency_s=0.1, span=11)]))
    w.poll(summary)
    time.sleep(0.35)
    w.poll(summary)
    w.poll(summary)
    w.close()
    (alert,) = alerts(out)
    assert "fire-and-forget" in alert and "task-2" in alert


# ----------------------------------------------------------------------------------------
# Sinks and formats
# ----------------------------------------------------------------------------------------
def test_slack_format(tmp_path: Path):
    write_handoffs(tmp_path / "agents.jsonl", [2.5])
    with webhook() as server:
        code = main(
            ["watch", str(tmp_path), "--once", "--webhook", server.url, "--webhook-format", "slack"]
        )
        (body,) = server.wait_for(1)
    assert code == 1
    assert set(body) == {"text", "blocks"}
    assert body["text"].startswith("slow-validation firing")
    assert "`writer`" in json.dumps(body["blocks"])


def test_exec_sink_gets_the_alert_on_stdin(tmp_path: Path):
    traces = tmp_path / "traces"
    traces.mkdir()
    write_handoffs(traces / "agents.jsonl", [2.5])
    got = tmp_path / "got.json"
    assert main(["watch", str(traces), "--once", "--exec", f'cat > "{got}"']) == 1
    payload = json.loads(got.read_text())
    assert payload["schema"] == "handoffscope.alert/v1" and payload["task_id"] == "t-0"


def test_stdout_line_names_the_handoff(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    write_handoffs(tmp_path / "agents.jsonl", [2.5])
    assert main(["watch", str(tmp_path), "--once"]) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert "FIRING" in line and "slow-validation" in line and "t-0" in line
    assert "writer" in line and "research" in line and "2.500s" in line


# ----------------------------------------------------------------------------------------
# --once and its exit codes
# ----------------------------------------------------------------------------------------
def test_once_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    clean = tmp_path / "clean"
    clean.mkdir()
    write_handoffs(clean / "agents.jsonl", [0.1, 0.2])
    assert main(["watch", str(clean), "--once"]) == 0
    write_handoffs(clean / "agents.jsonl", [2.5], prefix="slow", start_s=1_767_230_000)
    assert main(["watch", str(clean), "--once"]) == 1
    assert main(["watch", str(clean), "--once"]) == 0  # nothing new since
    capsys.readouterr()

    logs = tmp_path / "logs"
    logs.mkdir()
    fixture = TESTS / "fixtures" / "otlp" / "opentelemetry-proto__examples__logs.json"
    (logs / "otel.jsonl").write_text(json.dumps(json.loads(fixture.read_text())) + "\n")
    assert main(["watch", str(logs), "--once"]) == 2
    err = capsys.readouterr().err
    assert "otel.jsonl:1" in err and "logs" in err and "Traceback" not in err

    assert main(["watch", str(tmp_path / "missing"), "--once"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_once_without_state_repeats_and_with_no_files_is_clean(tmp_path: Path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["watch", str(empty), "--once"]) == 0
    write_handoffs(tmp_path / "agents.jsonl", [2.5])
    assert main(["watch", str(tmp_path), "--once", "--no-state"]) == 1
    assert main(["watch", str(tmp_path), "--once", "--no-state"]) == 1
    assert not (tmp_path / STATE).exists()


def test_from_end_skips_what_was_there(tmp_path: Path):
    write_handoffs(tmp_path / "agents.jsonl", [2.5])
    assert main(["watch", str(tmp_path), "--once", "--from-end"]) == 0
    write_handoffs(tmp_path / "agents.jsonl", [2.5], prefix="new", start_s=1_767_230_000)
    assert main(["watch", str(tmp_path), "--once"]) == 1


def test_usage_errors_are_one_line_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["watch", str(tmp_path), "--once", "--rule", "commit-without-acept"]) == 2
    assert "did you mean commit-without-accept" in capsys.readouterr().err
    assert main(["watch", str(tmp_path), "--once", "--window", "5 fortnights"]) == 2
    assert "not a duration" in capsys.readouterr().err
    assert main(["watch", str(tmp_path), "--once", "--webhook", "file:///etc/passwd"]) == 2
    assert "http(s)" in capsys.readouterr().err
    assert main(["watch", str(tmp_path), "--once", "--jsonl", str(tmp_path)]) == 2
    assert "--jsonl" in capsys.readouterr().err
    (tmp_path / STATE).write_text("{not json")
    assert main(["watch", str(tmp_path), "--once"]) == 2
    err = capsys.readouterr().err
    assert "damaged" in err and STATE in err and "Traceback" not in err


# ----------------------------------------------------------------------------------------
# Help and docs
# ----------------------------------------------------------------------------------------
def test_every_option_has_help_and_the_docs_show_the_current_help(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    from auditor.watch import watch

    for param in watch.params:
        if param.param_type_name == "option":
            assert param.help, param.name  # type: ignore[attr-defined]
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["watch", "--help"]) == 0
    shown = capsys.readouterr().out.strip()
    docs = (REPO / "docs" / "watch.md").read_text()
    block = docs.split("<!-- watch --help -->\n```text\n", 1)[1].split("```", 1)[0].strip()
    assert block == shown, "docs/watch.md is out of date: paste `handoffscope watch --help`"


def test_public_surface_is_pinned_and_the_quickstart_runs():
    import auditor.watch as package

    assert package.__all__ == sorted(package.__all__)
    assert package.__all__ == [
        "Alert",
        "ExecSink",
        "JsonlSink",
        "RunSummary",
        "StreamSink",
        "WatchSettings",
        "Watcher",
        "WebhookSink",
        "evaluate_traces",
        "watch",
    ]
    for name in package.__all__:
        assert getattr(package, name).__doc__, name
    doc = package.__doc__ or ""
    code = doc.split("this runs as is)::\n", 1)[1].split("\n\n``docs", 1)[0]
    exec(compile(textwrap.dedent(code), "auditor/watch/__init__.py", "exec"), {})


def test_one_state_file_serves_one_watch_at_a_time(tmp_path: Path):
    first, _ = watcher(tmp_path)
    with pytest.raises(ConfigurationError, match=r"another handoffscope watch \(pid \d+\)"):
        watcher(tmp_path)
    first.close()
    second, _ = watcher(tmp_path)  # released on close
    second.close()


def test_a_state_file_with_damaged_content_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    (tmp_path / STATE).write_text(json.dumps({"version": 1, "receivers": {"watermark_ns": "x"}}))
    assert main(["watch", str(tmp_path), "--once"]) == 2
    err = capsys.readouterr().err
    assert "damaged" in err and "Traceback" not in err
    (tmp_path / STATE).unlink()
    assert main(["watch", str(tmp_path), "--once"]) == 0  # the lock was released


def test_the_prometheus_section_matches_the_library_metric():
    """The library buckets its histogram at 0.5 s and 2 s, and so does the View in the docs."""
    import re

    docs = (REPO / "docs" / "watch.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", docs, re.S) if "latency_view" in b]
    namespace: dict[str, object] = {}
    exec(compile(block, "docs/watch.md", "exec"), namespace)
    bounds_seen = []
    for views in ([], [namespace["latency_view"]]):  # the library's own buckets, then the doc's
        bounds_seen.append(_bucket_check(views, docs))
    assert bounds_seen[0] != bounds_seen[1]  # the View really replaced the library's advice


def _bucket_check(views: list, docs: str) -> list[float]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from collector import schema
    from collector.telemetry import Telemetry

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], views=views)
    telemetry = Telemetry(meter_provider=provider)
    for seconds in (0.2, 0.6, 2.5):
        telemetry.latency(seconds, sender="research", receiver="writer", decision="accept")
    (metric,) = [
        m
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == schema.METRIC_VALIDATION_LATENCY
    ]
    (point,) = metric.data.data_points
    bounds = list(point.explicit_bounds)
    assert 0.5 in bounds and 2.0 in bounds
    counts = list(point.bucket_counts)  # counts[i]: values in (bounds[i-1], bounds[i]]
    assert sum(counts[: bounds.index(0.5) + 1]) == 1  # within budget: 0.2 s
    assert sum(counts[: bounds.index(2.0) + 1]) == 2  # within the timeout: 0.2 s, 0.6 s
    assert counts[bounds.index(2.5)] == 1  # the late one, told apart from the rest
    assert dict(point.attributes)[schema.RECEIVER] == "writer"
    # Prometheus names: dots become underscores, the unit "s" a _seconds suffix.
    prom = schema.METRIC_VALIDATION_LATENCY.replace(".", "_") + "_seconds"
    assert metric.unit == "s" and prom == "handoff_validation_duration_seconds"
    assert f"{prom}_bucket" in docs and schema.RECEIVER.replace(".", "_") in docs
    provider.shutdown()
    return bounds


def test_a_poll_that_fails_half_way_is_read_again_on_the_next_start(tmp_path: Path):
    write_handoffs(tmp_path / "agents.jsonl", [2.5])
    broken, out = watcher(tmp_path)

    def fail(**kwargs: object) -> list[object]:
        raise RuntimeError("disk on fire")

    broken.engine.evaluate = fail  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        broken.run(once=True)
    assert alerts(out) == [] and not (tmp_path / STATE).exists()
    again, out = watcher(tmp_path)
    assert again.run(once=True).alerts == 1
    assert "t-0" in alerts(out)[0]
    again.close()  # closing twice is harmless


# ----------------------------------------------------------------------------------------
# Settings shared with audit, and alerts that cannot be delivered
# ----------------------------------------------------------------------------------------
def _slow_alerts(out: str) -> list[str]:
    return [line for line in out.splitlines() if "slow-validation" in line]


def test_watch_takes_the_audit_settings_from_pyproject_below_env_and_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    from auditor.settings import ENV_VARS

    for var in ENV_VARS.values():
        monkeypatch.delenv(var, raising=False)
    traces = tmp_path / "traces"
    traces.mkdir()
    write_handoffs(traces / "agents.jsonl", [2.5, 3.5])
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.handoffscope]\nvalidation-timeout = "3s"\n')
    monkeypatch.chdir(project / "sub")  # found from below, as audit finds it

    assert main(["watch", str(traces), "--once", "--no-state"]) == 1
    (line,) = _slow_alerts(capsys.readouterr().out)
    assert "t-1" in line and "3.500s (timeout 3s)" in line
    main(["audit", str(traces), "--rule", "slow-validation", "--format", "json"])
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert len(findings) == 1  # audit and watch agree

    monkeypatch.setenv("HANDOFFSCOPE_VALIDATION_TIMEOUT", "2s")  # env beats pyproject
    main(["watch", str(traces), "--once", "--no-state"])
    assert len(_slow_alerts(capsys.readouterr().out)) == 2
    main(["watch", str(traces), "--once", "--no-state", "--validation-timeout", "4s"])
    assert _slow_alerts(capsys.readouterr().out) == []  # the option beats both

    (project / "pyproject.toml").write_text("[tool.handoffscope]\nmax-attempts = 2.7\n")
    assert main(["watch", str(traces), "--once", "--no-state"]) == 2
    err = capsys.readouterr().err
    assert f"{project / 'pyproject.toml'} [tool.handoffscope] max-attempts" in err
    assert "whole number" in err and "Traceback" not in err


def test_alerts_undelivered_at_the_end_of_a_stateless_run_are_named_and_fail_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    write_handoffs(tmp_path / "agents.jsonl", [2.5, 2.6, 2.7])
    # The first retry comes after at least 0.2 s, later than --flush-timeout allows.
    with webhook(fail=[500, 500]) as hook:
        args = ["watch", str(tmp_path), "--once", "--webhook", hook.url]
        code = main([*args, "--no-state", "--flush-timeout", "0.1s"])
        err = capsys.readouterr().err
        assert code == 2
        assert "3 alerts could not be delivered" in err and "are lost" in err
        for task in ("t-0", "t-1", "t-2"):
            (named,) = [line for line in err.splitlines() if f"task {task}," in line]
            assert "webhook: slow-validation (firing), receiver writer" in named
            assert "trace " in named and " id " in named
        assert err.splitlines()[-1].endswith("3 alerts, 3 not delivered (lost)")
        assert hook.bodies == []

        # The same failures with time to retry: every alert arrives, nothing is reported lost.
        hook.bodies.clear()
        code = main([*args, "--no-state"])
        err = capsys.readouterr().err
        assert code == 1 and "lost" not in err
        assert len(hook.wait_for(3)) == 3


def test_alerts_undelivered_at_exit_with_a_state_file_are_saved_not_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    write_handoffs(tmp_path / "agents.jsonl", [2.5, 2.6])
    with webhook(fail=[500, 500]) as hook:
        args = ["watch", str(tmp_path), "--once", "--webhook", hook.url]
        assert main([*args, "--flush-timeout", "0.1s"]) == 1
        err = capsys.readouterr().err
        assert "2 undelivered alerts are saved in" in err and "lost" not in err
        assert err.splitlines()[-1].endswith("2 alerts, 2 saved to deliver on the next run")
        assert hook.bodies == []
        assert main(args) == 0  # nothing new; the saved alerts go out first
        assert "resending 2 undelivered webhook alerts" in capsys.readouterr().err
        bodies = hook.wait_for(2)
    assert sorted(b["task_id"] for b in bodies) == ["t-0", "t-1"]


def test_alerts_the_webhook_refuses_count_as_lost_even_with_a_state_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    write_handoffs(tmp_path / "agents.jsonl", [2.5, 2.6])
    with webhook(fail=[400]) as hook:
        code = main(
            ["watch", str(tmp_path), "--once", "--webhook", hook.url, "--webhook-retries", "0"]
        )
        bodies = hook.wait_for(1)
    err = capsys.readouterr().err
    assert code == 2
    assert "refused alert" in err and "dropped it" in err
    assert err.splitlines()[-1].endswith("2 alerts, 1 not delivered (lost)")
    assert [b["task_id"] for b in bodies] == ["t-1"]
