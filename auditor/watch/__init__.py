"""Alerting on validation latency as traces arrive: ``handoffscope watch``.

From the command line::

    handoffscope watch traces/ --webhook https://hooks.example.com/handoffs

From Python, the same loop with your own sinks (this runs as is)::

    import io, tempfile
    from pathlib import Path
    from auditor.watch import StreamSink, Watcher, WatchSettings

    out = io.StringIO()
    with tempfile.TemporaryDirectory() as folder:
        watcher = Watcher(
            Path(folder),
            settings=WatchSettings(validation_timeout_s=2.0, p95_budget_s=0.5),
            sinks=[StreamSink(out)],
            state_path=None,
        )
        summary = watcher.run(once=True)
    assert summary.alerts == 0

``docs/watch.md`` documents the alert payload, the state file and how to alert from
Prometheus on the library's validation-latency histogram instead.

Over traces already loaded (files or a Parquet store), the alerts ``watch --once`` would
raise: ``evaluate_traces(load_traces("store.parquet"), WatchSettings())``.
"""

from __future__ import annotations

from auditor.watch.alert import Alert
from auditor.watch.cli import watch
from auditor.watch.evaluate import evaluate_traces
from auditor.watch.settings import WatchSettings
from auditor.watch.sinks import ExecSink, JsonlSink, StreamSink, WebhookSink
from auditor.watch.watcher import RunSummary, Watcher

__all__ = [
    "Alert",
    "ExecSink",
    "JsonlSink",
    "RunSummary",
    "StreamSink",
    "WatchSettings",
    "Watcher",
    "WebhookSink",
    "evaluate_traces",
    "watch",
]
