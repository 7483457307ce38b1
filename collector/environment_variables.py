"""Every ``HANDOFFSCOPE_*`` environment variable: its name as a constant, what it sets, and
the one function that reads it.

>>> from collector import environment_variables as ev
>>> ev.read(ev.HANDOFFSCOPE_MEMORY_LIMIT, {"HANDOFFSCOPE_MEMORY_LIMIT": "4GB"})
'4GB'

This module sits at the bottom of the project: ``collector``, ``auditor`` and ``dashboard``
all import it, and it imports nothing of theirs. A setting is read through :func:`read` in
one module only (named in its docstring); everything else asks that module. An explicit
argument or option beats the variable, which beats a ``[tool.handoffscope]`` table in
pyproject.toml, which beats the default.

The variables in :data:`SET_FOR_CHILDREN` are not read by handoffscope: it sets them for the
processes it starts (``watch --exec`` and the dashboard's Streamlit server).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

__all__ = [
    "ALL",
    "HANDOFFSCOPE_ALERT_ID",
    "HANDOFFSCOPE_ALERT_RULE",
    "HANDOFFSCOPE_ALERT_SEVERITY",
    "HANDOFFSCOPE_ALERT_STATUS",
    "HANDOFFSCOPE_CLICKHOUSE_PASSWORD",
    "HANDOFFSCOPE_CLICKHOUSE_USER",
    "HANDOFFSCOPE_CONFORMANCE_STORE",
    "HANDOFFSCOPE_DASHBOARD_CLICKHOUSE",
    "HANDOFFSCOPE_DASHBOARD_PATHS",
    "HANDOFFSCOPE_FAIL_ON",
    "HANDOFFSCOPE_HANDSHAKE_TOKEN",
    "HANDOFFSCOPE_MAX_ATTEMPTS",
    "HANDOFFSCOPE_MEMORY_LIMIT",
    "HANDOFFSCOPE_METRIC_FILE",
    "HANDOFFSCOPE_P95_BUDGET",
    "HANDOFFSCOPE_PROGRESS_AFTER",
    "HANDOFFSCOPE_RULES",
    "HANDOFFSCOPE_SKIP",
    "HANDOFFSCOPE_SYNC_EVIDENCE",
    "HANDOFFSCOPE_TOKEN",
    "HANDOFFSCOPE_TRACE_FILE",
    "HANDOFFSCOPE_VALIDATION_TIMEOUT",
    "HANDOFFSCOPE_WEBHOOK_URL",
    "SET_FOR_CHILDREN",
    "read",
]

# -- the library (collector) ------------------------------------------------------------

HANDOFFSCOPE_TRACE_FILE: Final = "HANDOFFSCOPE_TRACE_FILE"
"""An OTLP JSON-lines file ``configure_telemetry()`` appends spans to when no ``trace_file``
is passed. Read by :mod:`collector.configure`."""

HANDOFFSCOPE_METRIC_FILE: Final = "HANDOFFSCOPE_METRIC_FILE"
"""An OTLP JSON-lines file ``configure_telemetry()`` appends metrics to when no
``metric_file`` is passed. Read by :mod:`collector.configure`."""

HANDOFFSCOPE_SYNC_EVIDENCE: Final = "HANDOFFSCOPE_SYNC_EVIDENCE"
"""Any value but empty or ``0`` exports the handshake's evidence spans as they end (the
``sync_evidence`` argument of ``configure_telemetry()``). Read by :mod:`collector.configure`."""

HANDOFFSCOPE_PROGRESS_AFTER: Final = "HANDOFFSCOPE_PROGRESS_AFTER"
"""Seconds of work before a command shows its progress line on a terminal (default 1.5;
``0`` shows it at once). Read by :mod:`collector.progress`."""

HANDOFFSCOPE_TOKEN: Final = "HANDOFFSCOPE_TOKEN"
"""The bearer token ``handoffscope collect`` requires of OTLP clients when ``--token`` is
not given. Read by the receiver's command line (:mod:`collector.receiver.cli`)."""

HANDOFFSCOPE_HANDSHAKE_TOKEN: Final = "HANDOFFSCOPE_HANDSHAKE_TOKEN"
"""The bearer token of the handshake over HTTP: ``serve`` requires it and ``conformance``
sends it (the variable's name can be changed with ``--token-env``). Read by
:mod:`collector.http.cli`."""

HANDOFFSCOPE_CONFORMANCE_STORE: Final = "HANDOFFSCOPE_CONFORMANCE_STORE"
"""A SQLite file the conformance kit's reference receiver keeps its idempotency store in
(default: in memory). Read by :mod:`collector.http.conformance`."""

# -- the auditor --------------------------------------------------------------------------

