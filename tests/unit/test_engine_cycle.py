"""One engine cycle end to end, through the real adapters, against in-memory Kubernetes and Prometheus."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from variant_autoscaler.adapters.profile_metrics import QUERIES_PER_CYCLE as PROFILE_QUERIES
from variant_autoscaler.adapters.prometheus import QUERIES_PER_CYCLE
from variant_autoscaler.api.v1alpha1 import VariantAutoscaling
from variant_autoscaler.core import status as st
from variant_autoscaler.planner import PlanOutcome, PlanRequest, VariantPlan
from vatesting.fakes import NS, OPERATOR_NS, VA, Harness, load_yaml


def _schema() -> dict[str, Any]:
    crd = load_yaml("crds/llmd.ai_variantautoscalings.yaml")
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _assert_valid(obj: dict[str, Any]) -> None:
    errors = [e.message for e in jsonschema.Draft7Validator(_schema()).iter_errors(obj)]
    assert errors == []


WVA_LABELS = (("accelerator_type", "A100"), ("namespace", NS), ("variant_name", VA))


async def test_wva_sample_gets_a_full_valid_status_and_gauges() -> None:
    h = Harness()
    h.add_va(replicas=1)
    h.load(60.0)
    report = await h.engine.run_cycle()
    assert report.variants == 1 and report.plan_status == "direct"  # unlimited mode needs no MILP
    status = h.status()
    _assert_valid(h.kube.get("variantautoscalings", NS, VA))
    conds = h.conditions()
    assert (
        conds["MetricsAvailable"]["status"] == "True"
        and conds["MetricsAvailable"]["reason"] == "MetricsFound"
    )
    assert conds["OptimizationReady"]["reason"] == "OptimizationSucceeded"
    assert conds["Actuated"]["reason"] == "MetricsEmitted"
    assert all(c["observedGeneration"] == 1 for c in conds.values())
    current = status["currentAlloc"]
    assert current["accelerator"] == "A100" and current["numReplicas"] == 1
    assert current["load"]["arrivalRate"] == "60.00" and current["itlAverage"] == "20.00"
    assert current["variantCost"] == "40.00"  # 1 replica x A100's 40.00
    desired = status["desiredOptimizedAlloc"]
    assert desired["accelerator"] == "A100" and desired["numReplicas"] >= 1
    assert desired["maxBatch"] == 4 and "Premium" in desired["reason"]
    assert float(desired["itlAverage"]) <= 24.0  # the Premium ITL target for default/default
    assert status["actuation"] == {"applied": True, "mode": "metrics", "maxBatchStableCycles": 1}
    g = h.gauges()
    assert g[("inferno_desired_replicas", WVA_LABELS)] == desired["numReplicas"]
    assert g[("inferno_current_replicas", WVA_LABELS)] == 1
    # WVA's final CRD: the VA does not own its target (deleting the target leaves the VA), and says
    # whether the target is there.
    assert "ownerReferences" not in h.kube.get("variantautoscalings", NS, VA)["metadata"]
    assert (conds["TargetResolved"]["status"], conds["TargetResolved"]["reason"]) == ("True", "TargetFound")
    assert [e["reason"] for e in h.kube.events()] == ["DecisionChanged"]
    # The metrics mode never touches the Deployment.
    assert h.kube.writes("PATCH", "/deployments/") == 0


async def test_a_load_change_changes_the_decision_and_posts_one_event() -> None:
    h = Harness()
    h.add_va()
    h.load(30.0)
    await h.engine.run_cycle()
    low = h.status()["desiredOptimizedAlloc"]["numReplicas"]
    await h.engine.run_cycle()
    assert len(h.kube.events()) == 1  # unchanged decision: no new Event
    h.advance(60)
    h.load(1200.0)
    await h.engine.run_cycle()
    high = h.status()["desiredOptimizedAlloc"]["numReplicas"]
    assert high > low
    assert [e["reason"] for e in h.kube.events()] == ["DecisionChanged", "DecisionChanged"]


async def test_each_cycle_writes_each_status_once_and_queries_prometheus_a_fixed_number_of_times() -> None:
    h = Harness()
    sample = load_yaml("deploy/samples/variantautoscaling.yaml")
    for i in range(25):
        va = copy.deepcopy(sample)
        va["metadata"]["name"] = f"v{i}"
        h.add_va(va)
    h.load(60.0)
    before = h.prom.queries
    report = await h.engine.run_cycle()
    assert report.variants == 25
    # The load and saturation queries, and the profile learning's pod windows.
    assert h.prom.queries - before == QUERIES_PER_CYCLE + PROFILE_QUERIES == report.promql_queries
    assert h.kube.writes("PUT", "/status") == 25
    assert h.kube.writes("GET", "/deployments") == 1  # one list, not one read per variant


async def test_missing_metrics_hold_and_report_without_scaling_down() -> None:
    h = Harness(DEFAULT_ACTUATION_MODE="patch")
    h.add_va(replicas=4)
    await h.engine.run_cycle()  # no series at all for the model
    conds = h.conditions()
    assert conds["MetricsAvailable"]["status"] == "False"
    assert conds["MetricsAvailable"]["reason"] == "MetricsMissing"
    assert conds["OptimizationReady"]["reason"] == "MetricsUnavailable"
    assert h.status()["desiredOptimizedAlloc"]["numReplicas"] == 4
    assert h.replicas() == 4
    assert "no scale-down" in h.status()["desiredOptimizedAlloc"]["reason"]
    assert "Warning" in {e["type"] for e in h.kube.events()}


async def test_prometheus_down_keeps_the_last_decision_then_recovers() -> None:
    h = Harness(DEFAULT_ACTUATION_MODE="patch", SCALE_DOWN_STABILIZATION_WINDOW="0s")
    h.add_va(replicas=1)
    h.load(1200.0)
    await h.engine.run_cycle()
    scaled = h.replicas()
    assert scaled > 1
    last_good = h.status()["lastMetricsTime"]
    h.prom.down = True
    h.advance(60)
    await h.engine.run_cycle()
    conds = h.conditions()
    assert conds["MetricsAvailable"]["reason"] == "PrometheusError"
    assert h.replicas() == scaled and h.status()["desiredOptimizedAlloc"]["numReplicas"] == scaled
    assert h.status()["lastMetricsTime"] == last_good
    h.prom.down = False
    h.load(0.0)
    h.advance(60)
    # Prometheus answers again, but has scraped nothing since the outage began: still a hold.
    gap_started = h.clock.now.timestamp() - 60
    h.prom.series[("default/default", NS)]["newest"] = gap_started - 5
    await h.engine.run_cycle()
    conds = h.conditions()
    assert (conds["MetricsAvailable"]["status"], conds["MetricsAvailable"]["reason"]) == (
        "False",
        "MetricsStale",
    )
    assert "waiting for new scrapes" in conds["MetricsAvailable"]["message"]
    assert h.replicas() == scaled and h.status()["lastMetricsTime"] == last_good
    h.advance(10)  # new scrapes: from now on one window of holding
    await h.engine.run_cycle()
    # Back, but the rate window still reaches into the outage: no scale-down yet, and it says why.
    conds = h.conditions()
    assert (conds["MetricsAvailable"]["status"], conds["MetricsAvailable"]["reason"]) == (
        "True",
        "MetricsRecovering",
    )
    assert h.replicas() == scaled and h.status()["desiredOptimizedAlloc"]["numReplicas"] == scaled
    assert "held at" in h.status()["desiredOptimizedAlloc"]["reason"]
    # A restarted operator keeps the hold: the recovery time is in the status.
    h.engine = h.new_engine()
    h.advance(30)
    await h.engine.run_cycle()
    assert h.conditions()["MetricsAvailable"]["reason"] == "MetricsRecovering"
    assert h.replicas() == scaled
    h.advance(30)  # one full 60 s window after the first new samples
    await h.engine.run_cycle()
    assert h.conditions()["MetricsAvailable"]["reason"] == "MetricsFound"
    assert h.replicas() == 1  # back to the minimum once metrics say so


async def test_stale_metrics() -> None:
    h = Harness()
    h.add_va()
    h.load(60.0)
    h.prom.series[("default/default", NS)]["newest"] = h.prom.now - 3600
    await h.engine.run_cycle()
    assert h.conditions()["MetricsAvailable"]["reason"] == "MetricsStale"


async def test_patch_mode_scales_with_stabilisation_that_survives_a_restart() -> None:
    h = Harness(DEFAULT_ACTUATION_MODE="patch", SCALE_DOWN_STABILIZATION_WINDOW="5m")
    h.add_va(replicas=1)
    h.load(1200.0)
    await h.engine.run_cycle()
    high = h.replicas()
    assert high > 1 and h.conditions()["Actuated"]["reason"] == "Scaled"
    assert h.status()["actuation"]["lastScaleTime"] == st.format_time(h.clock.now)
    assert "Scaled" in [e["reason"] for e in h.kube.events()]
    # Load drops; a brand-new engine (a restarted operator) must still hold the scale-down.
    h.engine = h.new_engine()
    h.load(30.0)
    h.advance(60)
    await h.engine.run_cycle()
    assert h.replicas() == high and "stabilization" in h.status()["desiredOptimizedAlloc"]["reason"]
    h.engine = h.new_engine()
    h.advance(300)
    await h.engine.run_cycle()
    assert h.replicas() < high


async def test_patch_mode_waits_for_pending_replicas() -> None:
    h = Harness(DEFAULT_ACTUATION_MODE="patch")
    h.add_va(replicas=1)
    h.load(600.0)
    await h.engine.run_cycle()
    scaled = h.replicas()
    assert scaled > 1
    dep = h.kube.get("deployments", NS, VA)
    dep["status"]["readyReplicas"] = 1  # the new replicas are still starting
    h.load(2400.0)
    h.advance(60)
    await h.engine.run_cycle()
    assert h.replicas() == scaled
    assert "still starting" in h.status()["desiredOptimizedAlloc"]["reason"]
    h.advance(600)  # PENDING_REPLICAS_TIMEOUT after the scale: they are not coming
    await h.engine.run_cycle()
    assert h.replicas() > scaled


async def _scale_up_while(change: Callable[[dict[str, Any]], None]) -> Harness:
    """A cycle in patch mode that scales up from 1 replica, with ``change`` made to the Deployment
    between the cycle's read and its scale patch."""
    h = Harness(DEFAULT_ACTUATION_MODE="patch")
    h.add_va(replicas=1)
    h.load(1200.0)
    h.kube.before_scale_patch.append(change)
    await h.engine.run_cycle()
    return h


