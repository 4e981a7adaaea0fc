"""Every WVA generation's manifests, applied unchanged with ``kubectl apply`` to the real API server, reach
a decision from the operator (running as its ServiceAccount with deploy/'s RBAC, reading the real
Prometheus); a VA's target deleted and recreated (TargetResolved, no ownerReference: the garbage
collector leaves the VA).

The vLLM series come from a stand-in endpoint (:mod:`vatesting.standin`) that Prometheus scrapes: the
load is steady and known, and no server process runs. ConfigMaps of a generation go to the operator's
namespace (where WVA kept them), the rest to the test's namespace; the scale targets, which no generation's
manifests include, are plain Deployments.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster import LocalCluster, wait_for
from variant_autoscaler.api.config import parse_main_config
from variant_autoscaler.api.configmaps import parse_accelerator_costs, parse_service_classes
from variant_autoscaler.api.v1alpha1 import VariantAutoscaling
from variant_autoscaler.planner import (
    ObservedLoad,
    OptimizerPlanner,
    PlanRequest,
    optimizer_config,
    planned_from_va,
)
from vatesting.harness import OPERATOR_NS, OperatorProcess, conditions, get_va, install, running
from vatesting.standin import VllmStandIn
from vatesting.wva import GENERATIONS, KEDA_CRD, ROOT

RPM = 30.0


@pytest.fixture(scope="module")
def standin(full_cluster: LocalCluster) -> Iterator[VllmStandIn]:
    found = VllmStandIn(full_cluster, "wva-engine-standin")
    try:
        yield found
    finally:
        found.close()


@pytest.fixture
def sa_config(full_cluster: LocalCluster) -> Path:
    path = install(full_cluster, full_cluster.prometheus_url, full_cluster.prometheus_ca_file)
    full_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(KEDA_CRD))
    full_cluster.kubectl("wait", "--for=condition=Established", "crd/scaledobjects.keda.sh", "--timeout=60s")
    return path


def _prometheus_env(cluster: LocalCluster) -> dict[str, str]:
    """WVA's rule: PROMETHEUS_BASE_URL in the environment wins over every ConfigMap's Prometheus keys, so
    the generations' ConfigMaps stay unchanged (they name their own cluster's Prometheus)."""
    env = {"PROMETHEUS_BASE_URL": cluster.prometheus_url}
    if cluster.prometheus_ca_file is not None:
        env["PROMETHEUS_CA_CERT_PATH"] = str(cluster.prometheus_ca_file)
    return env


def _deployment(namespace: str, name: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "vllm", "image": "none.invalid/vllm"}]},
            },
        },
    }


def _apply_generation(cluster: LocalCluster, generation: str, namespace: str) -> list[Path]:
    """kubectl apply every file unchanged; returns the ConfigMap files (applied to the operator's
    namespace)."""
    configmaps = []
    for path in sorted((GENERATIONS / generation).glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        into = OPERATOR_NS if all(d["kind"] == "ConfigMap" for d in docs) else namespace
        cluster.kubectl("apply", "--validate=strict", "-n", into, "-f", str(path))
        if into == OPERATOR_NS:
            configmaps.append(path)
    return configmaps


def _series_ready(cluster: LocalCluster, namespace: str) -> None:
    query = f'sum(rate(vllm:request_success_total{{namespace="{namespace}"}}[1m])) > 0'
    wait_for(lambda: cluster.prometheus_server().query(query), timeout=60, what="the stand-in's series")


def _decided(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any] | None:
    va = get_va(cluster, namespace, name)
    ready = conditions(va).get("OptimizationReady") or {}
    return (
        va
        if ready.get("status") == "True" and (va.get("status") or {}).get("desiredOptimizedAlloc")
        else None
    )


def _reason(va: dict[str, Any]) -> str:
    return str(va["status"]["desiredOptimizedAlloc"].get("reason") or "")


def _decided_saying(cluster: LocalCluster, namespace: str, name: str, text: str, what: str) -> dict[str, Any]:
    """The VA once its decision's reason says ``text`` (within 90 s)."""
    found: dict[str, Any] = wait_for(
        lambda: (v := _decided(cluster, namespace, name)) is not None and text in _reason(v) and v,
        timeout=90,
        what=what,
    )
    return found


