"""GPU inventory from node labels and allocatable, minus GPUs held by pods that are not ours."""

from __future__ import annotations

from typing import Any

import pytest

from variant_autoscaler.adapters.inventory import (
    available_gpus,
    inventory_fingerprint,
    node_gpus,
    parse_quantity,
    pod_gpu_requests,
)


def _node(
    name: str,
    vendor: str,
    product: str | None,
    count: Any,
    *,
    ready: bool = True,
    unschedulable: bool = False,
) -> dict[str, Any]:
    labels = {f"{vendor}/gpu.product": product} if product else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": unschedulable} if unschedulable else {},
        "status": {
            "allocatable": {f"{vendor}/gpu": count, "cpu": "32"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _pod(
    node: str | None,
    gpus: dict[str, Any],
    *,
    labels: dict[str, str] | None = None,
    phase: str = "Running",
    init: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": gpus}}]}
    if node:
        spec["nodeName"] = node
    if init:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": init}}]
    return {"metadata": {"namespace": "ns", "labels": labels or {}}, "spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("raw", "value"), [("8", 8), (4, 4), ("2k", 2000), ("1Ki", 1024), ("bad", 0), (True, 0)]
)
def test_parse_quantity(raw: Any, value: int) -> None:
    assert parse_quantity(raw) == value


def test_nodes_by_vendor_product_and_usability() -> None:
    nodes = [
        node_gpus(_node("a1", "nvidia.com", "NVIDIA-A100-PCIE-80GB", "8")),
        node_gpus(_node("a2", "nvidia.com", "NVIDIA-A100-PCIE-80GB", "4")),
        node_gpus(_node("m1", "amd.com", "AMD-MI300X-192GB", "8")),
        node_gpus(_node("g1", "intel.com", None, "2")),
        node_gpus(_node("down", "nvidia.com", "NVIDIA-A100-PCIE-80GB", "8", ready=False)),
        node_gpus(_node("cordoned", "nvidia.com", "NVIDIA-A100-PCIE-80GB", "8", unschedulable=True)),
        node_gpus({"metadata": {"name": "cpu-only"}, "status": {"allocatable": {"cpu": "4"}}}),
    ]
    assert available_gpus(nodes, [], lambda _: False) == {
        "NVIDIA-A100-PCIE-80GB": 12,
        "AMD-MI300X-192GB": 8,
        "intel.com/gpu": 2,  # no product label: the resource name stands in for the type
    }


def test_foreign_pods_are_subtracted_ours_are_not() -> None:
    nodes = [node_gpus(_node("a1", "nvidia.com", "NVIDIA-A100-PCIE-80GB", "8"))]
    pods = [
        _pod("a1", {"nvidia.com/gpu": "2"}),  # someone else's training job
        _pod("a1", {"nvidia.com/gpu": "1"}, labels={"app": "ours"}),  # a replica of one of our variants
        _pod("a1", {"nvidia.com/gpu": "4"}, phase="Succeeded"),  # finished
        _pod(None, {"nvidia.com/gpu": "4"}),  # pending, not bound
        _pod("a1", {"nvidia.com/gpu": "1"}, init={"nvidia.com/gpu": "3"}),  # init container needs 3
    ]
    ours = lambda pod: pod["metadata"]["labels"].get("app") == "ours"  # noqa: E731
    assert available_gpus(nodes, pods, ours) == {"NVIDIA-A100-PCIE-80GB": 3}
    # More foreign use than capacity never goes negative.
    greedy = [_pod("a1", {"nvidia.com/gpu": "16"})]
    assert available_gpus(nodes, greedy, ours) == {"NVIDIA-A100-PCIE-80GB": 0}


def test_pod_requests_fall_back_to_limits() -> None:
    pod = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"amd.com/gpu": "2"}, "limits": {"amd.com/gpu": "2"}}},
                {"resources": {"limits": {"nvidia.com/gpu": 1}}},
                {"resources": {}},
            ]
        }
    }
    assert pod_gpu_requests(pod) == {"amd.com/gpu": 2, "nvidia.com/gpu": 1}


def test_fingerprint_changes_only_with_gpu_facts() -> None:
    base = [node_gpus(_node("a1", "nvidia.com", "NVIDIA-A100-PCIE-80GB", "8"))]
    same = [node_gpus(_node("a1", "nvidia.com", "NVIDIA-A100-PCIE-80GB", 8))]
    fewer = [node_gpus(_node("a1", "nvidia.com", "NVIDIA-A100-PCIE-80GB", "6"))]
    down = [node_gpus(_node("a1", "nvidia.com", "NVIDIA-A100-PCIE-80GB", "8", ready=False))]
    assert inventory_fingerprint(base) == inventory_fingerprint(same)
    assert inventory_fingerprint(base) != inventory_fingerprint(fewer)
    assert inventory_fingerprint(base) != inventory_fingerprint(down)
