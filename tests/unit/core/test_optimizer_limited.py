"""Limited mode: the MILP over capacity, saturation policies, explanations, and the greedy comparison."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from variant_autoscaler.core.analyzer import SLO, Load, Sizing
from variant_autoscaler.core.candidates import build_candidates
from variant_autoscaler.core.limited import _Assignment, _spread
from variant_autoscaler.core.model import (
    AcceleratorType,
    OptimizerConfig,
    Outcome,
    Plan,
    Profile,
    SaturationPolicy,
    ServiceParms,
    ServiceTarget,
    VariantInput,
    priority_weight,
)
from variant_autoscaler.core.optimizer import optimize, served_by_priority
from variant_autoscaler.errors import ConfigError, InfeasibleError
from variant_autoscaler.sim.wva_greedy import plan_greedy

PARMS = ServiceParms(alpha=1.0, beta=0.1, gamma=1.0, delta=0.01)
PREMIUM = ServiceTarget("Premium", 1, SLO(ttft=500, itl=24))
FREEMIUM = ServiceTarget("Freemium", 10, SLO(ttft=1500, itl=150))
A100 = "NVIDIA-A100-PCIE-80GB"
GAUDI = "Intel-Gaudi-2-96GB"
ACCS = {
    "A100": AcceleratorType("A100", A100, 40.0),
    "G2": AcceleratorType("G2", GAUDI, 23.0),
}


class TableSizer:
    """Fixed rate per replica (req/s) per accelerator; WVA's replica rule."""

    def __init__(self, rates: dict[str, float | str]) -> None:
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


SIZER = TableSizer({"A100": 1.0, "G2": 0.5})


def variant(
    name: str,
    rate_rpm: float | None,
    *,
    service: ServiceTarget = PREMIUM,
    accs: tuple[str, ...] = ("A100",),
    **kwargs: object,
) -> VariantInput:
    load = None if rate_rpm is None else Load(rate_rpm, 100, 100)
    profiles = tuple(Profile(a, 1, 4, PARMS) for a in accs)
    return VariantInput(name, "ns", f"model-{name}", service, profiles, load, **kwargs)  # type: ignore[arg-type]


def limited(
    policy: SaturationPolicy = SaturationPolicy.PRIORITY_EXHAUSTIVE, **kwargs: object
) -> OptimizerConfig:
    return OptimizerConfig(unlimited=False, saturation_policy=policy, batch_sizes=1, **kwargs)  # type: ignore[arg-type]


def test_cheapest_allocations_that_fit_need_no_solver() -> None:
    vs = [variant("a", 180.0, accs=("A100", "G2")), variant("b", 60.0, accs=("A100", "G2"))]
    plan = optimize(vs, ACCS, limited(), {A100: 10, GAUDI: 10}, sizer=SIZER)
    assert plan.status == "direct" and plan.solves == 0
    # a: A100 3 × 40 = 120 vs G2 6 × 23 = 138; b: A100 40 vs G2 2 × 23 = 46
    assert {k: (d.accelerator, d.replicas) for k, d in plan.decisions.items()} == {
        "ns/a": ("A100", 3),
        "ns/b": ("A100", 1),
    }
    assert plan.binding == ()
    assert plan.usage == {A100: 4}


def test_capacity_moves_a_variant_to_its_next_best_accelerator() -> None:
    vs = [variant("a", 180.0, accs=("A100", "G2")), variant("b", 60.0, accs=("A100", "G2"))]
    plan = optimize(vs, ACCS, limited(), {A100: 3, GAUDI: 10}, sizer=SIZER)
    assert plan.status == "optimal"
    decisions = {k: (d.accelerator, d.replicas, d.outcome) for k, d in plan.decisions.items()}
    # both fully served; the cheapest split is a on A100 (120) and b on G2 (46): 166 < 138 + 40
    assert decisions == {"ns/a": ("A100", 3, Outcome.FULL), "ns/b": ("G2", 2, Outcome.FULL)}
    assert plan.total_cost == pytest.approx(166.0)
    b = plan.decisions["ns/b"]
    assert "cheaper A100 not used" in b.reason and A100 in b.reason
    (binding,) = plan.binding
    assert (binding.device, binding.capacity, binding.used, binding.variants) == (A100, 3, 3, ("ns/b",))


def test_higher_priority_is_served_first() -> None:
    vs = [variant("premium", 240.0), variant("free", 240.0, service=FREEMIUM)]
    plan = optimize(vs, ACCS, limited(), {A100: 5}, sizer=SIZER)
    premium, free = plan.decisions["ns/premium"], plan.decisions["ns/free"]
    assert (premium.replicas, premium.outcome) == (4, Outcome.FULL)
    assert (free.replicas, free.outcome) == (1, Outcome.PARTIAL)
    assert free.served_fraction == pytest.approx(0.25)
    assert f"limited by {A100} capacity: 1 of 4 replicas" in free.reason


