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
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from variant_autoscaler.core.analyzer import Load, size_allocation
from variant_autoscaler.core.candidates import Candidate, CandidateSet, Sizer, batched, build_candidate_sets
from variant_autoscaler.core.milp import MemberResult, MilpMember, MilpUnit, UnitResult, solve_allocation
from variant_autoscaler.core.model import (
    AcceleratorType,
    BindingConstraint,
    Decision,
    OptimizerConfig,
    Outcome,
    Plan,
    SaturationPolicy,
    VariantInput,
    priority_weight,
)
from variant_autoscaler.core.penalty import current_cost, transition_penalty
from variant_autoscaler.errors import ConfigError, InfeasibleError, ModelError

__all__ = ["Prepared", "optimize", "prepare", "served_by_priority"]

Clock = Callable[[], float]


# --- preparation: pools and candidates ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pool:
    """Opted-in variants of one model sharing its load."""

    model_id: str
    members: tuple[str, ...]
    load: Load
    priority: int

    @property
    def key(self) -> str:
        return f"pool:{self.model_id}"


@dataclass(frozen=True, slots=True)
class Prepared:
    """Variants sorted by key, their candidate sets (variants with load only) and the pools."""

    variants: tuple[VariantInput, ...]
    candidates: Mapping[str, CandidateSet]
    pools: tuple[Pool, ...]
    pool_of: Mapping[str, Pool]
    analyzer_seconds: float | None
    sizings: int


def _has_no_load(load: Load) -> bool:
    return load.arrival_rate == 0.0 or load.avg_output_tokens == 0.0


def _pools(variants: Sequence[VariantInput]) -> tuple[Pool, ...]:
    groups: dict[str, list[VariantInput]] = {}
    for variant in variants:
        if variant.share_load and variant.load is not None:
            groups.setdefault(variant.model_id, []).append(variant)
    pools: list[Pool] = []
    for model_id in sorted(groups):
        members = groups[model_id]
        total = sum(v.load.arrival_rate for v in members if v.load is not None)
        if len(members) < 2 or total <= 0.0:
            continue
        loads = [v.load for v in members if v.load is not None]
        pooled = Load(
            arrival_rate=total,
            avg_input_tokens=sum(ld.arrival_rate * ld.avg_input_tokens for ld in loads) / total,
            avg_output_tokens=sum(ld.arrival_rate * ld.avg_output_tokens for ld in loads) / total,
        )
        if pooled.avg_output_tokens == 0.0:
            continue
        pools.append(Pool(model_id, tuple(v.key for v in members), pooled, min(v.priority for v in members)))
    return tuple(pools)


def prepare(
    variants: Sequence[VariantInput],
    accelerators: Mapping[str, AcceleratorType],
    config: OptimizerConfig,
    *,
    sizer: Sizer = size_allocation,
    clock: Clock | None = None,
) -> Prepared:
    """Sort the variants, form the pools and size every candidate (the analyzer's share of the work)."""
    ordered = tuple(sorted(variants, key=lambda v: v.key))
    for first, second in itertools.pairwise(ordered):
        if first.key == second.key:
            raise ConfigError(f"variant {first.key} is listed twice")
    pools = _pools(ordered)
    pool_of = {key: pool for pool in pools for key in pool.members}
    started = clock() if clock is not None else None
    candidates: dict[str, CandidateSet] = {}
    sizings = 0
    # Every candidate of every variant is sized in one batch (the analyzer's vectorised path).
    jobs = [(v, pool_of[v.key].load if v.key in pool_of else None) for v in ordered if v.load is not None]
    batch = batched(sizer)
    for cset in build_candidate_sets(jobs, accelerators, batch_count=config.batch_sizes, sizer=batch):
        candidates[cset.key] = cset
        sizings += cset.sizings
    seconds = None if clock is None or started is None else clock() - started
    return Prepared(ordered, candidates, pools, pool_of, seconds, sizings)


# --- wording ---------------------------------------------------------------------------------------------


def _ms(value: float) -> str:
    return f"{value:.1f} ms" if value < 100 else f"{value:.0f} ms"


