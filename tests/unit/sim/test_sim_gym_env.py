"""The Gymnasium environment: the API checker, determinism, rewards that add up to the run's score,
simulator policies acting in it exactly as in ``simulate``, episodes with trace windows and faults."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.episodes import EpisodeConfig, draw_episode, trace_window
from variant_autoscaler.sim.features import FEATURES, feature_index
from variant_autoscaler.sim.gym_env import ENV_ID, PolicyAgent, VariantAutoscalerEnv
from variant_autoscaler.sim.report import classify, summarize
from variant_autoscaler.sim.runner import run_policies
from variant_autoscaler.sim.scenario import Failure, Scenario
from variant_autoscaler.sim.scenarios import load_bundled
from variant_autoscaler.sim.scoring import RewardConfig, episode_return, recovery_times
from variant_autoscaler.sim.traffic import Constant, GeneratedTraffic, read_trace

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "azure-conv-5min.csv"
SHORT = EpisodeConfig(
    duration_s=(420.0, 600.0), rate_scale=(0.2, 0.4), shapes={"constant": 1.0, "flash": 1.0}
)


def small_failure_scenario() -> Scenario:
    """node-failure, 10 minutes at a quarter of the load, the A100 node lost at 4 minutes."""
    sc = load_bundled("node-failure")
    model = sc.models[0]
    assert isinstance(model.traffic, GeneratedTraffic)
    traffic = dataclasses.replace(model.traffic, rate=Constant(5.0))
    return dataclasses.replace(
        sc,
        duration_s=600.0,
        models=(dataclasses.replace(model, traffic=traffic),),
        failures=(Failure(at_s=240.0, pool="a100-pool", count=1),),
    )


def run_episode(env: gym.Env, agent: PolicyAgent, scenario: Scenario) -> tuple[float, np.ndarray]:
    obs, info = agent.reset(env, seed=0, scenario=scenario)
    total, tiers = 0.0, np.zeros(4, dtype=np.int64)
    while True:
        obs, reward, terminated, truncated, info = env.step(agent.act(env, info))
        assert obs in env.observation_space
        total += reward
        tiers += np.asarray(info["step"]["tiers"])
        if terminated or truncated:
            return total, tiers


@pytest.mark.parametrize(("mode", "batch"), [("delta", None), ("target", (0.5, 1.0))])
def test_the_environment_passes_gymnasiums_checker(mode: str, batch: tuple[float, ...] | None) -> None:
    env = VariantAutoscalerEnv("node-failure", episodes=SHORT, action_mode=mode, batch_choices=batch)  # type: ignore[arg-type]
    check_env(env, skip_render_check=True)
    env.close()


def test_it_is_registered_and_made_by_id() -> None:
    env = gym.make(ENV_ID, scenario="flash-crowd", episodes=SHORT)
    obs, _ = env.reset(seed=3)
    assert obs["variants"].shape == (1, len(FEATURES))
    assert obs["inventory"].shape == (1, 2)
    env.close()


def test_episodes_are_deterministic_for_a_seed() -> None:
    def trajectory(seed: int) -> list[tuple[float, ...]]:
        env = VariantAutoscalerEnv("scarce", episodes=SHORT)
        obs, _ = env.reset(seed=seed)
        out = [tuple(obs["variants"].ravel())]
        for k in range(4):
            obs, reward, *_ = env.step(np.full(env.action_space.shape, k % 3 + env.max_delta - 1))
            out.append((reward, *obs["variants"].ravel()))
        return out

    assert trajectory(11) == trajectory(11)
    assert trajectory(11) != trajectory(12)


@pytest.mark.parametrize("policy", ["ours", "hpa-kv", "oracle"])
def test_a_simulator_policy_acts_in_the_environment_as_in_simulate(policy: str) -> None:
    sc = small_failure_scenario()
    env = VariantAutoscalerEnv(sc, action_mode="target", max_replicas=64)
    total, tiers = run_episode(env, PolicyAgent(policy), sc)
    in_env = env.result
    assert in_env is not None
    alone = run_policies(sc, [policy])[0]
    a, b = summarize(in_env), summarize(alone)
    a.pop("sim"), b.pop("sim")
    assert a == b
    # The rewards add up to the run's return, the steps' tiers to the run's.
    assert total == pytest.approx(episode_return(alone, RewardConfig()), rel=1e-9, abs=1e-6)
    assert tiers.tolist() == np.bincount(classify(alone), minlength=4).tolist()


def test_delta_actions_change_replicas_within_bounds() -> None:
    env = VariantAutoscalerEnv("node-failure", episodes=SHORT, max_delta=2, max_replicas=8)
    obs, _ = env.reset(seed=1)
    desired = feature_index("desired")
    before = obs["variants"][:, desired].copy()
    obs, *_ = env.step(np.array([4, 0]))  # +2 on A100, -2 on H100 (already at 0)
    assert obs["variants"][:, desired].tolist() == [min(8, before[0] + 2), max(0, before[1] - 2)]
    # From 8 (the cap) to 5 is clipped to -2; the H100 variant, left out, keeps its replicas.
    assert env.action_for({"llama-8b-a100": 5}).tolist() == [0, 2]


def test_batch_choices_set_the_batch_of_new_pods() -> None:
    env = VariantAutoscalerEnv("flash-crowd", episodes=SHORT, action_mode="target", batch_choices=(0.25, 1.0))
    env.reset(seed=2)
    assert env.action_space.shape == (1, 2)
    env.step(np.array([[3, 0]]))
    assert env.sim is not None and env.sim.var_batch == [16]  # a quarter of 64


def test_episodes_draw_traffic_shapes_trace_windows_and_faults() -> None:
    trace = read_trace(TRACE)
    config = EpisodeConfig(
        duration_s=(600.0, 600.0),
        shapes={"trace": 1.0},
        trace=trace,
        trace_range_s=(0.0, 240.0),
        p_node_lost=1.0,
        p_node_slowed=1.0,
    )
    template = load_bundled("node-failure")
    a = draw_episode(template, np.random.default_rng(5), config)
    b = draw_episode(template, np.random.default_rng(5), config)
    assert (a.seed, a.failures) == (b.seed, b.failures)
    arr_a = a.models[0].traffic.arrivals(np.random.default_rng(0), a.duration_s)
    arr_b = b.models[0].traffic.arrivals(np.random.default_rng(0), b.duration_s)
    np.testing.assert_array_equal(arr_a.times, arr_b.times)
    assert a.duration_s == 600.0 and [v.name for v in a.variants] == [v.name for v in template.variants]
    lost, slowed = a.failures
    assert lost.slowdown is None and slowed.slowdown is not None and 1.5 <= slowed.slowdown <= 3.0
    assert 120.0 <= lost.at_s <= 360.0
    assert "trace window" in a.models[0].traffic.source  # type: ignore[union-attr]


def test_a_trace_window_is_replayed_at_the_rate_asked_for() -> None:
    trace = read_trace(TRACE)
    arr = trace_window(
        trace, np.random.default_rng(0), start_s=60.0, length_s=120.0, duration_s=600.0, rate=12.0
    )
    assert arr.times[0] >= 0.0 and arr.times[-1] < 600.0
    assert np.all(np.diff(arr.times) >= 0)
    assert len(arr) / 600.0 == pytest.approx(12.0, rel=0.1)
    assert set(arr.input_tokens.tolist()) <= set(trace.input_tokens.tolist())


def test_recovery_is_measured_from_each_fault() -> None:
    sc = small_failure_scenario()
    result = run_policies(sc, ["ours"])[0]
    (rec,) = recovery_times(result)
    assert rec is None or 0.0 <= rec <= sc.duration_s - sc.failures[0].at_s


def test_a_scenario_from_another_cluster_is_refused() -> None:
    env = VariantAutoscalerEnv("node-failure", episodes=SHORT)
    with pytest.raises(ConfigError, match="variants"):
        env.reset(seed=0, options={"scenario": load_bundled("flash-crowd")})


def test_reward_weights_are_checked() -> None:
    with pytest.raises(ConfigError):
        RewardConfig(tier_values=(1.0, 0.5))  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        RewardConfig(cost_weight=-1.0)


def test_gymnasium_stays_out_of_the_operators_image() -> None:
    root = Path(__file__).resolve().parents[3]
    constraints = (root / "hack" / "images" / "constraints.txt").read_text(encoding="utf-8")
    assert "gymnasium" not in constraints.lower()