def test_policy_none_gives_no_partial_allocations() -> None:
    vs = [variant("premium", 240.0), variant("free", 240.0, service=FREEMIUM)]
    plan = optimize(vs, ACCS, limited(SaturationPolicy.NONE), {A100: 5}, sizer=SIZER)
    free = plan.decisions["ns/free"]
    assert (free.accelerator, free.replicas, free.outcome) == (None, 0, Outcome.UNSERVED)
    assert "saturation policy None" in free.reason
    assert "4 × A100" in free.reason and "1 of 5 free" in free.reason
    (binding,) = plan.binding
    assert binding.variants == ("ns/free",)


def test_round_robin_keeps_partial_allocations_even() -> None:
    # five identical variants needing 3 replicas each and 7 devices: nobody can be served fully
    # without starving others; round robin leaves partial allocations within one replica of each other
    vs = [variant(name, 180.0) for name in "abcde"]
    for policy in (SaturationPolicy.PRIORITY_ROUND_ROBIN, SaturationPolicy.ROUND_ROBIN):
        plan = optimize(vs, ACCS, limited(policy), {A100: 7}, sizer=SIZER)
        partial = [d.replicas for d in plan.decisions.values() if d.outcome is not Outcome.FULL]
        assert sum(d.replicas for d in plan.decisions.values()) == 7
        assert max(partial) - min(partial) <= 1
        assert sum(d.served_rate for d in plan.decisions.values()) == pytest.approx(420.0)


def test_spreading_moves_replicas_only_without_loss() -> None:
    vs = {k: variant(k, 180.0) for k in ("a", "b", "c")}

    options = {v.key: build_candidates(v, ACCS, batch_count=1, sizer=SIZER).candidates for v in vs.values()}
    by_key = {v.key: v for v in vs.values()}
    a100 = options["ns/a"][0]
    uneven = {
        "ns/a": _Assignment(a100, 2, 2.0, False),
        "ns/b": _Assignment(a100, 2, 2.0, False),
        "ns/c": _Assignment(None, 0, 0.0, False),
    }
    _spread(uneven, by_key, options, SaturationPolicy.ROUND_ROBIN)
    assert sorted(a.replicas for a in uneven.values()) == [1, 1, 2]
    assert sum(a.served for a in uneven.values()) == pytest.approx(4.0)
    # a cheaper or more efficient variant never gives replicas to a less efficient one
    slow = {"ns/a": _Assignment(a100, 2, 2.0, False), "ns/b": _Assignment(None, 0, 0.0, False)}
    free_class = {**by_key, "ns/b": dataclasses.replace(by_key["ns/b"], service=FREEMIUM)}
    _spread(slow, free_class, options, SaturationPolicy.ROUND_ROBIN)
    assert slow["ns/a"].replicas == 2


def test_priority_round_robin_spreads_within_a_class_only() -> None:
    vs = [
        variant("p1", 180.0),
        variant("p2", 180.0),
        variant("f1", 60.0, service=FREEMIUM),
    ]
    plan = optimize(vs, ACCS, limited(SaturationPolicy.PRIORITY_ROUND_ROBIN), {A100: 4}, sizer=SIZER)
    premium = [plan.decisions[k].replicas for k in ("ns/p1", "ns/p2")]
    assert sum(premium) == 4  # Premium takes all four devices; nothing is moved to Freemium
    assert plan.decisions["ns/f1"].replicas == 0


def test_weighted_served_load_decides_between_classes() -> None:
    # one device left: Premium gains 1 req/s × 1; Freemium would gain 1 req/s × 0.1
    assert priority_weight(1) == 1.0 and priority_weight(10) == pytest.approx(0.1)
    assert priority_weight(0) == priority_weight(100) == pytest.approx(0.01)


def test_held_and_infeasible_variants_keep_their_devices() -> None:
    sizer = TableSizer({"A100": 1.0, "G2": "ITL target 24 ms unreachable"})
    vs = [
        variant("held", None, current_accelerator="A100", current_replicas=2),
        variant("stuck", 60.0, accs=("G2",), current_accelerator="A100", current_replicas=1),
        variant("new", 300.0),
    ]
    plan = optimize(vs, ACCS, limited(), {A100: 5}, sizer=sizer)
    assert plan.decisions["ns/held"].outcome is Outcome.HELD
    assert plan.decisions["ns/stuck"].outcome is Outcome.INFEASIBLE
    assert (plan.decisions["ns/stuck"].accelerator, plan.decisions["ns/stuck"].replicas) == ("A100", 1)
    new = plan.decisions["ns/new"]
    assert (new.replicas, new.outcome) == (2, Outcome.PARTIAL)
    assert plan.usage == {A100: 5}


