"""WVA's saturation analyzers (V1 and V2), and how their votes combine with each other and with the model.

A variant without a performance profile is sized by saturation alone; a variant with one is sized by the
queueing model and the optimizer, with saturation as a safety floor. Pure: values in, values out, no clock.

**V1** (WVA's default until v0.9; keys ``kvCacheThreshold`` 0.80, ``queueLengthThreshold`` 5,
``kvSpareTrigger`` 0.10, ``queueSpareTrigger`` 3). Over every serving replica of the model (all its
variants), each with the max over the window of ``vllm:kv_cache_usage_perc`` and
``vllm:num_requests_waiting``: a replica is saturated at or above either threshold. When the average spare
capacity of the unsaturated replicas (threshold minus usage) falls under a trigger, the cheapest variant
(by ``variantCost``; ties: the first key) gets one more replica. When none is saturated and moving the
whole load onto one replica fewer still leaves both spares at or above their triggers (a worst-case
simulation that needs at least two replicas), the most expensive variant (ties: the last key) gets one
fewer. Nothing moves while any variant of the model is still starting (replicas not ready, or not yet
reporting, or a previous decision not yet applied).

**V2** (WVA's default from v0.9; ``scaleUpThreshold`` 0.85, ``scaleDownBoundary`` 0.70): token capacity.
Each replica holds ``kv_tokens_per_replica`` KV tokens (``num_gpu_blocks × block_size`` from
``vllm:cache_config_info``). Demand = KV tokens in use (usage × capacity) plus the prompts waiting (queue ×
mean input tokens); supply = every replica, ready or still starting, × its capacity. Required =
demand / scaleUpThreshold − supply: when positive, replicas are added to the cheapest variants until it
is covered. Spare = supply − demand / scaleDownBoundary: when positive, whole replicas of it are removed
from the most expensive variants. A replica that is ready but not reporting makes the demand unknown: no
scale-down then.

**Several analyzers** (``analyzers:`` in the saturation ConfigMap): scale up if any fresh one asks (the
largest ask wins), scale down only if every fresh one asks to (the smallest reduction wins).
**With the model** (:func:`with_model`): scale up if either asks, down only if both agree.
Every result names the analyzer that decided and why, for the status reason and the Events.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "V1",
    "V2",
    "AnalyzerVerdict",
    "Decision",
    "ReplicaMetrics",
    "V1Params",
    "V2Params",
    "VariantState",
    "analyze_v1",
    "analyze_v2",
    "combine_analyzers",
    "with_model",
]

#: Analyzer names, as they appear in reasons and Events.
V1 = "saturation-v1"
V2 = "saturation-v2"
MODEL = "model"

Direction = Literal["up", "down", "hold"]


@dataclass(frozen=True, slots=True)
class V1Params:
    kv_cache_threshold: float = 0.80
    queue_length_threshold: float = 5.0
    kv_spare_trigger: float = 0.10
    queue_spare_trigger: float = 3.0


@dataclass(frozen=True, slots=True)
class V2Params:
    scale_up_threshold: float = 0.85
    scale_down_boundary: float = 0.70


@dataclass(frozen=True, slots=True)
class ReplicaMetrics:
    """One serving replica: the window's max of KV-cache usage (0 to 1) and of requests waiting."""

    kv_usage: float
    waiting: float


@dataclass(frozen=True, slots=True)
class VariantState:
    """One variant of a model as the analyzers see it.

    ``replicas`` is what the target asks for now (its spec), ``ready`` how many of them are ready,
    ``metrics`` one entry per replica that reports. ``previous_desired`` is the last decision (None if
    none): one not yet applied means the variant is still moving.
    """

    key: str
    cost: float
    replicas: int
    ready: int
    metrics: tuple[ReplicaMetrics, ...] = ()
    min_replicas: int = 1
    max_replicas: int | None = None
    kv_tokens_per_replica: float | None = None
    previous_desired: int | None = None

    @property
    def floor(self) -> int:
        """The lowest count saturation scales to (scale to zero is decided elsewhere)."""
        return max(self.min_replicas, 1)

    def can_grow(self) -> bool:
        return self.max_replicas is None or self.replicas < self.max_replicas

    def transitioning(self) -> str | None:
        """Why the variant is still moving, or None."""
        if self.ready < self.replicas:
            return f"{self.replicas - self.ready} of {self.replicas} replicas not ready"
        if len(self.metrics) != self.replicas:
            return f"{len(self.metrics)} of {self.replicas} replicas report metrics"
        if self.previous_desired not in (None, 0, self.replicas):
            return f"the decision {self.previous_desired} is not applied yet ({self.replicas} now)"
        return None


