"""What the tail model needs to know about a model's requests, beyond their rate and mean lengths.

* :class:`TokenLengths`: the distribution of prompt or output tokens per request, as a piecewise-linear
  CDF (the way Prometheus' ``histogram_quantile`` reads a histogram); :class:`RequestLengths` pairs them.
* :class:`Burstiness`: the index of dispersion of arrival counts over a few window lengths;
  :func:`index_of_dispersion` computes it from counts, :func:`burstiness_from_times` from arrival times.

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
    "RequestLengths",
    "TokenLengths",
    "burstiness_from_times",
    "index_of_dispersion",
]

FloatArray = npt.NDArray[np.float64]

#: Cumulative probabilities at which a length distribution is summarised: dense in the upper tail,
#: where the long prompts that miss TTFT targets live.
DEFAULT_LEVELS: tuple[float, ...] = (
    0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1.0,
)  # fmt: skip
#: IDC values are clipped to this range: below, counts would be nearly deterministic; above, the
#: stationary model means little (a forecast should carry such swings, not the queue).
IDC_RANGE = (0.05, 1000.0)


def _number(name: str, value: object, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not minimum <= value < math.inf:
        raise ModelError(f"{name} must be a finite number >= {minimum:g}, got {value!r}")
    return float(value)


# ---- request lengths ------------------------------------------------------------------------------


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
        from scipy.special import ndtri  # the normal quantile; scipy is already imported by the analyzer

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
        cls, bounds: Sequence[float], cumulative: Sequence[float], *, mean: float | None = None
    ) -> TokenLengths:
        """From a Prometheus histogram: bucket upper bounds (``le``, the last may be ``+Inf``) and the
        cumulative counts. The ``+Inf`` bucket's upper end is set so that the mean matches ``mean``
        (the histogram's ``_sum / _count``) when given, else twice the last finite bound."""
        pairs = sorted(zip((float(b) for b in bounds), (float(c) for c in cumulative), strict=True))
        if not pairs or pairs[-1][1] <= 0:
            raise ModelError("the histogram is empty")
        total = pairs[-1][1]
        values, levels = [0.0], [0.0]
        for bound, count in pairs:
            level = min(count / total, 1.0)
            if level <= levels[-1]:
                continue
            upper = bound
            if math.isinf(bound):
                last = values[-1]
                top = 2.0 * last if last > 0 else 1.0
                if mean is not None and mean > 0:
                    # mean = Σ_segments ΔF·(v_k + v_{k+1})/2: solve for the last segment's upper end.
                    known = sum(
                        (levels[k + 1] - levels[k]) * (values[k] + values[k + 1]) / 2.0
                        for k in range(len(values) - 1)
                    )
                    share = level - levels[-1]
                    top = max(last, 2.0 * (mean - known) / share - last)
                upper = top
            values.append(max(upper, values[-1]))
            levels.append(level)
        levels[-1] = 1.0  # counts that shrank between reads must not leave the CDF short of 1
        if len(values) < 2:
            raise ModelError("the histogram has no mass")
        return cls(tuple(values), tuple(levels))

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

    def to_json(self) -> dict[str, Any]:
        return {"input": self.input.to_json(), "output": self.output.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RequestLengths:
        return cls(TokenLengths.from_json(data["input"]), TokenLengths.from_json(data["output"]))


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
class Burstiness:
    """The index of dispersion (IDC) of a model's arrival counts over windows of ``windows_s`` seconds,
    measured while its arrival rate was ``rate`` req/s (0: unknown).

    Empty means Poisson (IDC 1 at every scale). :meth:`at` reads it at any window: between measured
    windows linearly in log(window); below the smallest, linearly from 1 at a window of 0 (the short-scale
    shape of a modulated Poisson process, which has no simultaneous arrivals); above the largest, the
    largest window's value. :meth:`split` gives the burstiness one of several replicas sees.
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

    def at(self, window_s: float) -> float:
        """The IDC at a window of ``window_s`` seconds (clipped to a sane range)."""
        if not self.windows_s:
            return 1.0
        w, v = self.windows_s, self.idc
        if window_s <= w[0]:
            value = 1.0 + (v[0] - 1.0) * max(window_s, 0.0) / w[0]
        elif window_s >= w[-1]:
            value = v[-1]
        else:
            value = float(np.interp(math.log(window_s), np.log(np.array(w)), np.array(v)))
        return min(max(value, IDC_RANGE[0]), IDC_RANGE[1])

    def split(self, rate: float) -> Burstiness:
        """What a replica receiving ``rate`` req/s of this stream sees, if requests are spread at random:
        a thinned process keeps the relative variance of the rate, so ``IDC − 1`` scales with the share."""
        if not self.windows_s or self.rate <= 0 or rate >= self.rate:
            return self
        share = max(rate, 0.0) / self.rate
        return Burstiness(self.windows_s, tuple(1.0 + share * (v - 1.0) for v in self.idc), rate)

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
