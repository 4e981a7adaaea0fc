"""Each policy's decision function on small inputs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.observe import Observation, PolicyContext, VariantView
from variant_autoscaler.sim.policies import HpaSettings, StaticPolicy, ThresholdPolicy
from vatesting.sim import one_model


def view(**kw: object) -> VariantView:
    base = VariantView(
        name="v",
        model="m",
        accelerator="A100",
        desired=2,
        ready=2,
        starting=0,
        pending=0,
        max_batch=8,
        success_rpm=0.0,
        arrival_rpm=0.0,
        avg_input_tokens=None,
        avg_output_tokens=None,
        avg_ttft_ms=None,
        avg_itl_ms=None,
        waiting=0.0,
        waiting_growth=0.0,
        running=0.0,
        kv_usage=0.0,
        metrics_ok=True,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def obs(now: float, **kw: object) -> Observation:
    return Observation(now=now, variants={"v": view(**kw)}, capacity={"A100": 8}, allocated={"A100": 2})


def test_hpa_recommendation_and_tolerance() -> None:
    hpa = ThresholdPolicy(HpaSettings(metric="waiting", threshold=5.0))
    assert hpa.recommend(current=2, usage=10.0) == 2  # exactly on target
    assert hpa.recommend(current=2, usage=10.9) == 2  # ratio 1.09: within the 10 % tolerance
    assert hpa.recommend(current=2, usage=11.5) == 3  # ceil(11.5 / 5)
    assert hpa.recommend(current=2, usage=0.0) == 0
    assert hpa.recommend(current=0, usage=7.0) == 2


def test_hpa_scale_down_waits_for_the_stabilisation_window() -> None:
    hpa = ThresholdPolicy(HpaSettings(metric="waiting", threshold=5.0, scale_down_stabilization_s=300.0))
    assert hpa.normalize(name="v", now=0.0, current=5, recommendation=5) == 5
    assert hpa.normalize(name="v", now=15.0, current=5, recommendation=2) == 5  # the 5 at t=0 still counts
    assert hpa.normalize(name="v", now=299.0, current=5, recommendation=2) == 5
    # At t=301 the recommendation of t=0 has left the window; the highest left is 2.
    assert hpa.normalize(name="v", now=301.0, current=5, recommendation=2) == 2


def test_hpa_rate_limits_and_bounds() -> None:
    hpa = ThresholdPolicy(HpaSettings(threshold=1.0, scale_down_stabilization_s=0.0, max_replicas=50))
    # Scale-up per period: max(current + 4, 2 × current).
    assert hpa.normalize(name="a", now=0.0, current=2, recommendation=20) == 6
    assert hpa.normalize(name="b", now=0.0, current=10, recommendation=40) == 20
    # Scale-down by 100 % is allowed, but never below min_replicas.
    assert hpa.normalize(name="c", now=0.0, current=10, recommendation=0) == 1
    capped = ThresholdPolicy(HpaSettings(threshold=1.0, max_replicas=3))
    assert capped.normalize(name="d", now=0.0, current=2, recommendation=9) == 3


def test_hpa_scale_up_stabilisation_takes_the_lowest_recent() -> None:
    hpa = ThresholdPolicy(HpaSettings(threshold=1.0, scale_up_stabilization_s=60.0))
    assert hpa.normalize(name="v", now=0.0, current=2, recommendation=3) == 3
    assert hpa.normalize(name="v", now=30.0, current=3, recommendation=6) == 3  # 3 was recommended 30 s ago
    assert hpa.normalize(name="v", now=61.0, current=3, recommendation=6) == 6


def test_hpa_decides_from_the_waiting_queue() -> None:
    hpa = ThresholdPolicy(HpaSettings(metric="waiting", threshold=5.0))
    assert hpa.decide(obs(15.0, waiting=10.0)) == {}  # on target
    actions = hpa.decide(obs(30.0, waiting=30.0))
    assert actions["v"].replicas == 6  # ceil(30 / 5) within the rate limit (2 + 4)
    assert hpa.decide(obs(45.0, waiting=99.0, metrics_ok=False)) == {}  # no metric, no change


def test_hpa_decides_from_kv_usage() -> None:
    hpa = ThresholdPolicy(HpaSettings(metric="kv", threshold=0.5))
    # Two ready pods at 90 % KV: the sum 1.8 over a 0.5 target asks for 4.
    assert hpa.decide(obs(15.0, kv_usage=0.9))["v"].replicas == 4
    assert hpa.name == "hpa-kv"


def test_hpa_settings_validation() -> None:
    with pytest.raises(ConfigError):
        HpaSettings(threshold=0.0)
    with pytest.raises(ConfigError):
        HpaSettings(min_replicas=5, max_replicas=2)


def test_static_policy() -> None:
    sc = one_model([], replicas=1)
    policy = StaticPolicy({"v": 4})
    assert policy.start(PolicyContext(scenario=sc, arrivals={})) == {"v": 4}
    assert policy.decide(obs(10.0)) == {}
    with pytest.raises(ConfigError, match="unknown variant"):
        StaticPolicy({"x": 1}).start(PolicyContext(scenario=sc, arrivals={}))
    with pytest.raises(ConfigError):
        StaticPolicy({"v": -1})
