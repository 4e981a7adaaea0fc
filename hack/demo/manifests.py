"""Manifests of emulated model servers, their VariantAutoscalings and WVA's HPA, for the local cluster.

Shared by ``make demo`` and the end-to-end suite (tests/e2e).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from demo.traffic import INSTANCE_LABEL
from localcluster.gpu import VENDOR_DOMAINS
from localcluster.names import RUN_LABEL

__all__ = ["ACCELERATOR_LABEL", "Profile", "emulator_variant", "variant_autoscaling", "wva_hpa"]

ROOT = Path(__file__).resolve().parents[2]
#: WVA's label naming the accelerator a variant runs on.
ACCELERATOR_LABEL = "inference.optimization/acceleratorName"

#: A latency profile in milliseconds: ``alpha``, ``beta`` (decode), ``gamma``, ``delta`` (prefill).
Profile = Mapping[str, float]


def emulator_variant(
    name: str,
    namespace: str,
    *,
    model: str,
    vendor: str,
    product: str,
    profile: Profile,
    max_batch: int,
    replicas: int = 1,
    gpus: int = 1,
    toleration: tuple[str, str] | None = None,
    engine: str = "v1",
    vllm_version: str | None = None,
) -> dict[str, Any]:
    """A Deployment of ``vllm-emulator`` with ``profile`` on ``product`` GPUs of ``vendor``.

    Its pods carry the pod runner's opt-in label, so the local cluster runs each Running pod as a local
    emulator process; ``toleration`` (key, value) tolerates a ``NoSchedule`` taint. ``engine`` is the
    emulator's engine: ``v1`` (vLLM V1's scheduler, step costs reproducing ``profile``) or ``wva`` (the
    analyzer's own accounting); ``vllm_version`` the vLLM version whose metric names it exports (the
    emulator's default, the current one, when None).
    """
    # On SIGTERM the emulator keeps serving for 5 s (longer than a load driver's 4 s between endpoint
    # refreshes, as a preStop sleep covers endpoint propagation), then finishes what it has in flight.
    args = [
        "--model", model, "--port", "8000", "--max-num-seqs", str(max_batch), "--engine", engine,
        "--shutdown-delay", "5",
    ]  # fmt: skip
    if vllm_version is not None:
        args += ["--vllm-version", vllm_version]
    for key in ("alpha", "beta", "gamma", "delta"):
        args += [f"--{key}", f"{profile[key]:g}"]
    domain = VENDOR_DOMAINS[vendor]
    container: dict[str, Any] = {
        "name": "vllm",
        "image": "localcluster.invalid/vllm-emulator:dev",  # never pulled: the pod runner runs the command
        "command": ["vllm-emulator"],
        "args": args,
        "ports": [{"name": "http", "containerPort": 8000}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 1},
        "resources": {"requests": {f"{domain}/gpu": str(gpus)}, "limits": {f"{domain}/gpu": str(gpus)}},
    }
    spec: dict[str, Any] = {
        "containers": [container],
        "nodeSelector": {f"{domain}/gpu.product": product},
        "terminationGracePeriodSeconds": 30,
    }
    if toleration is not None:
        key, value = toleration
        spec["tolerations"] = [{"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {INSTANCE_LABEL: name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {INSTANCE_LABEL: name}},
            "template": {"metadata": {"labels": {INSTANCE_LABEL: name, RUN_LABEL: "true"}}, "spec": spec},
        },
    }


def variant_autoscaling(
    name: str,
    namespace: str,
    *,
    model: str,
    accelerator: str,
    profiles: Mapping[str, tuple[Profile, int]],
    slo_class: tuple[str, str] = ("service-classes-config", "premium.yaml"),
    **spec: Any,
) -> dict[str, Any]:
    """A VariantAutoscaling running on ``accelerator``, with ``(profile, max batch)`` per accelerator.

    Extra keyword arguments are spec fields (``actuation``, ``scaleDown``, ``shareModelLoad``, ...).
    """
    accelerators = [
        {
            "acc": acc,
            "accCount": 1,
            "maxBatchSize": batch,
            "perfParms": {
                "decodeParms": {"alpha": f"{parms['alpha']:g}", "beta": f"{parms['beta']:g}"},
                "prefillParms": {"gamma": f"{parms['gamma']:g}", "delta": f"{parms['delta']:g}"},
            },
        }
        for acc, (parms, batch) in profiles.items()
    ]
    return {
        "apiVersion": "llmd.ai/v1alpha1",
        "kind": "VariantAutoscaling",
        "metadata": {"name": name, "namespace": namespace, "labels": {ACCELERATOR_LABEL: accelerator}},
        "spec": {
            "modelID": model,
            "sloClassRef": {"name": slo_class[0], "key": slo_class[1]},
            "modelProfile": {"accelerators": accelerators},
            **spec,
        },
    }


def wva_hpa(namespace: str, deployment: str, *, min_replicas: int | None = None) -> dict[str, Any]:
    """deploy/hpa's HPA (WVA's sample: replicas = ``inferno_desired_replicas``) for ``deployment``."""
    hpa: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / "hpa" / "hpa.yaml").read_text())
    hpa["metadata"] = {"name": f"{deployment}-hpa", "namespace": namespace}
    hpa["spec"]["scaleTargetRef"]["name"] = deployment
    hpa["spec"]["metrics"][0]["external"]["metric"]["selector"]["matchLabels"]["variant_name"] = deployment
    if min_replicas is not None:
        hpa["spec"]["minReplicas"] = min_replicas
    return hpa