def test_overcommitted_reservations_are_reported() -> None:
    vs = [variant("held", None, current_accelerator="A100", current_replicas=4)]
    plan = optimize(vs, ACCS, limited(), {A100: 2}, sizer=SIZER)
    (binding,) = plan.binding
    assert (binding.device, binding.used, binding.capacity) == (A100, 4, 2)


def test_idle_variants_get_their_minimum_when_capacity_is_left() -> None:
    vs = [variant("idle", 0.0, min_replicas=2), variant("busy", 120.0), variant("gone", 0.0, min_replicas=0)]
    plan = optimize(vs, ACCS, limited(), {A100: 4}, sizer=SIZER)
    assert (plan.decisions["ns/idle"].replicas, plan.decisions["ns/idle"].outcome) == (2, Outcome.FULL)
    assert plan.decisions["ns/busy"].replicas == 2
    assert plan.decisions["ns/gone"].replicas == 0
    tight = optimize(vs, ACCS, limited(), {A100: 3}, sizer=SIZER)
    assert tight.decisions["ns/busy"].replicas == 2  # load first
    assert tight.decisions["ns/idle"].outcome is Outcome.UNSERVED


def test_min_and_max_replicas_bound_partial_allocations() -> None:
    vs = [variant("a", 600.0, min_replicas=3, max_replicas=6)]
    plan = optimize(vs, ACCS, limited(), {A100: 20}, sizer=SIZER)
    (a,) = plan.decisions.values()
    assert (a.replicas, a.outcome) == (6, Outcome.PARTIAL)
    assert "limited by maxReplicas 6" in a.reason
    plan = optimize(vs, ACCS, limited(), {A100: 2}, sizer=SIZER)
    (a,) = plan.decisions.values()
    assert a.replicas == 0  # a partial allocation below minReplicas 3 is not offered


def test_device_type_without_capacity_counts_as_none() -> None:
    vs = [variant("a", 60.0, accs=("G2",))]
    plan = optimize(vs, ACCS, limited(), {A100: 8}, sizer=SIZER)
    (a,) = plan.decisions.values()
    assert a.outcome is Outcome.UNSERVED
    assert plan.binding[0].device == GAUDI


def test_shared_load_under_capacity() -> None:
    vs = [
        variant("on-a100", 120.0, current_accelerator="A100", keep_accelerator=True, share_load=True),
        variant(
            "on-g2", 120.0, accs=("G2",), current_accelerator="G2", keep_accelerator=True, share_load=True
        ),
    ]
    vs = [dataclasses.replace(v, model_id="shared") for v in vs]
    plan = optimize(vs, ACCS, limited(), {A100: 2, GAUDI: 8}, sizer=SIZER)
    a100, g2 = plan.decisions["ns/on-a100"], plan.decisions["ns/on-g2"]
    # 4 req/s: 2 A100 replicas (1 req/s each, 80) + 4 G2 replicas (0.5 each, 92): cheapest mix of 172
    assert (a100.replicas, g2.replicas) == (2, 4)
    assert a100.served_rate + g2.served_rate == pytest.approx(240.0)
    assert plan.total_cost == pytest.approx(172.0)


def _plan_pool(rate_rpm: float, *, kept_g2: int, current_g2: int = 8) -> Plan:
    """A model shared by an A100 variant (none running) and a G2 one running ``current_g2`` replicas,
    ``kept_g2`` of them kept by the scale-down stabilisation."""
    vs = [
        variant("on-a100", rate_rpm / 2, current_accelerator="A100", share_load=True),
        variant(
            "on-g2",
            rate_rpm / 2,
            accs=("G2",),
            current_accelerator="G2",
            current_replicas=current_g2,
            kept_replicas=kept_g2,
            share_load=True,
        ),
    ]
    vs = [dataclasses.replace(v, model_id="shared", min_replicas=0) for v in vs]
    return optimize(vs, ACCS, limited(), {A100: 8, GAUDI: 16}, sizer=SIZER)


def _pool(rate_rpm: float, *, kept_g2: int) -> dict[str, int]:
    """The replicas :func:`_plan_pool` plans per variant."""
    plan = _plan_pool(rate_rpm, kept_g2=kept_g2)
    return {k.split("/")[1]: d.replicas for k, d in plan.decisions.items()}


