"""One variant's decision, pure: conditions, policy, actuation intent, status, Events and gauges —
without the engine or any fake server."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from variant_autoscaler.core import status as st
from variant_autoscaler.core.decision import (
    KV_PRESSURE_MIN_SECONDS,
    ActuationResult,
    DecisionInputs,
    MetricsView,
    TargetView,
    VariantPlan,
    decide,
    report,
    report_invalid,
    unchanged,
)

pytestmark = pytest.mark.unit

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
OK = MetricsView("ok", "vLLM metrics are available", NOW.timestamp(), 2.0, 100.0, 128.0, 80.0, 20.0)
PLAN = VariantPlan("A100", 3, 64, 120.0, 90.0, 21.0, "3 replicas of A100 serve 120 req/min")


def target(replicas: int = 2, ready: int | None = None, **kw: Any) -> TargetView:
    ready = replicas if ready is None else ready
    return TargetView("Deployment", "vllm", replicas, ready, replicas, **kw)


def inputs(**kw: Any) -> DecisionInputs:
    base = DecisionInputs(
        now=NOW,
        namespace="ns",
        name="va",
        uid="uid-1",
        generation=2,
        previous={},
        mode="metrics",
        accelerator="A100",
        target=target(),
        metrics=OK,
        plan=PLAN,
        plan_status="optimal",
        unit_cost=40.0,
    )
    return replace(base, **kw)


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_metrics_mode_settles_without_io_and_reports_the_decision() -> None:
    decision = decide(inputs())
    assert decision.settled is not None and decision.settled.reason == st.REASON_METRICS_EMITTED
    assert decision.scale_to is None and decision.policy.replicas == 3
    rep = report(decision)
    conds = conditions(dict(rep.status))
    assert conds["MetricsAvailable"]["status"] == "True"
    assert conds["OptimizationReady"]["reason"] == "OptimizationSucceeded"
    assert conds["Actuated"]["reason"] == "MetricsEmitted"
    desired = rep.status["desiredOptimizedAlloc"]
    assert (desired["numReplicas"], desired["accelerator"], desired["maxBatch"]) == (3, "A100", 64)
    assert rep.status["currentAlloc"]["variantCost"] == "80.00"  # 2 replicas x 40
    assert [e.reason for e in rep.events] == ["DecisionChanged"]
    assert rep.gauges is not None and (rep.gauges.desired_replicas, rep.gauges.current_replicas) == (3, 2)
    assert rep.gauges.observed_ttft_ms == 80.0 and rep.write


def test_patch_mode_asks_for_the_scale_and_reports_what_was_done() -> None:
    decision = decide(inputs(mode="patch"))
    assert decision.settled is None and decision.scale_to == 3 and decision.batch_to is None
    done = ActuationResult(
        applied=True,
        condition=st.Condition(st.ACTUATED, "True", st.REASON_SCALED, "scaled Deployment/vllm from 2 to 3"),
        done=("scaled Deployment/vllm from 2 to 3",),
    )
    rep = report(decision, done)
    assert [e.reason for e in rep.events] == ["Scaled", "DecisionChanged"]
    assert rep.status["actuation"]["lastScaleTime"] == "2025-06-01T12:00:00Z"
    assert rep.status["actuation"]["applied"] is True


def test_patch_mode_with_nothing_to_change_is_unchanged() -> None:
    decision = decide(inputs(mode="patch", target=target(3)))
    assert decision.scale_to is None and decision.batch_to is None
    rep = report(decision, unchanged(decision))
    assert conditions(dict(rep.status))["Actuated"]["reason"] == "Unchanged"
    assert rep.status["actuation"]["lastScaleTime"] is None


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"hpa_owner": "ns/hpa"}, "HorizontalPodAutoscaler ns/hpa manages it"),
        ({"target": target(controller="LeaderWorkerSet/x")}, "controlled by LeaderWorkerSet/x"),
    ],
)
def test_patch_mode_never_fights_another_controller(kw: dict[str, Any], needle: str) -> None:
    decision = decide(inputs(mode="patch", **kw))
    assert decision.settled is not None and decision.settled.reason == "ConflictingController"
    assert needle in decision.settled.message and decision.scale_to is None
    rep = report(decision)
    assert rep.status["actuation"]["applied"] is False
    assert "ConflictingController" in [e.reason for e in rep.events]  # a Warning on the flip


def test_missing_metrics_hold_and_never_scale_down() -> None:
    previous = {"desiredOptimizedAlloc": {"numReplicas": 5, "accelerator": "A100"}}
    missing = MetricsView("missing", "no vLLM series for the model")
    decision = decide(inputs(previous=previous, metrics=missing, plan=None, target=target(5)))
    assert decision.policy.held and decision.policy.replicas == 5
    conds = conditions(dict(report(decision).status))
    assert conds["MetricsAvailable"]["reason"] == "MetricsMissing"
    assert conds["OptimizationReady"]["reason"] == "MetricsUnavailable"


def test_a_prometheus_failure_is_said_and_holds() -> None:
    decision = decide(inputs(metrics=None, metrics_error="connection refused", target=target(4)))
    assert decision.policy.held and decision.policy.replicas == 4
    conds = conditions(dict(report(decision).status))
    assert conds["MetricsAvailable"]["reason"] == "PrometheusError"
    assert "connection refused" in conds["MetricsAvailable"]["message"]


def test_no_target_is_target_not_found() -> None:
    decision = decide(inputs(target=None, target_error="Deployment ns/vllm not found", mode="patch"))
    assert decision.settled is not None and decision.settled.reason == "NotActuated"
    conds = conditions(dict(report(decision).status))
    assert conds["OptimizationReady"]["reason"] == "TargetNotFound"
    assert "not found" in conds["OptimizationReady"]["message"]


def test_batch_is_applied_only_when_opted_in_and_stable() -> None:
    previous = {
        "desiredOptimizedAlloc": {"numReplicas": 3, "accelerator": "A100", "maxBatch": 64},
        "actuation": {"maxBatchStableCycles": 5},
    }
    ready = dict(mode="patch", target=target(3, max_num_seqs=128, batch_patchable=True), previous=previous)
    assert decide(inputs(**ready)).batch_to is None  # not opted in
    assert decide(inputs(apply_max_batch=True, **ready)).batch_to == 64
    fresh = dict(ready, previous={})
    assert decide(inputs(apply_max_batch=True, **fresh)).batch_to is None  # not stable yet


def test_an_unchanged_status_waits_for_the_refresh_interval() -> None:
    stored: dict[str, Any] = {}
    for cycle in range(3):  # until the batch's stable-cycle count stops growing
        rep = report(
            decide(inputs(previous=stored, now=NOW + timedelta(seconds=cycle), status_refresh_seconds=300.0))
        )
        assert rep.write
        stored = dict(rep.status)
    again = report(
        decide(inputs(previous=stored, now=NOW + timedelta(seconds=60), status_refresh_seconds=300.0))
    )
    assert not again.write and again.events == ()
    later = report(
        decide(inputs(previous=stored, now=NOW + timedelta(seconds=400), status_refresh_seconds=300.0))
    )
    assert later.write
    assert report(
        decide(inputs(previous=stored, now=NOW + timedelta(seconds=60)))
    ).write  # the default: always


def test_a_conflict_rebuilds_on_the_fresh_object() -> None:
    rep = report(decide(inputs()))
    fresh = {
        "metadata": {"generation": 7},
        "status": {
            "conditions": [
                {
                    "type": "Custom",
                    "status": "True",
                    "reason": "Other",
                    "message": "someone else's",
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                }
            ]
        },
    }
    rebuilt = rep.on(fresh)
    assert rebuilt["observedGeneration"] == 7
    assert {"Custom", "MetricsAvailable", "OptimizationReady", "Actuated"} <= set(conditions(rebuilt))
    assert rebuilt["desiredOptimizedAlloc"] == rep.status["desiredOptimizedAlloc"]


def test_an_invalid_spec_writes_only_its_condition_and_warns_once() -> None:
    rep = report_invalid(inputs(), "invalid spec: modelID: missing")
    assert set(rep.status) == {"observedGeneration", "conditions"}
    cond = conditions(dict(rep.status))["OptimizationReady"]
    assert (cond["status"], cond["reason"], cond["observedGeneration"]) == ("False", "InvalidSpec", 2)
    assert [e.type for e in rep.events] == ["Warning"]
    again = report_invalid(inputs(previous=dict(rep.status)), "invalid spec: modelID: missing")
    assert again.events == ()  # no flip, no second Warning
    assert again.on({"metadata": {"generation": 3}})["observedGeneration"] == 3


def test_recovering_metrics_let_scale_ups_through_but_no_scale_down() -> None:
    gap_start = NOW - timedelta(seconds=30)
    previous = {
        "desiredOptimizedAlloc": {"numReplicas": 4, "accelerator": "A100"},
        "conditions": [
            {
                "type": "MetricsAvailable",
                "status": "False",
                "reason": "PrometheusError",
                "message": "down",
                "lastTransitionTime": st.format_time(gap_start),
            }
        ],
    }
    low = replace(PLAN, replicas=1)
    down = decide(inputs(previous=previous, plan=low, target=target(4)))
    assert down.policy.replicas == 4 and "recovering" in down.policy.limited_by
    up = decide(inputs(previous=previous, plan=replace(PLAN, replicas=6), target=target(4)))
    assert up.policy.replicas == 6
    conds = conditions(dict(report(up).status))
    assert conds["MetricsAvailable"]["reason"] == "MetricsRecovering"


def test_preempting_pods_hold_the_scale_down_and_warn_once_per_episode() -> None:
    down = replace(PLAN, replicas=1)
    decision = decide(inputs(plan=down, target=target(3), preemption_rate=0.2))
    assert decision.policy.replicas == 3 and "kv-pressure" in decision.policy.limited_by
    rep = report(decision)
    cond = conditions(dict(rep.status))[st.KV_CACHE_PRESSURE]
    assert (cond["status"], cond["reason"]) == ("True", st.REASON_PREEMPTING)
    assert "12 requests/min" in cond["message"]
    assert rep.status["currentAlloc"]["load"]["preemptionRate"] == "12.00"
    warnings = [e for e in rep.events if e.reason == "KVCachePressure"]
    assert len(warnings) == 1 and warnings[0].type == "Warning"
    # Next cycle, still preempting: the condition stands, no second Event.
    again = report(decide(inputs(plan=down, target=target(3), preemption_rate=0.1, previous=rep.status)))
    assert "KVCachePressure" not in [e.reason for e in again.events]
    # The pods stop preempting: the scale-down goes through at once; the condition stands for
    # KV_PRESSURE_MIN_SECONDS (sporadic preemptions would flip it, and warn, every other cycle).
    calm = decide(inputs(plan=down, target=target(3), preemption_rate=0.0, previous=again.status))
    assert calm.policy.replicas == 1
    calm_rep = report(calm)
    cond = conditions(dict(calm_rep.status))[st.KV_CACHE_PRESSURE]
    assert cond["status"] == "True" and "clears from 2025-06-01T12:10:00Z" in cond["message"]
    assert calm_rep.status["currentAlloc"]["load"]["preemptionRate"] == "0.00"
    later = NOW + timedelta(seconds=KV_PRESSURE_MIN_SECONDS)
    clear = report(
        decide(inputs(now=later, plan=down, target=target(1), preemption_rate=0.0, previous=calm_rep.status))
    )
    cond = conditions(dict(clear.status))[st.KV_CACHE_PRESSURE]
    assert (cond["status"], cond["reason"]) == ("False", st.REASON_NO_PREEMPTIONS)
    # A new episode warns again.
    relapse = report(
        decide(inputs(now=later, plan=down, target=target(3), preemption_rate=0.5, previous=clear.status))
    )
    assert [e.reason for e in relapse.events].count("KVCachePressure") == 1


def test_unreported_preemptions_add_no_condition_and_change_nothing() -> None:
    down = replace(PLAN, replicas=1)
    decision = decide(inputs(plan=down, target=target(3)))
    assert decision.policy.replicas == 1
    rep = report(decision)
    assert st.KV_CACHE_PRESSURE not in conditions(dict(rep.status))
    assert rep.status["currentAlloc"]["load"]["preemptionRate"] is None
    # Reported before, not now: Unknown, not a stale True.
    was = report(decide(inputs(plan=down, target=target(3), preemption_rate=0.2))).status
    cond = conditions(dict(report(decide(inputs(plan=down, target=target(3), previous=was))).status))
    assert cond[st.KV_CACHE_PRESSURE]["status"] == "Unknown"


def test_siblings_starting_hold_a_scale_down_until_they_serve() -> None:
    """The cycle passes the replicas of the model's other variants still starting (make before break)."""
    lower = replace(PLAN, replicas=1)
    moved = decide(inputs(plan=lower, target=target(3), siblings_starting=2))
    assert moved.policy.replicas == 3 and "replacing" in moved.policy.limited_by
    assert decide(inputs(plan=lower, target=target(3))).policy.replicas == 1
