"""The figures' rows kept per trace: what a store keeps so that, once it grows, the figures
read every untouched trace's rows as kept and derive only the touched traces' again.

Each relation of :data:`PER_TRACE` holds rows of one trace each, computed from that trace's
derived rows alone, and every figure that reads it gives the same rows from it as from the
spans: sums of the per-trace sums, and what depends on other traces (a workflow run again,
an idempotency key executed first in another trace) joined in afterwards from the derived
tables, as the figure itself does.
"""

from __future__ import annotations

from typing import Final

from auditor.figures.base import UNCHARGED, unfiltered
from auditor.figures.waste import PER_TRACE as WASTE_PER_TRACE

__all__ = ["PER_TRACE", "READS", "STANDS_FOR"]

PER_TRACE: Final = {
    # Few rows (none where every usage span names an agent): read for the summary's
    # uncharged totals and to leave them out of the agents' spend.
    "uncharged": unfiltered(
        f"SELECT trace_id, span_id, input_tokens, output_tokens, cost_usd FROM ({UNCHARGED})"
    ),
    "waste": unfiltered(WASTE_PER_TRACE),
    # Other instrumentations' spans, each read from its own columns: what the framework
    # figures (turns, conversations) read of every span, none in handoffscope's own store.
    "fw_spans": "SELECT * FROM hs_fw_spans",
}
"""The unfiltered query of each per-trace relation, over the ``hs_<name>_all`` views."""

STANDS_FOR: Final = {"fw_spans": "hs_fw_spans"}
"""The relations of :data:`PER_TRACE` that hold a view's very rows, and that view: a grown
store points it at them."""

READS: Final = ("usage", "phases", "attempts", "handoffs", "traces")
"""The derived tables the relations of :data:`PER_TRACE` are computed from."""
