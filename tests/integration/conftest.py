"""Fixtures shared by the integration tests that run the operator as a process on the full local cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import LocalCluster
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
