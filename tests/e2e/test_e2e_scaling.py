"""Scenarios 1-4: WVA's e2e setup scaled out by load, held steady, scaled in; the same in patch mode.

WVA's e2e setup: the emulator serving ``default/default`` with the A100 profile of WVA's sample
VariantAutoscaling (α 20.58, β 0.41, γ 20.58, δ 0.041 ms, max batch 4), the sample VariantAutoscaling
itself (only moved to the scenario's namespace), the Premium class (TTFT 500 ms, ITL 24 ms) and, in
metrics mode, WVA's HPA sample following ``inferno_desired_replicas`` through prometheus-adapter.
Requests have 100 prompt tokens and 64 output tokens, so one replica serves up to about 115 requests
per minute within the SLOs (``variant-autoscaler analyze``); 280 requests per minute need three.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from localcluster import LocalCluster, wait_for
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
    prometheus_value,
    settle,
    valid_status,
    wait_va,
    wva_hpa,
)
from vatesting.harness import set_main_config, va_manifest

STEADY_CYCLES = 10


def _metrics_ok(va: dict[str, Any]) -> bool:
    return condition(va, "MetricsAvailable").get("status") == "True"


def _current(va: dict[str, Any]) -> int | None:
    value = ((va.get("status") or {}).get("currentAlloc") or {}).get("numReplicas")
    return value if isinstance(value, int) else None


def _arrival_rpm(va: dict[str, Any]) -> float:
    return float(((va.get("status") or {}).get("currentAlloc") or {}).get("load", {}).get("arrivalRate", 0))


def _deploy_wva_variant(cluster: LocalCluster, kube: Kube, namespace: str) -> None:
    cluster.apply(
        emulator_variant(
            VA, namespace, model=MODEL, vendor="nvidia", product=A100, profile=WVA_A100, max_batch=4
        )
    )
    wait_for(lambda: len(kube.serving(namespace, VA)) == 1, timeout=90, what="the first pod serving")
    cluster.apply(va_manifest(namespace))  # WVA's sample, unchanged but for its namespace


def _scale_out(
    kube: Kube, operator: Operator, load: LoadDriver, namespace: str, replicas_follow: str
) -> tuple[dict[str, Any], float]:
    """Raise the load until the decision, the Deployment and the serving pods agree; returns the VA."""
    started = time.monotonic()
    load.mark("scale-out")
    load.set_rate(HIGH_RPM)
    wait_va(kube, namespace, VA, lambda v: (desired(v) or 0) >= 2, "a scale-out decision")

    def agreed() -> dict[str, Any] | None:
        va = kube.va(namespace, VA)
        want = desired(va)
        if want is None or want < 2 or _arrival_rpm(va) < 0.85 * HIGH_RPM:
            return None
        if kube.replicas(namespace, VA) != want or len(kube.serving(namespace, VA)) != want:
            return None
        return va

    wait_for(
        agreed,
        timeout=180,
        what=f"desired = Deployment replicas ({replicas_follow}) = serving pods",
        interval=1.0,
    )
    elapsed = time.monotonic() - started
    # Settle: the backlog queued while one replica was overloaded drains (it is demand the operator
    # sees), then one more metrics window passes, and the decision, Deployment and pods still agree.
    settle(kube.cluster, operator, namespace)
    va: dict[str, Any] = wait_for(agreed, timeout=60, what="agreement after settling", interval=1.0)
    return va, elapsed


def _new_pods_serve(kube: Kube, load: LoadDriver, namespace: str, phase: str) -> dict[str, int]:
    """Every serving pod gets traffic: at least 5 completed requests each in ``phase``."""

    def served() -> dict[str, int] | None:
        pods = kube.serving(namespace, VA)
        counts = load.completed_by_target(phase)
        return {p: counts.get(p, 0) for p in pods} if all(counts.get(p, 0) >= 5 for p in pods) else None

    result: dict[str, int] = wait_for(served, timeout=60, what="traffic on every serving pod", interval=1.0)
    return result


def test_scenarios_1_2_3_hpa_scale_out_steady_and_scale_in(
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
    _deploy_wva_variant(full_cluster, kube, ns)
    full_cluster.apply(wva_hpa(ns, VA))  # WVA's HPA sample: replicas = inferno_desired_replicas
    operator = operator_factory(kubeconfig)
    load = load_factory(ns, [VA], MODEL, PREMIUM).start(LOW_RPM, "warm-up")
    wait_va(
        kube,
        ns,
        VA,
        lambda v: _metrics_ok(v) and desired(v) == 1 and _arrival_rpm(v) > 0,
        "metrics and a first decision at low load",
    )

    # --- 1. Scale out: the decision rises, Prometheus and the adapter carry it, the HPA applies it.
    va, took = _scale_out(kube, operator, load, ns, "set by the HPA")
    want = desired(va)
    assert want is not None and want >= 2
    status = valid_status(va)
    assert status.desired_optimized_alloc is not None
    assert status.desired_optimized_alloc.accelerator == "A100"
    assert condition(va, "Actuated")["reason"] == "MetricsEmitted"
    labels = f'variant_name="{VA}",exported_namespace="{ns}",accelerator_type="A100"'
    series = f"inferno_desired_replicas{{{labels}}}"
    assert wait_for(
        lambda: prometheus_value(full_cluster, series) == want,
        timeout=30,
        what=f"{series} = {want} in Prometheus",
    )
    assert desired(kube.va(ns, VA)) == want
    assert kube.external_metric(ns, "inferno_desired_replicas", VA) == [str(want)]
    hpa = json.loads(full_cluster.kubectl("get", "hpa", "-n", ns, f"{VA}-hpa", "-o", "json").stdout)
    assert hpa["status"]["desiredReplicas"] == want
    load.mark("scaled out")
    per_pod = _new_pods_serve(kube, load, ns, "scaled out")
    e2e_results.add(
        "1 scale-out (HPA)",
        f"load {LOW_RPM:g} → {HIGH_RPM:g} req/min, until scaled",
        load.stats("scale-out"),
        PREMIUM,
        replicas=f"1 → {want}",
        seconds_to_scaled=round(took),
    )

    # --- 2. Steady: constant load, constant decision for several cycles.
    load.mark("steady")
    changes_before = len(kube.events(ns, VA, "DecisionChanged"))
    with Sampler(lambda: (desired(kube.va(ns, VA)), kube.replicas(ns, VA))) as sampler:
        operator.wait_cycles(STEADY_CYCLES)
    seen = set(sampler.values())
    decisions = [e.message for e in kube.events(ns, VA, "DecisionChanged")]
    assert seen == {(want, want)}, f"the decision moved under constant load: {seen}; {decisions}"
    assert len(kube.events(ns, VA, "DecisionChanged")) == changes_before
    steady = load.stats("steady")
    assert steady.completed > 0
    e2e_results.add(
        "2 steady (HPA)",
        f"{HIGH_RPM:g} req/min for {STEADY_CYCLES} cycles",
        steady,
        PREMIUM,
        replicas=want,
        decision_changes=0,
        pods_served=len(per_pod),
    )

    # --- 3. Scale in: no load → the minimum (1), valid status; then scale to zero when enabled.
    load.mark("stopped")
    load.set_rate(0)
    started = time.monotonic()
    va = wait_va(kube, ns, VA, lambda v: desired(v) == 1, "scale-in to the minimum", timeout=120)
    wait_for(
        lambda: kube.replicas(ns, VA) == 1 and len(kube.serving(ns, VA)) == 1,
        timeout=90,
        what="the HPA scaling in to 1",
    )
    to_min = time.monotonic() - started
    va = wait_va(kube, ns, VA, lambda v: _current(v) == 1, "the status seeing 1 replica")
    status = valid_status(va)
    assert status.current_alloc is not None and status.current_alloc.num_replicas == 1
    assert condition(va, "OptimizationReady")["status"] == "True"
    assert condition(va, "MetricsAvailable")["status"] == "True"
    # The minimum still serves: a little load on the one replica left.
    load.mark("after scale-in")
    load.set_rate(30)
    wait_for(
        lambda: load.stats("after scale-in").completed >= 20, timeout=90, what="20 requests at 30 req/min"
    )
    load.set_rate(0)
    after = load.stats("after scale-in")
    e2e_results.add(
        "3 scale-in (HPA)",
        "load stopped, then 30 req/min on the minimum",
        after,
        PREMIUM,
        replicas=f"{want} → 1",
        seconds_to_minimum=round(to_min),
    )

    # Scale to zero (WVA_SCALE_TO_ZERO and an HPA allowed to reach 0): the status stays valid, unlike
    # WVA's (its empty accelerator breaks the CRD's minLength 2).
    set_main_config(full_cluster, WVA_SCALE_TO_ZERO="true")
    full_cluster.apply(wva_hpa(ns, VA, min_replicas=0))
    va = wait_va(kube, ns, VA, lambda v: desired(v) == 0, "a scale-to-zero decision", timeout=90)
    wait_for(lambda: kube.replicas(ns, VA) == 0, timeout=90, what="the HPA scaling to zero")
    status = valid_status(va)
    assert status.desired_optimized_alloc is not None
    assert status.desired_optimized_alloc.accelerator == "A100"
    stamp = status.desired_optimized_alloc.last_run_time
    later = wait_va(
        kube,
        ns,
        VA,
        lambda v: (
            (v["status"].get("desiredOptimizedAlloc") or {}).get("lastRunTime")
            not in (None, va["status"]["desiredOptimizedAlloc"]["lastRunTime"])
        ),
        "a later cycle's status write at zero replicas",
    )
    assert desired(later) == 0 and valid_status(later).desired_optimized_alloc is not None
    assert stamp is not None
    load.stop()
    e2e_results.add(
        "3 scale-in (HPA)",
        "scale to zero enabled, no load",
        None,
        None,
        replicas="1 → 0",
        status="valid (accelerator A100, conditions set)",
    )


def test_scenario_4_patch_mode_without_hpa(
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
    full_cluster.apply(
        emulator_variant(VA, ns, model=MODEL, vendor="nvidia", product=A100, profile=WVA_A100, max_batch=4)
    )
    wait_for(lambda: len(kube.serving(ns, VA)) == 1, timeout=90, what="the first pod serving")
    # WVA's sample plus our fields: patch the Deployment's /scale, scale down 10 s after load drops.
    full_cluster.apply(
        va_manifest(ns, actuation={"mode": "patch"}, scaleDown={"stabilizationWindowSeconds": 10})
    )
    generation = kube.apps.read_namespaced_deployment(VA, ns).metadata.generation
    operator = operator_factory(kubeconfig)
    load = load_factory(ns, [VA], MODEL, PREMIUM).start(LOW_RPM, "warm-up")
    wait_va(
        kube,
        ns,
        VA,
        lambda v: _metrics_ok(v) and desired(v) == 1 and _arrival_rpm(v) > 0,
        "metrics and a first decision at low load",
    )
    assert kube.apps.read_namespaced_deployment(VA, ns).metadata.generation == generation

    va, took = _scale_out(kube, operator, load, ns, "patched by the operator")
    want = desired(va)
    assert want is not None and want >= 2
    valid_status(va)
    assert condition(va, "Actuated")["reason"] in {"Scaled", "Unchanged"}
    scaled = kube.events(ns, VA, "Scaled")
    assert scaled and all(e.reporting_instance == "e2e-operator" for e in scaled)
    assert not full_cluster.kubectl("get", "hpa", "-n", ns, "-o", "name").stdout.strip()
    load.mark("scaled out")
    _new_pods_serve(kube, load, ns, "scaled out")
    operator.wait_cycles(5)
    scaled_out = load.stats("scaled out")
    e2e_results.add(
        "4 patch mode",
        f"load {LOW_RPM:g} → {HIGH_RPM:g} req/min, until scaled",
        load.stats("scale-out"),
        PREMIUM,
        replicas=f"1 → {want}",
        seconds_to_scaled=round(took),
    )
    e2e_results.add(
        "4 patch mode", f"{HIGH_RPM:g} req/min on {want} replicas", scaled_out, PREMIUM, replicas=want
    )

    # Scale in while requests keep coming: the replicas removed drain (issue 22: no request lost).
    load.mark("scale-in under load")
    load.set_rate(LOW_RPM)
    wait_for(lambda: kube.replicas(ns, VA) == 1, timeout=120, what="the operator scaling in to 1")
    va = wait_va(kube, ns, VA, lambda v: desired(v) == 1, "the minimum in the status")
    status = valid_status(va)
    assert status.actuation is not None and status.actuation.mode == "patch"
    wait_for(lambda: len(kube.serving(ns, VA)) == 1, timeout=90, what="the removed pods to be gone")
    time.sleep(load.segment_seconds)  # traffic routed before they went has finished or failed by now
    load.stop()
    drained = load.stats("scale-in under load")
    e2e_results.add(
        "4 patch mode",
        f"scale-in under {LOW_RPM:g} req/min",
        drained,
        PREMIUM,
        replicas=f"{want} → 1",
        failed=drained.failed,
    )
    assert drained.completed > 0
    assert drained.failed == 0, f"requests lost while replicas were removed: {dict(drained.errors)}"
