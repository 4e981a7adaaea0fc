"""pytest fixtures for tests that talk to Kubernetes (registered from tests/conftest.py).

Two session-scoped clusters, started on first use and stopped at the end of the session:

* ``api_cluster`` — the ``api`` profile (etcd + kube-apiserver), for integration tests;
* ``full_cluster`` — the ``full`` profile (controllers, scheduler, kwok GPU nodes, Prometheus,
  prometheus-adapter, pod runner), for e2e tests and tests of HPA/scheduling behaviour.

Fixtures built on them:

=========================  ===========================================================================
``kube_client``            ``kubernetes.client.ApiClient`` for ``api_cluster`` (admin)
``kubectl_apply``          ``apply(manifest, namespace=None)`` via our kubectl on ``api_cluster``
``sa_kubeconfig``          kubeconfig of the named ServiceAccount on ``api_cluster``
``namespace``              a fresh namespace on ``api_cluster`` (deleted afterwards)
``full_kube_client``       admin ApiClient for ``full_cluster``
``full_kubectl_apply``     ``apply(...)`` on ``full_cluster``
``full_namespace``         a fresh namespace on ``full_cluster`` (deleted afterwards)
``prometheus_url``         URL of ``full_cluster``'s Prometheus (``prometheus_ca_file``: CA, or None)
``emulator_pod``           factory: run a command (the vLLM emulator by default) behind a Deployment's
                           pods on ``full_cluster``; returns an :class:`Emulator` with the endpoints
=========================  ===========================================================================

A missing binary makes these fixtures *fail* with a message saying to run ``make cluster-bins``; they
never skip. ``VA_KEEP_CLUSTER_STATE=1`` keeps the clusters' state directories (logs) after the session.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from localcluster.cluster import ClusterOptions, LocalCluster, Profile, wait_for
from localcluster.gpu import VENDOR_DOMAINS
from localcluster.names import ENDPOINT_ANNOTATION, RUN_LABEL

ApplyFn = Callable[..., str]


def _start(profile: Profile) -> Iterator[LocalCluster]:
    cluster = LocalCluster(ClusterOptions(profile=profile))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def api_cluster() -> Iterator[LocalCluster]:
    """etcd + kube-apiserver, shared by the whole session."""
    yield from _start("api")


@pytest.fixture(scope="session")
def full_cluster() -> Iterator[LocalCluster]:
    """The full local cluster, shared by the whole session."""
    yield from _start("full")


@pytest.fixture(scope="session")
def kube_client(api_cluster: LocalCluster) -> Any:
    return api_cluster.api_client()


@pytest.fixture(scope="session")
def kubectl_apply(api_cluster: LocalCluster) -> ApplyFn:
    return api_cluster.apply


@pytest.fixture(scope="session")
def sa_kubeconfig(api_cluster: LocalCluster) -> Path:
    return api_cluster.service_account_kubeconfig


@pytest.fixture(scope="session")
def full_kube_client(full_cluster: LocalCluster) -> Any:
    return full_cluster.api_client()


@pytest.fixture(scope="session")
def full_kubectl_apply(full_cluster: LocalCluster) -> ApplyFn:
    return full_cluster.apply


@pytest.fixture(scope="session")
def prometheus_url(full_cluster: LocalCluster) -> str:
    return full_cluster.prometheus_url


@pytest.fixture(scope="session")
def prometheus_ca_file(full_cluster: LocalCluster) -> Path | None:
    return full_cluster.prometheus_ca_file


def _fresh_namespace(cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    base = "".join(ch if ch.isalnum() else "-" for ch in request.node.name.lower())[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    core = cluster.core_v1()
    core.create_namespace(
        {"metadata": {"name": name, "labels": {"localcluster.variant-autoscaler.io/test": "true"}}}
    )
    try:
        yield name
    finally:
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(name)


@pytest.fixture
def namespace(api_cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _fresh_namespace(api_cluster, request)


@pytest.fixture
def full_namespace(full_cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _fresh_namespace(full_cluster, request)


@dataclass(frozen=True)
class Endpoint:
    """One pod's local process."""

    pod: str
    address: str

    @property
    def url(self) -> str:
        return f"http://{self.address}"


