"""Pretty-printed JSON files in a followed folder: whole documents, not lines.

Many real OTLP files hold one indented JSON document, or several back to back (see
``tests/fixtures/otlp``). ``handoffscope audit`` reads them whole; ``watch`` does too: a file
whose first line opens a JSON value it does not close (audit's rule) is a document file, and
each complete document in it is handed out once, compacted to one line that keeps the
number of the document's first line, so the loader reports problems where they are.

A document file being copied in is incomplete for a while. The text after the last
complete document is then held back, like a torn last line of a JSON-lines file, and read
again when the file grows. Only text that cannot become valid by growing is reported at once:
an incomplete document is told apart from a broken one by where the parser stops (on the
unfinished last line or at the end of the text, versus before it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from auditor.json_text import opens_value

FIRST_LINE_BYTES = 64 * 1024
"""How far the first line is looked at to decide whether a file holds whole documents."""

_BOM = "\ufeff"


def opens_document(head: bytes) -> bool:
    """True when ``head`` (a file's first bytes) starts with a line that opens a JSON
    value it does not close: the file holds pretty-printed documents.

    A first line that is not finished yet (no newline, or longer than ``FIRST_LINE_BYTES``)
    decides nothing: the file is read as JSON-lines, which holds such a line back anyway, and
    looked at again while nothing of it has been read.
    """
    end = head.find(b"\n", 0, FIRST_LINE_BYTES)
    return end >= 0 and opens_value(head[:end])


@dataclass(frozen=True, slots=True)
class Pending:
    """The text after the last complete document, held back until the file changes."""

    line: int
    """Line where that text starts."""
    why: str
    """What the JSON parser said about it."""
    where: str
    """Where the parser stopped (``line 12 column 5``)."""
    incomplete: bool
    """True when it may still become a whole document as the file grows (it stops on the
    unfinished last line); False when it is broken whatever is appended."""


@dataclass(slots=True)
class Split:
    """What :func:`split` found in the unread part of a document file."""

    documents: list[tuple[int, str]] = field(default_factory=list)
    """``(first line, compact JSON)`` of every complete document, in file order."""
    consumed: int = 0
    """Bytes read or skipped: through the last complete document (or skipped text), plus
    the blank space after it when nothing else follows."""
    newlines: int = 0
    """Newlines in those bytes."""
    skipped: list[str] = field(default_factory=list)
    """One message per stretch of text that is not JSON and was skipped (file and line)."""
    pending: Pending | None = None


def split(data: bytes, *, path: str, first_line: int, at_start: bool, settled: bool) -> Split:
    """Split ``data``, the unread bytes of a document file, into whole documents.

    ``first_line`` is the number of the line ``data`` starts on and ``at_start`` says that it
    starts the file (where a byte-order mark may stand). After text that is not JSON and
    cannot become JSON, reading goes on at the next line that opens a document (``{`` in the
    first column), as the audit's reader does; the text at the end that is not a whole
    document is left in :attr:`Split.pending`. An incomplete document at the end is read
    past in the same way only when ``settled`` (the file stopped growing): until then the
    rest of it may still be on its way.
    """
    # surrogateescape keeps every byte: the length of what was read is counted back in bytes.
    text = data.decode("utf-8", "surrogateescape")
    decoder = json.JSONDecoder()
    out = Split()
    length = len(text)
    unfinished = text.rfind("\n") + 1  # where the last line without its newline starts
    counted, line = 0, first_line  # text[:counted] holds line - first_line newlines

    def line_at(offset: int) -> int:
        nonlocal counted, line
        line += text.count("\n", counted, offset)
        counted = offset
        return line

    pos = 1 if at_start and text.startswith(_BOM) else 0
    done = 0
    while True:
        while pos < length and text[pos] in " \t\r\n":
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
                bad_line = first_line + e.lineno - 1
                where = f"line {bad_line} column {e.colno}"
                why = f"not valid JSON at {where} ({e.msg})"
                incomplete = e.pos >= unfinished
            else:
                where, why, incomplete = f"line {start}", "JSON nested too deeply", False
            resume = -1 if incomplete and not settled else text.find("\n{", pos)
            if resume < 0:
                out.pending = Pending(start, why, where, incomplete)
                break
            last = line_at(resume)
            where = f"lines {start}-{last}" if last > start else f"line {start}"
            out.skipped.append(
                f"{path}:{start}: {why}; {where} skipped, reading went on at line {last + 1}"
            )
            pos = done = resume + 1
            continue
        out.documents.append((line_at(pos), json.dumps(value, separators=(",", ":"))))
        pos = done = end
    read = text[:done]
    out.consumed = len(read.encode("utf-8", "surrogateescape"))
    out.newlines = read.count("\n")
    return out
