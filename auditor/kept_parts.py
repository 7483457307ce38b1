"""Each rule's findings and the figures' rows, kept beside a compacted store.

A kept report (:mod:`auditor.kept`) answers only the very settings it was rendered with. Most
settings touch a small part of an audit, though: ``--fail-on`` and ``--rule``/``--skip`` no
query at all, a threshold or an exemption the one or two rules that bind it, and none of
them the figures' queries (their budget and timeout are applied afterwards). So an audit of
a store also keeps its parts in the store's hidden folder (``.NAME.derived/parts``), and a
later audit with other settings runs only the rules whose part it lacks.

Each part is kept under a key of everything it depends on:

* the store and the code, as for a kept report (:func:`auditor.kept.store_key`: the store's
  files with their sizes, modification and change times; handoffscope's and DuckDB's
  versions and a digest of every file of the ``auditor`` and ``collector`` packages);
* the content of the prices file (costs estimated from prices feed rules and figures);
* for a rule, its id and the values of the parameters its SQL binds, and nothing else.

A part is read back (:meth:`Parts.findings`, :meth:`Parts.figures`) only under the same key,
which the file itself repeats; a part that cannot be read is computed afresh. Only the newest
:data:`MOST` parts are kept. Parts are JSON, never code: a store may come from elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from datetime import date, datetime
from decimal import Decimal
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from auditor.kept import prices_digest, store_key
from auditor.report.values import no_gc
from auditor.saved import location

if TYPE_CHECKING:
    from collections.abc import Sequence

    from auditor.audit import Finding
    from auditor.rules import Rule
    from auditor.settings import AuditSettings

__all__ = ["MOST", "Parts"]

MOST: Final = 200
"""How many parts a store keeps (the newest; older ones are removed)."""

_FORMAT: Final = 1
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
            base = {"format": _FORMAT, **store_key(files), "prices": prices_digest(settings)}
        except OSError:
            return None
        return cls(folder / _FOLDER, base, settings)

    def findings(self, rule: Rule) -> list[Finding] | None:
        """``rule``'s findings as kept, in the order it returned them; None when none are."""
        from auditor.audit import FINDING_FIELDS, Finding

        with no_gc():
            found = self._read(self._rule_key(rule))
            if not isinstance(found, list):
                return None
            # Kept as columns (one list per field): fewer objects to parse than rows.
            if (
                len(found) != len(FINDING_FIELDS) - 2
                or not all(isinstance(column, list) for column in found)
                or len({len(column) for column in found}) > 1
            ):
                return None
            return list(map(Finding, repeat(rule.id), repeat(rule.severity), *found))

    def keep_findings(self, rule: Rule, findings: list[Finding]) -> None:
        """Keep ``rule``'s ``findings`` (it ran with these settings over this store)."""
        from auditor.audit import FINDING_FIELDS

        # A finding's own fields but its rule's id and severity, which the rule gives back.
        columns = [[getattr(f, n) for f in findings] for n in FINDING_FIELDS[2:]]
        self._write(self._rule_key(rule), columns)

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
                return json.loads(handle.read(), object_hook=_decoded)
        except (OSError, ValueError):
            return None

    def _write(self, key: dict[str, Any], value: Any) -> None:
        path, text = self._path(key)
        try:
            body = json.dumps(value, default=_encoded, separators=(",", ":"))
        except (TypeError, ValueError):
            return  # a value JSON cannot carry exactly: computed again next time
        try:
            self._folder.mkdir(parents=True, exist_ok=True)
            # Written whole, then renamed: a concurrent audit reads the old part or the new.
            handle, partial = tempfile.mkstemp(dir=self._folder, suffix=".partial")
            try:
                with os.fdopen(handle, "wb") as out:
                    out.write(text.encode("utf-8") + b"\n" + body.encode("utf-8"))
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