@dataclass(frozen=True, slots=True)
class AnalyzerVerdict:
    """What one analyzer asks for each variant of a model (``targets``: variant key → replicas).

    ``fresh`` is False when it lacked what it needs: it then asks nothing and vetoes nothing.
    """

    analyzer: str
    fresh: bool
    targets: Mapping[str, int]
    reason: str


@dataclass(frozen=True, slots=True)
class Decision:
    """The replicas for one variant, which analyzer decided (``decided_by``) and why."""

    replicas: int
    direction: Direction
    decided_by: str
    reason: str
    analyzers: tuple[str, ...] = field(default=())


def _cheapest(variants: Sequence[VariantState]) -> list[VariantState]:
    return sorted(variants, key=lambda v: (v.cost, v.key))


def _dearest(variants: Sequence[VariantState]) -> list[VariantState]:
    return sorted(variants, key=lambda v: (v.cost, v.key), reverse=True)


def _current(variants: Sequence[VariantState]) -> dict[str, int]:
    return {v.key: v.replicas for v in variants}


# --- V1 -------------------------------------------------------------------------------------------------


def analyze_v1(variants: Sequence[VariantState], params: V1Params = V1Params()) -> AnalyzerVerdict:
    """WVA's saturation V1 over the variants of one model (see the module docstring)."""
    targets = _current(variants)
    samples = [m for v in variants for m in v.metrics]
    if not samples:
        return AnalyzerVerdict(V1, False, targets, "no KV-cache or queue metrics for the model's replicas")
    moving = [f"{v.key} ({why})" for v in variants if (why := v.transitioning()) is not None]
    if moving:
        # Fresh, and asking to stay: it vetoes a scale-down by another analyzer while replicas start.
        return AnalyzerVerdict(
            V1, True, targets, f"nothing moves while a variant of the model is starting: {', '.join(moving)}"
        )
    p = params
    unsaturated = [
        m for m in samples if m.kv_usage < p.kv_cache_threshold and m.waiting < p.queue_length_threshold
    ]
    saturated = len(samples) - len(unsaturated)
    if unsaturated:
        spare_kv = sum(p.kv_cache_threshold - m.kv_usage for m in unsaturated) / len(unsaturated)
        spare_queue = sum(p.queue_length_threshold - m.waiting for m in unsaturated) / len(unsaturated)
        low = [
            f"spare KV cache {spare_kv:.3f} < {p.kv_spare_trigger:g}"
            if spare_kv < p.kv_spare_trigger
            else "",
            f"spare queue {spare_queue:.2f} < {p.queue_spare_trigger:g}"
            if spare_queue < p.queue_spare_trigger
            else "",
        ]
        why_up = ", ".join(x for x in low if x)
    else:
        why_up = f"all {len(samples)} replicas saturated"
    if why_up:
        for v in _cheapest(variants):
            if v.can_grow():
                targets[v.key] = v.replicas + 1
                return AnalyzerVerdict(
                    V1,
                    True,
                    targets,
                    f"{why_up}: +1 replica on the cheapest variant {v.key} (cost {v.cost:g})",
                )
        return AnalyzerVerdict(V1, True, targets, f"{why_up}, but every variant is at its maxReplicas")
    n = len(samples)
    if saturated or n < 2:
        why = f"{saturated} replicas saturated" if saturated else "a single replica"
        return AnalyzerVerdict(V1, True, targets, f"enough spare capacity; no scale-down with {why}")
    kv_after = sum(m.kv_usage for m in samples) / (n - 1)
    queue_after = sum(m.waiting for m in samples) / (n - 1)
    spare_kv_after = p.kv_cache_threshold - kv_after
    spare_queue_after = p.queue_length_threshold - queue_after
    if spare_kv_after < p.kv_spare_trigger or spare_queue_after < p.queue_spare_trigger:
        return AnalyzerVerdict(
            V1,
            True,
            targets,
            f"enough spare capacity, but one replica fewer would leave spare KV {spare_kv_after:.3f} and "
            f"queue {spare_queue_after:.2f} (triggers {p.kv_spare_trigger:g}, {p.queue_spare_trigger:g})",
        )
    for v in _dearest(variants):
        if v.replicas > v.floor:
            targets[v.key] = v.replicas - 1
            return AnalyzerVerdict(
                V1,
                True,
                targets,
                f"one replica fewer still leaves spare KV {spare_kv_after:.3f} and queue "
                f"{spare_queue_after:.2f}: -1 replica on the most expensive variant {v.key} "
                f"(cost {v.cost:g})",
            )
    return AnalyzerVerdict(V1, True, targets, "spare capacity, but every variant is at its minimum")