def _replicas(cluster: LocalCluster, namespace: str, name: str) -> int:
    """The Deployment's spec replicas (0 while it does not exist)."""
    out = cluster.kubectl(
        "get", "deployment", "-n", namespace, name, "-o", "jsonpath={.spec.replicas}", check=False
    )
    return int(out.stdout or 0)


def _cluster_wide(cluster: LocalCluster, sa_config: Path, tmp_path: Path, instance: str) -> OperatorProcess:
    """An operator serving every namespace, confined by its controller instance to the VAs labelled for
    it (the cluster is shared with the other tests)."""
    env = {**_prometheus_env(cluster), "CONTROLLER_INSTANCE": instance}
    return OperatorProcess(sa_config, None, tmp_path, env=env)


def _model_alone(va_body: dict[str, Any], classes: dict[str, str], costs: dict[str, str]) -> int:
    """What the queueing model alone decides for this VA at the stand-in's load (the floor off)."""
    va = VariantAutoscaling.model_validate(va_body)
    planned = planned_from_va(
        va,
        namespace=va.metadata.namespace,
        accelerator=va.accelerator_label,
        current_replicas=1,
        current_max_batch=None,
        load=ObservedLoad(RPM, 100.0, 64.0),
        config=parse_main_config({}),
    )
    request = PlanRequest(
        variants=(planned,),
        accelerators=parse_accelerator_costs(costs).accelerators,
        classes=parse_service_classes(classes),
        optimizer=optimizer_config(parse_main_config({})),
        capacity=None,
    )
    return OptimizerPlanner().plan(request).decisions[va.key].replicas


def _checks(generation: str) -> tuple[list[str], dict[str, str]]:
    """The scale targets to create, and per variant what must decide it."""
    targets = {
        "2025-10": ["granite-8b-a100"],
        "v0.4": ["llama-8b-l4", "llama-8b-h100"],
        "v0.5": ["qwen-32b-a100-decode"],
        "v0.6-v0.8": ["llama-70b-h100", "llama-70b-a100"],
        "v0.9": ["mistral-7b-decode", "mistral-7b-l4"],
    }[generation]
    deciders = {
        "2025-10": {"granite-8b-a100": "model"},
        # No service class: the profiled variant is sized by saturation too (as v0.4 did), V1 (its key).
        "v0.4": {"llama-8b-l4": "saturation-v1", "llama-8b-h100": "saturation-v1"},
        "v0.5": {"qwen-32b-a100": "saturation-v1"},
        # analyzerName "saturation" in the saturation ConfigMap: V2.
        "v0.6-v0.8": {"llama-70b-h100": "saturation-v2"},
        # Annotated objects: V2, v0.9's default; exported under the target's name.
        "v0.9": {"mistral-7b-decode": "saturation-v2", "mistral-7b-l4": "saturation-v2"},
    }[generation]
    return targets, deciders


