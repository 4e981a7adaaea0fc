"""A model's demand from what vLLM exports: completions under-read it when the servers are saturated."""

from __future__ import annotations

import math

__all__ = ["demand_rate", "fix_value"]


def fix_value(value: float) -> float:
    """WVA's FixValue: NaN and infinities read as 0."""
    return value if math.isfinite(value) else 0.0


def demand_rate(
    completion_rate: float, waiting: float, waiting_growth: float, window_seconds: float, drain_seconds: float
) -> float:
    """Requests/s of demand.

    Completions under-read demand when the server is saturated: the excess waits. Demand is the
    completion rate plus the rate at which the waiting queue grew over the window, plus the rate needed
    to drain the queue that is already there within ``drain_seconds``.
    """
    growth = max(0.0, fix_value(waiting_growth)) / window_seconds
    backlog = max(0.0, fix_value(waiting)) / drain_seconds
    return max(0.0, fix_value(completion_rate)) + growth + backlog
