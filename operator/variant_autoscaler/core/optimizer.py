"""The global optimizer: one plan for every variant, in WVA's unlimited mode or our limited mode.

* **Unlimited** (WVA's mode, the default): each variant on its own; the candidate with the lowest cost
  plus WVA's transition penalty wins (wva.md §6.1–§6.3). With one batch size (the profile's) the choice,
  replicas and cost are WVA's.
* **Limited**: the GPU inventory counts. One MILP (:mod:`variant_autoscaler.core.milp`) over all
  variants serves as much priority-weighted load as capacity allows, then at least cost; the saturation
  policy decides whether and how variants that cannot be fully served get partial allocations.
* **Shared load** (ours): variants of one model that opt in share its total load; the optimizer decides
  how many replicas each runs so that every replica stays within the SLOs.

Every decision carries a reason an admin can read; limited plans also name the binding capacity.

This module holds the entry point and unlimited mode; the preparation (pools, candidates) is in
:mod:`~variant_autoscaler.core.preparation`, limited mode in :mod:`~variant_autoscaler.core.limited`, and
the decisions with their reasons in :mod:`~variant_autoscaler.core.explain`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from variant_autoscaler.core.analyzer import size_allocation
from variant_autoscaler.core.candidates import Candidate, CandidateSet, Sizer
from variant_autoscaler.core.explain import (
    decision_for,
    device_usage,
    held_decision,
    infeasible_decision,
    pool_decisions,
    rate_text,
    serve_text,
    with_rejections,
)
from variant_autoscaler.core.limited import plan_limited
from variant_autoscaler.core.milp import solve_allocation
from variant_autoscaler.core.model import (
    AcceleratorType,
    Decision,
    OptimizerConfig,
    Outcome,
    Plan,
    VariantInput,
    priority_weight,
)
from variant_autoscaler.core.penalty import current_cost, transition_penalty
from variant_autoscaler.core.preparation import Clock, Prepared, has_no_load, pool_units, prepare

__all__ = ["Prepared", "optimize", "prepare", "served_by_priority"]


def optimize(
    variants: Sequence[VariantInput],
    accelerators: Mapping[str, AcceleratorType],
    config: OptimizerConfig | None = None,
    capacity: Mapping[str, int] | None = None,
    *,
    sizer: Sizer = size_allocation,
    clock: Clock | None = None,
    prepared: Prepared | None = None,
) -> Plan:
    """Plan every variant at once.

    ``capacity`` (devices per device type, e.g. ``{"NVIDIA-A100-PCIE-80GB": 8}``) is used in limited
    mode; a device type it does not list has none. ``sizer`` is the analyzer's sizing call and ``clock``
    a monotonic clock in seconds used only to report timings (core reads no clock itself). A
    ``prepared`` result of :func:`prepare` for the same inputs skips the sizing.
    """
    config = config or OptimizerConfig()
    prepared = prepared or prepare(variants, accelerators, config, sizer=sizer, clock=clock)
    started = clock() if clock is not None else None
    if config.unlimited:
        plan = _unlimited(prepared, accelerators, config=config, sizer=sizer, clock=clock)
    else:
        plan = plan_limited(
            prepared, accelerators, config=config, capacity=dict(capacity or {}), sizer=sizer, clock=clock
        )
    solve = None if clock is None or started is None else clock() - started
    return Plan(
        decisions=plan.decisions,
        mode=plan.mode,
        status=plan.status,
        total_cost=plan.total_cost,
        binding=plan.binding,
        usage=plan.usage,
        capacity=plan.capacity,
        mip_gap=plan.mip_gap,
        solve_seconds=solve,
        analyzer_seconds=prepared.analyzer_seconds,
        sizings=prepared.sizings,
        solves=plan.solves,
    )


def served_by_priority(plan: Plan, variants: Sequence[VariantInput]) -> dict[int, float]:
    """Served load (req/min) per priority, and its priority-weighted total under key 0."""
    by_key = {v.key: v for v in variants}
    out: dict[int, float] = {}
    weighted = 0.0
    for key, decision in plan.decisions.items():
        priority = by_key[key].priority
        out[priority] = out.get(priority, 0.0) + decision.served_rate
        weighted += priority_weight(priority) * decision.served_rate
    out[0] = weighted
    return dict(sorted(out.items()))


# --- unlimited mode (WVA) ------------------------------------------------------------------------------


def _choose_unlimited(
    variant: VariantInput,
    cset: CandidateSet,
    accelerators: Mapping[str, AcceleratorType],
) -> Decision:
    """WVA's ``SolveUnlimited`` for one variant: the candidate with the lowest transition penalty."""
    assert variant.load is not None
    options = cset.best_per_accelerator()
    if not options:
        return infeasible_decision(variant, accelerators, cset)
    now_acc = variant.current_accelerator or ""
    now_cost = current_cost(variant, accelerators)
    lam = variant.load.arrival_rate / 60.0

    def score(option: Candidate) -> tuple[bool, float, int, str]:
        replicas = option.replicas
        if variant.max_replicas is not None:
            replicas = min(replicas, variant.max_replicas)
        full = replicas * option.rate_per_replica >= lam * (1.0 - 1e-12) or option.replicas == replicas
        identity = option.accelerator if replicas > 0 else ""
        value = transition_penalty(
            current_accelerator=now_acc,
            current_replicas=variant.current_replicas,
            current_cost=now_cost,
            new_accelerator=identity,
            new_replicas=replicas,
            new_cost=replicas * option.cost_per_replica,
        )
        return (not full, value, -option.batch, option.accelerator)

    best = min(options, key=score)
    replicas = best.replicas if variant.max_replicas is None else min(best.replicas, variant.max_replicas)
    if replicas == 0:
        return decision_for(
            variant,
            best,
            0,
            served=0.0,
            outcome=Outcome.FULL,
            reason=f"no load and minReplicas {variant.min_replicas}: no replicas needed",
        )
    if has_no_load(variant.load):
        reason = f"no load: minReplicas {variant.min_replicas} on {best.accelerator} (batch {best.batch})"
        return decision_for(
            variant, best, replicas, served=0.0, outcome=Outcome.FULL, reason=with_rejections(reason, cset)
        )
    if replicas < best.replicas:
        served = replicas * best.rate_per_replica
        reason = (
            f"limited by maxReplicas {variant.max_replicas}: {replicas} of {best.replicas} replicas of "
            f"{best.accelerator} (batch {best.batch}) serve {served / lam:.0%} "
            f"of {rate_text(variant.load.arrival_rate)}"
        )
        return decision_for(
            variant,
            best,
            replicas,
            served=served,
            outcome=Outcome.PARTIAL,
            reason=with_rejections(reason, cset),
        )
    text = serve_text(variant, best, replicas, best.itl, best.ttft)
    if variant.keep_accelerator and variant.current_accelerator:
        reason = f"kept accelerator {best.accelerator}: {text}"
    else:
        choice = f"lowest cost plus transition penalty of {len(options)} feasible accelerator(s)"
        if now_acc and best.accelerator != now_acc:
            choice += f"; moves from {now_acc}"
        reason = f"{text}; {choice}"
    return decision_for(
        variant, best, replicas, served=lam, outcome=Outcome.FULL, reason=with_rejections(reason, cset)
    )


