"""Rendering an :class:`~auditor.AuditResult` for people and machines.

``render(result, fmt)`` returns the report as text: ``table`` (a terminal report),
``json`` (the documented schema in docs/auditor.md), ``markdown`` (a pull-request comment)
or ``junit`` (one test case per rule, for CI). Trace content is always rendered as plain
text: markup, HTML or XML in an agent name can never change the report.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from auditor.audit import AuditResult

__all__ = ["FORMATS", "render", "render_chunks"]

# Each format's module is imported when it renders: the table's pulls in rich, which a JSON
# report (the one CI and scripts ask for) never needs.
_RENDERERS: Final[dict[str, tuple[str, str]]] = {
    "table": ("auditor.report.table", "render_table"),
    "json": ("auditor.report.json_report", "render_json"),
    "markdown": ("auditor.report.markdown", "render_markdown"),
    "junit": ("auditor.report.junit", "render_junit"),
}
FORMATS: Final = tuple(_RENDERERS)
"""Output formats of ``handoffscope audit --format``."""


def render(
    result: AuditResult, fmt: str = "table", *, width: int = 100, color: bool = False
) -> str:
    """``result`` as text in format ``fmt`` (``width`` and ``color`` apply to ``table``)."""
    module, name = _RENDERERS[fmt]
    renderer = getattr(import_module(module), name)
    if fmt == "table":
        return str(renderer(result, width=width, color=color))
    return str(renderer(result))


def render_chunks(
    result: AuditResult, fmt: str = "table", *, width: int = 100, color: bool = False
) -> list[bytes | memoryview]:
    """What :func:`render` returns, as UTF-8 in chunks to write one after another. The JSON
    report is written as such from the start (:func:`~auditor.report.json_report.json_chunks`):
    tens of megabytes of findings, joined, decoded and encoded again, cost a tenth of a
    second."""
    if fmt == "json":
        module, _ = _RENDERERS[fmt]  # imported when it renders, as the other formats are
        return list(import_module(module).json_chunks(result))
    return [render(result, fmt, width=width, color=color).encode("utf-8")]
