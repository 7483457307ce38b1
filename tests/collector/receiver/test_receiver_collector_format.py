"""The scale-out path: files the OpenTelemetry Collector's fileexporter writes are read too."""

from __future__ import annotations

import json
import re
import shutil

from auditor import load_traces
from collector.receiver import SpanEncoder
from collector.receiver.decode import json_to_protobuf
from tests.support.paths import REPO, TESTS

ROOT = REPO
FIXTURE_DIR = TESTS / "fixtures" / "collector"
[FIXTURE] = FIXTURE_DIR.glob("*.jsonl")


def _spans(lines: list[bytes]) -> list[dict]:
    return [
        span
        for line in lines
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def test_the_auditor_reads_every_span_of_a_collector_file(tmp_path):
    expected = _spans(FIXTURE.read_bytes().splitlines())
    assert len(expected) == 14
    shutil.copy(FIXTURE, tmp_path)
    traces = load_traces(tmp_path)
    assert traces.problems == []
    assert traces.span_count == len(expected)


def test_the_collectors_active_file_may_end_mid_line(tmp_path):
    # The Collector appends to its active file (traces.jsonl) while readers look at it.
    shutil.copy(FIXTURE, tmp_path)
    lines = FIXTURE.read_bytes().splitlines(keepends=True)
    (tmp_path / "traces.jsonl").write_bytes(lines[0] + lines[1][:300])
    traces = load_traces(tmp_path)
    assert traces.span_count == 14  # the active file's first line repeats rotated spans
    assert traces.duplicate_count == len(_spans(lines[:1]))
    [problem] = traces.problems
    assert "traces.jsonl" in str(problem) and "incomplete" in str(problem)


def _without_empty_defaults(span: dict) -> dict:
    # pdata writes the empty root parent and an empty status; OTLP JSON leaves them out.
    return {k: v for k, v in span.items() if not (k in ("parentSpanId", "status") and not v)}


def test_collector_lines_and_receiver_lines_hold_the_same_spans():
    lines = FIXTURE.read_bytes().splitlines()
    encoder = SpanEncoder()
    rewritten = [encoder.encode(json_to_protobuf(line)).line for line in lines]
    assert [_without_empty_defaults(s) for s in _spans(rewritten)] == [
        _without_empty_defaults(s) for s in _spans(lines)
    ]


def test_the_documented_collector_configuration_matches_the_fixture():
    doc = (ROOT / "docs" / "collect.md").read_text()
    config = re.search(r"```yaml\n(receivers:.*?)```", doc, re.S)
    assert config, "docs/collect.md must give the Collector configuration"
    text = config.group(1)
    for needed in (
        "otlp:",
        "file:",
        "format: json",
        "rotation:",
        "max_megabytes:",
        "exporters: [file]",
        "path: /var/lib/handoffscope/collector/traces.jsonl",
    ):
        assert needed in text, needed
    # Rotated files are named <stem>-<time>.jsonl, as the fixture is.
    assert re.fullmatch(r"traces-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}\.jsonl", FIXTURE.name)
