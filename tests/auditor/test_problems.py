"""What a line holding JSON but no export is called (``auditor.loading.problems``): the
shapes users hand over instead of OTLP JSON-lines, each named with what to do."""

from __future__ import annotations

import json

import pytest

from auditor.loading.problems import describe

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
