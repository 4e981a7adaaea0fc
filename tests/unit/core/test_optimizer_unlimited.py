"""Unlimited mode (WVA's): per-variant choice by cost plus transition penalty, WVA's numbers."""

from __future__ import annotations

import dataclasses
import math

import pytest

from variant_autoscaler.core.analyzer import SLO, Load, Sizing
from variant_autoscaler.core.model import (
    AcceleratorType,
    OptimizerConfig,
    Outcome,
    Profile,
    ServiceParms,
    ServiceTarget,
    VariantInput,
)
from variant_autoscaler.core.optimizer import optimize
from variant_autoscaler.core.penalty import current_cost, transition_penalty
from variant_autoscaler.errors import ConfigError, InfeasibleError
from vatesting.profiles import profile

PARMS = ServiceParms(alpha=1.0, beta=0.1, gamma=1.0, delta=0.01)
PREMIUM = ServiceTarget("Premium", 1, SLO(ttft=500, itl=24))
DEFAULT_LOAD = Load(60.0, 100, 100)
ACCS = {
    "A100": AcceleratorType("A100", "NVIDIA-A100-PCIE-80GB", 40.0),
    "G2": AcceleratorType("G2", "Intel-Gaudi-2-96GB", 23.0),
    "MI300X": AcceleratorType("MI300X", "AMD-MI300X-192GB", 65.0),
}


class TableSizer:
    """A sizer with a fixed rate per replica (req/s) per accelerator and batch; WVA's replica rule."""

    def __init__(self, rates: dict[tuple[str, int], float | str]) -> None:
        self.rates = rates
        self.calls = 0

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
        self.calls += 1
        rate = self.rates[(accelerator, max_batch_size)]
        if isinstance(rate, str):
            raise InfeasibleError(rate)
        if load.arrival_rate == 0:
            if min_replicas == 0:
                return Sizing("", 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0)
            replicas = min_replicas
        else:
            replicas = max(math.ceil(load.arrival_rate / 60.0 / rate), min_replicas, 1)
        return Sizing(
            accelerator, replicas, max_batch_size, unit_cost * acc_count * replicas, 10.0, 100.0, 0.5, rate
        )


def variant(
    name: str = "v",
    *,
    profiles: tuple[Profile, ...] = (
        profile("A100", batch=4, parms=PARMS),
        profile("G2", batch=4, parms=PARMS),
    ),
    load: Load | None = DEFAULT_LOAD,
    **kwargs: object,
) -> VariantInput:
    return VariantInput(name, "ns", "m", PREMIUM, profiles, load, **kwargs)  # type: ignore[arg-type]


FIXED = OptimizerConfig(batch_sizes=1)


def test_transition_penalty_matches_wva_cases() -> None:
    # pkg/core/allocation_test.go: from {gpu-a, 2 replicas, cost 100}
    def from_a(acc: str, replicas: int, cost: float) -> float:
        return transition_penalty(
            current_accelerator="gpu-a",
            current_replicas=2,
            current_cost=100.0,
            new_accelerator=acc,
            new_replicas=replicas,
            new_cost=cost,
        )

    assert from_a("gpu-a", 2, 100.0) == 0.0
    assert from_a("gpu-a", 3, 150.0) == 50.0
    assert from_a("gpu-b", 2, 120.0) == pytest.approx(42.0)
    # a new server (no accelerator) pays 1.1 × the new cost
    assert transition_penalty(
        current_accelerator="",
        current_replicas=0,
        current_cost=0.0,
        new_accelerator="gpu-a",
        new_replicas=3,
        new_cost=120.0,
    ) == pytest.approx(132.0)


