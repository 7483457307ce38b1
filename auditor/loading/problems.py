"""What could not be used in the input, said so a user can act on it."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

MAX_PROBLEMS_PER_FILE: Final = 100
"""Problems listed one by one per file; the rest are counted in one summary problem."""

NOT_OTLP: Final = (
    "JSON, but not an OTLP trace export (no resourceSpans); handoffscope reads the OTLP JSON"
    " that OpenTelemetry's file exporters and collectors write"
)


NOT_JSON: Final = "not JSON"
"""A :class:`Fault`: the line is not JSON at all (its ``detail``: the parser's words)."""
SCALAR: Final = "JSON scalar"
"""A :class:`Fault`: the line is a JSON number, string, boolean or null."""
NUL: Final = "NUL bytes"
"""A :class:`Fault`: the line holds NUL bytes."""
NOT_UTF8: Final = "not UTF-8"
"""A :class:`Fault`: the line holds bytes that are not UTF-8 (its ``detail``: where)."""
UNLISTED: Final = "unlisted"
"""A :class:`Fault`: ``lines`` more lines that yielded no span are not listed."""


@dataclass(frozen=True)
class Fault:
    """What a problem says of its line, for :func:`non_trace_files` to tell a file that is no
    trace file at all (every line of it such a fault) from a trace file with damaged lines."""

    kind: str
    detail: str = ""
    lines: int = 1


@dataclass(frozen=True)
class LoadProblem:
    """A line or file that could not be used; everything else was still loaded.

    ``line`` is 1-based, or None when the problem concerns the whole file.
    """

    file: str
    line: int | None
    message: str
    fault: Fault | None = field(default=None, compare=False, repr=False)
    """What the problem says of its line when that may mean the file is no trace file."""

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.message}"


def classify(
    file: str,
    bad: Sequence[tuple[int, str]],
    *,
    last_line: int | None,
    unlisted: int = 0,
) -> list[LoadProblem]:
    """Problems for ``bad`` lines of ``file`` (``(number, text)``), in line order.

    ``last_line`` is the file's last non-blank line, so a torn final line (a writer killed
    mid-line) is told apart from a malformed one; None when that does not apply. A torn
    last line is always listed; beyond :data:`MAX_PROBLEMS_PER_FILE` other lines are
    counted in one summary problem, together with ``unlisted`` lines never examined.
    """
    out: list[LoadProblem] = []
    more = unlisted
    for index, (number, text) in enumerate(bad):
        torn = number == last_line
        if index >= MAX_PROBLEMS_PER_FILE and not torn:
            more += 1
            continue
        message, fault = _described(text, torn=torn)
        out.append(LoadProblem(file, number, message, fault))
    if more:
        out.append(
            LoadProblem(
                file,
                None,
                f"{more} more unusable lines are not listed; everything else in the file"
                " was loaded",
                Fault(UNLISTED, lines=more),
            )
        )
    return out


def non_trace_files(problems: Sequence[LoadProblem]) -> dict[str, LoadProblem]:
    """The one problem that stands for all of a file's ``problems`` when they say that it is
    no trace file, by file: none of its lines is JSON, or it is binary (NUL bytes and bytes
    that are not UTF-8). A file with one line, or with any other problem (a JSON object
    that is not an export, ids of a span it yielded...), keeps them: it may be a trace file
    cut short or damaged, and the caller still checks that each of these yielded no span.
    """
    faults: dict[str, list[tuple[int | None, Fault]]] = {}
    mixed: set[str] = set()
    for p in problems:
        if p.fault is None:
            mixed.add(p.file)
        elif p.file not in mixed:
            faults.setdefault(p.file, []).append((p.line, p.fault))
    out: dict[str, LoadProblem] = {}
    for file, found in faults.items():
        if file in mixed:
            continue
        kinds = {f.kind for _, f in found}
        listed = {n for n, f in found if n is not None and f.kind != NOT_UTF8}
        lines = len(listed) + sum(f.lines for _, f in found if f.kind == UNLISTED)
        if NUL in kinds and NOT_UTF8 in kinds:
            line = min(n for n, f in found if n is not None and f.kind in (NUL, NOT_UTF8))
            what = f"binary, not text (NUL bytes and bytes that are not UTF-8, from line {line} on)"
        elif kinds <= {NOT_JSON, NOT_UTF8, UNLISTED} and NOT_JSON in kinds and lines > 1:
            if UNLISTED in kinds:
                # Lines past the listed ones were counted, never parsed.
                what = f"none of the first {len(listed)} of its {lines} lines is JSON"
            else:
                what = f"none of its {lines} lines is JSON"
            first = min((n, f.detail) for n, f in found if n is not None and f.kind == NOT_JSON)
            what += f" (line {first[0]}: {first[1]})"
        else:
            continue
        out[file] = LoadProblem(file, None, f"not a trace file: {what}; it was skipped")
    return out


