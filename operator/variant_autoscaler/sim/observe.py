"""What an autoscaling policy sees of the simulated cluster, and what it can do.

A policy sees only what a real autoscaler could: the Deployments' replica counts, metrics as scraped
by Prometheus (counters turned into rates over a window, gauges at the last scrape) and the GPU
inventory. The hindsight oracle additionally gets the future requests through :class:`PolicyContext`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from variant_autoscaler.sim.scenario import Scenario
from variant_autoscaler.sim.traffic import Arrivals

__all__ = ["Action", "Observation", "PolicyContext", "VariantView"]


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


@dataclass(frozen=True, slots=True)
class Observation:
    now: float
    variants: Mapping[str, VariantView]
    capacity: Mapping[str, int]  # healthy accelerator units per accelerator name
    allocated: Mapping[str, int]  # units held by pods (starting, ready or draining)
    gateway_waiting: Mapping[str, int] = field(default_factory=dict)  # per model: no replica to take them


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
