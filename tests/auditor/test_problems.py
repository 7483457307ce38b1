"""What a line holding JSON but no export is called (``auditor.loading.problems``): the
shapes users hand over instead of OTLP JSON-lines, each named with what to do."""

from __future__ import annotations

import json

import pytest

from auditor.loading.problems import classify, collapsed, describe, non_trace_files

EXPORT = {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "ab", "spanId": "cd"}]}]}]}
SPANS = EXPORT["resourceSpans"][0]["scopeSpans"][0]["spans"]


def test_an_array_of_exports_says_to_write_one_per_line() -> None:
    message = describe(json.dumps([EXPORT, EXPORT]))
    assert message.startswith("a JSON array of 2 OTLP trace exports;"), message
    assert "jq -c '.[]'" in message
    assert message.endswith("the line was skipped")


def test_an_array_of_bare_spans_says_the_export_around_them_is_missing() -> None:
    message = describe(json.dumps(SPANS))
    assert message.startswith("a JSON array of spans, without the OTLP export around them"), message


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[1, 2]", "a JSON array"),
        ("[]", "a JSON array"),
        ("42", "a JSON number"),
        ('"text"', "a JSON string"),
        ("true", "a JSON boolean"),
        ("null", "JSON null"),
    ],
)
def test_other_json_values_are_named_as_json(text: str, said: str) -> None:
    """They read "JSON an array, not an OTLP export object"."""
    assert describe(text) == f"{said}, not an OTLP export object; the line was skipped"


def test_a_long_file_of_no_json_says_how_many_of_its_lines_were_read() -> None:
    """Lines past the listed ones were only counted: the problem claims no more than was
    seen. Files with another problem, or of one line, are not made one."""
    lines = [(n, "These files hold spans.") for n in range(1, 152)]
    found = classify("README.md", lines, last_line=None)
    found += classify("a.jsonl", [(1, "{oops"), (2, "[]")], last_line=None)
    found += classify("b.jsonl", [(1, "oops")], last_line=None)
    assert [str(p) for p in non_trace_files(found).values()] == [
        "README.md: not a trace file: none of the first 100 of its 151 lines is JSON"
        " (line 1: Expecting value); it was skipped"
    ]
    whole = non_trace_files(found)
    assert [(p.file, p.line) for p in collapsed(found, whole)] == [
        ("README.md", None),
        ("a.jsonl", 1),
        ("a.jsonl", 2),
        ("b.jsonl", 1),
    ]