def _rate(rpm: float) -> str:
    return f"{rpm:.4g} req/min"


def _slo_text(variant: VariantInput) -> str:
    return variant.service.slo.describe() or "no SLO"


def _replicas(count: int) -> str:
    return f"{count} replica" if count == 1 else f"{count} replicas"


def _with_rejections(reason: str, cset: CandidateSet | None) -> str:
    if cset is None:
        return reason
    summary = cset.rejection_summary()
    return f"{reason}; not used: {summary}" if summary else reason


# --- decisions ------------------------------------------------------------------------------------------


def _unit_cost(variant: VariantInput, accelerators: Mapping[str, AcceleratorType], name: str) -> float:
    accelerator = accelerators.get(name)
    if accelerator is None:
        return 0.0
    profile = variant.profile(name)
    return accelerator.cost * (profile.acc_count if profile is not None else 1)


def _current_units(
    variant: VariantInput, accelerators: Mapping[str, AcceleratorType]
) -> tuple[str, int] | None:
    """Device type and devices held by the current allocation, when known."""
    if not variant.current_accelerator or variant.current_replicas <= 0:
        return None
    accelerator = accelerators.get(variant.current_accelerator)
    if accelerator is None:
        return None
    profile = variant.profile(variant.current_accelerator)
    per_replica = (profile.acc_count if profile is not None else 1) * accelerator.multiplicity
    return accelerator.device, variant.current_replicas * per_replica


def _keep_current(
    variant: VariantInput,
    accelerators: Mapping[str, AcceleratorType],
    outcome: Outcome,
    reason: str,
) -> Decision:
    accelerator = variant.current_accelerator or None
    replicas = variant.current_replicas if accelerator is not None else 0
    profile = variant.profile(accelerator) if accelerator is not None else None
    batch = variant.max_batch_size or (profile.max_batch_size if profile is not None else 0)
    cost = replicas * _unit_cost(variant, accelerators, accelerator) if accelerator is not None else 0.0
    demand = variant.load.arrival_rate if variant.load is not None else 0.0
    return Decision(
        key=variant.key,
        accelerator=accelerator,
        replicas=replicas,
        max_batch=batch if replicas else 0,
        cost=cost,
        itl=0.0,
        ttft=0.0,
        outcome=outcome,
        reason=reason,
        served_rate=0.0,
        demand=demand,
    )


def _held(variant: VariantInput, accelerators: Mapping[str, AcceleratorType]) -> Decision:
    current = (
        f"{_replicas(variant.current_replicas)} on {variant.current_accelerator}"
        if variant.current_accelerator
        else _replicas(variant.current_replicas)
    )
    return _keep_current(
        variant, accelerators, Outcome.HELD, f"no load metrics: keeping the current allocation ({current})"
    )


def _infeasible(
    variant: VariantInput, accelerators: Mapping[str, AcceleratorType], cset: CandidateSet
) -> Decision:
    summary = cset.rejection_summary(limit=6) or "the model profile lists no accelerator"
    keep = (
        f"; keeping {_replicas(variant.current_replicas)} on {variant.current_accelerator}"
        if variant.current_accelerator
        else ""
    )
    return _keep_current(
        variant,
        accelerators,
        Outcome.INFEASIBLE,
        f"no accelerator meets {_slo_text(variant)}: {summary}{keep}",
    )


def _predict(
    variant: VariantInput,
    option: Candidate,
    *,
    replicas: int,
    served_rps: float,
    load: Load,
    accelerators: Mapping[str, AcceleratorType],
    sizer: Sizer,
) -> tuple[float, float]:
    """Predicted ITL/TTFT of ``replicas`` replicas of ``option`` sharing ``served_rps`` req/s."""
    profile = variant.profile(option.accelerator)
    accelerator = accelerators.get(option.accelerator)
    if profile is None or accelerator is None or replicas <= 0:
        return option.itl, option.ttft
    share = Load(served_rps * 60.0 * (1.0 - 1e-9), load.avg_input_tokens, load.avg_output_tokens)
    try:
        sizing = sizer(
            accelerator=option.accelerator,
            unit_cost=accelerator.cost,
            acc_count=profile.acc_count,
            parms=profile.parms,
            max_batch_size=option.batch,
            load=share,
            slo=variant.service.slo,
            min_replicas=replicas,
        )
    except (InfeasibleError, ModelError):
        return option.itl, option.ttft
    return sizing.itl, sizing.ttft


