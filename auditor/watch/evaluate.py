"""The DuckDB side of ``watch``: new lines in, alerts out.

New lines go through the auditor's loader (the ``Reader`` behind ``auditor.append_lines``)
into one ``spans`` table, exactly as ``handoffscope audit`` reads files. Alerts are queries
over that table:

* ``slow-validation``: the auditor's own rule, run with ``--validation-timeout``; one alert
  per offending handoff (trace, task, sender, receiver), however many attempts were slow;
* ``validation-p95-over-budget``: a rolling p95 per receiver (``auditor.watch.p95``), one
  alert when it starts breaching and one when it recovers;
* any other auditor rule named with ``--rule``, reported once its finding has held for
  ``--settle`` seconds (a span it misses may still be on its way).

Spans older than ``--horizon`` (event time, counted back from the newest span) are dropped,
so memory stays bounded however long ``watch`` runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import groupby

from auditor.audit import Finding
from auditor.loading.load import LoadProblem, TraceSet, connect
from auditor.loading.readers import Reader
from auditor.rules import get_rule
from auditor.settings import AuditSettings
from auditor.watch import rules as watch_rules
from auditor.watch.alert import FIRING, RULE_SLOW_VALIDATION, Alert
from auditor.watch.dedupe import Cooldown, Deduper
from auditor.watch.follow import Line
from auditor.watch.p95 import EdgeTracker, SampleWindow
from auditor.watch.settings import WatchSettings
from collector import schema as s


@dataclass(slots=True)
class Ingested:
    """What one batch of lines added."""

    spans: int = 0
    problems: list[LoadProblem] = field(default_factory=list)


_SPAN_FACTS = f"""
SELECT f.i, sp.end_unix_nano, sp.source_file, sp.source_line, sp."{s.HANDOFF_ID}"
FROM (SELECT unnest($traces) AS trace_id, unnest($spans) AS span_id,
             unnest(range(len($traces))) AS i) AS f
