"""The planner's saturation path, pure (what the simulator and ``plan`` would call too): profile-less
variants sized by saturation over their model, the floor under the model's decisions, scale to zero,
variantCost as the replica cost, and the queueing-model ConfigMap's SLOs."""

from __future__ import annotations

import math
from dataclasses import replace

from variant_autoscaler.api.config import parse_main_config
from variant_autoscaler.api.configmaps import ServiceClasses
from variant_autoscaler.api.saturation_config import AnalyzerConfig
from variant_autoscaler.api.v1alpha1 import VariantAutoscaling
from variant_autoscaler.core.inferred_slo import infer_slo
from variant_autoscaler.core.model import ModelTarget, SaturationPolicy
from variant_autoscaler.core.queueing import QueueAnalyzer, RequestSize
from variant_autoscaler.core.saturation import V1, V2, ReplicaMetrics
from variant_autoscaler.core.sizing import IdleInput, SaturationInput, SizingMember, size_group
from variant_autoscaler.planner import (
    ObservedLoad,
    OptimizerPlanner,
    PlannedVariant,
    PlanRequest,
    planned_from_va,
)
from vatesting.fakes import NS, load_yaml
from vatesting.planning import SHIPPED_CLASSES, plan_request

MODEL = "default/default"
V1_ONLY = (AnalyzerConfig(V1),)


def _hot(replicas: int, kv: float = 0.9, waiting: float = 0.0) -> SaturationInput:
    return SaturationInput(
        ready=replicas, metrics=tuple(ReplicaMetrics(kv, waiting) for _ in range(replicas))
    )


def _bare(
    name: str, replicas: int, sat: SaturationInput | None, *, cost: float = 10.0, **kw: object
) -> PlannedVariant:
    return PlannedVariant(
        key=(NS, name),
        model_id=MODEL,
        profiles=(),
        accelerator=None,
        current_replicas=replicas,
        load=ObservedLoad(60.0, 100.0, 128.0),
        min_replicas=1,
        max_replicas=None,
        variant_cost=cost,
        saturation=sat,
        analyzers=V1_ONLY,
        **kw,  # type: ignore[arg-type]
    )


def _request(
    *variants: PlannedVariant, floor: bool = True, classes: ServiceClasses = SHIPPED_CLASSES
) -> PlanRequest:
    return plan_request(*variants, classes=classes, saturation_floor=floor)


def test_profile_less_variants_are_sized_by_saturation_cheapest_first() -> None:
    outcome = OptimizerPlanner().plan(
        _request(_bare("dear", 1, _hot(1), cost=20.0), _bare("cheap", 1, _hot(1), cost=5.0))
    )
    assert outcome.status == "saturation"
    cheap, dear = outcome.decisions[(NS, "cheap")], outcome.decisions[(NS, "dear")]
    assert (cheap.replicas, dear.replicas) == (2, 1)
    assert cheap.decided_by == "saturation-v1" and cheap.reason.startswith("saturation-v1: ")
    assert cheap.cost == 10.0  # 2 replicas x variantCost 5
    assert cheap.ttft_ms is None  # saturation predicts no latency


def test_without_fresh_saturation_metrics_a_profile_less_variant_is_not_decided() -> None:
    outcome = OptimizerPlanner().plan(_request(_bare("a", 2, SaturationInput(ready=2))))
    assert (NS, "a") not in outcome.decisions
    assert "no fresh saturation metrics" in outcome.failures[(NS, "a")]


def sample_va(name: str) -> VariantAutoscaling:
    body = load_yaml("deploy/samples/variantautoscaling.yaml")
    body["metadata"]["name"] = name
    return VariantAutoscaling.model_validate(body)


def _sample(name: str, rpm: float, sat: SaturationInput | None, **cm: str) -> PlannedVariant:
    planned = planned_from_va(
        sample_va(name),
        namespace=NS,
        accelerator="A100",
        current_replicas=1,
        current_max_batch=None,
        load=ObservedLoad(rpm, 100.0, 128.0),
        config=parse_main_config(cm),
    )
    return replace(planned, saturation=sat, analyzers=V1_ONLY)


