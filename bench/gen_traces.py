"""Generate large OTLP JSON-lines trace sets for the auditor benchmark.

The spans are real: the template is a sample scenario the simulator wrote through the
handshake library (``sample_traces/fault-mix`` by default: every kind of fault, re-sent
duplicates, several services). The template is repeated until the target span count is
reached; each copy gets its own trace ids, span ids, idempotency keys and workflow ids, so
every copy is a distinct set of workflows that breaks the rules the same way.

    python bench/gen_traces.py --spans 1000000 --out /tmp/hs-bench/1m.jsonl
    python bench/gen_traces.py --spans 10000000 --out /tmp/hs-bench/10m.jsonl.zst

A ``.zst`` or ``.gz`` suffix compresses the output. Prints one JSON line describing the file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TEMPLATE = ROOT / "sample_traces" / "fault-mix"
MARK = b"\x00"
# Each id keeps its length: the copy number (6 hex digits) replaces its first 6 digits.
_IDS = re.compile(rb'("(?:traceId|spanId|parentSpanId)":")[0-9a-f]{6}')
_NAMES = re.compile(rb'"(idem-|wf-)')


def template_lines(folder: Path, pattern: str = "*.jsonl*") -> list[tuple[bytes, int]]:
    """Every JSON line of the template's trace files (``pattern`` in ``folder``), marked for
    copying, with its span count."""
    lines: list[tuple[bytes, int]] = []
    for path in sorted(folder.glob(pattern)):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as fh:
            for raw in fh:
                raw = raw.rstrip(b"\n")
                if not raw.strip():
                    continue
                spans = sum(
                    len(ss.get("spans", []))
                    for rs in json.loads(raw)["resourceSpans"]
                    for ss in rs.get("scopeSpans", [])
                )
                marked = _IDS.sub(rb"\1" + MARK, raw)
                marked = _NAMES.sub(rb'"\1' + MARK + b"-", marked)
                lines.append((marked, spans))
    if not lines:
        raise SystemExit(f"gen_traces: no *.jsonl or *.jsonl.gz files in {folder}")
    return lines


def copies(lines: list[tuple[bytes, int]], target: int) -> Iterator[tuple[bytes, int]]:
    """Rewritten template lines, copy after copy, until ``target`` spans are out."""
    written = 0
    copy = 0
    while written < target:
        prefix = f"{copy:06x}".encode()
        for marked, spans in lines:
            yield marked.replace(MARK, prefix), spans
            written += spans
            if written >= target:
                return
        copy += 1


def open_out(path: Path) -> IO[bytes]:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".zst":
        import zstandard

        return zstandard.ZstdCompressor(level=3, threads=-1).stream_writer(open(path, "wb"))
    if path.suffix == ".gz":
        return gzip.open(path, "wb", compresslevel=3)  # type: ignore[return-value]
    return open(path, "wb")


def generate(
    out: Path,
    *,
    spans: int,
    template: Path = DEFAULT_TEMPLATE,
    lines: list[tuple[bytes, int]] | None = None,
) -> dict[str, object]:
    """Write at least ``spans`` spans (whole export lines) to ``out``; returns a summary.
    ``lines`` are the template's marked lines when they were read already."""
    lines = template_lines(template) if lines is None else lines
    started = time.perf_counter()
    total = count = 0
    with open_out(out) as fh:
        for line, n in copies(lines, spans):
            fh.write(line)
            fh.write(b"\n")
            total += n
            count += 1
    return {
        "file": str(out),
        "spans": total,
        "lines": count,
        "bytes": out.stat().st_size,
        "template": str(template.relative_to(ROOT) if template.is_relative_to(ROOT) else template),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, required=True, help="spans to write (at least)")
    parser.add_argument("--out", type=Path, required=True, help="output file (.jsonl[.zst|.gz])")
    parser.add_argument(
        "--template",
        type=Path,
        default=DEFAULT_TEMPLATE,
        help="folder of trace files to copy (default: sample_traces/fault-mix)",
    )
    args = parser.parse_args(argv)
    print(json.dumps(generate(args.out, spans=args.spans, template=args.template)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
