"""The JSON report: one document, schema documented in docs/auditor.md."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final

from auditor.findings.finding import FINDING_FIELDS
from auditor.report.values import jsonable, no_gc, verdict_status
from collector import __version__

__all__ = [
    "JSON_FORMAT",
    "findings_text",
    "json_chunks",
    "render_json",
    "report_dict",
    "splice",
]

if TYPE_CHECKING:
    from auditor.audit import AuditResult
    from auditor.findings.finding import Finding

JSON_FORMAT: Final = 1
"""Version of the JSON report layout (``format``); bumped on any incompatible change."""


def report_dict(result: AuditResult) -> dict[str, Any]:
    """The JSON report as a dict."""
    doc = _document(result, None)
    doc["findings"] = _findings(result.findings, None)
    return doc


def _document(result: AuditResult, exponent: Callable[[float], Any] | None) -> dict[str, Any]:
    s = result.settings
    counts = result.counts()
    failing = result.failing_count()
    not_judged = result.not_judged()
    status = verdict_status(failing, not_judged, result.figures.summary)
    doc = {
        "format": JSON_FORMAT,
        "tool": {"name": "handoffscope", "version": __version__},
        "settings": {
            "validation_timeout_ms": s.validation_timeout_s * 1000,
            "p95_budget_ms": s.p95_budget_s * 1000,
            "max_attempts": s.max_attempts,
            "fail_on": s.fail_on,
        },
        "verdict": {
            "status": status,
            # A run the audit could not judge is no pass for a CI job reading this field.
            "passed": status in ("pass", "nothing_to_judge"),
            "exit_code": result.exit_code(),
            "failing_findings": failing,
            "findings_by_severity": result.severity_counts(),
        },
        "summary": result.figures.summary,
        "rules": [
            {"id": r.id, "severity": r.severity, "summary": r.summary, "findings": counts[r.id]}
            for r in result.rules
        ],
        "findings": [],
        "agents": result.figures.agents,
        "edges": result.figures.edges,
        "reliability": result.figures.reliability,
        "latency": result.figures.latency,
        "spend": result.figures.spend,
        "problems": [
            {"file": p.file, "line": p.line, "message": p.message} for p in result.problems
        ],
        "files": result.files,
    }
    if result.source is not None:
        doc["source"] = result.source  # a ClickHouse table: what stands for `files`
    if not_judged:
        doc["verdict"]["not_judged"] = not_judged  # type: ignore[index]
    if result.structure is not None and (result.explained or not_judged):
        doc["structure"] = result.structure.to_dict()
    out: dict[str, Any] = jsonable(doc, exponent=exponent)
    return out  # the findings are the caller's to fill in


def _findings(
    findings: list[Finding], exponent: Callable[[float], Any] | None
) -> list[dict[str, Any]]:
    # The findings are most of a large report, each a flat record of scalars: walked here
    # without jsonable's recursion (a hundred thousand of them took it most of a second).
    values_of = attrgetter(*FINDING_FIELDS)
    at = FINDING_FIELDS.index("value")
    out = []
    with no_gc():
        for values in map(values_of, findings):
            record = dict(zip(FINDING_FIELDS, values, strict=True))
            # Most findings carry a figure (a float) and text: each checked as jsonable
            # would treat it, without walking the record.
            value = values[at]
            if type(value) is float and value - value == 0:  # not NaN nor infinite
                rounded = float(f"{value:.12g}")  # as jsonable rounds it
                if exponent is not None and "e" in repr(rounded):
                    record["value"] = exponent(rounded)
                else:
                    record["value"] = rounded
            elif value is not None:
                record["value"] = jsonable(value, exponent=exponent)
            if not _PLAIN.issuperset(map(type, values[:at] + values[at + 1 :])):
                for name, field in record.items():
                    if name != "value" and type(field) not in _PLAIN:
                        record[name] = jsonable(field, exponent=exponent)
            out.append(record)
    return out


_PLAIN: Final = frozenset({str, int, bool, type(None)})
"""What jsonable leaves as it is."""


def render_json(result: AuditResult) -> str:
    """The JSON report as text (two-space indent, keys in schema order)."""
    chunks = _chunks(result)
    if isinstance(chunks, str):
        return chunks
    # The findings' texts freed before the decode: a million findings are half a gigabyte
    # in each of the texts, the joined bytes and the decoded report.
    joined = b"".join(chunks)
    del chunks
    return joined.decode("utf-8")


def json_chunks(result: AuditResult) -> list[bytes | memoryview]:
    """The JSON report as UTF-8, in chunks to write one after another (what
    :func:`render_json` returns): each rule's findings as their own chunks, the text kept
    for them beside a store as it was read, never copied (tens of megabytes)."""
    chunks = _chunks(result)
    if isinstance(chunks, str):
        # A lone surrogate (text that was never Unicode) can only stand inside a JSON
        # string, where "\\udc80" is its escape: the same report, in UTF-8.
        return [chunks.encode("utf-8", "backslashreplace")]
    return chunks


_MARK: Final = b"\0"
"""Where the findings go in the report orjson writes: a JSON string escapes a NUL, so no other
raw NUL is in there."""


def _chunks(result: AuditResult) -> list[bytes | memoryview] | str:
    try:
        import orjson  # optional: the [cli] extra
    except ModuleNotFoundError:  # pragma: no cover - orjson comes with the [cli] extra
        return _plain(result)
    # Each rule's findings as the text the report holds, spliced in whole: a rule's findings
    # kept beside a store come as that text, never made into objects.
    texts = []
    for piece in result.by_rule:
        text = piece.json_text if piece.json_text is not None else findings_text(piece.findings)
        if text is None:
            return _plain(result)
        texts.append(text)
    doc = _document(result, _exponent)
    doc["findings"] = orjson.Fragment(_MARK)
    try:
        out = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:
        return _plain(result)  # an integer beyond 64 bits, or text that is not Unicode
    around = out.split(_MARK)
    if len(around) != 2:  # pragma: no cover - orjson escapes a NUL in text
        return _plain(result)
    return [around[0], *_spliced(texts), around[1]]


def findings_text(findings: list[Finding]) -> bytes | None:
    """``findings`` as the JSON report writes them (UTF-8): a list, indented as the value
    of the report's ``findings`` key. None when orjson cannot write them (an integer beyond
    64 bits, text that is not Unicode) or is not installed; the report is then written by
    :mod:`json`."""
    try:
        import orjson  # optional: the [cli] extra
    except ModuleNotFoundError:  # pragma: no cover - orjson comes with the [cli] extra
        return None
    try:
        text = orjson.dumps(_findings(findings, _exponent), option=orjson.OPT_INDENT_2)
    except orjson.JSONEncodeError:
        return None
    # Written alone, the list sits one level shallower than in the report. A JSON string
    # holds no newline (it is escaped), so every newline is the indentation's.
    return text.replace(b"\n", b"\n  ")


def splice(texts: Sequence[bytes | memoryview]) -> bytes:
    """The report's ``findings`` list made of the lists ``texts`` (each as
    :func:`findings_text` writes it), in order."""
    return b"".join(_spliced(texts))


def _spliced(texts: Sequence[bytes | memoryview]) -> list[bytes | memoryview]:
    # b"[]", or b"[\n    {...},\n    {...}\n  ]": the items lie between b"[\n" and b"\n  ]",
    # taken as views of the texts, not copies.
    items = [memoryview(text)[2:-4] for text in texts if text != b"[]"]
    if not items:
        return [b"[]"]
    pieces: list[bytes | memoryview] = [b"[\n"]
    for item in items:
        pieces += (item, b",\n")
    pieces[-1] = b"\n  ]"
    return pieces


def _exponent(value: float) -> Any:
    # The same text as json.dumps(indent=2, ensure_ascii=False), several times faster: orjson
    # writes every float as Python does but those Python writes with an exponent (1e-05,
    # not 0.00001), which go in as Python's own text.
    import orjson

    return orjson.Fragment(repr(value))


def _plain(result: AuditResult) -> str:
    return json.dumps(report_dict(result), indent=2, ensure_ascii=False) + "\n"
