"""Limited mode: the GPU inventory counts.

One MILP (:mod:`variant_autoscaler.core.milp`) over every variant with load serves as much
priority-weighted load as the free capacity allows, then at least cost; the saturation policy decides
whether and how variants that cannot be fully served get partial allocations. :func:`plan_limited`
runs these steps in order, sharing what they record in one :class:`_Books`:

1. :func:`_set_aside`: variants that are not re-planned (no metrics, no feasible accelerator) keep
   their allocation and its devices; variants with no load wait for the presence fill;
2. :func:`_units`: one MILP unit per variant with load, one per pool of variants sharing a model's load;
3. :func:`_solve`: every variant's best option when all of them fit (no solver), else the MILP;
4. :func:`_spread` (round-robin policies): evens out partial allocations;
5. :func:`_fill_presence`: variants with no load and idle pool members get their minimum replicas
   where capacity is left;
6. the decisions with their reasons (:func:`_single_outcomes`, :func:`_pool_outcomes`,
   :func:`_presence_outcomes`), then the binding constraints (:func:`_binding`, :func:`_overcommitted`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from variant_autoscaler.core.candidates import Candidate, Sizer
from variant_autoscaler.core.explain import (
    current_units,
    decision_for,
    device_usage,
    held_decision,
    infeasible_decision,
    pool_decisions,
    predict,
    rate_text,
    replicas_text,
    serve_text,
    slo_text,
    with_rejections,
)
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
from variant_autoscaler.core.preparation import Clock, Pool, Prepared, has_no_load, milp_member, pool_units

__all__ = ["plan_limited"]

#: The options a variant wanted but did not get, each with the devices it would have needed.
_Wanted = list[tuple[Candidate, int]]


@dataclass(frozen=True, slots=True)
class _Context:
    """What every step reads and none changes."""

    prepared: Prepared
    by_key: Mapping[str, VariantInput]
    accelerators: Mapping[str, AcceleratorType]
    capacity: Mapping[str, int]
    policy: SaturationPolicy
    sizer: Sizer


@dataclass(slots=True)
class _Books:
    """What the steps record as they go."""

    decisions: dict[str, Decision] = field(default_factory=dict)
    # Devices held by variants that keep their allocation: not free for the MILP.
    reserved: dict[str, int] = field(default_factory=dict)
    reserved_by: dict[str, list[str]] = field(default_factory=dict)
    # Variants with no load that need only their minimum replicas (filled after the MILP).
    presence: list[str] = field(default_factory=list)
    # Variants that got less than they wanted (less load served, or a dearer accelerator): the binding
    # constraints are the device types that could not hold what they wanted.
    limited: dict[str, _Wanted] = field(default_factory=dict)

    def keep(self, decision: Decision, held: tuple[str, int] | None) -> None:
        """Record the decision of a variant that keeps its allocation, and reserve its devices."""
        self.decisions[decision.key] = decision
        if held is not None:
            device, count = held
            self.reserved[device] = self.reserved.get(device, 0) + count
            self.reserved_by.setdefault(device, []).append(decision.key)


@dataclass(frozen=True, slots=True)
class _Assignment:
    """What the solver (or the fast path, or the presence fill) gave one variant."""

    option: Candidate | None
    replicas: int
    served: float  # req/s
    full: bool


def _capped(variant: VariantInput, option: Candidate) -> int:
    return option.replicas if variant.max_replicas is None else min(option.replicas, variant.max_replicas)


def _one_more(options: Sequence[Candidate]) -> _Wanted:
    """One more replica of any of ``options``: what a partially served variant wants."""
    return [(o, o.units_per_replica) for o in options]


@dataclass(slots=True)
class _Solution:
    """What the fast path or the MILP gave: single variants' assignments and pools' unit results."""

    assignments: dict[str, _Assignment]
    pools: dict[str, UnitResult]
    status: str = "direct"
    gap: float | None = None
    solves: int = 0


def plan_limited(
    prepared: Prepared,
    accelerators: Mapping[str, AcceleratorType],
    *,
    config: OptimizerConfig,
    capacity: Mapping[str, int],
    sizer: Sizer,
    clock: Clock | None,
) -> Plan:
    """The limited-mode plan of ``prepared`` over ``capacity`` (devices per device type)."""
    by_key = {v.key: v for v in prepared.variants}
    ctx = _Context(prepared, by_key, accelerators, capacity, config.saturation_policy, sizer)
    books = _Books()
    planned = _set_aside(ctx, books)
    units, pools = _units(ctx, planned)
    free = {device: max(count - books.reserved.get(device, 0), 0) for device, count in capacity.items()}
    solution = _solve(ctx, units, free, config, clock)
    if ctx.policy.spreads:
        options = {u.members[0].key: u.members[0].options for u in units if not u.pooled}
        _spread(solution.assignments, by_key, options, ctx.policy)
    used = _in_use(books, solution)
    filled = _fill_presence(ctx, books, solution, used)
    _single_outcomes(ctx, books, units, solution.assignments, used)
    _pool_outcomes(ctx, books, pools, solution.pools, filled)
    _presence_outcomes(ctx, books, filled)
    ordered = {k: books.decisions[k] for k in sorted(books.decisions)}
    usage = device_usage(ordered, by_key, accelerators)
    binding = _binding(capacity, usage, books.limited)
    binding += _overcommitted(ctx, books, usage, binding)
    return Plan(
        decisions=ordered,
        mode="limited",
        status=solution.status,
        total_cost=sum(d.cost for d in ordered.values()),
        binding=tuple(sorted(binding, key=lambda b: b.device)),
        usage=usage,
        capacity=dict(sorted(capacity.items())),
        mip_gap=solution.gap,
        solves=solution.solves,
    )


# --- 1-3: set aside, units, solve --------------------------------------------------------------------------


def _set_aside(ctx: _Context, books: _Books) -> list[VariantInput]:
    """Decide the variants the MILP does not plan; return the single variants it plans, in key order."""
    planned: list[VariantInput] = []
    for variant in ctx.prepared.variants:
        if variant.load is None:
            books.keep(held_decision(variant, ctx.accelerators), current_units(variant, ctx.accelerators))
        elif variant.key in ctx.prepared.pool_of:
            continue  # planned with its pool
        elif not ctx.prepared.candidates[variant.key].candidates:
            cset = ctx.prepared.candidates[variant.key]
            books.keep(
                infeasible_decision(variant, ctx.accelerators, cset), current_units(variant, ctx.accelerators)
            )
        elif has_no_load(variant.load):
            if variant.min_replicas == 0:
                books.decisions[variant.key] = decision_for(
                    variant,
                    ctx.prepared.candidates[variant.key].candidates[0],
                    0,
                    served=0.0,
                    outcome=Outcome.FULL,
                    reason="no load and minReplicas 0: no replicas needed",
                )
            else:
                books.presence.append(variant.key)
        else:
            planned.append(variant)
    # A pool member without a feasible accelerator keeps its allocation; the others share the pool's unit.
    for pool in ctx.prepared.pools:
        for key in pool.members:
            cset = ctx.prepared.candidates[key]
            if not cset.candidates:
                variant = ctx.by_key[key]
                books.keep(
                    infeasible_decision(variant, ctx.accelerators, cset),
                    current_units(variant, ctx.accelerators),
                )
    return planned


def _units(ctx: _Context, planned: Sequence[VariantInput]) -> tuple[list[MilpUnit], dict[str, Pool]]:
    """One MILP unit per planned variant (its best candidate per accelerator), then one per pool."""
    units: list[MilpUnit] = []
    for variant in planned:
        assert variant.load is not None
        units.append(
            MilpUnit(
                variant.key,
                (milp_member(variant, ctx.prepared.candidates[variant.key].best_per_accelerator()),),
                variant.load.arrival_rate / 60.0,
                priority_weight(variant.priority),
            )
        )
    pooled, pools = pool_units(ctx.prepared, ctx.by_key)
    return [*units, *pooled], pools


def _solve(
    ctx: _Context,
    units: Sequence[MilpUnit],
    free: Mapping[str, int],
    config: OptimizerConfig,
    clock: Clock | None,
) -> _Solution:
    """The fast path when everything fits; otherwise the MILP over the free capacity."""
    fast = _fast_path(units, ctx.by_key, free)
    if fast is not None:
        return _Solution(fast, {})
    result = solve_allocation(
        units,
        free,
        allow_partial=ctx.policy.allows_partial,
        presence_hard=False,
        gap=config.mip_rel_gap,
        time_limit=config.time_limit_s,
        clock=clock,
    )
    solution = _Solution({}, {}, result.status, result.gap, result.solves)
    for unit in units:
        unit_result = result.units[unit.key]
        if unit.pooled:
            solution.pools[unit.key] = unit_result
            continue
        (picked,) = unit_result.members
        solution.assignments[picked.key] = _Assignment(
            picked.option, picked.replicas, unit_result.served, picked.full
        )
    return solution


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


# --- 4-5: spreading and the presence fill -----------------------------------------------------------------


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


def _in_use(books: _Books, solution: _Solution) -> dict[str, int]:
    """Devices taken before the presence fill: kept allocations, assignments and pools' replicas."""
    used = dict(books.reserved)
    for device, count in _usage(solution.assignments).items():
        used[device] = used.get(device, 0) + count
    for unit_result in solution.pools.values():
        for m in unit_result.members:
            if m.option is not None and m.replicas > 0:
                used[m.option.device] = used.get(m.option.device, 0) + m.replicas * m.option.units_per_replica
    return used


