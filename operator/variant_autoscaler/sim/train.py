"""Train the baseline agent (:mod:`variant_autoscaler.sim.agent`) in the Gymnasium environment with the
cross-entropy method, on CPU.

Each iteration draws one training episode per template scenario (the bundled clusters, randomised
traffic and faults; trace windows from the training stretch of the trace), evaluates every candidate of
a Gaussian population over the agent's weights on those same episodes (common random numbers), and moves
the Gaussian to the best quarter. The fitness of a candidate is the mean over the episodes of the
episode's return per request (:func:`variant_autoscaler.sim.scoring.episode_return` / requests).
Training stops after ``--iterations``, ``--minutes`` of wall time or ``--cpu-minutes`` of CPU time spent
in episodes, whichever comes first (on a quiet machine with two cores the defaults, 30 and 60, coincide;
on a shared one the CPU budget keeps the amount of training the same), and writes the final mean as an
agent file.

Usage (the ``rl`` extra)::

    python -m variant_autoscaler.sim.train -o agent.json --minutes 30 --workers 2 \\
        --trace ../shared/traces/azure-llm-inference-2023-conv.csv

Episode seeds are drawn from ``--seed``; the benchmark evaluates on seeds outside that stream and on a
held-out stretch of the trace (bench/learning.py).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.agent import PARAMETERS, AgentParams, Controller
from variant_autoscaler.sim.episodes import EpisodeConfig
from variant_autoscaler.sim.gym_env import VariantAutoscalerEnv, _no_trace
from variant_autoscaler.sim.scoring import RewardConfig
from variant_autoscaler.sim.traffic import read_trace

__all__ = ["TRAIN_TRACE_RANGE_S", "EpisodeRun", "evaluate", "main", "make_env", "run_agent_episode"]

TEMPLATES: tuple[str, ...] = ("diurnal", "flash-crowd", "scarce", "node-failure")
TRAIN_TRACE_RANGE_S = (0.0, 2400.0)  # the trace's first 40 minutes; the last 20 are held out
TRAIN_DURATION_S = (900.0, 1800.0)
INITIAL_STD = (0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 1.5, 0.5)


@dataclass(frozen=True, slots=True)
class EpisodeRun:
    template: str
    seed: int
    ret: float
    requests: int
    cost: float
    attainment: float
    cpu_s: float = 0.0

    @property
    def per_request(self) -> float:
        return self.ret / max(1, self.requests)


def make_env(
    template: str,
    *,
    trace_path: str | None,
    trace_range_s: tuple[float, float] | None,
    duration_s: tuple[float, float] = TRAIN_DURATION_S,
    reward: RewardConfig | None = None,
    shapes: dict[str, float] | None = None,
    rate_scale: tuple[float, float] = (0.5, 1.25),
) -> Any:
    """The environment the agent trains (and is evaluated) in: ``target`` actions, episodes of the
    template with randomised traffic and faults (trace windows too when a trace is given)."""
    trace = read_trace(trace_path) if trace_path is not None else None
    if shapes is None:
        shapes = _no_trace()
        if trace is not None:
            shapes["trace"] = 2.0
    episodes = EpisodeConfig(
        duration_s=duration_s, rate_scale=rate_scale, shapes=shapes, trace=trace, trace_range_s=trace_range_s
    )
    return VariantAutoscalerEnv(template, episodes=episodes, action_mode="target", reward=reward)


def run_agent_episode(env: Any, params: AgentParams, seed: int) -> EpisodeRun:
    """One episode of the agent (weights ``params``) in ``env``, from ``seed``."""
    cpu0 = time.process_time()
    obs, _ = env.reset(seed=seed)
    controller = Controller(env.unwrapped.scenario, params)
    total = 0.0
    while True:
        action = np.asarray(controller.targets(obs["variants"], obs["inventory"]), dtype=np.int64)
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        if terminated or truncated:
            break
    ep = info["episode"]
    return EpisodeRun(
        env.unwrapped.template.name,
        seed,
        total,
        ep["requests"],
        ep["cost"],
        ep["attainment"],
        time.process_time() - cpu0,
    )


_ENVS: dict[str, Any] = {}
_SETUP: dict[str, Any] = {}


def _init(trace_path: str | None) -> None:
    _SETUP["trace"] = trace_path


def _job(args: tuple[str, int, tuple[float, ...]]) -> EpisodeRun:
    template, seed, weights = args
    env = _ENVS.get(template)
    if env is None:
        env = _ENVS[template] = make_env(
            template, trace_path=_SETUP.get("trace"), trace_range_s=TRAIN_TRACE_RANGE_S
        )
    return run_agent_episode(env, AgentParams(weights), seed)


def evaluate(
    pool: Any, candidates: Sequence[tuple[float, ...]], episodes: Sequence[tuple[str, int]]
) -> tuple[np.ndarray, float]:
    """Fitness (mean return per request over ``episodes``) of each candidate, and the CPU seconds the
    episodes took."""
    jobs = [(t, s, c) for c in candidates for (t, s) in episodes]
    runs = pool.map(_job, jobs, chunksize=1) if pool is not None else [_job(j) for j in jobs]
    per = np.array([r.per_request for r in runs], dtype=np.float64).reshape(len(candidates), len(episodes))
    return per.mean(axis=1), sum(r.cpu_s for r in runs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m variant_autoscaler.sim.train", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("-o", "--output", type=Path, required=True, help="agent file to write (JSON)")
    parser.add_argument(
        "--trace", help="a CSV trace for trace-window episodes (its first 40 minutes are used)"
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="wall-time budget (default 30)")
    parser.add_argument(
        "--cpu-minutes",
        type=float,
        default=60.0,
        help="CPU-time budget of the episodes (default 60: two cores for 30 minutes)",
    )
    parser.add_argument(
        "--iterations", type=int, default=200, help="at most this many iterations (default 200)"
    )
    parser.add_argument("--population", type=int, default=8, help="candidates per iteration (default 8)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the candidates and episodes (default 0)")
    args = parser.parse_args(argv)
    if (
        args.population < 4
        or args.iterations < 1
        or args.workers < 1
        or not min(args.minutes, args.cpu_minutes) > 0
    ):
        raise ConfigError("population >= 4, iterations >= 1, workers >= 1, minutes and cpu-minutes > 0")
    rng = np.random.default_rng(args.seed)
    mean = np.zeros(len(PARAMETERS))
    std = np.asarray(INITIAL_STD, dtype=np.float64)
    n_elite = max(2, args.population // 4)
    history: list[dict[str, float]] = []
    wall0 = time.perf_counter()
    cpu0 = time.process_time()
    ctx = mp.get_context("fork")
    pool = ctx.Pool(args.workers, initializer=_init, initargs=(args.trace,)) if args.workers > 1 else None
    if pool is None:
        _init(args.trace)
    episode_cpu = 0.0
    try:
        it = 0
        while (
            it < args.iterations
            and time.perf_counter() - wall0 < args.minutes * 60.0
            and episode_cpu < args.cpu_minutes * 60.0
        ):
            episodes = [(t, int(rng.integers(0, 2**31 - 1))) for t in TEMPLATES]
            samples = mean + std * rng.standard_normal((args.population, len(PARAMETERS)))
            candidates = [tuple(float(v) for v in mean)] + [tuple(float(v) for v in s) for s in samples]
            fitness, spent = evaluate(pool, candidates, episodes)
            episode_cpu += spent
            order = np.argsort(-fitness[1:])[:n_elite]
            elite = samples[order]
            mean = 0.3 * mean + 0.7 * elite.mean(axis=0)
            std = np.maximum(0.3 * std + 0.7 * elite.std(axis=0), 0.05)
            it += 1
            history.append(
                {
                    "iteration": it,
                    "mean_fitness": round(float(fitness[0]), 5),
                    "best_fitness": round(float(fitness[1:].max()), 5),
                    "wall_s": round(time.perf_counter() - wall0, 1),
                    "episode_cpu_s": round(episode_cpu, 1),
                }
            )
            print(
                f"iteration {it}: fitness of the mean {fitness[0]:.4f}, best {fitness[1:].max():.4f}, "
                f"{time.perf_counter() - wall0:.0f} s wall, {episode_cpu:.0f} s CPU in episodes",
                file=sys.stderr,
                flush=True,
            )
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    params = AgentParams(
        tuple(float(v) for v in mean),
        training={
            "method": "cross-entropy method over the agent's weights",
            "command": "python -m variant_autoscaler.sim.train "
            + " ".join(sys.argv[1:] if argv is None else argv),
            "templates": list(TEMPLATES),
            "trace_range_s": list(TRAIN_TRACE_RANGE_S) if args.trace else None,
            "episode_duration_s": list(TRAIN_DURATION_S),
            "iterations": len(history),
            "population": args.population,
            "episodes": len(history) * (args.population + 1) * len(TEMPLATES),
            "seed": args.seed,
            "workers": args.workers,
            "wall_s": round(time.perf_counter() - wall0, 1),
            "episode_cpu_s": round(episode_cpu, 1),
            "trainer_cpu_s": round(time.process_time() - cpu0, 1),
            "final_std": [round(float(s), 4) for s in std],
            "history": history,
        },
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(params.to_json(), encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
