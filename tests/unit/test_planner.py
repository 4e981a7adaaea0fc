"""The planner (the operator's, the simulator's and ``plan``'s): the optimizer's code path with the
operator's inputs (sloClassRef, shared load, held variants, limited mode with the GPU inventory)."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from variant_autoscaler.adapters.inventory import node_gpus
from variant_autoscaler.api.config import MainConfig, parse_main_config
from variant_autoscaler.api.configmaps import parse_service_classes
from variant_autoscaler.api.v1alpha1 import VariantAutoscaling
from variant_autoscaler.planner import (
    NamespaceCap,
    ObservedLoad,
    OptimizerPlanner,
    PlannedVariant,
    PlanOutcome,
    PlanRequest,
    SloClassRef,
    planned_from_va,
    resolve_service_class,
)
from vatesting.fakes import NS, VA, Harness, load_yaml
from vatesting.planning import SHIPPED_CLASSES, plan_request


def _va(name: str = VA, **spec: Any) -> VariantAutoscaling:
    body = load_yaml("deploy/samples/variantautoscaling.yaml")
    body["metadata"]["name"] = name
    body["spec"].update(spec)
    return VariantAutoscaling.model_validate(body)


@pytest.mark.parametrize(
    ("ref", "model", "expected"),
    [
        ({"name": "premium", "key": "opt-125m"}, "default/default", "class Premium (sloClassRef)"),
        (
            {"name": "service-classes-config", "key": "freemium.yaml"},
            "meta/llama0-7b",
            "class Freemium (sloClassRef)",
        ),
        # The named class has no entry for the model: found by modelID instead, as WVA does.
        (
            {"name": "service-classes-config", "key": "freemium.yaml"},
            "default/default",
            "class Premium (by modelID)",
        ),
        ({"name": "nowhere", "key": "x"}, "ibm/granite-13b", "class Freemium (by modelID)"),
    ],
)
def test_slo_class_resolution(ref: dict[str, str], model: str, expected: str) -> None:
    resolved = resolve_service_class(
        model, SloClassRef(ref["name"], ref["key"]), SHIPPED_CLASSES, "service-classes-config"
    )
    assert resolved is not None and resolved[1] == expected


def test_unknown_model_has_no_class() -> None:
    ref = SloClassRef("premium", "opt-125m")
    classes = SHIPPED_CLASSES
    assert resolve_service_class("nobody/knows", ref, classes, "service-classes-config") is None


def _planned(
    va: VariantAutoscaling,
    rpm: float,
    *,
    share: bool = False,
    held: bool = False,
    replicas: int = 1,
    config: MainConfig | None = None,
) -> PlannedVariant:
    planned = planned_from_va(
        va,
        namespace=NS,
        accelerator="A100",
        current_replicas=replicas,
        current_max_batch=None,
        load=None if held else ObservedLoad(rpm, 100.0, 128.0),
        config=config or MainConfig(),
    )
    assert (planned.share_group is not None) == share
    return planned


def _request(*variants: PlannedVariant, capacity: dict[str, int] | None = None, **cm: str) -> PlanRequest:
    return plan_request(*variants, capacity=capacity, **cm)


def test_shared_load_is_split_and_not_double_counted() -> None:
    alone = OptimizerPlanner().plan(_request(_planned(_va("a"), 600.0)))
    a_alone = alone.decisions[(NS, "a")].replicas
    # Two variants sharing the model: together they need about what one needs for the whole load,
    # not twice as much (WVA would give each of them the whole load).
    shared = OptimizerPlanner().plan(
        _request(
            _planned(_va("a", shareModelLoad=True), 600.0, share=True),
            _planned(_va("b", shareModelLoad=True), 600.0, share=True),
        )
    )
    together = shared.decisions[(NS, "a")].replicas + shared.decisions[(NS, "b")].replicas
    assert a_alone <= together <= a_alone + 1
    unshared = OptimizerPlanner().plan(_request(_planned(_va("a"), 600.0), _planned(_va("b"), 600.0)))
    assert unshared.decisions[(NS, "a")].replicas + unshared.decisions[(NS, "b")].replicas == 2 * a_alone


def test_held_variants_are_not_replanned() -> None:
    outcome = OptimizerPlanner().plan(_request(_planned(_va(), 600.0, held=True, replicas=3)))
    assert (NS, VA) not in outcome.decisions
    assert "no load metrics" in outcome.failures[(NS, VA)]


def test_limited_mode_respects_the_inventory() -> None:
    heavy = _planned(_va(), 2000.0)
    unlimited = OptimizerPlanner().plan(_request(heavy))
    need = unlimited.decisions[(NS, VA)].replicas
    assert need > 2
    limited = OptimizerPlanner().plan(
        _request(
            heavy,
            capacity={"NVIDIA-A100-PCIE-80GB": 2},
            OPTIMIZER_MODE="limited",
            SATURATION_POLICY="PriorityExhaustive",
        )
    )
    plan = limited.decisions[(NS, VA)]
    assert plan.replicas == 2 and plan.reason.startswith("partial")


def test_a_lower_priority_yields_the_gpus_the_plan_gives_a_higher_one() -> None:
    """Limited mode: when the plan grows a Premium variant onto GPUs a Freemium variant holds, the plan
    says how many replicas the Freemium variant gives up at once (core/policy.py rule 3e)."""
    premium = _planned(_va("premium"), 1500.0, replicas=2)
    freemium = _planned(_va("freemium", modelID="ibm/granite-13b"), 60.0, replicas=4)
    limited = OptimizerPlanner().plan(
        _request(
            premium,
            freemium,
            capacity={"NVIDIA-A100-PCIE-80GB": 6},
            OPTIMIZER_MODE="limited",
            SATURATION_POLICY="PriorityExhaustive",
        )
    )
    grown, shrunk = limited.decisions[(NS, "premium")].replicas, limited.decisions[(NS, "freemium")].replicas
    assert grown > 2 and shrunk < 4
    # 6 GPUs: what Premium adds beyond the free 0 comes out of Freemium
    assert limited.yields == {(NS, "freemium"): grown - 2}
    # With GPUs to spare, or in unlimited mode, nobody gives anything up
    roomy = OptimizerPlanner().plan(
        _request(premium, freemium, capacity={"NVIDIA-A100-PCIE-80GB": 64}, OPTIMIZER_MODE="limited")
    )
    assert roomy.yields == {}
    assert OptimizerPlanner().plan(_request(premium, freemium)).yields == {}


def test_infeasible_slo_is_a_failure_with_the_reason() -> None:
    classes = {"tight.yaml": "name: Tight\npriority: 1\ndata:\n  - model: default/default\n    slo-tpot: 5\n"}
    request = _request(_planned(_va(sloClassRef={"name": "Tight", "key": "x"}), 60.0))
    request = PlanRequest(
        request.variants, request.accelerators, parse_service_classes(classes), request.optimizer, None
    )
    outcome = OptimizerPlanner().plan(request)
    assert (NS, VA) not in outcome.decisions
    assert "ITL" in outcome.failures[(NS, VA)]


def _limited_on_four_a100s() -> Harness:
    """The engine in limited mode (patch) on two nodes of two A100s each."""
    nodes = [
        node_gpus(
            {
                "metadata": {
                    "name": f"a100-{i}",
                    "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-PCIE-80GB"},
                },
                "status": {
                    "allocatable": {"nvidia.com/gpu": "2"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
        for i in range(2)
    ]
    h = Harness(
        OPTIMIZER_MODE="limited", SATURATION_POLICY="PriorityExhaustive", DEFAULT_ACTUATION_MODE="patch"
    )
    h.engine._nodes = lambda: nodes
    return h


async def test_engine_in_limited_mode_counts_gpus_held_by_other_workloads() -> None:
    h = _limited_on_four_a100s()
    h.add_va(replicas=1)
    # Someone else's job holds 3 of the 4 A100s.
    h.kube.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "training", "namespace": "ml"},
            "spec": {
                "nodeName": "a100-0",
                "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
            },
            "status": {"phase": "Running"},
        }
    )
    h.kube.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "notebook", "namespace": "ml"},
            "spec": {
                "nodeName": "a100-1",
                "containers": [{"name": "n", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
            "status": {"phase": "Running"},
        }
    )
    # Our own replica's pod is not subtracted: the plan re-allocates it.
    h.kube.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "ours", "namespace": NS, "labels": {"app": VA}},
            "spec": {
                "nodeName": "a100-1",
                "containers": [{"name": "v", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
            "status": {"phase": "Running"},
        }
    )
    h.load(2000.0)
    await h.engine.run_cycle()
    desired = h.status()["desiredOptimizedAlloc"]
    assert desired["numReplicas"] == 1 and desired["reason"].startswith("partial")
    assert h.replicas() == 1
    # The training job ends: capacity frees up and the next cycle uses it.
    del h.kube.objects[("pods", "ml", "training")]
    await h.engine.run_cycle()
    assert h.status()["desiredOptimizedAlloc"]["numReplicas"] == 3
    assert h.replicas() == 3


async def test_engine_gives_a_higher_priority_the_gpus_at_once() -> None:
    """Limited mode on 4 A100s: Freemium holds them while Premium's load grows; Freemium gives up the GPUs
    Premium is planned onto at once, though its scale-down stabilisation window (patch mode: 300 s)
    would keep them for minutes (core/policy.py rule 3e)."""
    h = _limited_on_four_a100s()
    h.add_va(replicas=1)
    free = load_yaml("deploy/samples/variantautoscaling.yaml")
    free["metadata"]["name"] = "granite"
    h.add_va(free, replicas=3, modelID="ibm/granite-13b")
    h.load(6.0)
    h.load(450.0, model="ibm/granite-13b")
    await h.engine.run_cycle()
    # Freemium's load has all four GPUs (limited mode weighs load by priority: 6 req/min of Premium
    # weigh less than 450 of Freemium); Premium keeps its minimum
    assert (h.replicas(), h.replicas("granite")) == (1, 4)
    # Premium's load grows past what one replica serves; Freemium's falls
    h.advance(60)
    h.load(2000.0)
    h.load(60.0, model="ibm/granite-13b")
    await h.engine.run_cycle()
    premium, freemium = h.replicas(), h.replicas("granite")
    assert premium >= 3 and freemium == max(1, 4 - premium)  # its minReplicas is 1
    reason = h.status("granite")["desiredOptimizedAlloc"]["reason"]
    assert "given up at once to higher-priority variants" in reason


def test_keep_accelerator_off_lets_the_plan_pick_another_profile() -> None:
    va = _va()
    kept = OptimizerPlanner().plan(_request(_planned(va, 600.0)))
    assert kept.decisions[(NS, VA)].accelerator == "A100"
    config = parse_main_config({"KEEP_ACCELERATOR": "false"})
    free = OptimizerPlanner().plan(_request(_planned(copy.deepcopy(va), 600.0, config=config)))
    assert free.decisions[(NS, VA)].accelerator in {"A100", "MI300X", "G2"}
    assert "feasible accelerator" in free.decisions[(NS, VA)].reason


async def test_limited_mode_without_an_inventory_holds() -> None:
    h = Harness(OPTIMIZER_MODE="limited", DEFAULT_ACTUATION_MODE="patch")
    h.kube.forbid = {"pods"}  # RBAC without pods list: the inventory cannot be computed
    h.add_va(replicas=2)
    h.load(2000.0)
    report = await h.engine.run_cycle()
    assert report.plan_status == "error"
    cond = h.status()["conditions"]
    ready = next(c for c in cond if c["type"] == "OptimizationReady")
    assert ready["reason"] == "OptimizationFailed" and "GPU inventory unavailable" in ready["message"]
    assert h.replicas() == 2 and h.status()["desiredOptimizedAlloc"]["numReplicas"] == 2


def test_a_namespace_cap_bounds_its_variants_and_its_gpus_go_to_other_namespaces() -> None:
    """WVA's namespace-scoped quota: team-a may hold 3 A100s. Its variant is bounded to 3 replicas and
    says why; the GPUs it may not take go to team-b's variant, in the same plan."""
    a100 = "NVIDIA-A100-PCIE-80GB"
    a = replace(_planned(_va("a"), 2000.0), key=("team-a", "a"))
    b = replace(_planned(_va("b", modelID="ibm/granite-13b"), 2000.0), key=("team-b", "b"))
    caps = {"team-a": NamespaceCap({a100: 3}, "the namespace GPU quota ('tenants')")}

    def plan(capacity: int, *variants: PlannedVariant, **kw: object) -> PlanOutcome:
        request = _request(
            *variants,
            capacity={a100: capacity},
            OPTIMIZER_MODE="limited",
            SATURATION_POLICY="PriorityExhaustive",
        )
        return OptimizerPlanner().plan(replace(request, **kw))  # type: ignore[arg-type]

    for capacity in (64, 10):
        free = plan(capacity, a, b)
        capped = plan(capacity, a, b, namespace_caps=caps)
        da, db = capped.decisions[("team-a", "a")], capped.decisions[("team-b", "b")]
        assert free.decisions[("team-a", "a")].replicas > 3 and da.replicas == 3
        assert "limited by the namespace GPU quota ('tenants') to 3" in da.reason
        assert f"namespace team-a may hold 3 {a100}, 1 held now" in da.reason
        # team-b gets what team-a may not take (more than it had beside an uncapped team-a)
        assert db.replicas > free.decisions[("team-b", "b")].replicas
        assert "quota" not in db.reason
        assert da.replicas + db.replicas <= capacity
        assert capped.room[("team-a", "a")] == 0
    # What team-a holds already stays (a cap never takes running replicas): 5 held, cap 3.
    held = plan(64, replace(a, current_replicas=5), b, namespace_caps=caps)
    assert held.decisions[("team-a", "a")].replicas == 5
    assert "5 held now" in held.decisions[("team-a", "a")].reason
    # A namespace without a cap, or a cap on another device type, changes nothing.
    other = {"team-c": NamespaceCap({a100: 1}), "team-a": NamespaceCap({"NVIDIA-H100-80GB-HBM3": 0})}
    assert plan(10, a, b, namespace_caps=other).decisions == plan(10, a, b).decisions