async def test_patch_mode_retries_a_scale_whose_target_only_changed_its_status() -> None:
    # The Deployment's status moves on (a pod became ready).
    h = await _scale_up_while(lambda dep: dep["status"].update(readyReplicas=1))
    assert h.replicas() > 1 and h.conditions()["Actuated"]["reason"] == "Scaled"
    assert h.kube.writes("PATCH", "/scale") == 2  # a 409, then the same patch on the new version
    assert ("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/{VA}/scale") in h.kube.requests


async def test_patch_mode_never_overwrites_replicas_changed_since_the_cycle_read_them() -> None:
    # Someone (kubectl scale, another controller, a new leader) sets 7 replicas after the cycle read 1.
    h = await _scale_up_while(lambda dep: dep["spec"].update(replicas=7))
    assert h.replicas() == 7 and h.kube.writes("PATCH", "/scale") == 1
    actuated = h.conditions()["Actuated"]
    assert actuated["status"] == "False" and actuated["reason"] == "TargetChanged"
    assert "from 1 to 7" in actuated["message"]
    assert h.status()["actuation"]["applied"] is False
    assert [e["type"] for e in h.kube.events() if e["reason"] == "TargetChanged"] == ["Warning"]
    assert h.engine._wake.is_set()  # another cycle soon, on the new count
    h.advance(60)
    await h.engine.run_cycle()
    assert h.conditions()["Actuated"]["reason"] in ("Scaled", "Unchanged")


