"""The simulator stepped decision by decision, and slowed nodes (hand-computed with the fake replica)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.cluster import SlowedServer
from variant_autoscaler.sim.observe import Action, Observation
from variant_autoscaler.sim.policies import Policy, StaticPolicy
from variant_autoscaler.sim.scenario import Failure
from variant_autoscaler.sim.simulator import DROP_NONE, Simulation, simulate
from vatesting.sim import FakeServer, fake_factory, one_model


class Scripted(Policy):
    def __init__(self, plan: Mapping[float, Mapping[str, int]], interval: float = 5.0) -> None:
        self.name = "scripted"
        self.interval_s = interval
        self.plan = plan

    def decide(self, obs: Observation) -> Mapping[str, Action]:
        return {v: Action(n) for v, n in self.plan.get(obs.now, {}).items()}


def test_stepping_by_hand_gives_the_same_run_as_run() -> None:
    times = [float(t) for t in np.linspace(0.5, 55.0, 40)]
    sc = one_model(times, replicas=1, duration=60.0, startup=4.0)
    plan = {10.0: {"v": 3}, 30.0: {"v": 1}}
    whole = simulate(sc, Scripted(plan), server_factory=fake_factory(slots=2, ttft=0.3, itl=0.05))
    policy = Scripted(plan)
    sim = Simulation(sc, policy, fake_factory(slots=2, ttft=0.3, itl=0.05))
    sim.begin()
    seen = []
    while sim.next_decision():
        obs = sim.observe()
        seen.append(obs.now)
        sim.apply(policy.decide(obs))
    stepped = sim.finish()
    assert seen == [5.0 * k for k in range(1, 12)]
    for name in ("ttft_s", "itl_s", "dropped", "variant_idx"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(stepped, name))
    assert whole.cost == stepped.cost
    assert whole.series == stepped.series
    assert (whole.decisions, whole.events) == (stepped.decisions, stepped.events)


def test_a_simulation_steps_once() -> None:
    sim = Simulation(one_model([1.0]), StaticPolicy({"v": 1}), fake_factory())
    with pytest.raises(RuntimeError):
        sim.next_decision()
    sim.begin()
    with pytest.raises(RuntimeError):
        sim.begin()


def test_a_slowed_node_stretches_its_replicas_latencies_until_it_recovers() -> None:
    # ttft 0.1 s, itl 0.01 s on a healthy node; the node runs twice slower from t=10 to t=20.
    slow = (Failure(at_s=10.0, pool="pool", count=1, recover_s=20.0, slowdown=2.0),)
    sc = one_model([1.0, 9.95, 12.0, 25.0], replicas=1, duration=60.0, failures=slow)
    r = simulate(sc, StaticPolicy({"v": 1}), server_factory=fake_factory(slots=4, ttft=0.1, itl=0.01))
    assert r.dropped.tolist() == [DROP_NONE] * 4
    # Request 1 started at 9.95: 0.05 s of its prefill at full speed, the other 0.05 s at half speed
    # (0.1 s), so its first token comes 0.15 s after arrival and its 10 inter-token gaps take 0.02 s each.
    assert r.ttft_s.tolist() == pytest.approx([0.1, 0.15, 0.2, 0.1])
    assert r.itl_s.tolist() == pytest.approx([0.01, 0.02, 0.02, 0.01])


def test_a_replica_started_on_a_slowed_node_is_slow_from_the_start() -> None:
    slow = (Failure(at_s=1.0, pool="pool", count=1, slowdown=3.0),)
    sc = one_model([30.0], replicas=0, duration=60.0, startup=5.0, failures=slow)
    r = simulate(sc, Scripted({5.0: {"v": 1}}), server_factory=fake_factory(ttft=0.1, itl=0.01))
    assert r.ttft_s[0] == pytest.approx(0.3)
    assert r.itl_s[0] == pytest.approx(0.03)


def test_a_slowed_server_times_its_clients_out_on_the_clusters_clock() -> None:
    inner = FakeServer(slots=0, ttft=0.1, itl=0.01)  # no lane: every request waits
    server = SlowedServer(inner, now=0.0, factor=4.0)
    arrival = [0.0, 50.0]
    assert server.submit(0, 0.0, 10, 5) and server.submit(1, 50.0, 10, 5)
    # At t=100 the inner clock reads 25; request 0 waited 100 s (>= 90) on the cluster's clock.
    assert server.expire(100.0, arrival, 90.0) == [0]
    assert server.in_flight() == [1]
    assert server.num_waiting == 1


def test_a_slowdown_must_be_a_factor_above_one() -> None:
    with pytest.raises(ConfigError, match="slowdown"):
        Failure(at_s=1.0, pool="pool", slowdown=1.0)