def _fill_presence(
    ctx: _Context, books: _Books, solution: _Solution, used: dict[str, int]
) -> dict[str, MemberResult]:
    """Minimum replicas for variants with no load and idle pool members, where capacity is left.

    In priority order, each on its cheapest accelerator with room; what it places is added to ``used``.
    """
    wants: list[str] = list(books.presence)
    for unit_result in solution.pools.values():
        wants.extend(
            m.key
            for m in unit_result.members
            if (m.option is None or m.replicas == 0) and ctx.by_key[m.key].min_replicas >= 1
        )
    filled: dict[str, MemberResult] = {}
    for key in sorted(wants, key=lambda k: (ctx.by_key[k].priority, k)):
        variant = ctx.by_key[key]
        minimum = max(variant.min_replicas, 1)
        fits = [
            o
            for o in ctx.prepared.candidates[key].best_per_accelerator()
            if ctx.capacity.get(o.device, 0) - used.get(o.device, 0) >= minimum * o.units_per_replica
        ]
        if fits:
            option = min(fits, key=lambda o: (minimum * o.cost_per_replica, o.accelerator))
            used[option.device] = used.get(option.device, 0) + minimum * option.units_per_replica
            filled[key] = MemberResult(key, option, minimum, True)
    return filled


# --- 6: decisions, reasons and binding constraints ------------------------------------------------------