async def test_unready_replicas_of_a_scale_never_seen_do_not_block_scale_up() -> None:
    h = Harness(DEFAULT_ACTUATION_MODE="patch")
    h.add_va(replicas=2)
    dep = h.kube.get("deployments", NS, VA)
    dep["status"]["readyReplicas"] = 1  # e.g. one replica crash-looping since before the operator
    h.load(1200.0)
    await h.engine.run_cycle()
    assert h.replicas() > 2


async def test_patch_mode_refuses_a_target_managed_by_an_hpa() -> None:
    h = Harness(DEFAULT_ACTUATION_MODE="patch")
    h.add_va(replicas=1)
    h.kube.put(load_yaml("deploy/hpa/hpa.yaml"))
    h.load(1200.0)
    await h.engine.run_cycle()
    assert h.replicas() == 1
    actuated = h.conditions()["Actuated"]
    assert actuated["status"] == "False" and actuated["reason"] == "ConflictingController"
    assert "vllme-hpa" in actuated["message"]
    assert h.status()["actuation"]["applied"] is False
    await h.engine.run_cycle()
    refusals = [e for e in h.kube.events() if e["reason"] == "ConflictingController"]
    assert len(refusals) == 1 and refusals[0]["type"] == "Warning"  # once, when it started


async def test_patch_mode_refuses_a_target_with_a_controller() -> None:
    h = Harness(DEFAULT_ACTUATION_MODE="patch")
    h.add_va(replicas=1)
    h.kube.get("deployments", NS, VA)["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "name": "isvc",
            "controller": True,
        }
    ]
    h.load(1200.0)
    await h.engine.run_cycle()
    assert h.replicas() == 1
    assert "InferenceService/isvc" in h.conditions()["Actuated"]["message"]


