"""A variant acts only in its own namespace: the operator process, with deploy/rbac's ClusterRole,
against a real API server.

Found when probed as an attacker would: a VariantAutoscaling in one namespace whose scaleTargetRef named
``../../victim-ns/statefulsets/victim`` made the operator patch another namespace's StatefulSet (the HTTP
client normalised the ``../`` in the URL, and the namespace was then taken from the object returned).
Here such variants, and variants whose target lives in another namespace or is of a cluster-scoped
kind, change nothing outside their namespace and are reported (a condition and a Warning Event), while
a legitimate variant next to them, configured the same way, is scaled: the cycles ran and patched.

The CRD may reject some of these names on its own (schema first); the operator must not rely on it (a
cluster can run an older CRD than its operator), so the test installs the CRD without any rule on
``scaleTargetRef`` for its duration. The operator's model then reports the traversal as an invalid spec
before the client sees it, so the client is also asked directly, as the operator's ServiceAccount.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster import LocalCluster, wait_for
from variant_autoscaler.adapters.kube import KubeClient, NotFoundError, load_credentials
from variant_autoscaler.adapters.refs import InvalidReferenceError
from vatesting.harness import ROOT, OperatorProcess, conditions, events, get_va, install, running, va_manifest

UNREACHABLE_PROMETHEUS = "http://127.0.0.1:9"
CRD = ROOT / "crds" / "llmd.ai_variantautoscalings.yaml"
WIDGETS = "widgets.security.test.example"
RULES = ("pattern", "maxLength", "x-kubernetes-validations", "enum", "format")


def _without_rules(schema: Any) -> Any:
    """A JSON schema with every string rule removed (types and structure kept)."""
    if isinstance(schema, dict):
        return {k: _without_rules(v) for k, v in schema.items() if k not in RULES}
    if isinstance(schema, list):
        return [_without_rules(v) for v in schema]
    return schema


def _permissive_crd() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        rules = [
            r for r in spec.get("x-kubernetes-validations", ()) if "scaleTargetRef" not in r.get("rule", "")
        ]
        spec["x-kubernetes-validations"] = rules
        if not rules:
            del spec["x-kubernetes-validations"]
        spec["properties"]["scaleTargetRef"] = _without_rules(spec["properties"]["scaleTargetRef"])
    return dict(crd)


@pytest.fixture
def permissive_crd(api_cluster: LocalCluster, sa_config: Path) -> Iterator[None]:
    # Replaced outright (a PUT): with server-side apply, rules another field manager applied would stay.
    api_cluster.kubectl("replace", "-f", "-", input=yaml.safe_dump(_permissive_crd()))
    try:
        yield
    finally:
        api_cluster.kubectl("replace", "-f", str(CRD))


@pytest.fixture
def sa_config(api_cluster: LocalCluster) -> Path:
    return install(api_cluster, UNREACHABLE_PROMETHEUS)


@pytest.fixture
def victim_ns(api_cluster: LocalCluster) -> Iterator[str]:
    name = f"victim-{uuid.uuid4().hex[:6]}"
    api_cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        with contextlib.suppress(Exception):
            api_cluster.kubectl("delete", "namespace", name, "--wait=false")


def _workload(kind: str, namespace: str, name: str, replicas: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "vllm", "image": "none.invalid/vllm"}]},
        },
    }
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def _widget_crd() -> dict[str, Any]:
    """A cluster-scoped kind with a /scale subresource: it has no namespace to belong to."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": WIDGETS},
        "spec": {
            "group": "security.test.example",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Cluster",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                    "subresources": {
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                        }
                    },
                }
            ],
        },
    }


def _state(cluster: LocalCluster, *args: str) -> tuple[int, str]:
    obj = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return int(obj["spec"]["replicas"]), str(obj["metadata"]["resourceVersion"])


async def _client_refuses(kubeconfig: Path, namespace: str, victim_ns: str) -> None:
    kube = KubeClient(load_credentials(str(kubeconfig)))
    traversal = f"../../{victim_ns}/statefulsets/victim"
    try:
        for call in (
            kube.get_scale("apps/v1", "StatefulSet", namespace, traversal),
            kube.patch_scale("apps/v1", "StatefulSet", namespace, traversal, 3),
            kube.patch_scale("apps/v1", "StatefulSet", f"{namespace}/../{victim_ns}", "victim", 3),
        ):
            with pytest.raises(InvalidReferenceError):
                await call
        with pytest.raises(NotFoundError):  # looked up where it was asked, and only there
            await kube.patch_scale("apps/v1", "StatefulSet", namespace, "victim", 3)
    finally:
        await kube.aclose()


