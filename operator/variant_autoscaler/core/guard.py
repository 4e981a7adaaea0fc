"""The burst guard: a scale-up between planning cycles, from the queue and the KV cache, in seconds.

The planner sizes for the load it forecasts over "start-up + one interval"; a burst that the forecast
did not see shows first as requests waiting in the servers' queues (and a full KV cache). The guard
looks at those two signals every few seconds and, when they say the running replicas are overrun, asks
for the replicas the observed demand needs at the rate one replica sustains within the targets (the
last plan's). It never scales down: that is the planner's business, and stays conservative.

**Trigger.** At least ``waiting_per_replica`` requests waiting per ready replica, or a mean KV-cache
usage of at least ``kv_threshold``. Below both, nothing: the planner's plan stands.

**Demand.** ``completions + growth of the queue + queue / drain``: what is finished per second, what
the queue gains per second, and what it takes to empty the queue within ``drain`` seconds (the
start-up time: new replicas serve only after it). This is the collector's demand
(:func:`variant_autoscaler.core.demand.demand_rate`), over the guard's short window.

**Supply.** Every replica already asked for: ready ones, and those still starting, each of which will
be ready before any replica asked for now (its expected ready time is named in the reason). The guard
adds ``ceil(demand / rate per replica) − supply`` when that is positive, at most doubling the count (plus
four) per step, within ``maxReplicas``.

Pure: values in, a decision out; time is passed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from variant_autoscaler.core.demand import demand_rate
from variant_autoscaler.errors import ModelError

__all__ = ["GuardDecision", "GuardInput", "GuardParams", "guard"]


@dataclass(frozen=True, slots=True)
class GuardParams:
    """When the guard acts (see the module doc)."""

    waiting_per_replica: float = 1.0
    kv_threshold: float = 0.9

    def __post_init__(self) -> None:
        if not self.waiting_per_replica > 0:
            raise ModelError("the guard's waiting threshold must be > 0 requests per replica")
        if not 0.0 < self.kv_threshold <= 1.0:
            raise ModelError("the guard's KV-cache threshold must be in (0, 1]")


@dataclass(frozen=True, slots=True)
class GuardInput:
    """One variant as the guard sees it (rates in requests/s, times in s on any common clock).

    ``desired``: the replicas asked for (ready, starting and pending); ``starting_ready_at``: when the
    replicas still starting are expected to be ready. ``completion_rate``, ``waiting``,
    ``waiting_growth`` (over ``window_s``) and ``kv_usage`` (mean over the ready replicas, 0–1) are what
    Prometheus says. ``rate_per_replica``: what one replica sustains within the targets (the last plan's;
    None before the first plan). ``drain_s``: how soon the queue should be gone (the start-up time).
    """

    now: float
    desired: int
    ready: int
    completion_rate: float
    waiting: float
    waiting_growth: float
    window_s: float
    kv_usage: float
    rate_per_replica: float | None
    drain_s: float
    starting_ready_at: tuple[float, ...] = ()
    max_replicas: int | None = None


@dataclass(frozen=True, slots=True)
class GuardDecision:
    """``replicas`` to scale to (None: leave the count alone) and why."""

    replicas: int | None
    reason: str


def guard(inp: GuardInput, params: GuardParams | None = None) -> GuardDecision:
    """The guard's word on one variant (see the module doc)."""
    p = params or GuardParams()
    if inp.desired < 0 or inp.ready < 0:
        raise ModelError("replica counts must be >= 0")
    if inp.ready == 0:
        return GuardDecision(None, "no ready replica to read a queue from")
    if inp.rate_per_replica is None or not inp.rate_per_replica > 0:
        return GuardDecision(None, "no plan yet: the rate one replica sustains is unknown")
    per_replica = inp.waiting / inp.ready
    signals = []
    if per_replica >= p.waiting_per_replica:
        signals.append(f"{inp.waiting:.0f} requests waiting on {inp.ready} ready replicas")
    if inp.kv_usage >= p.kv_threshold:
        signals.append(f"KV cache {100 * inp.kv_usage:.0f} % full")
    if not signals:
        return GuardDecision(None, "no queue or KV-cache pressure")
    demand = demand_rate(
        max(inp.completion_rate, 0.0),
        max(inp.waiting, 0.0),
        inp.waiting_growth,
        max(inp.window_s, 1e-9),
        max(inp.drain_s, 1.0),
    )
    needed = math.ceil(demand / inp.rate_per_replica - 1e-9)
    starting = sorted(max(t - inp.now, 0.0) for t in inp.starting_ready_at)
    supply = f"{inp.ready} ready"
    if starting:
        supply += f" + {len(starting)} starting (ready in {starting[0]:.0f}–{starting[-1]:.0f} s)"
    pending = inp.desired - inp.ready - len(starting)
    if pending > 0:
        supply += f" + {pending} pending"
    if needed <= inp.desired:
        return GuardDecision(
            None,
            f"{'; '.join(signals)}: demand {demand:.2f} req/s needs {needed} at {inp.rate_per_replica:.3g} "
            f"req/s each; {supply} cover it",
        )
    step = max(2 * inp.desired, inp.desired + 4)
    target = min(needed, step)
    if inp.max_replicas is not None:
        target = min(target, inp.max_replicas)
    if target <= inp.desired:
        return GuardDecision(None, f"{'; '.join(signals)}: at maxReplicas {inp.max_replicas}")
    return GuardDecision(
        target,
        f"burst guard: {'; '.join(signals)}: demand {demand:.2f} req/s needs {needed} replicas at "
        f"{inp.rate_per_replica:.3g} req/s each; {supply}: scale up to {target}",
    )
