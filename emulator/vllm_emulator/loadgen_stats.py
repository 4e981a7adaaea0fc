"""What ``vllm-loadgen`` measures: latency recorders, per-request records and the run's summary."""

from __future__ import annotations

import array
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["LatencyRecorder", "LatencyStats", "LoadSummary", "RequestRecord"]


class LatencyRecorder:
    """Mean and percentiles of a stream of durations (seconds) in bounded memory.

    Up to ``exact_limit`` samples are kept and percentiles are exact (linear interpolation); past
    that, they come from a log-bucketed histogram with 0.25 % relative resolution.
    """

    _RATIO = 1.005
    _MIN = 1e-7

    def __init__(self, exact_limit: int = 200_000) -> None:
        self.count = 0
        self.sum = 0.0
        self._limit = exact_limit
        self._samples: array.array[float] | None = array.array("d")
        self._log_ratio = math.log(self._RATIO)
        self._buckets: dict[int, int] = {}

    def add(self, value: float) -> None:
        self.count += 1
        self.sum += value
        index = int(math.log(max(value, self._MIN) / self._MIN) / self._log_ratio)
        self._buckets[index] = self._buckets.get(index, 0) + 1
        samples = self._samples
        if samples is not None:
            if len(samples) < self._limit:
                samples.append(value)
            else:
                self._samples = None

    def percentile(self, q: float) -> float:
        if self.count == 0:
            return math.nan
        samples = self._samples
        if samples is not None:
            ordered = sorted(samples)
            pos = (len(ordered) - 1) * q
            lo = math.floor(pos)
            hi = min(lo + 1, len(ordered) - 1)
            return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
        rank = q * (self.count - 1)
        seen = 0
        for index in sorted(self._buckets):
            seen += self._buckets[index]
            if seen > rank:
                return float(self._MIN * self._RATIO ** (index + 0.5))
        return math.nan  # pragma: no cover - unreachable: the ranks add up to count

    def stats(self) -> LatencyStats | None:
        if self.count == 0:
            return None
        return LatencyStats(
            count=self.count,
            mean_ms=1000.0 * self.sum / self.count,
            p50_ms=1000.0 * self.percentile(0.50),
            p90_ms=1000.0 * self.percentile(0.90),
            p99_ms=1000.0 * self.percentile(0.99),
        )


@dataclass(frozen=True, slots=True)
class LatencyStats:
    count: int
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float

    def to_dict(self) -> dict[str, float]:
        return {
            "count": self.count,
            "mean": round(self.mean_ms, 4),
            "p50": round(self.p50_ms, 4),
            "p90": round(self.p90_ms, 4),
            "p99": round(self.p99_ms, 4),
        }


@dataclass(slots=True)
class LoadSummary:
    """The result of a run. Rates are per second of the run's wall-clock duration."""

    duration_s: float
    sent: int
    completed: int
    errors: int
    dropped: int
    unfinished: int
    prompt_tokens: int
    completion_tokens: int
    error_kinds: dict[str, int]
    ttft: LatencyStats | None
    itl: LatencyStats | None
    e2e: LatencyStats | None
    scheduled: int = 0
    window_s: float = 0.0
    """Length of the arrival schedule (the run lasts longer by the drain)."""

    @property
    def offered_rate(self) -> float:
        """Requests sent per second."""
        return self.sent / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def achieved_rate(self) -> float:
        """Requests completed successfully per second."""
        return self.completed / self.duration_s if self.duration_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        def stats(s: LatencyStats | None) -> dict[str, float] | None:
            return None if s is None else s.to_dict()

        return {
            "duration_s": round(self.duration_s, 3),
            "window_s": round(self.window_s, 3),
            "scheduled": self.scheduled,
            "sent": self.sent,
            "completed": self.completed,
            "errors": self.errors,
            "dropped": self.dropped,
            "unfinished": self.unfinished,
            "offered_rate": round(self.offered_rate, 3),
            "achieved_rate": round(self.achieved_rate, 3),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "error_kinds": dict(sorted(self.error_kinds.items())),
            "ttft_ms": stats(self.ttft),
            "itl_ms": stats(self.itl),
            "e2e_ms": stats(self.e2e),
        }


@dataclass(slots=True)
class RequestRecord:
    """One request as the generator saw it, handed to ``on_request`` when it ends.

    For per-request analyses the summary cannot give, such as the share of requests that met a TTFT and
    an ITL target, or which target served what. Times are in seconds; ``sent_at`` counts from the start
    of the run. ``ttft_s`` and ``itl_s`` (the mean gap between this request's tokens) need streaming.
    """

    target: str
    sent_at: float
    error: str | None = None
    """Error kind (as in ``error_kinds``); ``"unfinished"`` if the drain cut it off; None: completed."""
    ttft_s: float | None = None
    itl_s: float | None = None
    e2e_s: float | None = None
    output_tokens: int = 0
