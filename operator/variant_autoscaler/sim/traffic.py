"""Traffic for the simulator: rate profiles, request-length distributions, arrivals and trace replay.

A model's traffic is either *generated* (a rate profile in requests per second over simulated time, an
arrival process and two token-length distributions) or *replayed* from a trace (timestamp, input
tokens, output tokens: CSV with a header, or JSON lines such as Mooncake's), optionally at a multiple of
its rate (:attr:`TraceTraffic.rate_scale`: superposed time-shifted copies, which keep its shape).
Either way it becomes an :class:`Arrivals`: sorted arrival times in seconds from the start of the
simulation with the token counts of every request, generated once per scenario so every policy sees
exactly the same requests.

Arrival times of a non-homogeneous Poisson process are drawn by time change: unit-rate points
``s_1 < s_2 < …`` are mapped through the inverse of the cumulative rate ``Λ(t) = ∫₀ᵗ rate``. Every profile
gives ``Λ`` in closed form, so the expected number of requests in ``[a, b)`` is exactly ``Λ(b) − Λ(a)``.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

import numpy as np
import numpy.typing as npt

from variant_autoscaler.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

__all__ = [
    "Arrivals",
    "Constant",
    "Diurnal",
    "Empirical",
    "FixedLength",
    "FlashCrowd",
    "GeneratedTraffic",
    "LengthDistribution",
    "LogNormalLength",
    "RateProfile",
    "Step",
    "Sum",
    "TraceTraffic",
    "UniformLength",
    "generate_arrivals",
    "longer_than",
    "read_trace",
    "rng_for",
]


# --------------------------------------------------------------------------------------------- rates


class RateProfile(Protocol):
    """Arrival rate over simulated time, in requests per second."""

    def rate(self, t: FloatArray) -> FloatArray:
        """The instantaneous rate at each time in ``t`` (seconds)."""
        ...

    def cumulative(self, t: FloatArray) -> FloatArray:
        """``Λ(t) = ∫₀ᵗ rate(u) du``: the expected number of arrivals in ``[0, t)``."""
        ...

    def peak(self, horizon: float) -> float:
        """The largest rate reached in ``[0, horizon]``."""
        ...


def _check_rate(name: str, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name} must be a finite rate >= 0 requests/s, got {value!r}")


@dataclass(frozen=True, slots=True)
class Constant:
    """A constant rate."""

    rps: float

    def __post_init__(self) -> None:
        _check_rate("constant.rps", self.rps)

    def rate(self, t: FloatArray) -> FloatArray:
        return np.full_like(t, self.rps, dtype=np.float64)

    def cumulative(self, t: FloatArray) -> FloatArray:
        return self.rps * np.asarray(t, dtype=np.float64)

    def peak(self, horizon: float) -> float:
        return self.rps


@dataclass(frozen=True, slots=True)
class Diurnal:
    """A daily cycle: ``low + (high − low)·(1 − cos(2π(t − phase)/period))/2``.

    At ``t = phase`` the rate is at its trough ``low``; half a period later it peaks at ``high``. A
    compressed "day" (``period`` of a few hours) keeps simulations short while keeping the shape.
    """

    low_rps: float
    high_rps: float
    period_s: float = 86_400.0
    phase_s: float = 0.0

    def __post_init__(self) -> None:
        _check_rate("diurnal.low_rps", self.low_rps)
        _check_rate("diurnal.high_rps", self.high_rps)
        if self.high_rps < self.low_rps:
            raise ConfigError("diurnal.high_rps must be >= diurnal.low_rps")
        if not self.period_s > 0:
            raise ConfigError("diurnal.period_s must be > 0")

    def rate(self, t: FloatArray) -> FloatArray:
        w = 2.0 * math.pi / self.period_s
        amp = self.high_rps - self.low_rps
        return self.low_rps + amp * (1.0 - np.cos(w * (np.asarray(t, dtype=np.float64) - self.phase_s))) / 2.0

    def cumulative(self, t: FloatArray) -> FloatArray:
        w = 2.0 * math.pi / self.period_s
        amp = self.high_rps - self.low_rps
        tt = np.asarray(t, dtype=np.float64)
        sin_part = (np.sin(w * (tt - self.phase_s)) - math.sin(-w * self.phase_s)) / w
        return self.low_rps * tt + amp * (tt - sin_part) / 2.0

    def peak(self, horizon: float) -> float:
        grid = np.linspace(0.0, horizon, 4097)
        return float(np.max(self.rate(grid)))


@dataclass(frozen=True, slots=True)
class Step:
    """A piecewise-constant rate: ``rps[i]`` from ``at_s[i]`` until ``at_s[i+1]`` (0 before ``at_s[0]``)."""

    at_s: tuple[float, ...]
    rps: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.at_s or len(self.at_s) != len(self.rps):
            raise ConfigError("step needs as many change times (at_s) as rates (rps), at least one")
        if any(b <= a for a, b in zip(self.at_s, self.at_s[1:], strict=False)):
            raise ConfigError("step change times must be strictly increasing")
        if self.at_s[0] < 0:
            raise ConfigError("step change times must be >= 0")
        for value in self.rps:
            _check_rate("step.rps", value)

    def rate(self, t: FloatArray) -> FloatArray:
        tt = np.asarray(t, dtype=np.float64)
        idx = np.searchsorted(np.asarray(self.at_s), tt, side="right") - 1
        values = np.concatenate(([0.0], np.asarray(self.rps, dtype=np.float64)))
        result: FloatArray = values[idx + 1]
        return result

    def cumulative(self, t: FloatArray) -> FloatArray:
        at = np.asarray(self.at_s, dtype=np.float64)
        rps = np.asarray(self.rps, dtype=np.float64)
        # Λ at every change time, then linear within the segment.
        seg = np.diff(at) * rps[:-1]
        lam_at = np.concatenate(([0.0], np.cumsum(seg)))
        tt = np.asarray(t, dtype=np.float64)
        idx = np.searchsorted(at, tt, side="right") - 1
        inside = idx >= 0
        safe = np.clip(idx, 0, None)
        out: FloatArray = np.where(inside, lam_at[safe] + (tt - at[safe]) * rps[safe], 0.0)
        return out

    def peak(self, horizon: float) -> float:
        live = [r for a, r in zip(self.at_s, self.rps, strict=True) if a <= horizon]
        return max(live, default=0.0)


@dataclass(frozen=True, slots=True)
class FlashCrowd:
    """A flash crowd on top of a base rate: from ``start_s`` the extra rate ramps linearly to
    ``extra_rps`` over ``rise_s``, holds for ``hold_s``, then decays exponentially with time constant
    ``decay_s``. ``base_rps`` is constant throughout."""

    base_rps: float
    extra_rps: float
    start_s: float
    rise_s: float = 60.0
    hold_s: float = 600.0
    decay_s: float = 300.0

    def __post_init__(self) -> None:
        _check_rate("flash.base_rps", self.base_rps)
        _check_rate("flash.extra_rps", self.extra_rps)
        if self.start_s < 0 or self.rise_s < 0 or self.hold_s < 0 or self.decay_s <= 0:
            raise ConfigError("flash crowd times must be >= 0 (decay_s > 0)")

    def _extra(self, tt: FloatArray) -> FloatArray:
        x = tt - self.start_s
        rise = self.rise_s
        ramp = np.clip(x / rise, 0.0, 1.0) if rise > 0 else np.ones_like(x)
        hold_end = rise + self.hold_s
        decay = np.exp(-np.clip(x - hold_end, 0.0, None) / self.decay_s)
        shape = np.where(x < 0, 0.0, np.where(x < hold_end, ramp, decay))
        result: FloatArray = self.extra_rps * shape
        return result

    def rate(self, t: FloatArray) -> FloatArray:
        tt = np.asarray(t, dtype=np.float64)
        return self.base_rps + self._extra(tt)

    def cumulative(self, t: FloatArray) -> FloatArray:
        tt = np.asarray(t, dtype=np.float64)
        x = np.clip(tt - self.start_s, 0.0, None)
        rise = self.rise_s
        hold_end = rise + self.hold_s
        # ∫ of the extra shape from 0 to x, piecewise.
        xr = np.minimum(x, rise)
        ramp_area = xr * xr / (2.0 * rise) if rise > 0 else np.zeros_like(x)
        hold_area = np.clip(np.minimum(x, hold_end) - rise, 0.0, None)
        xd = np.clip(x - hold_end, 0.0, None)
        decay_area = self.decay_s * (1.0 - np.exp(-xd / self.decay_s))
        result: FloatArray = self.base_rps * tt + self.extra_rps * (ramp_area + hold_area + decay_area)
        return result

    def peak(self, horizon: float) -> float:
        if horizon < self.start_s:
            return self.base_rps
        reached = min(1.0, (horizon - self.start_s) / self.rise_s) if self.rise_s > 0 else 1.0
        return self.base_rps + self.extra_rps * reached


@dataclass(frozen=True, slots=True)
class Sum:
    """The sum of several profiles (e.g. a diurnal cycle plus a flash crowd)."""

    parts: tuple[RateProfile, ...]

    def __post_init__(self) -> None:
        if not self.parts:
            raise ConfigError("a sum of rate profiles needs at least one part")

    def rate(self, t: FloatArray) -> FloatArray:
        total = np.zeros_like(np.asarray(t, dtype=np.float64))
        for part in self.parts:
            total = total + part.rate(t)
        return total

    def cumulative(self, t: FloatArray) -> FloatArray:
        total = np.zeros_like(np.asarray(t, dtype=np.float64))
        for part in self.parts:
            total = total + part.cumulative(t)
        return total

    def peak(self, horizon: float) -> float:
        grid = np.linspace(0.0, horizon, 8193)
        return float(np.max(self.rate(grid)))


# ------------------------------------------------------------------------------------------- lengths


class LengthDistribution(Protocol):
    """A distribution of token counts (>= 1)."""

    def sample(self, rng: np.random.Generator, n: int) -> IntArray: ...

    def mean(self) -> float:
        """The distribution's mean (before any clipping the sampler applies)."""
        ...


