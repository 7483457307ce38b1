"""Benchmark: the first audit of a compacted store after new spans are appended to it.

Builds a corpus from the simulator's fault mix (``bench/gen_traces.py``: BASE + NEW spans),
compacts the first BASE spans into a folder store and keeps the last lines as the new data,
to which it adds lines of old copies (spans of traces the store already holds: late commits,
a trace cut across the two) and lines sent again (spans the store holds already). Then, in
one run, each as a whole process:

* ``handoffscope compact NEW --out STORE --append --no-audit`` (read, shred and write the new
  spans; drop the ones the store holds);
* the DuckDB table shred of the new file alone (``bench_audit.py``'s explicit-schema shred);
* ``handoffscope audit STORE --format json``: the first audit after the append, then the
  same again (its kept report);
* for reference, the first audit with the saved derived tables removed (everything derived
  from the spans again, what an audit of a grown store did before it grew by segments).

The reports of the incremental and the reference audit must be the same (checked).

    python bench/bench_grown_store.py --base 1000000 --new 100000 --repeat 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import bench_audit, gen_traces  # noqa: E402  (beside this file)


def corpus(folder: Path, base: int, new: int, seed: int = 11) -> tuple[Path, Path, dict[str, int]]:
    """The old and the new trace files (made once per size); and what the new one holds."""
    old_file, new_file = folder / f"old-{base}.jsonl", folder / f"new-{base}-{new}.jsonl"
    meta = folder / f"new-{base}-{new}.json"
    if old_file.exists() and new_file.exists() and meta.exists():
        return old_file, new_file, json.loads(meta.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    template = gen_traces.template_lines(gen_traces.DEFAULT_TEMPLATE)
    lines = list(gen_traces.copies(template, base))
    tail = list(gen_traces.copies(template, base + new))
    rng = random.Random(seed)
    # Late: lines of old copies moved to the new data (their traces cut across the two).
    late = set(rng.sample(range(len(lines)), max(1, len(lines) // 200)))
    again = rng.sample([i for i in range(len(lines)) if i not in late], max(1, len(lines) // 200))
    old = [line for i, (line, _) in enumerate(lines) if i not in late]
    fresh = [line for line, _ in tail[len(lines) :]]
    moved = [lines[i][0] for i in sorted(late)]
    resent = [lines[i][0] for i in again]
    old_file.write_bytes(b"".join(line + b"\n" for line in old))
    new_file.write_bytes(b"".join(line + b"\n" for line in fresh + moved + resent))
    info = {
        "new_spans": sum(n for _, n in tail[len(lines) :]),
        "late_spans": sum(lines[i][1] for i in late),
        "resent_spans": sum(lines[i][1] for i in again),
    }
    meta.write_text(json.dumps(info))
    return old_file, new_file, info


def whole(command: list[str], *, capture: bool = False) -> dict[str, Any]:
    """``command`` as one process: wall and CPU seconds, peak memory, and with ``capture`` a
    digest of its JSON output without the files it names."""
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryFile() as out:
        timing = Path(folder) / "time"
        started = time.perf_counter()
        done = subprocess.run(
            ["/usr/bin/time", "-f", "%U %S %M", "-o", str(timing), *command],
            stdout=out,
            stderr=subprocess.PIPE,
            cwd=folder,
            check=False,
        )
        seconds = time.perf_counter() - started
        user, system, peak_kb = timing.read_text().split()[-3:]
        out.seek(0)
        text = out.read()
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)}: exit {done.returncode}\n{done.stderr.decode()}")
    result: dict[str, Any] = {
        "seconds": round(seconds, 3),
        "cpu_seconds": round(float(user) + float(system), 3),
        "peak_mb": round(int(peak_kb) / 1024),
    }
    if capture:
        report = json.loads(text, parse_int=float)
        for key in ("files", "problems"):
            report.pop(key, None)
        for key in ("files", "problems", "duplicate_spans"):
            report["summary"].pop(key, None)
        report["findings"].sort(key=lambda f: json.dumps(f, sort_keys=True))
        result["findings"] = len(report["findings"])
        result["sha256"] = hashlib.sha256(json.dumps(report, sort_keys=True).encode()).hexdigest()
    print(f"bench_grown_store: {command[3:5]} {result}", file=sys.stderr, flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=int, default=1_000_000, help="spans in the store")
    parser.add_argument("--new", type=int, default=100_000, help="new spans appended")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/handoffscope-grown"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-reference", action="store_true", help="skip the full audit")
    args = parser.parse_args(argv)
    cli = [sys.executable, "-m", "auditor.cli"]
    old_file, new_file, info = corpus(args.dir, args.base, args.new)
    pristine = args.dir / f"store-{args.base}"
    if not pristine.exists():
        whole([*cli, "compact", str(old_file), "--out", str(pristine), "--no-audit", "-q"])
    rounds: list[dict[str, Any]] = []
    for number in range(args.repeat):
        store = args.dir / "grown"
        shutil.rmtree(store, ignore_errors=True)
        # Modification times kept: the saved tables' manifest names them.
        shutil.copytree(pristine, store, copy_function=shutil.copy2)
        # The store as audited before the new spans came (what `compact` itself does): each
        # rule's findings kept beside it, by this version of the code. The copy is audited,
        # not the pristine store: kept findings are keyed by their files' paths, inodes and
        # change times, so the pristine store's would never be the copy's, and the first
        # audit below would run every rule over every trace.
        whole([*cli, "audit", str(store), "--format", "json"])
        new_file.read_bytes()  # in the page cache, as a segment just written is
        append = whole(
            [*cli, "compact", str(new_file), "--out", str(store), "--append", "--no-audit", "-q"]
        )
        shred = bench_audit.measure("shred", str(new_file))
        audit = [*cli, "audit", str(store), "--format", "json"]
        first = whole(audit, capture=True)
        again = whole(audit, capture=True)
        row: dict[str, Any] = {"round": number + 1, "append": append, "shred": shred}
        row.update(first=first, again=again)
        if not args.no_reference and number == 0:
            for derived in store.glob(".*.derived"):
                shutil.rmtree(derived)
            row["reference"] = whole(audit, capture=True)
            if row["reference"]["sha256"] != first["sha256"]:
                raise SystemExit("the incremental audit's report differs from a full audit's")
        rounds.append(row)
    print(json.dumps({"base": args.base, **info, "rounds": rounds}, indent=1))
    for row in rounds:
        shred_s = row["shred"]["seconds"]
        print(
            f"round {row['round']}: first audit {row['first']['seconds']:.2f} s"
            f" ({row['first']['cpu_seconds']:.2f} CPU s, {row['first']['peak_mb']} MB)"
            f" = shred {shred_s:.2f} s + {row['first']['seconds'] - shred_s:.2f} s;"
            f" again {row['again']['seconds']:.2f} s; append {row['append']['seconds']:.2f} s"
            + (
                f"; full audit {row['reference']['seconds']:.2f} s"
                f" ({row['reference']['cpu_seconds']:.2f} CPU s)"
                if "reference" in row
                else ""
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
