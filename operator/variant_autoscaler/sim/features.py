"""The learning environment's observation, as numbers: what a policy sees of each variant, and the free
inventory.

:class:`Encoder` turns a simulator :class:`~variant_autoscaler.sim.observe.Observation` into a
``(variants, features)`` matrix (columns: :data:`FEATURES`) and an ``(accelerators, 2)`` matrix of free
and healthy units. The Gymnasium environment returns them as its observation, and a trained agent
running in ``simulate`` as a policy computes them the same way, so the agent sees the same numbers in
both. Nothing here imports Gymnasium.

The analyzer's predictions are WVA's queueing model (:mod:`variant_autoscaler.core.queueing`) at the
variant's profile, the mean token counts of its recent completions and its arrival rate spread over its
ready replicas: the predicted mean TTFT and ITL as multiples of the SLO (saturated at
:data:`RATIO_CAP` when the rate is beyond what a replica can take), and the largest rate one replica
sustains within the SLOs (``capacity_rps``, 0 when the SLOs are out of reach on that profile).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from variant_autoscaler.core.queueing import RequestSize, ServiceParms, TargetPerf, cached_analyzer
from variant_autoscaler.errors import InfeasibleError, ModelError
from variant_autoscaler.sim.observe import Observation
from variant_autoscaler.sim.scenario import Profile, Scenario

__all__ = ["DEFAULT_TOKENS", "FEATURES", "RATIO_CAP", "UNBOUNDED", "Encoder", "feature_index", "upper_bounds"]

FEATURES: tuple[str, ...] = (
    "arrival_rps",  # requests routed to the variant per second (over the rate window)
    "model_arrival_rps",  # the same summed over the model's variants
    "waiting",  # requests queued in the variant's replicas
    "gateway_waiting",  # the model's requests waiting for a ready replica
    "running",  # requests in the variant's batches
    "kv_usage",  # mean KV-cache usage of its ready replicas (0-1)
    "ready",  # replicas serving
    "starting",  # replicas loading the model
    "pending",  # replicas waiting for a free accelerator
    "desired",  # the Deployment's replicas
    "ttft_pred_ratio",  # analyzer: predicted mean TTFT / TTFT SLO
    "itl_pred_ratio",  # analyzer: predicted mean ITL / ITL SLO
    "capacity_rps",  # analyzer: requests per second one replica sustains within the SLOs
    "ttft_obs_ratio",  # observed mean TTFT of recent completions / TTFT SLO (0 without completions)
    "free_units",  # free healthy units of the variant's accelerator
    "units_per_replica",  # accelerator units one replica needs
    "cost_per_hour",  # one replica's cost per hour
    "startup_min",  # the model's start-up time, minutes
    "priority",  # its service class's priority (1 highest)
    "max_replicas",  # the variant's maximum replicas (the action bound)
    "metrics_ok",  # 1 when the rate window holds two scrapes
)
RATIO_CAP = 100.0
UNBOUNDED = 1e6  # the observation space's bound of counts and rates (observations are clipped to it)
DEFAULT_TOKENS = (512.0, 256.0)  # token means assumed before a model's first completion
_TOKEN_GRID = 16.0  # token means are rounded to this grid so the analyzer's cache is reused


def feature_index(name: str) -> int:
    return FEATURES.index(name)


class Encoder:
    """Observations of one scenario's cluster as arrays (see the module doc). Keeps each model's last
    observed token means, so build one per run."""

    def __init__(self, scenario: Scenario, max_replicas: int) -> None:
        self.scenario = scenario
        models = scenario.model_by_id
        classes = scenario.class_by_name
        costs = scenario.accelerator_by_name
        self.variants = [v.name for v in scenario.variants]
        self.accelerators = [a.name for a in scenario.accelerators]
        self._static: list[tuple[float, ...]] = []
        self._profiles: list[Profile] = []
        self._slo: list[tuple[float, float]] = []
        for var in scenario.variants:
            model = models[var.model]
            prof = model.profile(var.accelerator)
            self._profiles.append(prof)
            self._slo.append((model.slo_ttft_ms, model.slo_itl_ms))
            cap = max_replicas if var.max_replicas is None else min(var.max_replicas, max_replicas)
            self._static.append(
                (
                    float(prof.acc_count),
                    costs[var.accelerator].unit_cost * prof.acc_count,
                    model.startup_s / 60.0,
                    float(classes[model.service_class].priority),
                    float(cap),
                )
            )
        self._tokens: dict[str, tuple[float, float]] = {}
        self._high = upper_bounds(max_replicas)

    def _analyze(self, var: int, rate_per_replica: float, tokens: tuple[float, float]) -> tuple[float, ...]:
        prof = self._profiles[var]
        slo_ttft, slo_itl = self._slo[var]
        analyzer = cached_analyzer(
            prof.max_batch_size,
            None,
            ServiceParms(prof.alpha, prof.beta, prof.gamma, prof.delta),
            RequestSize(*tokens),
        )
        try:
            capacity = analyzer.size(TargetPerf(ttft=slo_ttft, itl=slo_itl)).metrics.throughput
        except InfeasibleError:
            capacity = 0.0
        low, high = analyzer.rate_range
        if rate_per_replica >= high:
            return RATIO_CAP, RATIO_CAP, capacity
        try:
            m = analyzer.analyze(max(rate_per_replica, low))
        except ModelError:
            return RATIO_CAP, RATIO_CAP, capacity
        return (
            min(RATIO_CAP, m.ttft / slo_ttft),
            min(RATIO_CAP, m.itl / slo_itl),
            capacity,
        )

    def encode(self, obs: Observation) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """``(variants × FEATURES, accelerators × [free, healthy])`` for one observation."""
        views = [obs.variants[name] for name in self.variants]
        by_model: dict[str, float] = {}
        for view in views:
            by_model[view.model] = by_model.get(view.model, 0.0) + view.arrival_rpm / 60.0
        # Token means: completion-weighted over the model's variants, kept until the next completions.
        sums: dict[str, list[float]] = {}
        for view in views:
            if (
                view.avg_input_tokens is not None
                and view.avg_output_tokens is not None
                and view.success_rpm > 0
            ):
                s = sums.setdefault(view.model, [0.0, 0.0, 0.0])
                s[0] += view.success_rpm
                s[1] += view.success_rpm * view.avg_input_tokens
                s[2] += view.success_rpm * view.avg_output_tokens
        for model, (w, tin, tout) in sums.items():
            self._tokens[model] = (
                max(_TOKEN_GRID, round(tin / w / _TOKEN_GRID) * _TOKEN_GRID),
                max(1.0, round(tout / w / _TOKEN_GRID) * _TOKEN_GRID),
            )
        free = {acc: obs.capacity.get(acc, 0) - obs.allocated.get(acc, 0) for acc in self.accelerators}
        rows = np.zeros((len(views), len(FEATURES)), dtype=np.float32)
        for i, view in enumerate(views):
            tokens = self._tokens.get(view.model, DEFAULT_TOKENS)
            rate = view.arrival_rpm / 60.0
            ttft_r, itl_r, capacity = self._analyze(i, rate / max(view.ready, 1), tokens)
            slo_ttft = self._slo[i][0]
            units, cost, startup, priority, cap = self._static[i]
            rows[i] = (
                rate,
                by_model[view.model],
                view.waiting,
                obs.gateway_waiting.get(view.model, 0),
                view.running,
                view.kv_usage,
                view.ready,
                view.starting,
                view.pending,
                view.desired,
                ttft_r,
                itl_r,
                capacity,
                0.0 if view.avg_ttft_ms is None else min(RATIO_CAP, view.avg_ttft_ms / slo_ttft),
                free[view.accelerator],
                units,
                cost,
                startup,
                priority,
                cap,
                1.0 if view.metrics_ok else 0.0,
            )
        inventory = np.array(
            [
                [min(UNBOUNDED, max(0, free[a])), min(UNBOUNDED, obs.capacity.get(a, 0))]
                for a in self.accelerators
            ],
            dtype=np.float32,
        )
        # Within the observation space's bounds, and finite for any learner.
        rows = np.clip(np.nan_to_num(rows, nan=0.0, posinf=RATIO_CAP, neginf=0.0), 0.0, self._high)
        return rows, inventory


def upper_bounds(max_replicas: int) -> npt.NDArray[np.float32]:
    """Upper bounds of each feature, for an observation space (:data:`UNBOUNDED` for counts and rates)."""
    high = np.full(len(FEATURES), UNBOUNDED, dtype=np.float32)
    for name, bound in (
        ("kv_usage", 1.0),
        ("ttft_pred_ratio", RATIO_CAP),
        ("itl_pred_ratio", RATIO_CAP),
        ("ttft_obs_ratio", RATIO_CAP),
        ("max_replicas", float(max_replicas)),
        ("metrics_ok", 1.0),
    ):
        high[FEATURES.index(name)] = bound
    return high