@dataclass(frozen=True, slots=True)
class FixedLength:
    tokens: int

    def __post_init__(self) -> None:
        if self.tokens < 1:
            raise ConfigError("a fixed length must be >= 1 token")

    def sample(self, rng: np.random.Generator, n: int) -> IntArray:
        return np.full(n, self.tokens, dtype=np.int64)

    def mean(self) -> float:
        return float(self.tokens)


@dataclass(frozen=True, slots=True)
class UniformLength:
    """Integers uniform on ``[low, high]`` (both included)."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if self.low < 1 or self.high < self.low:
            raise ConfigError("a uniform length needs 1 <= low <= high")

    def sample(self, rng: np.random.Generator, n: int) -> IntArray:
        return rng.integers(self.low, self.high + 1, size=n, dtype=np.int64)

    def mean(self) -> float:
        return (self.low + self.high) / 2.0


@dataclass(frozen=True, slots=True)
class LogNormalLength:
    """A long-tailed length (ShareGPT-like): log-normal with the given mean and coefficient of
    variation, rounded and clipped to ``[low, high]``."""

    mean_tokens: float
    cv: float = 1.0
    low: int = 1
    high: int = 8192

    def __post_init__(self) -> None:
        if not self.mean_tokens >= 1 or not self.cv > 0 or self.low < 1 or self.high < self.low:
            raise ConfigError("a log-normal length needs mean >= 1, cv > 0 and 1 <= low <= high")

    def sample(self, rng: np.random.Generator, n: int) -> IntArray:
        sigma2 = math.log1p(self.cv * self.cv)
        mu = math.log(self.mean_tokens) - sigma2 / 2.0
        raw = rng.lognormal(mu, math.sqrt(sigma2), size=n)
        return np.clip(np.rint(raw), self.low, self.high).astype(np.int64)

    def mean(self) -> float:
        return self.mean_tokens


@dataclass(frozen=True, slots=True)
class Empirical:
    """Lengths drawn uniformly with replacement from observed values (e.g. a trace's column)."""

    values: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.values or min(self.values) < 1:
            raise ConfigError("an empirical length needs at least one value, all >= 1")

    def sample(self, rng: np.random.Generator, n: int) -> IntArray:
        pool = np.asarray(self.values, dtype=np.int64)
        return pool[rng.integers(0, len(pool), size=n)]

    def mean(self) -> float:
        return float(np.mean(self.values))


# ------------------------------------------------------------------------------------------ arrivals


@dataclass(frozen=True, slots=True, eq=False)
class Arrivals:
    """Requests of one model: arrival times (s, sorted) and token counts, as parallel arrays."""

    times: FloatArray
    input_tokens: IntArray
    output_tokens: IntArray

    def __post_init__(self) -> None:
        n = len(self.times)
        if len(self.input_tokens) != n or len(self.output_tokens) != n:
            raise ConfigError("arrival arrays must have the same length")

    def __len__(self) -> int:
        return len(self.times)

    def window(self, start: float, end: float) -> Arrivals:
        """The requests arriving in ``[start, end)``."""
        lo, hi = np.searchsorted(self.times, [start, end], side="left")
        return Arrivals(self.times[lo:hi], self.input_tokens[lo:hi], self.output_tokens[lo:hi])

    @staticmethod
    def empty() -> Arrivals:
        return Arrivals(np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


@dataclass(frozen=True, slots=True)
class GeneratedTraffic:
    """Synthetic traffic of one model.

    ``burstiness`` is the coefficient of variation of the gaps between arrivals in the time-changed
    scale: 1 is a Poisson process, above 1 clusters arrivals (gamma-distributed gaps), below 1 smooths
    them. The expected count over any interval is ``Λ(b) − Λ(a)`` whatever the burstiness.
    """

    rate: RateProfile
    input_tokens: LengthDistribution
    output_tokens: LengthDistribution
    burstiness: float = 1.0

    def __post_init__(self) -> None:
        if not self.burstiness > 0:
            raise ConfigError("burstiness must be > 0")

    def arrivals(self, rng: np.random.Generator, duration: float) -> Arrivals:
        return generate_arrivals(self, rng, duration)


@dataclass(frozen=True, slots=True)
class TraceTraffic:
    """Requests replayed from a trace: times are shifted so the first request arrives at ``offset_s``,
    divided by ``speedup`` (2 replays the trace twice as fast, doubling its rate).

    ``rate_scale`` multiplies the rate *without* compressing time: the trace is superposed with copies of
    itself, each shifted in time by a random offset of up to ``scale_window_s`` either way (wrapping
    around the trace's span), and the fractional part is a copy thinned at random; below 1 the trace
    itself is thinned. The rate over any stretch longer than the window is scaled while bursts within
    each copy stay bursts. Copies are drawn from the scenario's seed.
    """

    arrivals_in_trace: Arrivals = field(repr=False)
    source: str = ""
    speedup: float = 1.0
    offset_s: float = 0.0
    rate_scale: float = 1.0
    scale_window_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.speedup > 0:
            raise ConfigError("trace speedup must be > 0")
        if not 0 < self.rate_scale <= 1000 or not math.isfinite(self.rate_scale):
            raise ConfigError("trace rateScale must be in (0, 1000]")
        if not self.scale_window_s > 0:
            raise ConfigError("trace scaleWindow must be > 0")

    @property
    def end_s(self) -> float:
        """When the replayed trace's last request arrives (seconds of simulated time)."""
        src = self.arrivals_in_trace
        if len(src) == 0:
            return self.offset_s
        return self.offset_s + float(src.times[-1] - src.times[0]) / self.speedup

    def arrivals(self, rng: np.random.Generator, duration: float) -> Arrivals:
        src = self.arrivals_in_trace
        if len(src) == 0:
            return src
        rel = (src.times - src.times[0]) / self.speedup
        if self.rate_scale != 1.0:
            src, rel = self._scaled(rng, src, rel)
        times = self.offset_s + rel
        keep = times < duration
        return Arrivals(times[keep], src.input_tokens[keep], src.output_tokens[keep])

    def _scaled(
        self, rng: np.random.Generator, src: Arrivals, rel: FloatArray
    ) -> tuple[Arrivals, FloatArray]:
        span = float(rel[-1]) if len(rel) else 0.0
        period = span + (span / max(len(rel) - 1, 1))  # wrap with one mean gap between end and start
        whole, frac = divmod(self.rate_scale, 1.0)
        parts: list[tuple[FloatArray, IntArray, IntArray]] = []
        for copy in range(int(whole) + (1 if frac > 1e-12 else 0)):
            times = rel if copy == 0 else (rel + rng.uniform(-1.0, 1.0) * self.scale_window_s) % period
            ins, outs = src.input_tokens, src.output_tokens
            if copy == int(whole):  # the fractional copy (the original itself when the scale is < 1)
                keep = rng.uniform(size=len(times)) < frac
                times, ins, outs = times[keep], ins[keep], outs[keep]
            parts.append((times, ins, outs))
        times = np.concatenate([p[0] for p in parts])
        order = np.argsort(times, kind="stable")
        merged = Arrivals(
            times[order],
            np.concatenate([p[1] for p in parts])[order],
            np.concatenate([p[2] for p in parts])[order],
        )
        return merged, merged.times


def longer_than(arrivals: Arrivals, limit: int) -> int:
    """How many requests need more than ``limit`` tokens (prompt + output): a replica rejects them."""
    return int(np.count_nonzero(arrivals.input_tokens + arrivals.output_tokens > limit))


MAX_DURATION_S = 31 * 86400.0
"""The longest span a scenario may simulate (a month): longer runs are a typo, not a study."""
MAX_REQUESTS = 50_000_000
"""The most requests one model may bring to a run (about 3 GB of arrays): more is refused, not swapped."""


def generate_arrivals(traffic: GeneratedTraffic, rng: np.random.Generator, duration: float) -> Arrivals:
    """Draw the requests of ``traffic`` over ``[0, duration)``."""
    if not duration > 0:
        return Arrivals.empty()
    if duration > MAX_DURATION_S:
        raise ConfigError(f"a run of {duration:g} s is longer than the simulator's limit of 31 days")
    # Λ on a 1-second grid (exact values: every profile integrates in closed form); within a grid
    # cell arrivals are placed by linear interpolation of Λ.
    step = min(1.0, duration / 16.0)
    grid = np.append(np.arange(0.0, duration, step), duration)
    lam = traffic.rate.cumulative(grid)
    lam = np.maximum.accumulate(lam - lam[0])
    total = float(lam[-1])
    if total <= 0:
        return Arrivals.empty()
    if total > MAX_REQUESTS:
        raise ConfigError(
            f"the traffic would bring about {total:.3g} requests in {duration:g} s; the simulator's limit "
            f"is {MAX_REQUESTS:,} per model (lower the rate or the duration)"
        )
    cv = traffic.burstiness
    if cv == 1.0:
        n = int(rng.poisson(total))
        points = np.sort(rng.uniform(0.0, total, size=n))
    else:
        shape = 1.0 / (cv * cv)
        # A stationary renewal process: the first point is the forward recurrence time (a
        # length-biased gap, gamma(shape+1), times a uniform), so t = 0 is not special.
        start = float(rng.gamma(shape + 1.0, 1.0 / shape) * rng.uniform(0.0, 1.0))
        chunks: list[FloatArray] = [np.array([start])]
        reached = start
        while reached < total:
            gaps = rng.gamma(shape, 1.0 / shape, size=max(64, int((total - reached) * 1.1) + 64))
            pts = reached + np.cumsum(gaps)
            chunks.append(pts)
            reached = float(pts[-1])
        allp = np.concatenate(chunks)
        points = allp[allp < total]
    times = np.interp(points, lam, grid)
    # Guard against float rounding at the right edge.
    times = np.minimum(times, np.nextafter(duration, 0.0))
    n = len(times)
    return Arrivals(
        times.astype(np.float64),
        traffic.input_tokens.sample(rng, n),
        traffic.output_tokens.sample(rng, n),
    )


def rng_for(seed: int, name: str) -> np.random.Generator:
    """An independent, reproducible random stream per (scenario seed, model name): adding a model to a
    scenario does not change the requests of the others."""
    return np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(name.encode())]))


