"""WVA's greedy (pkg/solver/greedy.go) on hand-made instances."""

from __future__ import annotations

import math

import pytest

from variant_autoscaler.core.analyzer import SLO, Load, Sizing
from variant_autoscaler.core.model import (
    AcceleratorType,
    OptimizerConfig,
    Outcome,
    Profile,
    SaturationPolicy,
    ServiceParms,
    ServiceTarget,
    VariantInput,
)
from variant_autoscaler.sim.wva_greedy import (
    MAX_FLOAT32,
    GreedyAllocation,
    GreedyCandidate,
    GreedyServer,
    _entries,
    plan_greedy,
    solve_greedy,
)


def cand(
    device: str, replicas: int, value: float, *, units: int = 1, cost: float | None = None
) -> GreedyCandidate:
    return GreedyCandidate(f"acc-{device}", device, units, replicas, value if cost is None else cost, value)


def picked(result: dict[str, GreedyAllocation]) -> dict[str, tuple[str | None, int]]:
    return {k: (a.candidate.device, a.replicas) for k, a in result.items()}


def test_entries_are_ordered_by_priority_then_delta_then_value() -> None:
    servers = [
        GreedyServer("low", 2, (cand("a", 1, 1.0),)),
        GreedyServer("small-delta", 1, (cand("a", 1, 10.0), cand("b", 1, 15.0))),
        GreedyServer("big-delta", 1, (cand("b", 1, 30.0), cand("a", 1, 5.0))),  # sorted: 5 then 30
        GreedyServer("tie-cheap", 1, (cand("a", 1, 1.0), cand("b", 1, 6.0))),
    ]
    entries = _entries(servers)
    assert [e.key for e in entries] == ["big-delta", "small-delta", "tie-cheap", "low"]
    assert entries[0].candidates[0].value == 5.0 and entries[0].delta == 25.0
    assert entries[-1].delta == MAX_FLOAT32
    # equal priority and delta: the larger current value goes first
    assert entries[1].candidates[0].value == 10.0 and entries[2].candidates[0].value == 1.0


def test_a_failed_candidate_is_reinserted_by_its_new_delta() -> None:
    servers = [
        # delta 45; after devA fails, delta 70 - 45 = 25: goes behind "s4" (30) but before "s1" (20)
        GreedyServer("s2", 1, (cand("devA", 1, 0.0), cand("devC", 2, 45.0), cand("devD", 1, 70.0))),
        GreedyServer("s4", 1, (cand("devC", 2, 10.0), cand("devD", 5, 40.0))),
        GreedyServer("s1", 1, (cand("devD", 1, 5.0), cand("devD", 2, 25.0))),
    ]
    result = solve_greedy(servers, {"devA": 0, "devC": 2, "devD": 10})
    assert picked(result) == {"s4": ("devC", 2), "s2": ("devD", 1), "s1": ("devD", 1)}
    assert not any(a.best_effort for a in result.values())


def test_policy_none_leaves_unallocated_servers_without_replicas() -> None:
    servers = [
        GreedyServer("big", 1, (cand("a", 4, 80.0, units=2),)),
        GreedyServer("ok", 1, (cand("a", 1, 10.0),)),
    ]
    result = solve_greedy(servers, {"a": 5}, SaturationPolicy.NONE)
    assert picked(result) == {"ok": ("a", 1)}


def test_priority_exhaustive_gives_what_fits_scaling_cost_and_value() -> None:
    servers = [GreedyServer("big", 1, (cand("a", 4, 80.0, units=2), cand("b", 3, 90.0)))]
    result = solve_greedy(servers, {"a": 5, "b": 0}, SaturationPolicy.PRIORITY_EXHAUSTIVE)
    allocation = result["big"]
    assert (allocation.candidate.device, allocation.replicas) == ("a", 2)  # 5 // 2 devices per replica
    assert allocation.cost == pytest.approx(40.0) and allocation.value == pytest.approx(40.0)
    assert allocation.best_effort