async def test_shadow_mode_changes_nothing() -> None:
    h = Harness()
    h.add_va(replicas=1, actuation={"mode": "shadow"})
    h.load(1200.0)
    await h.engine.run_cycle()
    assert h.replicas() == 1 and h.kube.writes("PATCH", "/deployments/") == 0
    assert h.conditions()["Actuated"]["reason"] == "ShadowMode"
    assert h.status()["desiredOptimizedAlloc"]["numReplicas"] > 1
    assert ("inferno_desired_replicas", WVA_LABELS) not in h.gauges()


async def test_batch_size_is_applied_only_when_enabled_and_stable() -> None:
    class BatchPlanner:
        def plan(self, request: PlanRequest) -> PlanOutcome:
            return PlanOutcome(
                "optimal",
                0.0,
                {v.key: VariantPlan("A100", 2, 16, 80.0, 100.0, 20.0, "test plan") for v in request.variants},
            )

    h = Harness(planner=BatchPlanner(), DEFAULT_ACTUATION_MODE="patch", BATCH_STABLE_CYCLES="2")
    h.add_va(replicas=2, actuation={"mode": "patch", "applyMaxBatch": True})
    dep = h.kube.get("deployments", NS, VA)
    dep["spec"]["template"]["spec"]["containers"][0]["args"] = ["--model", "m", "--max-num-seqs", "64"]
    h.load(60.0)
    await h.engine.run_cycle()
    args = h.kube.get("deployments", NS, VA)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-1] == "64"  # one cycle is not stable enough
    h.advance(60)
    await h.engine.run_cycle()
    args = h.kube.get("deployments", NS, VA)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["--model", "m", "--max-num-seqs", "16"]
    assert h.status()["currentAlloc"]["maxBatch"] == 64  # observed before the patch took effect


async def test_batch_size_is_never_set_on_args_changed_since_the_cycle_read_them() -> None:
    class BatchPlanner:
        replicas = 2

        def plan(self, request: PlanRequest) -> PlanOutcome:
            plan = VariantPlan("A100", self.replicas, 16, 80.0, 100.0, 20.0, "test plan")
            return PlanOutcome("optimal", 0.0, {v.key: plan for v in request.variants})

    planner = BatchPlanner()
    h = Harness(planner=planner, DEFAULT_ACTUATION_MODE="patch", BATCH_STABLE_CYCLES="2")
    h.add_va(replicas=2, actuation={"mode": "patch", "applyMaxBatch": True})
    container = h.kube.get("deployments", NS, VA)["spec"]["template"]["spec"]["containers"][0]
    container["args"] = ["--model", "m", "--max-num-seqs", "64"]
    h.load(60.0)
    await h.engine.run_cycle()  # one cycle is not stable enough for the batch size
    # Next cycle: scale 2 -> 3 and set the batch; someone edits the args between the read and the patch.
    planner.replicas = 3
    theirs = ["--model", "m", "--max-num-seqs", "32", "--enforce-eager"]
    h.kube.before_json_patch.append(
        lambda dep: dep["spec"]["template"]["spec"]["containers"][0].update(args=list(theirs))
    )
    h.advance(60)
    await h.engine.run_cycle()
    assert h.kube.get("deployments", NS, VA)["spec"]["template"]["spec"]["containers"][0]["args"] == theirs
    assert h.replicas() == 3  # the scale, made first, stands and is said
    actuated = h.conditions()["Actuated"]
    assert actuated["status"] == "False" and actuated["reason"] == "TargetChanged"
    assert actuated["message"].startswith(
        f"scaled Deployment/{VA} from 2 to 3; then: not setting --max-num-seqs"
    )
    assert h.status()["actuation"]["lastScaleTime"] == st.format_time(h.clock.now)
    assert [e["message"] for e in h.kube.events() if e["reason"] == "Scaled"] == [
        f"scaled Deployment/{VA} from 2 to 3"
    ]
    assert h.engine._wake.is_set()


