"""Fixtures of the end-to-end suite (docs/e2e.md).

Every scenario shares the session's ``full`` local cluster (``full_cluster`` from
``localcluster.pytest_plugin``) and gets its own namespace, whose pods are gone before the next scenario
starts (so they hold no GPUs and no CPU). The operator is installed with deploy/'s CRD, RBAC and
ConfigMaps through the integration harness (:mod:`vatesting.harness`), with a short cycle
interval and metrics window.

The measured figures (SLO attainment per scenario and phase, wall times) are written to
``$VA_E2E_RESULTS`` (default ``_out/e2e``) as ``results.json`` and ``results.md``, and printed at the
end of the session.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client

from localcluster import LocalCluster, wait_for
from vatesting.e2e import E2EResults, Kube, LoadDriver, Operator, Slo
from vatesting.harness import install

ROOT = Path(__file__).resolve().parents[2]
_RESULTS = pytest.StashKey[E2EResults]()


@pytest.fixture(scope="session", autouse=True)
def e2e_results(request: pytest.FixtureRequest) -> Iterator[E2EResults]:
    """Requested first (autouse), so the suite's wall time includes starting the cluster."""
    directory = Path(os.environ.get("VA_E2E_RESULTS") or ROOT / "_out" / "e2e")
    results = E2EResults(directory)
    request.config.stash[_RESULTS] = results
    yield results
    results.finish()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    results = config.stash.get(_RESULTS, None)
    if results is None or not results.rows:
        return
    terminalreporter.section("end-to-end: measured SLO attainment (at the load generator)")
    for line in results.markdown().splitlines():
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"(written to {results.directory})")


@pytest.fixture(scope="session")
def kube(full_cluster: LocalCluster) -> Kube:
    return Kube(full_cluster)


@pytest.fixture
def scenario_namespace(
    full_cluster: LocalCluster, kube: Kube, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A fresh namespace; deleted afterwards, waiting until its pods are gone."""
    base = request.node.name.removeprefix("test_").replace("_", "-")[:36].strip("-")
    name = f"e2e-{base}-{uuid.uuid4().hex[:5]}"
    kube.core.create_namespace({"metadata": {"name": name, "labels": {"variant-autoscaler.io/e2e": "true"}}})
    try:
        yield name
    finally:
        with contextlib.suppress(client.ApiException):
            kube.core.delete_namespace(name)
        wait_for(
            lambda: not kube.core.list_namespaced_pod(name).items,
            timeout=120,
            what=f"the pods of namespace {name} to be gone",
            interval=1.0,
        )


@pytest.fixture
def install_operator(full_cluster: LocalCluster) -> Iterator[Callable[..., Path]]:
    """``install_operator(**main_configmap_overrides)`` → the ServiceAccount's kubeconfig.

    CRD, namespace, RBAC and ConfigMaps from deploy/ (replaced, not merged), the main ConfigMap pointed at
    the cluster's Prometheus with a 2 s cycle and a 20 s metrics window (vatesting.harness). Reinstalled
    with the plain test settings afterwards, so the next scenario starts from them.
    """

    def apply(**overrides: str) -> Path:
        prometheus = full_cluster.prometheus_url
        return install(full_cluster, prometheus, full_cluster.prometheus_ca_file, **overrides)

    yield apply
    apply()


@pytest.fixture
def operator_factory(full_cluster: LocalCluster, tmp_path: Path) -> Iterator[Callable[..., Operator]]:
    """``operator_factory(kubeconfig, identity=...)`` → a started :class:`Operator`; stopped afterwards."""
    started: list[Operator] = []

    def start(kubeconfig: Path, identity: str = "e2e-operator") -> Operator:
        operator = Operator(full_cluster, kubeconfig, tmp_path, identity).start()
        started.append(operator)
        return operator

    yield start
    for operator in started:
        operator.stop()


@pytest.fixture
def load_factory(full_cluster: LocalCluster) -> Iterator[Callable[..., LoadDriver]]:
    """``load_factory(namespace, deployments, model, slo, **kw)`` → a :class:`LoadDriver` (not started).

    Every driver is stopped afterwards (the test normally stops it itself and reads its figures).
    """
    drivers: list[LoadDriver] = []

    def make(namespace: str, deployments: list[str], model: str, slo: Slo, **kwargs: object) -> LoadDriver:
        driver = LoadDriver(full_cluster, namespace, deployments, model, slo, **kwargs)  # type: ignore[arg-type]
        drivers.append(driver)
        return driver

    yield make
    for driver in drivers:
        with contextlib.suppress(AssertionError):
            driver.stop(drain_timeout=30.0)


@pytest.fixture
def timed(e2e_results: E2EResults, request: pytest.FixtureRequest) -> Iterator[None]:
    """Record the scenario's wall time in the results."""
    started = time.monotonic()
    yield
    e2e_results.timed(request.node.name.removeprefix("test_"), time.monotonic() - started)