# --- V2 -------------------------------------------------------------------------------------------------


def analyze_v2(
    variants: Sequence[VariantState], params: V2Params = V2Params(), *, avg_input_tokens: float = 0.0
) -> AnalyzerVerdict:
    """WVA's saturation V2 (token capacity) over the variants of one model (see the module docstring)."""
    targets = _current(variants)
    if not any(v.metrics for v in variants):
        return AnalyzerVerdict(V2, False, targets, "no KV-cache or queue metrics for the model's replicas")
    unknown = [v.key for v in variants if not (v.kv_tokens_per_replica or 0.0) > 0.0]
    if unknown:
        return AnalyzerVerdict(
            V2, False, targets, f"KV-cache capacity unknown (vllm:cache_config_info) for {', '.join(unknown)}"
        )
    prompt = max(avg_input_tokens, 0.0) if math.isfinite(avg_input_tokens) else 0.0
    demand = sum(
        m.kv_usage * (v.kv_tokens_per_replica or 0.0) + m.waiting * prompt
        for v in variants
        for m in v.metrics
    )
    supply = sum(v.replicas * (v.kv_tokens_per_replica or 0.0) for v in variants)
    up, down = params.scale_up_threshold, params.scale_down_boundary
    figures = f"demand {demand:.0f} tokens, supply {supply:.0f} (starting replicas included)"
    required = demand / up - supply
    if required > 0:
        added: list[str] = []
        for v in _cheapest(variants):
            if required <= 0:
                break
            cap = v.kv_tokens_per_replica or 0.0
            room = math.inf if v.max_replicas is None else max(v.max_replicas - v.replicas, 0)
            k = int(min(math.ceil(required / cap), room))
            if k > 0:
                targets[v.key] = v.replicas + k
                required -= k * cap
                added.append(f"+{k} on {v.key} (cost {v.cost:g})")
        if not added:
            return AnalyzerVerdict(
                V2, True, targets, f"{figures}: above {up:g}, but every variant is at its maxReplicas"
            )
        return AnalyzerVerdict(
            V2, True, targets, f"{figures}: utilisation above {up:g}, {', '.join(added)} (cheapest first)"
        )
    silent = [v.key for v in variants if len(v.metrics) < v.ready]
    if silent:
        return AnalyzerVerdict(
            V2,
            True,
            targets,
            f"{figures}; no scale-down while ready replicas of {', '.join(silent)} do not report",
        )
    spare = supply - demand / down
    removed: list[str] = []
    for v in _dearest(variants):
        cap = v.kv_tokens_per_replica or 0.0
        k = min(math.floor(spare / cap + 1e-9), v.replicas - v.floor) if spare > 0 else 0
        if k > 0:
            targets[v.key] = v.replicas - k
            spare -= k * cap
            removed.append(f"-{k} on {v.key} (cost {v.cost:g})")
    if removed:
        return AnalyzerVerdict(
            V2, True, targets, f"{figures}: utilisation below {down:g}, {', '.join(removed)} (dearest first)"
        )
    return AnalyzerVerdict(V2, True, targets, f"{figures}: within [{down:g}, {up:g}]")


