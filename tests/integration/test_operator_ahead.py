"""The operator ahead of the load, on the full local cluster: a variant whose class states 99 %
attainment is planned for its model's demand forecast, whose state lives in the VA's status and is taken
up by a restarted operator; the burst guard scales it up between cycles. Every wait polls with a
deadline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from localcluster import LocalCluster, wait_for
from localcluster.pytest_plugin import Emulator
from variant_autoscaler.adapters.profile_metrics import QUERIES_PER_CYCLE as PROFILE_QUERIES
from variant_autoscaler.adapters.prometheus import QUERIES_PER_CYCLE
from vatesting.harness import (
    EMULATOR,
    OPERATOR_NS,
    LoadGenerator,
    OperatorProcess,
    deployment_replicas,
    get_va,
    running,
    set_main_config,
    va_manifest,
)

MODEL = "default/default"
VA = "vllme-deployment"


def _attainment_class(cluster: LocalCluster) -> None:
    """deploy/'s Premium class, its default/default entry stated as users do: 99 % within both."""
    premium = cluster.kubectl(
        "get",
        "configmap",
        "-n",
        OPERATOR_NS,
        "service-classes-config",
        "-o",
        "jsonpath={.data.premium\\.yaml}",
    ).stdout
    doc = yaml.safe_load(premium)
    for entry in doc["data"]:
        if entry["model"] == MODEL:
            entry["slo-attainment"] = 99
    stated = yaml.safe_dump(doc, sort_keys=False)
    assert "slo-attainment: 99" in stated
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "service-classes-config", "namespace": OPERATOR_NS},
            "data": {"premium.yaml": stated},
        }
    )


def _forecast(va: dict[str, Any]) -> dict[str, Any]:
    return dict((va.get("status") or {}).get("forecast") or {})


def _reason(va: dict[str, Any]) -> str:
    return str(((va.get("status") or {}).get("desiredOptimizedAlloc") or {}).get("reason") or "")


def _when(
    cluster: LocalCluster, namespace: str, check: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        va = get_va(cluster, namespace, VA)
        return va if check(va) else None

    found: dict[str, Any] = wait_for(probe, timeout=180, what=what, interval=1.0)
    return found


def test_the_forecast_survives_a_restart_and_the_guard_scales_between_cycles(
    full_cluster: LocalCluster,
    full_namespace: str,
    sa_config: Path,
    emulator_pod: Callable[..., Emulator],
    loads: list[LoadGenerator],
    tmp_path: Path,
) -> None:
    _attainment_class(full_cluster)
    set_main_config(
        full_cluster,
        DEFAULT_ACTUATION_MODE="patch",
        GLOBAL_OPT_INTERVAL="10s",
        METRICS_WINDOW="20s",
        STARTUP_TIME="10s",
        BURST_GUARD_INTERVAL="2s",
    )
    emulator = emulator_pod(
        VA,
        full_namespace,
        model=MODEL,
        product="NVIDIA-A100-PCIE-80GB",
        command=EMULATOR,
        args=["--model", MODEL, "--port", "8000", "--max-num-seqs", "4"],
    )
    (endpoint,) = emulator.wait_for_endpoints(1)
    full_cluster.apply(va_manifest(full_namespace))
    loads.append(LoadGenerator([endpoint.url], MODEL, 30, tmp_path))
    first = OperatorProcess(sa_config, full_namespace, tmp_path)
    with running(first):
        va = _when(
            full_cluster,
            full_namespace,
            lambda v: _forecast(v).get("step", 0) >= 2 and "planned for the forecast" in _reason(v),
            "a forecast learnt over two intervals, planned for",
        )
        assert float(_forecast(va)["upperRate"]) > 0
        # What the plan is made for: the upper forecast, held (hysteresis) up to the scale-down quantile;
        # the real API server's schema keeps the held rate too.
        assert float(_forecast(va)["plannedRate"]) >= float(_forecast(va)["upperRate"])
        assert "held" in _forecast(va)
        # The tail model's inputs: a fixed set of ten queries more than the cycle's own (the load's and
        # the profile learning's).
        assert first.metric("variant_autoscaler_promql_queries_last_cycle") == (
            QUERIES_PER_CYCLE + PROFILE_QUERIES + 10
        )
    learnt = _forecast(get_va(full_cluster, full_namespace, VA))["step"]

    second = OperatorProcess(sa_config, full_namespace, tmp_path, identity="operator-b")
    with running(second):
        # The new process takes the state up and goes on counting, instead of starting at 1.
        _when(
            full_cluster,
            full_namespace,
            lambda v: _forecast(v).get("step", 0) > learnt,
            "the forecast resumed by the restarted operator",
        )
        # Cycles far apart: a burst is now the guard's to answer. 400 req/min on one batch-4 replica
        # queues at once.
        set_main_config(full_cluster, GLOBAL_OPT_INTERVAL="10m")
        before = deployment_replicas(full_cluster, full_namespace, VA)
        cycles = second.cycles()
        loads.append(LoadGenerator([endpoint.url], MODEL, 400, tmp_path))

        def guarded() -> float | None:
            scaled = second.metric(
                "inferno_replica_scaling_total",
                variant_name=VA,
                namespace=full_namespace,
                direction="up",
                reason="guard",
            )
            return scaled if scaled and scaled >= 1 else None

        wait_for(guarded, timeout=120, what="a scale-up by the burst guard", interval=1.0)
        assert deployment_replicas(full_cluster, full_namespace, VA) > before
        # Only the cycle the ConfigMap edit triggered ran meanwhile, if any.
        assert second.cycles() <= cycles + 1