HANDOFFSCOPE_MEMORY_LIMIT: Final = "HANDOFFSCOPE_MEMORY_LIMIT"
"""DuckDB's memory limit for large inputs and the dashboard's queries (e.g. ``4GB``;
default 640MB for a large load). A limit set here is never raised or scaled by
handoffscope. Read by :mod:`auditor.database.statements`."""

HANDOFFSCOPE_VALIDATION_TIMEOUT: Final = "HANDOFFSCOPE_VALIDATION_TIMEOUT"
"""The validation window (``--validation-timeout``, e.g. ``2s``). Read by
:mod:`auditor.settings`."""

HANDOFFSCOPE_P95_BUDGET: Final = "HANDOFFSCOPE_P95_BUDGET"
"""The p95 validation latency budget per edge (``--p95-budget``, e.g. ``500ms``). Read by
:mod:`auditor.settings`."""

HANDOFFSCOPE_MAX_ATTEMPTS: Final = "HANDOFFSCOPE_MAX_ATTEMPTS"
"""Attempts a handoff may take before ``retry-cap-exceeded`` (``--max-attempts``). Read by
:mod:`auditor.settings`."""

HANDOFFSCOPE_FAIL_ON: Final = "HANDOFFSCOPE_FAIL_ON"
"""The severity from which findings fail the audit (``error``, ``warning`` or ``never``).
Read by :mod:`auditor.settings`."""

HANDOFFSCOPE_RULES: Final = "HANDOFFSCOPE_RULES"
"""Comma-separated ids of the only rules to run (``--rules``). Read by
:mod:`auditor.settings`."""

HANDOFFSCOPE_SKIP: Final = "HANDOFFSCOPE_SKIP"
"""Comma-separated ids of rules not to run (``--skip``). Read by :mod:`auditor.settings`."""

HANDOFFSCOPE_CLICKHOUSE_USER: Final = "HANDOFFSCOPE_CLICKHOUSE_USER"
"""The user of a ``clickhouse://`` server (else ``CLICKHOUSE_USER``, else ``default``);
never taken from the command line. Read by :mod:`auditor.clickhouse.engine`."""

HANDOFFSCOPE_CLICKHOUSE_PASSWORD: Final = "HANDOFFSCOPE_CLICKHOUSE_PASSWORD"
"""The password of a ``clickhouse://`` server (else ``CLICKHOUSE_PASSWORD``); never taken
from the command line. Read by :mod:`auditor.clickhouse.engine`."""

HANDOFFSCOPE_WEBHOOK_URL: Final = "HANDOFFSCOPE_WEBHOOK_URL"
"""A URL ``handoffscope watch`` POSTs each alert to (``--webhook``). Read by
:mod:`auditor.watch.cli` (through click's ``envvar``)."""

HANDOFFSCOPE_ALERT_ID: Final = "HANDOFFSCOPE_ALERT_ID"
"""Set for a ``watch --exec`` command: the alert's id."""

HANDOFFSCOPE_ALERT_RULE: Final = "HANDOFFSCOPE_ALERT_RULE"
"""Set for a ``watch --exec`` command: the rule that fired."""

HANDOFFSCOPE_ALERT_STATUS: Final = "HANDOFFSCOPE_ALERT_STATUS"
"""Set for a ``watch --exec`` command: ``firing`` or ``resolved``."""

HANDOFFSCOPE_ALERT_SEVERITY: Final = "HANDOFFSCOPE_ALERT_SEVERITY"
"""Set for a ``watch --exec`` command: the alert's severity."""

# -- the dashboard ------------------------------------------------------------------------

HANDOFFSCOPE_DASHBOARD_PATHS: Final = "HANDOFFSCOPE_DASHBOARD_PATHS"
"""The trace paths ``handoffscope dashboard`` hands to the Streamlit app (a JSON list).
Read by :mod:`dashboard.source`."""

HANDOFFSCOPE_DASHBOARD_CLICKHOUSE: Final = "HANDOFFSCOPE_DASHBOARD_CLICKHOUSE"
"""The ClickHouse source ``handoffscope dashboard URL`` hands to the Streamlit app. Read by
:mod:`dashboard.clickhouse`."""

SET_FOR_CHILDREN: Final = (
    HANDOFFSCOPE_ALERT_ID,
    HANDOFFSCOPE_ALERT_RULE,
    HANDOFFSCOPE_ALERT_STATUS,
    HANDOFFSCOPE_ALERT_SEVERITY,
)
"""Variables handoffscope sets for the commands it runs and never reads itself."""

ALL: Final = tuple(
    value for name, value in sorted(globals().items()) if name.startswith("HANDOFFSCOPE_")
)
"""Every variable above, sorted by name."""


def read(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of the variable ``name`` in ``environ`` (default: the process's), or None
    when it is unset. The one place handoffscope reads a ``HANDOFFSCOPE_*`` variable."""
    if name not in ALL:
        raise KeyError(f"{name} is not a handoffscope environment variable (see {__name__})")
    return (os.environ if environ is None else environ).get(name)