async def test_invalid_variant_is_reported_in_a_condition_and_an_event() -> None:
    h = Harness()
    va = load_yaml("deploy/samples/variantautoscaling.yaml")
    del va["metadata"]["labels"]  # three profiles and no accelerator label: cannot tell what runs
    h.add_va(va)
    bad = copy.deepcopy(load_yaml("deploy/samples/variantautoscaling.yaml"))
    bad["metadata"]["name"] = "bad-parms"
    bad["spec"]["modelProfile"]["accelerators"][0]["perfParms"]["decodeParms"] = {"alpha": "x", "beta": "1"}
    h.add_va(bad)
    h.load(60.0)
    report = await h.engine.run_cycle()
    assert {o.key[1]: bool(o.error) for o in report.outcomes} == {VA: True, "bad-parms": True}
    cond = h.conditions()["OptimizationReady"]
    assert (
        cond["status"] == "False" and cond["reason"] == "InvalidSpec" and "acceleratorName" in cond["message"]
    )
    assert "decodeParms.alpha" in h.conditions("bad-parms")["OptimizationReady"]["message"]
    warnings = [e for e in h.kube.events() if e["type"] == "Warning"]
    assert len(warnings) == 2
    await h.engine.run_cycle()
    assert len([e for e in h.kube.events() if e["type"] == "Warning"]) == 2  # not repeated


async def test_status_conflict_is_retried_with_a_fresh_read() -> None:
    h = Harness()
    h.add_va()
    h.load(60.0)
    h.kube.status_conflicts_to_inject = 2
    report = await h.engine.run_cycle()
    assert report.outcomes[0].written
    assert h.kube.writes("PUT", "/status") == 3
    assert h.conditions()["OptimizationReady"]["status"] == "True"
    conflicts = h.gauges()[("variant_autoscaler_status_conflicts_total", ())]
    assert conflicts == 2


async def test_config_errors_hold_every_variant() -> None:
    h = Harness(GLOBAL_OPT_INTERVAL="soon")
    h.add_va(replicas=3)
    h.load(1200.0)
    report = await h.engine.run_cycle()
    assert report.config_error is not None and "GLOBAL_OPT_INTERVAL" in report.config_error
    cond = h.conditions()["OptimizationReady"]
    assert cond["reason"] == "ConfigurationInvalid"
    assert h.status()["desiredOptimizedAlloc"]["numReplicas"] == 3


async def test_missing_costs_configmap() -> None:
    # Optional since WVA v0.4 (later generations ship neither it nor service-classes-config): not a
    # configuration error; a variant that needs it says why in its own conditions.
    h = Harness()
    del h.kube.objects[("configmaps", OPERATOR_NS, "accelerator-unit-costs")]
    h.add_va()
    h.load(60.0)
    report = await h.engine.run_cycle()
    assert report.config_error is None
    cond = h.conditions()["OptimizationReady"]
    assert cond["reason"] == "OptimizationFailed" and "accelerator-unit-costs" in cond["message"]


async def test_scale_to_zero_writes_a_valid_status() -> None:
    h = Harness(
        WVA_SCALE_TO_ZERO="true", DEFAULT_ACTUATION_MODE="patch", SCALE_DOWN_STABILIZATION_WINDOW="0s"
    )
    h.add_va(replicas=1)
    h.load(0.0)
    await h.engine.run_cycle()
    desired = h.status()["desiredOptimizedAlloc"]
    assert desired["numReplicas"] == 0 and desired["accelerator"] == "A100"
    assert h.replicas() == 0
    _assert_valid(h.kube.get("variantautoscalings", NS, VA))


async def test_missing_target_is_reported() -> None:
    h = Harness()
    h.add_va(scaleTargetRef={"name": "elsewhere"})
    del h.kube.objects[("deployments", NS, "elsewhere")]
    h.load(60.0)
    await h.engine.run_cycle()
    cond = h.conditions()["OptimizationReady"]
    assert cond["reason"] == "TargetNotFound" and "elsewhere" in cond["message"]


