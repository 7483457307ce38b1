"""docs/trace-schema.md read as data: its tables of span keys and their types."""

from __future__ import annotations

import re

from tests.support.paths import REPO

DOC = REPO / "docs" / "trace-schema.md"
"""The trace schema's reference."""
TYPES = {"string": str, "int": int, "double": float, "boolean": bool, "string[]": tuple}
"""The Python type of a span attribute of each type the doc names."""


def sections() -> dict[str, dict[str, str]]:
    """Heading -> {documented key: type} from the doc's tables."""
    out: dict[str, dict[str, str]] = {}
    current = ""
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            current = line[3:].strip().strip("`")
            out[current] = {}
        m = re.match(r"\| `([^`]+)` \| ([^|]+?) \|", line)
        if m:
            out[current][m.group(1)] = m.group(2).strip()
    return out
