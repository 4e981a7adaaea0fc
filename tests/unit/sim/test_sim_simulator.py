"""The event loop on tiny deterministic cases whose results are computed by hand."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pytest

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.observe import Action, Observation, PolicyContext
from variant_autoscaler.sim.policies import Policy, StaticPolicy
from variant_autoscaler.sim.scenario import Failure, Profile, SimSettings
from variant_autoscaler.sim.simulator import (
    DROP_KILLED,
    DROP_NONE,
    DROP_TIMEOUT,
    Simulation,
    simulate,
)
from vatesting.sim import PROFILE, FakeServer, fake_factory, one_model


class Scripted(Policy):
    """Sets replicas at given decision times; records what it observed."""

    def __init__(self, plan: Mapping[float, Mapping[str, int]], interval: float = 5.0) -> None:
        self.name = "scripted"
        self.interval_s = interval
        self.plan = plan
        self.seen: list[Observation] = []

    def decide(self, obs: Observation) -> Mapping[str, Action]:
        self.seen.append(obs)
        return {v: Action(n) for v, n in self.plan.get(obs.now, {}).items()}


def test_one_request_on_a_warm_replica() -> None:
    sc = one_model([1.0], replicas=1, duration=100.0, cost=36.0)
    r = simulate(sc, StaticPolicy({"v": 1}), server_factory=fake_factory(ttft=0.1, itl=0.01))
    assert r.dropped.tolist() == [DROP_NONE]
    assert r.ttft_s[0] == pytest.approx(0.1)
    assert r.itl_s[0] == pytest.approx(0.01)  # (finish - first) / (11 - 1)
    assert r.variant_idx.tolist() == [0]
    # One GPU held for the whole 100 s at 36 per hour: 1.0.
    assert r.gpu_seconds["v"] == pytest.approx(100.0)
    assert r.cost["v"] == pytest.approx(1.0)


def test_requests_wait_at_the_gateway_for_the_start_up_delay() -> None:
    # No replica at first; the policy asks for one at t=5; it is ready 10 s later (t=15).
    sc = one_model([1.0, 16.0], replicas=0, duration=100.0, startup=10.0, cost=36.0)
    r = simulate(sc, Scripted({5.0: {"v": 1}}), server_factory=fake_factory(ttft=0.1, itl=0.01))
    assert r.dropped.tolist() == [DROP_NONE, DROP_NONE]
    assert r.ttft_s[0] == pytest.approx(15.0 - 1.0 + 0.1)
    assert r.ttft_s[1] == pytest.approx(0.1)
    # The GPU is held from scheduling (t=5), start-up included: 95 s.
    assert r.gpu_seconds["v"] == pytest.approx(95.0)
    assert r.cost["v"] == pytest.approx(95.0 * 36.0 / 3600.0)
    assert r.scale_ups["v"] == 1 and r.scale_downs["v"] == 0


def test_a_client_gives_up_after_its_timeout() -> None:
    settings = SimSettings(scrape_interval_s=5.0, rate_window_s=20.0, request_timeout_s=8.0)
    sc = one_model([1.0, 30.0], replicas=0, duration=100.0, startup=10.0, settings=settings)
    r = simulate(sc, Scripted({5.0: {"v": 1}}), server_factory=fake_factory())
    # Request 0 would only be served at t=15, 14 s after it arrived: dropped. Request 1 is served.
    assert r.dropped.tolist() == [DROP_TIMEOUT, DROP_NONE]
    assert math.isnan(r.ttft_s[0])


def test_least_loaded_routing_alternates_then_queues() -> None:
    # Two replicas with one lane each; three requests at once, each served for 0.1 + 10 * 1 s.
    sc = one_model([0.0, 0.0, 0.0], replicas=2, duration=60.0)
    r = simulate(sc, StaticPolicy({"v": 2}), server_factory=fake_factory(slots=1, ttft=0.1, itl=1.0))
    assert r.ttft_s[0] == pytest.approx(0.1)
    assert r.ttft_s[1] == pytest.approx(0.1)
    # The third waits for the first replica's request (finishes at 10.1), then starts.
    assert r.ttft_s[2] == pytest.approx(10.1 + 0.1)


class Recording(FakeServer):
    def __init__(self) -> None:
        super().__init__(8, 0.1, 0.01)
        self.rids: list[int] = []

    def submit(self, rid: int, now: float, input_tokens: int, output_tokens: int) -> bool:
        self.rids.append(rid)
        return super().submit(rid, now, input_tokens, output_tokens)


def test_round_robin_routing() -> None:
    settings = SimSettings(scrape_interval_s=5.0, rate_window_s=20.0, routing="round-robin")
    sc = one_model([0.0, 0.5, 1.0, 1.5, 2.0], replicas=2, duration=30.0, settings=settings)
    servers: list[Recording] = []

    def make(profile: Profile, max_batch: int, seed: int) -> Recording:
        servers.append(Recording())
        return servers[-1]

    r = simulate(sc, StaticPolicy({"v": 2}), server_factory=make)
    assert r.dropped.tolist() == [DROP_NONE] * 5
    # Alternating, although the first replica is idle again by the time of each arrival.
    assert [srv.rids for srv in servers] == [[0, 2, 4], [1, 3]]


def test_least_loaded_prefers_the_idle_replica() -> None:
    # A replica tick below the gaps between arrivals: the router sees each request finish in time.
    settings = SimSettings(scrape_interval_s=5.0, rate_window_s=20.0, replica_tick_s=0.1)
    sc = one_model([0.0, 0.5, 1.0, 1.5, 2.0], replicas=2, duration=30.0, settings=settings)
    servers: list[Recording] = []

    def make(profile: Profile, max_batch: int, seed: int) -> Recording:
        servers.append(Recording())
        return servers[-1]

    simulate(sc, StaticPolicy({"v": 2}), server_factory=make)
    # Each request finishes 0.2 s after it starts, before the next arrives: all go to the first.
    assert [srv.rids for srv in servers] == [[0, 1, 2, 3, 4], []]


def test_node_failure_kills_requests_and_the_pod_cannot_be_rescheduled() -> None:
    # Two nodes of one GPU; one replica each; node 0 fails at t=5 while serving a long request.
    fail = (Failure(at_s=5.0, pool="pool", count=1),)
    sc = one_model([1.0, 1.0], replicas=2, duration=100.0, nodes=2, gpus=1, failures=fail, cost=36.0)
    r = simulate(sc, StaticPolicy({"v": 2}), server_factory=fake_factory(slots=1, ttft=0.1, itl=1.0))
    # Request 0 ran on node 0 (first fit) and died with it; request 1 finished on node 1.
    assert r.dropped.tolist() == [DROP_KILLED, DROP_NONE]
    # GPU time: node 0's pod 5 s, node 1's pod 100 s; the replacement stays pending (no free GPU).
    assert r.gpu_seconds["v"] == pytest.approx(105.0)


def test_failed_node_recovers_and_the_replacement_starts() -> None:
    fail = (Failure(at_s=5.0, pool="pool", count=1, recover_s=20.0),)
    sc = one_model([], replicas=2, duration=100.0, nodes=2, gpus=1, failures=fail, startup=10.0)
    policy = Scripted({})
    simulate(sc, policy, server_factory=fake_factory())
    ready = {obs.now: obs.variants["v"].ready for obs in policy.seen}
    pending = {obs.now: obs.variants["v"].pending for obs in policy.seen}
    starting = {obs.now: obs.variants["v"].starting for obs in policy.seen}
    assert ready[5.0] == 1 and pending[5.0] == 1  # the failure happens before the decision at t=5
    assert pending[15.0] == 1
    assert starting[20.0] == 1 and pending[20.0] == 0  # scheduled when the node is back
    assert ready[30.0] == 2  # and ready after its 10 s start-up


def test_scale_down_drains_in_flight_requests() -> None:
    # Two replicas; at t=5 the policy keeps one. The newest pod (1) serves a request until t=12.
    sc = one_model([0.0, 2.0], replicas=2, duration=60.0, cost=36.0)
    sim = Simulation(sc, Scripted({5.0: {"v": 1}}), fake_factory(slots=1, ttft=0.1, itl=1.0))
    r = sim.run()
    # Request 0 went to pod 0, request 1 (at t=2) to pod 1; both finish.
    assert r.dropped.tolist() == [DROP_NONE, DROP_NONE]
    assert r.ttft_s[1] == pytest.approx(0.1)
    assert r.scale_downs["v"] == 1
    # Pod 1 held its GPU until its request finished (2 + 0.1 + 10 = 12.1), noticed within one tick.
    assert 12.1 - 1e-9 <= r.gpu_seconds["v"] - 60.0 <= 12.1 + sc.settings.replica_tick_s + 1e-9


def test_drain_grace_expiry_kills_the_rest() -> None:
    settings = SimSettings(scrape_interval_s=5.0, rate_window_s=20.0, drain_grace_s=3.0)
    sc = one_model([0.0, 2.0], replicas=2, duration=60.0, settings=settings)
    r = simulate(sc, Scripted({5.0: {"v": 1}}), server_factory=fake_factory(slots=1, ttft=0.1, itl=1.0))
    # Pod 1 is deleted at t=5 with a request due at 12.1; the grace period ends at t=8.
    assert r.dropped.tolist() == [DROP_NONE, DROP_KILLED]
    assert r.gpu_seconds["v"] == pytest.approx(60.0 + 8.0)


def test_a_pod_draining_past_the_end_costs_nothing_after_it() -> None:
    # Both pods busy (one slot each) until 59.1 and 60.1; the newest is deleted at t=55 and drains
    # past the 60 s end.
    sc = one_model([49.0, 50.0], replicas=2, duration=60.0, cost=36.0)
    r = simulate(sc, Scripted({55.0: {"v": 1}}), server_factory=fake_factory(slots=1, ttft=0.1, itl=1.0))
    assert r.dropped.tolist() == [DROP_NONE, DROP_NONE]
    assert r.gpu_seconds["v"] == pytest.approx(120.0)  # two pods for the 60 s, nothing beyond


def test_policy_observes_scraped_rates() -> None:
    # One request per second from t=0.5 on; each takes 0.1 + 10 * 0.01 s.
    times = [0.5 + k for k in range(60)]
    settings = SimSettings(scrape_interval_s=5.0, rate_window_s=20.0)
    sc = one_model(times, replicas=1, duration=60.0, settings=settings)
    policy = Scripted({}, interval=30.0)
    simulate(sc, policy, server_factory=fake_factory(ttft=0.1, itl=0.01))
    view = policy.seen[0].variants["v"]
    assert policy.seen[0].now == 30.0
    assert view.metrics_ok
    # Scrapes at 10 and 30 bound the window: 20 completions in 20 s = 60 per minute.
    assert view.success_rpm == pytest.approx(60.0)
    assert view.arrival_rpm == pytest.approx(60.0)
    assert view.avg_input_tokens == pytest.approx(100.0)
    assert view.avg_output_tokens == pytest.approx(11.0)
    assert view.avg_ttft_ms == pytest.approx(100.0)
    assert view.avg_itl_ms == pytest.approx(10.0)
    assert view.ready == 1 and view.desired == 1
    assert policy.seen[0].capacity == {"A100": 8}
    assert policy.seen[0].allocated == {"A100": 1}
    # The burst guard's short window (half the rate window, 10 s): scrapes at 20 and 30, 10 completions.
    assert view.success_rpm_short == pytest.approx(60.0)
    assert view.waiting_growth_short == pytest.approx(0.0)


def test_the_short_window_is_not_read_where_it_spans_fewer_than_two_scrapes() -> None:
    times = [0.5 + k for k in range(60)]
    settings = SimSettings(scrape_interval_s=10.0, rate_window_s=30.0)  # a short window of 15 s
    sc = one_model(times, replicas=1, duration=60.0, settings=settings)
    policy = Scripted({}, interval=40.0)
    simulate(sc, policy, server_factory=fake_factory(ttft=0.1, itl=0.01))
    view = policy.seen[0].variants["v"]
    assert view.metrics_ok and view.success_rpm == pytest.approx(60.0)
    assert view.success_rpm_short is None and view.waiting_growth_short is None


def test_capacity_limits_replicas_and_pending_pods_cost_nothing() -> None:
    sc = one_model([], replicas=1, duration=100.0, nodes=1, gpus=2, cost=36.0)
    policy = Scripted({10.0: {"v": 5}})
    r = simulate(sc, policy, server_factory=fake_factory())
    last = policy.seen[-1].variants["v"]
    assert last.desired == 5 and last.pending == 3
    # One pod for 100 s, one scheduled at t=10 for 90 s.
    assert r.gpu_seconds["v"] == pytest.approx(190.0)


def test_unknown_variant_in_an_action_is_an_error() -> None:
    sc = one_model([], replicas=1, duration=20.0)
    with pytest.raises(ConfigError, match="unknown variant"):
        simulate(sc, Scripted({5.0: {"nope": 1}}), server_factory=fake_factory())


def test_oracle_style_policy_skips_start_up() -> None:
    class Instant(Scripted):
        ignores_startup = True

    sc = one_model([6.0], replicas=0, duration=30.0, startup=100.0)
    r = simulate(sc, Instant({5.0: {"v": 1}}), server_factory=fake_factory(ttft=0.1, itl=0.01))
    assert r.ttft_s[0] == pytest.approx(0.1)


def test_real_engine_single_request_matches_the_profile() -> None:
    # prefill(100 tokens, batch 1) = 10 + 0.01 * 100 = 11 ms; decode(1) = 10 + 0.1 = 10.1 ms.
    sc = one_model([1.0], replicas=1, duration=10.0, out=11)
    r = simulate(sc, StaticPolicy({"v": 1}))
    assert r.ttft_s[0] == pytest.approx(0.011)
    assert r.itl_s[0] == pytest.approx(0.0101)
    assert PROFILE.max_batch_size == 8


def test_runs_are_deterministic_with_the_real_engine() -> None:
    times = np.sort(np.random.default_rng(3).uniform(0, 50, size=200)).tolist()
    sc = one_model(times, replicas=2, duration=60.0)
    a = simulate(sc, StaticPolicy({"v": 2}))
    b = simulate(sc, StaticPolicy({"v": 2}))
    np.testing.assert_array_equal(a.ttft_s, b.ttft_s)
    np.testing.assert_array_equal(a.variant_idx, b.variant_idx)
    assert a.cost == b.cost


def test_policy_start_sets_initial_replicas() -> None:
    class Start(Scripted):
        def start(self, ctx: PolicyContext) -> Mapping[str, int] | None:
            assert set(ctx.arrivals) == {"m"}
            return {"v": 3}

    sc = one_model([], replicas=1, duration=20.0)
    policy = Start({})
    simulate(sc, policy, server_factory=fake_factory())
    assert policy.seen[0].variants["v"].ready == 3