async def test_sloclassref_names_a_class() -> None:
    h = Harness()
    va = load_yaml("deploy/samples/variantautoscaling.yaml")
    va["spec"]["modelID"] = "meta/llama0-7b"  # listed in Freemium only
    va["spec"]["sloClassRef"] = {"name": "service-classes-config", "key": "freemium.yaml"}
    h.add_va(va)
    h.load(60.0, model="meta/llama0-7b")
    await h.engine.run_cycle()
    assert "Freemium (sloClassRef)" in h.status()["desiredOptimizedAlloc"]["reason"]


def test_triggers_fire_only_on_relevant_changes() -> None:
    h = Harness()
    va = {"metadata": {"uid": "u", "namespace": NS, "name": VA, "generation": 1, "labels": {"a": "b"}}}
    h.engine.notify_va(None, va)
    assert h.engine._wake.is_set()
    h.engine._wake.clear()
    status_only = copy.deepcopy(va)
    status_only["status"] = {"x": 1}
    status_only["metadata"]["resourceVersion"] = "99"
    h.engine.notify_va("MODIFIED", status_only)  # our own status write must not loop
    assert not h.engine._wake.is_set()
    va["metadata"]["generation"] = 2
    h.engine.notify_va("MODIFIED", va)
    assert h.engine._wake.is_set()
    h.engine._wake.clear()
    node = {
        "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": "A"}},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    h.engine.notify_node("ADDED", node)
    assert h.engine._wake.is_set()
    h.engine._wake.clear()
    node["status"]["conditions"][0]["lastHeartbeatTime"] = "later"
    h.engine.notify_node("MODIFIED", node)
    assert not h.engine._wake.is_set()
    node["status"]["allocatable"]["nvidia.com/gpu"] = "4"
    h.engine.notify_node("MODIFIED", node)
    assert h.engine._wake.is_set()
    h.engine._wake.clear()
    cm = {"metadata": {"name": "accelerator-unit-costs"}, "data": {"A100": "{}"}}
    h.engine.notify_configmap("ADDED", cm)
    h.engine.notify_configmap("MODIFIED", cm)
    assert not h.engine._wake.is_set()
    h.engine.notify_configmap("MODIFIED", {**cm, "data": {"A100": '{"cost": "1"}'}})
    assert h.engine._wake.is_set()
    h.engine._wake.clear()
    h.engine.notify_configmap("MODIFIED", {"metadata": {"name": "unrelated"}, "data": {"x": "y"}})
    assert not h.engine._wake.is_set()


async def test_health_fails_when_cycles_stop() -> None:
    h = Harness()
    h.add_va()
    h.load(60.0)
    await h.engine.run_cycle()
    assert h.engine.health()["cycles"] == 1
    h.engine.last_completed = (h.engine.last_completed or 0.0) - 10_000
    with pytest.raises(Exception, match="no cycle has completed"):
        h.engine.health()


async def test_health_fails_when_a_leader_never_completes_a_cycle() -> None:
    h = Harness()
    h.engine._leading_since = time.monotonic() - 10_000  # led for long, every cycle failed
    with pytest.raises(Exception, match="no cycle has completed since leading"):
        h.engine.health()
    h.engine._leading_since = time.monotonic()  # just became the leader: not due yet
    assert h.engine.health()["cycles"] == 0


class _Lease:
    """Leads until told otherwise."""

    def __init__(self) -> None:
        self.leading = True

    def is_leader(self) -> bool:
        return self.leading

    async def run(self) -> None:
        return None

    async def release(self) -> None:
        return None


async def test_a_replica_that_lost_the_lease_writes_nothing() -> None:
    h = Harness(DEFAULT_ACTUATION_MODE="patch")
    h.add_va(replicas=1)
    h.load(1200.0)
    lost = _Lease()
    lost.leading = False
    h.engine.leader = lost
    report = await h.engine.run_cycle()
    assert [o.error for o in report.outcomes] == ["not the leader any more"]
    assert h.kube.writes("PATCH", "") == 0 and h.kube.events() == []
    assert h.replicas() == 1