def _single_outcomes(
    ctx: _Context,
    books: _Books,
    units: Sequence[MilpUnit],
    assignments: Mapping[str, _Assignment],
    used: Mapping[str, int],
) -> None:
    """Each single variant's decision: unserved, fully served, or partially served."""
    for unit in units:
        if unit.pooled:
            continue
        (member,) = unit.members
        variant = ctx.by_key[member.key]
        assignment = assignments[member.key]
        cheapest = min(
            member.options, key=lambda o: (_capped(variant, o) * o.cost_per_replica, o.accelerator)
        )
        option = assignment.option
        wanted: _Wanted | None
        if option is None or assignment.replicas <= 0:
            decision, wanted = _unserved(ctx, variant, member, cheapest, used)
        elif assignment.full and assignment.replicas == option.replicas:
            decision, wanted = _full(ctx, variant, option, assignment, cheapest=cheapest, used=used)
        else:
            decision, wanted = _partial(ctx, variant, option, assignment)
        books.decisions[member.key] = decision
        if wanted is not None:
            books.limited[member.key] = wanted


def _unserved(
    ctx: _Context,
    variant: VariantInput,
    member: MilpMember,
    cheapest: Candidate,
    used: Mapping[str, int],
) -> tuple[Decision, _Wanted]:
    # Under policy None only a full allocation would have helped; otherwise any one replica.
    wanted = (
        _one_more(member.options)
        if ctx.policy.allows_partial
        else [(o, _capped(variant, o) * o.units_per_replica) for o in member.options]
    )
    reason = _unserved_reason(variant, member.options, ctx.capacity, used, ctx.policy)
    decision = decision_for(
        variant,
        cheapest,
        0,
        served=0.0,
        outcome=Outcome.UNSERVED,
        reason=with_rejections(reason, ctx.prepared.candidates[variant.key]),
    )
    return decision, wanted


def _full(
    ctx: _Context,
    variant: VariantInput,
    option: Candidate,
    assignment: _Assignment,
    *,
    cheapest: Candidate,
    used: Mapping[str, int],
) -> tuple[Decision, _Wanted | None]:
    """Fully served; a variant moved off its cheapest accelerator wanted that one."""
    text = serve_text(variant, option, assignment.replicas, option.itl, option.ttft)
    wanted: _Wanted | None = None
    if (
        option.accelerator == cheapest.accelerator
        or assignment.replicas * option.cost_per_replica <= cheapest.cost
    ):
        reason = f"{text}; cheapest feasible accelerator"
    else:
        wanted = [(cheapest, _capped(variant, cheapest) * cheapest.units_per_replica)]
        reason = (
            f"{text}; cheaper {cheapest.accelerator} not used: {cheapest.device} capacity is taken "
            f"({_free_text(cheapest.device, ctx.capacity, used)})"
        )
    decision = decision_for(
        variant,
        option,
        assignment.replicas,
        served=assignment.served,
        outcome=Outcome.FULL,
        reason=with_rejections(reason, ctx.prepared.candidates[variant.key]),
    )
    return decision, wanted


