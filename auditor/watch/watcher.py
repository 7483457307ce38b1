"""The watch loop: poll the directory, load new lines, evaluate, alert, save state.

Each poll runs in this order, so a crash at any point loses no alert and repeats at most the
one being delivered: read new lines; load them; evaluate; save read positions, alert memory
and the undelivered alerts (the new ones included) together in one atomic write; hand the
alerts to every sink. Each alert a sink is done with is then recorded in the delivery
journal (``auditor.watch.state.DeliveryJournal``) as it happens.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from auditor.watch.alert import Alert
from auditor.watch.dedupe import Cooldown, Deduper
from auditor.watch.evaluate import Engine
from auditor.watch.follow import DEFAULT_PATTERNS, Follower
from auditor.watch.settings import WatchSettings
from auditor.watch.sinks import Sink, log_stderr
from auditor.watch.state import (
    JOURNAL_SUFFIX,
    DeliveryJournal,
    WatchState,
    check_writable,
    load_state,
    lock_state,
    save_state,
    without_done,
)
from collector.errors import ConfigurationError

DEFAULT_FLUSH_TIMEOUT_S = 10.0
"""At shutdown, how long queued alerts may take to deliver before they are saved for later."""

MAX_PROBLEMS_SHOWN = 20
"""Unusable lines reported one by one per poll; the rest are counted."""


@dataclass(slots=True)
class RunSummary:
    """What one run of the loop did."""

    alerts: int = 0
    """Alerts raised (firing or resolved) during this run."""
    firing: int = 0
    """Of those, how many were firing."""
    lines: int = 0
    spans: int = 0
    problems: int = 0
    polls: int = 0
    undelivered: int = 0
    """Alerts still queued for a sink at exit: saved in the state file, or lost without one."""
    lost: int = 0
    """Alerts that will never be delivered: queued at exit with no state file to keep them,
    or dropped by a sink (refused by the webhook, or pushed out of a full outbox)."""
    sink_error: OSError | None = None
    """The write error that put the last working sink out of use (a closed stdout, say),
    ending the run early: with no sink left, nothing could be delivered."""


class Watcher:
    """Follows one trace directory and sends alerts to sinks until stopped."""

    def __init__(
        self,
        root: Path,
        *,
        settings: WatchSettings,
        sinks: Sequence[Sink],
        state_path: Path | None,
        patterns: Iterable[str] = DEFAULT_PATTERNS,
        exclude: Iterable[Path] = (),
        start_at_end: bool = False,
        flush_timeout_s: float = DEFAULT_FLUSH_TIMEOUT_S,
        log: Callable[[str], None] = log_stderr,
    ) -> None:
        self.root = root
        self.settings = settings
        self.sinks = list(sinks)
        self.state_path = state_path
        self._log = log
        self._flush_timeout = flush_timeout_s
        self._polling = False
        self._closed = False
        self._undelivered: list[tuple[str, Alert]] = []
        self._staged: list[Alert] = []
        self._failed: set[str] = set()
        """Sinks whose failure was reported (once each)."""
        """Alerts saved in the outbox but not yet handed to the sinks."""
        self._saving = threading.RLock()
        """Held while the state is saved and while a delivery is journaled (sink threads)."""
        self._generation = 0
        self._journal = (
            DeliveryJournal(state_path.with_name(state_path.name + JOURNAL_SUFFIX))
            if state_path is not None
            else None
        )
        self._lock = lock_state(state_path) if state_path is not None else None
        try:
            if state_path is not None:
                check_writable(state_path)
            state = load_state(state_path) if state_path is not None else WatchState()
            try:
                self._restore(state, patterns=patterns, exclude=exclude, start_at_end=start_at_end)
            except (ValueError, TypeError, KeyError, AttributeError) as e:
                raise ConfigurationError(
                    f"the watch state file {state_path} is damaged ({type(e).__name__}: {e});"
                    " move it away to start over (old alerts may then be sent again)"
                ) from e
        except BaseException:
            self._unlock()
            raise

    def _restore(
        self,
        state: WatchState,
        *,
        patterns: Iterable[str],
        exclude: Iterable[Path],
        start_at_end: bool,
    ) -> None:
        self._carried: dict[str, list[dict[str, Any]]] = {}
        self.dedupe = Deduper()
        self.dedupe.load(state.dedupe)
        self.cooldown = Cooldown(cooldown_s=self.settings.cooldown_s)
        self.cooldown.load(state.receivers.get("cooldown", {}))
        self.engine = Engine(self.settings, dedupe=self.dedupe, cooldown=self.cooldown)
        self.engine.edges.load(state.receivers.get("edges", {}))
        self.engine.samples.restore(state.receivers.get("samples", {}))
        self.engine.watermark_ns = int(state.receivers.get("watermark_ns", 0))
        state_path = self.state_path
        excluded = list(exclude)
        if state_path is not None and self._journal is not None:
            excluded += [state_path, self._journal.path]
        self._generation = state.generation
        self.follower = Follower(
            self.root,
            patterns=patterns,
            cursors=state.cursors,
            exclude=excluded,
            start_at_end=start_at_end and not state.cursors,
        )
        outbox = state.outbox
        if self._journal is not None:
            outbox = without_done(outbox, self._journal.done(state.generation))
        for sink in self.sinks:
            if hasattr(sink, "on_done"):
                sink.on_done = lambda alert, name=sink.name: self._done(name, alert)
        self._requeue(outbox)

    def _done(self, sink: str, alert: Alert) -> None:
        """Record that ``sink`` is done with ``alert`` (called as it happens)."""
        if self._journal is None:
            return
        with self._saving:
            try:
                self._journal.record(self._generation, sink, alert.id)
            except ConfigurationError as e:
                self._log(f"watch: {e}")

    def _requeue(self, outbox: dict[str, list[dict[str, Any]]]) -> None:
        by_name = {sink.name: sink for sink in self.sinks}
        for name, saved in outbox.items():
            sink = by_name.get(name)
            if sink is None:
                # Keep them: the sink may be configured again on the next start.
                self._carried[name] = saved
                self._log(
                    f"watch: {len(saved)} undelivered {name} alerts are kept in the state file;"
                    f" they are sent once --{name} is given again"
                )
                continue
            for data in saved:
                alert = Alert.from_json(data)
                sink.send(alert)
                self._sent(sink, alert)
            if saved:
                self._log(f"watch: resending {len(saved)} undelivered {name} alerts")

    # -- the loop ----------------------------------------------------------------------
    def run(self, *, once: bool = False, stop: threading.Event | None = None) -> RunSummary:
        """Poll until ``stop`` is set (or, with ``once``, until the backlog is read)."""
        stop = stop or threading.Event()
        summary = RunSummary()
        try:
            while not stop.is_set():
                more = self.poll(summary, final=once)
                if self._no_sink_left(summary):
                    break
                if more:
                    continue
                if once:
                    # Nothing more to read: let pending findings settle now.
                    alerts = self.engine.evaluate(changed=False, final=True)
                    with self._saving:
                        self._staged = list(alerts)
                        if alerts:
                            self.save()
                        self._emit(alerts, summary)
                    break
                stop.wait(self.settings.poll_interval_s)
        finally:
            self.close()
            summary.undelivered = len(self._undelivered)
            dropped = sum(int(getattr(sink, "dropped", 0)) for sink in self.sinks)
            summary.lost = dropped + (summary.undelivered if self.state_path is None else 0)
        return summary

    def poll(self, summary: RunSummary, *, final: bool = False) -> bool:
        """One poll; returns True when more data is waiting to be read right away."""
        # Until this poll's alerts are out, the read positions it advanced must not be saved.
        self._polling = True
        batch = self.follower.poll(final=final)
        summary.polls += 1
        for note in batch.notes:
            self._log(f"watch: {note}")
        spans = 0
        if batch.lines:
            ingested = self.engine.ingest(batch.lines)
            spans = ingested.spans
            summary.lines += len(batch.lines)
            summary.spans += spans
            summary.problems += len(ingested.problems)
            for problem in ingested.problems[:MAX_PROBLEMS_SHOWN]:
                self._log(f"watch: {problem}")
            if len(ingested.problems) > MAX_PROBLEMS_SHOWN:
                hidden = len(ingested.problems) - MAX_PROBLEMS_SHOWN
                self._log(f"watch: ... and {hidden} more unusable lines in this poll")
        alerts = self.engine.evaluate(changed=spans > 0, final=final and not batch.more)
        self.engine.prune()
        with self._saving:
            # Saved with the new alerts in the outbox before any sink sees them: a crash
            # during delivery then resends what the journal does not record as done.
            self._staged = list(alerts)
            self._polling = False
            if batch.lines or batch.notes or alerts:
                self.save()
            self._emit(alerts, summary)
        return batch.more

    def _emit(self, alerts: list[Alert], summary: RunSummary) -> None:
        for alert in alerts:
            summary.alerts += 1
            summary.firing += alert.status == "firing"
            for sink in self.sinks:
                try:
                    sink.send(alert)
                except OSError as e:
                    self._log(f"watch: the {sink.name} sink failed on alert {alert.id}: {e}")
                self._sent(sink, alert)
            self._staged.remove(alert)

    def _sent(self, sink: Sink, alert: Alert) -> None:
        """After ``sink.send(alert)``: journal an alert the sink is done with at once, or
        say (once) that the sink failed and keeps its alerts from now on."""
        failure = getattr(sink, "failure", None)
        if failure is not None:
            if sink.name not in self._failed:
                self._failed.add(sink.name)
                self._log(self._failure_note(sink, failure))
            return  # held, not delivered: it stays in the outbox
        if sink.name in self._failed:
            self._failed.discard(sink.name)
            self._log(
                f"watch: {_where(sink)} can be written again; the alerts kept for it are written"
            )
        if not hasattr(sink, "on_done") and not any(a is alert for a in sink.pending()):
            self._done(sink.name, alert)  # delivered (or failed) as it was sent

    def _failure_note(self, sink: Sink, error: OSError) -> str:
        name = sink.name
        if getattr(sink, "recovers", False):
            return (
                f"watch: could not write alerts to {_where(sink)} ({error.strerror or error});"
                " they are kept, in order, and written as soon as it can be written again"
            )
        if isinstance(error, BrokenPipeError):
            what = f"{name} was closed by its reader ({error.strerror})"
        else:
            what = f"could not print alerts on {name} ({error.strerror or error})"
        others = [s.name for s in self.sinks if s.name != name and s.name not in self._failed]
        then = (
            f"the other sinks ({', '.join(others)}) still get every alert"
            if others
            else "no sink is left, so watch stops"
        )
        return f"watch: {what}; alerts are no longer sent there, and {then}"

    def _no_sink_left(self, summary: RunSummary) -> bool:
        """Whether every sink failed for good (then the run ends: nothing can be sent)."""
        failures = [getattr(sink, "failure", None) for sink in self.sinks]
        if not failures or any(f is None for f in failures):
            return False
        if any(getattr(sink, "recovers", False) for sink in self.sinks):
            return False  # that one may work again: keep its alerts coming
        summary.sink_error = failures[-1]
        return True

    # -- state -------------------------------------------------------------------------
    def state(self) -> WatchState:
        """Everything to persist now."""
        outbox = dict(self._carried)
        for sink in self.sinks:
            pending = sink.pending() + self._staged
            if pending:
                outbox[sink.name] = [a.to_json() for a in pending]
            else:
                outbox.pop(sink.name, None)
        return WatchState(
            cursors=self.follower.cursors(),
            dedupe=self.dedupe.to_json(),
            receivers={
                "edges": self.engine.edges.to_json(),
                "cooldown": self.cooldown.to_json(),
                "samples": self.engine.samples.export(),
                "watermark_ns": self.engine.watermark_ns,
            },
            outbox=outbox,
            generation=self._generation,
        )

    def save(self) -> None:
        """Write the state file (a no-op without one); the delivery journal starts over."""
        if self.state_path is None or self._journal is None:
            return
        with self._saving:
            self._generation += 1
            save_state(self.state_path, self.state())
            self._journal.reset()

    def close(self) -> None:
        """Deliver what can be delivered in time, then save everything else. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for sink in self.sinks:
            sink.close(timeout_s=self._flush_timeout)
        self._undelivered = [(sink.name, alert) for sink in self.sinks for alert in sink.pending()]
        if self._undelivered and self.state_path is None:
            self._report_lost()
        self.follower.close()
        try:
            if self._polling:
                # A poll failed half-way: keep the last saved state, so its lines are read
                # (and alerted on) again at the next start rather than skipped.
                self._log("watch: the last poll did not finish; its data will be read again")
            else:
                self.save()
                if self._undelivered and self.state_path is not None:
                    self._log(
                        f"watch: {len(self._undelivered)} undelivered alerts are saved in"
                        f" {self.state_path}; they are sent first on the next start"
                    )
        finally:
            self.engine.con.close()
            if self._journal is not None:
                self._journal.close()
            self._unlock()

    def _report_lost(self) -> None:
        """Name the alerts no sink delivered, since without a state file nothing keeps them."""
        held: dict[str, int] = {}
        queued = []
        for name, alert in self._undelivered:
            if name in self._failed:
                held[name] = held.get(name, 0) + 1
            else:
                queued.append((name, alert))
        by_name = {sink.name: sink for sink in self.sinks}
        for name, count in held.items():
            # Counted, not listed: a line per alert is the storm the failure note avoided.
            alerts, are = ("alert", "is") if count == 1 else ("alerts", "are")
            self._log(
                f"watch: warning: {count} {alerts} not delivered to {_where(by_name[name])} {are}"
                " lost, since"
                " there is no state file to keep them (run without --no-state to have them"
                " sent on the next start)"
            )
        if queued:
            self._report_queued_lost(queued)

    def _report_queued_lost(self, queued: list[tuple[str, Alert]]) -> None:
        count = len(queued)
        alerts, are = ("alert", "is") if count == 1 else ("alerts", "are")
        self._log(
            f"watch: warning: {count} {alerts} could not be delivered within --flush-timeout"
            f" ({self._flush_timeout:g}s) and {are} lost, since there is no state file to keep"
            " them (run without --no-state to have them sent on the next start):"
        )
        # Every one is listed, not the first few: this line is all that is left of the alert.
        for name, alert in queued:
            self._log(f"watch:   {name}: {_describe(alert)}")

    def _unlock(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


def _where(sink: Sink) -> str:
    """A sink as a user knows it: its file if it has one, else its name."""
    path = getattr(sink, "path", None)
    return str(path) if path is not None else sink.name


def _describe(alert: Alert) -> str:
    """Enough of an alert to find it again: rule, status, the handoff or receiver, the id."""
    parts = [f"{alert.rule} ({alert.status})"]
    if alert.receiver is not None:
        parts.append(f"receiver {alert.receiver}")
    if alert.task_id is not None:
        parts.append(f"task {alert.task_id}")
    if alert.trace_id is not None:
        parts.append(f"trace {alert.trace_id}")
    parts.append(f"id {alert.id}")
    return ", ".join(parts)
