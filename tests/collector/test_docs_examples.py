"""The code in the docs runs: docs/library.md, README.md, the package quickstart, doctests."""

from __future__ import annotations

import doctest
import importlib
import os
import re
import textwrap
from pathlib import Path

import pytest

import collector
from tests.support.paths import REPO

ROOT = REPO
DOCS = [ROOT / "docs" / "library.md", ROOT / "README.md"]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(path: Path) -> list[str]:
    return FENCE.findall(path.read_text()) if path.exists() else []


@pytest.mark.parametrize("doc", [p for p in DOCS if python_blocks(p)], ids=lambda p: p.name)
def test_python_blocks_run_in_order(doc, tmp_path, monkeypatch, capsys):
    """Blocks of one page share a namespace, as a reader running them in turn would."""
    monkeypatch.chdir(tmp_path)
    for name in ("HANDOFFSCOPE_TRACE_FILE", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for i, block in enumerate(python_blocks(doc), 1):
        try:
            exec(compile(block, f"{doc.name} block {i}", "exec"), namespace)
        except Exception as e:
            raise AssertionError(f"{doc.name}: python block {i} failed: {e!r}\n{block}") from e
    assert capsys.readouterr().out  # the walkthrough shows its results


def test_library_walkthrough_has_examples():
    assert len(python_blocks(ROOT / "docs" / "library.md")) >= 10


def test_package_docstring_quickstart_runs():
    doc = collector.__doc__ or ""
    block = doc.split("::\n", 1)[1].split("\nImporting", 1)[0]
    exec(compile(textwrap.dedent(block), "collector.__doc__", "exec"), {})


@pytest.mark.parametrize(
    "module", ["collector.clock", "collector.pricing", "collector.workflow_run"]
)
def test_module_doctests(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_docs_mention_every_public_name():
    text = (ROOT / "docs" / "library.md").read_text()
    skip = {"__version__", "schema"}
    missing = [n for n in collector.__all__ if n not in skip and n not in text]
    assert missing == [], f"docs/library.md should mention {missing}"


def test_no_doc_leaves_files_in_the_repository():
    assert not (ROOT / "traces.jsonl").exists()
    assert os.environ.get("HANDOFFSCOPE_TRACE_FILE") is None


PUBLIC = [
    "Acceptance",
    "Ack",
    "AgentRole",
    "Answer",
    "Channel",
    "Claim",
    "Clock",
    "CommitInDoubt",
    "CommitRequest",
    "CommitResult",
    "CommitWithoutAccept",
    "CommitmentEnvelope",
    "ConfigurationError",
    "Decision",
    "Finding",
    "Handoff",
    "HandoffMessage",
    "HandoffOutcome",
    "HandoffscopeError",
    "IdempotencyConflict",
    "IdempotencyStore",
    "IllegalTransition",
    "InDoubt",
    "InProcessChannel",
    "MemoryStore",
    "MessageError",
    "OrchestratorPolicy",
    "OutputSchema",
    "Price",
    "PriceTable",
    "Proposal",
    "ProtocolError",
    "Receiver",
    "RejectReason",
    "RetryCapExceeded",
    "SQLiteStore",
    "SafeStop",
    "Sender",
    "StateMachine",
    "StoreError",
    "StoredResult",
    "Sweeper",
    "SystemClock",
    "Telemetry",
    "Usage",
    "Verdict",
    "VirtualClock",
    "VoidNotice",
    "Work",
    "Workflow",
    "__version__",
    "accept",
    "configure_telemetry",
    "decode",
    "default_prices",
    "envelope_executor",
    "fingerprint",
    "is_on_time",
    "reject",
    "schema",
    "set_default_prices",
    "workflow",
]


def test_public_surface_is_pinned():
    """Adding or removing a public name is a decision: update this list and docs/library.md."""
    assert collector.__all__ == PUBLIC
