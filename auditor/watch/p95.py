"""Rolling p95 validation latency per receiver, and its breach and recovery edges.

The samples live in a DuckDB table beside ``spans`` (``watch_samples``), fed from the
``handoff.validate`` spans as they arrive, through the auditor's ``hs_phases_all`` view (call
``auditor.audit.prepare`` on the connection first). For every new sample, one windowed query
gives the p95 and the sample count of that receiver over the window ending at the sample's end time
(event time). ``EdgeTracker`` walks those points in time order: a receiver starts breaching
when the p95 of at least ``min_samples`` samples is over budget, and recovers when it is back
within budget. Each edge is one alert; the cooldown holds back a new breach right after the
previous one (a recovery is always announced, so a held-back breach never leaves a dangling
"resolved").

A sample that arrives after later ones were already evaluated still counts in every later
window, but is not itself an evaluation point: edges only ever move forward in time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import duckdb

from auditor.watch.alert import FIRING, RESOLVED, RULE_P95, Alert
from auditor.watch.dedupe import Cooldown
from collector import schema as s

# TEMP: each connection (or cursor) evaluating alerts keeps samples of its own.
SAMPLES_DDL = """
CREATE TEMP TABLE IF NOT EXISTS watch_samples (
    trace_id VARCHAR,
    span_id VARCHAR,
    receiver VARCHAR,
    end_ns BIGINT,
    latency_s DOUBLE,
    evaluated BOOLEAN
)
"""

# Latency as the auditor defines it (``hs_phases_all.latency_ms``: the true latency the
# sender recorded, else the span's duration for an answer that came; an unanswered timeout
# has none), so watch and ``handoffscope audit`` compute the same p95.
_INGEST = f"""
INSERT INTO watch_samples
SELECT ph.trace_id, ph.span_id, ph."{s.RECEIVER}", ph.end_unix_nano, ph.latency_ms / 1000.0, false
FROM hs_phases_all AS ph
WHERE ph.name = $name AND ph."{s.RECEIVER}" IS NOT NULL AND ph.end_unix_nano IS NOT NULL
  AND ph.latency_ms IS NOT NULL
  AND NOT EXISTS (
      SELECT 1 FROM watch_samples AS w WHERE w.trace_id = ph.trace_id AND w.span_id = ph.span_id
  )