def test_wva_three_va_case_gives_43_replicas_each() -> None:
    """internal/optimizer/optimizer_test.go: 3 VAs, 1200 req/min, in 20 / out 200, batch 4."""
    parms = ServiceParms(alpha=20.28, beta=0.72, gamma=0.0, delta=0.0)
    target = ServiceTarget("Premium", 1, SLO(ttft=500, itl=80))
    variants = [
        VariantInput(
            f"va-{i}",
            "default",
            "meta/llama0-70b",
            target,
            (profile("A100", batch=4, parms=parms),),
            Load(1200.0, 20, 200),
            current_accelerator="A100",
            current_replicas=1,
            keep_accelerator=True,
        )
        for i in range(3)
    ]
    plan = optimize(variants, {"A100": ACCS["A100"]}, FIXED)
    assert plan.mode == "unlimited"
    for decision in plan.decisions.values():
        assert (decision.accelerator, decision.replicas, decision.max_batch) == ("A100", 43, 4)
        assert decision.cost == pytest.approx(1720.0)
        assert decision.itl == pytest.approx(22.3, abs=0.1)
        assert decision.ttft == pytest.approx(496, abs=1)
        assert decision.outcome is Outcome.FULL
        assert decision.reason.startswith("kept accelerator A100")
    assert plan.total_cost == pytest.approx(3 * 1720.0)


def test_wva_three_va_case_without_load_gives_min_replicas() -> None:
    parms = ServiceParms(alpha=20.28, beta=0.72, gamma=0.0, delta=0.0)
    target = ServiceTarget("Premium", 1, SLO(ttft=500, itl=80))
    v = VariantInput(
        "va",
        "default",
        "meta/llama0-70b",
        target,
        (profile("A100", batch=4, parms=parms),),
        Load(0.0, 20, 200),
        current_accelerator="A100",
        current_replicas=5,
        keep_accelerator=True,
    )
    (decision,) = optimize([v], ACCS, FIXED).decisions.values()
    assert (decision.accelerator, decision.replicas, decision.cost) == ("A100", 1, 40.0)


def test_keep_accelerator_uses_only_the_current_one() -> None:
    sizer = TableSizer({("A100", 4): 1.0, ("G2", 4): 1.0})
    v = variant(current_accelerator="A100", current_replicas=1, keep_accelerator=True)
    (decision,) = optimize([v], ACCS, FIXED, sizer=sizer).decisions.values()
    assert decision.accelerator == "A100"
    assert sizer.calls == 1
    assert "kept accelerator A100" in decision.reason


@pytest.mark.parametrize(
    ("current", "replicas", "expected"),
    [
        # current A100 × 3 (cost 120): A100 3 replicas → 0; G2 5 replicas (115) → 0.1·235 − 5 = 18.5
        ("A100", 3, "A100"),
        # current A100 × 4 (160): A100 → 120 − 160 = −40; G2 → 0.1·275 − 45 = −17.5
        ("A100", 4, "A100"),
        # new variant: A100 1.1·120 = 132; G2 1.1·115 = 126.5
        (None, 0, "G2"),
        # current G2 × 1 (23): A100 → 0.1·143 + 97 = 111.3; G2 → 115 − 23 = 92
        ("G2", 1, "G2"),
    ],
)
def test_lowest_cost_plus_transition_penalty_wins(current: str | None, replicas: int, expected: str) -> None:
    # 180 req/min = 3 req/s: A100 at 1 req/s per replica needs 3 (120); G2 at 0.6 needs 5 (115).
    sizer = TableSizer({("A100", 4): 1.0, ("G2", 4): 0.6})
    v = variant(load=Load(180.0, 100, 100), current_accelerator=current, current_replicas=replicas)
    (decision,) = optimize([v], ACCS, FIXED, sizer=sizer).decisions.values()
    assert decision.accelerator == expected
    assert decision.replicas == (3 if expected == "A100" else 5)


def test_current_cost_ignores_acc_count_as_wva_does() -> None:
    profiles = (profile("A100", batch=4, count=2, parms=PARMS),)
    v = variant(profiles=profiles, current_accelerator="A100", current_replicas=2)
    assert current_cost(v, ACCS) == 80.0
    sizer = TableSizer({("A100", 4): 0.5})
    (decision,) = optimize([v], ACCS, FIXED, sizer=sizer).decisions.values()
    # 1 req/s at 0.5 per replica: 2 replicas of 2 A100 units each
    assert (decision.replicas, decision.cost) == (2, 160.0)


