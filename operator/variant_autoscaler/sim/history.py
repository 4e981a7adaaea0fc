"""A scenario cut in two: the history an operator starts with, and the run.

An operator installed on a cluster that already serves a model finds that model's past in Prometheus;
with ``FORECAST_HISTORY`` (docs/tail-slo.md, "Skipping the warm-up where there is history") its
forecaster learns it before the first plan. :func:`split_history` gives the simulator the same start:
the first ``history_s`` of a scenario's traffic become each model's per-interval arrival rates (what
the operator's one range query reads), and the rest becomes the run, every time in it shifted to start
at 0, from the scenario's initial replicas. A failure in the history that has not recovered by the cut
is there from the run's start (nodes lost before the operator started); one that has recovered is gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.scenario import Failure, Scenario
from variant_autoscaler.sim.traffic import Arrivals

__all__ = ["Split", "split_history"]


@dataclass(frozen=True, slots=True)
class Split:
    """The run (``scenario``, its requests ``arrivals``, times from 0) and, per model, the arrival rate
    (req/s) of each ``step_s`` interval of the history, oldest first."""

    scenario: Scenario
    arrivals: dict[str, Arrivals]
    history: dict[str, tuple[float, ...]]
    history_s: float


def _shifted(failure: Failure, cut: float) -> Failure | None:
    if failure.recover_s is not None and failure.recover_s <= cut:
        return None
    return replace(
        failure,
        at_s=max(failure.at_s - cut, 0.0),
        recover_s=None if failure.recover_s is None else failure.recover_s - cut,
    )


def split_history(
    scenario: Scenario, arrivals: Mapping[str, Arrivals], history_s: float, *, step_s: float = 60.0
) -> Split:
    """``scenario`` and its requests ``arrivals`` cut after ``history_s`` seconds (whole ``step_s``
    intervals: the forecaster learns one rate per interval)."""
    if not step_s > 0:
        raise ConfigError(f"the history's step must be > 0 s, got {step_s!r}")
    if not 0 < history_s < scenario.duration_s:
        raise ConfigError(
            f"the history ({history_s:g} s) must be longer than 0 and shorter than the scenario "
            f"({scenario.duration_s:g} s)"
        )
    steps = int(history_s // step_s)
    if steps < 1:
        raise ConfigError(f"the history ({history_s:g} s) must hold at least one {step_s:g} s interval")
    cut = steps * step_s
    later: dict[str, Arrivals] = {}
    history: dict[str, tuple[float, ...]] = {}
    edges = np.arange(steps + 1, dtype=float) * step_s
    for model, arr in arrivals.items():
        keep = arr.times >= cut
        later[model] = Arrivals(arr.times[keep] - cut, arr.input_tokens[keep], arr.output_tokens[keep])
        counts, _ = np.histogram(arr.times[~keep], bins=edges)
        history[model] = tuple(float(c) / step_s for c in counts)
    failures = tuple(f for f in (_shifted(f, cut) for f in scenario.failures) if f is not None)
    rest = replace(scenario, duration_s=scenario.duration_s - cut, failures=failures)
    return Split(rest, later, history, cut)
