"""An alert and its three renderings: the JSON payload, a terminal line and a Slack message.

The JSON payload is the contract that webhooks, ``--jsonl`` and ``--exec`` receive; it is
documented field by field in ``docs/watch.md``. Trace content (agent names, task ids) is
rendered as text: control characters are escaped on the terminal and Slack's markup
characters are escaped in Slack messages, so a span cannot inject formatting or links.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

PAYLOAD_SCHEMA: Final = "handoffscope.alert/v1"
"""Value of the payload's ``schema`` field; bumped on any incompatible change."""

FIRING: Final = "firing"
RESOLVED: Final = "resolved"

RULE_SLOW_VALIDATION: Final = "slow-validation"
"""A validation answer slower than the timeout (the auditor's rule of the same id)."""
RULE_P95: Final = "validation-p95-over-budget"
"""Rolling p95 validation latency of one receiver over budget (firing) or back under (resolved)."""


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert: a rule fired (or resolved) for a handoff or a receiver."""

    rule: str
    status: str
    severity: str
    summary: str
    key: str
    """What dedupe and cooldown are keyed on: the handoff, or the receiver for p95 edges."""
    event_time_ns: int
    """Event time of the evidence (a span's end), nanoseconds since the epoch."""
    receiver: str | None = None
    sender: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    task_id: str | None = None
    handoff_id: str | None = None
    idempotency_key: str | None = None
    value: float | None = None
    threshold: float | None = None
    unit: str | None = None
    samples: int | None = None
    window_s: float | None = None
    source: str | None = None
    """``file:line`` of the span that triggered the alert, when known."""
    detected_at: str = field(default_factory=lambda: _iso(datetime.now(UTC)))

    @property
    def id(self) -> str:
        """A stable id: the same alert gets the same id, also when delivered twice."""
        basis = f"{self.rule}|{self.status}|{self.key}"
        if self.rule == RULE_P95:
            basis += f"|{self.event_time_ns}"
        return hashlib.sha256(basis.encode()).hexdigest()[:20]

    def payload(self) -> dict[str, Any]:
        """The documented JSON payload (webhook body, ``--jsonl`` line, ``--exec`` stdin)."""
        return {
            "schema": PAYLOAD_SCHEMA,
            "id": self.id,
            "rule": self.rule,
            "status": self.status,
            "severity": self.severity,
            "summary": self.summary,
            "event_time": _iso(datetime.fromtimestamp(self.event_time_ns / 1e9, UTC)),
            "detected_at": self.detected_at,
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "task_id": self.task_id,
            "handoff_id": self.handoff_id,
            "idempotency_key": self.idempotency_key,
            "sender": self.sender,
            "receiver": self.receiver,
            "value": self.value,
            "threshold": self.threshold,
            "unit": self.unit,
            "samples": self.samples,
            "window_s": self.window_s,
            "source": self.source,
        }

    def to_json(self) -> dict[str, Any]:
        """Everything needed to rebuild the alert (kept in the outbox across restarts)."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Alert:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


def render_line(alert: Alert) -> str:
    """One readable terminal line."""
    status = "FIRING" if alert.status == FIRING else "RESOLVED"
    parts = [alert.payload()["event_time"], status, alert.rule, _terminal(alert.summary)]
    if alert.trace_id:
        parts.append(f"trace={_terminal(alert.trace_id)}")
    if alert.source:
        parts.append(f"[{_terminal(alert.source)}]")
    return "  ".join(parts)


def render_slack(alert: Alert) -> dict[str, Any]:
    """A Slack incoming-webhook message (``text`` fallback plus Block Kit blocks)."""
    icon = ":rotating_light:" if alert.status == FIRING else ":white_check_mark:"
    head = f"{icon} *{_slack(alert.rule)}* {alert.status}: {_slack(alert.summary)}"
    facts = [
        f"*{label}:* `{_slack(str(value))}`"
        for label, value in (
            ("receiver", alert.receiver),
            ("sender", alert.sender),
            ("task", alert.task_id),
            ("trace", alert.trace_id),
            ("source", alert.source),
        )
        if value
    ]
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": head}}]
    if facts:
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(facts)}]}
        )
    return {"text": f"{alert.rule} {alert.status}: {_slack(alert.summary)}", "blocks": blocks}


def render_json(alert: Alert) -> str:
    """The payload as one compact JSON line."""
    return json.dumps(alert.payload(), separators=(",", ":"), ensure_ascii=False)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _terminal(text: str) -> str:
    # Escape control characters so a span attribute cannot move the cursor or recolour text.
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in text)


def _slack(text: str) -> str:
    # Slack's mrkdwn treats these three as markup (links, mentions); everything else is text.
    return _terminal(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
