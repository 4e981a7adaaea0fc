"""The `full` profile: real scheduler and controllers, kwok GPU nodes, pod runner, Prometheus, HPA."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from localcluster import DEFAULT_GPU_INVENTORY, ClusterOptions, GpuNodeSpec, LocalCluster, wait_for
from localcluster.net import free_port
from localcluster.procs import proc_start_time
from localcluster.pytest_plugin import Emulator, emulator_deployment

# A stand-in server for tests of the runner itself: binds the port the runner gives through $(PORT).
HTTP_SERVER = (sys.executable, "-m", "http.server", "--bind", "127.0.0.1")


def _pods(cluster: LocalCluster, namespace: str, instance: str) -> list[Any]:
    return list(
        cluster.core_v1()
        .list_namespaced_pod(namespace, label_selector=f"app.kubernetes.io/instance={instance}")
        .items
    )


def _endpoints(cluster: LocalCluster) -> dict[str, Any]:
    path = cluster.podrunner_dir / "endpoints.json"
    return dict(json.loads(path.read_text(encoding="utf-8"))) if path.exists() else {}


def _alive(pid: int | None) -> bool:
    return pid is not None and proc_start_time(pid) is not None


def test_default_inventory_nodes_are_ready_gpu_nodes(full_cluster: LocalCluster) -> None:
    core = full_cluster.core_v1()
    for spec in DEFAULT_GPU_INVENTORY:
        node = core.read_node(spec.name)
        domain = spec.resource_name.split("/")[0]
        assert node.metadata.labels[f"{domain}/gpu.product"] == spec.product
        assert node.metadata.labels[f"{domain}/gpu.memory"] == str(spec.memory_mib)
        assert node.metadata.labels[f"{domain}/gpu.count"] == str(spec.gpus)
        assert node.status.capacity[spec.resource_name] == str(spec.gpus)
        assert node.status.allocatable[spec.resource_name] == str(spec.gpus)
        assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
    vendors = {spec.vendor for spec in DEFAULT_GPU_INVENTORY}
    assert vendors == {"nvidia", "amd", "intel"}
    # kwok renews a Lease per node like a kubelet, so the node-lifecycle controller keeps them Ready.

    coordination: Any = client.CoordinationV1Api(full_cluster.api_client())
    leases = {lease.metadata.name for lease in coordination.list_namespaced_lease("kube-node-lease").items}
    assert {spec.name for spec in DEFAULT_GPU_INVENTORY} <= leases


def test_deployment_pods_are_scheduled_on_gpu_nodes_and_served_then_cleaned_up(
    full_cluster: LocalCluster, full_namespace: str, emulator_pod: Callable[..., Emulator]
) -> None:
    # Two pods each asking for all 4 GPUs of an A100 node: the scheduler must spread them over both nodes.
    emulator = emulator_pod(
        "web",
        full_namespace,
        replicas=2,
        vendor="nvidia",
        gpus=4,
        product="NVIDIA-A100-PCIE-80GB",
        command=HTTP_SERVER,
        args=["$(PORT)"],
    )
    endpoints = emulator.wait_for_endpoints(2)
    pods = _pods(full_cluster, full_namespace, "web")
    assert sorted(p.spec.node_name for p in pods) == ["gpu-a100-0", "gpu-a100-1"]
    events = full_cluster.core_v1().list_namespaced_event(full_namespace).items
    scheduled = [e for e in events if e.reason == "Scheduled"]
    assert len(scheduled) == 2
    assert all(
        e.reporting_component == "default-scheduler" or e.source.component == "default-scheduler"
        for e in scheduled
    )

    for endpoint in endpoints:
        with urllib.request.urlopen(endpoint.url + "/", timeout=10) as response:
            assert response.status == 200

    records = _endpoints(full_cluster)
    pids = [records[f"{full_namespace}/{e.pod}"]["pid"] for e in endpoints]
    assert all(_alive(pid) for pid in pids)

    emulator.delete()
    wait_for(lambda: not _pods(full_cluster, full_namespace, "web"), timeout=60, what="pods to be deleted")
    wait_for(lambda: not any(_alive(pid) for pid in pids), timeout=30, what="the pod processes to stop")
    wait_for(
        lambda: not any(k.startswith(f"{full_namespace}/") for k in _endpoints(full_cluster)),
        timeout=30,
        what="the endpoints to be withdrawn",
    )


def test_a_deleted_pod_finishes_its_requests_before_it_goes(
    full_cluster: LocalCluster, full_namespace: str, emulator_pod: Callable[..., Emulator]
) -> None:
    """Deleting a pod terminates it as a kubelet does: SIGTERM, the emulator drains (serves its requests
    in flight and new ones for its shutdown delay), and only then is the pod object removed."""
    args = ["--model", "m", "--port", "8000", "--time-scale", "1", "--output-tokens", "fixed:100"]
    emulator = emulator_pod(
        "drain",
        full_namespace,
        model="m",
        args=[*args, "--shutdown-delay", "2"],
        grace_seconds=30,
        readiness_path="/health",
    )
    (endpoint,) = emulator.wait_for_endpoints(1)
    answers: list[int] = []

    def slow_request() -> None:  # about 2 s of decoding at time scale 1
        body = json.dumps({"model": "m", "prompt": "hello", "max_tokens": 100}).encode()
        request = urllib.request.Request(
            endpoint.url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            answers.append(response.status)

    in_flight = threading.Thread(target=slow_request)
    in_flight.start()
    wait_for(
        lambda: "vllm:num_requests_running" in _metrics(endpoint.url) and _running(endpoint.url) >= 1,
        timeout=30,
        what="the request to be running",
    )
    emulator.delete()
    wait_for(
        lambda: all(p.metadata.deletion_timestamp for p in _pods(full_cluster, full_namespace, "drain")),
        timeout=30,
        what="the pod to be terminating",
    )
    assert _pods(full_cluster, full_namespace, "drain")  # still there while it drains
    in_flight.join(60)
    assert answers == [200]  # the request in flight was served, not cut off
    wait_for(lambda: not _pods(full_cluster, full_namespace, "drain"), timeout=60, what="the pod to go")


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        return str(response.read().decode())


def _running(url: str) -> float:
    for line in _metrics(url).splitlines():
        if line.startswith("vllm:num_requests_running"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_gpu_requests_beyond_any_node_stay_pending(
    full_cluster: LocalCluster, full_namespace: str, emulator_pod: Callable[..., Emulator]
) -> None:
    emulator_pod("greedy", full_namespace, vendor="amd", gpus=9, command=HTTP_SERVER, args=["$(PORT)"])

    def unschedulable() -> bool:
        events = full_cluster.core_v1().list_namespaced_event(full_namespace).items
        return any(e.reason == "FailedScheduling" and "amd.com/gpu" in (e.message or "") for e in events)

    assert wait_for(unschedulable, timeout=60, what="a FailedScheduling event for amd.com/gpu")
    pods = _pods(full_cluster, full_namespace, "greedy")
    assert len(pods) == 1
    assert pods[0].status.phase == "Pending"
    assert not pods[0].spec.node_name


def test_removing_a_gpu_node_moves_its_pod(
    full_cluster: LocalCluster, full_namespace: str, emulator_pod: Callable[..., Emulator]
) -> None:
    spec = GpuNodeSpec("gpu-gaudi2-extra", "intel", "Intel-Gaudi-2-96GB", 98304, 8)
    full_cluster.add_gpu_node(spec)
    try:
        # 8 Gaudi GPUs: fits on gpu-gaudi2-0 or the extra node, never both pods on one.
        emulator = emulator_pod(
            "mover", full_namespace, vendor="intel", gpus=8, replicas=1, command=HTTP_SERVER, args=["$(PORT)"]
        )
        first = emulator.wait_for_endpoints(1)[0]
        node = _pods(full_cluster, full_namespace, "mover")[0].spec.node_name
        assert node in {"gpu-gaudi2-0", "gpu-gaudi2-extra"}
        full_cluster.remove_gpu_node(node)

        def moved() -> bool:
            pods = [p for p in _pods(full_cluster, full_namespace, "mover") if p.metadata.name != first.pod]
            return bool(pods) and pods[0].spec.node_name not in {None, node}

        assert wait_for(moved, timeout=90, what="the pod to be recreated on the remaining Gaudi node")
        again = emulator.wait_for_endpoints(1)
        assert again[0].pod != first.pod
    finally:  # leave the session's cluster with its default inventory
        if spec.name in full_cluster.nodes:
            full_cluster.remove_gpu_node(spec.name)
        gaudi = next(s for s in DEFAULT_GPU_INVENTORY if s.vendor == "intel")
        if gaudi.name not in full_cluster.nodes:
            full_cluster.add_gpu_node(gaudi)


def test_prometheus_scrapes_the_emulator_behind_a_pod_with_its_namespace(
    full_cluster: LocalCluster, full_namespace: str, emulator_pod: Callable[..., Emulator]
) -> None:
    emulator = emulator_pod("llm", full_namespace, model="acme/tiny-model", vendor="nvidia", gpus=1)
    [endpoint] = emulator.wait_for_endpoints(1)
    prometheus = full_cluster.prometheus_server()

    def series() -> list[dict[str, Any]]:
        return prometheus.query(f'{{__name__=~"vllm:.+", namespace="{full_namespace}"}}')

    found = wait_for(series, timeout=60, what="vllm: series of the emulator in Prometheus")
    names = {s["metric"]["__name__"] for s in found}
    assert all(name.startswith("vllm:") for name in names)
    sample = found[0]["metric"]
    assert sample["namespace"] == full_namespace
    assert sample["pod"] == endpoint.pod
    assert sample["instance"] == endpoint.address


@contextlib.contextmanager
def _desired_replicas_exporter(cluster: LocalCluster) -> Iterator[Any]:
    """A /metrics endpoint that publishes `inferno_desired_replicas` the way the operator does."""
    registry = CollectorRegistry()
    gauge = Gauge(
        "inferno_desired_replicas",
        "desired replicas",
        ["variant_name", "namespace", "accelerator_type"],
        registry=registry,
    )
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    prometheus = cluster.prometheus_server()
    # Like the operator's target: the target's own `namespace` turns the VA's into `exported_namespace`.
    prometheus.add_targets(
        "desired-replicas", [f"127.0.0.1:{port}"], {"namespace": "variant-autoscaler-system"}
    )
    try:
        yield gauge
    finally:
        prometheus.remove_targets("desired-replicas")
        server.shutdown()
        thread.join(10)


@pytest.fixture
def desired_replicas_exporter(full_cluster: LocalCluster) -> Iterator[Any]:
    with _desired_replicas_exporter(full_cluster) as gauge:
        yield gauge


def _external_metric_values(cluster: LocalCluster, namespace: str) -> list[str]:
    result = cluster.kubectl(
        "get",
        "--raw",
        f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/inferno_desired_replicas",
        check=False,
    )
    if result.returncode != 0:
        return []
    return [item["value"] for item in json.loads(result.stdout)["items"]]


def test_hpa_on_the_external_metric_scales_the_deployment(
    full_cluster: LocalCluster, full_namespace: str, desired_replicas_exporter: Any
) -> None:
    full_cluster.apply(
        emulator_deployment(
            "variant-a", full_namespace, replicas=1, gpus=0, command=HTTP_SERVER, args=["$(PORT)"]
        )
    )
    full_cluster.apply(
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "variant-a", "namespace": full_namespace},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "variant-a"},
                "minReplicas": 1,
                "maxReplicas": 10,
                "metrics": [
                    {
                        "type": "External",
                        "external": {
                            "metric": {
                                "name": "inferno_desired_replicas",
                                "selector": {"matchLabels": {"variant_name": "variant-a"}},
                            },
                            "target": {"type": "AverageValue", "averageValue": "1"},
                        },
                    }
                ],
            },
        }
    )

    apps: Any = client.AppsV1Api(full_cluster.api_client())

    def replicas() -> int:
        return int(apps.read_namespaced_deployment("variant-a", full_namespace).spec.replicas)

    gauge = desired_replicas_exporter
    gauge.labels("variant-a", full_namespace, "A100").set(3)
    assert wait_for(lambda: replicas() == 3, timeout=120, what="the HPA to scale variant-a to 3")
    assert _external_metric_values(full_cluster, full_namespace) == ["3"]
    gauge.labels("variant-a", full_namespace, "A100").set(2)
    assert wait_for(lambda: replicas() == 2, timeout=120, what="the HPA to scale variant-a down to 2")


def test_adapter_reads_prometheus_over_verified_https() -> None:
    """With `prometheus_tls`, Prometheus serves HTTPS and the adapter verifies it with the cluster CA."""
    with LocalCluster(ClusterOptions(profile="full", prometheus_tls=True, gpu_nodes=())) as cluster:
        assert cluster.prometheus_url.startswith("https://")
        assert cluster.prometheus_ca_file == cluster.ca_file
        namespace = "tls-check"
        with _desired_replicas_exporter(cluster) as gauge:
            gauge.labels("variant-b", namespace, "MI300X").set(5)
            values = wait_for(
                lambda: _external_metric_values(cluster, namespace),
                timeout=90,
                what="the adapter to serve the metric from the HTTPS Prometheus",
            )
            assert values == ["5"]
