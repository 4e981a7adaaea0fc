"""Replica policy applied to the optimizer's decision before it is actuated.

Pure: every input, including the time (``now``) and the history that must survive restarts (kept in
the VariantAutoscaling status by the caller), is passed in; the result says what to do and why.

Order of the rules (each one explains itself in ``PolicyDecision.reason``):

1. **Missing, stale or failing metrics, or no decision from the optimizer** — hold: keep the previous
   decision, and never go below the replicas running now (nothing scales down on missing data).
2. **Bounds** — clamp the recommendation into ``[min_replicas, max_replicas]``.
3. **Scale-down stabilisation** — a scale-down goes only as low as the highest recommendation within
   the window (the HorizontalPodAutoscaler's rule), never above the current count. The history keeps
   the points where the recommendation changed (see :func:`_prune`).
3b. **Metrics recovering** — right after a metrics gap the rate window still holds too few samples and
   under-reads the load: no scale-down below the previous decision or the current replicas until it is
   full again (``scale_down_hold`` says why); scale-ups pass.
3c. **KV-cache pressure** — while the variant's pods preempt requests (their KV cache is full), no
   scale-down below the replicas running now (``pressure_hold`` says why): fewer replicas would preempt
   more, whatever the model predicts.
3d. **Make before break** — a variant whose model's other variants have replicas still starting (the
   plan moves the model's load to them) is not scaled down until they are ready
   (``siblings_starting``): the replicas it has serve the load until then.
3e. **Yield to a higher priority** (limited mode) — a variant whose GPUs the plan gives to variants of a
   higher-priority class on the same device type gives up that many replicas at once
   (``yield_replicas``, from :func:`priority_yields`), without waiting out the stabilisation window of
   rule 3 or the KV-cache hold of rule 3c: those rules keep capacity against a noisy load, not against
   the classes the inventory serves first.
4. **Pending replicas** — no scale-up while replicas added earlier are still starting (ready < current),
   until ``pending_timeout_seconds`` after the last scale seen (none seen: no wait).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from variant_autoscaler.errors import ModelError

MAX_HISTORY = 64  # the CRD caps status.recommendations at 64 entries

K = TypeVar("K", bound=Hashable)
D = TypeVar("D", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Recommendation:
    """One replica recommendation (after bounds), remembered for scale-down stabilisation."""

    time: datetime
    replicas: int


@dataclass(frozen=True, slots=True)
class PolicyInput:
    now: datetime
    # The optimizer's replicas for the variant, or None when it produced none (infeasible, failed, skipped).
    optimized_replicas: int | None
    optimized_reason: str
    # False when metrics are missing, stale or Prometheus failed; metrics_reason says which.
    metrics_ok: bool
    metrics_reason: str
    # The scale target now: spec replicas and ready replicas (None when unknown / no target).
    current_replicas: int | None
    ready_replicas: int | None
    # The previous decision (from status.desiredOptimizedAlloc), if any.
    last_desired: int | None
    min_replicas: int
    max_replicas: int | None
    stabilization_seconds: float
    history: tuple[Recommendation, ...] = ()
    last_scale_time: datetime | None = None
    pending_timeout_seconds: float = 600.0
    # Why a scale-down must wait although metrics are available (rule 3b), or None.
    scale_down_hold: str | None = None
    # Why no scale-down below the current replicas this cycle although the model asks for one (rule 3c:
    # the pods preempt), or None.
    pressure_hold: str | None = None
    # Replicas of the model's other variants still starting or asked for by this plan (rule 3d).
    siblings_starting: int = 0
    # Replicas given up at once to higher-priority variants planned onto the same GPUs (rule 3e).
    yield_replicas: int = 0


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    replicas: int
    reason: str
    # True when the decision is a hold (rule 1): the previous decision was kept.
    held: bool
    history: tuple[Recommendation, ...]
    # Rules that changed the optimizer's number: "hold", "min", "max", "stabilization", "recovering",
    # "kv-pressure", "replacing", "pending".
    limited_by: tuple[str, ...] = field(default=())


def _clamp(value: int, low: int, high: int | None) -> tuple[int, str | None]:
    if value < low:
        return low, "min"
    if high is not None and value > high:
        return high, "max"
    return value, None


def _prune(history: tuple[Recommendation, ...], now: datetime, window: float) -> tuple[Recommendation, ...]:
    """The recommendations that count for the window ending at ``now``.

    The history holds change points: from each entry's time on, its recommendation stood until the next
    entry (one computed every cycle, recorded only when it changes, so an unchanged decision does not
    change the status). The entry in effect at the window's start counts, with every later one. Runs of
    equal values (as older statuses stored them, one per cycle) collapse to their first entry.
    """
    if window <= 0:
        return ()
    horizon = now - timedelta(seconds=window)
    points: list[Recommendation] = []
    for r in sorted((r for r in history if r.time <= now), key=lambda r: r.time):
        if not points or points[-1].replicas != r.replicas:
            points.append(r)
    start = 0
    for i, r in enumerate(points):
        if r.time <= horizon:
            start = i
    return tuple(points[start:])[-MAX_HISTORY:]


def apply_policy(inp: PolicyInput) -> PolicyDecision:
    """Turn the optimizer's recommendation into the replicas to actuate, with the reason."""
    if inp.min_replicas < 0:
        raise ModelError(f"min_replicas must be >= 0, got {inp.min_replicas}")
    if inp.max_replicas is not None and inp.max_replicas < max(inp.min_replicas, 1):
        raise ModelError(f"max_replicas {inp.max_replicas} is below min_replicas {inp.min_replicas}")
    if inp.stabilization_seconds < 0:
        raise ModelError("stabilization_seconds must be >= 0")

    history = _prune(inp.history, inp.now, inp.stabilization_seconds)
    current_now = inp.current_replicas
    if current_now is not None and inp.stabilization_seconds > 0:
        if not inp.history:
            # A variant seen for the first time: its current replicas count as the first recommendation
            # (as the HorizontalPodAutoscaler seeds its own), so that it is not scaled down on one
            # cycle's reading, before the load and its forecast are known.
            history = (Recommendation(time=inp.now, replicas=current_now),)
        elif (
            inp.last_desired is not None
            and current_now > inp.last_desired
            and current_now > max(r.replicas for r in history)
        ):
            # More replicas run than the last decision and every recommendation on record asked for: a
            # scale-up whose record was lost (a process killed between its patch and its status write,
            # or a burst-guard scale just before a restart) or one made by hand. It counts as a
            # recommendation from now on, so that it is not undone before one window has passed.
            history = (*history, Recommendation(time=inp.now, replicas=current_now))[-MAX_HISTORY:]

    # Rule 1: hold on missing data.
    if not inp.metrics_ok or inp.optimized_replicas is None:
        why = inp.metrics_reason if not inp.metrics_ok else inp.optimized_reason
        base = inp.last_desired
        if base is None:
            base = inp.current_replicas if inp.current_replicas is not None else inp.min_replicas
        if inp.current_replicas is not None and base < inp.current_replicas:
            base = inp.current_replicas
        replicas, bound = _clamp(base, inp.min_replicas, inp.max_replicas)
        reason = f"holding {replicas} replicas, no scale-down: {why}"
        limited: tuple[str, ...] = ("hold",)
        if bound is not None:
            reason += f" (clamped to {bound}Replicas)"
            limited += (bound,)
        return PolicyDecision(
            replicas=replicas, reason=reason, held=True, history=history, limited_by=limited
        )

    if inp.optimized_replicas < 0:
        raise ModelError(f"optimized_replicas must be >= 0, got {inp.optimized_replicas}")

    # Rule 2: bounds.
    recommended, bound = _clamp(inp.optimized_replicas, inp.min_replicas, inp.max_replicas)
    reasons = [inp.optimized_reason] if inp.optimized_reason else []
    limited = ()
    if bound is not None:
        limit = inp.min_replicas if bound == "min" else inp.max_replicas
        reasons.append(f"{inp.optimized_replicas} clamped to {bound}Replicas={limit}")
        limited += (bound,)
    if inp.stabilization_seconds > 0 and (not history or history[-1].replicas != recommended):
        history = (*history, Recommendation(time=inp.now, replicas=recommended))[-MAX_HISTORY:]
    desired = recommended
    current = inp.current_replicas

    # Rule 3e (applied inside rules 3 and 3c): the replicas that higher-priority variants take over now.
    yielding = max(0, inp.yield_replicas)

    def yielded(floor: int) -> int:
        """A hold's floor, lowered by the replicas yielded to a higher priority (never below ``desired``)."""
        if yielding <= 0 or floor <= desired:
            return floor
        lowered = max(desired, floor - yielding)
        reasons.append(
            f"{floor - lowered} replicas given up at once to higher-priority variants the plan puts on "
            "the same GPUs"
        )
        return lowered

    # Rule 3: scale-down stabilisation.
    if current is not None and desired < current and history:
        highest = max(r.replicas for r in history)
        stabilized = yielded(min(max(desired, highest), current))
        if stabilized > desired:
            reasons.append(
                f"scale-down to {desired} deferred by the {inp.stabilization_seconds:g}s stabilization "
                f"window (highest recent recommendation {highest})"
            )
            desired = stabilized
            limited += ("stabilization",)

    # Rule 3b: no scale-down while the metrics window refills after a gap.
    if inp.scale_down_hold is not None:
        known = [r for r in (inp.last_desired, current) if r is not None]
        floor, _ = _clamp(max(known), inp.min_replicas, inp.max_replicas) if known else (desired, None)
        if desired < floor:
            reasons.append(f"scale-down to {desired} held at {floor}: {inp.scale_down_hold}")
            desired = floor
            limited += ("recovering",)

    # Rule 3c: no scale-down while the pods run out of KV cache.
    if inp.pressure_hold is not None and current is not None:
        floor, _ = _clamp(current, inp.min_replicas, inp.max_replicas)
        floor = yielded(floor)
        if desired < floor:
            reasons.append(f"scale-down to {desired} held at {floor}: {inp.pressure_hold}")
            desired = floor
            limited += ("kv-pressure",)

    # Rule 3d: make before break. A plan that moves load to another variant of the model counts that
    # variant's new replicas as supply from their ready time on; until then these replicas serve it.
    if current is not None and desired < current and inp.siblings_starting > 0:
        reasons.append(
            f"scale-down to {desired} waits: {inp.siblings_starting} replicas of the model's other "
            "variants are still starting"
        )
        desired = current
        limited += ("replacing",)

    # Rule 4: pending replicas.
    if (
        current is not None
        and desired > current
        and inp.ready_replicas is not None
        and inp.ready_replicas < current
    ):
        # Only replicas added by a scale the operator saw: with none known (a target it never saw
        # change), replicas that never become ready must not block scale-ups for ever.
        within_timeout = (
            inp.last_scale_time is not None
            and (inp.now - inp.last_scale_time).total_seconds() < inp.pending_timeout_seconds
        )
        if within_timeout:
            reasons.append(
                f"scale-up to {desired} waits: {current - inp.ready_replicas} of {current} replicas "
                "are still starting"
            )
            desired = current
            limited += ("pending",)

    return PolicyDecision(
        replicas=desired,
        reason="; ".join(reasons) if reasons else f"{desired} replicas",
        held=False,
        history=history,
        limited_by=limited,
    )