@pytest.mark.parametrize("generation", ["2025-10", "v0.4", "v0.5", "v0.6-v0.8", "v0.9"])
def test_each_generation_reaches_a_decision(
    full_cluster: LocalCluster,
    sa_config: Path,
    full_namespace: str,
    standin: VllmStandIn,
    tmp_path: Path,
    generation: str,
) -> None:
    ns = full_namespace
    targets, deciders = _checks(generation)
    models = {
        "2025-10": "ibm/granite-8b",
        "v0.4": "meta/llama-3.1-8b",
        "v0.5": "Qwen/Qwen3-32B",
        "v0.6-v0.8": "meta/llama-3.1-70b",
        "v0.9": "mistralai/Mistral-7B-Instruct-v0.3",
    }
    for target in targets:
        full_cluster.apply(_deployment(ns, target))
        standin.pod(models[generation], ns, f"{target}-6b9f7c5d4f-k2x7q", rpm=RPM, output_tokens=64.0)
    configmaps = _apply_generation(full_cluster, generation, ns)
    env = _prometheus_env(full_cluster)
    if generation == "v0.6-v0.8":
        env["CONTROLLER_INSTANCE"] = "team-a"  # its VA is labelled for team-a
    try:
        _series_ready(full_cluster, ns)
        operator = OperatorProcess(sa_config, ns, tmp_path, env=env)
        with running(operator):
            for variant, decider in deciders.items():
                if generation == "v0.9":
                    _annotated_decision(full_cluster, operator, ns, variant, decider)
                    continue
                va = wait_for(
                    lambda v=variant: _decided(full_cluster, ns, v),
                    timeout=90,
                    what=f"a decision for {variant}",
                )
                assert _reason(va).startswith(decider) or (decider == "model" and "Premium" in _reason(va))
                assert conditions(va)["TargetResolved"]["reason"] == "TargetFound"
                assert "ownerReferences" not in va["metadata"]
                labels = {"variant_name": variant, "namespace": ns}
                labels["accelerator_type"] = va["status"]["desiredOptimizedAlloc"].get("accelerator") or ""
                if generation == "v0.6-v0.8":
                    labels["controller_instance"] = "team-a"
                assert (
                    operator.metric("wva_desired_replicas", **labels)
                    == va["status"]["desiredOptimizedAlloc"]["numReplicas"]
                )
            if generation == "2025-10":
                # The 2025-10 VA keeps WVA's exact numbers: the floor does not bind (the stand-in's KV
                # cache is a third full), so the model's count stands.
                body = next(
                    d
                    for d in yaml.safe_load_all(
                        (GENERATIONS / generation / "variantautoscaling.yaml").read_text()
                    )
                    if d
                )
                body["metadata"]["namespace"] = ns
                cms = {
                    d["metadata"]["name"]: d["data"]
                    for d in yaml.safe_load_all((GENERATIONS / generation / "configmaps.yaml").read_text())
                    if d
                }
                expected = _model_alone(body, cms["service-classes-config"], cms["accelerator-unit-costs"])
                va = get_va(full_cluster, ns, "granite-8b-a100")
                assert va["status"]["desiredOptimizedAlloc"]["numReplicas"] == expected
            if generation == "v0.6-v0.8":
                # Not labelled for team-a: another controller's; left alone.
                for other in ("llama-70b-a100", "llama-70b-lws"):
                    assert "status" not in get_va(full_cluster, ns, other)
    finally:
        for path in configmaps:
            full_cluster.kubectl("delete", "-n", OPERATOR_NS, "-f", str(path), "--ignore-not-found")
        for target in targets:
            standin.remove(ns, f"{target}-6b9f7c5d4f-k2x7q")


def _annotated_decision(
    cluster: LocalCluster, operator: OperatorProcess, ns: str, target: str, decider: str
) -> None:
    labels = {"variant_name": target, "namespace": ns, "accelerator_type": ""}
    wait_for(
        lambda: operator.metric("wva_desired_replicas", **labels) is not None,
        timeout=90,
        what=f"wva_desired_replicas for {target}",
    )
    assert operator.metric("wva_desired_replicas", **labels) == 1.0

    def explained() -> list[dict[str, Any]]:
        out = cluster.kubectl("get", "events", "-n", ns, "-o", "json").stdout
        return [
            e
            for e in json.loads(out)["items"]
            if e["reason"] == "DecisionChanged"
            and "-> 1 replicas" in e["message"]
            and decider in e["message"]
            and e["involvedObject"]["kind"] in ("HorizontalPodAutoscaler", "ScaledObject")
        ]

    found = wait_for(explained, timeout=60, what="a DecisionChanged Event on the annotated object")
    assert {e["involvedObject"]["kind"] for e in found} <= {"HorizontalPodAutoscaler", "ScaledObject"}


