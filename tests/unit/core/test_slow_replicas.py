"""Pods slower than their peers (core/slow_replicas.py), and how learning reports them."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

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

TRUTH = ServiceParms(alpha=10.0, beta=0.5, gamma=30.0, delta=0.02)
START = datetime(2026, 1, 1, tzinfo=UTC)


def _pod(pod: str, running: float, per_second: float) -> PodWindow:
    """A pod's window: the requests it held on average, the requests it took per second."""
    return PodWindow("ns", pod, "m", 60.0, 60.0, 30.0, 2000.0, 50.0, per_second * 60.0, 200.0, running)


def test_a_pod_whose_requests_spend_longer_than_on_its_peers_is_found() -> None:
    # Three pods taking 1 request/s each: two hold 10 on average (10 s in service), one 16 (16 s).
    verdict = slow_replicas([_pod("p-0", 10.0, 1.0), _pod("p-1", 10.5, 1.0), _pod("p-2", 16.0, 1.0)])
    assert verdict.judged == {"p-0", "p-1", "p-2"}
    ((slow,),) = (verdict.slow,)
    assert slow.pod == "p-2" and slow.ratio == pytest.approx(16.0 / 10.25)
    assert slow.seconds == pytest.approx(16.0) and slow.peers_seconds == pytest.approx(10.25)
    assert "1.56× as long in service" in slow.describe() and "node may be degraded" in slow.describe()
    # Two pods are enough: each is compared with the other. A least-loaded router sends the slow pod
    # fewer requests instead: it still stands out (the same requests held, fewer taken).
    assert [s.pod for s in slow_replicas([_pod("p-0", 10.0, 1.0), _pod("p-2", 16.0, 1.0)]).slow] == ["p-2"]
    assert [s.pod for s in slow_replicas([_pod("p-0", 10.0, 1.0), _pod("p-2", 10.0, 0.6)]).slow] == ["p-2"]


def test_a_busier_pod_under_the_ratio_or_alone_is_not_slow() -> None:
    # Twice the others' requests, held longer because its batch is larger: busier, not slower.
    assert slow_replicas([_pod("p-0", 10.0, 1.0), _pod("p-1", 10.0, 1.0), _pod("p-2", 30.0, 2.0)]).slow == ()
    below = [_pod("p-0", 10.0, 1.0), _pod("p-1", 10.0, 1.0), _pod("p-2", 10.0 * SLOW_RATIO * 0.97, 1.0)]
    assert slow_replicas(below).slow == ()
    assert slow_replicas([_pod("p-0", 30.0, 1.0)]).judged == frozenset()
    assert slow_replicas([_pod("p-0", 10.0, 1.0), _pod("p-1", 30.0, 0.1)]).judged == frozenset()  # too few


def _learn(now: datetime, pods: dict[str, float], stored: object) -> LearningResult:
    """One cycle's learning with each pod's window: the requests it held, at 1 request/s each."""
    return learn(
        LearningInputs(
            now=now,
            accelerator="A100",
            mode=ProfileMode.AUTO,
            hand=TRUTH,
            windows=[replace(_pod(pod, running, 1.0), end=now.timestamp()) for pod, running in pods.items()],
            collected=True,
            max_batch=16,
            last_scale=None,
            stored=stored if isinstance(stored, dict) else None,
        )
    )


def test_learning_lists_a_slow_pod_and_says_so_once_then_when_it_recovers() -> None:
    healthy = {"p-0": 10.0, "p-1": 10.5, "p-2": 9.5}
    slowed = {**healthy, "p-2": 18.0}  # its requests spend 1.8 times as long in service
    stored: object = None
    reasons: list[list[str]] = []
    listed: list[list[str]] = []
    for minute, pods in enumerate((healthy, slowed, slowed, healthy)):
        result = _learn(START + timedelta(minutes=minute), pods, stored)
        stored = result.status
        reasons.append([e.reason for e in result.events if "Slow" in e.reason])
        listed.append([e["pod"] for e in result.status["slowReplicas"] or ()])
        LearnedProfileStatus.model_validate({k: v for k, v in result.status.items() if v is not None})
    assert reasons == [[], [REASON_SLOW_REPLICA], [], [REASON_SLOW_REPLICA_GONE]]
    assert listed == [[], ["p-2"], ["p-2"], []]
    warning = _learn(START + timedelta(minutes=9), slowed, None).events
    assert [e.type for e in warning if e.reason == REASON_SLOW_REPLICA] == ["Warning"]


def test_a_slow_pod_not_judged_this_cycle_stays_listed_for_ten_minutes() -> None:
    first = _learn(START, {"p-0": 10.0, "p-1": 10.5, "p-2": 18.0}, None)
    idle = {"p-0": 10.0, "p-1": 10.5}  # p-2 finished nothing (or is gone)
    later = _learn(START + timedelta(minutes=9), idle, first.status)
    assert [e["pod"] for e in later.status["slowReplicas"]] == ["p-2"] and not later.events
    gone = _learn(START + timedelta(minutes=11), idle, later.status)
    assert gone.status["slowReplicas"] is None  # dropped without an Event: not judged again
    assert not [e for e in gone.events if "Slow" in e.reason]


def test_a_listed_pod_stays_listed_until_it_is_back_in_line() -> None:
    # Found at 1.8; then 1.3 (under the ratio to be found, over the one to be back in line), then busier
    # than its peers with requests held long (not judged slow, not back): listed, no Event; then 1.1.
    stored: object = None
    reasons, listed = [], []
    for minute, pods in enumerate(
        (
            {"p-0": 10.0, "p-1": 10.5, "p-2": 18.0},
            {"p-0": 10.0, "p-1": 10.5, "p-2": 13.3},
            {"p-0": 10.0, "p-1": 10.5, "p-2": 30.0},
            {"p-0": 10.0, "p-1": 10.5, "p-2": 11.3},
        )
    ):
        now = START + timedelta(minutes=minute)
        busier = minute == 2
        windows = [
            replace(_pod(pod, running, 2.0 if busier and pod == "p-2" else 1.0), end=now.timestamp())
            for pod, running in pods.items()
        ]
        inputs = LearningInputs(
            now=now, accelerator="A100", mode=ProfileMode.AUTO, hand=TRUTH, windows=windows,
            collected=True, max_batch=16, last_scale=None,
            stored=stored if isinstance(stored, dict) else None,
        )  # fmt: skip
        result = learn(inputs)
        stored = result.status
        reasons.append([e.reason for e in result.events if "Slow" in e.reason])
        listed.append([(e["pod"], e["ratio"]) for e in result.status["slowReplicas"] or ()])
    assert reasons == [[REASON_SLOW_REPLICA], [], [], [REASON_SLOW_REPLICA_GONE]]
    assert [[pod for pod, _ in row] for row in listed] == [["p-2"], ["p-2"], ["p-2"], []]
    assert listed[1][0][1] == "1.30"  # the newest figures of a pod still out of line
