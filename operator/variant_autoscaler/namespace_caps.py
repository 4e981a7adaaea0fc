"""Namespace GPU caps in the one plan: WVA's namespace-scoped quota limiter.

A platform admin gives each tenant namespace a number of GPUs per accelerator type (the saturation
ConfigMap's ``limiters: [{type: quota, scope: namespace, namespaceQuotas: ...}]``). In limited mode the
planner keeps every namespace within its cap:

1. plan as usual (one MILP over every variant and the inventory);
2. where the variants of a capped namespace grow past its cap on a device type, grant the GPUs it may
   still take to its most urgent scale-ups (:func:`~variant_autoscaler.core.sizing.limit_scale_ups`:
   the model's saturation ``priority``, times its KV-cache usage where known), and bound the others on
   the accelerator they run on; one the plan moved onto that device type is kept off it instead, and
   one left no replica at all is decided at none;
3. plan again with those bounds, so that the GPUs the namespace may not take go to other namespaces
   (a few rounds: a kept-off variant may land on another capped type), then repair what is still past a
   cap: moved variants back to what they run, grown ones cut to what the cap leaves (this ends: with
   every variant back at what it runs, a namespace holds no more than its limit).

What a namespace holds already stays, as with a Kubernetes ResourceQuota: its cap is never below the
GPUs its replicas hold now, and no replica that runs is taken away for a cap. Every bounded decision's
reason names the quota, the namespace, its cap and what it holds. The burst guard's room is bounded the
same way.

Pure: the plan function is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from variant_autoscaler.api.saturation_config import NamespaceQuota
from variant_autoscaler.core.decision import VariantPlan
from variant_autoscaler.core.model import AcceleratorType, Decision, Outcome
from variant_autoscaler.core.sizing import ScaleUp, limit_scale_ups

if TYPE_CHECKING:
    from variant_autoscaler.core.model import Plan
    from variant_autoscaler.planner import PlannedVariant, PlanOutcome, PlanRequest, VariantKey

__all__ = [
    "QUOTA_ROUNDS",
    "NamespaceCap",
    "gpu_usage",
    "namespace_cap",
    "template_gpus",
    "with_quotas",
    "within_namespace_caps",
]

#: Re-plans at most this often for namespace caps before cutting what is still past them.
QUOTA_ROUNDS = 3

_Cell = tuple[str, str]  # (namespace, device type)
# The replicas a cap leaves a variant, why, and the capped device type the plan moved it onto (None: it
# runs there already): such a variant is kept off that device type, not bounded (a bound on its count
# would bound it wherever it goes).
_Cut = tuple[int, str, str | None]


@dataclass(frozen=True, slots=True)
class NamespaceCap:
    """The GPUs one namespace's variants may hold together, per device type (a device type not listed
    is not capped here), and what says so (for reasons)."""

    devices: Mapping[str, int]
    source: str = "the namespace's GPU quota"


def within_namespace_caps(plan: Callable[[PlanRequest], PlanOutcome], request: PlanRequest) -> PlanOutcome:
    """``plan(request)``, kept within ``request.namespace_caps`` (limited mode; see the module doc)."""
    outcome = plan(request)
    if request.capacity is None or not request.namespace_caps:
        return outcome
    bounded = request
    notes: dict[VariantKey, _Cut] = {}
    zeroed: dict[VariantKey, str] = {}  # nothing fits: not planned again, decided at none below
    for rounds in range(QUOTA_ROUNDS + 1):
        cuts = _cuts(bounded, outcome)
        notes.update(cuts)
        if not cuts or rounds == QUOTA_ROUNDS:
            break  # within every cap, or what is still past one is cut below
        kept = []
        for v in bounded.variants:
            cut = cuts.get(v.key)
            if cut is not None and cut[0] == 0 and cut[2] is None:
                zeroed[v.key] = cut[1]
            else:
                kept.append(_bounded(v, cut, request))
        bounded = replace(bounded, variants=tuple(kept))
        outcome = plan(bounded)
    by_key = {v.key: v for v in request.variants}
    decisions = dict(outcome.decisions)
    added: dict[VariantKey, list[str]] = {}  # the notes each decision's reason gained
    for key, note in zeroed.items():
        v = by_key[key]
        decisions[key] = VariantPlan(
            v.accelerator or "", 0, v.max_batch, 0.0, None, None, f"unserved: {note}"
        )
    for key, (allowed, note, moved) in notes.items():
        d = decisions.get(key)
        if d is not None and key not in zeroed and (d.replicas >= allowed or moved is not None):
            decisions[key] = _noted(d, note, added.setdefault(key, []))
    _repair(request, outcome, decisions, added)
    outcome = replace(outcome, decisions=decisions)
    outcome = replace(outcome, plan=_with_notes(outcome, zeroed, added))
    return replace(outcome, room=_room(request, outcome))


def _noted(d: VariantPlan, note: str, added: list[str]) -> VariantPlan:
    if note in added:
        return d
    added.append(note)
    return replace(d, reason=f"{d.reason}; {note}")


def _repair(
    request: PlanRequest,
    outcome: PlanOutcome,
    decisions: dict[VariantKey, VariantPlan],
    added: dict[VariantKey, list[str]],
) -> None:
    """Cut, in place, what the rounds left past a cap: a variant the plan moved onto the device type
    goes back to what it runs, one grown there keeps what the cap leaves it (without predictions);
    again until every cap holds, which it must: with every variant back at what it runs, a namespace
    holds what it holds, never more than its limit."""
    by_key = {v.key: v for v in request.variants}
    for _ in range(2 * len(request.variants) + 1):
        cuts = _cuts(request, replace(outcome, decisions=decisions))
        if not cuts:
            return
        for key, (allowed, note, moved) in cuts.items():
            d, v = decisions[key], by_key[key]
            where = (v.accelerator or d.accelerator) if moved is not None else d.accelerator
            replicas = v.current_replicas if moved is not None else allowed
            cost = replicas * v.replica_cost(request.accelerators)
            cut = replace(d, accelerator=where, replicas=replicas, cost=cost, ttft_ms=None, itl_ms=None)
            decisions[key] = _noted(cut, note, added.setdefault(key, []))


def _with_notes(
    outcome: PlanOutcome, zeroed: Mapping[VariantKey, str], added: Mapping[VariantKey, list[str]]
) -> Plan | None:
    """The optimizer's own plan (what ``plan -f`` prints) with the decisions as the caps left them."""
    if outcome.plan is None:
        return None
    core = dict(outcome.plan.decisions)
    for (namespace, variant), note in zeroed.items():
        label = f"{namespace}/{variant}"
        core[label] = Decision(label, None, 0, 0, 0.0, 0.0, 0.0, Outcome.UNSERVED, note)
    for key, notes in added.items():
        label, d = f"{key[0]}/{key[1]}", outcome.decisions.get(key)
        if label not in core or d is None or not notes:
            continue
        c = core[label]
        core[label] = replace(
            c,
            accelerator=d.accelerator or c.accelerator,
            replicas=d.replicas,
            cost=c.cost if d.cost is None else d.cost,
            reason="; ".join((c.reason, *notes)),
        )
    return replace(outcome.plan, decisions=core, total_cost=sum(c.cost for c in core.values()))


