"""Benchmark: how well the online estimator learns α β γ δ from what Prometheus would see.

Emulated vLLM replicas (the emulator's engine, noise 0.1, parameters the estimator is not told) are
driven on a virtual clock by Poisson traffic whose rate moves between 20 % and 90 % of the replicas'
capacity (a new level, drawn at random, every 60-150 s; capacity is the throughput the queueing model
gives one replica at its maximum batch). Every ``SCRAPE_S`` seconds each replica's vLLM metrics are
"scraped" (the same counters and histograms the emulator's HTTP server exports, fed from the same
engine outputs); every ``CYCLE_S`` seconds the per-pod windows are computed from the scrapes the way
Prometheus computes ``rate(x_sum[W]) / rate(x_count[W])`` and ``rate(...)`` over ``[W]`` (first and last
sample in the window), and handed to :func:`variant_autoscaler.core.estimator.update`.

Three measurements:

1. accuracy after 10 minutes of traffic, per parameter, over several seeds and three emulated
   accelerators (targets: within 10 % for α and γ, 15 % for β and δ);
2. the plan: ``core.optimizer.optimize`` for one model offered on the three accelerators, at loads
   across the range, with the learned profiles against the true ones (same accelerator, replicas and
   batch?);
3. the switch: starting from a hand profile off by ×2 (every parameter doubled, or halved), the time
   until ``choose_profile`` (``auto``) picks the learned profile (target: within 15 minutes).

Run: ``python bench/profile_learning.py`` (this section only) or
``python bench/run_all.py --only profile_learning``.
"""

from __future__ import annotations

import bisect
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from variant_autoscaler.core.estimator import (
    EstimatorState,
    LearnedProfile,
    PodWindow,
    learned_profile,
    update,
)
from variant_autoscaler.core.profile_choice import ProfileMode, ProfileSource, choose_profile
from variant_autoscaler.core.queueing import QueueAnalyzer, RequestSize, ServiceParms
from vllm_emulator.distributions import parse_distribution
from vllm_emulator.engine import Engine, EngineConfig
from vllm_emulator.engine import Profile as EngineProfile
from vllm_emulator.metrics import EmulatorMetrics

SCRAPE_S = 15.0
CYCLE_S = 60.0
WINDOW_S = 60.0
NOISE = 0.1
LOW, HIGH = 0.2, 0.9
MINUTES = 10
SEEDS = (1, 2, 3, 4, 5)
TOLERANCE = {"alpha": 0.10, "beta": 0.15, "gamma": 0.10, "delta": 0.15}


@dataclass(frozen=True)
class Case:
    """One emulated accelerator: its true parameters and its serving configuration."""

    name: str
    parms: ServiceParms
    max_batch: int
    replicas: int
    cost: float
    input_tokens: str = "uniform:128:1024"
    output_tokens: str = "uniform:64:192"


CASES = (
    Case("A100", ServiceParms(alpha=20.58, beta=0.41, gamma=20.58, delta=0.041), 64, 3, 40.0),
    Case("H100", ServiceParms(alpha=9.0, beta=0.16, gamma=12.0, delta=0.018), 128, 2, 100.0),
    Case("L40S", ServiceParms(alpha=34.0, beta=0.9, gamma=40.0, delta=0.09), 32, 4, 32.0),
)


def _capacity(case: Case) -> float:
    """Requests/s one replica sustains at its maximum batch (the top of the model's rate range)."""
    lin = parse_distribution(case.input_tokens).mean
    lout = parse_distribution(case.output_tokens).mean
    analyzer = QueueAnalyzer(case.max_batch, None, case.parms, RequestSize(lin, lout))
    return analyzer.rate_range[1]


# ---- one replica and its scrapes -----------------------------------------------------------------


@dataclass
class _Scrape:
    t: float
    itl: tuple[float, float]
    prefill: tuple[float, float]
    prompt: tuple[float, float]
    inference: tuple[float, float]
    running: float


