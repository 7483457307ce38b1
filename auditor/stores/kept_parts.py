"""Each rule's findings and the figures' rows, kept beside a compacted store.

A kept report (:mod:`auditor.stores.kept`) answers only the very settings it was rendered with. Most
settings touch a small part of an audit, though: ``--fail-on`` and ``--rule``/``--skip`` no
query at all, a threshold or an exemption the one or two rules that bind it, and none of
them the figures' queries (their budget and timeout are applied afterwards). So an audit of
a store also keeps its parts in the store's hidden folder (``.NAME.derived/parts``), and a
later audit with other settings runs only the rules whose part it lacks.

Each part is kept under a key of everything it depends on:

* the store and the code, as for a kept report (:func:`auditor.stores.kept.store_key`: the store's
  files with their sizes, modification and change times; handoffscope's and DuckDB's
  versions and a digest of every file of the ``auditor`` and ``collector`` packages);
* the content of the prices file (costs estimated from prices feed rules and figures);
* for a rule, its id and the values of the parameters its SQL binds, and nothing else.

A part is read back (:meth:`Parts.findings`, :meth:`Parts.figures`) only under the same key,
which the file itself repeats, and only if its CRC-32 is sound; a part that cannot be read
is computed afresh. Only the newest
:data:`MOST` parts are kept. Parts are JSON, never code: a store may come from elsewhere.

A rule's part holds its findings twice: as JSON columns (one list per field), made into
:class:`~auditor.Finding` objects only when someone reads them, and as the text the JSON
report writes for them, which a JSON report splices in as it is
(:mod:`auditor.findings.rule_findings`): a hundred thousand findings cost more to decode and encode
again than the rest of the audit. (An audit writing a table or Markdown keeps no text: a
later JSON report encodes those findings, as it does findings orjson cannot write.) After
them come the columns of the first :data:`FIRST` findings alone, all that a table or
Markdown report shows of a rule. A line before them gives the number of findings, the length
of each section and a CRC-32 of all three, so that damage is caught as the part is read,
while the rule can still run instead. The text is
used only if it reads as a JSON list of that many values, so a part, whoever wrote it,
cannot break the report's JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zlib
from datetime import date, datetime
from decimal import Decimal
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from auditor.errors import AuditError
from auditor.findings.finding import FINDING_FIELDS, Finding
from auditor.findings.rule_findings import RuleFindings
from auditor.report.json_report import findings_text
from auditor.report.values import no_gc
from auditor.stores.finding_columns import (
    columns_of,
    dumped,
    items_of,
    list_decoder,
    shaped,
)
from auditor.stores.kept import prices_digest, store_key
from auditor.stores.saved import location

if TYPE_CHECKING:
    from collections.abc import Sequence

    from auditor.rules import Rule
    from auditor.settings import AuditSettings

__all__ = ["FIRST", "MOST", "Parts"]

MOST: Final = 200
"""How many parts a store keeps (the newest; older ones are removed)."""

FIRST: Final = 32
"""How many of a rule's first findings its part also keeps alone (a table report shows 8,
a Markdown one 20)."""

_FORMAT: Final = 4
_FOLDER: Final = "parts"
_SUFFIX: Final = ".part"
_TYPE: Final = "\0type"  # no column of a figure is called that


class Parts:
    """The parts kept beside one store for one audit's settings."""

    def __init__(self, folder: Path, base: dict[str, Any], settings: AuditSettings) -> None:
        self._folder = folder
        self._base = base
        self._values = settings.parameters()

    @classmethod
    def of(cls, files: Sequence[str], settings: AuditSettings) -> Parts | None:
        """The parts of the store made of ``files`` (as the audit lists them); None when
        they cannot be told (files from several folders, a file or the prices file that
        cannot be read)."""
        folder = location(files) if files else None
        if folder is None:
            return None
        try:
            base = {**store_key(files), "parts": _FORMAT, "prices": prices_digest(settings)}
        except OSError:
            return None
        return cls(folder / _FOLDER, base, settings)

    def findings(self, rule: Rule) -> RuleFindings | None:
        """``rule``'s findings as kept, in the order it returned them; None when none are
        (or the part is damaged). They become objects only when asked for: a JSON report
        takes their text as kept, checked to be a list of as many JSON values."""
        path, found = self._part(rule)
        if found is None:
            return None
        count, columns, text, first = found
        held = min(count, FIRST)

        def load() -> list[Finding]:
            return _findings(rule, columns, count, path)

        def load_first() -> list[Finding]:
            return _findings(rule, first, held, path)

        return RuleFindings(rule, count=count, load=load, json_text=text, first=(load_first, held))

    def _part(
        self, rule: Rule
    ) -> tuple[Path, tuple[int, memoryview, memoryview | None, memoryview] | None]:
        """Where ``rule``'s part is, and what :func:`_split` makes of it (None when it
        cannot be read, or is not whole)."""
        path, key = self._path(self._rule_key(rule))
        try:
            data = path.read_bytes()
        except OSError:
            return path, None
        return path, _split(data, key)

    def keep_findings(
        self, rule: Rule, findings: list[Finding], *, text: bool = True
    ) -> RuleFindings:
        """Keep ``rule``'s ``findings`` (it ran with these settings over this store), with
        the JSON report's text of them unless not ``text``; return them as a report takes
        them."""
        json_text = findings_text(findings) if text else None
        body = _columns(findings)
        # A rule with no more findings than that keeps its columns twice, as they are.
        first = body if len(findings) <= FIRST else _columns(findings[:FIRST])
        self._keep(rule, len(findings), body, json_text, first)
        return RuleFindings(rule, findings, json_text=json_text)

    def columns(self, rule: Rule) -> tuple[list[list[Any]], list[bytes]] | None:
        """``rule``'s findings as kept: their columns (one list per field of a
        :class:`~auditor.Finding` after its rule and severity) and the JSON report's text
        of each; None when none are kept with their text (or the part is damaged)."""
        found = self._part(rule)[1]
        if found is None:
            return None
        count, body, text, _ = found
        items = items_of(text, count)
        try:
            columns = json.loads(bytes(body))
        except ValueError:
            return None
        if items is None or not shaped(columns, count):
            return None
        return columns, items

    def keep_columns(
        self, rule: Rule, columns: list[list[Any]], items: list[bytes]
    ) -> RuleFindings:
        """Keep the findings of ``rule`` given as :meth:`columns` gives them (their
        columns, and each one's text); return them as a report takes them, made into
        objects only when asked for."""
        count = len(items)
        json_text = b"[]" if not items else b"[\n    " + b",\n    ".join(items) + b"\n  ]"
        body = dumped(columns)
        first = body if count <= FIRST else dumped([c[:FIRST] for c in columns])
        self._keep(rule, count, body, json_text, first)

        def load() -> list[Finding]:
            return list(map(Finding, repeat(rule.id), repeat(rule.severity), *columns))

        def load_first() -> list[Finding]:
            return load()[:FIRST]

        held = min(count, FIRST)
        return RuleFindings(
            rule, count=count, load=load, json_text=json_text, first=(load_first, held)
        )

    def _keep(
        self,
        rule: Rule,
        count: int,
        body: bytes | None,
        json_text: bytes | None,
        first: bytes | None,
    ) -> None:
        """Write ``rule``'s part: ``count`` findings as the columns ``body``, their report
        text and the columns ``first`` of the first :data:`FIRST` (nothing without
        columns)."""
        if body is None or first is None:
            return
        written = json_text or b""
        head = {
            "count": count,
            "columns": len(body),
            "text": None if json_text is None else len(written),
            "first": len(first),
            "crc32": zlib.crc32(first, zlib.crc32(written, zlib.crc32(body))),
        }
        line = json.dumps(head).encode() + b"\n"
        self._write_bytes(self._rule_key(rule), [line, body, written, first])

    def figures(self) -> dict[str, list[dict[str, Any]]] | None:
        """The figures' rows as kept (:func:`auditor.figures.figure_rows`); None when not."""
        found = self._read({"figures": True})
        return found if isinstance(found, dict) else None

    def keep_figures(self, found: dict[str, list[dict[str, Any]]]) -> None:
        """Keep the figures' rows ``found`` over this store."""
        try:
            text = json.dumps(found, default=_encoded)
            # Kept only if it reads back as it is (a map with other keys than text would not).
            if repr(json.loads(text, object_hook=_decoded)) != repr(found):
                return
        except (TypeError, ValueError):
            return
        self._write({"figures": True}, found)

    def _rule_key(self, rule: Rule) -> dict[str, Any]:
        return {"rule": rule.id, "params": {n: self._values[n] for n in rule.params}}

    def _path(self, key: dict[str, Any]) -> tuple[Path, str]:
        text = json.dumps({**self._base, **key}, sort_keys=True)
        name = hashlib.sha256(text.encode()).hexdigest()[:32] + _SUFFIX
        return self._folder / name, text

    def _read(self, key: dict[str, Any]) -> Any:
        path, text = self._path(key)
        try:
            with path.open("rb") as handle:
                if handle.readline().decode("utf-8", "replace").rstrip("\n") != text:
                    return None
                crc = handle.readline()
                body = handle.read()
                # A digit changed on disk still reads as JSON: the CRC-32 tells.
                if not crc.rstrip(b"\n").isdigit() or int(crc) != zlib.crc32(body):
                    return None
                return json.loads(body, object_hook=_decoded)
        except (OSError, ValueError):
            return None

    def _write(self, key: dict[str, Any], value: Any) -> None:
        """Keep ``value`` under ``key``, as JSON."""
        try:
            body = json.dumps(value, default=_encoded, separators=(",", ":")).encode()
        except (TypeError, ValueError):
            return  # a value JSON cannot carry exactly: computed again next time
        self._write_bytes(key, [b"%d\n" % zlib.crc32(body), body])

    def _write_bytes(self, key: dict[str, Any], body: list[bytes]) -> None:
        """Keep the bytes ``body`` (written one after another) under ``key``."""
        path, text = self._path(key)
        try:
            self._folder.mkdir(parents=True, exist_ok=True)
            # Written whole, then renamed: a concurrent audit reads the old part or the new.
            handle, partial = tempfile.mkstemp(dir=self._folder, suffix=".partial")
            try:
                with os.fdopen(handle, "wb") as out:
                    out.writelines([text.encode("utf-8"), b"\n", *body])
                os.replace(partial, path)
            except BaseException:
                Path(partial).unlink(missing_ok=True)
                raise
            parts = sorted(
                self._folder.glob("*" + _SUFFIX), key=lambda p: p.stat().st_mtime_ns, reverse=True
            )
            for old in parts[MOST:]:
                old.unlink(missing_ok=True)
        except OSError:
            return  # a store in a folder that cannot be written to keeps nothing


