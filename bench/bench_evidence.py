"""What keeping the evidence costs: synchronous evidence spans and the flush on SIGTERM.

    .venv/bin/python bench/bench_evidence.py [--spans N] [--repeats R] [--json]

Measures, on the thread that ends the spans, the time per span of ``N`` ``handoff.validate``
spans written to an OTLP JSON-lines trace file (a real file in a temporary folder):

* ``batch``: the ``BatchSpanProcessor`` that ``configure_telemetry()`` installs by default
  (the baseline a user has);
* ``evidence_0``, ``evidence_5``, ``evidence_100``: ``sync_evidence=True``
  (``collector.evidence.EvidenceFirst``) with 0 %, 5 % and 100 % of the validations timed
  out, so exported at once on this thread (100 %: every validation times out);

and, in a subprocess with ``SIGTERM_SPANS`` spans still buffered (under the batch queue's
2048), how long SIGTERM takes to end it with the flush handler (``sigterm_flush``), and how
many of the spans reached the file.
Figures are the best of ``R`` repeats; ratios are against ``batch`` in the same run.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.exporter.otlp.json.file import FileSpanExporter  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402

from collector import schema  # noqa: E402
from collector.evidence import EvidenceFirst  # noqa: E402

SIGTERM_SPANS = 2_000


def per_span_us(n: int, share: float | None, folder: Path) -> float:
    """Microseconds per ended span on the calling thread (``share`` None: batch only)."""
    exporter = FileSpanExporter(folder / f"traces-{share}-{time.monotonic_ns()}.jsonl")
    batch = BatchSpanProcessor(exporter)
    provider = TracerProvider()
    provider.add_span_processor(batch if share is None else EvidenceFirst(batch, exporter))
    tracer = provider.get_tracer("bench")
    every = 0 if not share else round(1 / share)
    t0 = time.perf_counter()
    for i in range(n):
        timed_out = every and i % every == 0
        decision = schema.DECISION_TIMEOUT if timed_out else schema.DECISION_ACCEPT
        with tracer.start_as_current_span(schema.SPAN_VALIDATE) as span:
            span.set_attribute(schema.DECISION, decision)
    elapsed = time.perf_counter() - t0
    provider.shutdown()
    return elapsed / n * 1e6


CHILD = textwrap.dedent(
    """
    import sys, time
    from collector import configure_telemetry, schema
    setup = configure_telemetry(trace_file=sys.argv[1], otlp=None, metrics=False)
    tracer = setup.tracer_provider.get_tracer("bench")
    for i in range(int(sys.argv[2])):
        with tracer.start_as_current_span(schema.SPAN_VALIDATE) as span:
            span.set_attribute(schema.DECISION, schema.DECISION_TIMEOUT)
    print("ready", flush=True)
    time.sleep(60)
    """
)


def sigterm_flush(n: int, folder: Path) -> tuple[float, int]:
    """Milliseconds from SIGTERM to the process's end, and spans found in its file."""
    path = folder / f"sigterm-{time.monotonic_ns()}.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(n)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(60)
    elapsed = (time.perf_counter() - t0) * 1000
    assert code == -signal.SIGTERM, code
    text = path.read_text() if path.exists() else ""
    return elapsed, text.count('"name":"handoff.validate"') + text.count(
        '"name": "handoff.validate"'
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=20_000, help="spans per measurement")
    parser.add_argument("--repeats", type=int, default=5, help="best of this many runs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    n, repeats = args.spans, args.repeats
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        shapes = {"batch": None, "evidence_0": 0.0, "evidence_5": 0.05, "evidence_100": 1.0}
        for name, share in shapes.items():
            figures[f"{name}_us"] = min(per_span_us(n, share, folder) for _ in range(repeats))
        stops = [sigterm_flush(SIGTERM_SPANS, folder) for _ in range(repeats)]
        figures["sigterm_flush_ms"] = min(ms for ms, _ in stops)
        figures["sigterm_spans_kept"] = min(kept for _, kept in stops)
    base = figures["batch_us"]
    for name in ("evidence_0", "evidence_5", "evidence_100"):
        figures[f"{name}_ratio"] = figures[f"{name}_us"] / base
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"spans per run: {n}, best of {repeats}")
    for name in ("batch", "evidence_0", "evidence_5", "evidence_100"):
        ratio = figures[f"{name}_us"] / base
        print(f"{name:>14}: {figures[f'{name}_us']:8.2f} us/span  ({ratio:.2f}x batch)")
    print(
        f"SIGTERM with {SIGTERM_SPANS} spans buffered: ends in "
        f"{figures['sigterm_flush_ms']:.0f} ms, "
        f"{figures['sigterm_spans_kept']:.0f}/{SIGTERM_SPANS} spans in the file"
    )


if __name__ == "__main__":
    main()
