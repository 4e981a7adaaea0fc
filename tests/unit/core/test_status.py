"""Status builders: WVA's formatting, condition transitions, merge-patch nulls, round trips."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from variant_autoscaler.core import status as st
from variant_autoscaler.core.policy import Recommendation
from variant_autoscaler.core.workload import Burstiness, RequestLengths, TokenLengths, Workload

T0 = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (10.5, "10.50"),
        (0.175 * 60, "10.50"),
        (500.0, "500.00"),
        (1 / 3, "0.33"),
        (math.nan, "0.00"),
        (math.inf, "0.00"),
        (-1.0, "0.00"),
        (None, "0.00"),
    ],
)
def test_format_decimal_is_wva_percent_2f(value: float | None, text: str) -> None:
    assert st.format_decimal(value) == text


def test_time_round_trip() -> None:
    assert st.format_time(T0) == "2025-05-01T12:00:00Z"
    assert st.parse_time("2025-05-01T12:00:00Z") == T0
    assert st.parse_time("garbage") is None and st.parse_time(None) is None


def test_set_condition_keeps_transition_time_unless_status_flips() -> None:
    first = st.set_condition((), st.Condition("MetricsAvailable", "True", "MetricsFound", "ok"), T0)
    assert first[0].last_transition_time == T0
    same = st.set_condition(
        first, st.Condition("MetricsAvailable", "True", "MetricsFound", "still ok"), T0 + timedelta(minutes=5)
    )
    assert same[0].last_transition_time == T0 and same[0].message == "still ok"
    flipped = st.set_condition(
        same, st.Condition("MetricsAvailable", "False", "MetricsStale", "old"), T0 + timedelta(minutes=9)
    )
    assert flipped[0].last_transition_time == T0 + timedelta(minutes=9)
    assert len(flipped) == 1


def test_build_status_shapes_wva_fields_and_marks_owned_keys_for_removal() -> None:
    prev = (
        st.Condition("OptimizationReady", "True", "OptimizationSucceeded", "x", 1, T0 - timedelta(hours=1)),
    )
    out = st.build_status(
        st.StatusInputs(
            now=T0,
            generation=7,
            previous_conditions=prev,
            condition_updates=(
                st.Condition("OptimizationReady", "True", "OptimizationSucceeded", "Optimization completed"),
                st.Condition("Actuated", "False", st.REASON_CONFLICTING_CONTROLLER, "HPA vllme-hpa"),
            ),
            current=st.CurrentView("A100", 2, 256, 80.0, 20.123, 150.0, 10.5, 100.0, 200.0),
            desired=st.DesiredView("A100", 4, T0, max_batch=8, reason="optimal"),
        )
    )
    assert out["currentAlloc"] == {
        "accelerator": "A100",
        "numReplicas": 2,
        "maxBatch": 256,
        "variantCost": "80.00",
        "itlAverage": "20.12",
        "ttftAverage": "150.00",
        "load": {
            "arrivalRate": "10.50",
            "avgInputTokens": "100.00",
            "avgOutputTokens": "200.00",
            "preemptionRate": None,  # not reported -> removed by merge patch
        },
    }
    assert out["desiredOptimizedAlloc"]["lastRunTime"] == "2025-05-01T12:00:00Z"
    assert out["desiredOptimizedAlloc"]["ttftAverage"] is None  # no prediction -> removed by merge patch
    assert out["actuation"] is None and out["recommendations"] is None and out["lastMetricsTime"] is None
    assert out["observedGeneration"] == 7
    conds = {c["type"]: c for c in out["conditions"]}
    assert conds["OptimizationReady"]["lastTransitionTime"] == "2025-05-01T11:00:00Z"  # unchanged status
    assert conds["OptimizationReady"]["observedGeneration"] == 7
    assert conds["Actuated"]["lastTransitionTime"] == "2025-05-01T12:00:00Z"
    assert st.strip_nulls(out)["desiredOptimizedAlloc"] == {
        "lastRunTime": "2025-05-01T12:00:00Z",
        "accelerator": "A100",
        "numReplicas": 4,
        "maxBatch": 8,
        "reason": "optimal",
    }


def test_conditions_and_recommendations_read_back() -> None:
    out = st.build_status(
        st.StatusInputs(
            now=T0,
            generation=2,
            previous_conditions=(),
            condition_updates=(st.Condition("MetricsAvailable", "False", "MetricsMissing", "none"),),
            recommendations=(Recommendation(T0, 3),),
        )
    )
    conds = st.conditions_from_json(out["conditions"])
    assert conds == (st.Condition("MetricsAvailable", "False", "MetricsMissing", "none", 2, T0),)
    assert st.recommendations_from_json(out["recommendations"]) == (Recommendation(T0, 3),)
    assert st.conditions_from_json([{"type": "X", "status": "maybe"}, "junk"]) == ()
    assert st.recommendations_from_json([{"time": "bad", "numReplicas": 1}, {"numReplicas": -1}]) == ()


def test_metrics_recovery_lasts_one_window_from_the_end_of_the_gap() -> None:
    found = st.Condition("MetricsAvailable", "True", "MetricsFound", "ok", None, T0)
    assert st.metrics_recovery((), T0, 60) is None  # first cycle: no gap seen
    assert st.metrics_recovery((found,), T0, 60) is None
    gap = st.Condition("MetricsAvailable", "False", "PrometheusError", "down", None, T0)
    back = T0 + timedelta(minutes=5)
    recovering = st.metrics_recovery((gap,), back, 60)
    assert recovering is not None
    assert (recovering.status, recovering.reason, recovering.last_transition_time) == (
        "True",
        "MetricsRecovering",
        back,
    )
    assert "no scale-down" in recovering.message and "2025-05-01T12:06:00Z" in recovering.message
    # Written back, it keeps its transition time: the window is counted from the end of the gap.
    # Prometheus is back, but its newest sample predates the gap: still False, the gap's time kept.
    waiting = st.metrics_recovery((gap,), back, 60, newest_sample=(T0 - timedelta(seconds=5)).timestamp())
    assert waiting is not None
    assert (waiting.status, waiting.reason, waiting.last_transition_time) == ("False", "MetricsStale", T0)
    fresh = st.metrics_recovery((gap,), back, 60, newest_sample=(T0 + timedelta(seconds=1)).timestamp())
    assert fresh is not None and fresh.reason == "MetricsRecovering"
    written = st.set_condition((gap,), recovering, back)
    again = st.metrics_recovery(written, back + timedelta(seconds=59), 60)
    assert again is not None and again.last_transition_time == back
    assert st.metrics_recovery(written, back + timedelta(seconds=60), 60) is None


def test_status_essentials_ignore_figures_words_and_timestamps() -> None:
    base = {
        "desiredOptimizedAlloc": {
            "numReplicas": 2,
            "accelerator": "A100",
            "lastRunTime": "t1",
            "reason": "a",
        },
        "currentAlloc": {"numReplicas": 2, "accelerator": "A100", "load": {"arrivalRate": "10.00"}},
        "lastMetricsTime": "t1",
        "conditions": [
            {"type": "MetricsAvailable", "status": "True", "reason": "MetricsFound", "message": "x"}
        ],
    }
    moved = {
        "desiredOptimizedAlloc": {
            "numReplicas": 2,
            "accelerator": "A100",
            "lastRunTime": "t2",
            "reason": "b",
        },
        "currentAlloc": {"numReplicas": 2, "accelerator": "A100", "load": {"arrivalRate": "11.00"}},
        "lastMetricsTime": "t2",
        "conditions": [
            {"type": "MetricsAvailable", "status": "True", "reason": "MetricsFound", "message": "y"}
        ],
        "actuation": None,  # a key to clear is the same as an absent one
    }
    assert st.status_essentials(base) == st.status_essentials(moved)
    scaled = {**moved, "desiredOptimizedAlloc": {**moved["desiredOptimizedAlloc"], "numReplicas": 3}}
    assert st.status_essentials(base) != st.status_essentials(scaled)
    flipped = {
        **moved,
        "conditions": [{"type": "MetricsAvailable", "status": "False", "reason": "MetricsStale"}],
    }
    assert st.status_essentials(base) != st.status_essentials(flipped)


def test_refresh_due_after_the_interval_shortened_by_the_spread() -> None:
    stored = {"desiredOptimizedAlloc": {"lastRunTime": st.format_time(T0)}}
    assert st.refresh_due(stored, T0 + timedelta(seconds=10), 0, 0.0)  # 0: every cycle
    assert st.refresh_due({}, T0, 300, 0.0)  # never written
    assert not st.refresh_due(stored, T0 + timedelta(seconds=299), 300, 0.0)
    assert st.refresh_due(stored, T0 + timedelta(seconds=300), 300, 0.0)
    assert st.refresh_due(stored, T0 + timedelta(seconds=152), 300, 0.99)  # up to half as long


def test_status_figures_and_counts_stay_within_the_crds_bounds() -> None:
    # "-0.00" fails the schema's pattern; the property test in tests/unit/api found it.
    assert st.format_decimal(-0.0) == "0.00"
    assert st.format_decimal(1e300) == "1000000000000000.00"
    now = datetime(2026, 1, 1, tzinfo=UTC)
    desired = st.desired_alloc_json(st.DesiredView("", 2**40, now, max_batch=2**40, reason="r" * 5000))
    assert desired["accelerator"] is None  # unknown: left out rather than "" (minLength 1)
    assert desired["numReplicas"] == desired["maxBatch"] == 2**31 - 1
    assert len(desired["reason"]) == 4096


def test_the_workload_shows_the_lengths_quantiles_and_the_burstiness() -> None:
    lengths = RequestLengths(TokenLengths.fixed(100.0), TokenLengths.exponential(64.0))
    shown = st.workload_json(Workload(lengths, Burstiness((30.0, 60.0), (2.5, 4.0), 1.5)))
    assert shown is not None
    assert shown["burstiness"][1] == {"windowSeconds": "60.00", "indexOfDispersion": "4.00"}
    assert shown["measuredRate"] == "90.00"  # requests per minute
    assert shown["promptTokens"] == {"mean": "100.00", "p50": "100.00", "p90": "100.00", "p99": "100.00"}
    out = shown["outputTokens"]
    assert float(out["mean"]) == pytest.approx(64.0, rel=0.02)
    assert float(out["p50"]) < float(out["mean"]) < float(out["p90"]) < float(out["p99"])
    # Nothing read: nothing shown (the tail model's defaults apply).
    assert st.workload_json(Workload()) is None
    assert "promptTokens" not in (st.workload_json(Workload(burstiness=Burstiness((30.0,), (3.0,)))) or {})
