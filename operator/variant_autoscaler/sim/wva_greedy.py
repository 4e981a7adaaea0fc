"""WVA's limited-mode greedy solver (wva.md §6.4, Go ``pkg/solver/greedy.go``), as a baseline.

WVA never runs it from its controller, and neither does the operator: it sits with the simulator's
baselines so that ``bench/optimizer.py`` and the MILP-vs-greedy test can measure our MILP against it. The
algorithm:

1. one entry per server with candidates: candidates sorted by *value* (the transition penalty),
   ``delta`` = second value − first value (``MaxFloat32`` when there is one candidate), priority from the
   service class;
2. entries ordered by priority (ascending), then ``delta`` (descending), then the value of the current
   candidate (descending);
3. per priority group (or all at once with ``delayed_best_effort``): ``allocate`` pops the head and
   takes its current candidate if its device type has room for all its replicas, otherwise moves to the
   next candidate, recomputes ``delta`` and re-inserts the entry by binary search; entries that run out
   of candidates are *unallocated*;
4. ``bestEffort`` for the unallocated ones per the saturation policy: ``PriorityExhaustive`` gives each,
   in order, as many replicas as fit on its first candidate that fits; ``PriorityRoundRobin`` and
   ``RoundRobin`` hand out one replica per member per round (within priority groups, or over all).

Faithful details kept on purpose: a round-robin member's first candidate is the first (by value) whose
device type has room for *one* replica, and it keeps receiving replicas while that device type has room
(WVA bounds each round by the candidate's replica count, not by what the member already got);
best-effort cost and value are scaled by ``received / candidate`` replicas; a candidate without an
accelerator (no load, ``minReplicas`` 0) drops the server: no allocation and no best effort. Where Go
iterates a map or sorts unstably we use key order, so results are deterministic.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from variant_autoscaler.core.analyzer import size_allocation
from variant_autoscaler.core.candidates import Candidate, Sizer
from variant_autoscaler.core.explain import (
    current_units,
    decision_for,
    device_usage,
    held_decision,
    infeasible_decision,
)
from variant_autoscaler.core.model import (
    AcceleratorType,
    Decision,
    OptimizerConfig,
    Outcome,
    Plan,
    SaturationPolicy,
    VariantInput,
)
from variant_autoscaler.core.penalty import current_cost, transition_penalty
from variant_autoscaler.core.preparation import Prepared, has_no_load, prepare
from variant_autoscaler.errors import ConfigError

__all__ = [
    "MAX_FLOAT32",
    "GreedyAllocation",
    "GreedyCandidate",
    "GreedyServer",
    "plan_greedy",
    "solve_greedy",
]

#: Go's ``math.MaxFloat32``: the delta of an entry with a single (or last) candidate.
MAX_FLOAT32 = 3.4028234663852886e38


@dataclass(frozen=True, slots=True)
class GreedyCandidate:
    """One candidate allocation of a server. ``accelerator`` is ``None`` for WVA's empty allocation."""

    accelerator: str | None
    device: str
    units_per_replica: int
    replicas: int
    cost: float
    value: float


@dataclass(frozen=True, slots=True)
class GreedyServer:
    key: str
    priority: int
    candidates: tuple[GreedyCandidate, ...]


@dataclass(frozen=True, slots=True)
class GreedyAllocation:
    """What the greedy gave a server: ``candidate`` (index into its value-sorted candidates)."""

    key: str
    candidate: GreedyCandidate
    replicas: int
    cost: float
    value: float
    best_effort: bool


@dataclass(slots=True)
class _Entry:
    """A server's mutable state during the greedy pass (private; WVA's ``serverEntry``)."""

    key: str
    priority: int
    candidates: tuple[GreedyCandidate, ...]
    cur: int = 0
    delta: float = 0.0


def _order(entry: _Entry) -> tuple[int, float, float]:
    """WVA's ``orderFunc`` as a sort key: priority up, delta down, current value down."""
    return (entry.priority, -entry.delta, -entry.candidates[entry.cur].value)


def _entries(servers: Sequence[GreedyServer]) -> list[_Entry]:
    entries: list[_Entry] = []
    for server in sorted(servers, key=lambda s: s.key):
        if not server.candidates:
            continue
        ordered = tuple(sorted(server.candidates, key=lambda c: (c.value, c.accelerator or "", c.replicas)))
        delta = ordered[1].value - ordered[0].value if len(ordered) > 1 else MAX_FLOAT32
        entries.append(_Entry(server.key, server.priority, ordered, 0, delta))
    entries.sort(key=_order)  # stable: ties keep key order
    return entries


