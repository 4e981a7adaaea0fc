"""Pods that decode slower than their peers (core/slow_replicas.py), and how learning reports them."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from variant_autoscaler.adapters.profile_metrics import windows_from_values
from variant_autoscaler.api.v1alpha1 import LearnedProfileStatus
from variant_autoscaler.core.estimator import PodWindow
from variant_autoscaler.core.learning import (
    REASON_SLOW_REPLICA,
    REASON_SLOW_REPLICA_GONE,
    LearningInputs,
    LearningResult,
    learn,
)
from variant_autoscaler.core.profile_choice import ProfileMode
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.core.slow_replicas import SLOW_RATIO, slow_replicas
from vatesting.profiles import parms, profile_window

TRUTH = parms(alpha=10.0, beta=0.5, gamma=30.0, delta=0.02)
START = datetime(2026, 1, 1, tzinfo=UTC)


def _slowed(truth: ServiceParms, factor: float) -> ServiceParms:
    return replace(truth, alpha=truth.alpha * factor, beta=truth.beta * factor)


def _windows(now: datetime, pods: dict[str, tuple[ServiceParms, float]]) -> list[PodWindow]:
    """One window per pod: (its server's parameters, the requests it ran on average)."""
    values: dict[str, dict[tuple[str, str, str], float]] = {}
    for pod, (truth, running) in pods.items():
        for name, value in profile_window(truth, running, max_batch=16).items():
            values.setdefault(name, {})[("ns", pod, "m")] = value
    return windows_from_values(values, now=now.timestamp(), window_seconds=60.0)


def test_a_pod_slower_than_its_peers_at_its_own_batch_is_found() -> None:
    pods = {"p-0": (TRUTH, 4.0), "p-1": (TRUTH, 12.0), "p-2": (_slowed(TRUTH, 1.6), 8.0)}
    verdict = slow_replicas(_windows(START, pods), TRUTH.alpha, TRUTH.beta, 16)
    assert verdict.judged == {"p-0", "p-1", "p-2"}
    ((slow,),) = (verdict.slow,)
    assert slow.pod == "p-2" and slow.ratio == pytest.approx(1.6, rel=0.02)
    assert "1.60× slower than its peers" in slow.describe() and "node may be degraded" in slow.describe()
    # Two pods are enough: each is compared with the other.
    two = {"p-0": (TRUTH, 4.0), "p-2": (_slowed(TRUTH, 1.6), 8.0)}
    assert [s.pod for s in slow_replicas(_windows(START, two), TRUTH.alpha, TRUTH.beta, 16).slow] == ["p-2"]


def test_peers_not_the_profile_are_the_reference() -> None:
    # A profile twice too fast makes every pod look slow against it, alike: none is reported.
    pods = {f"p-{i}": (TRUTH, running) for i, running in enumerate((3.0, 8.0, 13.0))}
    wrong = _slowed(TRUTH, 0.5)
    assert slow_replicas(_windows(START, pods), wrong.alpha, wrong.beta, 16).slow == ()
    # Just under the ratio is not slow; one pod alone, or no line, cannot be judged.
    pods["p-2"] = (_slowed(TRUTH, SLOW_RATIO * 0.95), 8.0)
    assert slow_replicas(_windows(START, pods), TRUTH.alpha, TRUTH.beta, 16).slow == ()
    alone = _windows(START, {"p-0": (_slowed(TRUTH, 3.0), 5.0)})
    assert slow_replicas(alone, TRUTH.alpha, TRUTH.beta, 16).judged == frozenset()
    assert slow_replicas(_windows(START, pods), None, None, 16).judged == frozenset()


def _learn(now: datetime, pods: dict[str, tuple[ServiceParms, float]], stored: object) -> LearningResult:
    return learn(
        LearningInputs(
            now=now,
            accelerator="A100",
            mode=ProfileMode.AUTO,
            hand=TRUTH,
            windows=_windows(now, pods),
            collected=True,
            max_batch=16,
            last_scale=None,
            stored=stored if isinstance(stored, dict) else None,
        )
    )


def test_learning_lists_a_slow_pod_and_says_so_once_then_when_it_recovers() -> None:
    healthy = {"p-0": (TRUTH, 4.0), "p-1": (TRUTH, 12.0), "p-2": (TRUTH, 8.0)}
    slowed = {**healthy, "p-2": (_slowed(TRUTH, 1.8), 8.0)}
    stored: object = None
    reasons: list[list[str]] = []
    listed: list[list[str]] = []
    for minute, pods in enumerate((healthy, slowed, slowed, healthy)):
        result = _learn(START + timedelta(minutes=minute), pods, stored)
        stored = result.status
        reasons.append([e.reason for e in result.events if "Slow" in e.reason])
        listed.append([e["pod"] for e in result.status["slowReplicas"] or ()])
        LearnedProfileStatus.model_validate(
            {k: v for k, v in result.status.items() if v is not None}
        )  # the CRD's shape
    assert reasons == [[], [REASON_SLOW_REPLICA], [], [REASON_SLOW_REPLICA_GONE]]
    assert listed == [[], ["p-2"], ["p-2"], []]
    warning = _learn(START + timedelta(minutes=9), slowed, None).events
    assert [e.type for e in warning if e.reason == REASON_SLOW_REPLICA] == ["Warning"]


def test_a_slow_pod_not_judged_this_cycle_stays_listed_for_ten_minutes() -> None:
    slowed = {"p-0": (TRUTH, 4.0), "p-1": (TRUTH, 12.0), "p-2": (_slowed(TRUTH, 1.8), 8.0)}
    first = _learn(START, slowed, None)
    idle = {"p-0": (TRUTH, 4.0), "p-1": (TRUTH, 12.0)}  # p-2 decoded nothing (or is gone)
    later = _learn(START + timedelta(minutes=9), idle, first.status)
    assert [e["pod"] for e in later.status["slowReplicas"]] == ["p-2"] and not later.events
    gone = _learn(START + timedelta(minutes=11), idle, later.status)
    assert gone.status["slowReplicas"] is None  # dropped without an Event: not judged again
    assert not [e for e in gone.events if "Slow" in e.reason]