def _decision(
    variant: VariantInput,
    option: Candidate,
    replicas: int,
    *,
    served: float,
    outcome: Outcome,
    reason: str,
    itl: float | None = None,
    ttft: float | None = None,
) -> Decision:
    demand = variant.load.arrival_rate if variant.load is not None else 0.0
    if replicas <= 0:
        return Decision(variant.key, None, 0, 0, 0.0, 0.0, 0.0, outcome, reason, 0.0, demand)
    return Decision(
        key=variant.key,
        accelerator=option.accelerator,
        replicas=replicas,
        max_batch=option.batch,
        cost=replicas * option.cost_per_replica,
        itl=option.itl if itl is None else itl,
        ttft=option.ttft if ttft is None else ttft,
        outcome=outcome,
        reason=reason,
        served_rate=served * 60.0,
        demand=demand,
    )


def _serve_text(variant: VariantInput, option: Candidate, replicas: int, itl: float, ttft: float) -> str:
    assert variant.load is not None
    return (
        f"{_replicas(replicas)} of {option.accelerator} (batch {option.batch}) serve "
        f"{_rate(variant.load.arrival_rate)} within {_slo_text(variant)} {_predicted(variant, itl, ttft)}"
    )


def _predicted(variant: VariantInput, itl: float, ttft: float) -> str:
    # The predictions are means; say so where the TTFT target is a percentile.
    mean = "mean " if variant.service.slo.ttft_percentile > 0 else ""
    return f"(predicted ITL {_ms(itl)}, {mean}TTFT {_ms(ttft)})"


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
        return _infeasible(variant, accelerators, cset)
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
        return _decision(
            variant,
            best,
            0,
            served=0.0,
            outcome=Outcome.FULL,
            reason=f"no load and minReplicas {variant.min_replicas}: no replicas needed",
        )
    if _has_no_load(variant.load):
        reason = f"no load: minReplicas {variant.min_replicas} on {best.accelerator} (batch {best.batch})"
        return _decision(
            variant, best, replicas, served=0.0, outcome=Outcome.FULL, reason=_with_rejections(reason, cset)
        )
    if replicas < best.replicas:
        served = replicas * best.rate_per_replica
        reason = (
            f"limited by maxReplicas {variant.max_replicas}: {replicas} of {best.replicas} replicas of "
            f"{best.accelerator} (batch {best.batch}) serve {served / lam:.0%} "
            f"of {_rate(variant.load.arrival_rate)}"
        )
        return _decision(
            variant,
            best,
            replicas,
            served=served,
            outcome=Outcome.PARTIAL,
            reason=_with_rejections(reason, cset),
        )
    text = _serve_text(variant, best, replicas, best.itl, best.ttft)
    if variant.keep_accelerator and variant.current_accelerator:
        reason = f"kept accelerator {best.accelerator}: {text}"
    else:
        choice = f"lowest cost plus transition penalty of {len(options)} feasible accelerator(s)"
        if now_acc and best.accelerator != now_acc:
            choice += f"; moves from {now_acc}"
        reason = f"{text}; {choice}"
    return _decision(
        variant, best, replicas, served=lam, outcome=Outcome.FULL, reason=_with_rejections(reason, cset)
    )


# --- limited mode and pools --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Assignment:
    """What the solver (or the fast path, or the presence fill) gave one variant."""

    option: Candidate | None
    replicas: int
    served: float  # req/s
    full: bool


def _member(variant: VariantInput, options: tuple[Candidate, ...]) -> MilpMember:
    return MilpMember(variant.key, options, variant.min_replicas, variant.max_replicas)


def _capped(variant: VariantInput, option: Candidate) -> int:
    return option.replicas if variant.max_replicas is None else min(option.replicas, variant.max_replicas)


