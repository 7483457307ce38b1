"""What ``watch`` alerts on and how often it looks: one value object, checked once."""

from __future__ import annotations

import math
from dataclasses import dataclass

from collector import schema as s
from collector.errors import ConfigurationError

DEFAULT_POLL_INTERVAL_S = 0.5
"""How often the directory is polled for new data."""
DEFAULT_WINDOW_S = 300.0
"""Rolling window of the p95 rule, in event time."""
DEFAULT_MIN_SAMPLES = 20
"""Fewer samples than this in the window make no p95 decision (p95 of 5 samples is the max)."""
DEFAULT_COOLDOWN_S = 300.0
"""After a p95 breach alert for a receiver, the next one waits this long (event time)."""
DEFAULT_SETTLE_S = 10.0
"""An auditor rule's finding must still hold this long after it first appears before it alerts.

Rules such as ``fire-and-forget`` look for a span that is absent; the OpenTelemetry SDK's
BatchSpanProcessor exports every 5 s by default, so the missing span may simply be in the next
batch. Slow validations and p95 edges do not wait: their evidence is already complete.
"""
DEFAULT_HORIZON_S = 900.0
"""Spans are kept this long (event time) for auditor rules that join several spans."""


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """Thresholds and timings of one ``watch`` run; all durations in seconds."""

    validation_timeout_s: float = s.DEFAULT_VALIDATION_TIMEOUT_S
    p95_budget_s: float = s.DEFAULT_P95_BUDGET_S
    max_attempts: int = s.DEFAULT_MAX_ATTEMPTS
    """Retry cap assumed by ``--rule retry-cap-exceeded`` where spans do not record one."""
    window_s: float = DEFAULT_WINDOW_S
    min_samples: int = DEFAULT_MIN_SAMPLES
    cooldown_s: float = DEFAULT_COOLDOWN_S
    rules: tuple[str, ...] = ()
    """Extra auditor rule ids to alert on (``slow-validation`` and the p95 rule always run)."""
    settle_s: float = DEFAULT_SETTLE_S
    horizon_s: float = DEFAULT_HORIZON_S
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S

    def __post_init__(self) -> None:
        positive = {
            "--validation-timeout": self.validation_timeout_s,
            "--p95-budget": self.p95_budget_s,
            "--window": self.window_s,
            "--poll-interval": self.poll_interval_s,
        }
        durations = {
            **positive,
            "--cooldown": self.cooldown_s,
            "--settle": self.settle_s,
            "--horizon": self.horizon_s,
        }
        for option, value in durations.items():
            # inf or nan would make every window, cooldown or settle comparison meaningless.
            if not math.isfinite(value):
                raise ConfigurationError(
                    f"{option} must be a finite duration such as 2s or 500ms (got {value:g})"
                )
        for option, value in positive.items():
            if not value > 0:
                raise ConfigurationError(f"{option} must be greater than zero (got {value:g}s)")
        for option, value in {"--cooldown": self.cooldown_s, "--settle": self.settle_s}.items():
            if value < 0:
                raise ConfigurationError(f"{option} cannot be negative (got {value:g}s)")
        if self.min_samples < 1:
            raise ConfigurationError(f"--min-samples must be at least 1 (got {self.min_samples})")
        if self.horizon_s < self.window_s:
            raise ConfigurationError(
                f"--horizon ({self.horizon_s:g}s) must be at least --window ({self.window_s:g}s):"
                " the p95 window is computed over the spans kept"
            )