def test_deleting_the_target_leaves_the_va_and_recreating_it_resumes_scaling(
    full_cluster: LocalCluster, sa_config: Path, full_namespace: str, standin: VllmStandIn, tmp_path: Path
) -> None:
    ns, name, model = full_namespace, "vllme-l4", "default/default"
    full_cluster.apply(_deployment(ns, name))
    uid = json.loads(full_cluster.kubectl("get", "deployment", "-n", ns, name, "-o", "json").stdout)[
        "metadata"
    ]["uid"]
    va = yaml.safe_load((ROOT / "deploy/samples/variantautoscaling-final.yaml").read_text())
    va["metadata"]["namespace"] = ns
    va["spec"]["actuation"] = {"mode": "patch"}
    # What an earlier version of this operator set (WVA 2025-10's ownership): the VA owned by its target.
    va["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": name,
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]
    full_cluster.apply(va)
    standin.pod(model, ns, f"{name}-6b9f7c5d4f-k2x7q", rpm=RPM, kv_usage=0.95)  # saturated: V1 asks +1
    operator = OperatorProcess(sa_config, ns, tmp_path, env=_prometheus_env(full_cluster))
    try:
        _series_ready(full_cluster, ns)
        with running(operator):
            replicas = functools.partial(_replicas, full_cluster, ns, name)
            wait_for(lambda: replicas() == 2, timeout=90, what="saturation-v1 to scale the target to 2")
            body = get_va(full_cluster, ns, name)
            assert "ownerReferences" not in body["metadata"]  # removed: exactly ours
            assert _reason(body).startswith("saturation-v1")

            full_cluster.kubectl(
                "delete", "deployment", "-n", ns, name, "--wait=true", "--cascade=foreground"
            )
            gone = wait_for(
                lambda: (
                    (c := conditions(get_va(full_cluster, ns, name)).get("TargetResolved"))
                    and c["status"] == "False"
                    and c
                ),
                timeout=60,
                what="TargetResolved=False",
            )
            assert gone["reason"] == "TargetNotFound"
            # The garbage collector has processed the Deployment (its ReplicaSets are gone): the VA stays.
            wait_for(
                lambda: (
                    not json.loads(full_cluster.kubectl("get", "replicasets", "-n", ns, "-o", "json").stdout)[
                        "items"
                    ]
                ),
                timeout=60,
                what="the Deployment's ReplicaSets to be collected",
            )
            assert get_va(full_cluster, ns, name)["metadata"]["name"] == name

            full_cluster.apply(_deployment(ns, name))
            wait_for(
                lambda: conditions(get_va(full_cluster, ns, name))["TargetResolved"]["status"] == "True",
                timeout=60,
                what="TargetResolved=True again",
            )
            wait_for(lambda: replicas() == 2, timeout=90, what="scaling to resume on the new target")
    finally:
        standin.remove(ns, f"{name}-6b9f7c5d4f-k2x7q")