def _fast_path(
    units: Sequence[MilpUnit], variants: Mapping[str, VariantInput], free: Mapping[str, int]
) -> dict[str, _Assignment] | None:
    """Each variant's best option (most load served, then cheapest) when all of them fit; else None."""
    chosen: dict[str, _Assignment] = {}
    need: dict[str, int] = {}
    for unit in units:
        if unit.pooled:
            return None
        (member,) = unit.members
        variant = variants[member.key]

        def key(
            option: Candidate, variant: VariantInput = variant, unit: MilpUnit = unit
        ) -> tuple[float, ...]:
            replicas = _capped(variant, option)
            served = min(unit.demand, replicas * option.rate_per_replica)
            return (-served, replicas * option.cost_per_replica, -option.rate_per_replica)

        best = min(member.options, key=lambda o: (key(o), o.accelerator))
        replicas = _capped(variant, best)
        need[best.device] = need.get(best.device, 0) + replicas * best.units_per_replica
        chosen[member.key] = _Assignment(
            best, replicas, min(unit.demand, replicas * best.rate_per_replica), replicas == best.replicas
        )
    if any(need[device] > free.get(device, 0) for device in need):
        return None
    return chosen


def _spread(
    assignments: dict[str, _Assignment],
    variants: Mapping[str, VariantInput],
    options: Mapping[str, tuple[Candidate, ...]],
    policy: SaturationPolicy,
) -> None:
    """Round-robin policies: even out partial allocations where that loses no load and adds no cost.

    Moves one replica at a time from a partially served variant with the most replicas to one with at
    least two fewer (or none) on the same device type, when the receiver serves at least as much
    priority-weighted load per replica, costs no more per replica and occupies as many devices.
    """
    groups: dict[int, list[str]] = {}
    for key in sorted(assignments):
        if not assignments[key].full:
            group = variants[key].priority if policy is SaturationPolicy.PRIORITY_ROUND_ROBIN else 0
            groups.setdefault(group, []).append(key)

    def receiving_option(receiver: str, donor: Candidate) -> Candidate | None:
        current = assignments[receiver].option
        if current is not None:
            return current
        if variants[receiver].min_replicas > 1:
            return None
        return next((o for o in options[receiver] if o.device == donor.device), None)

    for members in groups.values():
        budget = sum(assignments[k].replicas for k in members)
        for _ in range(budget):
            donors = sorted(members, key=lambda k: (-assignments[k].replicas, k))
            receivers = sorted(members, key=lambda k: (assignments[k].replicas, k))
            moved = False
            for donor in donors:
                d = assignments[donor]
                if d.option is None or d.replicas <= max(variants[donor].min_replicas, 1):
                    continue
                d_value = priority_weight(variants[donor].priority) * d.option.rate_per_replica
                for receiver in receivers:
                    r = assignments[receiver]
                    if r.replicas + 2 > d.replicas:
                        break  # receivers are sorted by replicas: none further can take one
                    option = None if receiver == donor else receiving_option(receiver, d.option)
                    if (
                        option is None
                        or option.device != d.option.device
                        or option.units_per_replica != d.option.units_per_replica
                        or option.cost_per_replica > d.option.cost_per_replica
                        or r.replicas + 1 >= _capped(variants[receiver], option)
                        or priority_weight(variants[receiver].priority) * option.rate_per_replica
                        < d_value * (1 - 1e-9)
                    ):
                        continue
                    assignments[donor] = _Assignment(
                        d.option, d.replicas - 1, (d.replicas - 1) * d.option.rate_per_replica, False
                    )
                    assignments[receiver] = _Assignment(
                        option, r.replicas + 1, (r.replicas + 1) * option.rate_per_replica, False
                    )
                    moved = True
                    break
                if moved:
                    break
            if not moved:
                break


def _usage(assignments: Mapping[str, _Assignment]) -> dict[str, int]:
    used: dict[str, int] = {}
    for a in assignments.values():
        if a.option is not None and a.replicas > 0:
            used[a.option.device] = used.get(a.option.device, 0) + a.replicas * a.option.units_per_replica
    return used


