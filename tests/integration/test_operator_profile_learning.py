"""The operator learns a profile-less variant's α β γ δ from a real Prometheus scraping real emulator pods,
and the variant goes from saturation sizing to the queueing model with the learned profile.

Full local cluster: the operator as a process with deploy/'s RBAC; a Deployment of two emulator pods (the
pod runner serves them; Prometheus scrapes them every 2 s with ``namespace`` and ``pod`` labels), whose
parameters the operator is not given (the emulator's defaults, noise 0.1, ``--time-scale 2``); a WVA
final-CRD VariantAutoscaling without ``modelProfile``, labelled with its accelerator; ``vllm-loadgen``
moving the rate up and down (what separates β from α and δ from γ). Cycles every 10 s, each one learning
from a 10-s window per pod.

The second test is WVA v0.6-v0.8's own setup: a model no service class names, and a
``wva-queueing-model-config`` whose ``default`` entry gives only ``sloMultiplier``: once learned, the
variant is sized by the SLOs inferred from the learned profile.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import LocalCluster, wait_for
from localcluster.pytest_plugin import Emulator
from vatesting.harness import (
    BIN,
    EMULATOR,
    OPERATOR_NS,
    OperatorProcess,
    conditions,
    events,
    get_va,
    install,
    running,
)

MODEL = "default/default"  # the premium class's model (deploy/manager's service classes)
CLASSLESS = "wva/no-class"  # a model no service class names
NAME = "learner"
WVA_A100 = "NVIDIA-A100-PCIE-80GB"
# Requests per minute to both pods together, 15 s each: between about a fifth and most of their capacity
# (max batch 8, 64 output tokens, time scale 2: about 10 requests/s per pod).
EMULATOR_ARGS = ["--port", "8000", "--max-num-seqs", "8", "--time-scale", "2"]
EMULATOR_ARGS += ["--noise", "0.1", "--log-level", "warning"]
SCHEDULE = [[15, rpm] for rpm in (150, 700, 300, 900, 200, 600, 400, 800) * 3]


@pytest.fixture
def sa_config(full_cluster: LocalCluster) -> Iterator[Path]:
    yield install(
        full_cluster,
        full_cluster.prometheus_url,
        full_cluster.prometheus_ca_file,
        GLOBAL_OPT_INTERVAL="10s",
    )
    install(full_cluster, full_cluster.prometheus_url, full_cluster.prometheus_ca_file)


@pytest.fixture
def load(tmp_path: Path) -> Iterator[Callable[[list[str], str], None]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(urls: list[str], model: str) -> None:
        argv = [
            str(BIN / "vllm-loadgen"),
            "--url", ",".join(urls),
            "--model", model,
            "--rate", json.dumps(SCHEDULE),
            "--input-tokens", "uniform:32:256",
            "--output-tokens", "64",
            "--seed", "7",
            "--progress-interval", "0",
        ]  # fmt: skip
        with (tmp_path / "loadgen.log").open("ab") as log:
            started.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))

    yield start
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _va(namespace: str, model: str) -> dict[str, Any]:
    return {
        "apiVersion": "llmd.ai/v1alpha1",
        "kind": "VariantAutoscaling",
        "metadata": {
            "name": NAME,
            "namespace": namespace,
            "labels": {"inference.optimization/acceleratorName": "A100"},
        },
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": NAME},
            "modelID": model,
            "minReplicas": 1,
            "maxReplicas": 4,
        },
    }


def _learned(va: dict[str, Any]) -> dict[str, Any]:
    return dict((va.get("status") or {}).get("learnedProfile") or {})


def _learn_until_model_sized(
    cluster: LocalCluster,
    namespace: str,
    model: str,
    sa_config: Path,
    emulator_pod: Callable[..., Emulator],
    load: Callable[[list[str], str], None],
    tmp_path: Path,
) -> dict[str, Any]:
    """Two emulator pods of ``model`` under moving load and a profile-less VA; the VA once its learned
    profile sizes it (after a first learnedProfile while saturation did)."""
    emulator = emulator_pod(
        NAME,
        namespace,
        model=model,
        replicas=2,
        product=WVA_A100,
        command=EMULATOR,
        args=["--model", model, *EMULATOR_ARGS],
    )
    endpoints = emulator.wait_for_endpoints(2)
    cluster.apply(_va(namespace, model))
    load([e.url for e in endpoints], model)
    operator = OperatorProcess(sa_config, namespace, tmp_path)
    with running(operator):

        def first() -> dict[str, Any] | None:
            va = get_va(cluster, namespace, NAME)
            return va if _learned(va) else None

        va = wait_for(first, timeout=90, what="a first learnedProfile", interval=1.0)
        assert _learned(va)["source"] == "saturation", _learned(va)

        def model_sized() -> dict[str, Any] | None:
            va = get_va(cluster, namespace, NAME)
            return va if _learned(va).get("source") == "learned" else None

        return wait_for(model_sized, timeout=240, what="the learned profile in use", interval=2.0)


def test_a_va_without_a_profile_ends_up_sized_by_the_model_with_the_learned_profile(
    full_cluster: LocalCluster,
    full_namespace: str,
    sa_config: Path,
    emulator_pod: Callable[..., Emulator],
    load: Callable[[list[str], str], None],
    tmp_path: Path,
) -> None:
    va = _learn_until_model_sized(
        full_cluster, full_namespace, MODEL, sa_config, emulator_pod, load, tmp_path
    )
    learned = _learned(va)
    print("learned profile:", json.dumps({k: v for k, v in learned.items() if k != "state"}))
    assert learned["confidence"] in ("high", "medium") and learned["accelerator"] == "A100"
    # Every parameter learned, and in the right range: the emulator's defaults (WVA's A100 profile) over
    # the time scale; the benchmark (docs/benchmarks.md) measures the accuracy, this checks the wiring.
    truth = {"alpha": 20.58 / 2, "beta": 0.41 / 2, "gamma": 20.58 / 2, "delta": 0.041 / 2}
    for name, value in truth.items():
        assert learned[name]["source"] == "learned", learned[name]
        assert 0.5 * value <= float(learned[name]["value"]) <= 2.0 * value, (name, learned[name])
    ready = conditions(va)["OptimizationReady"]
    assert ready["status"] == "True", ready
    reason = va["status"]["desiredOptimizedAlloc"]["reason"]
    # The queueing model sized it (saturation may agree, as the floor: "model+saturation-v1: ...").
    assert "[learned profile, confidence" in reason and not reason.startswith("saturation"), reason
    changed = [e for e in events(full_cluster, full_namespace, NAME) if e["reason"] == "ProfileSourceChanged"]
    assert any("saturation -> learned" in e["message"] for e in changed), changed
    printed = full_cluster.kubectl("get", "va", "-n", full_namespace, NAME, "-o", "wide").stdout
    header, row = printed.splitlines()[:2]
    assert "PROFILE" in header and "CONFIDENCE" in header and " learned " in f" {row} ", printed


QUEUEING_CM = "wva-queueing-model-config"


@pytest.fixture
def queueing_config(full_cluster: LocalCluster, sa_config: Path) -> Iterator[None]:
    """WVA v0.6-v0.8's queueing-model ConfigMap with only ``sloMultiplier`` in its default entry."""
    full_cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": QUEUEING_CM, "namespace": OPERATOR_NS},
            "data": {"default": "sloMultiplier: 3.0\ntuningEnabled: true\n"},
        }
    )
    yield
    full_cluster.kubectl("delete", "configmap", "-n", OPERATOR_NS, QUEUEING_CM, "--ignore-not-found")


def test_without_a_class_a_learned_variant_is_sized_by_slos_inferred_with_slo_multiplier(
    full_cluster: LocalCluster,
    full_namespace: str,
    sa_config: Path,
    queueing_config: None,
    emulator_pod: Callable[..., Emulator],
    load: Callable[[list[str], str], None],
    tmp_path: Path,
) -> None:
    va = _learn_until_model_sized(
        full_cluster, full_namespace, CLASSLESS, sa_config, emulator_pod, load, tmp_path
    )
    ready = conditions(va)["OptimizationReady"]
    assert ready["status"] == "True", ready
    reason = va["status"]["desiredOptimizedAlloc"]["reason"]
    print("reason:", reason)
    assert f"SLOs inferred with sloMultiplier 3 ({QUEUEING_CM}[default])" in reason, reason
    assert "67 % of what one A100 replica sustains" in reason, reason
    assert "learned profile, confidence" in reason and not reason.startswith("saturation"), reason
