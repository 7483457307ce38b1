"""What the readers need to know of JSON text beyond parsing it: whole documents written
back to back, exports that hold no span, and lone UTF-16 surrogates, which DuckDB refuses
and a model's output cut mid-emoji carries."""

from __future__ import annotations

import json
import re
from typing import Final

from auditor.problems import LoadProblem

__all__ = [
    "REPLACED_SURROGATE",
    "documents",
    "opens_value",
    "is_empty_export",
    "is_json",
    "repair_surrogates",
    "replace_surrogate_chars",
]


def is_empty_export(text: str) -> bool:
    """True for a valid trace export that simply holds no span (nothing to report)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    if not isinstance(value, dict) or not isinstance(value.get("resourceSpans"), list):
        return False
    return all(
        isinstance(rs, dict)
        and all(
            isinstance(ss, dict) and not ss.get("spans")
            for ss in (rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or [])
        )
        for rs in value["resourceSpans"]
    )


def opens_value(first_line: bytes) -> bool:
    """True when a file's ``first_line`` opens a JSON value it does not close: the file holds
    pretty-printed documents, to be read whole, not line by line (audit's and watch's rule).
    A leading byte-order mark is ignored."""
    first = first_line.removeprefix(b"\xef\xbb\xbf").strip()
    return first.startswith((b"{", b"[")) and not is_json(first.decode("utf-8", "replace"))


def is_json(text: str) -> bool:
    """True when ``text`` is one whole JSON value."""
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def documents(text: str, path: str, problems: list[LoadProblem]) -> list[tuple[int, str]]:
    """Whole JSON documents in ``text`` as ``(first line, compact JSON)``; [] if none.

    After text that is not JSON, reading goes on at the next line that opens a document
    (``{`` in the first column); the lines skipped are reported in ``problems`` (only when
    some document was found: otherwise the file is read as lines instead).
    """
    decoder = json.JSONDecoder()
    docs: list[tuple[int, str]] = []
    found: list[LoadProblem] = []
    pos, length = 0, len(text)
    counted, line = 0, 1  # text[:counted] holds line - 1 newlines

    def line_at(offset: int) -> int:
        nonlocal counted, line
        line += text.count("\n", counted, offset)
        counted = offset
        return line

    while True:
        while pos < length and text[pos] in " \t\r\n":
            pos += 1
        if pos >= length:
            break
        try:
            value, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError) as e:
            first = line_at(pos)
            at = text.find("\n{", pos)
            if at < 0:
                last = line_at(len(text.rstrip()))
                after = "the documents before them were loaded"
            else:
                last = line_at(at)
                after = f"reading went on at line {last + 1}"
            where = f"lines {first}-{last}" if last > first else f"line {first}"
            if isinstance(e, json.JSONDecodeError):
                why = f"not valid JSON at line {e.lineno} column {e.colno} ({e.msg})"
            else:
                why = "JSON nested too deeply"
            found.append(LoadProblem(path, first, f"{why}; {where} skipped, {after}"))
            if at < 0:
                break
            pos = at + 1
            continue
        docs.append((line_at(pos), json.dumps(value, separators=(",", ":"))))
        pos = end
    if docs:
        problems.extend(found)
    return docs


REPLACED_SURROGATE: Final = (
    "a JSON string held a lone UTF-16 surrogate escape (such as \\ud83d: text cut in the"
    " middle of an emoji); it was read as U+FFFD, the replacement character"
)
_ESCAPES: Final = re.compile(
    r"\\\\"  # an escaped backslash, so that the "u" after it starts no escape
    r"|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"  # a surrogate pair
    r"|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"  # a lone surrogate
)


def repair_surrogates(text: str) -> str | None:
    """``text`` with every lone surrogate escape replaced by ``\\ufffd``; None if none."""
    if "\\u" not in text:
        return None
    count = 0

    def replace(match: re.Match[str]) -> str:
        nonlocal count
        if len(match.group()) != 6:
            return match.group()
        count += 1
        return "\\ufffd"

    fixed = _ESCAPES.sub(replace, text)
    return fixed if count else None


def replace_surrogate_chars(text: str) -> str:
    """``text`` with lone surrogate characters (not escapes) replaced by U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text