def _binding(
    capacity: Mapping[str, int],
    used: Mapping[str, int],
    limited: Mapping[str, Sequence[tuple[Candidate, int]]],
) -> tuple[BindingConstraint, ...]:
    """Device types whose remaining capacity cannot hold what a limited variant wanted there.

    ``limited`` maps each variant that got less than it wanted (less load served, or a dearer
    accelerator) to the options it wanted and the devices each would have needed.
    """
    hit: dict[str, set[str]] = {}
    for key, wanted in limited.items():
        for option, needed in wanted:
            free = capacity.get(option.device, 0) - used.get(option.device, 0)
            if free < needed:
                hit.setdefault(option.device, set()).add(key)
    return tuple(
        BindingConstraint(device, capacity.get(device, 0), used.get(device, 0), tuple(sorted(hit[device])))
        for device in sorted(hit)
    )


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
        plan = _limited(
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


def _pool_units(
    prepared: Prepared, by_key: Mapping[str, VariantInput]
) -> tuple[list[MilpUnit], dict[str, Pool]]:
    units: list[MilpUnit] = []
    pools: dict[str, Pool] = {}
    for pool in prepared.pools:
        members = tuple(
            _member(by_key[k], prepared.candidates[k].best_per_accelerator())
            for k in pool.members
            if prepared.candidates[k].candidates
        )
        if not members:
            continue
        units.append(
            MilpUnit(
                pool.key, members, pool.load.arrival_rate / 60.0, priority_weight(pool.priority), pooled=True
            )
        )
        pools[pool.key] = pool
    return units, pools


def _pool_decisions(
    pool: Pool,
    result: UnitResult,
    *,
    by_key: Mapping[str, VariantInput],
    prepared: Prepared,
    accelerators: Mapping[str, AcceleratorType],
    sizer: Sizer,
    decisions: dict[str, Decision],
) -> None:
    running = [m for m in result.members if m.option is not None and m.replicas > 0]
    total_rate = sum(m.replicas * m.option.rate_per_replica for m in running if m.option is not None)
    demand = pool.load.arrival_rate / 60.0
    full = result.served >= demand * (1.0 - 1e-9)
    names = ", ".join(sorted(m.key for m in running)) or "none"
    for member in result.members:
        variant = by_key[member.key]
        cset = prepared.candidates[member.key]
        if member.option is None or member.replicas <= 0:
            decisions[member.key] = Decision(
                member.key,
                None,
                0,
                0,
                0.0,
                0.0,
                0.0,
                Outcome.FULL if full else Outcome.UNSERVED,
                f"shares {pool.model_id}'s load ({_rate(pool.load.arrival_rate)}) with {names}; "
                + ("not needed: the others serve it at lower cost" if full else "no capacity left for it"),
                0.0,
                variant.load.arrival_rate if variant.load is not None else 0.0,
            )
            continue
        option = member.option
        share = (
            result.served * (member.replicas * option.rate_per_replica) / total_rate if total_rate else 0.0
        )
        itl, ttft = _predict(
            variant,
            option,
            replicas=member.replicas,
            served_rps=share,
            load=pool.load,
            accelerators=accelerators,
            sizer=sizer,
        )
        reason = (
            f"shares {pool.model_id}'s load ({_rate(pool.load.arrival_rate)}) with {names}: "
            f"{_replicas(member.replicas)} of {option.accelerator} (batch {option.batch}) take "
            f"{_rate(share * 60.0)} within {_slo_text(variant)} {_predicted(variant, itl, ttft)}"
        )
        if not full:
            reason += f"; the model's load is only {result.served / demand:.0%} served"
        decisions[member.key] = Decision(
            member.key,
            option.accelerator,
            member.replicas,
            option.batch,
            member.replicas * option.cost_per_replica,
            itl,
            ttft,
            Outcome.FULL if full else Outcome.PARTIAL,
            _with_rejections(reason, cset),
            share * 60.0,
            variant.load.arrival_rate if variant.load is not None else 0.0,
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
            decisions[variant.key] = _held(variant, accelerators)
        elif variant.key not in prepared.pool_of:
            decisions[variant.key] = _choose_unlimited(
                variant, prepared.candidates[variant.key], accelerators
            )
        elif not prepared.candidates[variant.key].candidates:
            decisions[variant.key] = _infeasible(variant, accelerators, prepared.candidates[variant.key])
    units, pools = _pool_units(prepared, by_key)
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
            _pool_decisions(
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
        usage=_device_usage(ordered, by_key, accelerators),
        mip_gap=gap,
        solves=solves,
    )


def _device_usage(
    decisions: Mapping[str, Decision],
    by_key: Mapping[str, VariantInput],
    accelerators: Mapping[str, AcceleratorType],
) -> dict[str, int]:
    used: dict[str, int] = {}
    for key, decision in decisions.items():
        if decision.accelerator is None or decision.replicas <= 0:
            continue
        accelerator = accelerators.get(decision.accelerator)
        if accelerator is None:
            continue
        profile = by_key[key].profile(decision.accelerator)
        units = (profile.acc_count if profile is not None else 1) * accelerator.multiplicity
        used[accelerator.device] = used.get(accelerator.device, 0) + decision.replicas * units
    return dict(sorted(used.items()))


def _limited(
    prepared: Prepared,
    accelerators: Mapping[str, AcceleratorType],
    *,
    config: OptimizerConfig,
    capacity: dict[str, int],
    sizer: Sizer,
    clock: Clock | None,
) -> Plan:
    by_key = {v.key: v for v in prepared.variants}
    policy = config.saturation_policy
    decisions: dict[str, Decision] = {}
    reserved: dict[str, int] = {}
    reserved_by: dict[str, list[str]] = {}
    presence: list[str] = []  # variants that need only their minimum replicas (no load)
    units: list[MilpUnit] = []
    for variant in prepared.variants:
        if variant.load is None:
            decision = _held(variant, accelerators)
        elif variant.key in prepared.pool_of:
            continue
        elif not prepared.candidates[variant.key].candidates:
            decision = _infeasible(variant, accelerators, prepared.candidates[variant.key])
        elif _has_no_load(variant.load):
            if variant.min_replicas == 0:
                decisions[variant.key] = _decision(
                    variant,
                    prepared.candidates[variant.key].candidates[0],
                    0,
                    served=0.0,
                    outcome=Outcome.FULL,
                    reason="no load and minReplicas 0: no replicas needed",
                )
            else:
                presence.append(variant.key)
            continue
        else:
            units.append(
                MilpUnit(
                    variant.key,
                    (_member(variant, prepared.candidates[variant.key].best_per_accelerator()),),
                    variant.load.arrival_rate / 60.0,
                    priority_weight(variant.priority),
                )
            )
            continue
        decisions[variant.key] = decision
        held = _current_units(variant, accelerators)
        if held is not None:
            reserved[held[0]] = reserved.get(held[0], 0) + held[1]
            reserved_by.setdefault(held[0], []).append(variant.key)
    pool_units, pools = _pool_units(prepared, by_key)
    for pool in prepared.pools:
        for key in pool.members:
            if not prepared.candidates[key].candidates:
                decisions[key] = _infeasible(by_key[key], accelerators, prepared.candidates[key])
                held = _current_units(by_key[key], accelerators)
                if held is not None:
                    reserved[held[0]] = reserved.get(held[0], 0) + held[1]
                    reserved_by.setdefault(held[0], []).append(key)
    units.extend(pool_units)
    free = {device: max(capacity.get(device, 0) - reserved.get(device, 0), 0) for device in capacity}

    status, gap, solves = "direct", None, 0
    assignments: dict[str, _Assignment] = {}
    pool_results: dict[str, UnitResult] = {}
    fast = _fast_path(units, by_key, free)
    if fast is not None:
        assignments = fast
    elif units:
        result = solve_allocation(
            units,
            free,
            allow_partial=policy.allows_partial,
            presence_hard=False,
            gap=config.mip_rel_gap,
            time_limit=config.time_limit_s,
            clock=clock,
        )
        status, gap, solves = result.status, result.gap, result.solves
        for unit in units:
            unit_result = result.units[unit.key]
            if unit.pooled:
                pool_results[unit.key] = unit_result
                continue
            (picked,) = unit_result.members
            assignments[picked.key] = _Assignment(
                picked.option, picked.replicas, unit_result.served, picked.full
            )
    options = {u.members[0].key: u.members[0].options for u in units if not u.pooled}
    if policy.spreads:
        _spread(assignments, by_key, options, policy)

    # Devices in use so far, then the presence fill (no-load variants, idle pool members).
    used = dict(reserved)
    for device, count in _usage(assignments).items():
        used[device] = used.get(device, 0) + count
    for unit_result in pool_results.values():
        for m in unit_result.members:
            if m.option is not None and m.replicas > 0:
                used[m.option.device] = used.get(m.option.device, 0) + m.replicas * m.option.units_per_replica
    wants: list[str] = list(presence)
    for unit_result in pool_results.values():
        wants.extend(
            m.key
            for m in unit_result.members
            if (m.option is None or m.replicas == 0) and by_key[m.key].min_replicas >= 1
        )
    filled: dict[str, MemberResult] = {}
    for key in sorted(wants, key=lambda k: (by_key[k].priority, k)):
        variant = by_key[key]
        minimum = max(variant.min_replicas, 1)
        fits = [
            o
            for o in prepared.candidates[key].best_per_accelerator()
            if capacity.get(o.device, 0) - used.get(o.device, 0) >= minimum * o.units_per_replica
        ]
        if fits:
            option = min(fits, key=lambda o: (minimum * o.cost_per_replica, o.accelerator))
            used[option.device] = used.get(option.device, 0) + minimum * option.units_per_replica
            filled[key] = MemberResult(key, option, minimum, True)

    # Decisions.
    limited: dict[str, list[tuple[Candidate, int]]] = {}

    def one_more(options_: Sequence[Candidate]) -> list[tuple[Candidate, int]]:
        return [(o, o.units_per_replica) for o in options_]

    for unit in units:
        if unit.pooled:
            continue
        (member,) = unit.members
        variant = by_key[member.key]
        assert variant.load is not None
        cset = prepared.candidates[member.key]
        a = assignments[member.key]
        cheapest = min(
            member.options, key=lambda o: (_capped(variant, o) * o.cost_per_replica, o.accelerator)
        )
        if a.option is None or a.replicas <= 0:
            limited[member.key] = (
                one_more(member.options)
                if policy.allows_partial
                else [(o, _capped(variant, o) * o.units_per_replica) for o in member.options]
            )
            decisions[member.key] = _decision(
                variant,
                cheapest,
                0,
                served=0.0,
                outcome=Outcome.UNSERVED,
                reason=_with_rejections(
                    _unserved_reason(variant, member.options, capacity, used, policy), cset
                ),
            )
            continue
        option = a.option
        needed = option.replicas
        if a.full and a.replicas == needed:
            text = _serve_text(variant, option, a.replicas, option.itl, option.ttft)
            if (
                option.accelerator == cheapest.accelerator
                or a.replicas * option.cost_per_replica <= cheapest.cost
            ):
                reason = f"{text}; cheapest feasible accelerator"
            else:
                limited[member.key] = [(cheapest, _capped(variant, cheapest) * cheapest.units_per_replica)]
                reason = (
                    f"{text}; cheaper {cheapest.accelerator} not used: {cheapest.device} capacity is taken "
                    f"({_free_text(cheapest.device, capacity, used)})"
                )
            decisions[member.key] = _decision(
                variant,
                option,
                a.replicas,
                served=a.served,
                outcome=Outcome.FULL,
                reason=_with_rejections(reason, cset),
            )
            continue
        itl, ttft = _predict(
            variant,
            option,
            replicas=a.replicas,
            served_rps=a.served,
            load=variant.load,
            accelerators=accelerators,
            sizer=sizer,
        )
        share = a.served / (variant.load.arrival_rate / 60.0)
        if variant.max_replicas is not None and a.replicas >= variant.max_replicas:
            reason = (
                f"limited by maxReplicas {variant.max_replicas}: {a.replicas} of {needed} replicas of "
                f"{option.accelerator} (batch {option.batch}) serve {share:.0%} "
                f"of {_rate(variant.load.arrival_rate)}"
            )
        else:
            limited[member.key] = one_more((option,))
            reason = (
                f"limited by {option.device} capacity: {a.replicas} of {needed} replicas "
                f"of {option.accelerator} "
                f"(batch {option.batch}) serve {share:.0%} of {_rate(variant.load.arrival_rate)} within "
                f"{_slo_text(variant)}; the rest is not served"
            )
        decisions[member.key] = _decision(
            variant,
            option,
            a.replicas,
            served=a.served,
            outcome=Outcome.PARTIAL,
            reason=_with_rejections(reason, cset),
            itl=itl,
            ttft=ttft,
        )
    for key, unit_result in pool_results.items():
        members = tuple(filled.get(m.key, m) for m in unit_result.members)
        _pool_decisions(
            pools[key],
            UnitResult(key, unit_result.served, members),
            by_key=by_key,
            prepared=prepared,
            accelerators=accelerators,
            sizer=sizer,
            decisions=decisions,
        )
        if unit_result.served < pools[key].load.arrival_rate / 60.0 * (1 - 1e-9):
            for m in members:
                limited[m.key] = one_more(prepared.candidates[m.key].best_per_accelerator())
    for key in presence:
        variant = by_key[key]
        member_result = filled.get(key)
        cset = prepared.candidates[key]
        if member_result is None or member_result.option is None:
            options_ = cset.best_per_accelerator()
            limited[key] = [(o, max(variant.min_replicas, 1) * o.units_per_replica) for o in options_]
            decisions[key] = _decision(
                variant,
                options_[0],
                0,
                served=0.0,
                outcome=Outcome.UNSERVED,
                reason="no load, but no capacity left for its minimum of "
                f"{_replicas(max(variant.min_replicas, 1))}",
            )
        else:
            option = member_result.option
            decisions[key] = _decision(
                variant,
                option,
                member_result.replicas,
                served=0.0,
                outcome=Outcome.FULL,
                reason=_with_rejections(
                    f"no load: minReplicas {variant.min_replicas} on {option.accelerator} "
                    f"(batch {option.batch})",
                    cset,
                ),
            )
    for device, keys in reserved_by.items():
        if reserved.get(device, 0) > capacity.get(device, 0):
            for key in keys:
                limited.setdefault(key, [])
    ordered = {k: decisions[k] for k in sorted(decisions)}
    usage = _device_usage(ordered, by_key, accelerators)
    binding = _binding(capacity, usage, limited)
    overcommitted = [
        BindingConstraint(
            device, capacity.get(device, 0), usage.get(device, 0), tuple(sorted(reserved_by[device]))
        )
        for device in sorted(reserved_by)
        if reserved.get(device, 0) > capacity.get(device, 0) and device not in {b.device for b in binding}
    ]
    return Plan(
        decisions=ordered,
        mode="limited",
        status=status,
        total_cost=sum(d.cost for d in ordered.values()),
        binding=tuple(sorted((*binding, *overcommitted), key=lambda b: b.device)),
        usage=usage,
        capacity=dict(sorted(capacity.items())),
        mip_gap=gap,
        solves=solves,
    )


def _free_text(device: str, capacity: Mapping[str, int], used: Mapping[str, int]) -> str:
    total = capacity.get(device, 0)
    return f"{max(total - used.get(device, 0), 0)} of {total} free"


def _unserved_reason(
    variant: VariantInput,
    options: tuple[Candidate, ...],
    capacity: Mapping[str, int],
    used: Mapping[str, int],
    policy: SaturationPolicy,
) -> str:
    ranked = sorted(options, key=lambda o: (_capped(variant, o) * o.cost_per_replica, o.accelerator))
    needs = [
        f"{_capped(variant, o)} × {o.accelerator} ({o.device}: {_free_text(o.device, capacity, used)})"
        for o in ranked[:4]
    ]
    text = (
        f"no capacity left for it: serving its load needs {' or '.join(needs)}; "
        "higher-priority or more efficiently served variants use that capacity"
    )
    if not policy.allows_partial:
        text += "; saturation policy None allocates no partial replicas"
    return text


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