def template_gpus(v: PlannedVariant, request: PlanRequest) -> tuple[str, int] | None:
    """The device type and GPUs per replica its pod template gives a variant (``v.gpus``; None:
    unknown): where a variant sized by saturation runs."""
    if v.gpus is None:
        return None
    acc = request.accelerators.get(v.gpus[0])
    return (acc.device, v.gpus[1]) if acc is not None and v.gpus[1] > 0 else None


def _placement(v: PlannedVariant, accelerator: str | None, request: PlanRequest) -> tuple[str, int] | None:
    """The device type and GPUs per replica of ``v`` on ``accelerator`` (None: unknown); a variant
    sized by saturation runs where its pod template says."""
    if not v.sized_by_model:
        return template_gpus(v, request)
    acc = request.accelerators.get(accelerator or "")
    profile = next((p for p in v.profiles if p.accelerator == accelerator), None)
    if acc is None or profile is None:
        return None
    return acc.device, profile.acc_count * acc.multiplicity


def gpu_usage(
    request: PlanRequest, outcome: PlanOutcome, *, capped_only: bool = True
) -> tuple[dict[_Cell, int], dict[_Cell, int]]:
    """GPUs per (namespace, device type) that the variants hold now and that the plan gives them (a
    variant the plan does not decide keeps what it holds; one whose GPUs are unknown is left out), for
    the namespaces with a cap (``capped_only``) or all."""
    held: dict[_Cell, int] = {}
    planned: dict[_Cell, int] = {}
    for v in request.variants:
        if capped_only and v.key[0] not in request.namespace_caps:
            continue
        now = _placement(v, v.accelerator, request)
        if now is not None:
            cell = (v.key[0], now[0])
            held[cell] = held.get(cell, 0) + v.current_replicas * now[1]
        d = outcome.decisions.get(v.key)
        on = _placement(v, d.accelerator or v.accelerator, request) if d is not None else now
        if on is not None:
            cell = (v.key[0], on[0])
            planned[cell] = (
                planned.get(cell, 0) + (d.replicas if d is not None else v.current_replicas) * on[1]
            )
    return held, planned