"""

_POINTS = """
SELECT receiver, end_ns, p95, n FROM (
    SELECT receiver, end_ns, evaluated,
           quantile_cont(latency_s, 0.95) OVER win AS p95,
           count(*) OVER win AS n
    FROM watch_samples
    WINDOW win AS (PARTITION BY receiver ORDER BY end_ns
                   RANGE BETWEEN $window PRECEDING AND CURRENT ROW)
) WHERE NOT evaluated
ORDER BY end_ns, receiver
"""

MAX_SAVED_SAMPLES = 2_000
"""Per receiver, at most this many recent samples are saved in the state file."""


@dataclass(frozen=True, slots=True)
class Point:
    """The rolling p95 of one receiver at one event time."""

    receiver: str
    end_ns: int
    p95_s: float
    samples: int


class SampleWindow:
    """The ``watch_samples`` table: validation latencies inside the rolling window."""

    def __init__(self, con: duckdb.DuckDBPyConnection, *, window_s: float) -> None:
        self._con = con
        self._window_ns = int(window_s * 1e9)
        con.execute(SAMPLES_DDL)

    def ingest(self) -> int:
        """Copy validate spans not seen before from ``spans``; returns how many."""
        row = self._con.execute(_INGEST, {"name": s.SPAN_VALIDATE}).fetchone()
        return int(row[0]) if row else 0

    def points(self) -> list[Point]:
        """Rolling p95 at every sample not evaluated yet, in event-time order; marks them."""
        rows = self._con.execute(_POINTS, {"window": self._window_ns}).fetchall()
        self._con.execute("UPDATE watch_samples SET evaluated = true WHERE NOT evaluated")
        return [Point(str(r), int(t), float(p), int(n)) for r, t, p, n in rows]

    def prune(self, cut_ns: int) -> None:
        """Forget samples that ended before ``cut_ns``.

        The caller prunes ``spans`` at the same cut, so a validate span still in ``spans``
        always has its sample here and is never taken for a new one.
        """
        self._con.execute("DELETE FROM watch_samples WHERE end_ns < $cut", {"cut": cut_ns})

    def export(self) -> dict[str, list[list[float]]]:
        """Recent samples per receiver, for the state file (bounded per receiver)."""
        rows = self._con.execute(
            "SELECT receiver, end_ns, latency_s FROM (SELECT *,"
            " row_number() OVER (PARTITION BY receiver ORDER BY end_ns DESC) AS k,"
            " max(end_ns) OVER (PARTITION BY receiver) AS newest FROM watch_samples)"
            " WHERE k <= $most AND end_ns >= newest - $window ORDER BY receiver, end_ns",
            {"most": MAX_SAVED_SAMPLES, "window": self._window_ns},
        ).fetchall()
        out: dict[str, list[list[float]]] = {}
        for receiver, end_ns, latency in rows:
            out.setdefault(receiver, []).append([end_ns, latency])
        return out

    def restore(self, saved: dict[str, Any]) -> None:
        """Reload samples saved by ``export`` (already evaluated before the restart)."""
        rows = [
            (None, None, str(receiver), int(end_ns), float(latency), True)
            for receiver, samples in saved.items()
            for end_ns, latency in samples
        ]
        if rows:
            self._con.executemany("INSERT INTO watch_samples VALUES (?, ?, ?, ?, ?, ?)", rows)


class EdgeTracker:
    """Turns rolling-p95 points into breach and recovery alerts, one per edge."""

    def __init__(
        self, *, budget_s: float, min_samples: int, window_s: float, cooldown: Cooldown
    ) -> None:
        self.budget_s = budget_s
        self.min_samples = min_samples
        self.window_s = window_s
        self._cooldown = cooldown
        self._receivers: dict[str, dict[str, Any]] = {}

    def breaching(self) -> list[str]:
        """Receivers whose breach was announced and has not recovered yet."""
        return sorted(r for r, st in self._receivers.items() if st.get("breaching"))

    def feed(self, points: Iterable[Point]) -> Iterator[Alert]:
        """Alerts for the edges among ``points`` (which must be in event-time order)."""
        for point in points:
            st = self._receivers.setdefault(point.receiver, {"breaching": False, "last_ns": 0})
            if point.end_ns < st["last_ns"]:
                continue
            st["last_ns"] = point.end_ns
            if point.samples < self.min_samples:
                continue
            over = point.p95_s > self.budget_s
            if over and not st["breaching"]:
                if not self._cooldown.ready(RULE_P95, point.receiver, point.end_ns):
                    continue
                self._cooldown.mark(RULE_P95, point.receiver, point.end_ns)
                st["breaching"] = True
                st["since_ns"] = point.end_ns
                yield self._alert(point, FIRING)
            elif not over and st["breaching"]:
                st["breaching"] = False
                yield self._alert(point, RESOLVED)

    def _alert(self, point: Point, status: str) -> Alert:
        who = point.receiver
        if status == FIRING:
            summary = (
                f"p95 validation latency of {who} is {point.p95_s:.3f}s over the last "
                f"{self.window_s:g}s ({point.samples} samples), above the {self.budget_s:g}s budget"
            )
        else:
            summary = (
                f"p95 validation latency of {who} is back to {point.p95_s:.3f}s "
                f"({point.samples} samples), within the {self.budget_s:g}s budget"
            )
        return Alert(
            rule=RULE_P95,
            status=status,
            severity="warning",
            summary=summary,
            key=who,
            event_time_ns=point.end_ns,
            receiver=who,
            value=round(point.p95_s, 6),
            threshold=self.budget_s,
            unit="s",
            samples=point.samples,
            window_s=self.window_s,
        )

    def to_json(self) -> dict[str, Any]:
        return {"receivers": self._receivers}

    def load(self, data: dict[str, Any]) -> None:
        """Restore what ``to_json`` saved."""
        for receiver, st in data.get("receivers", {}).items():
            self._receivers[str(receiver)] = {
                "breaching": bool(st.get("breaching", False)),
                "last_ns": int(st.get("last_ns", 0)),
                **({"since_ns": int(st["since_ns"])} if "since_ns" in st else {}),
            }
