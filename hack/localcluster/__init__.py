"""A local Kubernetes control plane built from upstream components, for tests and demos.

See docs/local-cluster.md. Installed by ``make install`` (hack/pyproject.toml);
``python -m localcluster up|down|status``.
"""

from localcluster.cluster import CONTROLLERS, PROFILES, ClusterOptions, LocalCluster, Profile, wait_for
from localcluster.errors import ComponentFailedError, LocalClusterError, MissingBinaryError
from localcluster.gpu import DEFAULT_GPU_INVENTORY, GpuNodeSpec, load_inventory, parse_inventory
from localcluster.names import ENDPOINT_ANNOTATION, RUN_LABEL
from localcluster.prometheus import PrometheusServer, ScrapeJob
from localcluster.versions import Binaries, read_versions

__all__ = [
    "CONTROLLERS",
    "DEFAULT_GPU_INVENTORY",
    "ENDPOINT_ANNOTATION",
    "PROFILES",
    "RUN_LABEL",
    "Binaries",
    "ClusterOptions",
    "ComponentFailedError",
    "GpuNodeSpec",
    "LocalCluster",
    "LocalClusterError",
    "MissingBinaryError",
    "Profile",
    "PrometheusServer",
    "ScrapeJob",
    "load_inventory",
    "parse_inventory",
    "read_versions",
    "wait_for",
]
