"""The recorded runs behind scripts/record_framework_traces.py, one module per framework.

Each ``record_*`` function runs one real multi-agent workflow offline, traced into a
:class:`~framework_runs.common.Recording`, and returns what the framework itself reported.

No module here uses ``from __future__ import annotations``: pydantic-ai and LangChain read the
annotations of the tools defined inside the runs at run time, where a string annotation
cannot be resolved.
"""