def test_round_robin_hands_out_one_replica_per_member_per_round() -> None:
    servers = [GreedyServer("x", 1, (cand("a", 10, 100.0),)), GreedyServer("y", 1, (cand("a", 12, 120.0),))]
    result = solve_greedy(servers, {"a": 7}, SaturationPolicy.ROUND_ROBIN)
    # entry order: equal priority and delta, larger value first: y, x, y, x, ...
    assert picked(result) == {"y": ("a", 4), "x": ("a", 3)}
    assert result["x"].cost == pytest.approx(30.0)


def test_priority_round_robin_serves_groups_in_priority_order() -> None:
    servers = [
        GreedyServer("p1", 1, (cand("a", 5, 50.0),)),
        GreedyServer("p2", 1, (cand("a", 5, 50.0),)),
        GreedyServer("f1", 10, (cand("a", 5, 50.0),)),
    ]
    result = solve_greedy(servers, {"a": 6}, SaturationPolicy.PRIORITY_ROUND_ROBIN)
    # p1 (first by key among equals) is allocated fully, p2 gets the one left; f1 nothing
    assert picked(result) == {"p1": ("a", 5), "p2": ("a", 1)}


def test_delayed_best_effort_allocates_every_class_before_best_effort() -> None:
    servers = [GreedyServer("p", 1, (cand("a", 4, 40.0),)), GreedyServer("q", 2, (cand("a", 2, 20.0),))]
    eager = solve_greedy(servers, {"a": 3}, SaturationPolicy.PRIORITY_EXHAUSTIVE)
    assert picked(eager) == {"p": ("a", 3)}
    delayed = solve_greedy(servers, {"a": 3}, SaturationPolicy.PRIORITY_EXHAUSTIVE, delayed_best_effort=True)
    assert picked(delayed) == {"q": ("a", 2), "p": ("a", 1)}


def test_an_empty_allocation_drops_the_server() -> None:
    empty = GreedyCandidate(None, "a", 1, 0, 0.0, -36.0)
    result = solve_greedy([GreedyServer("idle", 1, (empty,))], {"a": 5}, SaturationPolicy.ROUND_ROBIN)
    assert result == {}


class RateSizer:
    def __init__(self, rates: dict[str, float]) -> None:
        self.rates = rates

    def __call__(
        self,
        *,
        accelerator: str,
        unit_cost: float,
        acc_count: int,
        parms: ServiceParms,
        max_batch_size: int,
        load: Load,
        slo: SLO,
        min_replicas: int = 1,
        max_queue_size: int | None = None,
    ) -> Sizing:
        rate = self.rates[accelerator]
        replicas = max(math.ceil(load.arrival_rate / 60.0 / rate), min_replicas, 1)
        return Sizing(
            accelerator, replicas, max_batch_size, unit_cost * acc_count * replicas, 10.0, 100.0, 0.5, rate
        )


def test_plan_greedy_reports_full_partial_and_unserved_variants() -> None:
    parms = ServiceParms(1.0, 0.1, 1.0, 0.01)
    accs = {"A100": AcceleratorType("A100", "dev-a", 40.0)}
    premium = ServiceTarget("Premium", 1, SLO(itl=24))
    free = ServiceTarget("Free", 10, SLO(itl=24))

    def v(name: str, service: ServiceTarget, rpm: float) -> VariantInput:
        return VariantInput(name, "ns", name, service, (Profile("A100", 1, 4, parms),), Load(rpm, 10, 10))

    variants = [v("a", premium, 120.0), v("b", premium, 240.0), v("c", free, 60.0)]
    config = OptimizerConfig(
        unlimited=False, saturation_policy=SaturationPolicy.PRIORITY_EXHAUSTIVE, batch_sizes=1
    )
    plan = plan_greedy(variants, accs, config, {"dev-a": 5}, sizer=RateSizer({"A100": 1.0}))
    outcomes = {k: (d.replicas, d.outcome) for k, d in plan.decisions.items()}
    # entries: b (value 1.1·160) before a (1.1·80), both delta MaxFloat32: b full (4), a best effort (1)
    assert outcomes == {
        "ns/a": (1, Outcome.PARTIAL),
        "ns/b": (4, Outcome.FULL),
        "ns/c": (0, Outcome.UNSERVED),
    }
    assert plan.status == "greedy"
    assert plan.total_cost == pytest.approx(200.0)
