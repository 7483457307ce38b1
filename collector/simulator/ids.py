"""Seeded trace and span ids, so the same seed writes the same ids."""

from __future__ import annotations

import random

from opentelemetry.sdk.trace.id_generator import IdGenerator

__all__ = ["SeededIdGenerator"]


class SeededIdGenerator(IdGenerator):
    """An OpenTelemetry ``IdGenerator`` drawing from its own ``random.Random``.

    Ids are as random as the SDK's own (128-bit trace ids, 64-bit span ids, never zero) but
    reproducible: two generators built from the same seed produce the same sequence.
    """

    def __init__(self, seed: int | str) -> None:
        self._rng = random.Random(seed)

    def generate_span_id(self) -> int:
        """A non-zero 64-bit span id."""
        value = 0
        while value == 0:
            value = self._rng.getrandbits(64)
        return value

    def generate_trace_id(self) -> int:
        """A non-zero 128-bit trace id."""
        value = 0
        while value == 0:
            value = self._rng.getrandbits(128)
        return value

    def is_trace_id_random(self) -> bool:
        """Trace ids are uniformly random, so ratio-based samplers may rely on them."""
        return True