@dataclass
class Emulator:
    """A Deployment whose pods the pod runner serves as local processes."""

    cluster: LocalCluster
    namespace: str
    name: str

    def endpoints(self) -> list[Endpoint]:
        """Endpoints of the Running pods that serve (the pod runner's annotation), sorted by pod name."""

        pods = self.cluster.core_v1().list_namespaced_pod(
            self.namespace, label_selector=f"app.kubernetes.io/instance={self.name}"
        )
        found = []
        for pod in pods.items:
            address = (pod.metadata.annotations or {}).get(ENDPOINT_ANNOTATION)
            if address and pod.metadata.deletion_timestamp is None and pod.status.phase == "Running":
                found.append(Endpoint(pod.metadata.name, address))
        return sorted(found, key=lambda e: e.pod)

    def wait_for_endpoints(self, count: int, timeout: float = 90.0) -> list[Endpoint]:
        """Wait until exactly ``count`` pods serve; returns their endpoints."""

        def ready() -> list[Endpoint] | None:
            found = self.endpoints()
            return found if len(found) == count else None

        result: list[Endpoint] = wait_for(
            ready, timeout=timeout, what=f"{count} serving pod(s) of {self.name}"
        )
        return result

    def scale(self, replicas: int) -> None:
        self.cluster.kubectl(
            "scale", "-n", self.namespace, f"deployment/{self.name}", f"--replicas={replicas}"
        )

    def delete(self) -> None:
        self.cluster.kubectl(
            "delete", "-n", self.namespace, f"deployment/{self.name}", "--ignore-not-found", "--wait=false"
        )


def emulator_deployment(
    name: str,
    namespace: str,
    *,
    model: str = "test-model",
    replicas: int = 1,
    vendor: str = "nvidia",
    gpus: int = 1,
    product: str | None = None,
    command: Sequence[str] = ("vllm-emulator",),
    args: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    grace_seconds: int = 1,
    readiness_path: str | None = None,
) -> dict[str, Any]:
    """A Deployment manifest the pod runner serves: GPU request, opt-in label, ``--port`` in the args;
    ``grace_seconds`` is the pods' termination grace period, ``readiness_path`` an httpGet readiness
    probe's path (none by default)."""
    domain = VENDOR_DOMAINS[vendor]
    pod_labels = {"app.kubernetes.io/instance": name, RUN_LABEL: "true", **(labels or {})}
    container: dict[str, Any] = {
        "name": "server",
        "image": "localcluster.invalid/vllm-emulator:dev",
        "command": list(command),
        "args": list(args) if args is not None else ["--model", model, "--port", "8000"],
        "ports": [{"name": "http", "containerPort": 8000}],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
    }
    if gpus:
        container["resources"] = {
            "requests": {f"{domain}/gpu": str(gpus)},
            "limits": {f"{domain}/gpu": str(gpus)},
        }
    if readiness_path is not None:
        container["readinessProbe"] = {"httpGet": {"path": readiness_path, "port": 8000}, "periodSeconds": 1}
    spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": grace_seconds}
    if product:
        spec["nodeSelector"] = {f"{domain}/gpu.product": product}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/instance": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/instance": name}},
            "template": {"metadata": {"labels": pod_labels}, "spec": spec},
        },
    }


@pytest.fixture
def emulator_pod(full_cluster: LocalCluster) -> Iterator[Callable[..., Emulator]]:
    """Factory: ``emulator_pod(name, namespace, **emulator_deployment kwargs)`` → :class:`Emulator`.

    Applies the Deployment and returns at once; call ``wait_for_endpoints(n)`` to wait until its pods serve.
    Every Deployment created through the factory is deleted after the test.
    """
    created: list[Emulator] = []

    def start(name: str, namespace: str, **kwargs: Any) -> Emulator:
        full_cluster.apply(emulator_deployment(name, namespace, **kwargs))
        emulator = Emulator(full_cluster, namespace, name)
        created.append(emulator)
        return emulator

    yield start
    for emulator in created:
        with contextlib.suppress(Exception):
            emulator.delete()
