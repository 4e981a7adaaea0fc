"""Scenarios 5 and 7: scarce GPUs in limited mode, and one model served by two variants that share its load.

Scenario 5 gives two models of different priority one node of three L40S GPUs between them (a node of its
own, tainted so nothing else lands on it) and more load than three replicas serve within the SLOs. In
limited mode the optimizer must give the Premium model (priority 1) what it needs and the Freemium one
(priority 10) what is left, and both must say so in their status.

Scenario 7 runs ``default/default`` on an A100 Deployment and a Gaudi 2 Deployment whose
VariantAutoscalings opt in to ``shareModelLoad``; the load is spread over the pods of both, as a gateway
would, and the optimizer sizes the two together.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import GpuNodeSpec, LocalCluster, wait_for
from vatesting.e2e import (
    MODEL,
    WVA_A100,
    WVA_G2,
    E2EResults,
    Kube,
    LoadDriver,
    Operator,
    Slo,
    condition,
    desired,
    emulator_variant,
    reason,
    valid_status,
    variant_autoscaling,
)

L40S = "NVIDIA-L40S"
TAINT = ("variant-autoscaler.io/e2e", "scarce")
#: An L40S profile for both models of scenario 5 (ms): one replica serves about 110 req/min of the
#: Premium model (TTFT 500 ms, ITL 80 ms) and about 129 of the Freemium one (TTFT 1500 ms, ITL 150 ms).
L40S_PROFILE = {"alpha": 40.0, "beta": 1.0, "gamma": 40.0, "delta": 0.1}
L40S_BATCH = 8
PREMIUM_MODEL, PREMIUM = "meta/llama0-70b", Slo(ttft_ms=500, itl_ms=80)
FREEMIUM_MODEL, FREEMIUM = "meta/llama0-7b", Slo(ttft_ms=1500, itl_ms=150)
SCARCE_RPM = 180.0  # each model: two replicas' worth, so four are wanted and three exist

SHARED_RPM = 300.0
SHARED_SLO = Slo(ttft_ms=500, itl_ms=24)


@pytest.fixture
def gpu_nodes(full_cluster: LocalCluster) -> Iterator[Callable[[GpuNodeSpec], None]]:
    """``add(spec)``: a simulated GPU node for this scenario only (removed afterwards)."""
    added: list[str] = []

    def add(spec: GpuNodeSpec) -> None:
        full_cluster.add_gpu_node(spec)
        added.append(spec.name)

    yield add
    for name in added:
        full_cluster.remove_gpu_node(name)


def l40s_node(name: str, gpus: int) -> GpuNodeSpec:
    return GpuNodeSpec(name, "nvidia", L40S, 46068, gpus, taints=((TAINT[0], TAINT[1], "NoSchedule"),))


def l40s_variant(name: str, namespace: str, model: str) -> dict[str, Any]:
    return emulator_variant(
        name,
        namespace,
        model=model,
        vendor="nvidia",
        product=L40S,
        profile=L40S_PROFILE,
        max_batch=L40S_BATCH,
        toleration=TAINT,
    )


def test_scenario_5_scarce_gpus_go_to_the_higher_priority_model(
    full_cluster: LocalCluster,
    kube: Kube,
    scenario_namespace: str,
    gpu_nodes: Callable[[GpuNodeSpec], None],
    install_operator: Callable[..., Path],
    operator_factory: Callable[..., Operator],
    load_factory: Callable[..., LoadDriver],
    e2e_results: E2EResults,
    timed: None,
) -> None:
    ns = scenario_namespace
    gpu_nodes(l40s_node("gpu-l40s-e2e-0", 3))
    kubeconfig = install_operator(OPTIMIZER_MODE="limited", SATURATION_POLICY="PriorityExhaustive")
    models = {
        "premium": (PREMIUM_MODEL, PREMIUM, "premium.yaml"),
        "freemium": (FREEMIUM_MODEL, FREEMIUM, "freemium.yaml"),
    }
    for name, (model, _, _) in models.items():
        full_cluster.apply(l40s_variant(name, ns, model))
    wait_for(lambda: all(len(kube.serving(ns, n)) == 1 for n in models), timeout=90, what="both pods serving")
    for name, (model, _, key) in models.items():
        full_cluster.apply(
            variant_autoscaling(
                name,
                ns,
                model=model,
                accelerator="L40S",
                profiles={"L40S": (L40S_PROFILE, L40S_BATCH)},
                slo_class=("service-classes-config", key),
                actuation={"mode": "patch"},
            )
        )
    operator = operator_factory(kubeconfig)
    loads = {
        name: load_factory(ns, [name], model, slo, seed=11 + i).start(SCARCE_RPM, "contention")
        for i, (name, (model, slo, _)) in enumerate(models.items())
    }

    def settled() -> tuple[dict[str, Any], dict[str, Any]] | None:
        premium, freemium = kube.va(ns, "premium"), kube.va(ns, "freemium")
        if "limited by" not in reason(freemium):
            return None
        for name, va in (("premium", premium), ("freemium", freemium)):
            want = desired(va)
            if want is None or kube.replicas(ns, name) != want or len(kube.serving(ns, name)) != want:
                return None
            if kube.pending_pods(ns, name):
                return None
        return premium, freemium

    wait_for(
        settled, timeout=240, what="a limited plan applied: premium served, freemium capped", interval=1.0
    )
    operator.wait_cycles(10)  # a metrics window on the final allocation
    premium, freemium = wait_for(settled, timeout=60, what="the plan still applied", interval=1.0)
    for load in loads.values():
        load.mark("allocated")
    operator.wait_cycles(15)
    stats = {name: load.stats("allocated") for name, load in loads.items()}
    premium, freemium = wait_for(settled, timeout=60, what="the plan still applied", interval=1.0)
    for load in loads.values():
        load.stop(drain_timeout=30.0)
    hi, lo = desired(premium), desired(freemium)
    assert hi is not None and lo is not None
    # The three GPUs are all given out, the Premium model first.
    assert hi + lo == 3, (reason(premium), reason(freemium))
    assert lo >= 1 and hi >= 2
    assert "limited by" not in reason(premium), reason(premium)
    assert re.search(r"limited by NVIDIA-L40S capacity: \d+ of \d+ replicas", reason(freemium)), reason(
        freemium
    )
    for va in (premium, freemium):
        valid_status(va)
        assert condition(va, "OptimizationReady")["status"] == "True"
    # The Premium model meets its SLOs; the Freemium one gets what is left and cannot.
    hi_attainment, lo_attainment = stats["premium"].attainment, stats["freemium"].attainment
    assert hi_attainment is not None and lo_attainment is not None
    assert hi_attainment >= 0.9, stats["premium"].describe()
    assert hi_attainment > lo_attainment, (stats["premium"].describe(), stats["freemium"].describe())
    e2e_results.add(
        "5 scarce GPUs (limited)",
        f"premium {PREMIUM_MODEL}, {SCARCE_RPM:g} req/min",
        stats["premium"],
        PREMIUM,
        replicas=hi,
        reason=reason(premium),
    )
    e2e_results.add(
        "5 scarce GPUs (limited)",
        f"freemium {FREEMIUM_MODEL}, {SCARCE_RPM:g} req/min",
        stats["freemium"],
        FREEMIUM,
        replicas=lo,
        reason=reason(freemium),
    )


def test_scenario_7_two_variants_share_the_model_load(
    full_cluster: LocalCluster,
    kube: Kube,
    scenario_namespace: str,
    install_operator: Callable[..., Path],
    operator_factory: Callable[..., Operator],
    load_factory: Callable[..., LoadDriver],
    e2e_results: E2EResults,
    timed: None,
) -> None:
    ns = scenario_namespace
    kubeconfig = install_operator()
    variants = {
        "llm-a100": ("A100", "nvidia", "NVIDIA-A100-PCIE-80GB", WVA_A100),
        "llm-g2": ("G2", "intel", "Intel-Gaudi-2-96GB", WVA_G2),
    }
    for name, (_, vendor, product, profile) in variants.items():
        full_cluster.apply(
            emulator_variant(
                name, ns, model=MODEL, vendor=vendor, product=product, profile=profile, max_batch=4
            )
        )
    wait_for(
        lambda: all(len(kube.serving(ns, n)) == 1 for n in variants), timeout=90, what="both pods serving"
    )
    for name, (acc, _, _, profile) in variants.items():
        full_cluster.apply(
            variant_autoscaling(
                name,
                ns,
                model=MODEL,
                accelerator=acc,
                profiles={acc: (profile, 4)},
                shareModelLoad=True,
                actuation={"mode": "patch"},
                scaleDown={"stabilizationWindowSeconds": 30},
            )
        )
    operator = operator_factory(kubeconfig)
    load = load_factory(ns, list(variants), MODEL, SHARED_SLO).start(SHARED_RPM, "shared")
    started = time.monotonic()

    def pooled_rpm(va: dict[str, Any]) -> float | None:
        match = re.search(r"shares default/default's load \(([\d.e+]+) req/min\)", reason(va))
        return float(match.group(1)) if match else None

    def applied() -> dict[str, dict[str, Any]] | None:
        vas = {name: kube.va(ns, name) for name in variants}
        total = 0
        for name, va in vas.items():
            want, rate = desired(va), pooled_rpm(va)
            if want is None or rate is None or rate < 0.85 * SHARED_RPM:
                return None
            if kube.replicas(ns, name) != want or len(kube.serving(ns, name)) != want:
                return None
            total += want
        return vas if total >= 2 else None

    wait_for(applied, timeout=240, what="a shared plan applied to both Deployments", interval=1.0)
    took = time.monotonic() - started
    operator.wait_cycles(10)
    vas: dict[str, dict[str, Any]] = wait_for(applied, timeout=60, what="the shared plan still applied")
    load.mark("shared, allocated")
    operator.wait_cycles(15)
    stats = load.stats("shared, allocated")
    per_pod = load.completed_by_target("shared, allocated")
    load.stop(drain_timeout=30.0)
    replicas = {name: desired(va) for name, va in vas.items()}
    for name, va in vas.items():
        valid_status(va)
        rate = pooled_rpm(va)
        # Each variant plans with the model's whole load once (not once per variant).
        assert rate is not None and rate <= 1.15 * SHARED_RPM, (name, reason(va))
        assert condition(va, "OptimizationReady")["status"] == "True"
    serving = [url for name in variants for url in kube.serving(ns, name)]
    assert all(per_pod.get(url, 0) > 0 for url in serving), per_pod
    assert stats.attainment is not None and stats.attainment >= 0.9, stats.describe()
    e2e_results.add(
        "7 two variants share a model",
        f"{SHARED_RPM:g} req/min over A100 + Gaudi 2 pods",
        stats,
        SHARED_SLO,
        replicas=replicas,
        seconds_to_applied=round(took),
        reasons={n: reason(v) for n, v in vas.items()},
    )
