"""How many on-time validations a sender voids when many run at once, and next to hung ones.

    python bench/bench_validation_concurrency.py --handoffs 200 1000
    python bench/bench_validation_concurrency.py --handoffs 200 --root /path/to/other/checkout

``--handoffs N``: N handoffs start together (one thread each) to one receiver whose validator
answers in ``--answer-s`` seconds (1 s), well inside the 2 s clock; every one should commit.
``--hung H`` first sends H handoffs to another receiver whose validator never returns, then
one handoff to a healthy receiver, to see whether the hung ones starve it. ``--root`` runs the
same measurement against another checkout (e.g. the previous release) in a child process, so
the two figures come from one run on one machine. Prints one JSON line per measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(handoffs: int, answer_s: float, hung: int) -> dict[str, object]:
    from collector import InProcessChannel, Receiver, Sender, accept

    never = threading.Event()
    sender = Sender("planner", max_attempts=1)
    stuck = Receiver("stuck", validator=lambda w: never.wait() and None, executor=lambda w: "never")

    def hang(i: int) -> None:  # three attempts each (the default cap), all left running
        Sender("planner").handoff(
            InProcessChannel(stuck),
            task_id=f"h{i}",
            payload={},
            output_schema="d",
            idempotency_key=f"h{i}",
        )

    hung_threads = [threading.Thread(target=hang, args=(i,), daemon=True) for i in range(hung)]
    for t in hung_threads:
        t.start()
    for t in hung_threads:
        t.join()
    healthy = Receiver("healthy", validator=lambda w: accept(eta_ms=10), executor=lambda w: "ok")
    healthy_after_hung = sender.handoff(
        InProcessChannel(healthy), task_id="ok", payload={}, output_schema="d", idempotency_key="ok"
    ).committed

    def validate(work):
        time.sleep(answer_s)
        return accept(eta_ms=100)

    busy = Receiver("busy", validator=validate, executor=lambda w: "done")
    states: list[str | None] = []
    lock = threading.Lock()
    start = threading.Barrier(handoffs)

    def one(i: int) -> None:
        start.wait()
        out = sender.handoff(
            InProcessChannel(busy),
            task_id=f"t{i}",
            payload={},
            output_schema="d",
            idempotency_key=f"t{i}",
        )
        with lock:
            states.append(out.state)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(handoffs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {
        "handoffs": handoffs,
        "answer_s": answer_s,
        "voided": states.count("void"),
        "committed": states.count("committed"),
        "hung_first": hung,
        "healthy_after_hung_committed": healthy_after_hung,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--handoffs", type=int, nargs="+", default=[200, 1000])
    ap.add_argument("--answer-s", type=float, default=1.0)
    ap.add_argument("--hung", type=int, default=0)
    ap.add_argument("--root", type=Path, default=ROOT, help="checkout whose collector to measure")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        import collector

        figures = measure(args.handoffs[0], args.answer_s, args.hung)
        print(json.dumps({"collector": collector.__file__, **figures}), flush=True)
        os._exit(0)  # a release whose stuck validators hold the process would never exit
    for n in args.handoffs:
        cmd = [sys.executable, __file__, "--child", "--handoffs", str(n)]
        cmd += [
            "--answer-s",
            str(args.answer_s),
            "--hung",
            str(args.hung),
            "--root",
            str(args.root),
        ]
        # The checkout's own collector, ahead of any installed one.
        env = {**os.environ, "PYTHONPATH": str(args.root)}
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=600, env=env, cwd=args.root
        )
        line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-500:]
        print(json.dumps({"root": str(args.root), **json.loads(line)}) if out.stdout else line)


if __name__ == "__main__":
    main()
