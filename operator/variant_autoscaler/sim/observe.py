"""What an autoscaling policy sees of the simulated cluster, and what it can do.

A policy sees only what a real autoscaler could: the Deployments' replica counts, metrics as scraped
by Prometheus (counters turned into rates over a window, gauges at the last scrape) and the GPU
inventory. The hindsight oracle additionally gets the future requests through :class:`PolicyContext`.

:class:`ModelView` gives each model's requests of the last ten minutes (those that have arrived) for
what the operator reads from Prometheus over its look-back: :meth:`ModelView.workload` turns them into
the burstiness of an arrival counter sampled at the scrapes and the length histograms with vLLM's
buckets, as :mod:`variant_autoscaler.adapters.burstiness` reads them.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from variant_autoscaler.core.workload import (
    Burstiness,
    RequestLengths,
    TokenLengths,
    Workload,
    burstiness_from_counter,
)
from variant_autoscaler.errors import ModelError
from variant_autoscaler.sim.scenario import Scenario
from variant_autoscaler.sim.traffic import Arrivals

__all__ = [
    "GATEWAY_ARRIVAL_COUNTER",
    "LOOKBACK_S",
    "WINDOWS_S",
    "Action",
    "ModelView",
    "Observation",
    "PolicyContext",
    "VariantView",
    "token_buckets",
]

#: The look-back over which burstiness and lengths are read, and the windows of the burstiness (the
#: operator's defaults: adapters/burstiness.py).
LOOKBACK_S = 600.0
WINDOWS_S: tuple[float, ...] = (30.0, 60.0, 120.0)


def token_buckets(max_value: int = 1 << 17) -> tuple[float, ...]:
    """vLLM's bucket bounds of its token-count histograms: 1, 2, 5, 10, 20, 50, ... up to ``max_value``."""
    out: list[float] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            value = m * scale
            if value > max_value:
                return tuple(out)
            out.append(float(value))
        scale *= 10


_BUCKETS = np.array(token_buckets())


def _histogram(tokens: np.ndarray[Any, Any], mean: float) -> TokenLengths | None:
    """The lengths as vLLM's histogram holds them (``le`` buckets, then read like histogram_quantile)."""
    if len(tokens) == 0:
        return None
    counts = np.bincount(np.searchsorted(_BUCKETS, tokens, side="left"), minlength=len(_BUCKETS) + 1)
    cumulative = np.cumsum(counts)
    bounds = [*_BUCKETS.tolist(), math.inf]
    try:
        return TokenLengths.from_histogram(bounds, cumulative.tolist(), mean=mean, smooth=True)
    except ModelError:
        return None


@dataclass(frozen=True, slots=True)
class VariantView:
    """One variant (Deployment) as observed at a decision time.

    Rates and averages are over the scenario's ``rate_window_s`` of scraped samples (Prometheus'
    ``rate(x[1m])``); ``None`` when the window holds no completed request. Gauges are from the last
    scrape.
    """

    name: str
    model: str
    accelerator: str
    desired: int  # spec.replicas
    ready: int  # pods serving
    starting: int  # scheduled, loading the model
    pending: int  # not schedulable (no free accelerator)
    max_batch: int  # --max-num-seqs of new pods
    success_rpm: float  # rate(vllm:request_success_total[1m]) × 60, WVA's "arrival rate"
    arrival_rpm: float  # requests routed to this variant per minute (the gateway's view)
    avg_input_tokens: float | None
    avg_output_tokens: float | None
    avg_ttft_ms: float | None
    avg_itl_ms: float | None
    waiting: float  # Σ vllm:num_requests_waiting over its pods
    waiting_growth: float  # change of that sum over the window (PromQL delta(...[1m]))
    running: float  # Σ vllm:num_requests_running
    kv_usage: float  # mean vllm:kv_cache_usage_perc over ready pods (0–1)
    metrics_ok: bool  # False until the window holds two scrapes
    # When each starting pod is expected to be ready (its scheduling time + the model's start-up time).
    starting_ready_at: tuple[float, ...] = ()
    # The completions and the queue's growth over the guard's short window (None: not two scrapes yet).
    success_rpm_short: float | None = None
    waiting_growth_short: float | None = None


#: The simulated inference gateway's counter of arriving requests, as the Gateway API inference extension's
#: endpoint picker names it (what ModelView's counter stands for; the operator's ARRIVAL_COUNTER).
GATEWAY_ARRIVAL_COUNTER = "inference_objective_request_total"


