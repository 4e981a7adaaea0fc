"""GPU inventory: how many accelerators of each device type the cluster can give to our variants.

A node contributes ``status.allocatable["<vendor>/gpu"]`` GPUs of the type named by its
``<vendor>/gpu.product`` label, for the vendors ``nvidia.com``, ``amd.com`` and ``intel.com`` (the labels
of the GPU operators and of WVA's former inventory code). Unschedulable and NotReady nodes contribute
nothing. GPUs requested by running pods that are *not* ours (not selected by a variant's scale target)
are subtracted from their node; GPUs held by our own variants stay in the pool, since the optimizer
re-plans them.

Limited optimizer mode uses the result; unlimited mode (WVA's only mode) ignores it. The functions here
work on plain API objects, so the node index and the tests use them directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

GPU_VENDORS: tuple[str, ...] = ("nvidia.com", "amd.com", "intel.com")


@dataclass(frozen=True, slots=True)
class NodeGPUs:
    """A node's GPUs as the inventory sees them: ``(vendor resource, device type, count)`` entries."""

    name: str
    usable: bool  # schedulable and Ready
    gpus: tuple[tuple[str, str, int], ...]


def parse_quantity(value: object) -> int:
    """A whole-number resource quantity (GPU counts are integers; ``"2"``, ``2``, ``"2k"``)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    text = str(value).strip()
    factors = {"k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for suffix, factor in sorted(factors.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix):
            try:
                return max(int(float(text[: -len(suffix)]) * factor), 0)
            except ValueError:
                return 0
    try:
        return max(int(float(text)), 0)
    except ValueError:
        return 0


def _ready(status: Mapping[str, Any]) -> bool:
    for cond in status.get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def node_gpus(body: Mapping[str, Any]) -> NodeGPUs:
    """Read a Node object."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    allocatable: Mapping[str, Any] = status.get("allocatable") or {}
    gpus: list[tuple[str, str, int]] = []
    for vendor in GPU_VENDORS:
        resource = f"{vendor}/gpu"
        count = parse_quantity(allocatable.get(resource, 0))
        if count > 0:
            device = labels.get(f"{vendor}/gpu.product") or resource
            gpus.append((resource, device, count))
    return NodeGPUs(
        name=str(meta.get("name") or ""),
        usable=not spec.get("unschedulable", False) and _ready(status),
        gpus=tuple(gpus),
    )


def pod_gpu_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """GPUs a pod holds, per vendor resource: the larger of its containers' sum and any init container."""
    spec = pod.get("spec") or {}

    def per_container(container: Mapping[str, Any]) -> dict[str, int]:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        out: dict[str, int] = {}
        for vendor in GPU_VENDORS:
            resource = f"{vendor}/gpu"
            value = requests.get(resource, limits.get(resource))
            if value is not None:
                out[resource] = parse_quantity(value)
        return out

    total: dict[str, int] = {}
    for container in spec.get("containers") or ():
        for resource, count in per_container(container).items():
            total[resource] = total.get(resource, 0) + count
    for container in spec.get("initContainers") or ():
        for resource, count in per_container(container).items():
            total[resource] = max(total.get(resource, 0), count)
    return {k: v for k, v in total.items() if v > 0}


def available_gpus(
    nodes: Iterable[NodeGPUs],
    pods: Iterable[Mapping[str, Any]],
    is_ours: Callable[[Mapping[str, Any]], bool],
) -> dict[str, int]:
    """GPUs per device type that our variants may use."""
    used: dict[tuple[str, str], int] = {}  # (node, vendor resource) -> GPUs held by foreign pods
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase")
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or phase in ("Succeeded", "Failed") or is_ours(pod):
            continue
        for resource, count in pod_gpu_requests(pod).items():
            used[(node, resource)] = used.get((node, resource), 0) + count
    out: dict[str, int] = {}
    for node in nodes:
        if not node.usable:
            continue
        for resource, device, count in node.gpus:
            free = max(count - used.get((node.name, resource), 0), 0)
            out[device] = out.get(device, 0) + free
    return out


def inventory_fingerprint(
    nodes: Iterable[NodeGPUs],
) -> frozenset[tuple[str, bool, tuple[tuple[str, str, int], ...]]]:
    """What matters about the nodes for planning; a change of it triggers a cycle."""
    return frozenset((n.name, n.usable, n.gpus) for n in nodes if n.gpus)
