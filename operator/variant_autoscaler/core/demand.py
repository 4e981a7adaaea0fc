"""A model's demand from what vLLM exports: completions under-read it when the servers are saturated."""

from __future__ import annotations

import math

__all__ = ["demand_rate", "fix_value", "forecast_input"]


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


def forecast_input(demand: float, arrivals: float | None) -> float:
    """What a model's rate forecast learns (req/s): its ``arrivals`` where a counter of arriving requests
    counts them (``ARRIVAL_COUNTER``, e.g. the inference gateway's), else its ``demand`` as vLLM's metrics
    show it (:func:`demand_rate`).

    The arrivals are the better input. A backlog's drain is a one-off need, which the planner adds to the
    current load anyway; learnt as a rate, a queue built up in a burst reads as a further rise, which the
    forecast's trend projects. And requests whose clients time out while queued leave no trace in vLLM's
    metrics, so in overload completions under-read what arrives (an estimate of arrivals from them, the
    completions plus the queue's growth, was tried and lost to the demand there: docs/tail-slo.md).
    """
    if arrivals is not None and math.isfinite(arrivals) and arrivals >= 0:
        return arrivals
    return demand