def batch_stable_cycles(previous_batch: int | None, previous_cycles: int, batch: int | None) -> int:
    """Consecutive cycles the chosen batch size has stayed the same, counting this one."""
    if batch is None:
        return 0
    if previous_batch is not None and previous_batch == batch:
        return previous_cycles + 1
    return 1


def should_apply_batch(
    *, enabled: bool, current_batch: int | None, batch: int | None, stable_cycles: int, required_cycles: int
) -> bool:
    """Patch mode changes ``--max-num-seqs`` only when enabled, different, and stable long enough."""
    return (
        enabled
        and batch is not None
        and batch > 0
        and batch != current_batch
        and stable_cycles >= required_cycles
    )


def siblings_starting(variants: Iterable[tuple[K, Hashable, int, int]]) -> dict[K, int]:
    """Rule 3d's input for each variant: ``(key, model, asked, ready)`` in, with ``asked`` the larger of
    its current replicas and the plan's; out, per key, the replicas of the *other* variants of its
    model not yet ready (``asked − ready`` each)."""
    rows = list(variants)
    by_model: dict[Hashable, int] = {}
    for _, model, asked, ready in rows:
        by_model[model] = by_model.get(model, 0) + max(0, asked - ready)
    return {key: by_model[model] - max(0, asked - ready) for key, model, asked, ready in rows}


