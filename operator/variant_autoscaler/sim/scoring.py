"""A run's tiered SLO score and cost as one number, decision by decision, and the time it took to recover
from each fault.

Every request is worth the value of its tier (:func:`variant_autoscaler.sim.report.classify`: meets,
minor, severe, dropped), times its service class's weight; a run's *return* is the sum of those values
minus ``cost_weight`` × its cost. :class:`StepScorer` splits that sum over a stepped simulation's
decisions (each request counts once, when it is resolved: served, dropped, killed or rejected), so the
rewards of a learning environment's episode add up to :func:`episode_return` of the same run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.cluster import DROP_NONE, RunResult
from variant_autoscaler.sim.report import (
    MINOR_FACTOR,
    TIER_DROPPED,
    TIER_MEETS,
    TIER_MINOR,
    TIER_SEVERE,
    classify,
)

if TYPE_CHECKING:
    from variant_autoscaler.sim.simulator import Simulation

__all__ = [
    "RewardConfig",
    "StepScore",
    "StepScorer",
    "episode_return",
    "recovery_times",
    "request_values",
]


@dataclass(frozen=True, slots=True)
class RewardConfig:
    """What a request's outcome is worth, and what cost is worth against it.

    ``tier_values``: meets, minor, severe, dropped. ``cost_weight``: score per unit of cost (the
    scenario's cost unit: with WVA's unit costs, cents), so one cent costs as much as ``cost_weight``
    requests meeting their SLO earn. ``class_weights``: per service class, a factor on its requests'
    values (default 1).
    """

    tier_values: tuple[float, float, float, float] = (1.0, 0.5, 0.0, -1.0)
    cost_weight: float = 20.0
    class_weights: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.tier_values) != 4 or not all(math.isfinite(v) for v in self.tier_values):
            raise ConfigError("tier_values needs four finite numbers: meets, minor, severe, dropped")
        if not (math.isfinite(self.cost_weight) and self.cost_weight >= 0):
            raise ConfigError("cost_weight must be a finite number >= 0")
        if any(not (math.isfinite(w) and w >= 0) for w in self.class_weights.values()):
            raise ConfigError("class weights must be finite numbers >= 0")


def request_values(result: RunResult, config: RewardConfig) -> np.ndarray:
    """Each request's value: its tier's value times its class's weight."""
    tiers = classify(result)
    models = result.scenario.model_by_id
    weight = np.array(
        [config.class_weights.get(models[m].service_class, 1.0) for m in result.models], dtype=np.float64
    )
    values = np.asarray(config.tier_values, dtype=np.float64)
    return values[tiers] * weight[result.model_idx]  # type: ignore[no-any-return]


def episode_return(result: RunResult, config: RewardConfig) -> float:
    """The run's return: the sum of its requests' values minus ``cost_weight`` × its cost."""
    return float(request_values(result, config).sum()) - config.cost_weight * sum(result.cost.values())


@dataclass(frozen=True, slots=True)
class StepScore:
    """What happened between two decisions: requests resolved per tier, their value, the cost accrued."""

    tiers: tuple[int, int, int, int]
    value: float
    cost: float
    reward: float

    def plus(self, other: StepScore) -> StepScore:
        """Both steps as one."""
        a, b = self.tiers, other.tiers
        return StepScore(
            (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]),
            self.value + other.value,
            self.cost + other.cost,
            self.reward + other.reward,
        )


