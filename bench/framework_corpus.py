"""Spans shaped as other frameworks write them, for the auditor benchmark.

The spans are real: every trace file recorded from the frameworks' own packages
(``tests/fixtures/frameworks/**/traces.jsonl``: OpenInference, OpenLLMetry, Logfire,
pydantic-ai, the GenAI conventions, CrewAI's own tracing ...), with their model
messages, tool arguments and outputs as the instrumentations wrote them. They are repeated
until the target span count is reached; each copy gets its own trace and span ids (as
``bench/gen_traces.py`` gives them) and its own conversation and session ids, so that
copies are distinct runs and never one conversation across the whole corpus.

    python bench/framework_corpus.py --spans 400000 --out /tmp/hs-bench/frameworks-400000.jsonl

Prints one JSON line describing the file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from auditor.model.conventions import CONVERSATION_KEYS  # noqa: E402
from bench.gen_traces import MARK, template_lines  # noqa: E402
from bench.gen_traces import generate as write  # noqa: E402

FIXTURES = HERE.parent / "tests" / "fixtures" / "frameworks"
_CONVERSATIONS = re.compile(
    rb'("key":"(?:'
    + b"|".join(re.escape(k.encode()) for k in CONVERSATION_KEYS)
    + rb')","value":\{"stringValue":")'
)


def framework_lines(folder: Path = FIXTURES) -> list[tuple[bytes, int]]:
    """Every JSON line of the recorded framework traces, marked for copying (conversation
    and session ids too), with its span count."""
    return [
        (_CONVERSATIONS.sub(rb"\1" + MARK + b"-", marked), spans)
        for marked, spans in template_lines(folder, "**/traces.jsonl")
    ]


def generate(out: Path, *, spans: int) -> dict[str, object]:
    """Write at least ``spans`` framework spans (whole export lines) to ``out``."""
    partial = out.with_name(f".{out.name}")  # keeps the suffix that picks compression
    made = write(partial, spans=spans, template=FIXTURES, lines=framework_lines())
    partial.rename(out)
    return {**made, "file": str(out)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, required=True, help="spans to write (at least)")
    parser.add_argument("--out", type=Path, required=True, help="output file (.jsonl[.zst|.gz])")
    args = parser.parse_args(argv)
    print(json.dumps(generate(args.out, spans=args.spans)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
