"""Pure pieces of the harness: version pins, GPU inventory parsing, the pod runner's argv/env handling."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from localcluster import DEFAULT_GPU_INVENTORY, GpuNodeSpec, parse_inventory, read_versions
from localcluster.podrunner import expand, model_from_args, override_port, target_labels

ROOT = Path(__file__).resolve().parents[2]


def test_versions_file_pins_every_component_once() -> None:
    versions = read_versions()
    for key in ("KUBERNETES_VERSION", "ETCD_VERSION", "KWOK_VERSION", "PROMETHEUS_ADAPTER_VERSION"):
        assert versions[key].startswith("v"), key
    lines = [
        line.split("=", 1)[0]
        for line in (ROOT / "hack" / "versions.env").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    ]
    assert len(lines) == len(set(lines))


def test_default_inventory_mixes_three_vendors() -> None:
    products = {spec.product for spec in DEFAULT_GPU_INVENTORY}
    assert products == {"NVIDIA-A100-PCIE-80GB", "AMD-MI300X-192GB", "Intel-Gaudi-2-96GB"}
    a100 = next(spec for spec in DEFAULT_GPU_INVENTORY if spec.vendor == "nvidia")
    node = a100.manifest()
    assert node["metadata"]["labels"]["nvidia.com/gpu.memory"] == "81920"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(a100.gpus)


def test_inventory_file_expands_counts_and_rejects_mistakes() -> None:
    entry = {
        "vendor": "amd",
        "product": "AMD-MI300X-192GB",
        "memory": 196608,
        "gpusPerNode": 8,
        "count": 2,
        "namePrefix": "mi",
        "labels": {"zone": "a"},
        "taints": [{"key": "gpu", "value": "true"}],
    }
    specs = parse_inventory({"nodes": [entry]})
    assert [s.name for s in specs] == ["mi-0", "mi-1"]
    assert specs[0].manifest()["spec"]["taints"] == [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]
    assert specs[1].labels()["zone"] == "a"
    assert specs[1].resource_name == "amd.com/gpu"
    with pytest.raises(ValueError, match="unknown keys"):
        parse_inventory({"nodes": [{"vendor": "amd", "product": "x", "memory": 1, "gpus": 2}]})
    with pytest.raises(ValueError, match="vendor"):
        GpuNodeSpec("n", "acme", "x", 1, 1)
    with pytest.raises(ValueError, match="duplicate"):
        parse_inventory({"nodes": [{"vendor": "amd", "product": "x", "memory": 1, "namePrefix": "n"}] * 2})


def test_kubernetes_style_variable_expansion() -> None:
    env = {"PORT": "4242", "MODEL": "m"}
    assert expand("--port=$(PORT)", env) == "--port=4242"
    assert expand("$(MODEL)-$(UNDEFINED)", env) == "m-$(UNDEFINED)"
    assert expand("$$(PORT)", env) == "$(PORT)"


def test_port_override_and_model_detection() -> None:
    assert override_port(["serve", "--port", "8000", "--x"], 5) == ["serve", "--port", "5", "--x"]
    assert override_port(["serve", "--port=8000"], 5) == ["serve", "--port=5"]
    assert override_port(["python", "-m", "http.server"], 5) == ["python", "-m", "http.server"]
    assert override_port(["serve", "--host", "0.0.0.0", "--port=1"], 5) == [
        "serve",
        "--host",
        "127.0.0.1",
        "--port=5",
    ]
    assert model_from_args(["--model", "a/b"]) == "a/b"
    assert model_from_args(["--model=a/b", "--served-model-name", "alias"]) == "alias"
    assert model_from_args(["--port", "1"]) is None


def test_target_labels_keep_pod_identity_and_sanitise_pod_labels() -> None:
    pod = SimpleNamespace(
        metadata=SimpleNamespace(
            name="p-1",
            namespace="ns",
            labels={
                "app.kubernetes.io/name": "llm",
                "localcluster.variant-autoscaler.io/run": "true",
                "model_name": "spoof",
                "namespace": "spoof",
            },
        ),
        spec=SimpleNamespace(node_name="gpu-a100-0"),
    )
    labels = target_labels(pod, "server", ["vllm-emulator", "--model", "acme/m"])
    assert labels == {
        "app_kubernetes_io_name": "llm",
        "namespace": "ns",
        "pod": "p-1",
        "node": "gpu-a100-0",
        "container": "server",
        "model": "acme/m",
    }
