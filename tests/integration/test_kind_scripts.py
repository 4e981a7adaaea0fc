"""The kind scripts (hack/kind/*.sh) against a real API server, with kind, Helm and Docker faked.

kind needs Docker and node images from a registry, so `make kind-up` cannot run here. What can be
checked is checked for real: the scripts run unmodified; ``kubectl`` is the real one (the local
cluster's), pointed at a private ``api``-profile control plane whose kubeconfig context is named like
kind's, so every manifest the scripts apply — the generated kustomizations over deploy/default and
hack/kind/demo, the load-generator Job — is validated and stored by a real kube-apiserver; the GPU
capacity patch really lands on Node status. The fakes stand in for what needs a container runtime:

* ``kind`` — ``create cluster`` registers the Node objects the config describes (names and labels as
  kind would make them); ``get clusters``, ``load docker-image`` and ``delete cluster`` do the obvious;
* ``helm`` — records the release and checks that every values file it is given exists;
* ``docker`` — ``info`` and ``image inspect`` succeed;
* ``kubectl`` — only the waits that need controllers (``wait``, ``rollout status``, the Prometheus pod
  lookup) and ``logs`` are answered by the fake; everything else runs the real kubectl.

Every call is recorded, and the tests check the calls and the API server's state.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster import ClusterOptions, LocalCluster

ROOT = Path(__file__).resolve().parents[2]
KIND = ROOT / "hack" / "kind"
CLUSTER = "va-test"
CONTEXT = f"kind-{CLUSTER}"
VENDORS = ("nvidia.com", "amd.com", "intel.com")

FAKE = textwrap.dedent(
    """\
    import json, os, subprocess, sys
    from pathlib import Path

    import yaml

    tool = Path(sys.argv[0]).name
    args = sys.argv[1:]
    state = Path(os.environ["FAKE_STATE"])
    stdin = sys.stdin.read() if "-f" in args and "-" in args else None
    with open(state / "calls.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"tool": tool, "args": args, "stdin": stdin}) + "\\n")
    real = os.environ["REAL_KUBECTL"]
    clusters = state / "clusters"
    names = clusters.read_text().split() if clusters.exists() else []

    def kubectl(*argv, input=None):
        subprocess.run([real, "--context", os.environ["FAKE_CONTEXT"], *argv], input=input, text=True,
                       check=True, capture_output=True)

    def node_names(cluster, config):
        workers = [n for n in config["nodes"] if n["role"] == "worker"]
        yield f"{cluster}-control-plane", {}
        for i, node in enumerate(workers):
            yield f"{cluster}-worker{i + 1 if i else ''}", node.get("labels", {})

    def subcommand(argv):
        skip = False
        for a in argv:
            if skip:
                skip = False
            elif a in ("--context", "-n", "--namespace", "--kubeconfig"):
                skip = True
            elif not a.startswith("-"):
                return a
        return ""

    if tool == "kind":
        name = args[args.index("--name") + 1] if "--name" in args else "kind"
        if args[:2] == ["get", "clusters"]:
            print("\\n".join(names))
        elif args[:2] == ["create", "cluster"]:
            config = yaml.safe_load(Path(args[args.index("--config") + 1]).read_text())
            for node, labels in node_names(name, config):
                obj = {"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node, **labels}}}
                kubectl("apply", "-f", "-", input=json.dumps(obj))
                # What the node's kubelet would report.
                resources = {"cpu": "8", "memory": "16Gi", "pods": "110"}
                status = {"status": {"capacity": resources, "allocatable": resources}}
                kubectl("patch", "node", node, "--subresource=status", "--type=merge",
                        "-p", json.dumps(status))
            clusters.write_text("\\n".join([*names, name]))
        elif args[:2] == ["delete", "cluster"]:
            clusters.write_text("\\n".join(n for n in names if n != name))
        elif args[:2] == ["load", "docker-image"]:
            pass
        else:
            sys.exit(f"fake kind: unexpected {args}")
    elif tool == "helm":
        for i, a in enumerate(args):
            if a in ("--values", "-f") and not Path(args[i + 1]).is_file():
                sys.exit(f"fake helm: no values file {args[i + 1]}")
    elif tool == "docker":
        pass
    elif tool == "kubectl":
        sub = subcommand(args)
        if sub in ("wait", "rollout", "logs"):
            pass
        elif sub == "get" and "app.kubernetes.io/name=prometheus" in args:
            print("pod/prometheus-kube-prometheus-stack-prometheus-0")
        elif stdin is not None:
            done = subprocess.run([real, *args], input=stdin, text=True, check=False)
            sys.exit(done.returncode)
        else:
            os.execv(real, [real, *args])
    """
)


@pytest.fixture(scope="module")
def control_plane() -> Iterator[LocalCluster]:
    with LocalCluster(ClusterOptions(profile="api")) as cluster:
        yield cluster


@pytest.fixture
def env(control_plane: LocalCluster, tmp_path: Path) -> dict[str, str]:
    """PATH with the fakes first; KUBECONFIG with the private control plane as context kind-<cluster>."""
    config = yaml.safe_load(control_plane.admin_kubeconfig.read_text())
    config["contexts"][0]["name"] = CONTEXT
    config["current-context"] = CONTEXT
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "fake.py"
    fake.write_text(f"#!{sys.executable}\n{FAKE}")
    fake.chmod(0o755)
    for tool in ("kind", "helm", "docker", "kubectl"):
        (bin_dir / tool).symlink_to(fake)
    state = tmp_path / "state"
    state.mkdir()
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "KUBECONFIG": str(kubeconfig),
        "REAL_KUBECTL": str(control_plane.binaries.kubectl),
        "FAKE_STATE": str(state),
        "FAKE_CONTEXT": CONTEXT,
        "KIND_CLUSTER": CLUSTER,
        "OPERATOR_IMAGE": "registry.example:5000/va/operator:1.2.3",
        "EMULATOR_IMAGE": "registry.example:5000/va/emulator:1.2.3",
        "VA_KIND_SKIP_BUILD": "1",
        "VA_DELETE_WAIT": "false",
        "KIND_DEMO_INTERVAL": "1",
        "KIND_DEMO_RATE": "[[5, 60]]",
        "VA_KIND_OUT_DIR": str(tmp_path / "out"),
    }


def run(script: str, *args: str, env: dict[str, str], timeout: float = 180) -> str:
    result = subprocess.run(
        ["bash", str(KIND / script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"{script} {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def calls(env: dict[str, str], tool: str) -> list[dict[str, Any]]:
    lines = (Path(env["FAKE_STATE"]) / "calls.jsonl").read_text().splitlines()
    return [c for c in map(json.loads, lines) if c["tool"] == tool]


def kubectl_json(cluster: LocalCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def test_kind_config_labels_gpu_nodes_with_devices_the_cost_configmap_knows() -> None:
    config = yaml.safe_load((KIND / "cluster.yaml").read_text())
    costs = yaml.safe_load((ROOT / "deploy" / "manager" / "configmap-accelerator-unitcost.yaml").read_text())
    devices = {json.loads(v)["device"] for v in costs["data"].values()}
    workers = [n for n in config["nodes"] if n["role"] == "worker"]
    seen = set()
    for node in workers:
        labels = node["labels"]
        vendor = next(v for v in VENDORS if f"{v}/gpu.product" in labels)
        assert labels[f"{vendor}/gpu.product"] in devices
        assert int(labels[f"{vendor}/gpu.count"]) > 0 and int(labels[f"{vendor}/gpu.memory"]) > 0
        seen.add(vendor)
    assert seen == set(VENDORS)


def _gone(cluster: LocalCluster, *get: str, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cluster.kubectl(*get, check=False).returncode != 0:
            return True
        time.sleep(0.5)
    return False


def _complete_job_when_created(cluster: LocalCluster, stop: threading.Event) -> None:
    """Play the Job controller for the demo's load generator: mark it succeeded once it exists."""
    while not stop.is_set():
        got = cluster.kubectl("-n", "llm-d-sim", "get", "job", "vllme-loadgen", check=False)
        if got.returncode == 0:
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            status = {
                "status": {
                    "startTime": now,
                    "completionTime": now,
                    "succeeded": 1,
                    "conditions": [
                        {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
                        {"type": "Complete", "status": "True", "lastTransitionTime": now},
                    ],
                }
            }
            cluster.kubectl(
                "-n", "llm-d-sim", "patch", "job", "vllme-loadgen", "--subresource=status",
                "--type=merge", "-p", json.dumps(status),
            )  # fmt: skip
            return
        stop.wait(0.5)


def test_kind_up_deploy_demo_and_down(control_plane: LocalCluster, env: dict[str, str]) -> None:
    # ---- kind-up: cluster, GPU capacity, images loaded, Prometheus and the adapter -------------------
    out = run("kind-up.sh", env=env)
    assert "ready: context kind-va-test" in out
    create = next(c for c in calls(env, "kind") if c["args"][:2] == ["create", "cluster"])
    image = create["args"][create["args"].index("--image") + 1]
    assert image.startswith("kindest/node:v") and "@sha256:" in image
    nodes = {n["metadata"]["name"]: n for n in kubectl_json(control_plane, "get", "nodes")["items"]}
    expected = {
        f"{CLUSTER}-worker": ("nvidia.com/gpu", "8"),
        f"{CLUSTER}-worker2": ("amd.com/gpu", "4"),
        f"{CLUSTER}-worker3": ("intel.com/gpu", "4"),
    }
    for name, (resource, count) in expected.items():
        assert nodes[name]["status"]["capacity"][resource] == count
        assert nodes[name]["status"]["allocatable"][resource] == count
    assert not any(
        "gpu" in r for r in nodes[f"{CLUSTER}-control-plane"].get("status", {}).get("capacity", {})
    )
    loaded = [c["args"][2] for c in calls(env, "kind") if c["args"][:2] == ["load", "docker-image"]]
    assert loaded == [env["OPERATOR_IMAGE"], env["EMULATOR_IMAGE"]]
    releases = {
        c["args"][2]: c["args"] for c in calls(env, "helm") if c["args"][:2] == ["upgrade", "--install"]
    }
    assert set(releases) == {"kube-prometheus-stack", "prometheus-adapter"}
    adapter = releases["prometheus-adapter"]
    assert str(ROOT / "deploy" / "prometheus" / "prometheus-adapter-values.yaml") in adapter
    assert "prometheus.url=http://prometheus-operated.monitoring.svc" in adapter
    for args in releases.values():
        assert "--version" in args and "--kube-context" in args and CONTEXT in args

    # A second run repairs rather than fails: no second cluster, same capacity.
    run("kind-up.sh", env=env)
    assert sum(c["args"][:2] == ["create", "cluster"] for c in calls(env, "kind")) == 1

    # ---- deploy: deploy/default with our image and the kind Prometheus ------------------------------
    # The Prometheus Operator's CRD, as kube-prometheus-stack would have installed it (schema-less here).
    control_plane.apply(SERVICEMONITOR_CRD)
    control_plane.kubectl(
        "wait", "--for=condition=Established", "crd/servicemonitors.monitoring.coreos.com", "--timeout=60s"
    )
    run("deploy.sh", "apply", env=env)
    ns = "workload-variant-autoscaler-system"
    deployment = kubectl_json(
        control_plane, "-n", ns, "get", "deployment", "variant-autoscaler-controller-manager"
    )
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == env["OPERATOR_IMAGE"]
    config = kubectl_json(
        control_plane, "-n", ns, "get", "configmap", "workload-variant-autoscaler-variantautoscaling-config"
    )
    assert config["data"]["PROMETHEUS_BASE_URL"] == "http://prometheus-operated.monitoring.svc:9090"
    assert "PROMETHEUS_TOKEN_PATH" not in config["data"]  # no token over plain HTTP
    assert config["data"]["GLOBAL_OPT_INTERVAL"] == "15s"
    control_plane.kubectl("-n", ns, "get", "servicemonitor", "variant-autoscaler")
    control_plane.kubectl("get", "crd", "variantautoscalings.llmd.ai")

    # ---- kind-demo: the variant, its VA and HPA, the load Job; status lines until the Job is done ----
    stop = threading.Event()
    job_controller = threading.Thread(target=_complete_job_when_created, args=(control_plane, stop))
    job_controller.start()
    try:
        out = run("kind-demo.sh", env=env)
    finally:
        stop.set()
        job_controller.join()
    assert "LOAD(rpm)" in out and "done; the demo stays up" in out
    demo = kubectl_json(control_plane, "-n", "llm-d-sim", "get", "deployment", "vllme-deployment")
    pod = demo["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == env["EMULATOR_IMAGE"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-A100-PCIE-80GB"
    va = kubectl_json(control_plane, "-n", "llm-d-sim", "get", "variantautoscaling", "vllme-deployment")
    assert va["metadata"]["labels"]["inference.optimization/acceleratorName"] == "A100"
    hpa = kubectl_json(control_plane, "-n", "llm-d-sim", "get", "hpa", "vllme-hpa")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "vllme-deployment"
    job = kubectl_json(control_plane, "-n", "llm-d-sim", "get", "job", "vllme-loadgen")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == env["EMULATOR_IMAGE"] and container["command"] == ["vllm-loadgen"]
    assert container["args"][container["args"].index("--rate") + 1] == "[[5, 60]]"
    control_plane.kubectl("-n", "llm-d-sim", "get", "servicemonitor", "vllme-servicemonitor")

    # ---- deploy again, on a cluster without the Prometheus Operator and to another Prometheus ---------
    control_plane.kubectl("delete", "crd", "servicemonitors.monitoring.coreos.com")
    elsewhere = {**env, "PROMETHEUS_URL": "https://prometheus.example:9090"}
    assert "kind: ServiceMonitor" in run("deploy.sh", "render", env=elsewhere)  # render reads no cluster
    assert "deploy/default-no-monitor" in run("deploy.sh", "apply", env=elsewhere)
    config = kubectl_json(
        control_plane, "-n", ns, "get", "configmap", "workload-variant-autoscaler-variantautoscaling-config"
    )
    assert config["data"]["PROMETHEUS_BASE_URL"] == "https://prometheus.example:9090"
    assert config["data"]["PROMETHEUS_TOKEN_PATH"]  # over HTTPS the ServiceAccount token is kept

    # ---- teardown: demo, operator, cluster (no namespace controller here: namespaces stay Terminating) -
    run("kind-demo.sh", "delete", env=env)
    assert _gone(control_plane, "-n", "llm-d-sim", "get", "variantautoscaling", "vllme-deployment")
    run("deploy.sh", "delete", env=env)
    assert _gone(control_plane, "get", "crd", "variantautoscalings.llmd.ai")
    run("kind-down.sh", env=env)
    assert "no kind cluster" in run("kind-down.sh", env=env)
    assert not Path(env["VA_KIND_OUT_DIR"]).exists()


SERVICEMONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "names": {"kind": "ServiceMonitor", "listKind": "ServiceMonitorList", "plural": "servicemonitors"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}
