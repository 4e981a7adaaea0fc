"""Scenarios 10-12: WVA's later generations on the local cluster, with emulated variants.

10. WVA v0.9's annotated HPA (no VariantAutoscaling): the operator decides for the HPA's target and
    exports ``wva_desired_replicas`` under the target's name; the real HPA controller, through
    prometheus-adapter, scales the emulated variant out under load.
11. A VariantAutoscaling in the final CRD's shape (no performance profile): sized by the saturation
    analyzer (V1, the default of every VA generation) from the emulator's KV-cache and queue metrics,
    out under load and back in without it (patch mode).
12. Scale to zero and from zero: the profile-less variant with ``minReplicas: 0`` goes to zero once no
    request succeeded within the retention period (``wva-model-scale-to-zero-config``), and back to one
    replica through the fast loop as soon as the inference gateway's queue for its model (a stand-in
    exporting ``inference_extension_flow_control_queue_size``) is non-zero.

Each one is lean (one emulated Deployment, a minute or two). Wall times are recorded in the results, not
asserted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster import LocalCluster, wait_for
from vatesting.e2e import (
    A100,
    HIGH_RPM,
    MODEL,
    PREMIUM,
    WVA_A100,
    E2EResults,
    Kube,
    LoadDriver,
    Operator,
    emulator_variant,
    reason,
)
from vatesting.harness import OPERATOR_NS
from vatesting.standin import VllmStandIn

ROOT = Path(__file__).resolve().parents[2]
NAME = "vllme-l4"


@pytest.fixture
def later_configmaps(full_cluster: LocalCluster) -> Iterator[Callable[[str, dict[str, str]], None]]:
    """``put(name, data)``: a ConfigMap of WVA's later generations in the operator namespace; deleted
    afterwards."""
    made: list[str] = []

    def put(name: str, data: dict[str, str]) -> None:
        full_cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": OPERATOR_NS},
                "data": data,
            }
        )
        made.append(name)

    yield put
    for name in made:
        full_cluster.kubectl("delete", "configmap", "-n", OPERATOR_NS, name, "--ignore-not-found")


def _quantity(text: str) -> float:
    """A Kubernetes quantity as the adapter writes it ("2", "2500m")."""
    return float(text[:-1]) / 1000.0 if text.endswith("m") else float(text)


def _variant(cluster: LocalCluster, kube: Kube, namespace: str, name: str, replicas: int = 1) -> None:
    cluster.apply(
        emulator_variant(
            name, namespace, model=MODEL, vendor="nvidia", product=A100, profile=WVA_A100, max_batch=4,
            replicas=replicas,
        )
    )  # fmt: skip
    if replicas:
        wait_for(
            lambda: len(kube.serving(namespace, name)) == replicas, timeout=90, what="the first pod serving"
        )


def _final_va(namespace: str, **spec: Any) -> dict[str, Any]:
    """deploy/'s sample in WVA's final CRD shape (no profile), in ``namespace``, with ``spec`` added."""
    va: dict[str, Any] = yaml.safe_load((ROOT / "deploy/samples/variantautoscaling-final.yaml").read_text())
    va["metadata"]["namespace"] = namespace
    va["spec"].update(spec)
    return va


def _annotated_hpa(namespace: str, target: str) -> dict[str, Any]:
    """deploy/'s annotated HPA sample (v0.9) for ``target`` in ``namespace``."""
    hpa: dict[str, Any] = yaml.safe_load((ROOT / "deploy/hpa/hpa-annotated.yaml").read_text())
    hpa["metadata"]["namespace"] = namespace
    hpa["spec"]["scaleTargetRef"]["name"] = target
    hpa["spec"]["maxReplicas"] = 4
    selector = hpa["spec"]["metrics"][0]["external"]["metric"]["selector"]["matchLabels"]
    selector.update(variant_name=target, exported_namespace=namespace)
    return hpa


def test_scenario_10_annotated_hpa_scales_out_on_wva_desired_replicas(
    full_cluster: LocalCluster,
    kube: Kube,
    scenario_namespace: str,
    install_operator: Callable[..., Path],
    operator_factory: Callable[..., Operator],
    load_factory: Callable[..., LoadDriver],
    later_configmaps: Callable[[str, dict[str, str]], None],
    e2e_results: E2EResults,
    timed: None,
) -> None:
    ns, target = scenario_namespace, "mistral-decode"
    kubeconfig = install_operator()
    # V1 for this model, named by the ConfigMap: an annotated object's default is V2, which counts KV-cache
    # tokens, and this server (batch 4, a KV cache far larger than 4 requests need) runs out of batch
    # slots long before its cache fills: its overload shows in the waiting queue, which V1 reads.
    later_configmaps("wva-saturation-scaling-config", {"default": 'analyzerName: ""'})
    _variant(full_cluster, kube, ns, target)
    full_cluster.apply(_annotated_hpa(ns, target))
    operator_factory(kubeconfig)
    series = f'wva_desired_replicas{{variant_name="{target}",exported_namespace="{ns}"}}'
    wait_for(
        lambda: full_cluster.prometheus_server().query(series),
        timeout=90,
        what=f"{series} in Prometheus",
    )
    load = load_factory(ns, [target], MODEL, PREMIUM).start(HIGH_RPM, "overload")
    started = time.monotonic()
    # What the HPA reads through the adapter: the decision rises there first. Read it while it is
    # up: once the new replica serves, V1 (as WVA's) may ask for one fewer again when one replica
    # would leave spare queue, which the HPA's scale-down stabilisation then holds off.
    wait_for(
        lambda: (
            (values := kube.external_metric(ns, "wva_desired_replicas", target))
            and all(_quantity(v) >= 2 for v in values)
        ),
        timeout=180,
        what="wva_desired_replicas >= 2 through prometheus-adapter",
    )
    wait_for(lambda: kube.replicas(ns, target) >= 2, timeout=180, what="the annotated HPA to scale out")
    took = time.monotonic() - started
    hpa = json.loads(full_cluster.kubectl("get", "hpa", "-n", ns, "vllme-hpa", "-o", "json").stdout)
    assert hpa["status"]["desiredReplicas"] >= 2
    explained = kube.events(ns, "vllme-hpa", "DecisionChanged")
    assert explained and any("saturation-v1" in e.message for e in explained)
    assert all(e.involved_object.kind == "HorizontalPodAutoscaler" for e in explained)
    wait_for(lambda: len(kube.serving(ns, target)) >= 2, timeout=90, what="the new pod serving")
    load.set_rate(0)
    e2e_results.add(
        "10 annotated HPA (v0.9)",
        f"{HIGH_RPM:g} req/min on one replica",
        load.stats("overload"),
        PREMIUM,
        replicas=f"1 → {kube.replicas(ns, target)}",
        seconds_to_scaled=round(took),
        decided_by="saturation-v1",
    )