# --------------------------------------------------------------------------------------------- trace

_TIME_COLUMNS = ("timestamp", "time", "arrival_time", "ts")
_INPUT_COLUMNS = ("input_tokens", "contexttokens", "request tokens", "prompt_tokens", "input_length")
_OUTPUT_COLUMNS = (
    "output_tokens",
    "generatedtokens",
    "response tokens",
    "completion_tokens",
    "output_length",
)


def _pick(
    header: Sequence[str],
    wanted: str | None,
    candidates: Sequence[str],
    what: str,
    *,
    where: str = "trace",
    kind: str = "column",
) -> int:
    norm = [h.strip().lower() for h in header]
    if wanted is not None:
        key = wanted.strip().lower()
        if key not in norm:
            raise ConfigError(f"{where} has no {kind} {wanted!r} ({kind}s: {', '.join(header)})")
        return norm.index(key)
    for cand in candidates:
        if cand in norm:
            return norm.index(cand)
    raise ConfigError(
        f"{where} has no {what} {kind} (looked for {', '.join(candidates)}; {kind}s: {', '.join(header)}); "
        f"name it with the trace's column options"
    )


def _parse_time(raw: object, line: int) -> tuple[float, bool]:
    """The timestamp in seconds, and whether it was a date-time (already in seconds)."""
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        if not math.isfinite(raw):
            raise ConfigError(f"trace line {line}: timestamp {raw!r} is not a finite number")
        return float(raw), False
    if not isinstance(raw, str):
        raise ConfigError(f"trace line {line}: timestamp {raw!r} is neither a number nor ISO-8601")
    text = raw.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise ConfigError(f"trace line {line}: timestamp {raw!r} is not a finite number")
        return value, False
    # ISO-8601 date-times, including the Azure LLM traces' 7-digit fractions ("…46.6805900").
    head, dot, frac = text.partition(".")
    try:
        base = dt.datetime.fromisoformat(head.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"trace line {line}: timestamp {raw!r} is neither seconds nor ISO-8601") from None
    if base.tzinfo is None:
        base = base.replace(tzinfo=dt.UTC)
    extra = 0.0
    if dot:
        digits = "".join(ch for ch in frac if ch.isdigit())
        if digits:
            extra = int(digits) / 10 ** len(digits)
    return base.timestamp() + extra, True


