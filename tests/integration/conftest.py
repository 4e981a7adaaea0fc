"""Fixtures shared by integration tests: the operator as a process on the full local cluster, and a
standalone Prometheus."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import Binaries, LocalCluster, PrometheusServer
from localcluster.procs import Supervisor
from vatesting.harness import LoadGenerator, install


@pytest.fixture
def sa_config(full_cluster: LocalCluster) -> Iterator[Path]:
    """The operator's ServiceAccount kubeconfig, with the shared ConfigMaps installed; they are installed
    again afterwards, as the next test expects them (a test may edit them). Modules that need another
    installation define their own ``sa_config``."""
    kubeconfig = install(full_cluster, full_cluster.prometheus_url, full_cluster.prometheus_ca_file)
    yield kubeconfig
    install(full_cluster, full_cluster.prometheus_url, full_cluster.prometheus_ca_file)


@pytest.fixture
def loads() -> Iterator[list[LoadGenerator]]:
    """Load generators a test starts; each is stopped at teardown, whatever the outcome."""
    started: list[LoadGenerator] = []
    yield started
    for load in started:
        load.stop()


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[PrometheusServer]:
    """A real Prometheus of its own (no cluster), stopped at teardown; tests add its scrape targets.
    Modules that need another scrape interval or a built-in target define their own."""
    binaries = Binaries.locate()
    binaries.require("prometheus")
    supervisor = Supervisor(tmp_path)
    server = PrometheusServer(
        binary=binaries.prometheus, directory=tmp_path / "prometheus", supervisor=supervisor
    )
    server.start()
    try:
        yield server
    finally:
        supervisor.stop_all()
