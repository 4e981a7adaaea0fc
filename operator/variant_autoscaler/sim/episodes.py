"""Random episodes for the learning environment: a scenario's cluster with new traffic and new faults.

An episode keeps the template scenario's cluster (accelerators, node pools, service classes, models with
their profiles and variants, settings) and draws, from one random generator:

* a duration (``duration_s``, a range);
* for each model, a traffic shape among the bundled generators (constant, diurnal, step, flash crowd)
  or a window of a trace, at a mean rate of the template's own mean rate × ``rate_scale`` (a range);
  generated traffic keeps the template's token-length distributions, trace windows bring their own;
* faults: with probability ``p_node_lost`` one node of a random pool is lost (back after a while, always
  when it was the pool's only node), with probability ``p_node_slowed`` one is slowed by a factor in
  ``slowdown`` (back to normal after a while, or not).

A trace window is a stretch of the trace inside ``trace_range_s`` (so another stretch can be held out
for evaluation), replayed at its own pace: its rate is brought to the drawn rate by superposing copies of
the window, each shifted circularly by a random offset, and thinning them at random (bursts stay
bursts), and a window shorter than the episode repeats.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.scenario import Failure, ModelSpec, Scenario, Traffic
from variant_autoscaler.sim.traffic import (
    Arrivals,
    Constant,
    Diurnal,
    FlashCrowd,
    GeneratedTraffic,
    LengthDistribution,
    LogNormalLength,
    RateProfile,
    Step,
    TraceTraffic,
)

__all__ = ["SHAPES", "EpisodeConfig", "draw_episode", "mean_rate", "trace_window"]

SHAPES: tuple[str, ...] = ("constant", "diurnal", "step", "flash", "trace")


@dataclass(frozen=True, slots=True)
class EpisodeConfig:
    """How episodes vary (see the module doc). ``randomize=False`` replays the template as it is."""

    randomize: bool = True
    duration_s: tuple[float, float] = (1800.0, 3600.0)
    rate_scale: tuple[float, float] = (0.5, 1.25)
    shapes: Mapping[str, float] = field(
        default_factory=lambda: {"constant": 1.0, "diurnal": 2.0, "step": 1.0, "flash": 2.0, "trace": 2.0}
    )
    trace: Arrivals | None = field(default=None, repr=False)
    trace_range_s: tuple[float, float] | None = None
    p_node_lost: float = 0.25
    p_node_slowed: float = 0.25
    slowdown: tuple[float, float] = (1.5, 3.0)

    def __post_init__(self) -> None:
        lo, hi = self.duration_s
        if not 0 < lo <= hi:
            raise ConfigError("duration_s must be a range (low, high) with 0 < low <= high")
        lo, hi = self.rate_scale
        if not 0 < lo <= hi:
            raise ConfigError("rate_scale must be a range (low, high) with 0 < low <= high")
        unknown = sorted(set(self.shapes) - set(SHAPES))
        if unknown:
            raise ConfigError(f"unknown traffic shape(s) {', '.join(unknown)} (known: {', '.join(SHAPES)})")
        if any(w < 0 for w in self.shapes.values()) or sum(self.shapes.values()) <= 0:
            raise ConfigError("traffic shape weights must be >= 0, at least one > 0")
        if self.shapes.get("trace", 0.0) > 0 and self.trace is None:
            raise ConfigError("the trace shape needs a trace")
        for p in (self.p_node_lost, self.p_node_slowed):
            if not 0 <= p <= 1:
                raise ConfigError("fault probabilities must be in [0, 1]")
        if not 1 < self.slowdown[0] <= self.slowdown[1]:
            raise ConfigError("slowdown must be a range (low, high) with 1 < low <= high")


def mean_rate(model: ModelSpec, duration_s: float) -> float:
    """The template's mean request rate of ``model`` over ``duration_s`` (req/s)."""
    traffic = model.traffic
    if isinstance(traffic, GeneratedTraffic):
        lam = traffic.rate.cumulative(np.array([0.0, duration_s]))
        return float(lam[1] - lam[0]) / duration_s
    arr = traffic.arrivals(np.random.default_rng(0), duration_s)
    return len(arr) / duration_s


def trace_window(
    trace: Arrivals,
    rng: np.random.Generator,
    *,
    start_s: float,
    length_s: float,
    duration_s: float,
    rate: float,
) -> Arrivals:
    """The trace's requests in ``[start_s, start_s + length_s)``, replayed from time 0 at ``rate`` req/s
    on average (copies shifted circularly, thinned), repeated to cover ``duration_s``."""
    t0 = float(trace.times[0]) if len(trace) else 0.0
    win = trace.window(t0 + start_s, t0 + start_s + length_s)
    if len(win) == 0 or not rate > 0:
        return Arrivals.empty()
    rel = win.times - (t0 + start_s)
    own = len(win) / length_s
    copies = max(1, math.ceil(rate / own))
    keep_p = rate / (own * copies)
    times: list[np.ndarray] = []
    ins: list[np.ndarray] = []
    outs: list[np.ndarray] = []
    repeats = math.ceil(duration_s / length_s)
    for _ in range(copies):
        shifted = (rel + rng.uniform(0.0, length_s)) % length_s
        for k in range(repeats):
            keep = rng.uniform(size=len(shifted)) < keep_p
            times.append(shifted[keep] + k * length_s)
            ins.append(win.input_tokens[keep])
            outs.append(win.output_tokens[keep])
    t = np.concatenate(times)
    order = np.argsort(t, kind="stable")
    t = t[order]
    cut = t < duration_s
    return Arrivals(t[cut], np.concatenate(ins)[order][cut], np.concatenate(outs)[order][cut])