def test_a_variant_never_acts_outside_its_namespace(
    api_cluster: LocalCluster,
    sa_config: Path,
    permissive_crd: None,
    namespace: str,
    victim_ns: str,
    tmp_path: Path,
) -> None:
    api_cluster.apply(_widget_crd())
    api_cluster.kubectl("wait", "--for=condition=Established", f"crd/{WIDGETS}", "--timeout=60s")
    widget = f"victim-{victim_ns}"
    api_cluster.apply(
        {
            "apiVersion": "security.test.example/v1",
            "kind": "Widget",
            "metadata": {"name": widget},
            "spec": {"replicas": 1},
        }
    )
    victims = {
        ("statefulset", "victim", "-n", victim_ns): _workload("StatefulSet", victim_ns, "victim"),
        ("deployment", "victim", "-n", victim_ns): _workload("Deployment", victim_ns, "victim"),
    }
    for manifest in victims.values():
        api_cluster.apply(manifest)
    api_cluster.apply(_workload("StatefulSet", namespace, "own"))
    before = {key: _state(api_cluster, *key) for key in victims}
    before[("widget", widget)] = _state(api_cluster, "widget", widget)

    # Every variant would be scaled to 3 if its target resolved: patch mode, minReplicas 3.
    common = {"minReplicas": 3, "actuation": {"mode": "patch"}}
    bad = {
        "traversal": {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": f"../../{victim_ns}/statefulsets/victim",
        },
        "other-ns-statefulset": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "victim"},
        "other-ns-deployment": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "victim"},
        "cluster-scoped": {"apiVersion": "security.test.example/v1", "kind": "Widget", "name": widget},
    }
    for name, ref in bad.items():
        api_cluster.apply(va_manifest(namespace, name=name, scaleTargetRef=ref, **copy.deepcopy(common)))
    own_ref = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "own"}
    api_cluster.apply(va_manifest(namespace, name="own", scaleTargetRef=own_ref, **copy.deepcopy(common)))

    operator = OperatorProcess(sa_config, namespace, tmp_path)
    with running(operator):

        def reported() -> dict[str, dict[str, Any]] | None:
            found = {}
            for name in bad:
                cond = conditions(get_va(api_cluster, namespace, name)).get("OptimizationReady")
                if cond is None or cond["status"] != "False":
                    return None
                found[name] = cond
            return found

        reports = wait_for(reported, timeout=90, what="the refused variants reported", interval=0.5)
        # The legitimate variant, same settings, was scaled: cycles ran and patched.
        wait_for(
            lambda: _state(api_cluster, "statefulset", "own", "-n", namespace)[0] == 3,
            timeout=60,
            what="the variant's own StatefulSet scaled to its minReplicas",
        )
        wait_for(lambda: operator.cycles() >= 3, timeout=60, what="three cycles")

    # The client on its own, as the operator's ServiceAccount, whatever the model above it checked.
    asyncio.run(_client_refuses(sa_config, namespace, victim_ns))

    after = {key: _state(api_cluster, *key) for key in before}
    assert after == before  # not a write of any kind, not even one that changed nothing

    # Why, in words, for each.
    assert reports["traversal"]["reason"] in ("TargetNotFound", "InvalidSpec")
    # Refused by the client (TargetNotFound) or already by the operator's model (InvalidSpec).
    traversal = reports["traversal"]["message"]
    assert "not a valid" in traversal or "scaleTargetRef.name" in traversal, traversal
    assert reports["other-ns-statefulset"]["reason"] == "TargetNotFound"
    assert f"{namespace}/victim not found" in reports["other-ns-statefulset"]["message"]
    assert reports["other-ns-deployment"]["reason"] == "TargetNotFound"
    assert f"Deployment {namespace}/victim not found" in reports["other-ns-deployment"]["message"]
    assert reports["cluster-scoped"]["reason"] == "TargetNotFound"
    assert "cluster-scoped" in reports["cluster-scoped"]["message"]
    for name in bad:
        va = get_va(api_cluster, namespace, name)
        # Not actuated (an invalid spec gets no Actuated condition at all).
        assert conditions(va).get("Actuated", {"status": "False"})["status"] == "False"
        warnings = {e["reason"] for e in events(api_cluster, namespace, name) if e["type"] == "Warning"}
        assert reports[name]["reason"] in warnings, (name, warnings)
    # Nothing about them was posted in the victim's namespace either.
    assert events(api_cluster, victim_ns) == []
