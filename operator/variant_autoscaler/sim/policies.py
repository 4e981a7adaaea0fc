"""Autoscaling policies behind one interface.

A policy is built once per run. The simulator calls :meth:`Policy.start` before time 0 (a policy may
choose the replicas the cluster starts with, e.g. static provisioning) and then :meth:`Policy.decide`
every ``interval_s`` seconds with an :class:`~variant_autoscaler.sim.observe.Observation`; the
returned actions set Deployments' replicas, which take effect as Kubernetes would (scheduling,
start-up delay, draining).

Policies here:

* :class:`StaticPolicy` — fixed replicas (peak provisioning when given the peak allocation).
* :class:`ThresholdPolicy` — the HorizontalPodAutoscaler fed by KEDA with a threshold on
  ``vllm:num_requests_waiting`` or on KV-cache usage, with HPA's tolerance, stabilisation windows and
  scaling-rate limits.
* :class:`SaturationPolicy` — upstream WVA's later defaults (``../shared/reference/wva-since-2025-10.md``):
  the saturation analyzers V1 (the default until v0.9, every 60 s) and V2 (token capacity, the
  default from v0.9, every 15 s) of :mod:`variant_autoscaler.core.saturation`, their number applied as
  WVA's sample HPA does (no stabilisation).
* :class:`OptimizerPolicy` — the global optimizer: WVA's unlimited mode (keep accelerator, 60 s, sized
  on the completion rate) or ours (limited mode over the GPU inventory, priorities, load shared
  across a model's variants, the operator's replica policy).
* :class:`OraclePolicy` — hindsight: the optimizer fed with the *future* load of each interval and no
  start-up delay; the lower bound on cost.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from variant_autoscaler.core.saturation import (
    ReplicaMetrics,
    V1Params,
    V2Params,
    VariantState,
    analyze_v1,
    analyze_v2,
    combine_analyzers,
)
from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.observe import Action, Observation, PolicyContext, VariantView
from variant_autoscaler.sim.replica import DEFAULT_KV_CACHE_TOKENS
from variant_autoscaler.sim.scenario import Scenario

__all__ = [
    "HpaSettings",
    "Policy",
    "SaturationPolicy",
    "StaticPolicy",
    "ThresholdPolicy",
]


class Policy(ABC):
    """One autoscaling policy. Subclasses set ``name`` and ``interval_s``."""

    name: str = "policy"
    interval_s: float = 60.0
    # True only for the oracle: its replicas are ready the moment they are scheduled.
    ignores_startup: bool = False

    def start(self, ctx: PolicyContext) -> Mapping[str, int] | None:
        """Called once before time 0; may return the replicas each variant starts with (warm)."""
        del ctx
        return None

    @abstractmethod
    def decide(self, obs: Observation) -> Mapping[str, Action]:
        """The replicas to run now, for the variants whose count should change (others: omit)."""


class StaticPolicy(Policy):
    """Fixed replicas for the whole run, set before time 0 and never changed."""

    def __init__(self, replicas: Mapping[str, int], *, name: str = "static") -> None:
        if any(r < 0 for r in replicas.values()):
            raise ConfigError("static replicas must be >= 0")
        self.name = name
        self.interval_s = math.inf
        self._replicas = dict(replicas)

    @property
    def replicas(self) -> Mapping[str, int]:
        """The replicas per variant it holds."""
        return dict(self._replicas)

    def start(self, ctx: PolicyContext) -> Mapping[str, int] | None:
        known = {v.name for v in ctx.scenario.variants}
        unknown = sorted(set(self._replicas) - known)
        if unknown:
            raise ConfigError(f"static policy names unknown variant(s): {', '.join(unknown)}")
        return dict(self._replicas)

    def decide(self, obs: Observation) -> Mapping[str, Action]:
        del obs
        return {}


# --------------------------------------------------------------------------------------------- HPA


@dataclass(frozen=True, slots=True)
class HpaSettings:
    """A KEDA ScaledObject with a Prometheus trigger, as HPA runs it.

    ``metric`` is ``"waiting"`` (``sum(vllm:num_requests_waiting)`` of the Deployment) or ``"kv"``
    (``sum(vllm:kv_cache_usage_perc)``); the trigger's ``threshold`` is an *AverageValue* target per
    pod, so HPA wants ``ceil(metric / threshold)`` replicas. HPA's defaults otherwise: 10 % tolerance,
    no scale-up stabilisation, 300 s scale-down stabilisation, scale-up by at most
    ``max(4 pods, 100 %)`` and scale-down by at most 100 % per 15 s period.
    """

    metric: Literal["waiting", "kv"] = "waiting"
    threshold: float = 5.0
    min_replicas: int = 1
    max_replicas: int = 64
    tolerance: float = 0.1
    scale_up_stabilization_s: float = 0.0
    scale_down_stabilization_s: float = 300.0
    scale_up_pods: int = 4
    scale_up_percent: float = 100.0
    scale_down_percent: float = 100.0
    sync_period_s: float = 15.0

    def __post_init__(self) -> None:
        if not self.threshold > 0:
            raise ConfigError("the HPA threshold must be > 0")
        if self.min_replicas < 0 or self.max_replicas < max(1, self.min_replicas):
            raise ConfigError("HPA needs 0 <= min_replicas <= max_replicas, max_replicas >= 1")
        if self.tolerance < 0 or self.scale_up_stabilization_s < 0 or self.scale_down_stabilization_s < 0:
            raise ConfigError("HPA tolerance and stabilisation windows must be >= 0")
        if not self.sync_period_s > 0:
            raise ConfigError("the HPA sync period must be > 0")


@dataclass(slots=True)
class _HpaState:
    history: list[tuple[float, int]] = field(default_factory=list)  # (time, unstabilised recommendation)


class ThresholdPolicy(Policy):
    """One HorizontalPodAutoscaler per variant, on a KEDA Prometheus trigger (see :class:`HpaSettings`).

    The replica computation follows the HPA controller: ``usage / (target × current)`` within the
    tolerance keeps the current count; otherwise ``ceil(usage / target)``; then the stabilisation
    windows (scale-up: the lowest recommendation within its window; scale-down: the highest), the
    rate limits (relative to the current count, one period per decision) and min/max.
    """

    def __init__(self, settings: HpaSettings | None = None, *, name: str | None = None) -> None:
        self.settings = settings or HpaSettings()
        self.name = name or f"hpa-{self.settings.metric}"
        self.interval_s = self.settings.sync_period_s
        self._state: dict[str, _HpaState] = {}

    def recommend(self, *, current: int, usage: float) -> int:
        """The metric's replica count before stabilisation (HPA's ``GetExternalPerPodMetricReplicas``)."""
        s = self.settings
        if current > 0:
            ratio = usage / (s.threshold * current)
            if abs(ratio - 1.0) <= s.tolerance:
                return current
        return math.ceil(usage / s.threshold - 1e-9)

    def normalize(self, *, name: str, now: float, current: int, recommendation: int) -> int:
        """Stabilisation windows, rate limits and bounds (HPA's ``normalizeDesiredReplicasWithBehaviors``)."""
        s = self.settings
        state = self._state.setdefault(name, _HpaState())
        up_cut = now - s.scale_up_stabilization_s
        down_cut = now - s.scale_down_stabilization_s
        up_rec = recommendation
        down_rec = recommendation
        for t, rec in state.history:
            if t > up_cut:
                up_rec = min(up_rec, rec)
            if t > down_cut:
                down_rec = max(down_rec, rec)
        keep = max(s.scale_up_stabilization_s, s.scale_down_stabilization_s)
        state.history = [(t, r) for t, r in state.history if t > now - keep]
        state.history.append((now, recommendation))
        desired = current
        desired = max(desired, up_rec)
        desired = min(desired, down_rec)
        # Rate limits for one period.
        up_limit = max(current + s.scale_up_pods, math.ceil(current * (1 + s.scale_up_percent / 100.0)))
        down_limit = math.ceil(current * (1 - s.scale_down_percent / 100.0))
        desired = min(desired, up_limit)
        desired = max(desired, down_limit)
        return max(s.min_replicas, min(s.max_replicas, desired))

    def decide(self, obs: Observation) -> Mapping[str, Action]:
        actions: dict[str, Action] = {}
        for name, view in sorted(obs.variants.items()):
            if not view.metrics_ok:
                continue  # HPA does not scale on a metric it cannot read
            usage = view.waiting if self.settings.metric == "waiting" else view.kv_usage * view.ready
            current = view.desired
            rec = self.recommend(current=current, usage=usage)
            desired = self.normalize(name=name, now=obs.now, current=current, recommendation=rec)
            if desired != current:
                actions[name] = Action(replicas=desired)
        return actions


# ------------------------------------------------------------------------------------ saturation


class SaturationPolicy(Policy):
    """Upstream WVA after 2025-10: the saturation analyzer V1 or V2 over each model's variants
    (:func:`~variant_autoscaler.core.saturation.analyze_v1` / ``analyze_v2``, default thresholds), every
    ``interval_s`` (V1: 60 s, WVA's interval until v0.9; V2: 15 s, its default from v0.9). The cost of a
    variant (``variantCost``) is its accelerator's unit cost × the GPUs of a replica; ``minReplicas``
    and ``maxReplicas`` are the variant's. WVA's sample HPA applies the number as it comes.

    Replica metrics: the simulator scrapes each variant's queue (summed) and KV-cache usage (averaged
    over its ready replicas); every ready replica is taken to hold the average (least-loaded routing keeps
    them close), at the last scrape rather than the maximum over the minute WVA reads.
    """

    def __init__(
        self,
        scenario: Scenario,
        *,
        version: Literal["v1", "v2"],
        name: str | None = None,
        v1: V1Params | None = None,
        v2: V2Params | None = None,
    ) -> None:
        self.version = version
        self.v1 = v1 or V1Params()
        self.v2 = v2 or V2Params()
        self.name = name or f"wva-saturation-{version}"
        self.interval_s = 60.0 if version == "v1" else 15.0
        self.scenario = scenario
        models = scenario.model_by_id
        unit = {a.name: a.unit_cost for a in scenario.accelerators}
        self._cost: dict[str, float] = {}
        self._kv: dict[str, float] = {}
        for v in scenario.variants:
            prof = models[v.model].profile(v.accelerator)
            self._cost[v.name] = unit[v.accelerator] * prof.acc_count
            self._kv[v.name] = float(prof.kv_cache_tokens or DEFAULT_KV_CACHE_TOKENS)
        self._last: dict[str, int] = {}

    def _state(self, view: VariantView, min_replicas: int, max_replicas: int | None) -> VariantState:
        metrics: tuple[ReplicaMetrics, ...] = ()
        if view.metrics_ok and view.ready > 0:
            one = ReplicaMetrics(kv_usage=view.kv_usage, waiting=view.waiting / view.ready)
            metrics = (one,) * view.ready
        return VariantState(
            key=view.name,
            cost=self._cost[view.name],
            replicas=view.desired,
            ready=view.ready,
            metrics=metrics,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            kv_tokens_per_replica=self._kv[view.name],
            previous_desired=self._last.get(view.name),
        )

    def decide(self, obs: Observation) -> Mapping[str, Action]:
        actions: dict[str, Action] = {}
        for model in self.scenario.models:
            variants = [v for v in self.scenario.variants if v.model == model.model_id]
            states = [self._state(obs.variants[v.name], v.min_replicas, v.max_replicas) for v in variants]
            if self.version == "v1":
                verdict = analyze_v1(states, self.v1)
            else:
                views = [obs.variants[v.name] for v in variants]
                served = sum(v.success_rpm for v in views)
                tokens = sum(v.success_rpm * (v.avg_input_tokens or 0.0) for v in views)
                verdict = analyze_v2(states, self.v2, avg_input_tokens=tokens / served if served > 0 else 0.0)
            decisions = combine_analyzers([verdict], {s.key: s.replicas for s in states})
            for state in states:
                d = decisions[state.key]
                self._last[state.key] = d.replicas
                if d.replicas != state.replicas:
                    actions[state.key] = Action(replicas=d.replicas)
        return actions