def test_zero_load_with_min_replicas_zero_scales_to_nothing() -> None:
    sizer = TableSizer({("A100", 4): 1.0, ("G2", 4): 1.0})
    v = variant(load=Load(0.0, 100, 100), min_replicas=0, current_accelerator="A100", current_replicas=1)
    (decision,) = optimize([v], ACCS, FIXED, sizer=sizer).decisions.values()
    assert (decision.accelerator, decision.replicas, decision.cost, decision.max_batch) == (None, 0, 0.0, 0)
    assert decision.outcome is Outcome.FULL


def test_zero_load_with_min_replicas_uses_the_profile_batch_and_acc_count() -> None:
    # pkg/core/allocation_test.go zeroLoadAllocation: minReplicas 2, batch 16, unit cost 100 → cost 200
    accs = {"gpu": AcceleratorType("gpu", "dev", 100.0)}
    v = VariantInput(
        "v", "ns", "m", PREMIUM, (profile("gpu", batch=16, parms=PARMS),), Load(0.0, 100, 200), min_replicas=2
    )
    (decision,) = optimize([v], accs, FIXED).decisions.values()
    assert (decision.accelerator, decision.replicas, decision.max_batch, decision.cost) == (
        "gpu",
        2,
        16,
        200.0,
    )
    # server max batch 8, cost 50, accCount 2, one replica: batch 8, cost 100
    accs = {"gpu": AcceleratorType("gpu", "dev", 50.0)}
    v = VariantInput(
        "v",
        "ns",
        "m",
        PREMIUM,
        (profile("gpu", batch=16, count=2, parms=PARMS),),
        Load(0.0, 100, 200),
        max_batch_size=8,
    )
    (decision,) = optimize([v], accs, FIXED).decisions.values()
    assert (decision.replicas, decision.max_batch, decision.cost) == (1, 8, 100.0)


def test_missing_metrics_keep_the_current_allocation() -> None:
    v = variant(load=None, current_accelerator="G2", current_replicas=3)
    (decision,) = optimize([v], ACCS, FIXED, sizer=TableSizer({})).decisions.values()
    assert (decision.accelerator, decision.replicas, decision.outcome) == ("G2", 3, Outcome.HELD)
    assert decision.cost == 3 * 23.0
    assert "no load metrics" in decision.reason


def test_no_feasible_accelerator_keeps_current_and_says_why() -> None:
    sizer = TableSizer(
        {("A100", 4): "ITL target 24 ms unreachable", ("G2", 4): "TTFT target 500 ms unreachable"}
    )
    v = variant(current_accelerator="A100", current_replicas=2)
    (decision,) = optimize([v], ACCS, FIXED, sizer=sizer).decisions.values()
    assert (decision.accelerator, decision.replicas, decision.outcome) == ("A100", 2, Outcome.INFEASIBLE)
    assert "A100: ITL target 24 ms unreachable" in decision.reason
    assert "G2: TTFT target 500 ms unreachable" in decision.reason


def test_infeasible_accelerators_are_named_in_the_reason_of_the_chosen_one() -> None:
    sizer = TableSizer({("A100", 4): 1.0, ("G2", 4): "ITL target 24 ms unreachable"})
    (decision,) = optimize([variant()], ACCS, FIXED, sizer=sizer).decisions.values()
    assert decision.accelerator == "A100"
    assert "not used: G2: ITL target 24 ms unreachable" in decision.reason


def test_accelerator_missing_from_costs_is_rejected() -> None:
    profiles = (profile("A100", batch=4, parms=PARMS), profile("H100", batch=4, parms=PARMS))
    sizer = TableSizer({("A100", 4): 1.0})
    (decision,) = optimize([variant(profiles=profiles)], ACCS, FIXED, sizer=sizer).decisions.values()
    assert decision.accelerator == "A100"
    assert "H100: not listed in accelerator-unit-costs" in decision.reason