def _allocate(
    entries: list[_Entry], available: dict[str, int], result: dict[str, GreedyAllocation]
) -> list[_Entry]:
    """WVA's ``allocate``: full allocations in order; returns the entries that got none."""
    queue = list(entries)
    unallocated: list[_Entry] = []
    while queue:
        top = queue.pop(0)
        if not top.candidates:
            continue
        candidate = top.candidates[top.cur]
        if candidate.accelerator is None:
            continue  # WVA: no accelerator for the empty allocation: the server is dropped
        count = candidate.replicas * candidate.units_per_replica
        if available.get(candidate.device, 0) >= count:
            available[candidate.device] = available.get(candidate.device, 0) - count
            result[top.key] = GreedyAllocation(
                top.key, candidate, candidate.replicas, candidate.cost, candidate.value, False
            )
            continue
        top.cur += 1
        if top.cur + 1 < len(top.candidates):
            top.delta = top.candidates[top.cur + 1].value - top.candidates[top.cur].value
        elif top.cur == len(top.candidates):
            unallocated.append(top)
            continue
        else:
            top.delta = MAX_FLOAT32
        index = bisect.bisect_left(queue, _order(top), key=_order)
        queue.insert(index, top)
    return unallocated


def _allocate_maximally(
    entries: Sequence[_Entry], available: dict[str, int], result: dict[str, GreedyAllocation]
) -> None:
    """``PriorityExhaustive``: each server in turn takes what fits on its first candidate that fits."""
    for entry in entries:
        for candidate in entry.candidates:
            if candidate.accelerator is None or candidate.units_per_replica <= 0:
                continue
            replicas = min(
                available.get(candidate.device, 0) // candidate.units_per_replica, candidate.replicas
            )
            if replicas > 0:
                factor = replicas / candidate.replicas
                result[entry.key] = GreedyAllocation(
                    entry.key, candidate, replicas, candidate.cost * factor, candidate.value * factor, True
                )
                available[candidate.device] -= replicas * candidate.units_per_replica
                break


def _allocate_equally(
    entries: Sequence[_Entry], available: dict[str, int], result: dict[str, GreedyAllocation]
) -> None:
    """Round robin: one replica per member per round while its device type has room."""
    tickets: dict[str, GreedyCandidate | None] = {entry.key: None for entry in entries}
    chosen_of: dict[str, GreedyCandidate] = {}
    received: dict[str, int] = {}
    while tickets:
        for entry in entries:
            if entry.key not in tickets:
                continue
            chosen = tickets[entry.key]
            if chosen is None:
                for candidate in entry.candidates:
                    units = candidate.units_per_replica
                    if (
                        candidate.accelerator is not None
                        and units > 0
                        and available.get(candidate.device, 0) >= units
                    ):
                        chosen = candidate
                        break
                if chosen is None:
                    del tickets[entry.key]
                    continue
                tickets[entry.key] = chosen
                chosen_of[entry.key] = chosen
            free_replicas = available.get(chosen.device, 0) // chosen.units_per_replica
            if min(free_replicas, chosen.replicas) > 0:
                received[entry.key] = received.get(entry.key, 0) + 1
                available[chosen.device] -= chosen.units_per_replica
            else:
                del tickets[entry.key]
    for key in sorted(received):
        candidate = chosen_of[key]
        count = received[key]
        factor = count / candidate.replicas
        result[key] = GreedyAllocation(
            key, candidate, count, candidate.cost * factor, candidate.value * factor, True
        )


def _priority_groups(entries: Sequence[_Entry]) -> list[list[_Entry]]:
    """WVA's ``makePriorityGroups``: consecutive runs of equal priority."""
    groups: list[list[_Entry]] = []
    for entry in entries:
        if groups and groups[-1][0].priority == entry.priority:
            groups[-1].append(entry)
        else:
            groups.append([entry])
    return groups


def _best_effort(
    unallocated: Sequence[_Entry],
    available: dict[str, int],
    policy: SaturationPolicy,
    result: dict[str, GreedyAllocation],
) -> None:
    if policy is SaturationPolicy.PRIORITY_EXHAUSTIVE:
        _allocate_maximally(unallocated, available, result)
    elif policy is SaturationPolicy.PRIORITY_ROUND_ROBIN:
        for group in _priority_groups(unallocated):
            _allocate_equally(group, available, result)
    elif policy is SaturationPolicy.ROUND_ROBIN:
        _allocate_equally(unallocated, available, result)


def solve_greedy(
    servers: Sequence[GreedyServer],
    capacity: Mapping[str, int],
    policy: SaturationPolicy = SaturationPolicy.NONE,
    *,
    delayed_best_effort: bool = False,
) -> dict[str, GreedyAllocation]:
    """WVA's ``SolveGreedy``: allocations by server key (servers left out got nothing)."""
    available = {device: int(count) for device, count in capacity.items()}
    result: dict[str, GreedyAllocation] = {}
    entries = _entries(servers)
    if delayed_best_effort:
        unallocated = _allocate(entries, available, result)
        _best_effort(unallocated, available, policy, result)
    else:
        for group in _priority_groups(entries):
            unallocated = _allocate(group, available, result)
            _best_effort(unallocated, available, policy, result)
    return result


