"""The loads a policy plans for: observed from the scrapes as a collector reads them, or the load that
will actually arrive, which only the hindsight oracle may know."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

from variant_autoscaler.core.demand import demand_rate
from variant_autoscaler.core.workload import (
    Burstiness,
    RequestLengths,
    TokenLengths,
    Workload,
    burstiness_from_times,
)
from variant_autoscaler.sim.observe import Observation, VariantView
from variant_autoscaler.sim.scenario import Scenario
from variant_autoscaler.sim.traffic import Arrivals

__all__ = [
    "ORACLE_BURST_WINDOWS",
    "ORACLE_CONTEXT_S",
    "LoadSource",
    "ModelLoad",
    "future_loads",
    "future_workloads",
    "observed_loads",
]

#: Arrivals around an interval from which the oracle reads burstiness and lengths (min-gpus' context).
ORACLE_CONTEXT_S = 300.0
#: Windows (s) of the oracle's burstiness (min-gpus' BURST_WINDOWS).
ORACLE_BURST_WINDOWS = (1.0, 2.0, 5.0, 10.0, 30.0)

LoadSource = Literal["wva", "ours"]


@dataclass(frozen=True, slots=True)
class ModelLoad:
    rpm: float
    avg_input_tokens: float
    avg_output_tokens: float
    # Requests/min arriving, from the gateway's counter (ARRIVAL_COUNTER): what the forecast learns.
    arrivals_rpm: float | None = None


def observed_loads(
    obs: Observation, scenario: Scenario, source: LoadSource, drain_s: float
) -> dict[str, ModelLoad]:
    """Per model, the load a collector grouped by ``model_name`` reads from the scrapes.

    ``wva``: the completion rate (WVA's "arrival rate"). ``ours``: the operator collector's demand,
    completions plus the waiting queue's growth over the window plus its backlog over ``drain_s``.
    Token means are completion-weighted over the model's variants.
    """
    window = scenario.settings.rate_window_s
    by_model: dict[str, list[VariantView]] = {}
    for view in obs.variants.values():
        by_model.setdefault(view.model, []).append(view)
    loads: dict[str, ModelLoad] = {}
    for model, views in sorted(by_model.items()):
        success = sum(v.success_rpm for v in views)
        tokens_in = sum(v.success_rpm * (v.avg_input_tokens or 0.0) for v in views)
        tokens_out = sum(v.success_rpm * (v.avg_output_tokens or 0.0) for v in views)
        avg_in = tokens_in / success if success > 0 else 0.0
        avg_out = tokens_out / success if success > 0 else 0.0
        if source == "ours":
            rps = demand_rate(
                success / 60.0,
                sum(v.waiting for v in views),
                sum(v.waiting_growth for v in views),
                window,
                drain_s,
            )
            rpm = rps * 60.0
        else:
            rpm = success
        loads[model] = ModelLoad(rpm=rpm, avg_input_tokens=avg_in, avg_output_tokens=avg_out)
    return loads


def future_loads(
    arrivals: Mapping[str, Arrivals], start: float, end: float, *, peak_s: float | None = None
) -> dict[str, ModelLoad]:
    """Per model, the load that will actually arrive in ``[start, end)``: its mean rate, or with
    ``peak_s`` the rate of its busiest ``peak_s`` stretch (a rate that changes within the interval is
    load, not burstiness: min-gpus' rule)."""
    loads: dict[str, ModelLoad] = {}
    span = end - start
    for model, arr in sorted(arrivals.items()):
        win = arr.window(start, end)
        n = len(win)
        rpm = n * 60.0 / span
        if peak_s is not None and n and span > peak_s:
            edges = np.append(np.arange(start, end, peak_s), end)
            counts = np.diff(np.searchsorted(win.times, edges))
            rpm = max(rpm, float(np.max(counts / np.diff(edges))) * 60.0)
        loads[model] = ModelLoad(
            rpm=rpm,
            avg_input_tokens=float(np.mean(win.input_tokens)) if n else 0.0,
            avg_output_tokens=float(np.mean(win.output_tokens)) if n else 0.0,
        )
    return loads


def future_workloads(
    arrivals: Mapping[str, Arrivals],
    start: float,
    end: float,
    loads: Mapping[str, ModelLoad],
    *,
    context_s: float = ORACLE_CONTEXT_S,
) -> dict[str, Workload]:
    """Per model, the burstiness and lengths of the requests around ``[start, end)`` (``context_s``
    centred on it), the burstiness taken at the rate the interval is planned for (min-gpus' reading)."""
    out: dict[str, Workload] = {}
    mid = (start + end) / 2.0
    for model, arr in arrivals.items():
        around = arr.window(mid - context_s / 2.0, mid + context_s / 2.0)
        if len(around) < 2:
            out[model] = Workload()
            continue
        lengths = RequestLengths(
            TokenLengths.from_samples(around.input_tokens),
            TokenLengths.from_samples(np.maximum(around.output_tokens, 1)),
        )
        bursts = burstiness_from_times(around.times, ORACLE_BURST_WINDOWS)
        rate = loads[model].rpm / 60.0 if model in loads else bursts.rate
        out[model] = Workload(
            lengths, Burstiness(bursts.windows_s, bursts.idc, rate) if bursts.windows_s else None
        )
    return out