def _columns(findings: list[Finding]) -> bytes | None:
    """``findings`` as JSON columns (one list per field); None when JSON cannot carry them
    exactly (they are computed again next time)."""
    return dumped(columns_of(findings))


def _split(data: bytes, key: str) -> tuple[int, memoryview, memoryview | None, memoryview] | None:
    """A rule's part ``data`` as its count of findings, their columns (JSON, unread), their
    report text and the columns of the first :data:`FIRST`; None unless it is whole and kept
    under ``key``."""
    newline = data.find(b"\n")
    second = data.find(b"\n", newline + 1)
    if newline < 0 or second < 0 or data[:newline] != key.encode("utf-8"):
        return None
    try:
        head = json.loads(data[newline + 1 : second])
        count, columns, length, first, crc = (
            head[k] for k in ("count", "columns", "text", "first", "crc32")
        )
    except (ValueError, TypeError, KeyError):
        return None
    body = memoryview(data)[second + 1 :]  # tens of megabytes: sliced, never copied
    if not (
        _whole(count)
        and _whole(columns)
        and (length is None or _whole(length))
        and _whole(first)
        and columns + (length or 0) + first == len(body)
        and zlib.crc32(body) == crc
    ):
        return None
    end = columns + (length or 0)
    if length is None:
        return count, body[:columns], None, body[end:]
    # The rest of a part is ASCII (JSON as json.dumps writes it): one check over it all is
    # quicker than decoding the text, needed only when it is not.
    text = _findings_text(body[columns:end], count, data.isascii())
    return None if text is None else (count, body[:columns], text, body[end:])


