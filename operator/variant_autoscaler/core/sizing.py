"""The replicas of the variants of one model, from the queueing model's plan and the saturation analyzers.

Pure (values in, values out, no clock): the planner calls :func:`size_group` once per model (and
namespace) after the optimizer, so the operator, the simulator and ``plan`` decide alike.

* A variant **without a performance profile** is sized by the saturation analyzers alone (V1 and/or V2,
  :mod:`variant_autoscaler.core.saturation`), over every variant of its model, cheapest first.
* A variant **with a profile** is sized by the queueing model and the optimizer; with ``floor`` on
  (``SATURATION_FLOOR``, WVA's later rule) saturation is its safety floor: scale up if either asks, down
  only if both agree. Without fresh saturation metrics for every ready replica of the model (a replica
  that does not report, a variant whose target could not be read) the model decides alone; and so it does
  when it sends a variant whose minimum is 0 to zero (saturation's floor is one replica).
* **Idle** (scale to zero): a variant whose minimum is 0, whose model may scale to zero, and for which no
  request succeeded within the retention period (a measured 0, never a missing series) goes to zero,
  unless a replica is starting or a request waits.

Every result names what decided (``decided_by``: ``model``, ``saturation-v1``, ``saturation-v2``, their
combinations with ``+``, or ``scale-to-zero``) and why, for the status reason, the Events and the
``reason`` label of ``wva_replica_scaling_total``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from variant_autoscaler.core.saturation import (
    V1,
    AnalyzerVerdict,
    Decision,
    ReplicaMetrics,
    V1Params,
    V2Params,
    VariantState,
    analyze_v1,
    analyze_v2,
    combine_analyzers,
    with_model,
)

__all__ = [
    "SCALE_TO_ZERO",
    "AnalyzerLike",
    "IdleInput",
    "SaturationInput",
    "ScaleUp",
    "SizingMember",
    "limit_scale_ups",
    "size_group",
]

#: ``decided_by`` of an idle variant sent to zero.
SCALE_TO_ZERO = "scale-to-zero"


class AnalyzerLike(Protocol):
    """One saturation analyzer to run (``kind`` V1 or V2) with its thresholds."""

    @property
    def kind(self) -> str: ...

    @property
    def v1(self) -> V1Params: ...

    @property
    def v2(self) -> V2Params: ...


@dataclass(frozen=True, slots=True)
class SaturationInput:
    """What the analyzers see of one variant: ready replicas, one entry per replica that reports, the
    KV-cache size of one replica in tokens (V2), and the last decision (one not applied yet means the
    variant is still moving)."""

    ready: int
    metrics: tuple[ReplicaMetrics, ...] = ()
    kv_tokens_per_replica: float | None = None
    previous_desired: int | None = None

    @property
    def mean_spare(self) -> float | None:
        """The mean spare KV cache (0 to 1) over the replicas that report; None: none does."""
        if not self.metrics:
            return None
        return sum(1.0 - m.kv_usage for m in self.metrics) / len(self.metrics)


@dataclass(frozen=True, slots=True)
class IdleInput:
    """Scale to zero for one variant: ``enabled`` when its model may go to zero (the scale-to-zero
    ConfigMap or ``WVA_SCALE_TO_ZERO``); ``requests`` that succeeded within the retention period (None:
    unknown, never idle)."""

    enabled: bool
    requests: float | None
    retention_seconds: float


@dataclass(frozen=True, slots=True)
class SizingMember:
    """One variant of the model.

    ``model`` is the queueing model's replicas and reason when the variant has a profile and the
    optimizer decided it, None otherwise; ``sized_by_model`` says whether it has a profile at all.
    ``saturation`` is None when nothing of the variant could be read (no scale target).
    """

    key: str
    current: int
    cost: float
    min_replicas: int
    max_replicas: int | None
    sized_by_model: bool
    model: tuple[int, str] | None = None
    saturation: SaturationInput | None = None
    idle: IdleInput | None = None


def _verdicts(
    states: Sequence[VariantState], analyzers: Sequence[AnalyzerLike], avg_input_tokens: float
) -> list[AnalyzerVerdict]:
    return [
        analyze_v1(states, a.v1)
        if a.kind == V1
        else analyze_v2(states, a.v2, avg_input_tokens=avg_input_tokens)
        for a in analyzers
    ]


def _idle(member: SizingMember) -> str | None:
    """Why the variant goes to zero, or None."""
    idle, sat = member.idle, member.saturation
    if idle is None or not idle.enabled or member.min_replicas != 0 or idle.requests != 0.0:
        return None
    if member.current == 0:
        return None  # already there
    if sat is not None and (sat.ready < member.current or any(m.waiting > 0 for m in sat.metrics)):
        return None  # starting, or a request waits: not idle
    return f"no request succeeded in the last {idle.retention_seconds:g}s: scale to zero"


def size_group(
    members: Sequence[SizingMember],
    analyzers: Sequence[AnalyzerLike],
    *,
    floor: bool,
    avg_input_tokens: float = 0.0,
) -> Mapping[str, Decision]:
    """The decision of every member that has one. Missing from the result: a member with a profile the
    optimizer did not decide, or without one and nothing read of it. A profile-less member without fresh
    saturation metrics gets a hold decided by ``"none"``, whose reason says why."""
    states = [
        VariantState(
            key=m.key,
            cost=m.cost,
            replicas=m.current,
            ready=m.saturation.ready,
            metrics=m.saturation.metrics,
            min_replicas=m.min_replicas,
            max_replicas=m.max_replicas,
            kv_tokens_per_replica=m.saturation.kv_tokens_per_replica,
            # "Not applied yet" is about saturation's own decisions: a model's decision in metrics mode
            # may never be applied (no HPA), and must not freeze the floor for ever.
            previous_desired=None if m.sized_by_model else m.saturation.previous_desired,
        )
        for m in members
        if m.saturation is not None
    ]
    # The floor needs every ready replica of the model to report: a replica it cannot see is missing
    # data, and missing data neither raises nor holds the model's decision.
    complete = all(len(m.saturation.metrics) >= m.saturation.ready for m in members if m.saturation)
    floor = floor and complete and len(states) == len(members)
    wanted = floor or any(not m.sized_by_model for m in members)
    saturation: dict[str, Decision] = {}
    if states and analyzers and wanted:
        saturation = combine_analyzers(
            _verdicts(states, analyzers, avg_input_tokens), {s.key: s.replicas for s in states}
        )
    out: dict[str, Decision] = {}
    for m in members:
        idle = _idle(m)
        if idle is not None:
            out[m.key] = Decision(0, "down", SCALE_TO_ZERO, idle)
            continue
        sat = saturation.get(m.key)
        if m.sized_by_model:
            if m.model is None:
                continue  # the optimizer gave nothing (held, infeasible): the caller reports why
            # Saturation's own floor is one replica: it does not speak for zero. A model that sends a
            # variant allowed to reach zero there (no load at all, WVA 2025-10's scale to zero) decides.
            to_zero = m.model[0] == 0 and m.min_replicas == 0
            decision = with_model(m.model[0], m.model[1], sat if floor and not to_zero else None, m.current)
        elif sat is None:
            continue  # nothing read of it (no scale target): the caller reports why
        else:
            decision = sat  # decided_by "none" without fresh metrics: the caller holds it
        out[m.key] = decision
    return out


# --- WVA's GPU limiter over saturation's scale-ups ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScaleUp:
    """A variant sized by saturation that asks for more replicas: ``target`` where it runs ``current``,
    each replica holding ``units`` GPUs of ``device``; ``spare`` is its replicas' mean spare KV cache
    (0 to 1: the smaller, the more saturated); ``priority`` WVA's per-model multiplier of its urgency
    (the saturation ConfigMap's ``priority``, default 1)."""

    key: str
    device: str
    units: int
    current: int
    target: int
    spare: float
    priority: float = 1.0

    @property
    def urgency(self) -> float:
        """How saturated it is (1 − spare), times its priority: the larger, the sooner it is served."""
        return self.priority * (1.0 - self.spare)


def limit_scale_ups(asks: Sequence[ScaleUp], free: Mapping[str, int]) -> dict[str, int]:
    """WVA's GPU limiter (``enableLimiter``): the scale-ups that the GPUs ``free`` per device type cannot
    all serve, granted greedily, the most urgent variant first (its saturation, 1 − spare KV cache, times
    its model's priority; then the least spare, then by key), each as far as its device's GPUs go (a
    partial grant); nothing is taken from running replicas. Returns the replicas of every variant granted
    less than it asked for (the others keep their target)."""
    left = {device: max(units, 0) for device, units in free.items()}
    limited: dict[str, int] = {}
    for ask in sorted(asks, key=lambda a: (-a.urgency, a.spare, a.key)):
        want = ask.target - ask.current
        if want <= 0:
            continue
        if ask.units <= 0:
            continue  # holds no GPU: nothing to limit
        granted = min(want, left.get(ask.device, 0) // ask.units)
        left[ask.device] = left.get(ask.device, 0) - granted * ask.units
        if granted < want:
            limited[ask.key] = ask.current + granted
    return limited
