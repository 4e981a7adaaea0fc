"""Helpers of ``bench/fidelity.py`` for its learned-profile table (kept apart to keep that file short).

A :class:`Server` is one V1-like server as the analyzer sees it (maximum batch, fixed prompt and output
lengths, its hand profile) with a factory for one replica of its engine. :func:`learn` runs the warm-up
the table's learned profile comes from (moving load on a few replicas, windows as Prometheus computes
them, ``core.estimator.update`` every minute: ``bench/pod_windows.py``); :func:`predict` gives the
analyzer's and the tail model's figures with a profile; :func:`standing_capacity` measures the server's
completion rate with a standing queue.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from pod_windows import MODEL, Cycle, Pod, drive
from variant_autoscaler.core.estimator import LearnedProfile, ParamEstimate
from variant_autoscaler.core.profile_choice import ProfileSource
from variant_autoscaler.core.queueing import QueueAnalyzer, RequestSize, ServiceParms
from variant_autoscaler.core.tail import RequestLengths, TailModel, TokenLengths
from variant_autoscaler.errors import ModelError
from vllm_emulator.engine_v1 import V1Engine
from vllm_emulator.metrics import EmulatorMetrics

WARMUP_MINUTES = 10  # of moving load on the replicas before the learned profile is read
WARMUP_REPLICAS = 3
WARMUP_SEED = 1
SWITCH_MINUTES = 30  # the run with the hand profile as prior: until `auto` picks the learned one
EPSILON = 0.001  # the analyzer's rate range stops at μ_N·(1 − ε)


@dataclass(frozen=True, slots=True)
class Server:
    max_batch: int
    input_tokens: int
    output_tokens: int
    hand: ServiceParms
    engine: Callable[[], V1Engine]
    """A new replica of the server's engine (no step noise)."""

    def analyzer(self, parms: ServiceParms) -> QueueAnalyzer:
        return QueueAnalyzer(self.max_batch, None, parms, RequestSize(self.input_tokens, self.output_tokens))

    def capacity(self, parms: ServiceParms | None) -> float:
        """The analyzer's μ_N (req/s) with ``parms``: the completion rate at a full batch."""
        return math.nan if parms is None else self.analyzer(parms).rate_range[1] / (1.0 - EPSILON)


def predict(server: Server, parms: ServiceParms, rate: float) -> dict[str, float]:
    """The analyzer's mean TTFT and ITL and p99 TTFT, and the tail model's p99 TTFT and p99 of the
    per-request ITL (fixed lengths, Poisson arrivals) with ``parms`` at ``rate``; NaN where ``rate`` is
    over the capacity those parameters give. ``load``: ``rate`` as a fraction of that capacity."""
    analyzer = server.analyzer(parms)
    fixed = TokenLengths.fixed
    tail = TailModel(
        parms, server.max_batch, RequestLengths(fixed(server.input_tokens), fixed(server.output_tokens))
    )
    out = {"load": rate / analyzer.rate_range[1]}
    try:
        metrics = analyzer.analyze(rate)
        out |= {"ttft": metrics.ttft, "ttft_p99": analyzer.ttft_percentile(rate, 99.0), "itl": metrics.itl}
    except ModelError:
        out |= dict.fromkeys(("ttft", "ttft_p99", "itl"), math.nan)
    try:
        out["ttft_p99_tail"] = tail.ttft_quantile(rate, 0.99)
        out["itl_p99_tail"] = tail.itl_quantile(rate, 0.99)
    except ModelError:
        out |= dict.fromkeys(("ttft_p99_tail", "itl_p99_tail"), math.nan)
    return out


@dataclass(frozen=True, slots=True)
class Learned:
    """What the online estimator learned on a server in the warm-up, and the server's capacity."""

    profile: LearnedProfile
    """After WARMUP_MINUTES, from the metrics alone (no prior)."""
    with_prior: LearnedProfile
    """After WARMUP_MINUTES of the same traffic with the hand profile as the estimator's prior."""
    switch_minutes: float | None
    """When ``auto`` (hand profile as prior) first picked the learned profile; None: not in SWITCH_MINUTES."""
    arrivals: int
    capacity: float
    """The server's completion rate under a standing queue (req/s)."""


def learn(server: Server) -> Learned:
    """WARMUP_MINUTES of traffic on WARMUP_REPLICAS replicas of the server, the load moving between 20 %
    and 90 % of the hand profile's capacity, with the server's lengths; then SWITCH_MINUTES of the same
    traffic with the hand profile as the prior."""
    capacity = server.analyzer(server.hand).rate_range[1] * WARMUP_REPLICAS
    submitted = [0]

    def request(_: random.Random) -> tuple[int, int]:
        submitted[0] += 1
        return server.input_tokens, server.output_tokens

    def run(prior: ServiceParms | None, minutes: float) -> list[Cycle]:
        pods = [
            Pod(f"pod-{i}", server.engine(), EmulatorMetrics(MODEL, 16_384)) for i in range(WARMUP_REPLICAS)
        ]
        rng = random.Random(WARMUP_SEED)
        return drive(pods, capacity, rng, minutes * 60.0, request, max_batch=server.max_batch, hand=prior)

    learned = run(None, WARMUP_MINUTES)[-1].learned
    arrivals = submitted[0]
    with_prior = run(server.hand, SWITCH_MINUTES)
    at_warmup = next(c.learned for c in with_prior if c.t >= WARMUP_MINUTES * 60.0)
    switch = next((c.t / 60.0 for c in with_prior if c.source is ProfileSource.LEARNED), None)
    return Learned(learned, at_warmup, switch, arrivals, standing_capacity(server))


def standing_capacity(server: Server) -> float:
    """Completions per second of one replica with a standing queue: 30·N requests at once, the rate
    between the 10·N-th and the 25·N-th completion (past the start-up, before the queue runs dry)."""
    engine = server.engine()
    n = server.max_batch
    seqs = [engine.submit(i, server.input_tokens, server.output_tokens, 0.0) for i in range(30 * n)]
    engine.advance(math.inf)
    done = sorted(s.finish_time for s in seqs if s.finish_time is not None)
    return 15 * n / (done[25 * n] - done[10 * n])


def param_text(p: ParamEstimate) -> str:
    """A learned parameter as ``value ±relative error (confidence)``, or where it came from instead."""
    if p.value is None:
        return "unknown"
    if p.source != "learned":
        return f"{p.value:.4g} ({p.source})"
    error = f" ±{p.rse:.0%}" if p.rse is not None and math.isfinite(p.rse) else ""
    return f"{p.value:.4g}{error} ({p.confidence.value})"
