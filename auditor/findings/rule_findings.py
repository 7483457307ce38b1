"""One rule's findings in an audit, made into objects only when someone asks for them.

An audit of a compacted store with new settings runs only the rules those settings touch and
takes the other rules' findings as kept beside the store (:mod:`auditor.stores.kept_parts`). A
hundred thousand of them cost more to make into :class:`~auditor.Finding` objects than the
rest of the audit, and a JSON report needs none of them: each part keeps its findings'
text as the report writes it, which the report splices in (:attr:`RuleFindings.json_text`).
The counts, the verdict and the exit code need only how many findings each rule has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from auditor.errors import AuditError

if TYPE_CHECKING:
    from auditor.audit import Finding
    from auditor.rules import Rule

__all__ = ["RuleFindings"]


class RuleFindings:
    """The findings of one rule in an audit (or, with ``rule`` None, of any rules, in the
    order given), held as objects or kept beside a store until :attr:`findings` is read."""

    __slots__ = ("_findings", "_first", "_load", "count", "json_text", "rule")

    rule: Rule | None
    """The rule whose findings these are (every one has its id and severity); None when
    they may be any rules' (a result built from a list of findings)."""
    count: int
    """How many findings there are."""
    json_text: bytes | memoryview | None
    """The findings as the JSON report writes them (UTF-8: a list, indented as the value
    of the report's ``findings`` key), when this text is at hand; None when it is not."""

    def __init__(
        self,
        rule: Rule | None,
        findings: list[Finding] | None = None,
        *,
        count: int | None = None,
        load: Callable[[], list[Finding]] | None = None,
        json_text: bytes | memoryview | None = None,
        first: tuple[Callable[[], list[Finding]], int] | None = None,
    ) -> None:
        """``findings`` as objects; or without them, ``count`` findings that ``load``
        returns when first asked for, and with ``first`` a function returning the first of
        them without the others and how many it returns."""
        if findings is None:
            if count is None or load is None:
                raise TypeError("RuleFindings needs findings, or a count and a load")
        elif count is not None and count != len(findings):
            raise ValueError(f"{len(findings)} findings, not {count}")
        self.rule = rule
        self._findings = findings
        self._load = None if findings is not None else load
        self._first = None if findings is not None else first
        self.count = len(findings) if findings is not None else int(count or 0)
        self.json_text = json_text

    @property
    def findings(self) -> list[Finding]:
        """The findings as objects (loaded on first access). Raises :class:`AuditError`
        when kept ones cannot be read back as many as were counted."""
        if self._findings is None:
            assert self._load is not None
            found = self._load()
            if len(found) != self.count:
                name = self.rule.id if self.rule is not None else "a rule"
                raise AuditError(
                    f"the findings kept for {name} read back as {len(found)}, not {self.count}",
                    title="kept findings damaged",
                )
            self._findings, self._load, self._first = found, None, None
        return self._findings

    def first(self, limit: int) -> list[Finding]:
        """The first ``limit`` findings, as objects: a table shows a rule's first few, and a
        hundred thousand kept ones cost more to make into objects than the rest of an audit
        of a store with new settings."""
        if self._first is not None:
            load, held = self._first
            if limit <= held or held == self.count:
                return load()[:limit]
        return self.findings[:limit]

    @property
    def loaded(self) -> bool:
        """Whether the findings are objects already (reading :attr:`findings` costs
        nothing)."""
        return self._findings is not None

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        name = "any rules" if self.rule is None else self.rule.id
        state = "loaded" if self.loaded else "kept"
        return f"<RuleFindings {name}: {self.count} findings, {state}>"