@dataclass
class _Pod:
    name: str
    engine: Engine
    metrics: EmulatorMetrics
    scrapes: list[_Scrape] = field(default_factory=list)

    def advance(self, t: float) -> None:
        self.metrics.record(self.engine.advance(t))

    def scrape(self, t: float) -> None:
        self.advance(t)
        m = self.metrics
        self.scrapes.append(
            _Scrape(
                t=t,
                itl=(m.itl.sum, float(m.itl.count)),
                prefill=(m.prefill.sum, float(m.prefill.count)),
                prompt=(m.prompt_tokens.sum, float(m.prompt_tokens.count)),
                inference=(m.inference.sum, float(m.inference.count)),
                running=float(self.engine.num_running),
            )
        )

    def window(self, end: float, seconds: float, model: str) -> PodWindow | None:
        """The pod's window as Prometheus computes it from the scrapes in ``(end − seconds, end]``."""
        times = [s.t for s in self.scrapes]
        lo = bisect.bisect_right(times, end - seconds)
        hi = bisect.bisect_right(times, end)
        samples = self.scrapes[lo:hi]
        if len(samples) < 2:
            return None
        first, last = samples[0], samples[-1]
        span = last.t - first.t

        def delta(get: Callable[[_Scrape], tuple[float, float]]) -> tuple[float, float]:
            (s1, c1), (s2, c2) = get(first), get(last)
            return s2 - s1, c2 - c1

        itl_s, itl_n = delta(lambda s: s.itl)
        pre_s, pre_n = delta(lambda s: s.prefill)
        prm_s, prm_n = delta(lambda s: s.prompt)
        gauge = [s.running for s in samples]
        return PodWindow(
            namespace="bench",
            pod=self.name,
            model=model,
            end=end,
            seconds=seconds,
            itl_ms=1000.0 * itl_s / itl_n if itl_n > 0 else None,
            decode_tokens=itl_n,
            prefill_ms=1000.0 * pre_s / pre_n if pre_n > 0 else None,
            requests=pre_n,
            prompt_tokens=prm_s / prm_n if prm_n > 0 else None,
            # Little's law: seconds of decoding and of prefill accrued per second of window
            running=(itl_s + pre_s) / span,
            gauge_mean=statistics.fmean(gauge),
            gauge_var=statistics.pvariance(gauge),
        )


# ---- one simulated run ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Cycle:
    t: float
    learned: LearnedProfile
    source: ProfileSource | None
    reason: str


def _levels(rng: random.Random, seconds: float) -> list[tuple[float, float]]:
    """(start, fraction of capacity) segments covering ``seconds``: a random level every 60-150 s."""
    out: list[tuple[float, float]] = []
    t = 0.0
    level = rng.uniform(LOW, HIGH)
    while t < seconds:
        out.append((t, level))
        t += rng.uniform(60.0, 150.0)
        nxt = rng.uniform(LOW, HIGH)
        while abs(nxt - level) < 0.15:  # a move worth the name
            nxt = rng.uniform(LOW, HIGH)
        level = nxt
    return out


def _level_at(levels: list[tuple[float, float]], starts: list[float], t: float, ramps: bool) -> float:
    i = bisect.bisect_right(starts, t) - 1
    start, level = levels[i]
    if not ramps or i + 1 >= len(levels):
        return level
    end, nxt = levels[i + 1]
    return level + (nxt - level) * (t - start) / (end - start)


