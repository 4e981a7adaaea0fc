"""Namespace GPU caps in the one plan (``namespace_caps.py``): properties over random clusters."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from variant_autoscaler.api.config import MainConfig
from variant_autoscaler.api.v1alpha1 import VariantAutoscaling
from variant_autoscaler.planner import (
    NamespaceCap,
    ObservedLoad,
    OptimizerPlanner,
    PlannedVariant,
    PlanOutcome,
    planned_from_va,
)
from vatesting.fakes import load_yaml
from vatesting.planning import plan_request

A100 = "NVIDIA-A100-PCIE-80GB"
G2 = "Intel-Gaudi-2-96GB"
DEVICES = {"A100": A100, "G2": G2, "MI300X": "AMD-MI300X-192GB"}
MODELS = ("default/default", "ibm/granite-13b")


def _variant(
    namespace: str, name: str, model: str, accelerator: str, replicas: int, rpm: float
) -> PlannedVariant:
    body: dict[str, Any] = load_yaml("deploy/samples/variantautoscaling.yaml")
    body["metadata"].update(name=name, namespace=namespace)
    body["spec"]["modelID"] = model
    va = VariantAutoscaling.model_validate(body)
    planned = planned_from_va(
        va,
        namespace=namespace,
        accelerator=accelerator,
        current_replicas=replicas,
        current_max_batch=None,
        load=ObservedLoad(rpm, 100.0, 128.0),
        config=MainConfig(),
    )
    return planned


_variants = hs.lists(
    hs.tuples(
        hs.sampled_from(("team-a", "team-b", "team-c")),
        hs.sampled_from(MODELS),
        hs.sampled_from(("A100", "G2")),
        hs.integers(0, 4),
        hs.sampled_from((30.0, 300.0, 1200.0)),
        hs.booleans(),
    ),
    min_size=1,
    max_size=5,
)


def _held(variants: tuple[PlannedVariant, ...], namespace: str, device: str) -> int:
    return sum(
        v.current_replicas
        for v in variants
        if v.key[0] == namespace and DEVICES[v.accelerator or ""] == device
    )


def _used(outcome: PlanOutcome, variants: tuple[PlannedVariant, ...], namespace: str, device: str) -> int:
    total = 0
    for v in variants:
        if v.key[0] != namespace:
            continue
        d = outcome.decisions.get(v.key)
        on, replicas = (d.accelerator, d.replicas) if d is not None else (v.accelerator, v.current_replicas)
        if DEVICES.get(on or "") == device:
            total += replicas
    return total


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=_variants,
    caps=hs.dictionaries(hs.sampled_from(("team-a", "team-b")), hs.integers(0, 6), min_size=1),
    a100=hs.integers(4, 24),
    g2=hs.integers(0, 8),
)
def test_no_namespace_grows_past_its_cap_and_none_loses_a_running_replica_to_it(
    specs: list[tuple[str, str, str, int, float, bool]], caps: dict[str, int], a100: int, g2: int
) -> None:
    variants = tuple(
        replace(_variant(ns, f"v{i}", model, acc, replicas, rpm), keep_accelerator=keep)
        for i, (ns, model, acc, replicas, rpm, keep) in enumerate(specs)
    )
    request = plan_request(
        *variants,
        capacity={A100: a100, G2: g2},
        OPTIMIZER_MODE="limited",
        SATURATION_POLICY="PriorityExhaustive",
    )
    capped = replace(request, namespace_caps={ns: NamespaceCap({A100: cap}) for ns, cap in caps.items()})
    outcome = OptimizerPlanner().plan(capped)
    for ns, cap in caps.items():
        assert _used(outcome, variants, ns, A100) <= max(cap, _held(variants, ns, A100))
    # A cap never makes a variant fail to be planned (what the plan without caps decides, it decides).
    assert set(outcome.failures) <= set(OptimizerPlanner().plan(request).failures)
    # The whole plan stays within the inventory.
    for device, count in ((A100, a100), (G2, g2)):
        used = sum(_used(outcome, variants, ns, device) for ns in ("team-a", "team-b", "team-c"))
        assert used <= max(count, sum(_held(variants, ns, device) for ns in ("team-a", "team-b", "team-c")))
    # A namespace without a cap is planned as if no cap existed when no capped namespace competes
    # for its devices: with caps that bind nothing, the plan is the same.
    loose = replace(request, namespace_caps={ns: NamespaceCap({A100: 10_000}) for ns in caps})
    plain = OptimizerPlanner().plan(request)
    assert OptimizerPlanner().plan(loose).decisions == plain.decisions