def test_the_floor_raises_and_never_lowers_the_models_decision() -> None:
    model_only = OptimizerPlanner().plan(_request(_sample("a", 30.0, _hot(1)), floor=False))
    floored = OptimizerPlanner().plan(_request(_sample("a", 30.0, _hot(1))))
    assert model_only.decisions[(NS, "a")].replicas == 1
    up = floored.decisions[(NS, "a")]
    assert up.replicas == 2 and up.decided_by == "saturation-v1"
    # Saturation wanting fewer (idle cache) does not lower a model that wants more.
    busy = OptimizerPlanner().plan(_request(_sample("a", 600.0, _hot(1, kv=0.01))))
    alone = OptimizerPlanner().plan(_request(_sample("a", 600.0, _hot(1, kv=0.01)), floor=False))
    assert busy.decisions[(NS, "a")] == alone.decisions[(NS, "a")]


def test_a_floor_without_saturation_metrics_keeps_the_models_exact_plan() -> None:
    on = OptimizerPlanner().plan(_request(_sample("a", 400.0, None)))
    off = OptimizerPlanner().plan(_request(_sample("a", 400.0, None), floor=False))
    assert on.decisions == off.decisions


def test_variant_cost_is_the_replica_cost_and_needs_no_accelerator_cost() -> None:
    planned = replace(_sample("a", 60.0, None), variant_cost=3.0)
    no_costs = replace(_request(planned, floor=False), accelerators={})
    decision = OptimizerPlanner().plan(no_costs).decisions[(NS, "a")]
    assert decision.cost == 3.0 * decision.replicas


def test_queueing_model_slos_when_no_class_has_the_model() -> None:
    planned = replace(_sample("a", 60.0, None), default_slo=ModelTarget(MODEL, itl=24.0, ttft=500.0))
    outcome = OptimizerPlanner().plan(_request(planned, floor=False, classes=ServiceClasses(())))
    assert "wva-queueing-model-config" in outcome.decisions[(NS, "a")].reason


def test_slos_inferred_with_slo_multiplier_when_neither_a_class_nor_the_configmap_states_them() -> None:
    where = "wva-queueing-model-config[default]"
    planned = replace(_sample("a", 600.0, None), slo_multiplier=(3.0, where))
    outcome = OptimizerPlanner().plan(_request(planned, floor=False, classes=ServiceClasses(())))
    decision = outcome.decisions[(NS, "a")]
    assert f"SLOs inferred with sloMultiplier 3 ({where})" in decision.reason
    assert "67 % of what one A100 replica sustains" in decision.reason
    profile = next(p for p in planned.profiles if p.accelerator == "A100")
    inferred = infer_slo(profile, 3.0, 100.0, 128.0)
    capacity = QueueAnalyzer(
        profile.max_batch_size, None, profile.parms, RequestSize(100.0, 128.0)
    ).rate_range[1]
    # Each replica at about 2/3 of its capacity: 10 req/s over (2/3 x capacity), rounded up.
    assert decision.replicas == math.ceil(10.0 / (capacity * 2 / 3) - 0.02)
    assert decision.itl_ms is not None and decision.itl_ms <= inferred.slo.itl
    # Stated SLOs win: the ConfigMap's own targets, then a service class.
    stated = replace(planned, default_slo=ModelTarget(MODEL, itl=24.0, ttft=500.0))
    reason = OptimizerPlanner().plan(_request(stated, floor=False, classes=ServiceClasses(()))).decisions
    assert "sloMultiplier" not in reason[(NS, "a")].reason
    by_class = OptimizerPlanner().plan(_request(planned, floor=False)).decisions[(NS, "a")]
    assert "sloMultiplier" not in by_class.reason and "Premium" in by_class.reason


def test_without_request_lengths_inferred_slos_leave_the_variant_to_saturation_and_say_why() -> None:
    planned = replace(
        _sample("a", 600.0, None),
        load=ObservedLoad(600.0, 0.0, 0.0),
        slo_multiplier=(3.0, "wva-queueing-model-config[default]"),
    )
    outcome = OptimizerPlanner().plan(_request(planned, floor=False, classes=ServiceClasses(())))
    assert (NS, "a") not in outcome.decisions  # no fresh saturation metrics either: not decided
    assert "need the request lengths it serves" in outcome.failures[(NS, "a")]