def priority_yields(
    rows: Iterable[tuple[K, D, int, int, int, int]], capacity: Mapping[D, int]
) -> dict[K, int]:
    """Rule 3e's input, in limited mode: per variant, the replicas it gives up at once to variants of a
    higher priority on the same device type.

    ``rows``: ``(key, device, priority, units per replica, current replicas, planned replicas)``, a
    smaller ``priority`` being served first (WVA's convention); ``capacity``: the units of each device the
    plan had. On a device, the units the plan adds to higher-priority variants beyond the free ones
    (``capacity`` minus the current replicas' units; below zero when pods already wait for units) are
    given up by the variants of lower priority that the plan scales down, the lowest priority first.
    Devices without a capacity are left out (unlimited mode: nothing is short). Within a priority, the
    variants give up replicas in the order given.
    """
    by_device: dict[D, list[tuple[K, int, int, int, int]]] = {}
    for key, device, priority, units, current, planned in rows:
        by_device.setdefault(device, []).append((key, priority, max(units, 1), current, planned))
    out: dict[K, int] = {}
    for device, group in by_device.items():
        if device not in capacity:
            continue
        free = capacity[device] - sum(units * current for _, _, units, current, _ in group)
        given = 0
        for level in sorted({priority for _, priority, _, _, _ in group}, reverse=True):
            adds = sum(
                units * max(0, planned - current)
                for _, priority, units, current, planned in group
                if priority < level
            )
            need = adds - free - given if adds > 0 else 0
            for key, priority, units, current, planned in group:
                if need <= 0:
                    break
                if priority != level or current <= planned:
                    continue
                replicas = min(current - planned, -(-need // units))
                out[key] = replicas
                given += replicas * units
                need -= replicas * units
    return out
