"""Scenario 6, faults: a GPU node removed, the operator killed mid-cycle, Prometheus restarted.

All three run in patch mode (the operator scales the Deployment itself), so every decision shows at once
in the Deployment and a wrong one cannot hide behind an HPA's stabilisation.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import GpuNodeSpec, LocalCluster, wait_for
from vatesting.e2e import (
    A100,
    HIGH_RPM,
    LOW_RPM,
    MODEL,
    PREMIUM,
    VA,
    WVA_A100,
    E2EResults,
    Kube,
    LoadDriver,
    Operator,
    Sampler,
    condition,
    desired,
    emulator_variant,
    reason,
    settle,
    valid_status,
    variant_autoscaling,
    wait_va,
)
from vatesting.harness import va_manifest

L40S = "NVIDIA-L40S"
TAINT = ("variant-autoscaler.io/e2e", "node-loss")
NODE_LOSS_RPM = 180.0  # two replicas' worth of WVA's A100 profile


@pytest.fixture
def gpu_nodes(full_cluster: LocalCluster) -> Iterator[list[str]]:
    """Names of nodes this scenario added; whichever still exist are removed afterwards."""
    added: list[str] = []
    yield added
    for name in added:
        full_cluster.remove_gpu_node(name)


def _patch_mode_variant(cluster: LocalCluster, kube: Kube, namespace: str, window: int) -> None:
    cluster.apply(
        emulator_variant(
            VA, namespace, model=MODEL, vendor="nvidia", product=A100, profile=WVA_A100, max_batch=4
        )
    )
    wait_for(lambda: len(kube.serving(namespace, VA)) == 1, timeout=90, what="the first pod serving")
    cluster.apply(
        va_manifest(namespace, actuation={"mode": "patch"}, scaleDown={"stabilizationWindowSeconds": window})
    )


def _decisions(kube: Kube, namespace: str) -> list[str]:
    return [
        f"{e.last_timestamp or e.event_time}: {e.message}"
        for e in kube.events(namespace, VA, "DecisionChanged")
    ]


def _agreed(kube: Kube, namespace: str, minimum: int = 2) -> dict[str, Any] | None:
    va = kube.va(namespace, VA)
    want = desired(va)
    if want is None or want < minimum:
        return None
    if kube.replicas(namespace, VA) != want or len(kube.serving(namespace, VA)) != want:
        return None
    return va


def test_scenario_6a_gpu_node_removed_shrinks_the_plan_to_the_inventory(
    full_cluster: LocalCluster,
    kube: Kube,
    scenario_namespace: str,
    gpu_nodes: list[str],
    install_operator: Callable[..., Path],
    operator_factory: Callable[..., Operator],
    load_factory: Callable[..., LoadDriver],
    e2e_results: E2EResults,
    timed: None,
) -> None:
    ns = scenario_namespace
    for name in ("gpu-l40s-e2e-a", "gpu-l40s-e2e-b"):
        full_cluster.add_gpu_node(
            GpuNodeSpec(name, "nvidia", L40S, 46068, 1, taints=((TAINT[0], TAINT[1], "NoSchedule"),))
        )
        gpu_nodes.append(name)
    kubeconfig = install_operator(OPTIMIZER_MODE="limited", SATURATION_POLICY="PriorityExhaustive")
    full_cluster.apply(
        emulator_variant(
            VA,
            ns,
            model=MODEL,
            vendor="nvidia",
            product=L40S,
            profile=WVA_A100,
            max_batch=4,
            toleration=TAINT,
        )
    )
    wait_for(lambda: len(kube.serving(ns, VA)) == 1, timeout=90, what="the first pod serving")
    full_cluster.apply(
        variant_autoscaling(
            VA,
            ns,
            model=MODEL,
            accelerator="L40S",
            profiles={"L40S": (WVA_A100, 4)},
            actuation={"mode": "patch"},
            scaleDown={"stabilizationWindowSeconds": 0},
        )
    )
    operator = operator_factory(kubeconfig)
    load = load_factory(ns, [VA], MODEL, PREMIUM).start(NODE_LOSS_RPM, "scale-out")
    wait_for(lambda: _agreed(kube, ns), timeout=180, what="two replicas on the two L40S nodes", interval=1.0)
    settle(full_cluster, operator, ns)
    va = wait_for(lambda: _agreed(kube, ns), timeout=60, what="agreement after settling", interval=1.0)
    assert desired(va) == 2 and "limited by" not in reason(va), reason(va)
    nodes = sorted(p.spec.node_name for p in kube.pods(ns, VA))
    assert nodes == ["gpu-l40s-e2e-a", "gpu-l40s-e2e-b"]
    load.mark("two nodes")
    operator.wait_cycles(5)

    # One node fails: its pod goes, and the inventory shrinks to one GPU.
    load.mark("one node")
    started = time.monotonic()
    full_cluster.remove_gpu_node("gpu-l40s-e2e-b")
    va = wait_va(
        kube,
        ns,
        VA,
        lambda v: desired(v) == 1 and "limited by" in reason(v),
        "a plan limited to the remaining GPU",
        timeout=120,
    )
    wait_for(
        lambda: (
            kube.replicas(ns, VA) == 1 and not kube.pending_pods(ns, VA) and len(kube.serving(ns, VA)) == 1
        ),
        timeout=90,
        what="the Deployment shrunk to the inventory",
        interval=1.0,
    )
    took = time.monotonic() - started
    assert re.search(r"limited by NVIDIA-L40S capacity: 1 of 2 replicas", reason(va)), reason(va)
    valid_status(va)
    assert condition(va, "OptimizationReady")["status"] == "True"
    operator.wait_cycles(5)
    assert desired(kube.va(ns, VA)) == 1 and kube.replicas(ns, VA) == 1
    load.stop(drain_timeout=30.0)
    e2e_results.add(
        "6a GPU node removed",
        f"{NODE_LOSS_RPM:g} req/min on 2 L40S nodes",
        load.stats("two nodes"),
        PREMIUM,
        replicas=2,
    )
    e2e_results.add(
        "6a GPU node removed",
        "one node removed: capacity 1 GPU",
        load.stats("one node"),
        PREMIUM,
        replicas="2 → 1",
        seconds_to_shrunk=round(took),
        reason=reason(va),
    )


def test_scenario_6b_operator_killed_mid_cycle_the_next_one_finishes(
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
    _patch_mode_variant(full_cluster, kube, ns, window=30)
    first = operator_factory(kubeconfig)
    load = load_factory(ns, [VA], MODEL, PREMIUM).start(LOW_RPM, "warm-up")
    before = wait_va(
        kube,
        ns,
        VA,
        lambda v: (
            desired(v) == 1
            and (v["status"].get("currentAlloc") or {}).get("load", {}).get("arrivalRate", "0.00") != "0.00"
        ),
        "a first decision",
    )
    stamp = before["status"]["desiredOptimizedAlloc"]["lastRunTime"]

    # The load rises; the first cycle that acts on it is killed as soon as it shows: right after it
    # patched the Deployment (before its status write), or right after the status write.
    load.mark("fault")
    load.set_rate(HIGH_RPM)

    def acting() -> str | None:
        if kube.replicas(ns, VA) > 1:
            return "after the scale patch"
        va = kube.va(ns, VA)
        if desired(va) != 1 and va["status"]["desiredOptimizedAlloc"]["lastRunTime"] != stamp:
            return "after the status write"
        return None

    killed_at: str = wait_for(acting, timeout=120, what="a cycle acting on the new load", interval=0.02)
    first.kill()
    replicas_at_kill = kube.replicas(ns, VA)
    desired_at_kill = desired(kube.va(ns, VA))

    # The restarted process (same pod, same identity) finishes the job.
    with Sampler(lambda: kube.replicas(ns, VA)) as replicas:
        second = operator_factory(kubeconfig, identity="e2e-operator")
        va = wait_for(
            lambda: _agreed(kube, ns), timeout=180, what="the restarted operator finishing", interval=1.0
        )
        settle(full_cluster, second, ns)
        va = wait_for(lambda: _agreed(kube, ns), timeout=60, what="agreement after settling", interval=1.0)
    samples = replicas.values()
    assert all(b >= a for a, b in itertools.pairwise(samples)), f"replicas went down: {samples}"
    valid_status(va)
    assert condition(va, "Actuated")["status"] == "True"
    decided = [e for e in kube.events(ns, VA, "DecisionChanged")]
    transitions = [e.message.split(":")[0] for e in decided]
    assert len(transitions) == len(set(transitions)), f"duplicate Events: {transitions}"
    assert all((e.count or 1) == 1 for e in decided)
    load.mark("after restart")
    second.wait_cycles(5)
    load.stop(drain_timeout=30.0)
    e2e_results.add(
        "6b operator killed mid-cycle",
        f"load {LOW_RPM:g} → {HIGH_RPM:g} req/min, killed {killed_at}",
        load.stats("fault"),
        PREMIUM,
        at_kill=f"Deployment {replicas_at_kill}, status {desired_at_kill}",
        replicas=f"1 → {desired(va)}",
    )


def test_scenario_6c_prometheus_restarted_no_scale_down_without_metrics(
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
    # No scale-down stabilisation: a decision to scale down would show in the Deployment at once.
    _patch_mode_variant(full_cluster, kube, ns, window=0)
    operator = operator_factory(kubeconfig)
    load = load_factory(ns, [VA], MODEL, PREMIUM).start(HIGH_RPM, "scale-out")
    wait_for(lambda: _agreed(kube, ns), timeout=180, what="scaled out", interval=1.0)
    settle(full_cluster, operator, ns)
    va = wait_for(lambda: _agreed(kube, ns), timeout=60, what="agreement after settling", interval=1.0)
    want = desired(va)
    assert want is not None

    prometheus = full_cluster.prometheus_server()
    load.mark("Prometheus restart")

    def sample() -> tuple[int | None, int, str, str]:
        va = kube.va(ns, VA)
        return (
            desired(va),
            kube.replicas(ns, VA),
            condition(va, "MetricsAvailable").get("reason", ""),
            reason(va),
        )

    with Sampler(sample) as sampler:
        prometheus.stop()
        try:
            va = wait_va(
                kube,
                ns,
                VA,
                lambda v: condition(v, "MetricsAvailable").get("reason") == "PrometheusError",
                "MetricsAvailable=False/PrometheusError",
            )
            assert condition(va, "OptimizationReady")["reason"] == "MetricsUnavailable"
            operator.wait_cycles(3)
        finally:
            prometheus.start()
        wait_va(
            kube,
            ns,
            VA,
            lambda v: condition(v, "MetricsAvailable").get("status") == "True",
            "metrics back",
            timeout=120,
        )
        operator.wait_cycles(10)
    lowest = min(min(d if d is not None else 0, r) for d, r, _, _ in sampler.values())
    stats = load.stats("Prometheus restart")
    load.stop(drain_timeout=30.0)
    e2e_results.add(
        "6c Prometheus restarted",
        f"{HIGH_RPM:g} req/min through a Prometheus outage",
        stats,
        PREMIUM,
        replicas=f"{want} before the outage",
        lowest_decision_or_replicas_seen=lowest,
    )
    low = [(t, v) for t, v in sampler.samples if v[0] is None or v[0] < want or v[1] < want]
    assert not low, f"scaled down from {want}: {low[:5]}; decisions: {_decisions(kube, ns)}"
    va = kube.va(ns, VA)
    valid_status(va)
    warnings = {e.reason for e in kube.events(ns, VA) if e.type == "Warning"}
    assert "PrometheusError" in warnings
