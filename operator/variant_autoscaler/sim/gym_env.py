"""A Gymnasium environment over the simulator: ``VariantAutoscaler-v0`` (docs/learning-env.md).

One episode is one simulated run of a scenario's cluster with randomised traffic and faults
(:mod:`variant_autoscaler.sim.episodes`); one step is one decision: the agent sets every variant's
replicas (a change, or a target count; optionally the batch size of new pods), the cluster runs to the
next decision time, and the reward is the tiered SLO score of the requests resolved meanwhile minus
``cost_weight`` × the cost accrued (:mod:`variant_autoscaler.sim.scoring`). The observation is
:mod:`variant_autoscaler.sim.features`' per-variant matrix and the free inventory.

Any simulator policy can act in it (:class:`PolicyAgent`: ``reset(options={"policy": ...})`` runs the
episode under that policy's start-up, interval and oracle privileges, and its decisions become actions),
and a policy trained here runs in ``simulate`` through :mod:`variant_autoscaler.sim.agent`.

Needs the ``rl`` extra (``pip install 'variant-autoscaler[rl]'``). Importing this module registers the id,
so ``gymnasium.make("variant_autoscaler.sim.gym_env:VariantAutoscaler-v0")`` works from anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.cluster import RunResult, scenario_arrivals
from variant_autoscaler.sim.config import load_scenario
from variant_autoscaler.sim.episodes import EpisodeConfig, draw_episode
from variant_autoscaler.sim.features import FEATURES, UNBOUNDED, Encoder, upper_bounds
from variant_autoscaler.sim.observe import Action, Observation
from variant_autoscaler.sim.policies import Policy
from variant_autoscaler.sim.replica import ServerFactory, engine_server
from variant_autoscaler.sim.report import summarize
from variant_autoscaler.sim.runner import make_policy
from variant_autoscaler.sim.scenario import Scenario
from variant_autoscaler.sim.scenarios import BUNDLED, load_bundled
from variant_autoscaler.sim.scoring import RewardConfig, StepScore, StepScorer, episode_return, recovery_times
from variant_autoscaler.sim.simulator import Simulation
from variant_autoscaler.sim.traffic import Arrivals

__all__ = ["ENV_ID", "PolicyAgent", "PolicyFactory", "VariantAutoscalerEnv", "episode_summary"]

ENV_ID = "VariantAutoscaler-v0"
ActionMode = Literal["delta", "target"]
PolicyFactory = Callable[[Scenario, Mapping[str, Arrivals]], Policy]
ObsType = dict[str, Any]  # "variants" and "inventory": float32 arrays


class _External(Policy):
    """The simulation's policy while the environment's caller decides: only its decision interval."""

    def __init__(self, interval_s: float) -> None:
        self.name = "env"
        self.interval_s = interval_s

    def decide(self, obs: Observation) -> Mapping[str, Action]:  # pragma: no cover - never called
        raise RuntimeError("the environment's caller decides")


def _template(scenario: Scenario | str) -> Scenario:
    if isinstance(scenario, Scenario):
        return scenario
    if scenario in BUNDLED:
        return load_bundled(scenario)
    return load_scenario(Path(scenario))


def episode_summary(result: RunResult, reward: RewardConfig) -> dict[str, Any]:
    """The headline figures of one episode: SLO tiers, cost, return, recovery from each fault."""
    s = summarize(result)
    return {
        "scenario": result.scenario.name,
        "seed": result.scenario.seed,
        "duration_s": result.scenario.duration_s,
        "requests": s["requests"],
        "attainment": s["attainment"],
        "tiers": s["tiers"],
        "cost": s["cost"],
        "return": episode_return(result, reward),
        "faults": [
            {"at_s": f.at_s, "pool": f.pool, "slowdown": f.slowdown, "recover_s": f.recover_s}
            for f in result.scenario.failures
        ],
        "recovery_s": recovery_times(result),
        "decisions": result.decisions,
    }


class VariantAutoscalerEnv(gym.Env[ObsType, npt.NDArray[np.int64]]):
    """The cluster of ``scenario`` (a :class:`Scenario`, a bundled name or a scenario file) as an
    environment. See the module doc and docs/learning-env.md for the spaces and the reward.

    ``action_mode``: ``"delta"`` (per variant, a change of ``-max_delta..max_delta`` replicas) or
    ``"target"`` (per variant, a replica count ``0..max_replicas``). ``batch_choices``: fractions of the
    profile's maximum batch size; when given, each variant's action is a pair (replicas, batch choice)
    and new pods start with that batch.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (Gymnasium's class attribute)

    def __init__(
        self,
        scenario: Scenario | str = "node-failure",
        *,
        episodes: EpisodeConfig | None = None,
        interval_s: float = 60.0,
        action_mode: ActionMode = "delta",
        max_delta: int = 4,
        max_replicas: int = 32,
        batch_choices: Sequence[float] | None = None,
        reward: RewardConfig | None = None,
        server_factory: ServerFactory | None = None,
    ) -> None:
        self.template = _template(scenario)
        self.episodes = episodes if episodes is not None else EpisodeConfig(shapes=_no_trace())
        if not interval_s > 0 or not math.isfinite(interval_s):
            raise ConfigError("interval_s must be a finite number > 0")
        if action_mode not in ("delta", "target"):
            raise ConfigError("action_mode must be delta or target")
        if max_delta < 1 or max_replicas < 1:
            raise ConfigError("max_delta and max_replicas must be >= 1")
        self.interval_s = interval_s
        self.action_mode: ActionMode = action_mode
        self.max_delta = max_delta
        self.max_replicas = max_replicas
        self.batch_choices = tuple(batch_choices) if batch_choices else ()
        if any(not 0 < b <= 1 for b in self.batch_choices):
            raise ConfigError("batch choices are fractions of the maximum batch size, in (0, 1]")
        self.reward_config = reward or RewardConfig()
        self.server_factory = server_factory
        sc = self.template
        self.variant_names = [v.name for v in sc.variants]
        self._caps = [
            max_replicas if v.max_replicas is None else min(v.max_replicas, max_replicas) for v in sc.variants
        ]
        n_var, n_acc = len(sc.variants), len(sc.accelerators)
        high = np.tile(upper_bounds(max_replicas), (n_var, 1))
        self.observation_space = spaces.Dict(
            {
                "variants": spaces.Box(0.0, high, shape=(n_var, len(FEATURES)), dtype=np.float32),
                "inventory": spaces.Box(0.0, UNBOUNDED, shape=(n_acc, 2), dtype=np.float32),
            }
        )
        per_var = (
            np.full(n_var, 2 * max_delta + 1, dtype=np.int64)
            if action_mode == "delta"
            else np.asarray([c + 1 for c in self._caps], dtype=np.int64)
        )
        if self.batch_choices:
            nvec = np.stack([per_var, np.full(n_var, len(self.batch_choices), dtype=np.int64)], axis=1)
        else:
            nvec = per_var
        self.action_space = spaces.MultiDiscrete(nvec)
        self.sim: Simulation | None = None
        self.scenario: Scenario = sc
        self.arrivals: Mapping[str, Arrivals] = {}
        self.policy: Policy | None = None
        self.result: RunResult | None = None
        self._scorer: StepScorer | None = None
        self._encoder: Encoder | None = None
        self._carry: StepScore | None = None
        self._last: Observation | None = None

    # ------------------------------------------------------------------------------------ Gymnasium
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsType, dict[str, Any]]:
        """A new episode. ``options``: ``scenario`` (a :class:`Scenario` of this cluster to run as it
        is), ``policy`` (a :data:`PolicyFactory`: the episode runs under that policy's start-up,
        interval and privileges, see :class:`PolicyAgent`)."""
        super().reset(seed=seed)
        opts = options or {}
        rng = np.random.default_rng(int(self.np_random.integers(0, 2**63 - 1)))
        scenario = opts.get("scenario") or draw_episode(self.template, rng, self.episodes)
        if [v.name for v in scenario.variants] != self.variant_names:
            raise ConfigError("an episode's scenario must have the template's variants")
        self.scenario = scenario
        self.arrivals = scenario_arrivals(scenario)
        factory: PolicyFactory | None = opts.get("policy")
        if factory is not None:
            self.policy = factory(scenario, self.arrivals)
            if not math.isfinite(self.policy.interval_s):
                self.policy.interval_s = self.interval_s  # a static policy: decisions that change nothing
        else:
            self.policy = _External(self.interval_s)
        self.sim = Simulation(scenario, self.policy, self.server_factory or engine_server, self.arrivals)
        self.sim.begin()
        self._scorer = StepScorer(self.sim, self.reward_config)
        self._encoder = Encoder(scenario, self.max_replicas)
        self.result = None
        if not self.sim.next_decision():
            raise ConfigError(f"scenario {scenario.name} ends before its first decision")
        # What happened before the first decision is scored with the first step.
        self._carry = self._scorer.step()
        return self._observe(), self._info()

    def step(self, action: npt.NDArray[np.int64]) -> tuple[ObsType, float, bool, bool, dict[str, Any]]:
        sim, scorer = self.sim, self._scorer
        if sim is None or scorer is None or self.result is not None:
            raise RuntimeError("reset() before step(), and again after an episode ends")
        sim.apply(self.actions(action))
        if sim.next_decision():
            score = scorer.step()
            terminated = False
        else:
            self.result = sim.finish()
            score = scorer.final(self.result)
            terminated = True
        if self._carry is not None:
            score = self._carry.plus(score)
            self._carry = None
        obs = self._observe()
        info = self._info()
        info["step"] = {"tiers": score.tiers, "value": score.value, "cost": score.cost}
        if self.result is not None:
            info["episode"] = episode_summary(self.result, self.reward_config)
        return obs, float(score.reward), terminated, False, info

    # -------------------------------------------------------------------------------------- actions
    def actions(self, action: npt.ArrayLike) -> dict[str, Action]:
        """The simulator actions an action of :attr:`action_space` stands for."""
        sim = self.sim
        assert sim is not None
        a = np.asarray(action, dtype=np.int64)
        reps = a[:, 0] if self.batch_choices else a
        out: dict[str, Action] = {}
        for i, name in enumerate(self.variant_names):
            if self.action_mode == "delta":
                want = sim.desired[i] + int(reps[i]) - self.max_delta
            else:
                want = int(reps[i])
            want = max(0, min(self._caps[i], want))
            batch = None
            if self.batch_choices:
                full = sim.var_profile[i].max_batch_size
                batch = max(1, math.ceil(self.batch_choices[int(a[i, 1])] * full))
            out[name] = Action(want, batch)
        return out

    def action_for(self, targets: Mapping[str, Action] | Mapping[str, int]) -> npt.NDArray[np.int64]:
        """The action that sets these replicas (variants left out keep theirs): exact in target mode,
        clipped to ``±max_delta`` in delta mode; a batch maps to the nearest choice (else the largest)."""
        sim = self.sim
        assert sim is not None
        reps = np.zeros(len(self.variant_names), dtype=np.int64)
        batch = np.full(len(self.variant_names), len(self.batch_choices) - 1, dtype=np.int64)
        for i, name in enumerate(self.variant_names):
            t = targets.get(name)
            want = sim.desired[i] if t is None else (t.replicas if isinstance(t, Action) else int(t))
            want = max(0, min(self._caps[i], want))
            if self.action_mode == "delta":
                reps[i] = max(-self.max_delta, min(self.max_delta, want - sim.desired[i])) + self.max_delta
            else:
                reps[i] = want
            if isinstance(t, Action) and t.max_batch is not None and self.batch_choices:
                full = sim.var_profile[i].max_batch_size
                batch[i] = int(np.argmin([abs(b * full - t.max_batch) for b in self.batch_choices]))
        return np.stack([reps, batch], axis=1) if self.batch_choices else reps

    # ---------------------------------------------------------------------------------- observation
    def _observe(self) -> ObsType:
        sim, enc = self.sim, self._encoder
        assert sim is not None and enc is not None
        self._last = sim.observe()
        rows, inventory = enc.encode(self._last)
        return {"variants": rows, "inventory": inventory}

    def _info(self) -> dict[str, Any]:
        sim = self.sim
        assert sim is not None and self._last is not None
        return {"time_s": sim.now, "observation": self._last, "scenario": self.scenario}