def collapsed(problems: Sequence[LoadProblem], files: dict[str, LoadProblem]) -> list[LoadProblem]:
    """``problems`` with those of each file in ``files`` replaced by the one problem given
    for it there, where the file's first problem was."""
    out: list[LoadProblem] = []
    placed: set[str] = set()
    for p in problems:
        if p.file not in files:
            out.append(p)
        elif p.file not in placed:
            out.append(files[p.file])
            placed.add(p.file)
    return out


def by_kind(problems: Sequence[LoadProblem]) -> list[tuple[int, str]]:
    """How many of ``problems`` say each thing, most first: a message up to its particulars
    (``not valid JSON``, ``NUL bytes in this line``, ``OTLP logs, not traces``)."""
    counts: dict[str, int] = {}
    for p in problems:
        kind = re.split(r" \(|; |: | at line ", p.message, maxsplit=1)[0]
        kind = re.sub(r"^\d+ ", "", kind)
        counts[kind] = counts.get(kind, 0) + 1
    return sorted(((n, k) for k, n in counts.items()), key=lambda nk: -nk[0])


def decoded(raw: bytes) -> tuple[str, str | None]:
    """``raw``, a line's bytes, as text, and what to report when some of them are not
    UTF-8 (None when all are). Those are read as U+FFFD, the replacement character (one
    for each broken sequence), rather than losing the line: the rest of it may hold good
    spans."""
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as e:
        return raw.decode("utf-8", "replace"), not_utf8(e.start + 1)


def not_utf8(byte: int) -> str:
    """The problem of a line that is not UTF-8 text from ``byte`` on (1-based)."""
    return f"not UTF-8 text (byte {byte}); it was read as U+FFFD, the replacement character"


def describe(text: str, *, torn: bool = False) -> str:
    """Why ``text`` (one line or document) holds no span."""
    return _described(text, torn=torn)[0]


def _described(text: str, *, torn: bool = False) -> tuple[str, Fault | None]:
    """Why ``text`` holds no span, and the :class:`Fault` that is (None: it is JSON of a
    shape no file but a trace file holds, or could)."""
    keys: list[str] = []
    try:
        value = json.loads(text, object_pairs_hook=partial(first_wins, keys))
    except (ValueError, RecursionError) as e:
        detail = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deeply"
        fault = Fault(NOT_JSON, detail)
        if torn:
            return (
                f"the last line is incomplete JSON ({detail}): the writer probably stopped"
                " mid-line; the line was skipped and the rest of the file was loaded"
            ), fault
        return f"not valid JSON ({detail}); the line was skipped", fault
    if isinstance(value, list):
        return f"{_array(value)}; the line was skipped", None
    if not isinstance(value, dict):
        return (
            f"{_as_json(value)}, not an OTLP export object; the line was skipped",
            Fault(SCALAR),
        )
    return _described_object(value, keys), None