async def test_a_replica_that_loses_the_lease_during_a_scale_patch_does_not_retry_it() -> None:
    # A 409 arrives just as the Lease is lost: it may be the new leader's write; never overwrite it.
    h = Harness(DEFAULT_ACTUATION_MODE="patch")
    h.add_va(replicas=1)
    h.load(1200.0)
    lease = _Lease()
    h.engine.leader = lease

    def status_moves_and_lease_lost(dep: dict[str, Any]) -> None:
        dep["status"]["readyReplicas"] = 1
        lease.leading = False

    h.kube.before_scale_patch.append(status_moves_and_lease_lost)
    report = await h.engine.run_cycle()
    assert h.kube.writes("PATCH", "/scale") == 1 and h.replicas() == 1  # no retry
    assert not report.outcomes[0].written and h.kube.writes("PUT", "/status") == 0
    assert h.kube.events() == []  # nor an Event about a decision the new leader owns now


async def test_a_replica_that_loses_the_lease_during_a_status_write_does_not_retry_it() -> None:
    h = Harness()
    h.add_va()
    h.load(60.0)
    lease = _Lease()
    h.engine.leader = lease
    h.kube.status_conflicts_to_inject = 1
    conflict = h.kube._inject_status_conflict

    def conflict_and_lease_lost(obj: dict[str, Any]) -> None:
        conflict(obj)
        lease.leading = False

    h.kube._inject_status_conflict = conflict_and_lease_lost  # type: ignore[method-assign]
    report = await h.engine.run_cycle()
    assert h.kube.writes("PUT", "/status") == 1 and not report.outcomes[0].written
    assert ("GET", f"/apis/llmd.ai/v1alpha1/namespaces/{NS}/variantautoscalings/{VA}") not in h.kube.requests


async def test_a_spec_is_parsed_once_until_its_generation_or_labels_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[object] = []
    real = VariantAutoscaling.model_validate

    def counting(obj: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(obj["metadata"]["generation"])
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(VariantAutoscaling, "model_validate", counting)
    h = Harness()
    va = h.add_va()
    h.load(60.0)
    for _ in range(3):  # status writes between cycles do not count as changes
        await h.engine.run_cycle()
        h.advance(60)
    assert parsed == [1]
    va["metadata"]["generation"] = 2
    va["spec"]["minReplicas"] = 2
    h.kube.put(va)
    await h.engine.run_cycle()
    await h.engine.run_cycle()
    assert parsed == [1, 2]
    assert h.status()["desiredOptimizedAlloc"]["numReplicas"] >= 2


async def test_status_refresh_interval_skips_writes_that_would_change_only_figures() -> None:
    h = Harness(STATUS_REFRESH_INTERVAL="5m")
    h.add_va()
    h.load(60.0)
    for _ in range(3):  # the batch size's stability count grows to BATCH_STABLE_CYCLES (3): written
        await h.engine.run_cycle()
        h.advance(60)
    assert h.kube.writes("PUT", "/status") == 3
    assert h.status()["actuation"]["maxBatchStableCycles"] == 3
    first = h.status()["desiredOptimizedAlloc"]["lastRunTime"]
    h.load(61.0)  # the observed load moves a little: same decision
    report = await h.engine.run_cycle()
    assert h.kube.writes("PUT", "/status") == 3
    assert report.outcomes[0].unchanged and not report.outcomes[0].written
    assert h.status()["desiredOptimizedAlloc"]["lastRunTime"] == first
    assert h.gauges()[("variant_autoscaler_status_writes_skipped_total", ())] == 1
    h.advance(60)
    h.load(1200.0)  # a new decision is written at once
    await h.engine.run_cycle()
    assert h.kube.writes("PUT", "/status") == 4
    scaled = h.status()["desiredOptimizedAlloc"]["numReplicas"]
    assert scaled > 1
    h.advance(60)
    await h.engine.run_cycle()
    assert h.kube.writes("PUT", "/status") == 4
    h.advance(300)  # the refresh is due: written although nothing essential changed
    await h.engine.run_cycle()
    assert h.kube.writes("PUT", "/status") == 5
    assert h.status()["desiredOptimizedAlloc"]["numReplicas"] == scaled


async def test_by_default_every_status_is_written_every_cycle() -> None:
    h = Harness()
    h.add_va()
    h.load(60.0)
    for cycle in range(1, 4):
        await h.engine.run_cycle()
        assert h.kube.writes("PUT", "/status") == cycle
        h.advance(60)