@dataclass(frozen=True, slots=True, eq=False)
class ModelView:
    """One model's requests that arrived in the look-back ending now (arrays share the run's memory; the
    future is not in them) and the scrape times of the look-back.

    A policy reads them as the operator reads Prometheus (:meth:`workload`): an arrival counter (the
    inference gateway's) sampled at the scrapes, and histograms of prompt and output tokens.
    """

    model: str
    now: float
    times: np.ndarray[Any, Any]
    input_tokens: np.ndarray[Any, Any]
    output_tokens: np.ndarray[Any, Any]
    scrape_t: tuple[float, ...]

    def __eq__(self, other: object) -> bool:
        # Arrays compare element by element; two views are equal when they hold the same requests.
        if not isinstance(other, ModelView):
            return NotImplemented
        return (
            (self.model, self.now, self.scrape_t) == (other.model, other.now, other.scrape_t)
            and np.array_equal(self.times, other.times)
            and np.array_equal(self.input_tokens, other.input_tokens)
            and np.array_equal(self.output_tokens, other.output_tokens)
        )

    __hash__ = None  # type: ignore[assignment]  # it holds arrays

    @classmethod
    def of(
        cls,
        model: str,
        arrivals: Arrivals,
        now: float,
        scrape_t: Sequence[float],
        lookback_s: float = LOOKBACK_S,
    ) -> ModelView:
        """The view at ``now`` (``scrape_t``: every scrape time so far, ascending)."""
        # One window more than the look-back: the counter's first increase needs the sample before it.
        start = now - lookback_s - max(WINDOWS_S)
        lo, hi = np.searchsorted(arrivals.times, [start, now], side="right")
        first = bisect.bisect_left(scrape_t, start)
        return cls(
            model,
            now,
            arrivals.times[lo:hi],
            arrivals.input_tokens[lo:hi],
            arrivals.output_tokens[lo:hi],
            tuple(scrape_t[first:]),
        )

    def arrival_rpm(self, window_s: float) -> float | None:
        """Requests/min arriving over the window ending at the last scrape, as ``rate(counter[window])``
        reads the gateway's arrival counter sampled at the scrapes (between the first and the last scrape
        inside the window, as the simulator's other rates); None before the window holds two scrapes."""
        if len(self.scrape_t) < 2:
            return None
        t1 = self.scrape_t[-1]
        t0 = next(t for t in self.scrape_t if t >= t1 - window_s - 1e-9)
        if t0 >= t1:
            return None
        c0, c1 = np.searchsorted(self.times, [t0, t1], side="right")
        return float(c1 - c0) / (t1 - t0) * 60.0

    def workload(self, *, windows_s: Sequence[float] = WINDOWS_S, lookback_s: float = LOOKBACK_S) -> Workload:
        """The burstiness and lengths of the look-back, as the operator's queries would read them."""
        bursts: Burstiness | None = None
        if len(self.scrape_t) >= 2:
            scrapes = np.array(self.scrape_t)
            counter = np.searchsorted(self.times, scrapes, side="right").astype(float)
            found = burstiness_from_counter(scrapes, counter, windows_s, lookback_s=lookback_s)
            bursts = found if found.windows_s else None
        recent = self.times >= self.now - lookback_s
        ins, outs = self.input_tokens[recent], np.maximum(self.output_tokens[recent], 1)
        lengths: RequestLengths | None = None
        if len(ins):
            li = _histogram(ins, float(ins.mean()))
            lo = _histogram(outs, float(outs.mean()))
            if li is not None and lo is not None:
                lengths = RequestLengths(li, lo)
        return Workload(lengths, bursts)


@dataclass(frozen=True, slots=True)
class Observation:
    now: float
    variants: Mapping[str, VariantView]
    capacity: Mapping[str, int]  # healthy accelerator units per accelerator name
    allocated: Mapping[str, int]  # units held by pods (starting, ready or draining)
    gateway_waiting: Mapping[str, int] = field(default_factory=dict)  # per model: no replica to take them
    # Per model, its requests of the look-back (see ModelView); empty where the simulator gives none.
    models: Mapping[str, ModelView] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Action:
    """Set a variant's replicas (and, optionally, the batch size new pods start with)."""

    replicas: int
    max_batch: int | None = None


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """Given to a policy once, before the simulation starts.

    ``arrivals`` are the requests the simulation will replay. Only the hindsight oracle may look at
    them; every other policy must decide from observations alone.
    """

    scenario: Scenario
    arrivals: Mapping[str, Arrivals]