def test_idle_goes_to_zero_only_on_a_measured_zero() -> None:
    idle = IdleInput(enabled=True, requests=0.0, retention_seconds=600.0)
    quiet = _hot(1, kv=0.0)
    members = [
        SizingMember("a", 1, 1.0, 0, None, sized_by_model=False, saturation=quiet, idle=idle),
        SizingMember("b", 1, 1.0, 0, None, False, saturation=quiet, idle=replace(idle, requests=None)),
        SizingMember("c", 1, 1.0, 1, None, False, saturation=quiet, idle=idle),  # minimum 1
        SizingMember("d", 1, 1.0, 0, None, False, saturation=_hot(1, 0.0, waiting=1), idle=idle),
    ]
    out = size_group(members, V1_ONLY, floor=True)
    assert out["a"].replicas == 0 and out["a"].decided_by == "scale-to-zero"
    assert all(out[k].replicas == 1 for k in "bcd")


def test_v2_sizes_by_token_capacity() -> None:
    sat = SaturationInput(ready=1, metrics=(ReplicaMetrics(0.95, 0.0),), kv_tokens_per_replica=16000.0)
    members = [SizingMember("a", 1, 1.0, 1, None, sized_by_model=False, saturation=sat)]
    out = size_group(members, (AnalyzerConfig(V2),), floor=True)
    assert out["a"].replicas == 2 and out["a"].decided_by == "saturation-v2"


def test_a_variant_with_a_profile_but_no_slos_is_sized_by_saturation() -> None:
    # WVA v0.4 shipped no service classes and sized every variant by saturation.
    outcome = OptimizerPlanner().plan(_request(_sample("a", 60.0, _hot(1)), classes=ServiceClasses(())))
    decision = outcome.decisions[(NS, "a")]
    assert decision.replicas == 2 and decision.decided_by == "saturation-v1"
    assert "no service class has an entry for model 'default/default'" in decision.reason
    held = OptimizerPlanner().plan(_request(_sample("a", 60.0, None), classes=ServiceClasses(())))
    assert "no service class" in held.failures[(NS, "a")]


def test_the_floor_needs_every_ready_replica_to_report_and_ignores_unapplied_model_decisions() -> None:
    def member(key: str, sat: SaturationInput, model: int) -> SizingMember:
        return SizingMember(key, 2, 1.0, 1, None, sized_by_model=True, model=(model, "model"), saturation=sat)

    # One ready replica of the model does not report: saturation cannot judge, the model goes down.
    half = SaturationInput(ready=2, metrics=(ReplicaMetrics(0.1, 0.0),))
    assert size_group([member("a", half, 1)], V1_ONLY, floor=True)["a"].replicas == 1
    # Every replica reports, and a model decision not applied yet (metrics mode, no HPA) does not freeze
    # the floor: both agree on going down.
    seen = SaturationInput(ready=2, metrics=(ReplicaMetrics(0.1, 0.0),) * 2, previous_desired=5)
    assert size_group([member("a", seen, 1)], V1_ONLY, floor=True)["a"].decided_by == "model+saturation-v1"
    # While a replica starts, saturation holds the model's scale-down (nothing moves while starting).
    starting = SaturationInput(ready=1, metrics=(ReplicaMetrics(0.1, 0.0),))
    held = size_group([member("a", starting, 1)], V1_ONLY, floor=True)["a"]
    assert held.replicas == 2 and held.decided_by == "saturation-v1"


def test_saturation_does_not_hold_a_model_sending_a_variant_to_zero() -> None:
    # WVA 2025-10's scale to zero (WVA_SCALE_TO_ZERO, no load): the model's 0 stands; saturation's own
    # floor is one replica.
    quiet = _hot(1, kv=0.0)
    allowed = SizingMember("a", 1, 1.0, 0, None, sized_by_model=True, model=(0, "no load"), saturation=quiet)
    assert size_group([allowed], V1_ONLY, floor=True)["a"].replicas == 0
    at_one = replace(allowed, min_replicas=1, model=(1, "min"))
    assert size_group([at_one], V1_ONLY, floor=True)["a"].replicas == 1