def read_trace(
    path: Path | str,
    *,
    time_column: str | None = None,
    input_column: str | None = None,
    output_column: str | None = None,
    time_unit_s: float | None = None,
) -> Arrivals:
    """Read a trace: CSV with a header row, or JSON lines (one object per request).

    Columns (fields) are found by name (case-insensitive): a timestamp (``timestamp``, ``time``, … or
    the name given), input tokens (``input_tokens``, Azure's ``ContextTokens``, BurstGPT's ``Request
    tokens``, Mooncake's ``input_length``, …) and output tokens (``output_tokens``, ``GeneratedTokens``,
    ``Response tokens``, ``output_length``, …). Timestamps are numbers (multiplied by ``time_unit_s``:
    default 1 for CSV, 0.001 for JSON lines, whose Mooncake traces count milliseconds) or ISO-8601
    date-times. A file is read as JSON lines when its name ends in ``.jsonl`` or ``.ndjson`` or its first
    non-blank character is ``{``. Rows are sorted by time and made relative to the first. Rows with zero
    output tokens are kept with one output token (a request always produces at least one). Malformed
    rows raise ``ConfigError`` naming the line.
    """
    p = Path(path)
    try:
        handle = p.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read trace {p}: {exc.strerror or exc}") from None
    with handle:
        try:
            head = handle.read(4096)
        except UnicodeDecodeError:
            raise ConfigError(f"trace {p} is not UTF-8 text (a CSV or JSON-lines file)") from None
        handle.seek(0)
        jsonl = p.suffix.lower() in (".jsonl", ".ndjson") or head.lstrip().startswith("{")
        picks = (time_column, input_column, output_column)
        try:
            if jsonl:
                rows = _jsonl_rows(p, handle, picks)
                unit = 0.001 if time_unit_s is None else time_unit_s
            else:
                rows = _csv_rows(p, handle, picks)
                unit = 1.0 if time_unit_s is None else time_unit_s
            times, ins, outs, dated = _collect(p, rows)
        except UnicodeDecodeError as exc:
            raise ConfigError(f"trace {p} is not UTF-8 text: {exc.reason}") from None
        except csv.Error as exc:
            raise ConfigError(f"trace {p} is not a readable CSV file: {exc}") from None
    if not times:
        # A header and no rows: a run on it would report 100 % attainment of nothing.
        raise ConfigError(f"trace {p} has no requests")
    t = np.asarray(times, dtype=np.float64) * (1.0 if dated else unit)
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0]
    return Arrivals(
        t,
        np.asarray(ins, dtype=np.int64)[order],
        np.asarray(outs, dtype=np.int64)[order],
    )


