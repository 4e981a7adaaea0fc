"""Simulated GPU nodes: an inventory spec and the Node objects kwok manages.

A node is labelled like a real GPU node prepared by the vendors' device plugins / feature discovery
(``<vendor>.com/gpu.product``, ``<vendor>.com/gpu.memory`` in MiB, ``<vendor>.com/gpu.count``) and advertises
``<vendor>.com/gpu`` in ``status.capacity`` and ``status.allocatable`` so the real scheduler honours GPU
requests. kwok marks it Ready and runs the pods bound to it (without running anything: see the pod runner).

Inventory files (``--gpu-inventory``, ``VA_GPU_INVENTORY``) are YAML::

    nodes:
      - vendor: nvidia                 # nvidia | amd | intel
        product: NVIDIA-A100-PCIE-80GB
        memory: 81920                  # MiB per GPU
        gpusPerNode: 4
        count: 2                       # how many such nodes
        namePrefix: gpu-a100           # nodes gpu-a100-0, gpu-a100-1
        labels: {topology.kubernetes.io/zone: zone-a}   # optional extra labels
        taints: [{key: dedicated, value: gpu, effect: NoSchedule}]  # optional
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

VENDOR_DOMAINS: Mapping[str, str] = {"nvidia": "nvidia.com", "amd": "amd.com", "intel": "intel.com"}

#: Nodes managed by the harness carry this label (and kwok's own annotation).
SIMULATED_LABEL = "localcluster.variant-autoscaler.io/simulated"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"


@dataclass(frozen=True)
class GpuNodeSpec:
    """One simulated node with ``gpus`` accelerators of one product."""

    name: str
    vendor: str
    product: str
    memory_mib: int
    gpus: int
    cpu: str = "64"
    memory: str = "512Gi"
    max_pods: int = 110
    extra_labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[tuple[str, str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.vendor not in VENDOR_DOMAINS:
            raise ValueError(
                f"node {self.name}: vendor must be one of {sorted(VENDOR_DOMAINS)}, not {self.vendor!r}"
            )
        if self.gpus < 0 or self.memory_mib <= 0:
            raise ValueError(f"node {self.name}: gpus must be >= 0 and memory > 0")

    @property
    def resource_name(self) -> str:
        """The extended resource pods request, e.g. ``nvidia.com/gpu``."""
        return f"{VENDOR_DOMAINS[self.vendor]}/gpu"

    def labels(self) -> dict[str, str]:
        domain = VENDOR_DOMAINS[self.vendor]
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            SIMULATED_LABEL: "true",
            f"{domain}/gpu.product": self.product,
            f"{domain}/gpu.memory": str(self.memory_mib),
            f"{domain}/gpu.count": str(self.gpus),
        }
        labels.update(dict(self.extra_labels))
        return labels

    def manifest(self) -> dict[str, Any]:
        """The Node object, status included (the API server keeps a Node's status on create)."""
        resources = {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": str(self.max_pods),
            self.resource_name: str(self.gpus),
        }
        spec: dict[str, Any] = {}
        if self.taints:
            spec["taints"] = [{"key": k, "value": v, "effect": e} for k, v, e in self.taints]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": self.labels(),
                "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": spec,
            "status": {
                "capacity": dict(resources),
                "allocatable": dict(resources),
            },
        }


_INVENTORY_KEYS = frozenset(
    {
        "vendor",
        "product",
        "memory",
        "gpusPerNode",
        "count",
        "namePrefix",
        "labels",
        "taints",
        "cpu",
        "nodeMemory",
    }
)

#: The default inventory: a mix of the three vendors, as in a heterogeneous GPU cluster.
DEFAULT_GPU_INVENTORY: tuple[GpuNodeSpec, ...] = (
    GpuNodeSpec("gpu-a100-0", "nvidia", "NVIDIA-A100-PCIE-80GB", 81920, 4),
    GpuNodeSpec("gpu-a100-1", "nvidia", "NVIDIA-A100-PCIE-80GB", 81920, 4),
    GpuNodeSpec("gpu-mi300x-0", "amd", "AMD-MI300X-192GB", 196608, 8),
    GpuNodeSpec("gpu-gaudi2-0", "intel", "Intel-Gaudi-2-96GB", 98304, 8),
)


def parse_inventory(document: Any) -> tuple[GpuNodeSpec, ...]:
    """Build node specs from a parsed inventory document (see the module docstring for the format)."""
    if not isinstance(document, Mapping) or not isinstance(document.get("nodes"), list):
        raise ValueError("a GPU inventory is a mapping with a `nodes` list")
    specs: list[GpuNodeSpec] = []
    for index, entry in enumerate(document["nodes"]):
        if not isinstance(entry, Mapping):
            raise ValueError(f"nodes[{index}] must be a mapping")
        unknown = set(entry) - _INVENTORY_KEYS
        if unknown:
            raise ValueError(f"nodes[{index}]: unknown keys {sorted(unknown)}")
        try:
            vendor = str(entry["vendor"])
            product = str(entry["product"])
            memory = int(entry["memory"])
        except KeyError as missing:
            raise ValueError(f"nodes[{index}]: missing {missing}") from None
        prefix = str(entry.get("namePrefix", f"gpu-{vendor}-{index}"))
        labels = tuple((str(k), str(v)) for k, v in dict(entry.get("labels") or {}).items())
        taints = tuple(
            (str(t["key"]), str(t.get("value", "")), str(t.get("effect", "NoSchedule")))
            for t in entry.get("taints") or []
        )
        for n in range(int(entry.get("count", 1))):
            specs.append(
                GpuNodeSpec(
                    name=f"{prefix}-{n}",
                    vendor=vendor,
                    product=product,
                    memory_mib=memory,
                    gpus=int(entry.get("gpusPerNode", 8)),
                    cpu=str(entry.get("cpu", "64")),
                    memory=str(entry.get("nodeMemory", "512Gi")),
                    extra_labels=labels,
                    taints=taints,
                )
            )
    names = [spec.name for spec in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate node names in GPU inventory: {duplicates}")
    return tuple(specs)


def load_inventory(path: Path) -> tuple[GpuNodeSpec, ...]:
    return parse_inventory(yaml.safe_load(path.read_text(encoding="utf-8")))


def inventory_summary(specs: Iterable[GpuNodeSpec]) -> dict[str, int]:
    """Total GPUs per product, e.g. ``{"NVIDIA-A100-PCIE-80GB": 8, ...}``."""
    totals: dict[str, int] = {}
    for spec in specs:
        totals[spec.product] = totals.get(spec.product, 0) + spec.gpus
    return totals