def test_no_floor_in_limited_mode() -> None:
    # The plan is bounded by the GPUs there are; saturation does not count them.
    limited = replace(_request(_sample("a", 30.0, _hot(1))), capacity={"NVIDIA-A100-PCIE-80GB": 8})
    limited = replace(limited, optimizer=replace(limited.optimizer, unlimited=False))
    decision = OptimizerPlanner().plan(limited).decisions[(NS, "a")]
    assert decision.replicas == 1 and decision.decided_by == "optimizer"


A100 = "NVIDIA-A100-PCIE-80GB"


def _limited(*variants: PlannedVariant, gpus: int) -> PlanRequest:
    request = replace(_request(*variants), capacity={A100: gpus})
    return replace(request, optimizer=replace(request.optimizer, unlimited=False))


def _saturated(name: str, model: str, kv: float, *, replicas: int = 1) -> PlannedVariant:
    # A profile-less variant of its own model, two A100s per replica (its pod template's request).
    return replace(_bare(name, replicas, _hot(replicas, kv=kv)), model_id=model, gpus=("A100", 2))


def test_wvas_limiter_gives_saturations_scale_ups_the_gpus_left_most_saturated_first() -> None:
    hot, warm = _saturated("hot", "m/hot", 0.97), _saturated("warm", "m/warm", 0.9)
    # 10 GPUs: 4 held by the two replicas, 6 free: both scale-ups fit.
    roomy = OptimizerPlanner().plan(_limited(hot, warm, gpus=10)).decisions
    assert (roomy[(NS, "hot")].replicas, roomy[(NS, "warm")].replicas) == (2, 2)
    assert "limited by the GPU inventory" not in roomy[(NS, "warm")].reason
    # 7 GPUs: 3 free, one replica of two GPUs: the more saturated variant gets it.
    tight = OptimizerPlanner().plan(_limited(warm, hot, gpus=7)).decisions
    assert (tight[(NS, "hot")].replicas, tight[(NS, "warm")].replicas) == (2, 1)
    why = tight[(NS, "warm")]
    assert "limited by the GPU inventory to 1 (asked 2)" in why.reason and why.cost == 10.0
    assert why.decided_by == "saturation-v1"
    # Nothing free: neither grows, and nothing is taken from running replicas.
    full = OptimizerPlanner().plan(_limited(hot, warm, gpus=4)).decisions
    assert (full[(NS, "hot")].replicas, full[(NS, "warm")].replicas) == (1, 1)


def test_the_limiter_leaves_unknown_gpus_and_unlimited_mode_alone() -> None:
    unknown = replace(_saturated("a", "m/a", 0.97), gpus=None)
    assert OptimizerPlanner().plan(_limited(unknown, gpus=0)).decisions[(NS, "a")].replicas == 2
    unlimited = _request(_saturated("a", "m/a", 0.97))
    assert OptimizerPlanner().plan(unlimited).decisions[(NS, "a")].replicas == 2


def test_the_gpus_saturation_variants_hold_are_not_the_model_plans_to_give() -> None:
    busy = _sample("model", 6000.0, None)
    exhaustive = SaturationPolicy.PRIORITY_EXHAUSTIVE  # partial allocations, to see the bound
    request = _limited(busy, gpus=8)
    request = replace(request, optimizer=replace(request.optimizer, saturation_policy=exhaustive))
    alone = OptimizerPlanner().plan(request).decisions[(NS, "model")]
    assert alone.replicas == 8  # the load wants more than the inventory: all of it
    held = _saturated("sat", "m/sat", 0.5, replicas=3)
    beside = OptimizerPlanner().plan(replace(request, variants=(*request.variants, held))).decisions
    # Three replicas of two GPUs each are held by the saturation-sized variant: two A100s are left.
    assert beside[(NS, "model")].replicas == 2
    assert beside[(NS, "sat")].replicas == 3