def _whole(value: Any) -> bool:
    return type(value) is int and value >= 0


def _findings_text(data: memoryview, count: int, ascii: bool) -> memoryview | None:
    """``data`` as text to splice into a report, when it is a JSON list of ``count`` values
    in UTF-8 (``ascii`` when known to be ASCII), written as the report writes it
    (:func:`auditor.report.json_report.findings_text`).

    The text itself is checked, whatever digest came with it: a part is JSON, whoever wrote
    it, and splicing it in must leave the report valid JSON."""
    if count == 0:
        return data if data == b"[]" else None
    if data[:6] != b"[\n    " or data[-4:] != b"\n  ]":
        return None  # the items are spliced from between these
    decode = list_decoder()
    if decode is None:  # pragma: no cover - msgspec comes with the [cli] extra
        return None
    try:
        # Read as a list, each value checked as it is skipped over, never made an object.
        values = decode(data)
        if not ascii:
            str(data, "utf-8")  # the check alone: the text is spliced as bytes
    except (ValueError, UnicodeDecodeError):  # msgspec.DecodeError is a ValueError
        return None
    return data if len(values) == count else None


def _findings(rule: Rule, columns: memoryview, count: int, path: Path) -> list[Finding]:
    """The findings of ``rule`` kept as ``columns`` at ``path`` (whose digest was sound)."""
    with no_gc():
        try:
            found = json.loads(bytes(columns))
        except ValueError:
            found = None
        # Kept as columns (one list per field): fewer objects to parse than rows.
        if (
            not isinstance(found, list)
            or len(found) != len(FINDING_FIELDS) - 2
            or not all(isinstance(column, list) and len(column) == count for column in found)
        ):
            raise AuditError(
                f"{path}: the findings kept for {rule.id} cannot be read; remove the file and"
                " audit again",
                title="kept findings damaged",
            )
        return list(map(Finding, repeat(rule.id), repeat(rule.severity), *found))


def _encoded(value: Any) -> dict[str, str]:
    # The figures' rows hold times and (from DuckDB's sums) decimals besides JSON's own types.
    if isinstance(value, datetime):
        return {_TYPE: "datetime", "text": value.isoformat()}
    if isinstance(value, date):
        return {_TYPE: "date", "text": value.isoformat()}
    if isinstance(value, Decimal):
        return {_TYPE: "decimal", "text": str(value)}
    raise TypeError(f"cannot keep a {type(value).__name__}")


def _decoded(item: dict[str, Any]) -> Any:
    kind = item.get(_TYPE)
    if kind is None:
        return item
    if kind == "datetime":
        return datetime.fromisoformat(item["text"])
    if kind == "date":
        return date.fromisoformat(item["text"])
    if kind == "decimal":
        return Decimal(item["text"])
    raise ValueError(f"unknown kept type {kind!r}")