def _lengths(model: ModelSpec) -> tuple[LengthDistribution, LengthDistribution]:
    traffic = model.traffic
    if isinstance(traffic, GeneratedTraffic):
        return traffic.input_tokens, traffic.output_tokens
    return LogNormalLength(512.0, 0.6, 1, 4096), LogNormalLength(256.0, 0.6, 1, 2048)


def _rate_shape(shape: str, rng: np.random.Generator, rate: float, duration: float) -> RateProfile:
    u = rng.uniform
    if shape == "constant":
        return Constant(rate)
    if shape == "diurnal":
        low = rate * u(0.2, 0.7)
        period = u(1800.0, 7200.0)
        return Diurnal(low, 2.0 * rate - low, period, u(0.0, period))
    if shape == "step":
        n = int(rng.integers(2, 5))
        at = np.sort(u(0.0, duration, size=n))
        at[0] = 0.0
        return Step(tuple(float(a) for a in at), tuple(float(rate * u(0.3, 1.7)) for _ in range(n)))
    # A flash crowd: the extra load on top of a lower base.
    base = rate * u(0.4, 0.8)
    return FlashCrowd(
        base_rps=base,
        extra_rps=rate * u(0.5, 2.0),
        start_s=u(0.15, 0.6) * duration,
        rise_s=u(60.0, 300.0),
        hold_s=u(300.0, 1200.0),
        decay_s=u(120.0, 600.0),
    )


def _traffic(
    model: ModelSpec, rng: np.random.Generator, config: EpisodeConfig, duration: float, rate: float
) -> Traffic:
    names = [s for s in SHAPES if config.shapes.get(s, 0.0) > 0]
    weights = np.array([config.shapes[s] for s in names], dtype=np.float64)
    shape = names[int(rng.choice(len(names), p=weights / weights.sum()))]
    if shape == "trace":
        assert config.trace is not None
        trace = config.trace
        span = float(trace.times[-1] - trace.times[0]) if len(trace) else 0.0
        lo, hi = config.trace_range_s if config.trace_range_s is not None else (0.0, span)
        length = min(duration, hi - lo)
        start = lo + rng.uniform(0.0, max(0.0, hi - lo - length))
        arr = trace_window(trace, rng, start_s=start, length_s=length, duration_s=duration, rate=rate)
        return TraceTraffic(arr, source=f"trace window {start:.0f}-{start + length:.0f} s")
    inputs, outputs = _lengths(model)
    burst = float(rng.choice([1.0, 1.0, 1.5, 2.0]))
    return GeneratedTraffic(_rate_shape(shape, rng, rate, duration), inputs, outputs, burst)


def _faults(
    scenario: Scenario, rng: np.random.Generator, config: EpisodeConfig, duration: float
) -> list[Failure]:
    pools = [p for p in scenario.pools if p.count > 0]
    faults: list[Failure] = []
    if not pools:
        return faults
    if rng.uniform() < config.p_node_lost:
        pool = pools[int(rng.integers(len(pools)))]
        at = rng.uniform(0.2, 0.6) * duration
        back = pool.count == 1 or rng.uniform() < 0.5
        faults.append(Failure(at, pool.name, 1, at + rng.uniform(300.0, 1200.0) if back else None))
    if rng.uniform() < config.p_node_slowed:
        pool = pools[int(rng.integers(len(pools)))]
        at = rng.uniform(0.2, 0.6) * duration
        back = rng.uniform() < 0.7
        factor = rng.uniform(*config.slowdown)
        faults.append(Failure(at, pool.name, 1, at + rng.uniform(300.0, 1800.0) if back else None, factor))
    return faults


def draw_episode(template: Scenario, rng: np.random.Generator, config: EpisodeConfig) -> Scenario:
    """One episode's scenario (see the module doc); the template itself unless ``config.randomize``."""
    if not config.randomize:
        return template
    seed = int(rng.integers(0, 2**31 - 1))
    duration = float(round(rng.uniform(*config.duration_s)))
    models = []
    for model in template.models:
        rate = mean_rate(model, template.duration_s) * rng.uniform(*config.rate_scale)
        models.append(replace(model, traffic=_traffic(model, rng, config, duration, rate)))
    return replace(
        template,
        name=f"{template.name}-episode",
        duration_s=duration,
        seed=seed,
        models=tuple(models),
        failures=tuple(_faults(template, rng, config, duration)),
    )