def _server(
    variant: VariantInput, options: Sequence[Candidate], accelerators: Mapping[str, AcceleratorType]
) -> GreedyServer:
    """The greedy's view of a variant: its candidates valued by WVA's transition penalty."""
    now_acc = variant.current_accelerator or ""
    now_cost = current_cost(variant, accelerators)
    candidates = []
    for option in options:
        replicas = (
            option.replicas if variant.max_replicas is None else min(option.replicas, variant.max_replicas)
        )
        cost = replicas * option.cost_per_replica
        identity = option.accelerator if replicas > 0 else ""
        value = transition_penalty(
            current_accelerator=now_acc,
            current_replicas=variant.current_replicas,
            current_cost=now_cost,
            new_accelerator=identity,
            new_replicas=replicas,
            new_cost=cost,
        )
        candidates.append(
            GreedyCandidate(
                option.accelerator if replicas > 0 else None,
                option.device,
                option.units_per_replica,
                replicas,
                cost,
                value,
            )
        )
    return GreedyServer(variant.key, variant.priority, tuple(candidates))


def plan_greedy(
    variants: Sequence[VariantInput],
    accelerators: Mapping[str, AcceleratorType],
    config: OptimizerConfig | None = None,
    capacity: Mapping[str, int] | None = None,
    *,
    sizer: Sizer = size_allocation,
    clock: Callable[[], float] | None = None,
    prepared: Prepared | None = None,
) -> Plan:
    """A limited-mode plan made by WVA's greedy over the same candidates the MILP sees.

    Load sharing is not part of WVA: variants are planned on their own load (a ``prepared`` result
    with pools is refused). Variants without metrics or without a feasible accelerator keep their
    current allocation (and its devices), as in our plan.
    """
    config = config or OptimizerConfig()
    if prepared is None:
        alone = [dataclasses.replace(v, share_load=False) for v in variants]
        prepared = prepare(alone, accelerators, config, sizer=sizer, clock=clock)
    elif prepared.pools:
        raise ConfigError("WVA's greedy plans every variant on its own load: prepare without shared load")
    capacity = dict(capacity or {})
    started = clock() if clock is not None else None
    decisions: dict[str, Decision] = {}
    servers: list[GreedyServer] = []
    options: dict[str, dict[tuple[str | None, str], Candidate]] = {}
    reserved: dict[str, int] = {}
    for variant in prepared.variants:
        if variant.load is None or not prepared.candidates[variant.key].candidates:
            cset = prepared.candidates.get(variant.key)
            decisions[variant.key] = (
                held_decision(variant, accelerators)
                if cset is None
                else infeasible_decision(variant, accelerators, cset)
            )
            held = current_units(variant, accelerators)
            if held is not None:
                reserved[held[0]] = reserved.get(held[0], 0) + held[1]
            continue
        best = prepared.candidates[variant.key].best_per_accelerator()
        servers.append(_server(variant, best, accelerators))
        options[variant.key] = {(o.accelerator, o.device): o for o in best}
    free = {device: max(count - reserved.get(device, 0), 0) for device, count in capacity.items()}
    result = solve_greedy(
        servers, free, config.saturation_policy, delayed_best_effort=config.delayed_best_effort
    )
    by_key = {v.key: v for v in prepared.variants}
    for server in servers:
        variant = by_key[server.key]
        assert variant.load is not None
        lam = variant.load.arrival_rate / 60.0
        allocation = result.get(server.key)
        fallback = next(iter(options[server.key].values()))
        if allocation is None or allocation.candidate.accelerator is None:
            nothing_needed = all(c.accelerator is None for c in server.candidates) or (
                has_no_load(variant.load) and variant.min_replicas == 0
            )
            decisions[server.key] = decision_for(
                variant,
                fallback,
                0,
                served=0.0,
                outcome=Outcome.FULL if nothing_needed else Outcome.UNSERVED,
                reason="WVA greedy: no replicas needed" if nothing_needed else "WVA greedy: not allocated",
            )
            continue
        chosen = allocation.candidate
        option = options[server.key][(chosen.accelerator, chosen.device)]
        served = min(lam, allocation.replicas * option.rate_per_replica)
        full = served >= lam * (1.0 - 1e-12)
        kind = "best effort" if allocation.best_effort else "allocated"
        decisions[server.key] = dataclasses.replace(
            decision_for(
                variant,
                option,
                allocation.replicas,
                served=served,
                outcome=Outcome.FULL if full else Outcome.PARTIAL,
                reason=(
                    f"WVA greedy ({kind}): {allocation.replicas} of {option.accelerator} "
                    f"(batch {option.batch})"
                ),
            ),
            cost=allocation.cost,
        )
    ordered = {k: decisions[k] for k in sorted(decisions)}
    solve = None if clock is None or started is None else clock() - started
    return Plan(
        decisions=ordered,
        mode="limited",
        status="greedy",
        total_cost=sum(d.cost for d in ordered.values()),
        usage=device_usage(ordered, by_key, accelerators),
        capacity=dict(sorted(capacity.items())),
        solve_seconds=solve,
        analyzer_seconds=prepared.analyzer_seconds,
        sizings=prepared.sizings,
    )