def _unlimited(
    prepared: Prepared,
    accelerators: Mapping[str, AcceleratorType],
    *,
    config: OptimizerConfig,
    sizer: Sizer,
    clock: Clock | None,
) -> Plan:
    by_key = {v.key: v for v in prepared.variants}
    decisions: dict[str, Decision] = {}
    for variant in prepared.variants:
        if variant.load is None:
            decisions[variant.key] = held_decision(variant, accelerators)
        elif variant.key not in prepared.pool_of:
            decisions[variant.key] = _choose_unlimited(
                variant, prepared.candidates[variant.key], accelerators
            )
        elif not prepared.candidates[variant.key].candidates:
            decisions[variant.key] = infeasible_decision(
                variant, accelerators, prepared.candidates[variant.key]
            )
    units, pools = pool_units(prepared, by_key)
    status, gap, solves = "direct", None, 0
    if units:
        result = solve_allocation(
            units,
            None,
            allow_partial=True,
            presence_hard=True,
            gap=config.mip_rel_gap,
            time_limit=config.time_limit_s,
            clock=clock,
        )
        status, gap, solves = result.status, result.gap, result.solves
        for key, unit_result in result.units.items():
            pool_decisions(
                pools[key],
                unit_result,
                by_key=by_key,
                prepared=prepared,
                accelerators=accelerators,
                sizer=sizer,
                decisions=decisions,
            )
    ordered = {k: decisions[k] for k in sorted(decisions)}
    return Plan(
        decisions=ordered,
        mode="unlimited",
        status=status,
        total_cost=sum(d.cost for d in ordered.values()),
        usage=device_usage(ordered, by_key, accelerators),
        mip_gap=gap,
        solves=solves,
    )
