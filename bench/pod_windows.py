"""Shared by the benchmarks that feed the online estimator: emulated pods, their scrapes, their windows.

Emulated replicas (either emulator engine, on a virtual clock) serve Poisson traffic whose rate moves
between 20 % and 90 % of their capacity (a new level, drawn at random, every 60-150 s). Every
``SCRAPE_S`` seconds each replica's vLLM metrics are "scraped" (the counters and histograms the
emulator's HTTP server exports, fed from the same engine outputs); every ``CYCLE_S`` seconds the per-pod
windows are computed from the scrapes the way Prometheus computes ``rate(x_sum[W]) / rate(x_count[W])``
and ``rate(...)`` over ``[W]`` (first and last sample in the window), and handed to
:func:`variant_autoscaler.core.estimator.update`.

Used by ``bench/profile_learning.py`` (the estimator against the ``wva`` engine) and
``bench/fidelity.py`` (profiles learned on the ``v1`` engine, then given to the analyzer).
"""

from __future__ import annotations

import bisect
import random
import statistics
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
from variant_autoscaler.core.queueing import ServiceParms
from vllm_emulator.engine import Engine
from vllm_emulator.engine_v1 import V1Engine
from vllm_emulator.metrics import EmulatorMetrics

SCRAPE_S = 15.0
CYCLE_S = 60.0
WINDOW_S = 60.0
LOW, HIGH = 0.2, 0.9
MODEL = "bench/model"


@dataclass
class Scrape:
    t: float
    itl: tuple[float, float]
    prefill: tuple[float, float]
    prompt: tuple[float, float]
    inference: tuple[float, float]
    running: float
    joined: tuple[float, float] = (0.0, 0.0)  # Σ prompt × admitted batch, Σ prompt (finished requests)


@dataclass
class Pod:
    """One replica: its engine, the metrics its server would export, and the scrapes taken so far."""

    name: str
    engine: Engine | V1Engine
    metrics: EmulatorMetrics
    scrapes: list[Scrape] = field(default_factory=list)
    # Σ prompt × admitted batch and Σ prompt over the requests the prefill histogram has counted: what
    # the engine knows and vLLM does not export (the estimator's floor, ``known_batch`` below).
    joined: tuple[float, float] = (0.0, 0.0)

    def advance(self, t: float) -> None:
        out = self.engine.advance(t)
        lb, prompt = self.joined
        for seq in out.finished:
            # the requests EmulatorMetrics puts in the prefill histogram (not aborted, prefilled)
            if seq.finish_reason != "abort" and seq.first_token_time is not None and seq.admitted_batch:
                lb += seq.prompt_tokens * seq.admitted_batch
                prompt += seq.prompt_tokens
        self.joined = (lb, prompt)
        self.metrics.record(out)

    def scrape(self, t: float) -> None:
        self.advance(t)
        m = self.metrics
        self.scrapes.append(
            Scrape(
                t=t,
                itl=(m.itl.sum, float(m.itl.count)),
                prefill=(m.prefill.sum, float(m.prefill.count)),
                prompt=(m.prompt_tokens.sum, float(m.prompt_tokens.count)),
                inference=(m.inference.sum, float(m.inference.count)),
                running=float(self.engine.num_running),
                joined=self.joined,
            )
        )

    def window(
        self, end: float, seconds: float, model: str, *, known_batch: bool = False
    ) -> PodWindow | None:
        """The pod's window as Prometheus computes it from the scrapes in ``(end − seconds, end]``;
        ``known_batch``: with the batch its requests joined, which the engine knows and vLLM does not
        export (``PodWindow.joined_batch``)."""
        times = [s.t for s in self.scrapes]
        lo = bisect.bisect_right(times, end - seconds)
        hi = bisect.bisect_right(times, end)
        samples = self.scrapes[lo:hi]
        if len(samples) < 2:
            return None
        first, last = samples[0], samples[-1]
        span = last.t - first.t

        def delta(get: Callable[[Scrape], tuple[float, float]]) -> tuple[float, float]:
            (s1, c1), (s2, c2) = get(first), get(last)
            return s2 - s1, c2 - c1

        itl_s, itl_n = delta(lambda s: s.itl)
        pre_s, pre_n = delta(lambda s: s.prefill)
        prm_s, prm_n = delta(lambda s: s.prompt)
        lb, lsum = delta(lambda s: s.joined)
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
            joined_batch=lb / lsum if known_batch and lsum > 0 else None,
        )


@dataclass(frozen=True)
class Cycle:
    t: float
    learned: LearnedProfile
    source: ProfileSource | None
    reason: str


def levels(rng: random.Random, seconds: float) -> list[tuple[float, float]]:
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


def drive(
    pods: Sequence[Pod],
    capacity: float,
    rng: random.Random,
    seconds: float,
    request: Callable[[random.Random], tuple[int, int]],
    *,
    max_batch: int,
    hand: ServiceParms | None = None,
    state: EstimatorState | None = None,
    known_batch: bool = False,
    observe: Callable[[Sequence[PodWindow]], None] | None = None,
) -> list[Cycle]:
    """``seconds`` of traffic at levels moving between LOW and HIGH of ``capacity`` (req/s, all the pods
    together), each arrival routed to a pod at random with ``request(rng)`` = (prompt, output) tokens;
    the estimator's view after every cycle.

    ``hand``: a hand profile (the estimator's prior, and the spec side of ``choose_profile``);
    ``known_batch``: the windows carry the batch their requests joined (see ``Pod.window``);
    ``observe``: called with every cycle's windows.
    """
    segments = levels(rng, seconds)
    starts = [s for s, _ in segments]
    cycles: list[Cycle] = []
    est = state or EstimatorState()
    source: ProfileSource | None = None
    next_scrape, next_cycle = SCRAPE_S, CYCLE_S
    t = 0.0
    while True:
        level = segments[bisect.bisect_right(starts, t) - 1][1]
        t_arrival = t + rng.expovariate(level * capacity)
        while min(next_scrape, next_cycle) <= t_arrival and min(next_scrape, next_cycle) <= seconds:
            if next_scrape <= next_cycle:
                for pod in pods:
                    pod.scrape(next_scrape)
                next_scrape += SCRAPE_S
                continue
            now = next_cycle
            found = (pod.window(now, WINDOW_S, MODEL, known_batch=known_batch) for pod in pods)
            windows = [w for w in found if w is not None]
            if observe is not None:
                observe(windows)
            est = update(est, windows, now=now, prior=hand, max_batch=max_batch).state
            learned = learned_profile(est, hand)
            choice = choose_profile(ProfileMode.AUTO, hand, learned, previous=source)
            source = choice.source
            cycles.append(Cycle(now, learned, source, choice.reason))
            next_cycle += CYCLE_S
        if t_arrival > seconds:
            break
        t = t_arrival
        pod = pods[rng.randrange(len(pods))]
        pod.advance(t)
        prompt, output = request(rng)
        pod.engine.submit(object(), prompt, output, t)
    return cycles