def simulate(
    case: Case,
    seed: int,
    minutes: float,
    *,
    hand: ServiceParms | None = None,
    change: tuple[float, ServiceParms] | None = None,
    state: EstimatorState | None = None,
    ramps: bool = False,
) -> list[Cycle]:
    """Run ``case`` for ``minutes`` of traffic; the estimator's view after every cycle.

    ``hand``: a hand profile (the estimator's prior, and the spec side of ``choose_profile``);
    ``change``: at this time (s) the replicas' true parameters become these (a drift).
    """
    rng = random.Random(seed)
    seconds = minutes * 60.0
    lin = parse_distribution(case.input_tokens)
    lout = parse_distribution(case.output_tokens)
    model = "bench/model"

    def engine_for(parms: ServiceParms, index: int, start: float) -> Engine:
        profile = EngineProfile(alpha=parms.alpha, beta=parms.beta, gamma=parms.gamma, delta=parms.delta)
        config = EngineConfig(
            profile=profile,
            max_num_seqs=case.max_batch,
            kv_cache_tokens=1 << 22,
            max_model_len=8192,
            noise=NOISE,
            seed=seed * 1000 + index,
        )
        return Engine(config, start_time=start)

    pods = [
        _Pod(f"pod-{i}", engine_for(case.parms, i, 0.0), EmulatorMetrics(model, 8192))
        for i in range(case.replicas)
    ]
    capacity = _capacity(case) * case.replicas
    levels = _levels(rng, seconds)
    starts = [s for s, _ in levels]
    cycles: list[Cycle] = []
    est = state or EstimatorState()
    source: ProfileSource | None = None
    next_scrape, next_cycle = SCRAPE_S, CYCLE_S
    t = 0.0
    changed = False
    while True:
        level = _level_at(levels, starts, t, ramps)
        t_arrival = t + rng.expovariate(level * capacity)
        while min(next_scrape, next_cycle) <= t_arrival and min(next_scrape, next_cycle) <= seconds:
            if next_scrape <= next_cycle:
                for pod in pods:
                    pod.scrape(next_scrape)
                next_scrape += SCRAPE_S
                continue
            now = next_cycle
            windows = [w for pod in pods if (w := pod.window(now, WINDOW_S, model)) is not None]
            est = update(est, windows, now=now, prior=hand, max_batch=case.max_batch).state
            learned = learned_profile(est, hand)
            choice = choose_profile(ProfileMode.AUTO, hand, learned, previous=source)
            source = choice.source
            cycles.append(Cycle(now, learned, source, choice.reason))
            next_cycle += CYCLE_S
        if t_arrival > seconds:
            break
        t = t_arrival
        if change is not None and not changed and t >= change[0]:
            changed = True
            pods = [
                _Pod(p.name, _swap(p, engine_for(change[1], i + 100, t)), p.metrics, p.scrapes)
                for i, p in enumerate(pods)
            ]
        pod = pods[rng.randrange(len(pods))]
        pod.advance(t)
        pod.engine.submit(object(), min(lin.sample(rng), 6000), min(lout.sample(rng), 1000), t)
    return cycles


def _swap(pod: _Pod, new: Engine) -> Engine:
    """The new engine takes over; the old one's in-flight work finishes in the metrics as it would."""
    del pod
    return new


# ---- the three measurements ----------------------------------------------------------------------


def _errors(learned: LearnedProfile, truth: ServiceParms) -> dict[str, float]:
    out = {}
    for name in ("alpha", "beta", "gamma", "delta"):
        value = getattr(learned, name).value
        true = getattr(truth, name)
        out[name] = math.inf if value is None else abs(value - true) / true
    return out


def accuracy(seeds: Sequence[int] = SEEDS) -> tuple[list[str], dict[str, dict[str, list[float]]]]:
    rows = []
    errors: dict[str, dict[str, list[float]]] = {}
    for case in CASES:
        per = {n: [] for n in TOLERANCE}
        conf = []
        for seed in seeds:
            cycles = simulate(case, seed, MINUTES)
            learned = cycles[-1].learned
            for name, err in _errors(learned, case.parms).items():
                per[name].append(err)
            conf.append(learned.confidence.value)
        errors[case.name] = per
        cells = []
        for name in ("alpha", "beta", "gamma", "delta"):
            worst = max(per[name])
            ok = "✓" if worst <= TOLERANCE[name] else "✗"
            cells.append(f"{100 * statistics.median(per[name]):.1f} / {100 * worst:.1f} {ok}")
        rows.append(f"| {case.name} | " + " | ".join(cells) + f" | {', '.join(conf)} |")
    return rows, errors


def main() -> None:
    started = time.perf_counter()
    rows, _ = accuracy(SEEDS[:2])
    print("\n".join(rows))
    print(f"{time.perf_counter() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
