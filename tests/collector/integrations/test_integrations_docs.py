"""docs/integrations.md runs: each framework's example, offline, and the audit of its traces.

Each section runs in its own process (the instrumentations are process-wide) in a temporary
working directory, where it writes ``traces.jsonl``. The audit of that file must find the
tokens the framework itself counted, keep the handoff that went through the handshake clean,
and flag the one that did not.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from auditor import audit, load_traces
from tests.support.paths import REPO

ROOT = REPO
PAGE = ROOT / "docs" / "integrations.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

# section title -> (sender and receiver of the validated handoff, of the plain one,
# a Python expression for the tokens the framework counted, as (input, output))
CASES: dict[str, tuple[tuple[str, str], tuple[str, str], str]] = {
    "pydantic-ai": (
        ("writer", "researcher"),
        ("writer", "checker"),
        "(run.usage.input_tokens, run.usage.output_tokens)",
    ),
    "OpenAI Agents SDK": (
        ("triage", "researcher"),
        ("researcher", "checker"),
        "(usage.input_tokens, usage.output_tokens)",
    ),
    "LangGraph": (
        ("supervisor", "researcher"),
        ("supervisor", "checker"),
        "tuple(sum(u[k] for u in counted.usage_metadata.values())"
        " for k in ('input_tokens', 'output_tokens'))",
    ),
}


def section(title: str) -> list[str]:
    text = PAGE.read_text()
    parts = re.split(r"^## ", text, flags=re.M)
    [body] = [p for p in parts if p.split("\n", 1)[0].strip() == title]
    return FENCE.findall(body)


def run_section(title: str, cwd: Path) -> dict[str, Any]:
    """Run a section's blocks in a fresh interpreter; returns what it printed and counted."""
    counted = CASES[title][2]
    program = "\n".join(
        [
            "import json, sys",
            "namespace = {'__name__': '__docs__'}",
            f"blocks = json.loads({json.dumps(json.dumps(section(title)))})",
            "for i, block in enumerate(blocks, 1):",
            "    exec(compile(block, f'integrations.md block {i}', 'exec'), namespace)",
            f"print('COUNTED', json.dumps(list(eval({counted!r}, namespace))))",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    counted_line = [line for line in done.stdout.splitlines() if line.startswith("COUNTED ")]
    return {"stdout": done.stdout, "counted": json.loads(counted_line[-1].split(" ", 1)[1])}


def test_the_page_has_one_section_per_framework():
    for title in CASES:
        assert len(section(title)) >= 2, title


@pytest.mark.slow
@pytest.mark.parametrize("title", list(CASES))
def test_the_example_runs_offline_and_its_audit_flags_only_the_unwrapped_handoff(
    title: str, tmp_path: Path
) -> None:
    validated, plain, _ = CASES[title]
    ran = run_section(title, tmp_path)
    traces = tmp_path / "traces.jsonl"
    assert traces.exists() and not (ROOT / "traces.jsonl").exists()
    result = audit(load_traces(traces))
    summary = result.figures.summary
    # Usage counted once: the audit's tokens are the framework's own count.
    assert [summary["input_tokens"], summary["output_tokens"]] == ran["counted"]
    flagged = {(f.sender, f.receiver) for f in result.findings}
    assert validated not in flagged, [f.message for f in result.findings]
    assert flagged == {plain}, [f.message for f in result.findings]
    # Both are edges of the audit: one validated by the handshake, one not.
    edges = {(e["sender"], e["receiver"]): e for e in result.figures.edges}
    assert edges[validated]["validation"]["answers"] == 1
    assert edges[plain]["validation"] is None and edges[plain]["handoffs"] == 1