def test_a_namespaces_own_saturation_configmap_and_the_exclude_annotation(
    full_cluster: LocalCluster, sa_config: Path, full_namespace: str, standin: VllmStandIn, tmp_path: Path
) -> None:
    """WVA's namespace-local configuration and namespace exclusion, with deploy/rbac's ClusterRole: the
    namespace's own ``wva-saturation-scaling-config`` replaces the operator namespace's for its variants;
    annotated ``wva.llmd.ai/exclude: "true"`` its variants are left alone; the annotation gone, served."""
    ns, name, model = full_namespace, "vllme-l4", "default/default"
    full_cluster.apply(_deployment(ns, name))
    va = yaml.safe_load((ROOT / "deploy/samples/variantautoscaling-final.yaml").read_text())
    va["metadata"]["namespace"] = ns
    va["spec"]["actuation"] = {"mode": "patch"}
    # The operator runs cluster-wide (a namespaced one serves its namespaces whatever their annotation);
    # its controller instance confines it to this VA on the shared cluster.
    va["metadata"].setdefault("labels", {})["wva.llmd.ai/controller-instance"] = "namespaces-test"
    full_cluster.apply(va)
    # KV cache 85 % used: saturated under the global default (kvCacheThreshold 0.80), not under the
    # namespace's own thresholds.
    standin.pod(model, ns, f"{name}-6b9f7c5d4f-k2x7q", rpm=RPM, kv_usage=0.85)
    local = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "wva-saturation-scaling-config", "namespace": ns},
        "data": {"default": "kvCacheThreshold: 0.95\nkvSpareTrigger: 0.05\n"},
    }
    full_cluster.apply(local)
    operator = _cluster_wide(full_cluster, sa_config, tmp_path, "namespaces-test")
    replicas = functools.partial(_replicas, full_cluster, ns, name)

    try:
        _series_ready(full_cluster, ns)
        with running(operator):
            # 1. The namespace's thresholds decide: the replica has spare capacity, stays at 1.
            decided = _decided_saying(
                full_cluster,
                ns,
                name,
                "spare capacity",
                "a saturation-v1 decision under the namespace's own thresholds",
            )
            assert _reason(decided).startswith("saturation-v1") and replicas() == 1
            assert operator.metric("variant_autoscaler_variants") == 1.0
            # 2. Excluded, and its ConfigMap deleted: the operator lets go of the variant (it counts no
            # variant) and changes nothing, though the global thresholds would now scale it.
            full_cluster.kubectl("annotate", "namespace", ns, "wva.llmd.ai/exclude=true", "--overwrite")
            wait_for(
                lambda: operator.metric("variant_autoscaler_variants") == 0.0,
                timeout=60,
                what="the operator to let go of the excluded variant",
            )
            # (Deleted only now: a cycle that began before the annotation would still serve the variant.)
            full_cluster.kubectl("delete", "configmap", "-n", ns, "wva-saturation-scaling-config")
            before = get_va(full_cluster, ns, name)["status"]
            time.sleep(8.0)  # four cycles at GLOBAL_OPT_INTERVAL 2s
            assert replicas() == 1 and get_va(full_cluster, ns, name)["status"] == before
            # 3. The annotation removed: served again, now under the global thresholds (saturated: +1).
            full_cluster.kubectl("annotate", "namespace", ns, "wva.llmd.ai/exclude-")
            wait_for(lambda: replicas() == 2, timeout=90, what="the global thresholds to scale to 2")
            assert "saturated" in _reason(get_va(full_cluster, ns, name))
    finally:
        full_cluster.kubectl("annotate", "namespace", ns, "wva.llmd.ai/exclude-", check=False)
        standin.remove(ns, f"{name}-6b9f7c5d4f-k2x7q")