def test_a_pool_pays_only_for_replicas_beyond_those_the_stabilisation_keeps() -> None:
    # 4 req/s: 4 A100 replicas (160) are cheaper than 8 G2 (184), when nothing runs yet ...
    assert _pool(240.0, kept_g2=0) == {"on-a100": 4, "on-g2": 0}
    # ... but the 8 G2 replicas running now stay for the scale-down window whatever the plan says:
    # moving the load to A100 would pay for both meanwhile.
    assert _pool(240.0, kept_g2=8) == {"on-a100": 0, "on-g2": 8}
    reasons = {k.split("/")[1]: d.reason for k, d in _plan_pool(240.0, kept_g2=8).decisions.items()}
    assert (
        "8 replicas running, kept by the scale-down window, count at 5 % of their price" in reasons["on-g2"]
    )
    assert "lower cost (counting the replicas scale-down windows keep)" in reasons["on-a100"]
    # More load: what the kept replicas cannot serve goes where it is cheapest (1 A100 for 1 req/s).
    assert _pool(300.0, kept_g2=8) == {"on-a100": 1, "on-g2": 8}


def test_kept_replicas_do_not_hold_a_scale_down() -> None:
    # 2 req/s: of the plans that add nothing beyond the kept replicas the smallest wins, so that the
    # stabilisation window ends and the variant scales down to what the load needs.
    assert _pool(120.0, kept_g2=8) == {"on-a100": 0, "on-g2": 4}


def test_kept_replicas_must_be_among_the_current_ones() -> None:
    with pytest.raises(ConfigError, match="kept replicas"):
        variant("a", 60.0, current_accelerator="A100", current_replicas=1, kept_replicas=2)


# --- MILP vs WVA's greedy on seeded random instances (real analyzer) ----------------------------------

CATALOGUE = [
    ("A100", A100, 40.0, 1.3, 80),
    ("G2", GAUDI, 23.0, 0.9, 96),
    ("L40S", "NVIDIA-L40S", 32.0, 1.0, 48),
    ("H100", "NVIDIA-H100-80GB-HBM3", 100.0, 2.6, 80),
]
CLASSES = [
    ServiceTarget("Premium", 1, SLO(ttft=1000, itl=60)),
    ServiceTarget("Standard", 5, SLO(ttft=2000, itl=90)),
    ServiceTarget("Freemium", 10, SLO(ttft=3000, itl=150)),
]


def random_instance(seed: int) -> tuple[list[VariantInput], dict[str, AcceleratorType], dict[str, int]]:
    rng = random.Random(seed)
    accelerators = {name: AcceleratorType(name, device, cost) for name, device, cost, _, _ in CATALOGUE}
    variants = []
    for i in range(12):
        size = rng.choice([8, 13, 34, 70])
        profiles = []
        for name, _, _, speed, memory in CATALOGUE:
            count = 1
            while size * 2.4 > memory * count:
                count *= 2
            scale = size / 8 / speed / count**0.7
            alpha = 6.0 * scale * rng.uniform(0.9, 1.1)
            profiles.append(Profile(name, count, 32, ServiceParms(alpha, alpha / 120, alpha, 0.002 * scale)))
        current = rng.choice(profiles)
        variants.append(
            VariantInput(
                f"v{i:02d}",
                "ns",
                f"m{i}",
                rng.choice(CLASSES),
                tuple(profiles),
                Load(rng.lognormvariate(4.5, 1.0), rng.randint(50, 1500), rng.randint(50, 400)),
                current_accelerator=current.accelerator,
                current_replicas=rng.randint(0, 3),
            )
        )
    unlimited = optimize(variants, accelerators, OptimizerConfig(batch_sizes=1))
    need: dict[str, int] = {}
    for decision in unlimited.decisions.values():
        assert decision.accelerator is not None
        device = accelerators[decision.accelerator].device
        profile = next(v for v in variants if v.key == decision.key).profile(decision.accelerator)
        assert profile is not None
        need[device] = need.get(device, 0) + decision.replicas * profile.acc_count
    capacity = {device: int(count * rng.uniform(0.3, 0.8)) for device, count in need.items()}
    return variants, accelerators, capacity


def weighted(plan: Plan, variants: list[VariantInput]) -> float:
    return served_by_priority(plan, variants)[0]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("policy", list(SaturationPolicy))
def test_milp_is_never_worse_than_wva_greedy(seed: int, policy: SaturationPolicy) -> None:
    variants, accelerators, capacity = random_instance(seed)
    for delayed in (False, True):
        config = OptimizerConfig(
            unlimited=False,
            saturation_policy=policy,
            delayed_best_effort=delayed,
            batch_sizes=1,
            mip_rel_gap=1e-6,
        )
        milp = optimize(variants, accelerators, config, capacity)
        greedy = plan_greedy(variants, accelerators, config, capacity)
        for plan in (milp, greedy):
            for device, used in plan.usage.items():
                assert used <= capacity.get(device, 0)
        served_milp, served_greedy = weighted(milp, variants), weighted(greedy, variants)
        assert served_milp >= served_greedy * (1 - 1e-6) - 1e-9
        if served_milp <= served_greedy * (1 + 1e-6) + 1e-9:
            assert milp.total_cost <= greedy.total_cost * (1 + 1e-6) + 1e-9