_Row = tuple[int, object, object, object]  # (line, timestamp, input tokens, output tokens)


def _csv_rows(p: Path, handle: TextIO, picks: tuple[str | None, ...]) -> Iterator[_Row]:
    reader = csv.reader(handle)
    try:
        header = next(reader)
    except StopIteration:
        raise ConfigError(f"trace {p} is empty") from None
    ti = _pick(header, picks[0], _TIME_COLUMNS, "timestamp")
    ii = _pick(header, picks[1], _INPUT_COLUMNS, "input-token")
    oi = _pick(header, picks[2], _OUTPUT_COLUMNS, "output-token")
    width = max(ti, ii, oi) + 1
    for line, row in enumerate(reader, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) < width:
            raise ConfigError(f"trace {p} line {line}: expected at least {width} columns, got {len(row)}")
        yield line, row[ti], row[ii], row[oi]


def _jsonl_rows(p: Path, handle: TextIO, picks: tuple[str | None, ...]) -> Iterator[_Row]:
    keys: tuple[str, str, str] | None = None
    for line, text in enumerate(handle, start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"trace {p} line {line}: not a JSON object ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise ConfigError(
                f"trace {p} line {line}: expected a JSON object per line, got {type(obj).__name__}"
            )
        if keys is None:
            fields = [str(k) for k in obj]
            where = f"trace {p} line {line}"
            keys = (
                fields[_pick(fields, picks[0], _TIME_COLUMNS, "timestamp", where=where, kind="field")],
                fields[_pick(fields, picks[1], _INPUT_COLUMNS, "input-token", where=where, kind="field")],
                fields[_pick(fields, picks[2], _OUTPUT_COLUMNS, "output-token", where=where, kind="field")],
            )
        missing = [k for k in keys if k not in obj]
        if missing:
            raise ConfigError(f"trace {p} line {line}: missing field {missing[0]!r}")
        yield line, obj[keys[0]], obj[keys[1]], obj[keys[2]]


def _collect(p: Path, rows: Iterator[_Row]) -> tuple[list[float], list[int], list[int], bool]:
    times: list[float] = []
    ins: list[int] = []
    outs: list[int] = []
    dated = False
    for line, raw_t, raw_in, raw_out in rows:
        ts, is_date = _parse_time(raw_t, line)
        if times and is_date != dated:
            raise ConfigError(f"trace {p} line {line}: timestamps mix numbers and date-times")
        dated = is_date
        n_in, n_out = _tokens(raw_in), _tokens(raw_out)
        if n_in is None or n_out is None:
            raise ConfigError(f"trace {p} line {line}: token counts must be integers")
        if n_in < 0 or n_out < 0:
            raise ConfigError(f"trace {p} line {line}: token counts must be >= 0")
        times.append(ts)
        ins.append(n_in)
        outs.append(max(1, n_out))
        if len(times) > MAX_REQUESTS:
            raise ConfigError(f"trace {p} has more than {MAX_REQUESTS:,} requests, the simulator's limit")
    return times, ins, outs, dated


def _tokens(raw: object) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    try:
        value = float(raw) if isinstance(raw, float | str) else math.nan
    except ValueError:
        return None
    return int(value) if math.isfinite(value) else None
