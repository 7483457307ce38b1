"""Record ``sample_traces/a2a/``: a real two-process A2A run of the example in ``examples/a2a``.

Usage: ``python scripts/record_a2a_sample.py [--handoffs 200] [--out sample_traces/a2a]``

Process one is ``handoffscope serve --binding a2a writer:writer`` (SQLite store, spans to a
file); process two is ``researcher.py`` (``A2AChannel``, spans to its own file), with
duplicates and conflicting payloads mixed in. The ground truth in ``manifest.json`` comes from
what the processes did, not from the audit: the researcher's report of every handoff's
outcome and the writer's side-effect file (one line per execution). The figures are the
audit's, pinned so that a change in what the audit sees shows up in review. a2a-sdk's own
tracing of its internals is switched off (``OTEL_INSTRUMENTATION_A2A_SDK_ENABLED=false``) to
keep the sample to the handshake's spans; the audit ignores those spans either way.

Unlike the simulated samples, a recorded run is not byte-reproducible (real clocks, real ids):
record it again only when the binding's spans change, and review the manifest's diff.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "a2a"
HANDOFFSCOPE = Path(sys.executable).with_name("handoffscope")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def record(work: Path, handoffs: int, seed: int) -> dict[str, Any]:
    """Run both processes in ``work``; what the researcher and the writer reported."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "WRITER_STORE": str(work / "writer.db"),
        "WRITER_EFFECTS": str(work / "effects.jsonl"),
        "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED": "false",
    }
    log = work / "serve.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [str(HANDOFFSCOPE), "serve", "--binding", "a2a", "writer:writer", "--port", str(port),
             "--trace-file", str(work / "writer.jsonl"), "--log-level", "warning"],
            cwd=EXAMPLE, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        give_up = time.monotonic() + 30
        while True:
            if server.poll() is not None:
                raise SystemExit(f"the writer exited: {log.read_text()}")
            try:
                if httpx.get(url + "/.well-known/agent-card.json", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > give_up:
                raise SystemExit(f"the writer did not come up: {log.read_text()}")
            time.sleep(0.05)
        subprocess.run(
            [sys.executable, "researcher.py", "--url", url, "--handoffs", str(handoffs),
             "--seed", str(seed), "--concurrency", "4",
             "--trace-file", str(work / "researcher.jsonl"), "--report", str(work / "report.json")],
            cwd=EXAMPLE, env=env, check=True,
        )  # fmt: skip
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    report = json.loads((work / "report.json").read_text())
    executions = Counter(
        json.loads(line)["key"] for line in (work / "effects.jsonl").read_text().splitlines()
    )
    return {"report": report, "executions": executions}


def ground_truth(report: list[dict[str, Any]], executions: Counter[str]) -> dict[str, Any]:
    """What happened, from the processes themselves."""
    kinds = Counter(r["kind"] for r in report)
    return {
        "handoffs": len(report),
        "fresh": kinds["fresh"],
        "duplicates": kinds["duplicate"],
        "conflicts": kinds["conflict"],
        "executed": sum(r["outcome"] == "executed" for r in report),
        "replayed": sum(r["outcome"] == "replayed" for r in report),
        "refused_conflicts": sum(r["reason"] == "duplicate_key_conflict" for r in report),
        "keys_executed": len(executions),
        "most_executions_of_one_key": max(executions.values()),
        "edges": {"researcher -> writer": len(report)},
        "outcomes": sorted(
            [r["handoff_id"], r["key"], r["kind"], r["outcome"] or r["reason"]] for r in report
        ),
    }


def figures(folder: Path) -> dict[str, Any]:
    """The audit's figures of the recorded files (what tests/auditor/test_audit.py checks)."""
    from auditor import audit, load_traces

    traces = load_traces(folder)
    result = audit(traces)
    summary = result.figures.summary
    rel = result.figures.reliability
    p95 = {r["receiver"]: r["p95_ms"] for r in result.figures.latency["receivers"]}
    return {
        "spans": traces.span_count,
        "duplicate_spans": traces.duplicate_count,
        "workflows": rel["workflows"],
        "succeeded": rel["succeeded_workflows"],
        "full_chain_restarts": rel["full_chain_restarts"],
        "input_tokens": summary["input_tokens"],
        "output_tokens": summary["output_tokens"],
        "cost_usd": round(summary["cost_usd"], 6),
        "handoffs": summary["handoffs"],
        "agents": {agent: {"validation_p95_ms": ms} for agent, ms in p95.items()},
        "findings": len(result.findings),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--handoffs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=ROOT / "sample_traces" / "a2a")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ran = record(work, args.handoffs, args.seed)
        files = []
        for name in ("writer", "researcher"):
            data = (work / f"{name}.jsonl").read_bytes()
            target = out / f"{name}.jsonl.gz"
            with open(target, "wb") as raw, gzip.GzipFile("", "wb", 9, raw, mtime=0) as gz:
                gz.write(data)
            files.append(target.name)
    truth = ground_truth(ran["report"], ran["executions"])
    manifest = {
        "format": 1,
        "generator": "scripts/record_a2a_sample.py (two processes over A2A)",
        "parameters": {
            "handoffs": args.handoffs,
            "duplicates": truth["duplicates"],
            "conflicts": truth["conflicts"],
            "seed": args.seed,
            "concurrency": 4,
        },
        "files": files,
        "faults": [],
        "expected_findings": {},
        "ground_truth": truth,
        "figures": figures(out),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in truth.items() if k != "outcomes"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
