"""The engine on every WVA generation's objects, through the real adapters, against in-memory Kubernetes
and Prometheus: the later ConfigMaps, profile-less variants sized by saturation, saturation as the floor,
annotated HPAs and ScaledObjects, TargetResolved, the controller instance, scale to zero and from zero."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest

from variant_autoscaler.adapters.inventory import node_gpus
from variant_autoscaler.adapters.profile_metrics import QUERIES_PER_CYCLE as PROFILE_QUERIES
from variant_autoscaler.adapters.prometheus import QUERIES_PER_CYCLE
from variant_autoscaler.settings import Settings
from vatesting.fakes import NS, OPERATOR_NS, VA, Harness, deployment, load_yaml

MODEL = "default/default"


def _settings(**overrides: Any) -> Settings:
    return Settings(debounce_seconds=0, leader_election=False, conflict_retries=3, **overrides)


def _harness(settings: Settings | None = None, **cm: str) -> Harness:
    h = Harness(**cm)
    if settings is not None:
        h.settings = settings
        h.engine = h.new_engine()
    return h


def _final_va(name: str = "vllme-l4", **spec: Any) -> dict[str, Any]:
    """WVA's final CRD shape: no profile, no class; sized by saturation."""
    va = load_yaml("deploy/samples/variantautoscaling-final.yaml")
    va["metadata"]["name"] = name
    va["spec"]["scaleTargetRef"]["name"] = name
    va["spec"].update(spec)
    return dict(va)


def _configmap(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": OPERATOR_NS},
        "data": data,
    }


def _busy(h: Harness, target: str, pods: int, *, kv: float, waiting: float = 0.0, **kw: Any) -> None:
    for i in range(pods):
        h.prom.set_pod(MODEL, NS, f"{target}-7d4f8b9c6d-{i:05d}", kv=kv, waiting=waiting, **kw)


def _on_a100_node(h: Harness, gpus: int) -> None:
    """The cluster's inventory: one ready node with ``gpus`` A100s."""
    node = {
        "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-PCIE-80GB"}},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    h.engine._nodes = lambda: [node_gpus(node)]


def _status(h: Harness, name: str) -> dict[str, Any]:
    return h.status(name)


def _desired(h: Harness, name: str) -> int:
    return int(h.status(name)["desiredOptimizedAlloc"]["numReplicas"])


def _reason(h: Harness, name: str) -> str:
    return str(h.status(name)["desiredOptimizedAlloc"].get("reason") or "")


# --- ConfigMaps -------------------------------------------------------------------------------------------


async def test_a_final_crd_va_without_costs_or_classes_is_sized_by_saturation_not_invalid() -> None:
    h = _harness()
    for name in ("accelerator-unit-costs", "service-classes-config"):
        del h.kube.objects[("configmaps", OPERATOR_NS, name)]
    h.add_va(_final_va(), replicas=2)
    h.load(60.0)
    _busy(h, "vllme-l4", 2, kv=0.85)  # both replicas saturated (kvCacheThreshold 0.80)
    report = await h.engine.run_cycle()
    assert report.config_error is None
    conds = h.conditions("vllme-l4")
    assert conds["OptimizationReady"]["reason"] == "OptimizationSucceeded"
    assert "saturation-v1" in conds["OptimizationReady"]["message"]
    assert _desired(h, "vllme-l4") == 3
    assert _reason(h, "vllme-l4").startswith("saturation-v1: all 2 replicas saturated")
    changed = [e for e in h.kube.events() if e["reason"] == "DecisionChanged"]
    assert len(changed) == 1 and "saturation-v1" in changed[0]["message"]
    labels = (("accelerator_type", ""), ("namespace", NS), ("variant_name", "vllme-l4"))
    assert h.gauges()[("wva_desired_replicas", labels)] == 3
    # The status has no accelerator (neither label nor profile) and is within the CRD's schema.
    status = h.status("vllme-l4")
    assert "accelerator" not in status["desiredOptimizedAlloc"]
    assert status["currentAlloc"]["variantCost"] == "10.00"  # 2 replicas x variantCost 5.0