def _gpu_deployment(namespace: str, name: str, gpus: int) -> dict[str, Any]:
    body = _deployment(namespace, name)
    body["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return body


def _saturated_a100_va(
    cluster: LocalCluster,
    standin: VllmStandIn,
    ns: str,
    name: str,
    instance: str,
    model: str = "default/default",
) -> str:
    """A saturation-sized VA (WVA's final shape, labelled for ``instance``) on a Deployment of one replica
    holding two A100s, rolled out, its pod reporting a KV cache 95 % full: it asks for a second replica.
    Returns the stand-in pod's name."""
    cluster.apply(_gpu_deployment(ns, name, 2))
    va = yaml.safe_load((ROOT / "deploy/samples/variantautoscaling-final.yaml").read_text())
    va["metadata"].update(namespace=ns, name=name)
    va["metadata"]["labels"] = {
        "inference.optimization/acceleratorName": "A100",
        "wva.llmd.ai/controller-instance": instance,
    }
    va["spec"]["scaleTargetRef"]["name"] = name
    va["spec"]["actuation"] = {"mode": "patch"}
    cluster.apply(va)
    cluster.kubectl("rollout", "status", "-n", ns, f"deployment/{name}", "--timeout=90s")
    pod = f"{name}-6b9f7c5d4f-k2x7q"
    standin.pod(model, ns, pod, rpm=RPM, kv_usage=0.95)
    return pod


def _saturation_config(default: str) -> dict[str, Any]:
    """The operator namespace's saturation ConfigMap with this ``default`` entry."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "wva-saturation-scaling-config", "namespace": OPERATOR_NS},
        "data": {"default": default},
    }


def test_wvas_gpu_limiter_holds_a_saturation_scale_up_until_gpus_are_free(
    full_cluster: LocalCluster, sa_config: Path, full_namespace: str, standin: VllmStandIn, tmp_path: Path
) -> None:
    """WVA's ``enableLimiter`` over a saturation-sized VA, on the cluster's real inventory (two kwok nodes
    of four A100s, the real scheduler): while other pods hold every A100 its saturated replica gets no
    second one, and the status says why; once they are gone it scales."""
    ns, name = full_namespace, "vllme-a100"
    pod = _saturated_a100_va(full_cluster, standin, ns, name, "limiter-test")
    # The other six A100s: four on the node our replica does not use, two beside it.
    hogs = [_gpu_deployment(ns, "hog-4", 4), _gpu_deployment(ns, "hog-2", 2)]
    for hog in hogs:
        full_cluster.apply(hog)
        full_cluster.kubectl(
            "rollout", "status", "-n", ns, f"deployment/{hog['metadata']['name']}", "--timeout=90s"
        )
    full_cluster.apply(_saturation_config("enableLimiter: true\n"))
    operator = _cluster_wide(full_cluster, sa_config, tmp_path, "limiter-test")
    replicas = functools.partial(_replicas, full_cluster, ns, name)

    try:
        _series_ready(full_cluster, ns)
        with running(operator):
            decided = _decided_saying(
                full_cluster,
                ns,
                name,
                "limited by the GPU inventory",
                "a saturation scale-up limited by the GPU inventory",
            )
            assert "to 1 (asked 2)" in _reason(decided) and "0 NVIDIA-A100-PCIE-80GB free" in _reason(decided)
            assert replicas() == 1
            for hog in hogs:
                full_cluster.kubectl("delete", "deployment", "-n", ns, hog["metadata"]["name"], "--wait=true")
            wait_for(lambda: replicas() == 2, timeout=120, what="the scale-up once the A100s are free")
    finally:
        full_cluster.kubectl(
            "delete", "configmap", "-n", OPERATOR_NS, "wva-saturation-scaling-config", check=False
        )
        for hog in hogs:
            full_cluster.kubectl("delete", "deployment", "-n", ns, hog["metadata"]["name"], check=False)
        standin.remove(ns, pod)


def test_wvas_namespace_quota_caps_a_namespace_below_the_inventory_until_it_is_raised(
    full_cluster: LocalCluster, sa_config: Path, full_namespace: str, standin: VllmStandIn, tmp_path: Path
) -> None:
    """WVA's namespace-scoped quota limiter: the namespace may hold 2 A100s (the cluster has 8 free), so
    its saturated variant gets no second replica and its status says why; the ConfigMap edited to 4,
    the next cycle scales it."""
    ns, name = full_namespace, "vllme-quota"
    pod = _saturated_a100_va(full_cluster, standin, ns, name, "quota-test")

    def quota(gpus: int) -> dict[str, Any]:
        tenants = {
            "name": "tenants",
            "type": "quota",
            "scope": "namespace",
            "namespaceQuotas": {ns: {"A100": gpus}},
        }
        limiters = yaml.safe_dump({"limiters": [{"type": "gpu-inventory"}, tenants]})
        return _saturation_config(f"enableLimiter: true\n{limiters}")

    full_cluster.apply(quota(2))
    operator = _cluster_wide(full_cluster, sa_config, tmp_path, "quota-test")
    replicas = functools.partial(_replicas, full_cluster, ns, name)
    try:
        _series_ready(full_cluster, ns)
        with running(operator):
            decided = _decided_saying(
                full_cluster, ns, name, "namespace GPU quota", "a scale-up limited by the namespace's quota"
            )
            assert "limited by the namespace GPU quota ('tenants') to 1 (asked 2)" in _reason(decided)
            assert f"namespace {ns} may hold 2 NVIDIA-A100-PCIE-80GB, 2 held now" in _reason(decided)
            assert replicas() == 1
            full_cluster.apply(quota(4))
            wait_for(lambda: replicas() == 2, timeout=120, what="the scale-up the quota allows")
    finally:
        full_cluster.kubectl(
            "delete", "configmap", "-n", OPERATOR_NS, "wva-saturation-scaling-config", check=False
        )
        standin.remove(ns, pod)