class StepScorer:
    """Scores a stepped :class:`~variant_autoscaler.sim.simulator.Simulation` decision by decision.

    Call :meth:`step` at each decision (after :meth:`Simulation.next_decision` returned True) and
    :meth:`final` with the run's result. A request counts once, in the step in which it is resolved,
    with the tier :func:`~variant_autoscaler.sim.report.classify` gives it, so the steps' tiers add up
    to the run's and their rewards to :func:`episode_return`.
    """

    def __init__(self, sim: Simulation, config: RewardConfig) -> None:
        self.sim = sim
        self.config = config
        sc = sim.sc
        models = sc.model_by_id
        self._slo_ttft = [models[m].slo_ttft_ms / 1000.0 for m in sim.models]
        self._slo_itl = [models[m].slo_itl_ms / 1000.0 for m in sim.models]
        self._weight = [config.class_weights.get(models[m].service_class, 1.0) for m in sim.models]
        self._open: dict[int, None] = {}  # arrived, not yet resolved (insertion-ordered)
        self._seen = 0  # requests arrived so far
        self._cost = 0.0
        self._counted = np.zeros(len(sim.arr_t_list), dtype=bool)

    def _cost_now(self) -> float:
        sim = self.sim
        now = min(sim.now, sim.sc.duration_s)
        total = sum(sim.cost_acc)
        for pod in sim.active:
            if pod.node is not None:
                total += max(0.0, now - pod.placed) * sim.var_unit_cost[pod.var] / 3600.0
        return total

    def _tier(self, rid: int) -> int:
        sim = self.sim
        if sim.req_drop[rid] != DROP_NONE:
            return TIER_DROPPED
        arrival = sim.arr_t_list[rid]
        first = sim.req_first[rid]
        ttft = first - arrival
        if ttft > sim.timeout:
            return TIER_DROPPED  # the client had gone before its first token (as the report counts it)
        out = sim.arr_out[rid]
        itl = (sim.req_finish[rid] - first) / max(out - 1, 1) if out > 1 else 0.0
        m = sim.arr_m[rid]
        worst = max(ttft / self._slo_ttft[m], itl / self._slo_itl[m])
        if worst <= 1.0:
            return TIER_MEETS
        return TIER_MINOR if worst <= MINOR_FACTOR else TIER_SEVERE

    def step(self) -> StepScore:
        """The requests resolved and the cost accrued since the previous call."""
        sim = self.sim
        for rid in range(self._seen, sim.arrived):
            self._open[rid] = None
        self._seen = sim.arrived
        drop = sim.req_drop
        finish = sim.req_finish
        resolved = [rid for rid in self._open if drop[rid] != DROP_NONE or not math.isnan(finish[rid])]
        counts = [0, 0, 0, 0]
        value = 0.0
        values = self.config.tier_values
        for rid in resolved:
            del self._open[rid]
            tier = self._tier(rid)
            counts[tier] += 1
            value += values[tier] * self._weight[sim.arr_m[rid]]
            self._counted[rid] = True
        cost = self._cost_now()
        spent = cost - self._cost
        self._cost = cost
        return self._score(counts, value, spent)

    def final(self, result: RunResult) -> StepScore:
        """What the run's end resolved: every request not counted yet, with the run's final tiers."""
        tiers = classify(result)
        rest = ~self._counted
        counts = [int(np.count_nonzero(tiers[rest] == t)) for t in range(4)]
        values = request_values(result, self.config)
        value = float(values[rest].sum())
        self._counted[:] = True
        self._open.clear()
        spent = sum(result.cost.values()) - self._cost
        self._cost += spent
        return self._score(counts, value, spent)

    def _score(self, counts: list[int], value: float, cost: float) -> StepScore:
        return StepScore(
            tiers=(counts[0], counts[1], counts[2], counts[3]),
            value=value,
            cost=cost,
            reward=value - self.config.cost_weight * cost,
        )


def recovery_times(
    result: RunResult,
    *,
    bin_s: float = 60.0,
    baseline_s: float = 600.0,
    tolerance: float = 0.05,
    hold: int = 3,
) -> list[float | None]:
    """Per fault of the scenario (in order): seconds from the fault until the share of requests within
    SLO is back within ``tolerance`` of its level over the ``baseline_s`` before the fault, and stays
    there for ``hold`` bins of ``bin_s`` (requests binned by arrival). 0 when it never dropped below;
    None when it had not recovered by the end of the run (or no request arrived before the fault)."""
    sc = result.scenario
    meets = classify(result) == TIER_MEETS
    n_bins = max(1, math.ceil(sc.duration_s / bin_s))
    bins = np.minimum((result.arrival_s // bin_s).astype(np.int64), n_bins - 1)
    total = np.bincount(bins, minlength=n_bins).astype(np.float64)
    good = np.bincount(bins, weights=meets.astype(np.float64), minlength=n_bins)
    out: list[float | None] = []
    for fail in sc.failures:
        if fail.at_s >= sc.duration_s:
            out.append(None)
            continue
        lo = max(0.0, fail.at_s - baseline_s)
        before = (result.arrival_s >= lo) & (result.arrival_s < fail.at_s)
        if not before.any():
            out.append(None)
            continue
        level = float(meets[before].mean()) - tolerance
        first = int(fail.at_s // bin_s)
        share = np.divide(good, total, out=np.ones(n_bins), where=total > 0)
        ok = share >= level
        found: float | None = None
        for b in range(first, n_bins - hold + 1):
            if ok[b : b + hold].all():
                found = 0.0 if b == first else max(0.0, b * bin_s - fail.at_s)
                break
        out.append(found)
    return out
