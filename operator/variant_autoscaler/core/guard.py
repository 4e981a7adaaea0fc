"""The burst guard: a scale-up between planning cycles, from the queue and the KV cache, in seconds.

The planner sizes for the load it forecasts over "start-up + one interval"; a burst that the forecast
did not see shows first as requests waiting in the servers' queues (and a full KV cache). The guard
looks at those signals of one model (all its variants: they share its load) every few seconds and,
when they say the replicas asked for are overrun, adds the replicas the observed demand needs at the
rate one replica sustains within the targets (the last plan's). It never scales down: that is the
planner's business, and stays conservative.

**Trigger.** At least ``waiting_per_replica`` requests waiting per ready replica, or a mean KV-cache
usage of at least ``kv_threshold``. Below both, nothing: the plan stands.

**Demand.** ``completions + growth of the queue + backlog / drain``: what is finished per second,
what the queue gains per second, and what it takes to empty, within ``drain`` seconds (the start-up
time), the backlog there will be when replicas asked for now are ready: the queue of now, plus what it
gains until then (``growth × drain``), less what the replicas still starting serve from their expected
ready times until then (:func:`backlog_at_ready`). Replicas asked for now serve only after the
start-up, and the queue keeps growing meanwhile: sized on the queue of now, they would come too few.
The collector's demand (:func:`variant_autoscaler.core.demand.demand_rate`), read over the guard's
window, with that backlog for the queue.

**A rise.** Where the arrivals (completions plus the queue's growth) are read over a shorter window too
(``short_window_s``) and come faster over it than over ``window_s`` by at least :data:`RISE_MIN`, they
are rising (a crowd arriving, not a capacity lost: a lost replica slows the completions as much as it
grows the queue). The rise is projected over the start-up at the slope between the two windows (their
midpoints ``(window_s − short_window_s)/2`` apart), to at most :data:`RISE_CAP` times the short window's
rate; the demand is then the larger of the above and that projected rate plus the backlog there will be
by then (the queue of now, the arrivals' mean over the start-up less what the ready replicas serve, less
what the replicas still starting serve), drained within the start-up. Sized on the arrivals of now, the
guard caught up with a rising crowd one step at a time, each step's replicas ready three minutes on.

**Supply.** Every replica already asked for that will serve, each at the rate one replica of its
variant sustains: ready ones, those still starting, each of which will be ready before any replica
asked for now (their expected ready times are named in the reason), and those pending (not yet
scheduled) as far as the GPUs allow. In limited mode a variant can hold at most what the last plan gave
it plus its ``room``; pending replicas beyond that wait for GPUs that are not there (a node was lost,
say) and are not counted. When the demand exceeds the supply, the missing
capacity goes to the variant the last plan gave the most replicas (the one it found cheapest for the
load), at most doubling its count (plus four) per step, within its ``maxReplicas`` and, in limited
mode, within the GPUs the last plan left free (never those it gave to another variant).

Pure: values in, a decision out; time is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from variant_autoscaler.core.demand import demand_rate
from variant_autoscaler.errors import ModelError

__all__ = [
    "RISE_CAP",
    "RISE_MIN",
    "GuardDecision",
    "GuardInput",
    "GuardParams",
    "GuardVariant",
    "backlog_at_ready",
    "guard",
    "serving",
    "take_room",
]


#: Arrivals over the short window at least this much above the long window's (relative) are a rise.
RISE_MIN = 0.25
#: A rise is projected to at most this multiple of the short window's arrival rate.
RISE_CAP = 1.5


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
class GuardVariant:
    """One variant of the model: the replicas asked for (``desired``: ready, starting and pending),
    those ready, when those still starting are expected to be ready, the rate one replica sustains
    within the targets (the last plan's, req/s; None before a plan), the replicas the last plan gave it,
    and its ``maxReplicas``."""

    key: str
    desired: int
    ready: int
    rate_per_replica: float | None
    planned: int = 0
    starting_ready_at: tuple[float, ...] = ()
    max_replicas: int | None = None
    # Replicas that still fit on its accelerators beside the last plan (limited mode; None: no limit):
    # the guard never takes GPUs the plan gave to others (a higher priority, say).
    room: int | None = None


@dataclass(frozen=True, slots=True)
class GuardInput:
    """One model as the guard sees it (rates in requests/s, times in s on any common clock):
    Prometheus' completion rate, requests waiting and their growth over ``window_s``, and the mean
    KV-cache usage of the ready replicas (0–1); ``drain_s`` is how soon the queue should be gone (the
    start-up time)."""

    now: float
    completion_rate: float
    waiting: float
    waiting_growth: float
    window_s: float
    kv_usage: float
    drain_s: float
    variants: tuple[GuardVariant, ...]
    # The completions and the queue's growth over a shorter window ending now, ``short_window_s`` (a rise
    # of the arrivals is projected from the two windows); None: not read.
    completion_rate_short: float | None = None
    waiting_growth_short: float | None = None
    short_window_s: float = 0.0


@dataclass(frozen=True, slots=True)
class GuardDecision:
    """``replicas`` per variant to scale up to (empty: leave the counts alone) and why."""

    replicas: dict[str, int]
    reason: str


def serving(desired: int, placed: int, planned: int, room: int | None) -> int:
    """Of a variant's ``desired`` replicas, those that will serve: all of them, but in limited mode
    (``room`` known) no more than the last plan gave it plus the room beside that plan, or those
    already ``placed`` (ready or starting) where more; pending ones beyond that have no GPUs to go to."""
    if room is None:
        return desired
    return min(desired, max(placed, planned + room))


def _serving(v: GuardVariant) -> int:
    return serving(v.desired, v.ready + len(v.starting_ready_at), v.planned, v.room)


def take_room(planned: int, room: int, added: int) -> tuple[int, int]:
    """A variant's ``planned`` and ``room`` (limited mode) after the guard added ``added`` replicas to
    it: the GPUs they take from the room now hold its own replicas, so ``planned + room`` (what fits)
    stays."""
    taken = max(0, min(room, added))
    return planned + taken, room - taken


def _starting_credit(inp: GuardInput, drain: float) -> float:
    """Requests the replicas still starting serve between their expected ready times and ``drain`` s
    from now."""
    return sum(
        (v.rate_per_replica or 0.0) * max(0.0, drain - max(0.0, t - inp.now))
        for v in inp.variants
        for t in v.starting_ready_at
    )


def backlog_at_ready(inp: GuardInput) -> float:
    """Requests waiting when replicas asked for now are ready, ``drain_s`` from now (see the module
    doc): the queue, plus its growth (when it grows) over the start-up, less what each replica still
    starting serves between its expected ready time and then; never below 0."""
    drain = max(inp.drain_s, 1.0)
    growth = max(0.0, inp.waiting_growth) / max(inp.window_s, 1e-9)
    return max(0.0, max(inp.waiting, 0.0) + growth * drain - _starting_credit(inp, drain))


def rising_arrivals(inp: GuardInput) -> tuple[float, float] | None:
    """``(now, at_ready)``: the arrival rate over the short window and the one projected for when
    replicas asked for now are ready, where the arrivals rise (see the module doc); None otherwise or
    without the short window's reading."""
    short_s, long_s = inp.short_window_s, inp.window_s
    if inp.completion_rate_short is None or inp.waiting_growth_short is None or not 0.0 < short_s < long_s:
        return None
    long = max(inp.completion_rate, 0.0) + inp.waiting_growth / long_s
    now = max(inp.completion_rate_short, 0.0) + inp.waiting_growth_short / short_s
    if long <= 0.0 or inp.waiting_growth_short <= 0.0 or now <= long * (1.0 + RISE_MIN):
        return None
    slope = (now - long) / ((long_s - short_s) / 2.0)
    return now, min(now + slope * max(inp.drain_s, 1.0), RISE_CAP * now)


def _rising_demand(inp: GuardInput, rise: tuple[float, float]) -> float:
    """The demand a rise asks for: its rate when new replicas are ready, plus the backlog there will be
    then (the queue, the arrivals' mean over the start-up less what the ready replicas serve now, less
    the starting replicas' credit) drained within the start-up."""
    drain = max(inp.drain_s, 1.0)
    now, at_ready = rise
    served = max(inp.completion_rate_short or 0.0, 0.0)
    backlog = max(inp.waiting, 0.0) + ((now + at_ready) / 2.0 - served) * drain - _starting_credit(inp, drain)
    return at_ready + max(backlog, 0.0) / drain


def _supply_text(variants: Sequence[GuardVariant], now: float) -> str:
    ready = sum(v.ready for v in variants)
    starting = sorted(max(t - now, 0.0) for v in variants for t in v.starting_ready_at)
    text = f"{ready} ready"
    if starting:
        text += f" + {len(starting)} starting (ready in {starting[0]:.0f}–{starting[-1]:.0f} s)"
    pending = sum(v.desired for v in variants) - ready - len(starting)
    stuck = sum(v.desired - _serving(v) for v in variants)
    if pending > stuck:
        text += f" + {pending - stuck} pending"
    if stuck > 0:
        text += f" (+ {stuck} pending without GPUs, not counted)"
    return text


def guard(inp: GuardInput, params: GuardParams | None = None) -> GuardDecision:
    """The guard's word on one model (see the module doc)."""
    p = params or GuardParams()
    if any(v.desired < 0 or v.ready < 0 for v in inp.variants):
        raise ModelError("replica counts must be >= 0")
    ready = sum(v.ready for v in inp.variants)
    if ready == 0:
        return GuardDecision({}, "no ready replica to read a queue from")
    known = [v for v in inp.variants if v.rate_per_replica is not None and v.rate_per_replica > 0]
    if not known:
        return GuardDecision({}, "no plan yet: the rate one replica sustains is unknown")
    signals = []
    if inp.waiting / ready >= p.waiting_per_replica:
        signals.append(f"{inp.waiting:.0f} requests waiting on {ready} ready replicas")
    if inp.kv_usage >= p.kv_threshold:
        signals.append(f"KV cache {100 * inp.kv_usage:.0f} % full")
    if not signals:
        return GuardDecision({}, "no queue or KV-cache pressure")
    backlog = backlog_at_ready(inp)
    demand = demand_rate(
        max(inp.completion_rate, 0.0),
        backlog,
        inp.waiting_growth,
        max(inp.window_s, 1e-9),
        max(inp.drain_s, 1.0),
    )
    supply = sum(_serving(v) * (v.rate_per_replica or 0.0) for v in known)
    what = (
        f"{'; '.join(signals)}: demand {demand:.2f} req/s (a backlog of {backlog:.0f} to drain once new "
        f"replicas are ready)"
    )
    rise = rising_arrivals(inp)
    if rise is not None and (rising := _rising_demand(inp, rise)) > demand:
        demand = rising
        what += (
            f"; arrivals rising, {rise[0]:.2f} req/s over the last {inp.short_window_s:g} s: "
            f"{rise[1]:.2f} projected when new replicas are ready, demand {demand:.2f} req/s"
        )
    what += f", the replicas asked for sustain {supply:.2f}"
    have = _supply_text(inp.variants, inp.now)
    if demand <= supply * (1.0 + 1e-9):
        return GuardDecision({}, f"{what} ({have})")
    grow = [
        v
        for v in known
        if (v.max_replicas is None or v.desired < v.max_replicas) and (v.room is None or v.room > 0)
    ]
    if not grow:
        return GuardDecision({}, f"{what}, but no variant may grow (maxReplicas, or no GPUs left)")
    target = max(grow, key=lambda v: (v.planned, v.desired, -len(v.key), v.key))
    rate = target.rate_per_replica or 0.0
    want = target.desired + math.ceil((demand - supply) / rate - 1e-9)
    want = min(want, max(2 * target.desired, target.desired + 4))
    if target.max_replicas is not None:
        want = min(want, target.max_replicas)
    if target.room is not None:
        want = min(want, target.desired + target.room)
    return GuardDecision(
        {target.key: want},
        f"burst guard: {what} ({have}): {target.key} {target.desired} -> {want} at {rate:.3g} req/s each",
    )
