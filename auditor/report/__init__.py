"""Rendering an :class:`~auditor.AuditResult` for people and machines.

``render(result, fmt)`` returns the report as text: ``table`` (a terminal report),
``json`` (the documented schema in docs/auditor.md), ``markdown`` (a pull-request comment)
or ``junit`` (one test case per rule, for CI). Trace content is always rendered as plain
text: markup, HTML or XML in an agent name can never change the report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from auditor.report.json_report import render_json
from auditor.report.junit import render_junit
from auditor.report.markdown import render_markdown
from auditor.report.table import render_table

if TYPE_CHECKING:
    from auditor.audit import AuditResult

__all__ = ["FORMATS", "render"]

_RENDERERS: Final[dict[str, Callable[..., str]]] = {
    "table": render_table,
    "json": render_json,
    "markdown": render_markdown,
    "junit": render_junit,
}
FORMATS: Final = tuple(_RENDERERS)
"""Output formats of ``handoffscope audit --format``."""


def render(
    result: AuditResult, fmt: str = "table", *, width: int = 100, color: bool = False
) -> str:
    """``result`` as text in format ``fmt`` (``width`` and ``color`` apply to ``table``)."""
    if fmt == "table":
        return render_table(result, width=width, color=color)
    return _RENDERERS[fmt](result)
