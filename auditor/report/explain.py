"""The ``--explain`` section every format shares: per trace of other frameworks' spans, the
agents found and the evidence that named each, the edges with their kind of evidence, and the
spans whose tokens no agent could be charged with."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from auditor.report.values import clean, count, short_id

if TYPE_CHECKING:
    from auditor.audit import AuditResult

__all__ = ["explain_lines", "shows_structure"]


def shows_structure(result: AuditResult) -> bool:
    """Whether a report carries the structure: asked for, or the verdict rests on it."""
    return result.structure is not None and (result.explained or bool(result.not_judged()))


def explain_lines(result: AuditResult) -> list[str]:
    """The section as plain lines (trace content cleaned to one printable line each)."""
    structure = result.structure
    if structure is None:
        return ["No span of another instrumentation: nothing to explain."]
    out = []
    for t in structure.traces:
        out.append(f"trace {short_id(t['trace_id'])}:")
        out += [
            f"  agent {clean(a['agent'])}: named by {', '.join(a['evidence'])}" for a in t["agents"]
        ] or ["  no agent named"]
        out += [
            f"  edge {clean(e['sender'])} -> {clean(e['receiver'])}: {e['evidence']}"
            f" (span {short_id(e['span_id'])})"
            for e in t["edges"]
        ]
        if t["unrecognised"]:
            out.append(
                f"  delegation not recognised for: {', '.join(map(clean, t['unrecognised']))}"
            )
        out += [_uncharged(s) for s in t["uncharged"]]
    if structure.scattered:
        out.append(
            "agents each in traces of their own, delegation not recognised: "
            + ", ".join(map(clean, structure.scattered))
        )
    return out


def _uncharged(span: dict[str, Any]) -> str:
    return (
        f"  charged to no agent: {clean(span['name'])} (span {short_id(span['span_id'])}),"
        f" {count(span['input_tokens'])} input / {count(span['output_tokens'])} output tokens"
    )