def _partial(
    ctx: _Context, variant: VariantInput, option: Candidate, assignment: _Assignment
) -> tuple[Decision, _Wanted | None]:
    """Partially served, by maxReplicas (wants nothing more from capacity) or by capacity."""
    assert variant.load is not None
    replicas, needed = assignment.replicas, option.replicas
    itl, ttft = predict(
        variant,
        option,
        replicas=replicas,
        served_rps=assignment.served,
        load=variant.load,
        accelerators=ctx.accelerators,
        sizer=ctx.sizer,
    )
    share = assignment.served / (variant.load.arrival_rate / 60.0)
    wanted: _Wanted | None = None
    if variant.max_replicas is not None and replicas >= variant.max_replicas:
        reason = (
            f"limited by maxReplicas {variant.max_replicas}: {replicas} of {needed} replicas of "
            f"{option.accelerator} (batch {option.batch}) serve {share:.0%} "
            f"of {rate_text(variant.load.arrival_rate)}"
        )
    else:
        wanted = _one_more((option,))
        reason = (
            f"limited by {option.device} capacity: {replicas} of {needed} replicas "
            f"of {option.accelerator} "
            f"(batch {option.batch}) serve {share:.0%} of {rate_text(variant.load.arrival_rate)} within "
            f"{slo_text(variant)}; the rest is not served"
        )
    decision = decision_for(
        variant,
        option,
        replicas,
        served=assignment.served,
        outcome=Outcome.PARTIAL,
        reason=with_rejections(reason, ctx.prepared.candidates[variant.key]),
        itl=itl,
        ttft=ttft,
    )
    return decision, wanted


def _pool_outcomes(
    ctx: _Context,
    books: _Books,
    pools: Mapping[str, Pool],
    results: Mapping[str, UnitResult],
    filled: Mapping[str, MemberResult],
) -> None:
    """Pools' decisions, idle members placed by the presence fill included.

    Every member of a pool that is not fully served wanted one more replica.
    """
    for key, unit_result in results.items():
        members = tuple(filled.get(m.key, m) for m in unit_result.members)
        pool_decisions(
            pools[key],
            UnitResult(key, unit_result.served, members),
            by_key=ctx.by_key,
            prepared=ctx.prepared,
            accelerators=ctx.accelerators,
            sizer=ctx.sizer,
            decisions=books.decisions,
        )
        if unit_result.served < pools[key].load.arrival_rate / 60.0 * (1 - 1e-9):
            for m in members:
                books.limited[m.key] = _one_more(ctx.prepared.candidates[m.key].best_per_accelerator())


def _presence_outcomes(ctx: _Context, books: _Books, filled: Mapping[str, MemberResult]) -> None:
    """Variants with no load: their minimum where the fill placed it, else unserved (and wanting it)."""
    for key in books.presence:
        variant = ctx.by_key[key]
        member_result = filled.get(key)
        cset = ctx.prepared.candidates[key]
        minimum = max(variant.min_replicas, 1)
        if member_result is None or member_result.option is None:
            options = cset.best_per_accelerator()
            books.limited[key] = [(o, minimum * o.units_per_replica) for o in options]
            books.decisions[key] = decision_for(
                variant,
                options[0],
                0,
                served=0.0,
                outcome=Outcome.UNSERVED,
                reason=f"no load, but no capacity left for its minimum of {replicas_text(minimum)}",
            )
        else:
            option = member_result.option
            books.decisions[key] = decision_for(
                variant,
                option,
                member_result.replicas,
                served=0.0,
                outcome=Outcome.FULL,
                reason=with_rejections(
                    f"no load: minReplicas {variant.min_replicas} on {option.accelerator} "
                    f"(batch {option.batch})",
                    cset,
                ),
            )


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


def _overcommitted(
    ctx: _Context, books: _Books, usage: Mapping[str, int], binding: Sequence[BindingConstraint]
) -> tuple[BindingConstraint, ...]:
    """Device types that the kept allocations alone overcommit (capacity shrank under them).

    Named with the variants that keep them, unless already binding for another reason.
    """
    bound = {b.device for b in binding}
    return tuple(
        BindingConstraint(
            device,
            ctx.capacity.get(device, 0),
            usage.get(device, 0),
            tuple(sorted(books.reserved_by[device])),
        )
        for device in sorted(books.reserved_by)
        if books.reserved.get(device, 0) > ctx.capacity.get(device, 0) and device not in bound
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
