"""Another framework's GenAI workflow span (``invoke_workflow``, without the
``handoff.workflow.id`` the library sets) is a run that succeeded unless it ended in error;
handoffscope's own workflow spans keep the outcome the library wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from auditor import audit, load_traces
from tests.support.paths import REPO, TESTS

ADK = TESTS / "fixtures" / "frameworks" / "unseen" / "adk-sub-agents-transfer"


def _with_workflow_status(tmp_path: Path, code: int | None) -> Path:
    """The recorded ADK run, its ``invoke_workflow`` span given status ``code``."""
    doc = json.loads((ADK / "traces.jsonl").read_text())
    found = 0
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                if span["name"].startswith("invoke_workflow"):
                    found += 1
                    if code is not None:
                        span["status"] = {"code": code, "message": "the run failed"}
    assert found == 1
    out = tmp_path / "traces.jsonl"
    out.write_text(json.dumps(doc) + "\n")
    return out


@pytest.mark.parametrize(
    ("code", "succeeded"),
    [(None, 1), (1, 1), (2, 0)],
    ids=["unset", "ok", "error"],
)
def test_a_foreign_workflow_succeeds_unless_it_ended_in_error(
    tmp_path: Path, code: int | None, succeeded: int
) -> None:
    result: Any = audit(load_traces([_with_workflow_status(tmp_path, code)]))
    reliability = result.figures.reliability
    assert reliability["workflows"] == 1
    assert reliability["succeeded_workflows"] == succeeded


def test_the_librarys_workflows_keep_their_own_outcome() -> None:
    """The sample fault mix's workflows: failures the library recorded stay failures."""
    result: Any = audit(load_traces([REPO / "sample_traces" / "fault-mix"]))
    reliability = result.figures.reliability
    assert 0 < reliability["succeeded_workflows"] < reliability["workflows"]
