"""What the readers need to know of JSON text beyond parsing it: whole documents written
back to back, exports that hold no span, and lone UTF-16 surrogates, which DuckDB refuses
and a model's output cut mid-emoji carries.

Many real OTLP files hold one indented JSON document, or several back to back (see
``tests/fixtures/otlp``). A file whose first line opens a JSON value it does not close is
such a file (:func:`opens_document`), and :func:`split` cuts it into whole documents, each
compacted to one line that keeps the number of the document's first line, so problems are
reported where they are. audit reads a file at once; watch reads one that is still being
written, so text after the last complete document is held back until the file grows: an
incomplete document is told apart from a broken one by where the parser stops (on the
unfinished last line, versus before it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

from auditor.loading.problems import LoadProblem, first_wins, not_utf8, scopes_of
from auditor.loading.sources import as_lf

__all__ = [
    "FIRST_LINE_BYTES",
    "REPLACED_SURROGATE",
    "Pending",
    "Split",
    "WHITESPACE",
    "documents",
    "is_empty_export",
    "is_json",
    "opens_document",
    "opens_value",
    "repair_surrogates",
    "replace_surrogate_chars",
    "split",
]

WHITESPACE: Final = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
"""Every character Python's ``str.strip()`` takes away: a line of nothing else is blank,
on every path (the SQL of the parallel path trims these too, not only JSON's four)."""


def is_empty_export(text: str) -> bool:
    """True for a valid trace export that simply holds no span (nothing to report)."""
    try:
        value = json.loads(text, object_pairs_hook=partial(first_wins, []))
    except (ValueError, RecursionError):
        return False
    if not isinstance(value, dict) or not isinstance(value.get("resourceSpans"), list):
        return False
    # Anything but a list where a list belongs (a number, false, "") is a problem to
    # report, not an empty export.
    return all(
        isinstance(rs, dict)
        and ((scopes := scopes_of(rs)[1]) is None or isinstance(scopes, list))
        and all(isinstance(ss, dict) and ss.get("spans") in (None, []) for ss in scopes or [])
        for rs in value["resourceSpans"]
    )


def opens_value(first_line: bytes) -> bool:
    """True when a file's ``first_line`` opens a JSON value it does not close: the file holds
    pretty-printed documents, to be read whole, not line by line (audit's and watch's rule).
    A leading byte-order mark is ignored."""
    first = first_line.removeprefix(b"\xef\xbb\xbf").strip()
    if not first.startswith((b"{", b"[")):
        return False
    text = first.decode("utf-8", "replace")
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        # The value goes on below only if the line ran out before it could close: a line
        # such as `{oops` is broken where it stands, a malformed line of JSON-lines.
        return e.pos >= len(text)
    except (ValueError, RecursionError):
        return False
    return False


FIRST_LINE_BYTES: Final = 64 * 1024
"""How far the first line is looked at to decide whether a file holds whole documents."""


def opens_document(head: bytes) -> bool:
    """True when ``head`` (a file's first bytes) starts with a line that opens a JSON
    value it does not close (:func:`opens_value`), blank lines aside: the file holds
    pretty-printed documents.

    A first line that is not finished yet (no newline, or longer than ``FIRST_LINE_BYTES``)
    decides nothing: a reader following a growing file reads it as JSON-lines, which holds
    such a line back anyway, and looks again while nothing of it has been read.
    """
    head = as_lf(head).removeprefix(b"\xef\xbb\xbf")
    # Blank lines before the first document are skipped, as between documents.
    text = head[:FIRST_LINE_BYTES].decode("utf-8", "surrogateescape")
    blank = text[: len(text) - len(text.lstrip(WHITESPACE))]
    start = len(blank.encode("utf-8", "surrogateescape"))
    end = head.find(b"\n", start, start + FIRST_LINE_BYTES)
    return end >= 0 and opens_value(head[start:end])


def is_json(text: str) -> bool:
    """True when ``text`` is one whole JSON value."""
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


@dataclass(frozen=True, slots=True)
class Pending:
    """The text after the last complete document: still being written, or broken."""

    line: int
    """Line where that text starts."""
    last: int
    """Last line of that text that is not blank."""
    why: str
    """What the JSON parser said about it."""
    where: str
    """Where the parser stopped (``line 12 column 5``)."""
    incomplete: bool
    """True when it may still become a whole document as the file grows (it stops on the
    unfinished last line); False when it is broken whatever is appended."""


@dataclass(slots=True)
class Split:
    """What :func:`split` found in (the unread part of) a file of documents."""

    documents: list[tuple[int, str]] = field(default_factory=list)
    """``(first line, compact JSON)`` of every complete document, in file order."""
    consumed: int = 0
    """Bytes read or skipped: through the last complete document (or skipped text), plus
    the blank space after it when nothing else follows."""
    newlines: int = 0
    """Newlines in those bytes."""
    skipped: list[LoadProblem] = field(default_factory=list)
    """One problem per stretch of text that is not JSON and was skipped (file and line)."""
    pending: Pending | None = None


def split(
    data: bytes,
    *,
    path: str,
    first_line: int = 1,
    at_start: bool = True,
    settled: bool = True,
    cr: bool | None = None,
    after_cr: bool = False,
    line_offset: int = 0,
) -> Split:
    """Split ``data``, a file of JSON documents (or its unread part), into whole documents.

    The one document splitter of audit and watch. ``first_line`` is the number of the line
    ``data`` starts on and ``at_start`` says that it starts the file (where a byte-order mark
    may stand). After text that is not JSON and cannot become JSON, reading goes on at the
    next line that opens a document (``{`` in the first column); the text at the end that is
    not a whole document is left in :attr:`Split.pending`. An incomplete document at the end
    is read past in the same way only when ``settled`` (the file stopped growing, or is
    read once, as the audit does): until then the rest of it may still be on its way.
    ``cr`` says whether the file ends its lines with CR alone, as judged from its start
    (:func:`auditor.loading.sources.cr_line_ends`); None judges from ``data``, the whole file.
    ``after_cr`` says that the byte before ``data`` was a CR
    (:func:`auditor.loading.sources.as_lf`);
    ``line_offset``, how many bytes of the line ``data`` starts inside come before it (a
    byte-order mark aside), to name a byte of that line by its place in the whole line.
    """
    # surrogateescape keeps every byte: the length of what was read is counted back in bytes.
    text = as_lf(data, cr, after_cr=after_cr).decode("utf-8", "surrogateescape")
    # A repeated key keeps its first value, as DuckDB reads the compacted text, and as a
    # JSON line with the same text is read.
    outermost: list[tuple[str, Any]] = []

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        outermost[:] = pairs  # the last object made is the document itself
        return first_wins([], pairs)

    decoder = json.JSONDecoder(object_pairs_hook=pairs_hook)
    out = Split()
    length = len(text)
    unfinished = text.rfind("\n") + 1  # where the last line without its newline starts
    counted, line = 0, first_line  # text[:counted] holds line - first_line newlines

    def line_at(offset: int) -> int:
        nonlocal counted, line
        line += text.count("\n", counted, offset)
        counted = offset
        return line

    pos = 1 if at_start and text.startswith("\ufeff") else 0
    done = 0
    while True:
        # Between documents, a blank line is any whitespace, as it is between lines.
        while pos < length and text[pos] in WHITESPACE:
            pos += 1
        if pos >= length:
            done = length
            break
        try:
            value, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError) as e:
            start = line_at(pos)
            if isinstance(e, json.JSONDecodeError):
                # e.lineno counts from the start of ``text``, which is on ``first_line``.
                where = f"line {first_line + e.lineno - 1} column {e.colno}"
                why = f"not valid JSON at {where} ({e.msg})"
                incomplete = e.pos >= unfinished
            else:
                where, why, incomplete = f"line {start}", "JSON nested too deeply", False
            resume = -1 if incomplete and not settled else text.find("\n{", pos)
            if resume < 0:
                last = start + text.count("\n", pos, len(text.rstrip()))
                out.pending = Pending(start, last, why, where, incomplete)
                break
            last = line_at(resume)
            lines = f"lines {start}-{last}" if last > start else f"line {start}"
            out.skipped.append(
                LoadProblem(
                    path, start, f"{why}; {lines} skipped, reading went on at line {last + 1}"
                )
            )
            pos = done = resume + 1
            continue
        first = line_at(pos)
        if (bad := _NOT_UTF8.search(text, pos, end)) is not None:
            # Bytes that are not UTF-8 (each a lone surrogate here) are read as U+FFFD, as
            # in a JSON line; the document is parsed again from the text so mended.
            start = text.rfind("\n", 0, bad.start()) + 1
            if start == 0 and at_start and text.startswith("\ufeff"):
                start = 1  # a byte-order mark is no part of the line
            byte = len(text[start : bad.start()].encode("utf-8", "surrogateescape")) + 1
            number = first + text.count("\n", pos, bad.start())
            out.skipped.append(
                LoadProblem(path, number, not_utf8(byte + (line_offset if start == 0 else 0)))
            )
            # Mended as a JSON line is decoded, each run of bad bytes one U+FFFD or more.
            raw = text[pos:end].encode("utf-8", "surrogateescape")
            value = decoder.decode(raw.decode("utf-8", "replace"))
        out.documents.append((first, _compact(value, outermost)))
        pos = done = end
    read = text[:done]
    out.consumed = len(read.encode("utf-8", "surrogateescape"))
    out.newlines = read.count("\n")
    return out


