"""Two versions of the library, measured in alternation: what one change did to a handshake.

    git archive <commit> collector bench | tar -x -C /tmp/before
    .venv/bin/python bench/compare_handshake.py /tmp/before . [--pairs 16]

On a shared machine one run of ``bench_handshake.py`` against another minutes later can
differ by more than the change being measured. This runs short measurements of both trees
(each in its own process, the order swapped every pair) and reports, per variant, the best
figure of each tree and the median of the paired after/before ratios, plus the ratios the
goals are stated in (telemetry on / bare SDK spans, on / the SDK recording the same data,
off / one ``json.dumps``) as medians over the runs. Each tree is measured with its own
``bench/bench_handshake.py``, so both must have one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

VARIANTS = ("ref", "bare", "equiv", "on", "off")
GOAL_RATIOS = (("on", "bare"), ("on", "equiv"), ("off", "ref"))


def one(root: Path, handshakes: int, repeats: int) -> dict[str, float]:
    """Measure the variants of the library in ``root`` (run in a fresh process)."""
    sys.path[:0] = [str(root / "bench"), str(root)]
    import bench_handshake as b  # noqa: PLC0415 - the tree's own benchmark module

    import collector  # noqa: PLC0415

    if not Path(collector.__file__).resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"imported collector from {collector.__file__}, not {root}")
    from opentelemetry import trace  # noqa: PLC0415

    tp = b.provider()
    noop = trace.NoOpTracerProvider()
    runs = {
        "ref": b.reference(handshakes),
        "bare": b.sdk_loop(tp, equivalent=False),
        "equiv": b.sdk_loop(tp, equivalent=True),
        "on": b.handshake_loop(*b.agents(tracer_provider=tp, clock=collector.VirtualClock())),
        "off": b.handshake_loop(*b.agents(tracer_provider=noop, clock=collector.VirtualClock())),
    }
    figures: dict[str, float] = b.measure_all(runs, handshakes, repeats)
    tp.shutdown()
    return figures


def compare(before: Path, after: Path, pairs: int, handshakes: int, repeats: int) -> dict:
    """Alternate ``pairs`` runs of each tree; return the figures described in the docstring."""
    runs: dict[Path, list[dict[str, float]]] = {before: [], after: []}
    for i in range(pairs):
        for root in (before, after) if i % 2 == 0 else (after, before):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--one",
                    str(root),
                    "--handshakes",
                    str(handshakes),
                    "--repeats",
                    str(repeats),
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            runs[root].append(json.loads(out.splitlines()[-1]))
    report: dict = {}
    for name, root in (("before", before), ("after", after)):
        best = {v: min(r[v] for r in runs[root]) for v in VARIANTS}
        ratios = {
            f"{a}/{b}": statistics.median(r[a] / r[b] for r in runs[root]) for a, b in GOAL_RATIOS
        }
        report[name] = {"best_us": best, "median_ratios": ratios}
    report["median_after_over_before"] = {
        v: statistics.median(y[v] / x[v] for x, y in zip(runs[before], runs[after], strict=True))
        for v in VARIANTS
    }
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", nargs="?", type=Path, help="root of the earlier tree")
    ap.add_argument("after", nargs="?", type=Path, help="root of the later tree")
    ap.add_argument("--pairs", type=int, default=16, help="alternations of the two trees")
    ap.add_argument("--handshakes", type=int, default=300, help="iterations per round")
    ap.add_argument("--repeats", type=int, default=3, help="rounds per run (best is kept)")
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one is not None:
        print(json.dumps(one(args.one, args.handshakes, args.repeats)))
        return 0
    if args.before is None or args.after is None:
        ap.error("give the roots of the two trees to compare")
    report = compare(args.before, args.after, args.pairs, args.handshakes, args.repeats)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
