"""The sending agent of the A2A example: hands topics to the writer through ``A2AChannel``.

Run it once the writer is up (one command, a second process)::

    python researcher.py --url http://127.0.0.1:8700 --handoffs 1000 --trace-file researcher.jsonl

Among the handoffs, ``--duplicates`` of them send an earlier topic again under its key (the
writer must answer with the stored draft, never write twice) and ``--conflicts`` send another
topic under an earlier key (the writer must refuse). Prints one JSON summary line; with
``--report`` also writes every handoff's outcome there.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from collector import Sender, configure_telemetry
from collector.a2a import A2AChannel


def plan(count: int, duplicates: int, conflicts: int, seed: int) -> list[dict[str, Any]]:
    """The handoffs to make, in order: fresh keys with repeats of either kind mixed in."""
    rng = random.Random(seed)
    fresh = count - duplicates - conflicts
    if fresh < 1:
        raise SystemExit("--duplicates plus --conflicts must leave at least one fresh handoff")
    steps: list[dict[str, Any]] = [
        {"kind": "fresh", "key": f"draft-{i}", "topic": f"topic {i}"} for i in range(fresh)
    ]
    for kind, n in (("duplicate", duplicates), ("conflict", conflicts)):
        for _ in range(n):
            i = rng.randrange(fresh)
            topic = f"topic {i}" if kind == "duplicate" else f"another topic {rng.random():.6f}"
            at = rng.randrange(i + 1, len(steps) + 1)  # always after the key's first use
            steps.insert(at, {"kind": kind, "key": f"draft-{i}", "topic": topic})
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8700")
    parser.add_argument("--handoffs", type=int, default=20)
    parser.add_argument("--duplicates", type=int, default=None, help="default: 10%%")
    parser.add_argument("--conflicts", type=int, default=None, help="default: 5%%")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--trace-file", type=Path, default=None)
    parser.add_argument("--report", type=Path, default=None)
    args = parser.parse_args(argv)
    duplicates = args.handoffs // 10 if args.duplicates is None else args.duplicates
    conflicts = args.handoffs // 20 if args.conflicts is None else args.conflicts
    steps = plan(args.handoffs, duplicates, conflicts, args.seed)

    setup = None
    if args.trace_file is not None:
        setup = configure_telemetry(
            service_name="researcher", otlp=None, trace_file=args.trace_file
        )
    researcher = Sender("researcher")
    outcomes: list[dict[str, Any]] = []
    try:
        with A2AChannel(args.url) as channel:
            first = [s for s in steps if s["kind"] == "fresh"]
            again = [s for s in steps if s["kind"] != "fresh"]

            def hand(step: dict[str, Any]) -> dict[str, Any]:
                outcome = researcher.handoff(
                    channel,
                    task_id=step["key"] if step["kind"] != "conflict" else f"{step['key']}:other",
                    payload={"topic": step["topic"]},
                    output_schema="draft@1",
                    idempotency_key=step["key"],
                )
                answer = outcome.answer
                return {
                    **step,
                    "handoff_id": outcome.handoff_id,
                    "committed": outcome.committed,
                    "outcome": outcome.result.outcome if outcome.result else None,
                    "reason": getattr(answer, "reason", None),
                }

            # Every key's first use has finished before it is used again, so a repeat is
            # judged against a stored result, never raced against the first execution.
            with ThreadPoolExecutor(args.concurrency) as pool:
                outcomes = list(pool.map(hand, first))
                outcomes += list(pool.map(hand, again))
    finally:
        if setup is not None:
            setup.shutdown()
    tally = Counter(f"{o['kind']}:{o['outcome'] or o['reason']}" for o in outcomes)
    print(json.dumps({"handoffs": len(outcomes), "tally": dict(sorted(tally.items()))}))
    if args.report is not None:
        args.report.write_text(json.dumps(outcomes, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
