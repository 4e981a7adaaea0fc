"""The operator end to end on the full local cluster: real API server, controllers, kwok GPU nodes,
Prometheus scraping real emulator processes, load from real load generators; the operator as a process
with deploy/'s ServiceAccount and RBAC. Every wait polls with a deadline; nothing sleeps blindly.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from localcluster import LocalCluster, wait_for
from localcluster.pytest_plugin import Emulator
from variant_autoscaler.adapters.profile_metrics import QUERIES_PER_CYCLE as PROFILE_QUERIES
from variant_autoscaler.adapters.prometheus import QUERIES_PER_CYCLE
from vatesting.harness import (
    EMULATOR,
    OPERATOR_NS,
    LoadGenerator,
    OperatorProcess,
    conditions,
    deployment_replicas,
    events,
    get_va,
    running,
    set_main_config,
    va_manifest,
)

MODEL = "default/default"
VA = "vllme-deployment"
WVA_A100 = "NVIDIA-A100-PCIE-80GB"


def _emulator(emulator_pod: Callable[..., Emulator], namespace: str, name: str = VA, **kw: Any) -> Emulator:
    return emulator_pod(
        name,
        namespace,
        model=MODEL,
        product=WVA_A100,
        command=EMULATOR,
        args=["--model", MODEL, "--port", "8000", "--max-num-seqs", "4"],
        **kw,
    )


def _status_when(
    cluster: LocalCluster,
    namespace: str,
    check: Callable[[dict[str, Any]], bool],
    what: str,
    name: str = VA,
    timeout: float = 120,
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        va = get_va(cluster, namespace, name)
        return va if check(va) else None

    result: dict[str, Any] = wait_for(probe, timeout=timeout, what=what, interval=1.0)
    return result


def _desired(va: dict[str, Any]) -> int:
    return int(((va.get("status") or {}).get("desiredOptimizedAlloc") or {}).get("numReplicas", -1))


def _metrics_ok(va: dict[str, Any]) -> bool:
    return conditions(va).get("MetricsAvailable", {}).get("status") == "True"


def _arrivals(va: dict[str, Any]) -> float:
    return float(((va.get("status") or {}).get("currentAlloc") or {}).get("load", {}).get("arrivalRate", 0))


def test_wva_sample_gets_a_correct_status_and_a_load_change_changes_the_decision(
    full_cluster: LocalCluster,
    full_namespace: str,
    sa_config: Path,
    emulator_pod: Callable[..., Emulator],
    loads: list[LoadGenerator],
    tmp_path: Path,
) -> None:
    (endpoint,) = _emulator(emulator_pod, full_namespace).wait_for_endpoints(1)
    full_cluster.apply(va_manifest(full_namespace))  # WVA's sample, only moved to the test namespace
    loads.append(LoadGenerator([endpoint.url], MODEL, 30, tmp_path))
    operator = OperatorProcess(sa_config, full_namespace, tmp_path)
    with running(operator):
        va = _status_when(
            full_cluster,
            full_namespace,
            lambda v: _metrics_ok(v) and _arrivals(v) > 0 and _desired(v) >= 1,
            "metrics with load, and a decision",
        )
        status = va["status"]
        assert status["currentAlloc"]["accelerator"] == "A100"
        assert status["currentAlloc"]["numReplicas"] == 1
        assert float(status["currentAlloc"]["load"]["avgOutputTokens"]) > 0
        assert status["desiredOptimizedAlloc"]["accelerator"] == "A100"
        assert _desired(va) == 1  # 30 req/min is well within one A100 replica
        conds = conditions(va)
        assert conds["OptimizationReady"]["reason"] == "OptimizationSucceeded"
        assert conds["Actuated"]["reason"] == "MetricsEmitted"
        assert {c["observedGeneration"] for c in conds.values()} == {va["metadata"]["generation"]}
        # The VA does not own its target (WVA's final CRD): no ownerReference, and TargetResolved.
        assert "ownerReferences" not in va["metadata"]
        assert conds["TargetResolved"]["reason"] == "TargetFound"
        labels = {"variant_name": VA, "namespace": full_namespace, "accelerator_type": "A100"}
        assert operator.metric("inferno_desired_replicas", **labels) == 1
        assert operator.metric("inferno_current_replicas", **labels) == 1
        queries = operator.metric("variant_autoscaler_promql_queries_last_cycle")
        # Load and latency, the per-pod inputs (saturation, KV cache, preemptions), and the profile
        # learning's pod windows.
        assert queries == QUERIES_PER_CYCLE + PROFILE_QUERIES == 19

        # Six times the load: more replicas are wanted (metrics mode: the HPA would apply them).
        loads.pop().stop()
        loads.append(LoadGenerator([endpoint.url], MODEL, 400, tmp_path))
        va = _status_when(full_cluster, full_namespace, lambda v: _desired(v) >= 2, "a scale-up decision")
        assert operator.metric("inferno_desired_replicas", **labels) == _desired(va)
        assert deployment_replicas(full_cluster, full_namespace, VA) == 1  # metrics mode patches nothing
        changes = [e for e in events(full_cluster, full_namespace, VA) if e["reason"] == "DecisionChanged"]
        assert len(changes) >= 2 and all(e["reportingInstance"] == operator.identity for e in changes)


def test_configmap_edit_takes_effect_without_restart(
    full_cluster: LocalCluster,
    full_namespace: str,
    sa_config: Path,
    emulator_pod: Callable[..., Emulator],
    loads: list[LoadGenerator],
    tmp_path: Path,
) -> None:
    (endpoint,) = _emulator(emulator_pod, full_namespace).wait_for_endpoints(1)
    full_cluster.apply(va_manifest(full_namespace))
    loads.append(LoadGenerator([endpoint.url], MODEL, 60, tmp_path))
    operator = OperatorProcess(sa_config, full_namespace, tmp_path)
    with running(operator):
        _status_when(full_cluster, full_namespace, lambda v: _metrics_ok(v) and _desired(v) == 1, "1 replica")
        pid = operator.process.pid if operator.process else None
        # Tighten the ITL target of default/default from 24 ms to 21 ms: a replica may now batch ~1 request.
        classes = full_cluster.kubectl(
            "get",
            "configmap",
            "-n",
            OPERATOR_NS,
            "service-classes-config",
            "-o",
            "jsonpath={.data.premium\\.yaml}",
        ).stdout
        tightened = classes.replace("slo-tpot: 24", "slo-tpot: 21")
        assert tightened != classes
        full_cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "service-classes-config", "namespace": OPERATOR_NS},
                "data": {"premium.yaml": tightened},
            }
        )
        va = _status_when(full_cluster, full_namespace, lambda v: _desired(v) >= 2, "more replicas for 21 ms")
        assert "ITL ≤ 21 ms" in va["status"]["desiredOptimizedAlloc"]["reason"]
        # The main ConfigMap too: switch the default actuation mode to shadow.
        set_main_config(full_cluster, DEFAULT_ACTUATION_MODE="shadow")
        va = _status_when(
            full_cluster,
            full_namespace,
            lambda v: (v["status"].get("actuation") or {}).get("mode") == "shadow",
            "shadow mode",
        )
        assert conditions(va)["Actuated"]["reason"] == "ShadowMode"
        assert operator.process is not None and operator.process.pid == pid  # no restart happened


def test_prometheus_outage_holds_replicas_and_recovers(
    full_cluster: LocalCluster,
    full_namespace: str,
    sa_config: Path,
    emulator_pod: Callable[..., Emulator],
    loads: list[LoadGenerator],
    tmp_path: Path,
) -> None:
    set_main_config(full_cluster, DEFAULT_ACTUATION_MODE="patch", SCALE_DOWN_STABILIZATION_WINDOW="0s")
    emulator = _emulator(emulator_pod, full_namespace)
    (endpoint,) = emulator.wait_for_endpoints(1)
    full_cluster.apply(va_manifest(full_namespace))
    loads.append(LoadGenerator([endpoint.url], MODEL, 400, tmp_path))
    operator = OperatorProcess(sa_config, full_namespace, tmp_path)
    prometheus = full_cluster.prometheus_server()
    with running(operator):
        wait_for(
            lambda: deployment_replicas(full_cluster, full_namespace, VA) >= 2,
            timeout=120,
            what="patch mode scaling up",
            interval=1.0,
        )
        loads.pop().stop()  # once metrics are back, they will say: scale down
        prometheus.stop()
        try:
            va = _status_when(
                full_cluster,
                full_namespace,
                lambda v: conditions(v).get("MetricsAvailable", {}).get("reason") == "PrometheusError",
                "MetricsAvailable=False/PrometheusError",
            )
            assert conditions(va)["OptimizationReady"]["reason"] == "MetricsUnavailable"
            # From here on no cycle has metrics (one that read them just before the stop may still have
            # scaled further up the ramp: the load had only just started).
            scaled = deployment_replicas(full_cluster, full_namespace, VA)
            assert scaled >= 2
            before = operator.cycles()
            wait_for(lambda: operator.cycles() >= before + 3, timeout=60, what="3 cycles without Prometheus")
            assert deployment_replicas(full_cluster, full_namespace, VA) == scaled
            assert _desired(get_va(full_cluster, full_namespace)) == scaled
            assert operator.health()[0] == 200  # cycles still complete: the operator is alive
        finally:
            prometheus.start()
        _status_when(full_cluster, full_namespace, _metrics_ok, "metrics back", timeout=120)
        wait_for(
            lambda: deployment_replicas(full_cluster, full_namespace, VA) == 1,
            timeout=150,
            what="scale-down after recovery (no load)",
            interval=1.0,
        )
    warnings = {e["reason"] for e in events(full_cluster, full_namespace, VA) if e["type"] == "Warning"}
    assert "PrometheusError" in warnings


def test_shadow_mode_changes_nothing_on_the_deployment(
    full_cluster: LocalCluster,
    full_namespace: str,
    sa_config: Path,
    emulator_pod: Callable[..., Emulator],
    loads: list[LoadGenerator],
    tmp_path: Path,
) -> None:
    (endpoint,) = _emulator(emulator_pod, full_namespace).wait_for_endpoints(1)
    full_cluster.apply(va_manifest(full_namespace, actuation={"mode": "shadow"}))
    generation = full_cluster.kubectl(
        "get", "deployment", "-n", full_namespace, VA, "-o", "jsonpath={.metadata.generation}"
    ).stdout
    loads.append(LoadGenerator([endpoint.url], MODEL, 400, tmp_path))
    operator = OperatorProcess(sa_config, full_namespace, tmp_path)
    with running(operator):
        va = _status_when(
            full_cluster, full_namespace, lambda v: _desired(v) >= 2, "a scale-up recommendation"
        )
        assert conditions(va)["Actuated"]["reason"] == "ShadowMode"
        before = operator.cycles()
        wait_for(lambda: operator.cycles() >= before + 2, timeout=60, what="two more cycles")
        labels = {"variant_name": VA, "namespace": full_namespace, "accelerator_type": "A100"}
        assert operator.metric("inferno_desired_replicas", **labels) is None  # nothing for an HPA to follow
        recommended = operator.metric("variant_autoscaler_desired_replicas", **labels, mode="shadow")
        assert recommended is not None and recommended >= 2  # the load keeps growing: not an exact value
    assert deployment_replicas(full_cluster, full_namespace, VA) == 1
    after = full_cluster.kubectl(
        "get", "deployment", "-n", full_namespace, VA, "-o", "jsonpath={.metadata.generation}"
    ).stdout
    assert after == generation


def test_two_operators_only_the_leader_acts_and_the_other_takes_over(
    full_cluster: LocalCluster,
    full_namespace: str,
    sa_config: Path,
    emulator_pod: Callable[..., Emulator],
    loads: list[LoadGenerator],
    tmp_path: Path,
) -> None:
    (endpoint,) = _emulator(emulator_pod, full_namespace).wait_for_endpoints(1)
    full_cluster.apply(va_manifest(full_namespace))
    loads.append(LoadGenerator([endpoint.url], MODEL, 60, tmp_path))
    a = OperatorProcess(sa_config, full_namespace, tmp_path, identity="operator-a")
    b = OperatorProcess(sa_config, full_namespace, tmp_path, identity="operator-b")
    with running(a, b):
        wait_for(lambda: a.cycles() + b.cycles() >= 3, timeout=90, what="three cycles")
        leader, standby = (a, b) if a.cycles() > 0 else (b, a)
        assert standby.cycles() == 0
        assert (
            leader.metric("variant_autoscaler_leader") == 1
            and standby.metric("variant_autoscaler_leader") == 0
        )
        labels = {"variant_name": VA, "namespace": full_namespace, "accelerator_type": "A100"}
        assert leader.metric("inferno_desired_replicas", **labels) is not None
        assert standby.metric("inferno_desired_replicas", **labels) is None  # an HPA sees one series
        holder = full_cluster.kubectl(
            "get",
            "lease",
            "-n",
            OPERATOR_NS,
            "variant-autoscaler-leader",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ).stdout
        assert holder == leader.identity
        assert {e["reportingInstance"] for e in events(full_cluster, full_namespace, VA)} == {leader.identity}

        leader.kill()  # no graceful release: the standby must wait for the Lease to expire, then lead
        wait_for(lambda: standby.cycles() >= 2, timeout=90, what="the standby taking over")
        assert standby.metric("inferno_desired_replicas", **labels) is not None
        assert standby.health()[0] == 200


def test_killed_mid_cycle_and_restarted_loses_and_duplicates_nothing(
    full_cluster: LocalCluster,
    full_namespace: str,
    sa_config: Path,
    emulator_pod: Callable[..., Emulator],
    loads: list[LoadGenerator],
    tmp_path: Path,
) -> None:
    set_main_config(full_cluster, DEFAULT_ACTUATION_MODE="patch", SCALE_DOWN_STABILIZATION_WINDOW="10m")
    (endpoint,) = _emulator(emulator_pod, full_namespace).wait_for_endpoints(1)
    names = [VA, *(f"replica-{i}" for i in range(5))]
    for name in names[1:]:  # more variants of the same model (plain Deployments, no emulator behind them)
        full_cluster.apply(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": full_namespace},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "c", "image": "none.invalid/none"}]},
                    },
                },
            }
        )
    for name in names:
        full_cluster.apply(va_manifest(full_namespace, name=name))
    loads.append(LoadGenerator([endpoint.url], MODEL, 400, tmp_path))
    first = OperatorProcess(sa_config, full_namespace, tmp_path, identity="first")
    first.start()
    try:
        for name in names:
            _status_when(
                full_cluster, full_namespace, lambda v: _desired(v) >= 2, f"{name} scaled up", name=name
            )
        # Stop the load and wait until every decision is held up by the stabilisation window alone
        # (its history is in the status): the plan at rest. Killed under load instead, the restarted
        # operator could go on with a ramp (the single emulator is overloaded, so its queue, and the
        # demand read from it, keep growing until the load stops), and no replica count is the one
        # to expect.
        loads.pop().stop()
        for name in names:
            _status_when(
                full_cluster,
                full_namespace,
                lambda v: "stabilization" in v["status"]["desiredOptimizedAlloc"]["reason"],
                f"{name} held up by the stabilisation window",
                name=name,
                timeout=240,
            )
        history = {
            n: len(get_va(full_cluster, full_namespace, n)["status"].get("recommendations") or [])
            for n in names
        }
        # Kill it in the middle of a cycle: right after a cycle started writing (the first status moved).
        stamp = get_va(full_cluster, full_namespace, names[0])["status"]["desiredOptimizedAlloc"][
            "lastRunTime"
        ]
        wait_for(
            lambda: (
                get_va(full_cluster, full_namespace, names[0])["status"]["desiredOptimizedAlloc"][
                    "lastRunTime"
                ]
                != stamp
            ),
            timeout=30,
            what="the next cycle starting",
            interval=0.05,
        )
        first.kill()
    finally:
        first.stop()
    replicas = {n: deployment_replicas(full_cluster, full_namespace, n) for n in names}
    second = OperatorProcess(sa_config, full_namespace, tmp_path, identity="second")
    with running(second):
        wait_for(lambda: second.cycles() >= 3, timeout=120, what="three cycles of the restarted operator")
        for name in names:
            va = get_va(full_cluster, full_namespace, name)
            # The stabilisation window recorded before the kill still holds the replicas up.
            assert deployment_replicas(full_cluster, full_namespace, name) == replicas[name], name
            assert "stabilization" in va["status"]["desiredOptimizedAlloc"]["reason"], name
            assert len(va["status"].get("recommendations") or []) >= history[name], name
    for name in names:
        decided = [e for e in events(full_cluster, full_namespace, name) if e["reason"] == "DecisionChanged"]
        messages = [e["message"].split(":")[0] for e in decided]
        assert len(messages) == len(set(messages)), f"duplicate Events for {name}: {messages}"
        assert all(e.get("count", 1) == 1 for e in decided)
