"""Every WVA generation's manifests on a real kube-apiserver with our CRD (and KEDA's ScaledObject CRD, from
its published module) installed: applied with ``kubectl apply`` unchanged (strict field validation: an
unknown field fails), stored as written; the CRD's CEL rules and bounds refuse what they must; the status
the operator's builders write for a sample of generated specs is accepted by the status subresource; and
deploy/'s HPA and ScaledObject samples are accepted. Acceptance only: decisions come with the engine."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from kubernetes import client

from localcluster import LocalCluster
from localcluster.errors import LocalClusterError
from variant_autoscaler.api import v1alpha1
from vatesting.wva import GENERATION_NAMES, GENERATIONS, KEDA_CRD, ROOT, generation_objects, vas_with_status


@pytest.fixture(scope="module")
def crds(api_cluster: LocalCluster) -> LocalCluster:
    api_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "crds"))
    api_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(KEDA_CRD))
    for crd in ("variantautoscalings.llmd.ai", "scaledobjects.keda.sh"):
        api_cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    return api_cluster


@pytest.fixture(scope="module")
def shared_namespace(crds: LocalCluster) -> Iterator[str]:
    name = "wva-generations-sample"
    crds.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        crds.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _get(cluster: LocalCluster, namespace: str, kind: str, name: str) -> dict[str, Any]:
    out = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json").stdout
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.mark.parametrize("generation", GENERATION_NAMES)
def test_each_generations_manifests_apply_unchanged(
    crds: LocalCluster, namespace: str, generation: str
) -> None:
    # What a user runs; strict field validation (kubectl's default, spelled out) refuses unknown fields.
    crds.kubectl("apply", "--validate=strict", "-n", namespace, "-f", str(GENERATIONS / generation))
    for obj in generation_objects(generation):
        kind, name = obj["kind"], obj["metadata"]["name"]
        group = obj["apiVersion"].rpartition("/")[0]
        stored = _get(crds, namespace, f"{kind.lower()}.{group}" if group else kind.lower(), name)
        if kind == "VariantAutoscaling":
            assert stored["spec"] == obj["spec"]  # no default injected, nothing pruned
            v1alpha1.VariantAutoscaling.model_validate(stored)
        elif kind == "ConfigMap":
            assert stored["data"] == obj["data"]
        else:
            assert (
                stored["metadata"]["annotations"].items()
                >= (obj["metadata"].get("annotations") or {}).items()
            )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"scaleTargetRef": {"kind": "StatefulSet", "name": "../../victim-ns/statefulsets/victim"}}, "name"),
        ({"minReplicas": 1_000_000_000}, "minReplicas"),
        ({"minReplicas": 5, "maxReplicas": 2}, "minReplicas must not exceed maxReplicas"),
        ({"scaleTargetRef": {"kind": "InferencePool", "name": "pool"}}, "apiVersion is required"),
        ({"variantCost": "ten"}, "variantCost"),
        ({"modelID": "m" * 257}, "modelID"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_the_api_server_refuses_what_the_crd_forbids(
    crds: LocalCluster, shared_namespace: str, spec: dict[str, Any], message: str
) -> None:
    va = {
        "apiVersion": "llmd.ai/v1alpha1",
        "kind": "VariantAutoscaling",
        "metadata": {"name": "refused", "namespace": shared_namespace},
        "spec": {"modelID": "m", **spec},
    }
    with pytest.raises(LocalClusterError, match=message):
        crds.kubectl("apply", "--validate=strict", "-f", "-", input=json.dumps(va))


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(body=vas_with_status())
def test_a_sample_of_generated_specs_and_their_status_are_accepted(
    crds: LocalCluster, shared_namespace: str, body: dict[str, Any]
) -> None:
    api = client.CustomObjectsApi(crds.api_client())
    body = copy.deepcopy(body)
    status = body.pop("status")
    body["metadata"]["namespace"] = shared_namespace
    name = body["metadata"]["name"]
    args = (v1alpha1.GROUP, v1alpha1.VERSION, shared_namespace, v1alpha1.PLURAL)
    with contextlib.suppress(client.ApiException):
        api.delete_namespaced_custom_object(*args, name)
    api.create_namespaced_custom_object(*args, body)
    api.patch_namespaced_custom_object_status(*args, name, {"status": status})
    stored = api.get_namespaced_custom_object(*args, name)
    assert (
        stored["status"]["desiredOptimizedAlloc"]["numReplicas"]
        == status["desiredOptimizedAlloc"]["numReplicas"]
    )
    api.delete_namespaced_custom_object(*args, name)


@pytest.mark.parametrize(
    "path",
    [
        "deploy/hpa/hpa.yaml",
        "deploy/hpa/hpa-wva.yaml",
        "deploy/hpa/hpa-annotated.yaml",
        "deploy/keda/scaledobject.yaml",
        "deploy/keda/scaledobject-annotated.yaml",
        "deploy/samples/variantautoscaling-final.yaml",
    ],
)
def test_deploys_hpa_and_keda_samples_are_accepted(crds: LocalCluster, path: str) -> None:
    crds.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "llm-d-sim"}})
    out = crds.kubectl("apply", "--validate=strict", "--dry-run=server", "-f", str(ROOT / path)).stdout
    assert "(server dry run)" in out