# --- combining -----------------------------------------------------------------------------------------


def combine_analyzers(verdicts: Sequence[AnalyzerVerdict], current: Mapping[str, int]) -> dict[str, Decision]:
    """One decision per variant from several analyzers: up if any fresh one asks (its largest ask), down
    only if every fresh one asks to (the smallest reduction), else hold. No fresh analyzer: hold."""
    fresh = [v for v in verdicts if v.fresh]
    used = tuple(v.analyzer for v in verdicts)
    out: dict[str, Decision] = {}
    for key, now in current.items():
        asks = [(v.targets.get(key, now), v) for v in fresh]
        ups = [(t, v) for t, v in asks if t > now]
        if ups:
            top = max(t for t, _ in ups)
            who = [v for t, v in ups if t == top]
            out[key] = Decision(
                top, "up", "+".join(v.analyzer for v in who), "; ".join(v.reason for v in who), used
            )
        elif asks and all(t < now for t, _ in asks):
            least = max(t for t, _ in asks)
            out[key] = Decision(
                least,
                "down",
                "+".join(v.analyzer for _, v in asks),
                "; ".join(v.reason for _, v in asks),
                used,
            )
        elif asks:
            out[key] = Decision(now, "hold", "+".join(v.analyzer for _, v in asks), _hold_reason(asks), used)
        else:
            reason = "; ".join(v.reason for v in verdicts) or "no saturation analyzer configured"
            out[key] = Decision(now, "hold", "none", f"no fresh saturation metrics: {reason}", used)
    return out


def _hold_reason(asks: Sequence[tuple[int, AnalyzerVerdict]]) -> str:
    return "; ".join(f"{v.analyzer}: {v.reason}" for _, v in asks)


def with_model(
    model_replicas: int | None, model_reason: str, saturation: Decision | None, current: int
) -> Decision:
    """The model-based decision with saturation as its safety floor (WVA's rule): scale up if either
    asks (the larger ask), down only if both agree (the smaller reduction), else hold at ``current``.

    Without a model decision (no profile), saturation decides alone; without fresh saturation metrics
    (``decided_by == "none"``), the model decides alone (its own rules hold a variant on missing metrics).
    """
    if model_replicas is None:
        if saturation is None:
            return Decision(current, "hold", "none", "neither a model nor saturation metrics")
        return saturation
    model = Decision(model_replicas, _direction(model_replicas, current), MODEL, model_reason, (MODEL,))
    if saturation is None or saturation.decided_by == "none":
        return model
    s, m = saturation.replicas, model_replicas
    analyzers = (MODEL, *saturation.analyzers)
    if m > current or s > current:
        if s > m:
            return Decision(
                s,
                "up",
                saturation.decided_by,
                f"saturation floor above the model's {m}: {saturation.reason}",
                analyzers,
            )
        if s == m:
            return Decision(
                m, "up", f"{MODEL}+{saturation.decided_by}", f"{model_reason}; {saturation.reason}", analyzers
            )
        return Decision(m, "up", MODEL, model_reason, analyzers)
    if m < current and s < current:
        return Decision(
            max(m, s),
            "down",
            f"{MODEL}+{saturation.decided_by}",
            f"{model_reason}; saturation agrees: {saturation.reason}",
            analyzers,
        )
    if m < current:
        return Decision(
            current,
            "hold",
            saturation.decided_by,
            f"the model asks {m}, but saturation holds {current}: {saturation.reason}",
            analyzers,
        )
    return Decision(current, "hold", MODEL, model_reason, analyzers)


def _direction(target: int, current: int) -> Direction:
    return "up" if target > current else "down" if target < current else "hold"