def _limit(request: PlanRequest, held: Mapping[_Cell, int], cell: _Cell) -> int | None:
    """The GPUs of a device type a namespace may hold: its cap, or what it holds now when that is more
    (None: not capped)."""
    cap = request.namespace_caps.get(cell[0])
    if cap is None or cell[1] not in cap.devices:
        return None
    return max(cap.devices[cell[1]], held.get(cell, 0))


def _cuts(request: PlanRequest, outcome: PlanOutcome) -> dict[VariantKey, _Cut]:
    """The variants whose planned scale-ups take their namespace past its cap on a device type: the
    replicas each may have, and why."""
    held, planned = gpu_usage(request, outcome)
    # Per capped (namespace, device): each variant planned there, the replicas it runs there now (none
    # when the plan moves it there), the replicas planned and the GPUs per replica.
    groups: dict[_Cell, list[tuple[PlannedVariant, int, int, int]]] = {}
    moved: set[VariantKey] = set()
    for v in request.variants:
        d = outcome.decisions.get(v.key)
        on = _placement(v, d.accelerator or v.accelerator, request) if d is not None else None
        if d is None or on is None or _limit(request, held, (v.key[0], on[0])) is None:
            continue
        now = _placement(v, v.accelerator, request)
        here = now is not None and now[0] == on[0]
        if not here and v.accelerator:
            moved.add(v.key)
        groups.setdefault((v.key[0], on[0]), []).append(
            (v, v.current_replicas if here else 0, d.replicas, on[1])
        )
    cuts: dict[VariantKey, _Cut] = {}
    for cell, members in sorted(groups.items()):
        limit = _limit(request, held, cell)
        if limit is None or planned.get(cell, 0) <= limit:
            continue
        namespace, device = cell
        # What stays on the device (variants not re-planned included) beside the planned growth.
        growth = sum(max(0, replicas - base) * units for _, base, replicas, units in members)
        stay = planned.get(cell, 0) - growth
        asks = [
            _ask(v, device, units, base, replicas) for v, base, replicas, units in members if replicas > base
        ]
        by_name = {f"{v.key[0]}/{v.key[1]}": member for member in members for v in (member[0],)}
        cap = request.namespace_caps[namespace]
        what = f"namespace {namespace} may hold {cap.devices[device]} {device}, {held.get(cell, 0)} held now"
        for name, granted in limit_scale_ups(asks, {device: limit - stay}).items():
            v, base, asked, units = by_name[name]
            if v.key in moved:
                # The plan moved it here from the accelerator it runs on: it is kept off this device type.
                note = f"kept off {device} by {cap.source} (the plan moved it from {v.accelerator}): {what}"
                cuts[v.key] = (v.current_replicas, note, device)
                continue
            note = f"limited by {cap.source} to {granted} (asked {asked}): {what}, {units} per replica"
            cuts[v.key] = (max(granted, base), note, None)
    return cuts