_NOT_UTF8: Final = re.compile("[\udc80-\udcff]")
"""A byte that is not UTF-8, in text decoded with ``surrogateescape``."""


def _compact(value: Any, pairs: list[tuple[str, Any]]) -> str:
    """A document's ``value`` as one line of JSON. An object keeps its repeated keys (each
    one's first value is the one read), so that a problem can still name them; ``pairs``
    are its keys and values, in order."""
    if not isinstance(value, dict) or len(pairs) == len(value):
        return json.dumps(value, separators=(",", ":"))
    members = (
        f"{json.dumps(key)}:{json.dumps(item, separators=(',', ':'))}" for key, item in pairs
    )
    return "{" + ",".join(members) + "}"


def documents(data: bytes, path: str, problems: list[LoadProblem]) -> list[tuple[int, str]]:
    """Whole JSON documents in a file's ``data`` as ``(first line, compact JSON)``; [] if
    none. What was skipped is reported in ``problems`` (only when some document was found:
    otherwise the file is read as lines instead)."""
    found = split(data, path=path)
    if not found.documents:
        return []
    problems.extend(found.skipped)
    pending = found.pending
    if pending is not None:
        lines = (
            f"lines {pending.line}-{pending.last}"
            if pending.last > pending.line
            else (f"line {pending.line}")
        )
        # Text that stops before its document closes is a tail being written (or cut).
        what = (
            f"the last document is incomplete ({pending.why}): the writer probably stopped"
            " mid-write"
            if pending.incomplete
            else pending.why
        )
        problems.append(
            LoadProblem(
                path,
                pending.line,
                f"{what}; {lines} skipped, the documents before them were loaded",
            )
        )
    return found.documents


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