async def test_the_main_config_under_its_later_names_and_as_config_yaml(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = _harness()
    h.kube.put(
        _configmap(
            "wva-manager-config",
            {"config.yaml": "DEFAULT_ACTUATION_MODE: patch\nSOME_FUTURE_KEY: 1\n"},
        )
    )
    h.add_va(replicas=1)
    h.load(1200.0)
    with caplog.at_level(logging.WARNING):
        await h.engine.run_cycle()
        await h.engine.run_cycle()
    # wva-manager-config (v0.9's name) wins key by key over the 2025-10 name: patch mode.
    assert h.status()["actuation"]["mode"] == "patch"
    assert h.replicas() == _desired(h, VA) > 1
    unknown = [r.getMessage() for r in caplog.records if "SOME_FUTURE_KEY" in r.getMessage()]
    assert len(unknown) == 1  # logged once, never fatal


async def test_config_map_name_reads_only_that_one(tmp_path: Path) -> None:
    h = _harness(_settings(config_map_name="wva-variantautoscaling-config"))
    h.kube.put(
        _configmap("wva-variantautoscaling-config", {"PROMETHEUS_BASE_URL": "https://prometheus.test:9090"})
    )
    h.kube.put(_configmap("wva-manager-config", {"config.yaml": "DEFAULT_ACTUATION_MODE: patch"}))
    h.add_va(replicas=1)
    h.load(60.0)
    await h.engine.run_cycle()
    assert h.status()["actuation"]["mode"] == "metrics"  # wva-manager-config is not read


async def test_the_config_file_wins_over_the_configmaps(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("DEFAULT_ACTUATION_MODE: shadow\n")
    h = _harness(_settings(config_file=str(path)))
    h.add_va(replicas=1)
    h.load(60.0)
    await h.engine.run_cycle()
    assert h.status()["actuation"]["mode"] == "shadow"


async def test_queueing_model_slos_serve_a_va_without_a_service_class() -> None:
    h = _harness()
    del h.kube.objects[("configmaps", OPERATOR_NS, "service-classes-config")]
    h.kube.put(
        _configmap(
            "wva-queueing-model-config",
            {"default": "sloMultiplier: 3", "slo": f"model_id: {MODEL}\ntargetTTFT: 500\ntargetITL: 24\n"},
        )
    )
    h.add_va(replicas=1)
    h.load(60.0)
    await h.engine.run_cycle()
    conds = h.conditions()
    assert conds["OptimizationReady"]["reason"] == "OptimizationSucceeded"
    assert "wva-queueing-model-config" in _reason(h, VA)


async def test_a_queueing_configmap_without_targets_sizes_by_slos_inferred_with_slo_multiplier() -> None:
    h = _harness()
    del h.kube.objects[("configmaps", OPERATOR_NS, "service-classes-config")]
    h.kube.put(_configmap("wva-queueing-model-config", {"default": "sloMultiplier: 2\ntuningEnabled: true"}))
    h.add_va(replicas=1)
    h.load(60.0)
    await h.engine.run_cycle()
    conds = h.conditions()
    assert conds["OptimizationReady"]["reason"] == "OptimizationSucceeded"
    reason = _reason(h, VA)
    assert "SLOs inferred with sloMultiplier 2 (wva-queueing-model-config[default])" in reason
    assert "50 % of what one" in reason


# --- saturation -------------------------------------------------------------------------------------------


async def test_the_floor_raises_the_model_and_off_gives_the_models_exact_numbers() -> None:
    numbers = {}
    for floor in ("true", "false"):
        h = _harness(SATURATION_FLOOR=floor)
        h.add_va(replicas=1)
        h.load(30.0)  # one replica is plenty for the model
        _busy(h, VA, 1, kv=0.95, waiting=8)  # but its KV cache is full
        await h.engine.run_cycle()
        numbers[floor] = (_desired(h, VA), _reason(h, VA))
    assert numbers["false"][0] == 1 and "Premium" in numbers["false"][1]
    assert numbers["true"][0] == 2
    assert numbers["true"][1].startswith("saturation-v1: saturation floor above the model's 1")


async def test_with_the_floor_on_but_no_saturation_metrics_the_numbers_are_the_models() -> None:
    results = []
    for floor in ("true", "false"):
        h = _harness(SATURATION_FLOOR=floor)
        h.add_va(replicas=1)
        h.load(400.0)
        await h.engine.run_cycle()
        results.append(h.status()["desiredOptimizedAlloc"])
    assert results[0]["numReplicas"] == results[1]["numReplicas"] > 1
    assert results[0]["reason"] == results[1]["reason"]
    assert results[0]["ttftAverage"] == results[1]["ttftAverage"]


async def test_the_cheapest_variant_of_the_model_gets_the_replica() -> None:
    h = _harness()
    h.add_va(_final_va("cheap", variantCost="5.0"), replicas=1)
    h.add_va(_final_va("dear", variantCost="20.0"), replicas=1)
    h.load(60.0)
    _busy(h, "cheap", 1, kv=0.9)
    _busy(h, "dear", 1, kv=0.9)
    await h.engine.run_cycle()
    assert (_desired(h, "cheap"), _desired(h, "dear")) == (2, 1)


async def test_nothing_moves_while_replicas_are_starting() -> None:
    h = _harness()
    h.add_va(_final_va(), replicas=2)
    h.kube.get("deployments", NS, "vllme-l4")["status"]["readyReplicas"] = 1
    h.load(60.0)
    _busy(h, "vllme-l4", 1, kv=0.95)
    await h.engine.run_cycle()
    assert _desired(h, "vllme-l4") == 2
    assert "starting" in _reason(h, "vllme-l4")


async def test_without_saturation_metrics_a_profile_less_va_holds() -> None:
    h = _harness(DEFAULT_ACTUATION_MODE="patch")
    h.add_va(_final_va(), replicas=3)
    h.load(60.0)  # the model reports, but no pod reports KV-cache usage
    await h.engine.run_cycle()
    assert _desired(h, "vllme-l4") == 3 and h.replicas("vllme-l4") == 3
    assert "no fresh saturation metrics" in _reason(h, "vllme-l4")


async def test_v2_when_the_saturation_configmap_names_it() -> None:
    h = _harness()
    h.kube.put(_configmap("wva-saturation-scaling-config", {"default": 'analyzerName: "saturation"'}))
    h.add_va(_final_va(), replicas=1)
    h.load(60.0)
    _busy(h, "vllme-l4", 1, kv=0.95, waiting=4, blocks=1000)
    await h.engine.run_cycle()
    assert _reason(h, "vllme-l4").startswith("saturation-v2")
    assert _desired(h, "vllme-l4") == 2


async def test_saturation_config_map_name_reads_that_name_only_globally_and_in_the_namespace() -> None:
    # WVA's Helm chart prefixes the ConfigMap with the release and says so in SATURATION_CONFIG_MAP_NAME.
    named = "wva-release-wva-saturation-scaling-config"
    h = _harness(_settings(saturation_config_map_name=named))
    h.add_va(_final_va(), replicas=1)
    h.load(60.0)
    _busy(h, "vllme-l4", 1, kv=0.95, waiting=4, blocks=1000)
    # The default name is not read when another is named: V1 sizes it.
    h.kube.put(_configmap("wva-saturation-scaling-config", {"default": 'analyzerName: "saturation"'}))
    await h.engine.run_cycle()
    assert _reason(h, "vllme-l4").startswith("saturation-v1")
    h.kube.put(_configmap(named, {"default": 'analyzerName: "saturation"'}))
    await h.engine.run_cycle()
    assert _reason(h, "vllme-l4").startswith("saturation-v2")
    # In the variant's namespace the same name is the namespace-local one.
    h.kube.put(_local(named, NS, {"default": "kvCacheThreshold: 0.99\nkvSpareTrigger: 0.005"}))
    await h.engine.run_cycle()
    assert _reason(h, "vllme-l4").startswith("saturation-v1")


async def test_queueing_model_config_map_name_reads_that_name_only() -> None:
    named = "wva-release-wva-queueing-model-config"
    for name, read in (("wva-queueing-model-config", False), (named, True)):
        h = _harness(_settings(queueing_config_map_name=named))
        del h.kube.objects[("configmaps", OPERATOR_NS, "service-classes-config")]
        h.kube.put(_configmap(name, {"default": "sloMultiplier: 2\ntuningEnabled: true"}))
        h.add_va(replicas=1)
        h.load(60.0)
        await h.engine.run_cycle()
        succeeded = h.conditions()["OptimizationReady"]["reason"] == "OptimizationSucceeded"
        assert succeeded is read, _reason(h, VA)
        assert (f"({named}[default])" in _reason(h, VA)) is read


async def test_wvas_limiter_bounds_a_saturation_scale_up_by_the_gpus_the_nodes_have() -> None:
    # enableLimiter as WVA users set it; the variant's Deployment asks two GPUs per replica on A100s.
    for gpus, expected in ((4, 2), (6, 3)):
        h = _harness()
        h.kube.put(_configmap("wva-saturation-scaling-config", {"default": "enableLimiter: true"}))
        va = _final_va()
        va["metadata"]["labels"] = {"inference.optimization/acceleratorName": "A100"}
        h.add_va(va, replicas=2)
        container = h.kube.get("deployments", NS, "vllme-l4")["spec"]["template"]["spec"]["containers"][0]
        container["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
        _on_a100_node(h, gpus)
        h.load(60.0)
        _busy(h, "vllme-l4", 2, kv=0.95)
        await h.engine.run_cycle()
        assert _desired(h, "vllme-l4") == expected, _reason(h, "vllme-l4")
        limited = "limited by the GPU inventory to 2 (asked 3)" in _reason(h, "vllme-l4")
        assert limited is (expected == 2)


async def test_wvas_limiter_serves_the_scale_up_its_models_priority_makes_most_urgent() -> None:
    # Two models' VAs on A100, 2 GPUs per replica, one replica each, on a node of 6: one more replica fits.
    # "vllme-a" is the more saturated (KV 97 % against 90 %); the saturation ConfigMap gives the other
    # model priority 1.05 (urgency 0.90 x 1.05 = 0.945 against 0.97: still "a"), then 2 (1.8: "b").
    other = "other/model"
    for priority, served in ((None, "vllme-a"), (1.05, "vllme-a"), (2, "vllme-b")):
        h = _harness()
        data = {"default": "enableLimiter: true"}
        if priority is not None:
            data["other"] = f"model_id: {other}\nnamespace: {NS}\npriority: {priority}"
        h.kube.put(_configmap("wva-saturation-scaling-config", data))
        for name, model in (("vllme-a", MODEL), ("vllme-b", other)):
            va = _final_va(name, modelID=model)
            va["metadata"]["labels"] = {"inference.optimization/acceleratorName": "A100"}
            h.add_va(va, replicas=1)
            spec = h.kube.get("deployments", NS, name)["spec"]["template"]["spec"]
            spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
            h.load(60.0, model=model)
        _on_a100_node(h, 6)
        h.prom.set_pod(MODEL, NS, "vllme-a-7d4f8b9c6d-00000", kv=0.97)
        h.prom.set_pod(other, NS, "vllme-b-7d4f8b9c6d-00000", kv=0.90)
        await h.engine.run_cycle()
        held = "vllme-b" if served == "vllme-a" else "vllme-a"
        assert _desired(h, served) == 2, (priority, _reason(h, served))
        assert _desired(h, held) == 1, (priority, _reason(h, held))
        assert "limited by the GPU inventory to 1 (asked 2)" in _reason(h, held)


async def test_wvas_namespace_quota_bounds_a_namespaces_variants_in_the_plan() -> None:
    # The final generation's namespace-scoped quota: this namespace may hold 2 A100s (the node has 8).
    tenants = f"""enableLimiter: true
limiters:
  - type: gpu-inventory
  - name: tenants
    type: quota
    scope: namespace
    namespaceQuotas: {{{NS}: {{A100: 2}}, default: {{A100: 0}}}}
"""
    desired = {}
    for data in ({"default": "enableLimiter: true"}, {"default": tenants}):
        h = _harness()
        h.kube.put(_configmap("wva-saturation-scaling-config", data))
        h.add_va(replicas=1)
        _on_a100_node(h, 8)
        h.load(300.0)
        await h.engine.run_cycle()
        desired[data["default"]] = _desired(h, VA), _reason(h, VA)
    free, quota = desired.values()
    assert 2 < free[0] <= 8, free
    assert quota[0] == 2, quota
    assert f"limited by the namespace GPU quota ('tenants') to 2 (asked {free[0]})" in quota[1]
    assert f"namespace {NS} may hold 2 NVIDIA-A100-PCIE-80GB, 1 held now" in quota[1]
    # The plan's GPUs as gauges: the device's, and the capped namespace's cap, holding and plan.
    gauges = h.gauges()
    a100 = "NVIDIA-A100-PCIE-80GB"
    assert gauges[("variant_autoscaler_gpus", (("device", a100), ("kind", "available")))] == 8
    assert gauges[("variant_autoscaler_gpus", (("device", a100), ("kind", "planned")))] == 2
    for kind, value in (("cap", 2), ("held", 1), ("planned", 2)):
        labels = (("device", a100), ("kind", kind), ("namespace", NS))
        assert gauges[("variant_autoscaler_namespace_gpus", labels)] == value


# --- namespace-local ConfigMaps and excluded namespaces ------------------------------------------------


def _local(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    cm = _configmap(name, data)
    cm["metadata"]["namespace"] = namespace
    return cm


def _namespace(name: str, **annotations: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "annotations": annotations}}


async def test_a_namespaces_own_saturation_configmap_replaces_the_global_one_there() -> None:
    h = _harness()
    h.add_va(_final_va(), replicas=2)
    h.load(60.0)
    _busy(h, "vllme-l4", 2, kv=0.85)  # saturated under the global default (kvCacheThreshold 0.80)
    lenient = {"default": "kvCacheThreshold: 0.95\nkvSpareTrigger: 0.05"}
    # Another namespace's ConfigMap changes nothing here; the operator namespace's is the global one.
    h.kube.put(_local("wva-saturation-scaling-config", "other-team", lenient))
    await h.engine.run_cycle()
    assert _desired(h, "vllme-l4") == 3
    # The variant's own namespace holds one: it replaces the global one for its variants.
    h.kube.put(_local("wva-saturation-scaling-config", NS, lenient))
    await h.engine.run_cycle()
    assert _desired(h, "vllme-l4") == 2
    assert _reason(h, "vllme-l4").startswith("saturation-v1")
    # One whose entries all fail to parse does not count (the global one applies), and says why once.
    h.kube.put(_local("wva-saturation-scaling-config", NS, {"default": "kvCacheThreshold: 7"}))
    await h.engine.run_cycle()
    assert _desired(h, "vllme-l4") == 3
    # Deleted: the global one again.
    h.kube.put(_local("wva-saturation-scaling-config", NS, lenient))
    await h.engine.run_cycle()
    assert _desired(h, "vllme-l4") == 2
    del h.kube.objects[("configmaps", NS, "wva-saturation-scaling-config")]
    await h.engine.run_cycle()
    assert _desired(h, "vllme-l4") == 3


async def test_a_namespace_local_configmap_the_operator_may_not_read_is_said_once_and_reads_as_absent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = _harness()
    h.add_va(_final_va(), replicas=2)
    h.load(60.0)
    _busy(h, "vllme-l4", 2, kv=0.85)
    lenient = {"default": "kvCacheThreshold: 0.95\nkvSpareTrigger: 0.05"}
    h.kube.put(_local("wva-saturation-scaling-config", NS, lenient))
    h.kube.forbid_names.add(("configmaps", "wva-saturation-scaling-config"))
    with caplog.at_level(logging.WARNING):
        await h.engine.run_cycle()
        assert _desired(h, "vllme-l4") == 3  # the global thresholds
        await h.engine.run_cycle()
    refused = [r.getMessage() for r in caplog.records if "HTTP 403" in r.getMessage()]
    assert len(refused) == 1 and f"{NS}/wva-saturation-scaling-config" in refused[0]
    assert "grant get on these ConfigMaps" in refused[0]


async def test_a_namespaces_own_scale_to_zero_configmap_applies_to_its_models() -> None:
    h = _harness(DEFAULT_ACTUATION_MODE="patch", SCALE_DOWN_STABILIZATION_WINDOW="0s")
    h.add_va(_final_va(minReplicas=0), replicas=1)
    h.load(0.0)
    _busy(h, "vllme-l4", 1, kv=0.0)
    h.prom.set_requests(MODEL, NS, 0.0)
    before = h.prom.queries
    await h.engine.run_cycle()  # scale to zero is off globally: no idle query, stays at 1
    assert h.prom.queries - before == QUERIES_PER_CYCLE + PROFILE_QUERIES
    assert h.replicas("vllme-l4") == 1
    zero = {"default": "enable_scale_to_zero: true\nretention_period: 5m"}
    h.kube.put(_local("wva-model-scale-to-zero-config", NS, zero))
    await h.engine.run_cycle()
    assert h.replicas("vllme-l4") == 0
    assert _reason(h, "vllme-l4").startswith("scale-to-zero: no request succeeded in the last 300s")


async def test_a_namespace_annotated_exclude_is_left_alone_until_the_annotation_goes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = _harness(DEFAULT_ACTUATION_MODE="patch")
    h.kube.put(_namespace(NS, **{"wva.llmd.ai/exclude": "true"}))
    h.add_va(_final_va(), replicas=2)
    h.kube.put(deployment("vllme-deployment", NS, replicas=1))
    h.kube.put(_annotated_hpa())
    h.load(60.0)
    _busy(h, "vllme-l4", 2, kv=0.85)
    with caplog.at_level(logging.INFO):
        report = await h.engine.run_cycle()
    assert report.variants == 0
    assert _status(h, "vllme-l4") == {} and h.replicas("vllme-l4") == 2
    assert h.kube.events() == [] and not any(n == "wva_desired_replicas" for n, _ in h.gauges())
    # Its ConfigMaps are not read either.
    assert h.kube.writes("GET", f"/namespaces/{NS}/configmaps/") == 0
    assert any("annotated wva.llmd.ai/exclude=true" in r.getMessage() for r in caplog.records)
    # An annotated object that cannot be planned is not refused there either...
    h.kube.put(_annotated_hpa("broken-hpa", "vllme-deployment", **{"llm-d.ai/variant-cost": "cheap"}))
    assert (await h.engine.run_cycle()).variants == 0 and h.kube.events() == []
    # A value other than "true" excludes nothing (WVA's comparison).
    h.kube.put(_namespace(NS, **{"wva.llmd.ai/exclude": "false"}))
    report = await h.engine.run_cycle()
    assert report.variants == 2 and "desiredOptimizedAlloc" in _status(h, "vllme-l4")
    assert any(n == "wva_desired_replicas" for n, _ in h.gauges())
    # ... until the namespace is served again: then it is.
    refusals = [e for e in h.kube.events() if e["reason"] == "InvalidAnnotations"]
    assert [e["involvedObject"]["name"] for e in refusals] == ["broken-hpa"]


async def test_exclusion_survives_a_failed_namespace_list_and_a_refused_one_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = _harness()
    h.kube.put(_namespace(NS, **{"wva.llmd.ai/exclude": "true"}))
    h.add_va(_final_va(), replicas=2)
    h.load(60.0)
    assert (await h.engine.run_cycle()).variants == 0
    h.kube.absent.add("namespaces")  # the list fails: the namespace stays excluded
    assert (await h.engine.run_cycle()).variants == 0
    h.kube.absent.clear()
    h.kube.forbid.add("namespaces")  # an install whose RBAC predates the rule: said once, never fatal
    with caplog.at_level(logging.WARNING):
        await h.engine.run_cycle()
        await h.engine.run_cycle()
    refused = [r for r in caplog.records if "HTTP 403" in r.getMessage()]
    assert len(refused) == 1 and "grant list on namespaces" in refused[0].getMessage()


async def test_a_namespaced_operator_serves_its_namespaces_whatever_their_annotation() -> None:
    h = _harness(_settings(namespaces=[NS]))
    h.kube.put(_namespace(NS, **{"wva.llmd.ai/exclude": "true"}))
    h.add_va(_final_va(), replicas=2)
    h.load(60.0)
    _busy(h, "vllme-l4", 2, kv=0.85)
    assert (await h.engine.run_cycle()).variants == 1
    assert _desired(h, "vllme-l4") == 3
    assert ("GET", "/api/v1/namespaces") not in h.kube.requests  # no list of namespaces at all


# --- annotated HPAs and ScaledObjects ---------------------------------------------------------------------


def _annotated_hpa(
    name: str = "vllme-hpa", target: str = "vllme-deployment", **annotations: str
) -> dict[str, Any]:
    hpa = load_yaml("deploy/hpa/hpa-annotated.yaml")
    hpa["metadata"]["name"] = name
    hpa["metadata"]["annotations"].update(annotations)
    hpa["spec"]["scaleTargetRef"]["name"] = target
    return dict(hpa)


async def test_an_annotated_hpa_is_a_variant_exported_under_its_targets_name() -> None:
    h = _harness()
    h.kube.absent.add("scaledobjects")  # KEDA not installed: not an error
    h.kube.put(deployment("vllme-deployment", NS, replicas=1))
    h.kube.put(_annotated_hpa())
    h.load(60.0)
    _busy(h, "vllme-deployment", 1, kv=0.95, waiting=4, blocks=1000)
    report = await h.engine.run_cycle()
    assert report.variants == 1 and report.outcomes == ()
    labels = (("accelerator_type", ""), ("namespace", NS), ("variant_name", "vllme-deployment"))
    assert h.gauges()[("wva_desired_replicas", labels)] == 2  # V2, v0.9's default for annotated objects
    events = h.kube.events()
    assert [e["involvedObject"]["kind"] for e in events] == ["HorizontalPodAutoscaler"]
    assert events[0]["reason"] == "DecisionChanged" and "saturation-v2" in events[0]["message"]
    # The decision's history stays in memory (no status): an unchanged decision posts nothing more.
    await h.engine.run_cycle()
    assert len(h.kube.events()) == 1
    assert h.kube.writes("PATCH", "/deployments/") == 0  # its HPA acts, not us


async def test_an_annotated_scaled_object_and_a_va_of_the_same_model_share_one_plan() -> None:
    h = _harness()
    h.add_va(_final_va("dear", variantCost="20.0"), replicas=1)
    h.kube.put(deployment("cheap", NS, replicas=1))
    h.kube.put(
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {
                "name": "cheap-scaler",
                "namespace": NS,
                "annotations": {
                    "llm-d.ai/managed": "true",
                    "llm-d.ai/model-id": MODEL,
                    "llm-d.ai/variant-cost": "2",
                },
            },
            "spec": {"scaleTargetRef": {"name": "cheap"}, "minReplicaCount": 1, "maxReplicaCount": 4},
        }
    )
    h.load(60.0)
    _busy(h, "cheap", 1, kv=0.9)
    _busy(h, "dear", 1, kv=0.9)
    await h.engine.run_cycle()
    labels = (("accelerator_type", ""), ("namespace", NS), ("variant_name", "cheap"))
    assert h.gauges()[("wva_desired_replicas", labels)] == 2  # the cheaper variant got the replica
    assert _desired(h, "dear") == 1


async def test_an_annotated_object_that_cannot_be_planned_gets_one_warning() -> None:
    h = _harness()
    h.kube.put(_annotated_hpa(**{"llm-d.ai/variant-cost": "cheap"}))
    await h.engine.run_cycle()
    await h.engine.run_cycle()
    warnings = [e for e in h.kube.events() if e["type"] == "Warning"]
    assert len(warnings) == 1 and "variant-cost" in warnings[0]["message"]
    assert warnings[0]["involvedObject"]["kind"] == "HorizontalPodAutoscaler"


# --- TargetResolved and ownership -------------------------------------------------------------------------


async def test_a_va_whose_target_is_deleted_stays_and_resumes_when_it_is_back() -> None:
    h = _harness(DEFAULT_ACTUATION_MODE="patch")
    h.add_va(replicas=1)
    h.load(60.0)
    await h.engine.run_cycle()
    del h.kube.objects[("deployments", NS, VA)]
    await h.engine.run_cycle()
    cond = h.conditions()["TargetResolved"]
    assert (cond["status"], cond["reason"]) == ("False", "TargetNotFound")
    assert any(e["reason"] == "TargetNotFound" for e in h.kube.events())
    h.kube.put(deployment(VA, NS, replicas=1))
    h.load(1200.0)
    await h.engine.run_cycle()
    assert h.conditions()["TargetResolved"]["status"] == "True"
    assert h.replicas() == _desired(h, VA) > 1


async def test_only_our_exact_owner_reference_is_removed() -> None:
    h = _harness()
    ours = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": VA,
        "uid": f"uid-{VA}",
        "controller": True,
        "blockOwnerDeletion": False,
    }
    theirs = {"apiVersion": "example.com/v1", "kind": "Owner", "name": "x", "uid": "u", "controller": False}
    va = load_yaml("deploy/samples/variantautoscaling.yaml")
    va["metadata"]["ownerReferences"] = [ours, theirs]
    h.add_va(va)
    h.load(60.0)
    await h.engine.run_cycle()
    assert h.kube.get("variantautoscalings", NS, VA)["metadata"]["ownerReferences"] == [theirs]
    # Someone else's controller reference to the same target (blockOwnerDeletion true) stays.
    other = {**ours, "blockOwnerDeletion": True}
    h.kube.get("variantautoscalings", NS, VA)["metadata"]["ownerReferences"] = [other]
    await h.engine.run_cycle()
    assert h.kube.get("variantautoscalings", NS, VA)["metadata"]["ownerReferences"] == [other]


# --- controller instance and metric families --------------------------------------------------------------


async def test_controller_instance_manages_only_its_vas_and_labels_wva_series() -> None:
    h = _harness(_settings(controller_instance="team-a", emit_inferno_metrics=False))
    mine = _final_va("mine")
    mine["metadata"]["labels"] = {"wva.llmd.ai/controller-instance": "team-a"}
    h.add_va(mine, replicas=1)
    h.add_va(_final_va("theirs"), replicas=1)
    h.load(60.0)
    _busy(h, "mine", 1, kv=0.5)
    report = await h.engine.run_cycle()
    assert [o.key for o in report.outcomes] == [(NS, "mine")]
    assert "status" not in h.kube.get("variantautoscalings", NS, "theirs")
    g = h.gauges()
    labels = (
        ("accelerator_type", ""),
        ("controller_instance", "team-a"),
        ("namespace", NS),
        ("variant_name", "mine"),
    )
    assert g[("wva_desired_replicas", labels)] == 1
    assert not any(name.startswith("inferno_") for name, _ in g)


# --- scale to zero and from zero --------------------------------------------------------------------------


async def test_an_idle_variant_goes_to_zero_and_missing_counters_never_do() -> None:
    h = _harness(DEFAULT_ACTUATION_MODE="patch", SCALE_DOWN_STABILIZATION_WINDOW="0s")
    h.kube.put(
        _configmap(
            "wva-model-scale-to-zero-config", {"default": "enable_scale_to_zero: true\nretention_period: 5m"}
        )
    )
    h.add_va(_final_va(minReplicas=0), replicas=1)
    h.load(0.0)
    _busy(h, "vllme-l4", 1, kv=0.0)
    before = h.prom.queries
    report = await h.engine.run_cycle()  # no idle series: unknown, not idle
    # One idle query beside the fixed sets.
    assert report.promql_queries == h.prom.queries - before == QUERIES_PER_CYCLE + PROFILE_QUERIES + 1
    assert h.replicas("vllme-l4") == 1
    h.prom.set_requests(MODEL, NS, 0.0)
    await h.engine.run_cycle()
    assert h.replicas("vllme-l4") == 0
    assert _reason(h, "vllme-l4").startswith("scale-to-zero: no request succeeded in the last 300s")


async def test_the_saturation_entrys_scale_to_zero_overrides_the_scale_to_zero_configmap() -> None:
    # WVA's last generation: `scaleToZero: {enabled: ...}` on a saturation entry wins over
    # wva-model-scale-to-zero-config for the models the entry covers.
    for inline, zero in (
        ("scaleToZero: {enabled: true, retention_period: 2m}", True),  # the ConfigMap says off
        ("scaleToZero: {enabled: false}", False),  # the ConfigMap says on
        ("kvCacheThreshold: 0.8", True),  # no inline setting: the ConfigMap's (on) applies
    ):
        h = _harness(DEFAULT_ACTUATION_MODE="patch", SCALE_DOWN_STABILIZATION_WINDOW="0s")
        on = "false" if "enabled: true" in inline else "true"
        h.kube.put(_configmap("wva-model-scale-to-zero-config", {"default": f"enable_scale_to_zero: {on}"}))
        h.kube.put(
            _configmap(
                "wva-saturation-scaling-config", {"m": f"model_id: {MODEL}\nnamespace: {NS}\n{inline}"}
            )
        )
        h.add_va(_final_va(minReplicas=0), replicas=1)
        h.load(0.0)
        _busy(h, "vllme-l4", 1, kv=0.0)
        h.prom.set_requests(MODEL, NS, 0.0)
        await h.engine.run_cycle()
        assert (h.replicas("vllme-l4") == 0) is zero, (inline, _reason(h, "vllme-l4"))
        if "2m" in inline:
            assert _reason(h, "vllme-l4").startswith("scale-to-zero: no request succeeded in the last 120s")


async def test_the_fast_loop_wakes_the_cheapest_variant_at_zero_with_one_query() -> None:
    h = _harness(DEFAULT_ACTUATION_MODE="patch")
    h.add_va(_final_va("cheap", minReplicas=0, variantCost="1"), replicas=0)
    h.add_va(_final_va("dear", minReplicas=0, variantCost="9"), replicas=0)
    for name in ("cheap", "dear"):
        h.kube.get("deployments", NS, name)["status"] = {"replicas": 0, "readyReplicas": 0}
    h.load(0.0)
    await h.engine.run_cycle()
    assert {s.key[1] for s in h.engine.zero.sleepers} == {"cheap", "dear"}
    assert await h.engine.zero.tick() == [] and h.prom.gateway_queries == 1  # nothing queued
    h.prom.gateway[MODEL] = 3.0
    assert await h.engine.zero.tick() == [(NS, "cheap")]
    assert h.prom.gateway_queries == 2  # one query per tick for every variant
    assert (h.replicas("cheap"), h.replicas("dear")) == (1, 0)
    assert "ScaledFromZero" in [
        e["reason"] for e in h.kube.events() if e["involvedObject"]["name"] == "cheap"
    ]
    # Woken: not idle within its retention period, whatever the counter says.
    assert h.engine.zero.woken_within((NS, "cheap"), 600.0)


async def test_no_gateway_query_while_no_variant_is_at_zero() -> None:
    h = _harness()
    h.add_va(replicas=1)
    h.load(60.0)
    await h.engine.run_cycle()
    assert h.engine.zero.sleepers == ()
    assert await h.engine.zero.tick() == [] and h.prom.gateway_queries == 0


async def test_every_generation_of_sample_reaches_a_decision_with_a_fixed_query_count() -> None:
    h = _harness()
    sample = load_yaml("deploy/samples/variantautoscaling.yaml")
    for i in range(5):
        va = copy.deepcopy(sample)
        va["metadata"]["name"] = f"old{i}"
        h.add_va(va)
        h.add_va(_final_va(f"new{i}"), replicas=1)
        h.kube.put(deployment(f"hpa{i}", NS))
        h.kube.put(_annotated_hpa(f"hpa{i}-hpa", f"hpa{i}"))
    h.load(60.0)
    before = h.prom.queries
    report = await h.engine.run_cycle()
    assert report.variants == 15
    assert h.prom.queries - before == QUERIES_PER_CYCLE + PROFILE_QUERIES
    # One LIST of the operator namespace's ConfigMaps, and two GETs (its own saturation and scale-to-zero
    # ConfigMaps) for the one namespace holding the 15 variants.
    assert h.engine.cycles_completed == 1
    assert h.kube.writes("GET", f"/namespaces/{h.settings.operator_namespace}/configmaps") == 1
    assert h.kube.writes("GET", f"/namespaces/{NS}/configmaps/") == 2
    assert h.kube.writes("GET", "/configmaps") == 3


async def test_an_annotated_object_exporting_under_a_vas_name_is_refused_not_duplicated() -> None:
    # Two series with the same labels would make the whole scrape fail: the VA's is kept.
    h = _harness()
    h.add_va(replicas=1)  # the VA vllme-deployment, named like its Deployment
    h.kube.put(_annotated_hpa())  # an annotated HPA for the same Deployment
    h.load(60.0)
    report = await h.engine.run_cycle()
    assert report.variants == 1
    warnings = [e for e in h.kube.events() if e["reason"] == "InvalidAnnotations"]
    assert len(warnings) == 1 and "already exports" in warnings[0]["message"]
    assert sum(1 for name, _ in h.gauges() if name == "wva_desired_replicas") == 1