JOIN spans AS sp ON sp.trace_id = f.trace_id AND sp.span_id = f.span_id
"""


class Engine:
    """Holds the ``spans`` table and the alert memory; turns new lines into alerts."""

    def __init__(
        self,
        settings: WatchSettings,
        *,
        dedupe: Deduper,
        cooldown: Cooldown,
        trace_set: TraceSet | None = None,
    ) -> None:
        self.settings = settings
        self.trace_set = trace_set if trace_set is not None else TraceSet(con=connect())
        self.con = self.trace_set.con
        watch_rules.prepare(self.con)
        self.audit_settings = AuditSettings(
            validation_timeout_s=settings.validation_timeout_s,
            p95_budget_s=settings.p95_budget_s,
            max_attempts=settings.max_attempts,
        )
        self.dedupe = dedupe
        self.samples = SampleWindow(self.con, window_s=settings.window_s)
        self.edges = EdgeTracker(
            budget_s=settings.p95_budget_s,
            min_samples=settings.min_samples,
            window_s=settings.window_s,
            cooldown=cooldown,
        )
        self.rules = watch_rules.resolve(settings.rules)
        self._slow_rule = get_rule(RULE_SLOW_VALIDATION)
        self.watermark_ns = 0
        self._unsettled: dict[tuple[str, str], float] = {}

    # -- input -------------------------------------------------------------------------
    def ingest(self, lines: Sequence[Line]) -> Ingested:
        """Load complete lines (grouped by file, in order) into ``spans``."""
        # What `append_lines` does for one file, for all files of a poll in one flush:
        # parsing costs a fixed query plan per flush, whatever the number of lines.
        reader = Reader(self.con, dedupe_on_insert=True)
        for path, group in groupby(lines, key=lambda line: line.path):
            # Watch hands over complete lines only: none of them is a torn tail.
            reader.add_lines(path, [(ln.number, ln.text) for ln in group], torn_possible=False)
        reader.flush()
        out = Ingested(spans=reader.added, problems=list(reader.problems))
        if out.spans:
            row = self.con.execute("SELECT max(end_unix_nano) FROM spans").fetchone()
            if row and row[0] is not None:
                self.watermark_ns = max(self.watermark_ns, int(row[0]))
        return out

    # -- alerts ------------------------------------------------------------------------
    def evaluate(self, *, changed: bool, final: bool = False) -> list[Alert]:
        """Alerts due now. ``changed``: spans arrived since the last call; ``final``: no
        more data will come (``--once``), so findings need not settle."""
        alerts: list[Alert] = []
        if changed:
            alerts += self._slow_validations()
            self.samples.ingest()
            alerts += list(self.edges.feed(self.samples.points()))
        if self.rules and (changed or self._unsettled):
            alerts += self._rule_alerts(final=final)
        # Rules return rows in no particular order; people read alerts in the order of events.
        alerts.sort(key=lambda a: (a.event_time_ns, a.source or ""))
        return alerts

    def _slow_validations(self) -> list[Alert]:
        findings = watch_rules.run(self.con, self._slow_rule, self.audit_settings)
        fresh = [f for f in findings if not self.dedupe.seen(f.rule, _handoff_key(f))]
        timeout_s = self.settings.validation_timeout_s
        out = []
        for alert in self._new_alerts(fresh, _handoff_key):
            # The rule reports milliseconds; alerts speak seconds, like every other setting.
            latency_s = None if alert.value is None else round(alert.value / 1000.0, 6)
            alert = replace(alert, value=latency_s, threshold=timeout_s, unit="s")
            out.append(replace(alert, summary=_slow_summary(alert)))
        return out

    def _rule_alerts(self, *, final: bool) -> list[Alert]:
        now = time.monotonic()
        current: set[tuple[str, str]] = set()
        due: list[Finding] = []
        for rule in self.rules:
            for finding in watch_rules.run(self.con, rule, self.audit_settings):
                key = _finding_key(finding)
                if self.dedupe.seen(rule.id, key):
                    continue
                current.add((rule.id, key))
                first = self._unsettled.setdefault((rule.id, key), now)
                if final or now - first >= self.settings.settle_s:
                    due.append(finding)
        for finding in due:
            current.discard((finding.rule, _finding_key(finding)))
        # Settled findings alert now; one that went away was a span still on its way.
        self._unsettled = {k: v for k, v in self._unsettled.items() if k in current}
        return self._new_alerts(due, _finding_key)

    def _new_alerts(
        self, findings: Sequence[Finding], key_of: Callable[[Finding], str]
    ) -> list[Alert]:
        """One firing alert per finding whose (rule, key) has not alerted before."""
        facts = self._facts(findings)
        alerts = []
        for i, finding in enumerate(findings):
            end_ns, source, handoff_id = facts.get(i, (self.watermark_ns, None, None))
            key = key_of(finding)
            if not self.dedupe.first(finding.rule, key, end_ns):
                continue  # e.g. two slow attempts of one handoff in the same batch
            alerts.append(
                Alert(
                    rule=finding.rule,
                    status=FIRING,
                    severity=finding.severity,
                    summary=finding.message,
                    key=key,
                    event_time_ns=end_ns,
                    receiver=finding.receiver,
                    sender=finding.sender,
                    trace_id=finding.trace_id,
                    span_id=finding.span_id,
                    task_id=finding.task_id,
                    handoff_id=handoff_id,
                    idempotency_key=finding.idempotency_key,
                    value=finding.value,
                    source=source,
                )
            )
        return alerts

    def _facts(self, findings: Sequence[Finding]) -> dict[int, tuple[int, str | None, str | None]]:
        """End time, ``file:line`` and handoff id of each finding's span, by position."""
        if not findings:
            return {}
        rows = self.con.execute(
            _SPAN_FACTS,
            {"traces": [f.trace_id for f in findings], "spans": [f.span_id for f in findings]},
        ).fetchall()
        out = {}
        for i, end_ns, file, line, handoff_id in rows:
            source = f"{file}:{line}" if file is not None and line is not None else file
            out[int(i)] = (int(end_ns or self.watermark_ns), source, handoff_id)
        return out

    # -- housekeeping ------------------------------------------------------------------
    def prune(self) -> None:
        """Drop spans and samples older than the horizon, and stale alert memory."""
        if not self.watermark_ns:
            return
        cut = self.watermark_ns - int(self.settings.horizon_s * 1e9)
        self.con.execute("DELETE FROM spans WHERE end_unix_nano < $cut", {"cut": cut})
        self.samples.prune(cut)
        self.dedupe.forget_before(self.watermark_ns)


def evaluate_traces(trace_set: TraceSet, settings: WatchSettings | None = None) -> list[Alert]:
    """The alerts ``watch --once`` raises on an already loaded trace set, in event order.

    Works on anything :func:`auditor.load_traces` returns, including a Parquet store (which
    ``watch`` itself cannot follow). The trace set is only read: the evaluation runs on a
    cursor of its own, so its temporary tables never meet another caller's.
    """
    settings = settings or WatchSettings()
    view = TraceSet(con=trace_set.con.cursor(), files=list(trace_set.files))
    try:
        engine = Engine(
            settings,
            dedupe=Deduper(),
            cooldown=Cooldown(cooldown_s=settings.cooldown_s),
            trace_set=view,
        )
        row = view.con.execute("SELECT max(end_unix_nano) FROM spans").fetchone()
        engine.watermark_ns = int(row[0]) if row and row[0] is not None else 0
        return engine.evaluate(changed=True, final=True)
    finally:
        view.con.close()  # and with it the cursor's temporary tables


def _handoff_key(finding: Finding) -> str:
    # One handoff: its attempts share the trace, the task and the two agents.
    return "/".join(
        v or "" for v in (finding.trace_id, finding.task_id, finding.sender, finding.receiver)
    )


def _finding_key(finding: Finding) -> str:
    parts = (
        finding.trace_id,
        finding.span_id,
        finding.task_id,
        finding.idempotency_key,
        finding.sender,
        finding.receiver,
        None if finding.attempt is None else str(finding.attempt),
    )
    return "/".join(v or "" for v in parts)


def _slow_summary(alert: Alert) -> str:
    took = f"took {alert.value:.3f}s" if alert.value is not None else "got no answer"
    return (
        f"validation of task {alert.task_id or '?'} from {alert.sender or '?'}"
        f" by {alert.receiver or '?'} {took} (timeout {alert.threshold:g}s)"
    )