def _ask(v: PlannedVariant, device: str, units: int, base: int, replicas: int) -> ScaleUp:
    known = v.saturation.mean_spare if v.saturation is not None else None
    spare = 0.0 if known is None else known
    return ScaleUp(f"{v.key[0]}/{v.key[1]}", device, units, base, replicas, spare, v.saturation_priority)


def _bounded(v: PlannedVariant, cut: _Cut | None, request: PlanRequest) -> PlannedVariant:
    """``v`` with at most the replicas a namespace cap leaves it on the accelerator it runs on, or kept
    off the capped device type the plan moved it onto (on its own accelerator where no other is left)."""
    if cut is None:
        return v
    allowed, _, moved = cut
    if moved is not None:
        devices = {name: acc.device for name, acc in request.accelerators.items()}
        others = tuple(p for p in v.profiles if devices.get(p.accelerator) != moved)
        return replace(v, profiles=others) if others else replace(v, keep_accelerator=True)
    top = allowed if v.max_replicas is None else min(v.max_replicas, allowed)
    # Kept on its accelerator: a bound on its count must not send it to another one.
    return replace(v, keep_accelerator=True, max_replicas=top, min_replicas=min(v.min_replicas, top))


def _room(request: PlanRequest, outcome: PlanOutcome) -> dict[VariantKey, int]:
    """The burst guard's room per variant, within its namespace's cap too."""
    held, planned = gpu_usage(request, outcome)
    room = dict(outcome.room)
    for v in request.variants:
        on = _placement(v, v.accelerator, request)
        if on is None or v.key not in room:
            continue
        limit = _limit(request, held, (v.key[0], on[0]))
        if limit is not None:
            left = limit - planned.get((v.key[0], on[0]), 0)
            room[v.key] = max(0, min(room[v.key], left // on[1]))
    return room


# ---- WVA's quota limiters, as the cycle reads them from the saturation ConfigMap -------------------


def _device_of(name: str, accelerators: Mapping[str, AcceleratorType]) -> str:
    """The device type a quota's accelerator type means: named as in accelerator-unit-costs, or itself."""
    acc = accelerators.get(name)
    return acc.device if acc is not None else name


def namespace_cap(
    quota: NamespaceQuota, capacity: Mapping[str, int], accelerators: Mapping[str, AcceleratorType]
) -> NamespaceCap:
    """WVA's namespace-scoped quota on the device types of the inventory: each accelerator type it names
    (as in accelerator-unit-costs, or by its device type) capped as it says; every other device type of
    the inventory at none (WVA's rule for the types a quota does not name)."""
    devices: dict[str, int] = {}
    uncapped: set[str] = set()
    for name, cap in quota.caps.items():
        device = _device_of(name, accelerators)
        if cap is None:
            uncapped.add(device)
        else:
            devices[device] = min(cap, devices.get(device, cap))
    for device in capacity:
        if device not in devices and device not in uncapped:
            devices[device] = 0
    names = ", ".join(repr(n) for n in quota.limiters)
    return NamespaceCap(devices, f"the namespace GPU quota ({names})")


def with_quotas(
    capacity: dict[str, int], quotas: Mapping[str, int], accelerators: Mapping[str, AcceleratorType]
) -> dict[str, int]:
    """WVA's quota limiter on the inventory: at most that many GPUs of an accelerator type (named as in
    accelerator-unit-costs, or by its device type)."""
    out = dict(capacity)
    for name, quota in quotas.items():
        device = _device_of(name, accelerators)
        out[device] = min(out.get(device, 0), quota)
    return out
