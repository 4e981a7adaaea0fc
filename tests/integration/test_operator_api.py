"""The operator against a real kube-apiserver + etcd (no controllers, no Prometheus): schema validation,
invalid specs reported in conditions, status conflicts (HTTP 409) retried, scale patches made on the
version read, probes and shutdown, the VariantAutoscaling informer (list, watch, 410).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from localcluster import LocalCluster, wait_for
from localcluster.errors import LocalClusterError
from variant_autoscaler.adapters.exporter import Exporter
from variant_autoscaler.adapters.kube import (
    ForbiddenError,
    KubeClient,
    load_credentials,
    target_from_deployment,
)
from variant_autoscaler.controller.events import EventRecorder
from variant_autoscaler.controller.informer import Informer
from variant_autoscaler.controller.lease import AlwaysLeader
from variant_autoscaler.engine import Engine
from variant_autoscaler.errors import ConflictError
from variant_autoscaler.planner import OptimizerPlanner
from variant_autoscaler.settings import Settings
from vatesting.harness import (
    OPERATOR_NS,
    ROOT,
    SERVICE_ACCOUNT,
    OperatorProcess,
    conditions,
    events,
    get_va,
    install,
    running,
    va_manifest,
)

UNREACHABLE_PROMETHEUS = "http://127.0.0.1:9"  # discard port: connection refused


@pytest.fixture
def sa_config(api_cluster: LocalCluster) -> Path:
    return install(api_cluster, UNREACHABLE_PROMETHEUS)


def _deployment(namespace: str, name: str = "vllme-deployment", replicas: int = 1) -> dict[str, Any]:
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


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.pop("modelID"), "modelID"),
        (lambda s: s["modelProfile"]["accelerators"][0].update(accCount=0), "accCount"),
        (lambda s: s["modelProfile"].update(accelerators=[]), "accelerators"),
        (lambda s: s.update(actuation={"mode": "yolo"}), "mode"),
        (lambda s: s.update(minReplicas=5, maxReplicas=2), "minReplicas must not exceed maxReplicas"),
    ],
)
def test_invalid_specs_are_rejected_by_the_api_server(
    api_cluster: LocalCluster, sa_config: Path, namespace: str, change: Any, message: str
) -> None:
    va = va_manifest(namespace)
    change(va["spec"])
    with pytest.raises(LocalClusterError, match=message):
        api_cluster.apply(va)


def test_wva_sample_and_our_sample_are_accepted_unchanged(api_cluster: LocalCluster, sa_config: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    api_cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "llm-d-sim"}})
    samples = root / "deploy" / "samples"
    out = "".join(
        api_cluster.kubectl("apply", "--dry-run=server", "-f", str(samples / name)).stdout
        for name in ("variantautoscaling.yaml", "variantautoscaling-patch.yaml")
    )
    assert "vllme-deployment" in out and "granite-13b-l40s" in out


def test_invalid_variant_and_unreachable_prometheus_are_reported_in_conditions(
    api_cluster: LocalCluster, sa_config: Path, namespace: str, tmp_path: Path
) -> None:
    api_cluster.apply(_deployment(namespace))
    api_cluster.apply(va_manifest(namespace))
    bad = va_manifest(namespace, name="bad-parms")
    bad["spec"]["modelProfile"]["accelerators"][0]["perfParms"]["decodeParms"] = {
        "alpha": "fast",
        "beta": "1",
    }
    api_cluster.apply(bad)  # schema-valid (strings), but not numbers: reported, never a crash loop
    operator = OperatorProcess(sa_config, namespace, tmp_path)
    with running(operator):

        def reported() -> dict[str, Any] | None:
            va = get_va(api_cluster, namespace, "bad-parms")
            return va if conditions(va).get("OptimizationReady", {}).get("reason") == "InvalidSpec" else None

        va = wait_for(reported, timeout=60, what="InvalidSpec on bad-parms", interval=0.5)
        assert "decodeParms.alpha" in conditions(va)["OptimizationReady"]["message"]
        good = wait_for(
            lambda: conditions(get_va(api_cluster, namespace)).get("MetricsAvailable"),
            timeout=60,
            what="MetricsAvailable on the valid variant",
            interval=0.5,
        )
        assert good["status"] == "False" and good["reason"] == "PrometheusError"
        status = get_va(api_cluster, namespace)["status"]
        assert status["desiredOptimizedAlloc"]["numReplicas"] == 1  # held at what runs
        assert status["currentAlloc"]["numReplicas"] == 1
        assert operator.health()[0] == 200
    warnings = [e for e in events(api_cluster, namespace, "bad-parms") if e["type"] == "Warning"]
    assert [e["reason"] for e in warnings] == ["InvalidSpec"]
    assert operator.process is not None and operator.process.returncode == 0  # graceful shutdown
    holder = api_cluster.kubectl(
        "get",
        "lease",
        "-n",
        OPERATOR_NS,
        "variant-autoscaler-leader",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ).stdout
    assert holder == ""  # released on shutdown


def test_status_conflict_is_retried_with_a_fresh_read(
    api_cluster: LocalCluster, sa_config: Path, namespace: str
) -> None:
    """A real 409 from the API server: the engine holds a VA read before someone else changed it."""
    api_cluster.apply(_deployment(namespace))
    api_cluster.apply(va_manifest(namespace))
    stale = get_va(api_cluster, namespace)
    api_cluster.kubectl("annotate", "variantautoscaling", "-n", namespace, "vllme-deployment", "touched=yes")
    assert (
        get_va(api_cluster, namespace)["metadata"]["resourceVersion"] != stale["metadata"]["resourceVersion"]
    )

    async def one_cycle() -> tuple[Any, float]:
        settings = Settings(operator_namespace=OPERATOR_NS, namespaces=[namespace], leader_election=False)
        kube = KubeClient(load_credentials(str(sa_config)))
        exporter = Exporter(is_active=lambda: True)
        engine = Engine(
            settings,
            kube=kube,
            exporter=exporter,
            events=EventRecorder(kube, instance="test"),
            leader=AlwaysLeader(),
            planner=OptimizerPlanner(),
            vas=lambda: [copy.deepcopy(stale)],
            nodes=lambda: [],
            clock=lambda: datetime.now(UTC),
        )
        try:
            report = await engine.run_cycle()
        finally:
            await engine.aclose()
            await kube.aclose()
        conflicts = exporter.registry.get_sample_value("variant_autoscaler_status_conflicts_total")
        return report, conflicts or 0.0

    report, conflicts = asyncio.run(one_cycle())
    assert conflicts == 1
    assert report.outcomes[0].written
    fresh = get_va(api_cluster, namespace)
    assert fresh["metadata"]["annotations"]["touched"] == "yes"  # the other writer's change survived
    assert conditions(fresh)["MetricsAvailable"]["reason"] == "PrometheusError"
    # The status write is owned by a field manager named after the operator (its User-Agent).
    shown = api_cluster.kubectl(
        "get", "variantautoscaling", "-n", namespace, "vllme-deployment", "--show-managed-fields", "-ojson"
    ).stdout
    managers = {(m["manager"], m.get("subresource")) for m in json.loads(shown)["metadata"]["managedFields"]}
    assert ("variant-autoscaler", "status") in managers


def _grant_apply_max_batch(cluster: LocalCluster, namespace: str) -> None:
    """deploy/rbac-apply-max-batch in ``namespace``, and wait until the authorizer says so."""
    overlay = ROOT / "deploy" / "rbac-apply-max-batch"
    cluster.kubectl(
        "apply", "-n", namespace, "-f", str(overlay / "role.yaml"), "-f", str(overlay / "role_binding.yaml")
    )
    user = f"system:serviceaccount:{OPERATOR_NS}:{SERVICE_ACCOUNT}"
    wait_for(
        lambda: (
            cluster.kubectl(
                "auth", "can-i", f"--as={user}", "patch", "deployments.apps", "-n", namespace, check=False
            ).stdout.strip()
            == "yes"
        ),
        timeout=30,
        what="the applyMaxBatch Role in effect",
    )


def test_scale_patches_land_only_on_the_replicas_they_were_decided_on(
    api_cluster: LocalCluster, sa_config: Path, namespace: str
) -> None:
    """Real 409s on /scale and 422s on a JSON patch's test, with the operator's RBAC: a target whose
    replicas (or args) someone else changed after the cycle read it is left alone; one whose only other
    change was elsewhere is patched on retry."""
    api_cluster.apply(_deployment(namespace, replicas=1))

    def replicas() -> int:
        out = api_cluster.kubectl("get", "deployment", "-n", namespace, "vllme-deployment", "-ojson").stdout
        return int(json.loads(out)["spec"]["replicas"])

    def container_args(args: list[str]) -> None:
        patch = [{"op": "add", "path": "/spec/template/spec/containers/0/args", "value": args}]
        api_cluster.kubectl(
            "patch",
            "deployment",
            "-n",
            namespace,
            "vllme-deployment",
            "--type=json",
            f"-p={json.dumps(patch)}",
        )

    async def scenario() -> None:
        settings = Settings(operator_namespace=OPERATOR_NS, namespaces=[namespace], leader_election=False)
        kube = KubeClient(load_credentials(str(sa_config)))
        engine = Engine(
            settings,
            kube=kube,
            exporter=Exporter(is_active=lambda: True),
            events=EventRecorder(kube, instance="test"),
            leader=AlwaysLeader(),
            planner=OptimizerPlanner(),
            vas=lambda: [],
            nodes=lambda: [],
            clock=lambda: datetime.now(UTC),
        )
        try:
            (read,) = await kube.list_deployments(namespace)
            target = target_from_deployment({"apiVersion": "apps/v1", "kind": "Deployment", **read})
            assert target.resource_version and target.spec_replicas == 1
            # Someone scales it to 3 after the read: the patch to 2 must not land.
            api_cluster.kubectl("scale", "deployment", "-n", namespace, "vllme-deployment", "--replicas=3")
            with pytest.raises(ConflictError):
                await kube.patch_scale(
                    "apps/v1", "Deployment", namespace, "vllme-deployment", 2,
                    resource_version=target.resource_version,
                )  # fmt: skip
            assert await engine.actuator.patch_replicas(target, 2) == 3
            assert replicas() == 3
            # Read again; then only an annotation changes: the retry on the new version patches.
            (read,) = await kube.list_deployments(namespace)
            target = target_from_deployment({"apiVersion": "apps/v1", "kind": "Deployment", **read})
            api_cluster.kubectl("annotate", "deployment", "-n", namespace, "vllme-deployment", "touched=yes")
            assert await engine.actuator.patch_replicas(target, 2) is None
            assert replicas() == 2
            # --max-num-seqs: a write to the pod template, refused without the opt-in RBAC overlay.
            container_args(["--model", "m", "--max-num-seqs", "64"])
            (read,) = await kube.list_deployments(namespace)
            target = target_from_deployment({"apiVersion": "apps/v1", "kind": "Deployment", **read})
            with pytest.raises(ForbiddenError):
                await engine.actuator.patch_max_batch(target, 16)
            await asyncio.to_thread(_grant_apply_max_batch, api_cluster, namespace)
            # A JSON patch that tests the args read; the API server's 422 says no more.
            container_args(["--model", "m", "--max-num-seqs", "32"])
            refused = await engine.actuator.patch_max_batch(target, 16)
            assert refused is not None and refused.reason == "TargetChanged"
            (read,) = await kube.list_deployments(namespace)
            target = target_from_deployment({"apiVersion": "apps/v1", "kind": "Deployment", **read})
            assert await engine.actuator.patch_max_batch(target, 16) is None
            out = api_cluster.kubectl(
                "get", "deployment", "-n", namespace, "vllme-deployment", "-ojson"
            ).stdout
            assert json.loads(out)["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "16"
        finally:
            await engine.aclose()
            await kube.aclose()

    asyncio.run(scenario())


def test_liveness_probe_reports_cycles(
    api_cluster: LocalCluster, sa_config: Path, namespace: str, tmp_path: Path
) -> None:
    api_cluster.apply(_deployment(namespace))
    api_cluster.apply(va_manifest(namespace))
    operator = OperatorProcess(sa_config, namespace, tmp_path)
    with running(operator):
        wait_for(lambda: operator.cycles() >= 2, timeout=60, what="two cycles")
        code, body = operator.health()
        assert code == 200
        probe = json.loads(body)["cycle"]
        assert probe["leader"] is True and probe["cycles"] >= 2


def test_the_vas_can_be_kept_by_a_kopf_index_instead(
    api_cluster: LocalCluster, sa_config: Path, namespace: str, tmp_path: Path
) -> None:
    """WVA_VA_WATCH=kopf, the alternative to the informer that bench/operator_scale.py measures: the
    cycles see the VAs kopf keeps, write their status, and a new VA triggers a cycle that sees it."""
    api_cluster.apply(_deployment(namespace))
    api_cluster.apply(va_manifest(namespace))
    operator = OperatorProcess(sa_config, namespace, tmp_path, env={"WVA_VA_WATCH": "kopf"})

    def reported(name: str) -> dict[str, Any] | None:
        return conditions(get_va(api_cluster, namespace, name)).get("MetricsAvailable")

    with running(operator):
        wait_for(lambda: reported("vllme-deployment"), timeout=60, what="a status written", interval=0.5)
        api_cluster.apply(_deployment(namespace, name="second"))
        api_cluster.apply(va_manifest(namespace, name="second"))
        wait_for(lambda: reported("second"), timeout=60, what="the new VA's status", interval=0.5)
        wait_for(lambda: operator.metric("variant_autoscaler_variants") == 2, timeout=60, what="both VAs")
        assert operator.health()[0] == 200


def test_the_va_informer_follows_the_api_server_cluster_wide(
    api_cluster: LocalCluster, sa_config: Path, namespace: str
) -> None:
    """List, watch, and list again after the server says the version is gone (410), as the operator's SA."""
    path = KubeClient.va_collection(None)

    async def scenario() -> tuple[list[tuple[str | None, str]], list[str], str | None]:
        seen: list[tuple[str | None, str]] = []
        deleted = asyncio.Event()

        def on_event(kind: str | None, obj: Mapping[str, Any]) -> None:
            seen.append((kind, obj["metadata"]["name"]))
            if seen[-1] == ("DELETED", "before"):
                deleted.set()

        kube = KubeClient(load_credentials(str(sa_config)))
        informer = Informer(kube, [path], what="VariantAutoscalings", on_event=on_event)
        api_cluster.apply(va_manifest(namespace, name="before"))
        task = asyncio.create_task(informer.run())
        try:
            await asyncio.wait_for(informer.wait_synced(), 30)
            await asyncio.to_thread(api_cluster.apply, va_manifest(namespace, name="after"))
            await asyncio.to_thread(
                api_cluster.kubectl, "label", "va", "-n", namespace, "after", "touched=yes"
            )
            await asyncio.to_thread(api_cluster.kubectl, "delete", "va", "-n", namespace, "before")

            await asyncio.wait_for(deleted.wait(), 30)
            names = sorted(
                o["metadata"]["name"] for o in informer.values() if o["metadata"]["namespace"] == namespace
            )
            labels = [o["metadata"].get("labels", {}).get("touched") for o in informer.values()]
            assert "yes" in labels and all("managedFields" not in o["metadata"] for o in informer.values())
            # A version older than the server keeps: the watch ends with 410 Gone, then a new list.
            resume = await informer._watch(path, "1")
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await kube.aclose()
        return seen, names, resume

    seen, names, resume = asyncio.run(scenario())
    mine = [event for event in seen if event[1] in ("before", "after")]
    assert mine == [(None, "before"), ("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "before")]
    assert names == ["after"]
    assert resume is None