def _described_object(value: dict[str, Any], keys: list[str]) -> str:
    """Why a JSON object holds no span; ``keys``: its keys as written, repeats included."""
    if "resourceLogs" in value or "resource_logs" in value:
        return (
            "OTLP logs, not traces: handoffscope audits trace files (resourceSpans);"
            " point it at the file your trace exporter writes"
        )
    if "resourceMetrics" in value or "resource_metrics" in value:
        return (
            "OTLP metrics, not traces: handoffscope audits trace files (resourceSpans);"
            " point it at the file your trace exporter writes"
        )
    if "resourceSpans" in value:
        times = keys.count("resourceSpans")
        repeated = f" (the key appears {times} times; the first is read)" if times > 1 else ""
        first = value["resourceSpans"]
        if not isinstance(first, list):
            what = f"is {_kind(first)}, not a list of"
        elif (wrong := _misshapen(first)) is not None:
            return f"{wrong}{repeated}; the line was skipped"
        else:
            what = "holds no"
        return f"resourceSpans {what} OTLP ResourceSpans{repeated}; the line was skipped"
    return NOT_OTLP


def scopes_of(resource: dict[str, Any]) -> tuple[str, Any]:
    """The key and value of the scopes a ResourceSpans object holds, as the loader reads
    them: its ``scopeSpans``, or the ``instrumentationLibrarySpans`` of OTLP before 0.15 when
    ``scopeSpans`` is missing, empty or not a list and those are there."""
    current = resource.get("scopeSpans")
    if (isinstance(current, list) and current) or "instrumentationLibrarySpans" not in resource:
        return "scopeSpans", current
    return "instrumentationLibrarySpans", resource["instrumentationLibrarySpans"]


def _misshapen(resource_spans: list[Any]) -> str | None:
    """The first part of an export's ``resourceSpans`` list that is not of the shape OTLP
    gives it, named by its path (``resourceSpans[0].scopeSpans is a number, not a list``);
    None when every part is."""
    for i, rs in enumerate(resource_spans):
        where = f"resourceSpans[{i}]"
        if not isinstance(rs, dict):
            return f"{where} is {_kind(rs)}, not a ResourceSpans object"
        key, scopes = scopes_of(rs)
        if (wrong := _not_a_list(scopes, f"{where}.{key}")) is not None:
            return wrong
        for j, ss in enumerate(scopes or []):
            if not isinstance(ss, dict):
                return f"{where}.{key}[{j}] is {_kind(ss)}, not a ScopeSpans object"
            spans = ss.get("spans")
            if (wrong := _not_a_list(spans, f"{where}.{key}[{j}].spans")) is not None:
                return wrong
            for k, span in enumerate(spans or []):
                if not isinstance(span, dict):
                    return f"{where}.{key}[{j}].spans[{k}] is {_kind(span)}, not a span object"
    return None


def first_wins(keys: list[str], pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as DuckDB's parser reads them: a repeated key keeps its first
    value (Python's ``json`` keeps the last). An ``object_pairs_hook`` once ``keys`` is
    bound; ``keys`` is left holding the keys of the last object made, the outermost."""
    keys[:] = [k for k, _ in pairs]
    out: dict[str, Any] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def _not_a_list(value: object, where: str) -> str | None:
    """What is wrong with ``value`` at ``where``, a list if there at all; None if nothing."""
    if value is None or isinstance(value, list):
        return None
    return f"{where} is {_kind(value)}, not a list"


def _array(items: list[Any]) -> str:
    """What a JSON array where an export belongs holds, and how to make it readable."""
    if items and all(isinstance(i, dict) and "resourceSpans" in i for i in items):
        return (
            f"a JSON array of {len(items)} OTLP trace exports; an export is read whole, one"
            " per line or document: write each on a line of its own (jq -c '.[]' FILE >"
            " traces.jsonl)"
        )
    if items and all(isinstance(i, dict) and ("traceId" in i or "spanId" in i) for i in items):
        return (
            "a JSON array of spans, without the OTLP export around them (resourceSpans,"
            " scopeSpans) that names their service: write them with an OTLP JSON exporter"
        )
    return "a JSON array, not an OTLP export object"


def _as_json(value: object) -> str:
    """What JSON ``value`` is, said as JSON (``a JSON number``, ``JSON null``)."""
    return "JSON null" if value is None else f"a JSON {_kind(value).split()[-1]}"


def _kind(value: object) -> str:
    """What JSON ``value`` is, in words (``an array``, ``a number``...)."""
    if value is None:
        return "null"
    kinds = {list: "an array", dict: "an object", str: "a string", bool: "a boolean"}
    return kinds.get(type(value), "a number")