def test_max_replicas_caps_and_reports_partial_service() -> None:
    sizer = TableSizer({("A100", 4): 1.0})
    v = variant(profiles=(profile("A100", batch=4, parms=PARMS),), load=Load(300.0, 10, 10), max_replicas=3)
    (decision,) = optimize([v], ACCS, FIXED, sizer=sizer).decisions.values()
    assert (decision.replicas, decision.outcome) == (3, Outcome.PARTIAL)
    assert decision.served_fraction == pytest.approx(0.6)
    assert "limited by maxReplicas 3" in decision.reason


def test_smaller_batch_is_chosen_when_it_needs_fewer_replicas() -> None:
    sizer = TableSizer({("A100", 8): 0.5, ("A100", 4): 1.0, ("A100", 2): 0.7, ("A100", 1): 0.4})
    v = variant(profiles=(profile("A100", batch=8, parms=PARMS),), load=Load(120.0, 10, 10))
    plan = optimize([v], ACCS, OptimizerConfig(batch_sizes=4), sizer=sizer)
    (decision,) = plan.decisions.values()
    assert (decision.max_batch, decision.replicas) == (4, 2)
    assert plan.sizings == sizer.calls == 4
    # with the batch fixed at the profile's value (WVA) it is 8 and needs 4 replicas
    (fixed,) = optimize([v], ACCS, FIXED, sizer=sizer).decisions.values()
    assert (fixed.max_batch, fixed.replicas) == (8, 4)


def test_batch_override_applies_to_every_candidate() -> None:
    sizer = TableSizer({("A100", 2): 1.0, ("G2", 2): 1.0})
    (decision,) = optimize([variant(max_batch_size=2)], ACCS, FIXED, sizer=sizer).decisions.values()
    assert decision.max_batch == 2


def test_duplicate_variants_are_rejected() -> None:
    with pytest.raises(ConfigError, match="listed twice"):
        optimize([variant(), variant()], ACCS, FIXED, sizer=TableSizer({("A100", 4): 1.0, ("G2", 4): 1.0}))


def test_decisions_are_keyed_and_sorted_by_namespace_and_name() -> None:
    sizer = TableSizer({("A100", 4): 1.0, ("G2", 4): 1.0})
    plan = optimize([variant("b"), variant("a")], ACCS, FIXED, sizer=sizer)
    assert list(plan.decisions) == ["ns/a", "ns/b"]
    assert plan.total_cost == sum(d.cost for d in plan.decisions.values())


def test_shared_load_splits_a_model_across_its_variants_within_the_slo() -> None:
    """Cheap G2 replicas plus one A100: the pool's load is covered and every replica stays in its SLO."""
    slo = ServiceTarget("Premium", 1, SLO(ttft=500, itl=24))
    e2e = {
        "A100": ServiceParms(20.58, 0.41, 20.58, 0.041),
        "G2": ServiceParms(17.15, 0.34, 17.15, 0.34),
    }
    variants = [
        VariantInput(
            f"on-{acc.lower()}",
            "ns",
            "default/default",
            slo,
            (profile(acc, batch=4, parms=parms),),
            Load(150.0, 100, 128),
            current_accelerator=acc,
            current_replicas=1,
            keep_accelerator=True,
            share_load=True,
        )
        for acc, parms in e2e.items()
    ]
    plan = optimize(variants, ACCS, FIXED)
    alone = optimize([dataclasses.replace(v, share_load=False) for v in variants], ACCS, FIXED)
    assert plan.status == "optimal"
    shares = {k: d.served_rate for k, d in plan.decisions.items()}
    assert sum(shares.values()) == pytest.approx(300.0, rel=1e-6)
    for decision in plan.decisions.values():
        assert decision.outcome is Outcome.FULL
        assert decision.replicas >= 1
        assert decision.itl <= 24.0 + 1e-6
        assert decision.ttft <= 500.0 + 1e-6
        assert "shares default/default's load" in decision.reason
    assert plan.total_cost <= alone.total_cost + 1e-9
