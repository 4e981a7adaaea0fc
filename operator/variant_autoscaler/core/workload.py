"""What the tail model needs to know about a model's requests, beyond their rate and mean lengths.

* :class:`TokenLengths`: the distribution of prompt or output tokens per request, as a piecewise-linear
  CDF (the way Prometheus' ``histogram_quantile`` reads a histogram); :class:`RequestLengths` pairs them.
* :class:`Burstiness`: the index of dispersion of arrival counts over a few window lengths;
  :func:`index_of_dispersion` computes it from counts, :func:`burstiness_from_times` from arrival times,
  :func:`burstiness_from_counter` from the samples of a cumulative counter (as Prometheus scrapes one).
* :class:`Workload`: both, for one model, as the planner hands them to the candidate builder; its
  :meth:`Workload.rounded` form reads them to about 2 %, so that a plan can reuse the sizings of the
  previous cycle (the tail sizing is memoised on exact inputs).

All are small frozen values with a JSON form, so the operator can persist and report them. Pure: no I/O.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from variant_autoscaler.errors import ModelError

__all__ = [
    "DEFAULT_LEVELS",
    "IDC_RANGE",
    "Burstiness",
    "IdcCurve",
    "RequestLengths",
    "TokenLengths",
    "Workload",
    "burstiness_from_counter",
    "burstiness_from_times",
    "index_of_dispersion",
]

FloatArray = npt.NDArray[np.float64]

#: Cumulative probabilities at which a length distribution is summarised: dense in the upper tail,
#: where the long prompts that miss TTFT targets live.
DEFAULT_LEVELS: tuple[float, ...] = (
    0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1.0,
)  # fmt: skip
#: Where :meth:`TokenLengths.rounded` reads a distribution: every 5 % up to 0.9, then denser in the tail
#: (the chords of a finer CDF between fewer levels would over-state its upper percentiles).
ROUND_LEVELS: tuple[float, ...] = (
    *(k / 20 for k in range(18)),
    0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.975, 0.98, 0.985, 0.99, 0.9925, 0.995, 0.9975, 0.999, 0.9995, 1.0,
)  # fmt: skip
#: IDC values are clipped to this range: below, counts would be nearly deterministic; above, the
#: stationary model means little (a forecast should carry such swings, not the queue).
IDC_RANGE = (0.05, 1000.0)
#: The relative grid on which :meth:`Workload.rounded` reads lengths, rates and indices of dispersion.
ROUND_STEP = 0.02
#: The smallest exponent of the IDC's power law below the smallest measured window (an IDC of 20 over
#: long windows and flat down to the smallest, the renewal bound 1/20).
SHORT_EXPONENT_MIN = 0.05


def _round_log(values: FloatArray, step: float) -> FloatArray:
    """``values`` (>= 0) rounded to the nearest point of the grid ``(1 + step)^k`` (0 stays 0); monotone,
    so increasing values stay in order."""
    v = np.asarray(values, dtype=float)
    base = math.log1p(step)
    with np.errstate(divide="ignore"):
        out = np.where(v > 0, np.exp(np.round(np.log(np.maximum(v, 1e-300)) / base) * base), 0.0)
    return out


def _number(name: str, value: object, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not minimum <= value < math.inf:
        raise ModelError(f"{name} must be a finite number >= {minimum:g}, got {value!r}")
    return float(value)


# ---- request lengths ------------------------------------------------------------------------------


#: Knots per bucket of a smoothed histogram (:meth:`TokenLengths.from_histogram`).
_SUB_KNOTS = 8


def _smoothed(edges: Sequence[float], levels: Sequence[float]) -> tuple[list[float], list[float]]:
    """Knots of a CDF whose density is log-linear within each bucket ``(edges[k], edges[k+1]]`` (mass
    ``levels[k+1] - levels[k]``) and, at a bound, the geometric mean of its two buckets' average
    densities; a bucket beside an empty one or beside the ends is flat on that side."""
    n = len(edges) - 1
    widths = [edges[k + 1] - edges[k] for k in range(n)]
    masses = [levels[k + 1] - levels[k] for k in range(n)]
    dens = [m / w if w > 0 else 0.0 for m, w in zip(masses, widths, strict=True)]
    values, knots = [edges[0]], [levels[0]]
    for k in range(n):
        a, w, m = edges[k], widths[k], masses[k]
        if w <= 0 or m <= 0:
            values.append(edges[k + 1])
            knots.append(levels[k + 1])
            continue
        d = dens[k]
        left = math.sqrt(d * dens[k - 1]) if k > 0 and dens[k - 1] > 0 else d
        right = math.sqrt(d * dens[k + 1]) if k + 1 < n and dens[k + 1] > 0 else d
        rate = math.log(left / right) / w  # the density falls (rate > 0) or rises along the bucket
        for j in range(1, _SUB_KNOTS + 1):
            u = j / _SUB_KNOTS
            flat = abs(rate * w) < 1e-9
            x = a + u * w if flat else a - math.log1p(-u * -math.expm1(-rate * w)) / rate
            values.append(min(max(x, values[-1]), edges[k + 1]))
            knots.append(levels[k] + u * m)
        values[-1] = edges[k + 1]
    return values, knots


def _fit_top(values: list[float], knots: list[float], low: float, mean: float) -> list[float]:
    """The knots of the top bucket ``(low, values[-1]]`` squeezed towards its lower or its upper end so
    that the mean is ``mean``, when the data end inside that bucket (its upper bound is only a bound)."""
    top = values[-1]
    start = next(i for i, v in enumerate(values) if v >= low)
    rest = sum((knots[k + 1] - knots[k]) * (values[k] + values[k + 1]) / 2.0 for k in range(start))
    inside = sum(
        (knots[k + 1] - knots[k]) * (values[k] + values[k + 1]) / 2.0 for k in range(start, len(values) - 1)
    )
    mass = knots[-1] - knots[start]
    if mass <= 0 or top <= low:
        return values
    want = (mean - rest) / mass  # the mean the top bucket must have
    have = inside / mass
    if want < have:  # squeezed about low: low + s·(have − low) = want
        s = min(max((want - low) / (have - low), 0.05), 1.0)
        return [*values[:start], *(low + s * (v - low) for v in values[start:])]
    # About top: top − s·(top − have) = want.
    s = min(max((top - want) / (top - have), 0.05), 1.0) if top > have else 1.0
    return [*values[:start], *(top - s * (top - v) for v in values[start:])]


@dataclass(frozen=True, slots=True)
class TokenLengths:
    """A distribution of tokens per request as a piecewise-linear CDF: ``values[k]`` tokens at cumulative
    probability ``levels[k]`` (``levels`` from 0 to 1), uniform in between — the way Prometheus'
    ``histogram_quantile`` reads a histogram. Compact and JSON-serialisable (:meth:`to_json`)."""

    values: tuple[float, ...]
    levels: tuple[float, ...] = DEFAULT_LEVELS

    def __post_init__(self) -> None:
        values, levels = self.values, self.levels
        if len(values) != len(levels) or len(values) < 2:
            raise ModelError("a length distribution needs as many values as levels, at least two")
        if levels[0] != 0.0 or levels[-1] != 1.0 or any(b <= a for a, b in itertools.pairwise(levels)):
            raise ModelError("length levels must increase strictly from 0 to 1")
        for v in values:
            _number("a token length", v)
        if any(b < a for a, b in itertools.pairwise(values)):
            raise ModelError("length values must not decrease")

    # -- constructors
    @classmethod
    def fixed(cls, tokens: float) -> TokenLengths:
        """Every request has ``tokens`` tokens."""
        t = _number("tokens", tokens)
        return cls((t, t), (0.0, 1.0))

    @classmethod
    def from_samples(cls, samples: Iterable[float], levels: Sequence[float] = DEFAULT_LEVELS) -> TokenLengths:
        """The empirical distribution of observed lengths, at ``levels``."""
        data = np.asarray(list(samples) if not isinstance(samples, np.ndarray) else samples, dtype=float)
        if data.size == 0:
            raise ModelError("no lengths to summarise")
        return cls(tuple(np.quantile(data, list(levels)).tolist()), tuple(levels))

    @classmethod
    def lognormal(cls, mean: float, cv: float, *, low: float = 1.0, high: float = math.inf) -> TokenLengths:
        """A log-normal length with that mean and coefficient of variation, clipped to ``[low, high]``."""
        from scipy.special import ndtri  # noqa: PLC0415  +0.15 s on `min-gpus`, `--help`

        m, c = _number("mean", mean, 1e-9), _number("cv", cv, 1e-9)
        sigma = math.sqrt(math.log1p(c * c))
        mu = math.log(m) - sigma * sigma / 2.0
        inner = np.clip(np.array(DEFAULT_LEVELS[1:-1]), 1e-12, 1 - 1e-12)
        top = min(high, math.exp(mu + sigma * float(ndtri(1.0 - 1e-5))))
        q = np.exp(mu + sigma * ndtri(inner))
        values = np.clip(np.concatenate(([low], q, [max(top, float(q[-1]))])), low, high)
        return cls(tuple(np.maximum.accumulate(values).tolist()), DEFAULT_LEVELS)

    @classmethod
    def exponential(cls, mean: float) -> TokenLengths:
        """An exponential length with that mean (the analyzer's implicit assumption)."""
        m = _number("mean", mean)
        levels = np.array(DEFAULT_LEVELS)
        q = -np.log1p(-np.minimum(levels, 1.0 - 1e-5))
        shape = cls(tuple(q.tolist()), DEFAULT_LEVELS)
        return cls(tuple((q * (m / shape.mean)).tolist()), DEFAULT_LEVELS)  # the mean exactly

    @classmethod
    def from_histogram(
        cls,
        bounds: Sequence[float],
        cumulative: Sequence[float],
        *,
        mean: float | None = None,
        smooth: bool = False,
    ) -> TokenLengths:
        """From a Prometheus histogram: bucket upper bounds (``le``, the last may be ``+Inf``) and the
        cumulative counts. The ``+Inf`` bucket's upper end is set so that the mean matches ``mean``
        (the histogram's ``_sum / _count``) when given, else twice the last finite bound.

        Within a bucket the mass is spread uniformly (as ``histogram_quantile`` does), or with
        ``smooth`` along a density that is log-linear within each bucket and continuous across buckets
        (its value at a bound the geometric mean of the two buckets' average densities): vLLM's 1-2-5
        buckets are so wide that spreading the upper buckets uniformly puts a prompt-length
        distribution's upper percentiles a quarter too high, and the tail model sizes on them.
        """
        pairs = sorted(zip((float(b) for b in bounds), (float(c) for c in cumulative), strict=True))
        if not pairs or pairs[-1][1] <= 0:
            raise ModelError("the histogram is empty")
        total = pairs[-1][1]
        edges, levels = [0.0], [0.0]  # the buckets with mass: (edges[k], edges[k+1]] holds levels' step
        inf_level: float | None = None
        for bound, count in pairs:
            level = min(count / total, 1.0)
            if level <= levels[-1]:
                if levels[-1] == 0.0 and not math.isinf(bound):
                    edges[0] = bound  # below the first bucket with mass there is none (histogram_quantile)
                continue
            if math.isinf(bound):
                inf_level = level
                break
            edges.append(max(bound, edges[-1]))
            levels.append(level)
        values, knots = _smoothed(edges, levels) if smooth else (list(edges), list(levels))
        if smooth and inf_level is None and mean is not None and mean > 0 and len(edges) >= 2:
            values = _fit_top(values, knots, edges[-2], mean)
        if inf_level is not None:
            last = values[-1]
            top = 2.0 * last if last > 0 else 1.0
            if mean is not None and mean > 0:
                # mean = Σ_segments ΔF·(v_k + v_{k+1})/2: solve for the last segment's upper end.
                known = sum(
                    (knots[k + 1] - knots[k]) * (values[k] + values[k + 1]) / 2.0
                    for k in range(len(values) - 1)
                )
                share = inf_level - knots[-1]
                top = max(last, 2.0 * (mean - known) / share - last)
            values.append(max(top, last))
            knots.append(inf_level)
        knots[-1] = 1.0  # counts that shrank between reads must not leave the CDF short of 1
        if len(values) < 2:
            raise ModelError("the histogram has no mass")
        return cls(tuple(values), tuple(knots))

    def to_json(self) -> dict[str, list[float]]:
        return {"values": list(self.values), "levels": list(self.levels)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TokenLengths:
        try:
            return cls(tuple(float(v) for v in data["values"]), tuple(float(v) for v in data["levels"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"not a length distribution: {exc}") from None

    # -- moments and tail
    def _segments(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        v = np.array(self.values)
        return v[:-1], v[1:], np.diff(np.array(self.levels))

    @property
    def mean(self) -> float:
        lo, hi, mass = self._segments()
        return float(np.sum(mass * (lo + hi) / 2.0))

    @property
    def second_moment(self) -> float:
        lo, hi, mass = self._segments()
        return float(np.sum(mass * (lo * lo + lo * hi + hi * hi) / 3.0))

    @property
    def variance(self) -> float:
        return max(self.second_moment - self.mean**2, 0.0)

    def quantile(self, level: float) -> float:
        return float(np.interp(level, self.levels, self.values))

    def rounded(self, step: float = ROUND_STEP) -> TokenLengths:
        """The distribution read at :data:`ROUND_LEVELS`, each value rounded to a grid of relative
        ``step`` (2 %): the same distribution for the model to within ``step``, and the same value from one
        cycle to the next while the traffic does not change (so memoised sizings are reused)."""
        values = np.interp(np.array(ROUND_LEVELS), self.levels, self.values)
        return TokenLengths(tuple(_round_log(values, step).tolist()), ROUND_LEVELS)

    def knots(self) -> tuple[FloatArray, FloatArray]:
        """``(values, levels)`` with values made strictly increasing (a point mass becomes a segment a
        few ulps wide), as interpolation needs."""
        v = np.array(self.values, dtype=float)
        for k in range(1, len(v)):
            if v[k] <= v[k - 1]:
                v[k] = v[k - 1] * (1.0 + 1e-12) + 1e-12
        return v, np.array(self.levels, dtype=float)


@dataclass(frozen=True, slots=True)
class RequestLengths:
    """Prompt (input) and output token distributions of a model's requests (taken as independent)."""

    input: TokenLengths
    output: TokenLengths

    @classmethod
    def from_means(cls, avg_input: float, avg_output: float) -> RequestLengths:
        """What is assumed when only the means are known: exponential lengths (the analyzer's chain has
        exponential service times), which errs on the safe side for most real length distributions."""
        return cls(TokenLengths.exponential(avg_input), TokenLengths.exponential(max(avg_output, 1.0)))

    def rounded(self, step: float = ROUND_STEP) -> RequestLengths:
        return RequestLengths(self.input.rounded(step), self.output.rounded(step))

    def to_json(self) -> dict[str, Any]:
        return {"input": self.input.to_json(), "output": self.output.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RequestLengths:
        try:
            return cls(TokenLengths.from_json(data["input"]), TokenLengths.from_json(data["output"]))
        except (KeyError, TypeError) as exc:
            raise ModelError(f"not request lengths: {exc}") from None


# ---- burstiness -------------------------------------------------------------------------------------


def index_of_dispersion(counts: Sequence[float] | FloatArray, *, detrend: bool = True) -> float:
    """The index of dispersion (variance / mean) of arrival counts over consecutive equal windows.

    ``detrend`` (default) estimates the variance from successive differences,
    ``mean((c[k+1] − c[k])²) / 2`` (an Allan variance), so that a slow rise or fall of the rate over the
    observation does not count as burstiness: that is the forecast's business. A Poisson process gives
    1 either way. Fewer than two windows, or no arrivals, give 1 (nothing says otherwise).
    """
    c = np.asarray(counts, dtype=float)
    if c.size < 2 or not np.all(np.isfinite(c)):
        return 1.0
    mean = float(c.mean())
    if mean <= 0.0:
        return 1.0
    var = float(np.mean(np.diff(c) ** 2)) / 2.0 if detrend else float(c.var(ddof=1))
    return min(max(var / mean, IDC_RANGE[0]), IDC_RANGE[1])


@dataclass(frozen=True, slots=True)
class IdcCurve:
    """:meth:`Burstiness.at` over arrays of windows (s), unclipped: linear in log(window) between the
    measured windows, their last value above, ``1 + (IDC(w₀) − 1)·(t/w₀)ᵖ`` below the first."""

    log_windows: FloatArray
    values: FloatArray
    first: float
    power: float

    def __call__(self, window_s: FloatArray) -> FloatArray:
        t = np.maximum(window_s, 0.0)
        inside = np.interp(np.log(np.maximum(t, self.first * 1e-9)), self.log_windows, self.values)
        below = 1.0 + (self.values[0] - 1.0) * (np.minimum(t, self.first) / self.first) ** self.power
        out: FloatArray = np.where(t < self.first, below, inside)
        return out


@dataclass(frozen=True, slots=True)
class Burstiness:
    """The index of dispersion (IDC) of a model's arrival counts over windows of ``windows_s`` seconds,
    measured while its arrival rate was ``rate`` req/s (0: unknown).

    Empty means Poisson (IDC 1 at every scale). :meth:`at` reads it at any window: between measured
    windows linearly in log(window); below the smallest, from 1 at a window of 0 as a power of the window,
    ``1 + (IDC(w₀) − 1)·(t/w₀)ᵖ`` (:meth:`short_exponent`); above the largest, the largest window's value.
    :meth:`split` gives the burstiness one of several replicas sees.
    """

    windows_s: tuple[float, ...] = ()
    idc: tuple[float, ...] = ()
    rate: float = 0.0

    def __post_init__(self) -> None:
        if len(self.windows_s) != len(self.idc):
            raise ModelError("burstiness needs one IDC per window")
        if any(b <= a for a, b in itertools.pairwise(self.windows_s)):
            raise ModelError("burstiness windows must increase strictly")
        for w in self.windows_s:
            _number("a burstiness window", w, 1e-9)
        for v in self.idc:
            _number("an index of dispersion", v)
        _number("the measured rate", self.rate)

    @classmethod
    def poisson(cls) -> Burstiness:
        return cls()

    def short_exponent(self) -> float:
        """``p`` of the IDC below the smallest window, ``1 + (IDC(w₀) − 1)·(t/w₀)ᵖ``: the slope in log-log
        of ``IDC − 1`` between the two smallest windows, within ``[1/IDC(w_max), 1]``.

        A modulated Poisson process (a rate that moves over seconds) has ``IDC − 1`` growing linearly in
        the window below its switching time: its curve still climbs between the smallest windows, and
        ``p`` is 1. Arrivals that cluster within less than the smallest window (a renewal stream with
        gaps of CV > 1, requests fired in bunches) have a curve already flat there; below it ``IDC − 1``
        falls like ``t^(1/CV²)`` for gamma gaps, and a renewal stream's IDC over long windows is its
        CV², whence the floor ``1/IDC(w_max)``. One window, or an IDC at or under 1: linear (``p = 1``).
        """
        w, v = self.windows_s, self.idc
        if len(w) < 2 or v[0] <= 1.0 or v[1] <= 1.0:
            return 1.0
        slope = math.log((v[1] - 1.0) / (v[0] - 1.0)) / math.log(w[1] / w[0])
        return min(max(slope, 1.0 / max(v[-1], 1.0), SHORT_EXPONENT_MIN), 1.0)

    def curve(self) -> IdcCurve | None:
        """The IDC as a function of the window, its knots computed once (None: Poisson)."""
        if not self.windows_s:
            return None
        w = np.array(self.windows_s)
        return IdcCurve(np.log(w), np.array(self.idc), float(w[0]), self.short_exponent())

    def at(self, window_s: float) -> float:
        """The IDC at a window of ``window_s`` seconds (clipped to a sane range)."""
        curve = self.curve()
        if curve is None:
            return 1.0
        value = float(curve(np.array([window_s]))[0])
        return min(max(value, IDC_RANGE[0]), IDC_RANGE[1])

    def split(self, rate: float) -> Burstiness:
        """What a replica receiving ``rate`` req/s of this stream sees, if requests are spread at random:
        a thinned process keeps the relative variance of the rate, so ``IDC − 1`` scales with the share."""
        if not self.windows_s or self.rate <= 0 or rate >= self.rate:
            return self
        share = max(rate, 0.0) / self.rate
        return Burstiness(self.windows_s, tuple(1.0 + share * (v - 1.0) for v in self.idc), rate)

    def rounded(self, step: float = ROUND_STEP) -> Burstiness:
        """The same burstiness to within ``step`` for the rate and ``2.5 × step`` for the indices (an
        index of dispersion read from ten minutes of counts is no more precise than that; 1 stays 1):
        see :meth:`Workload.rounded`."""
        if not self.windows_s:
            return self
        idc = _round_log(np.array(self.idc), 2.5 * step)
        rate = float(_round_log(np.array([self.rate]), step)[0])
        return Burstiness(self.windows_s, tuple(float(f"{v:.6g}") for v in idc), float(f"{rate:.6g}"))

    def to_json(self) -> dict[str, Any]:
        return {"windows_s": list(self.windows_s), "idc": list(self.idc), "rate": self.rate}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Burstiness:
        try:
            return cls(
                tuple(float(w) for w in data["windows_s"]),
                tuple(float(v) for v in data["idc"]),
                float(data.get("rate", 0.0)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ModelError(f"not a burstiness: {exc}") from None


def burstiness_from_times(
    times_s: Sequence[float] | FloatArray,
    windows_s: Sequence[float] = (1.0, 5.0, 15.0, 60.0),
    *,
    detrend: bool = True,
) -> Burstiness:
    """The IDC of the arrival times ``times_s`` (seconds, sorted) at each window that fits at least four
    times in their span (the simulator and benchmarks know every arrival; the operator reads counts from
    Prometheus, see :mod:`variant_autoscaler.adapters.burstiness`)."""
    t = np.asarray(times_s, dtype=float)
    if t.size < 2:
        return Burstiness()
    span = float(t[-1] - t[0])
    windows, values = [], []
    for w in windows_s:
        if w <= 0 or span < 4 * w:
            continue
        counts = np.bincount(((t - t[0]) // w).astype(np.int64))[: int(span // w)]
        windows.append(float(w))
        values.append(index_of_dispersion(counts.astype(float), detrend=detrend))
    return Burstiness(tuple(windows), tuple(values), (t.size - 1) / span if span > 0 else 0.0)


def burstiness_from_counter(
    times_s: Sequence[float] | FloatArray,
    values: Sequence[float] | FloatArray,
    windows_s: Sequence[float],
    *,
    lookback_s: float,
) -> Burstiness:
    """The burstiness a Prometheus server computes from the samples of a cumulative request counter
    (:mod:`variant_autoscaler.adapters.burstiness`' queries): for each window ``w``, the increases over
    ``w`` read every ``w`` over the last ``lookback_s`` seconds, their index of dispersion from successive
    differences, and the rate over the look-back. ``times_s`` ascending (the scrape times), ``values`` the
    counter there. A window is left out when fewer than four increases fit in the look-back or the
    samples are too sparse to read it."""
    t = np.asarray(times_s, dtype=float)
    c = np.asarray(values, dtype=float)
    if t.size < 2 or t.size != c.size:
        return Burstiness()
    end = float(t[-1])
    start = end - lookback_s
    first = int(np.searchsorted(t, start))
    if first >= t.size - 1:
        return Burstiness()
    span = end - float(t[first])
    rate = (float(c[-1]) - float(c[first])) / span if span > 0 else 0.0
    windows, idcs = [], []
    for w in windows_s:
        k = int(lookback_s // w)
        if not w > 0 or k < 4:
            continue
        # Read the counter at end, end - w, ..., end - k·w: the last sample at or before each point.
        points = end - w * np.arange(k, -1, -1, dtype=float)
        idx = np.searchsorted(t, points, side="right") - 1
        if idx[0] < 0 or len(np.unique(idx)) < len(idx):
            continue  # a window shorter than the scrape interval, or samples missing in the look-back
        counts = np.diff(c[idx])
        windows.append(float(w))
        idcs.append(index_of_dispersion(np.maximum(counts, 0.0)))
    return Burstiness(tuple(windows), tuple(idcs), max(rate, 0.0))


#: vLLM's token budget per engine step (``--max-num-batched-tokens``), its default for online serving:
#: a chunked prefill fits this many prompt tokens, less the decodes, into one step.
DEFAULT_PREFILL_BUDGET = 2048


@dataclass(frozen=True, slots=True)
class Workload:
    """A model's requests as the tail model reads them beyond their rate and mean lengths: the length
    distribution and the arrival burstiness, each None when unknown (then the tail model assumes
    exponential lengths with the load's means, and Poisson arrivals); and how its servers prefill a
    prompt: ``chunked_prefill`` (vLLM V1: inside one step beside the running decodes) or not (WVA's
    accounting: at the pace of the whole batch), and when chunked, ``prefill_budget``, the tokens one
    step holds (vLLM's ``--max-num-batched-tokens``)."""

    lengths: RequestLengths | None = None
    burstiness: Burstiness | None = None
    chunked_prefill: bool = False
    prefill_budget: int = DEFAULT_PREFILL_BUDGET

    def rounded(self, step: float = ROUND_STEP) -> Workload:
        """Lengths and burstiness on a grid of relative ``step``: what the planner sizes with, so that a
        cycle whose traffic did not change reuses the previous cycle's sizings."""
        return Workload(
            self.lengths.rounded(step) if self.lengths is not None else None,
            self.burstiness.rounded(step) if self.burstiness is not None else None,
            self.chunked_prefill,
            self.prefill_budget,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "lengths": self.lengths.to_json() if self.lengths is not None else None,
            "burstiness": self.burstiness.to_json() if self.burstiness is not None else None,
            "chunkedPrefill": self.chunked_prefill,
            "prefillBudget": self.prefill_budget,
        }
