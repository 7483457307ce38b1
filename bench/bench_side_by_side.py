"""Two versions' audits of the same input, run at the same time, compared in CPU seconds.

    python bench/bench_side_by_side.py /tmp/before . '/tmp/in-19-files/*.jsonl' --rounds 2

Each round starts one process per checkout, both at once: ``load_traces`` then ``audit`` (every
rule and figure) of INPUT with that checkout's code. On a shared two-core machine, runs one
after the other see different loads and their wall times swing by 2x; run together, each
sees the other's, and their CPU seconds compare.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

_CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from auditor import audit, load_traces

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

started, cpu0 = time.perf_counter(), cpu()
traces = load_traces(sys.argv[2])
loaded, cpu1 = time.perf_counter(), cpu()
result = audit(traces)
done, cpu2 = time.perf_counter(), cpu()
print(json.dumps({
    "load_seconds": loaded - started, "load_cpu": cpu1 - cpu0,
    "audit_seconds": done - loaded, "audit_cpu": cpu2 - cpu1,
    "seconds": done - started, "cpu_seconds": cpu2 - cpu0,
    "spans": traces.span_count, "findings": len(result.findings),
    "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def round_of(checkouts: list[Path], source: str) -> dict[str, dict[str, float]]:
    """One round: every checkout's audit of ``source``, started together."""
    running = {
        str(c): subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(c.resolve()), source],
            stdout=subprocess.PIPE,
            text=True,
        )
        for c in checkouts
    }
    out = {}
    for name, process in running.items():
        stdout, _ = process.communicate()
        out[name] = json.loads(stdout.strip().splitlines()[-1])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="a checkout of the other version")
    parser.add_argument("after", type=Path, help="this checkout")
    parser.add_argument("input", help="trace files: a path, folder or glob")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    rounds = []
    for number in range(args.rounds):
        started = time.perf_counter()
        found = round_of([args.before, args.after], args.input)
        for name, r in found.items():
            print(
                f"round {number + 1} {name}: {r['seconds']:.1f} s, {r['cpu_seconds']:.1f} CPU s"
                f" (load {r['load_cpu']:.1f}, audit {r['audit_cpu']:.1f}),"
                f" {r['findings']} findings, {r['peak_mb']:.0f} MB",
                file=sys.stderr,
            )
        rounds.append({"wall": time.perf_counter() - started, "runs": found})
    load = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"rounds": rounds, "children_cpu": load.ru_utime + load.ru_stime}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