def _no_trace() -> dict[str, float]:
    return {"constant": 1.0, "diurnal": 2.0, "step": 1.0, "flash": 2.0}


class PolicyAgent:
    """A simulator policy acting in the environment.

    ``policy`` is a :data:`PolicyFactory` or a policy name of ``simulate`` (``ours``, ``hpa-kv``,
    ``wva``, ``oracle``, …). :meth:`reset` starts an episode under the policy (its initial replicas,
    its decision interval, and for the oracle the future requests and instant start-up);
    :meth:`act` turns its decision into the environment's action. In ``target`` mode the episode is
    exactly the ``simulate`` run of that policy over the episode's scenario.
    """

    def __init__(self, policy: str | PolicyFactory) -> None:
        if isinstance(policy, str):
            name = policy

            def factory(scenario: Scenario, arrivals: Mapping[str, Arrivals]) -> Policy:
                return make_policy(name, scenario, arrivals)

            self.factory: PolicyFactory = factory
        else:
            self.factory = policy

    def reset(
        self, env: gym.Env[Any, Any], *, seed: int | None = None, scenario: Scenario | None = None
    ) -> tuple[ObsType, dict[str, Any]]:
        options: dict[str, Any] = {"policy": self.factory}
        if scenario is not None:
            options["scenario"] = scenario
        out: tuple[ObsType, dict[str, Any]] = env.reset(seed=seed, options=options)
        return out

    def act(self, env: gym.Env[Any, Any], info: Mapping[str, Any]) -> npt.NDArray[np.int64]:
        inner = env.unwrapped
        assert isinstance(inner, VariantAutoscalerEnv) and inner.policy is not None
        return inner.action_for(inner.policy.decide(info["observation"]))


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=f"{__name__}:VariantAutoscalerEnv", nondeterministic=False)