def test_scenario_11_profile_less_va_scales_by_saturation(
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
    _variant(full_cluster, kube, ns, NAME)
    va = _final_va(
        ns, actuation={"mode": "patch"}, scaleDown={"stabilizationWindowSeconds": 0}, maxReplicas=3
    )
    full_cluster.apply(va)
    operator_factory(kubeconfig)
    wait_for(
        lambda: reason(kube.va(ns, NAME)).startswith("saturation-v1"),
        timeout=90,
        what="a saturation decision",
    )
    load = load_factory(ns, [NAME], MODEL, PREMIUM).start(HIGH_RPM, "overload")
    started = time.monotonic()
    wait_for(lambda: kube.replicas(ns, NAME) >= 2, timeout=180, what="saturation to scale the target out")
    took = time.monotonic() - started
    body = kube.va(ns, NAME)
    assert reason(body).startswith("saturation-v1")
    changes = [e.message for e in kube.events(ns, NAME, "DecisionChanged")]
    assert any("saturation-v1" in m and "-> 2 replicas" in m for m in changes), changes
    wait_for(lambda: len(kube.serving(ns, NAME)) >= 2, timeout=90, what="the new pod serving")
    out = kube.replicas(ns, NAME)
    load.mark("stopped")
    load.set_rate(0)
    started = time.monotonic()
    wait_for(lambda: kube.replicas(ns, NAME) == 1, timeout=180, what="saturation to scale back in")
    e2e_results.add(
        "11 profile-less VA (saturation V1)",
        f"{HIGH_RPM:g} req/min, then none",
        load.stats("overload"),
        PREMIUM,
        replicas=f"1 → {out} → 1",
        seconds_to_scaled_out=round(took),
        seconds_to_scaled_in=round(time.monotonic() - started),
    )


def test_scenario_12_to_zero_and_back_from_zero(
    full_cluster: LocalCluster,
    kube: Kube,
    scenario_namespace: str,
    install_operator: Callable[..., Path],
    operator_factory: Callable[..., Operator],
    later_configmaps: Callable[[str, dict[str, str]], None],
    e2e_results: E2EResults,
    timed: None,
) -> None:
    ns = scenario_namespace
    kubeconfig = install_operator()
    later_configmaps(
        "wva-model-scale-to-zero-config", {"default": 'enable_scale_to_zero: true\nretention_period: "20s"'}
    )
    _variant(full_cluster, kube, ns, NAME)
    va = _final_va(
        ns, actuation={"mode": "patch"}, scaleDown={"stabilizationWindowSeconds": 0}, minReplicas=0
    )
    full_cluster.apply(va)
    operator_factory(kubeconfig)
    started = time.monotonic()
    # No request at all: idle once the retention period holds samples, and gone to zero.
    wait_for(lambda: kube.replicas(ns, NAME) == 0, timeout=120, what="the idle variant to go to zero")
    to_zero = time.monotonic() - started
    assert reason(kube.va(ns, NAME)).startswith("scale-to-zero")
    wait_for(lambda: not kube.serving(ns, NAME), timeout=60, what="the last pod to stop")

    gateway = VllmStandIn(full_cluster, f"gateway-{ns}")
    try:
        up = f'up{{instance="127.0.0.1:{gateway.port}"}} == 1'
        wait_for(lambda: full_cluster.prometheus_server().query(up), timeout=60, what="the gateway scraped")
        gateway.queue(MODEL, 3.0)  # requests for the model queue at the gateway
        queued = time.monotonic()
        wait_for(
            lambda: kube.replicas(ns, NAME) == 1,
            timeout=60,
            interval=0.1,
            what="the fast loop to scale from zero",
        )
        from_zero = time.monotonic() - queued
        woken = kube.events(ns, NAME, "ScaledFromZero")
        assert woken and "from 0 to 1" in woken[0].message
        wait_for(lambda: len(kube.serving(ns, NAME)) == 1, timeout=90, what="the woken pod serving")
    finally:
        gateway.close()
    e2e_results.add(
        "12 scale to zero and from zero",
        "no load (retention 20s), then 3 requests queued at the gateway",
        None,
        None,
        seconds_to_zero=round(to_zero),
        seconds_queue_to_scale_patch=round(from_zero, 1),
    )
