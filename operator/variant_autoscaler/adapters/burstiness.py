"""The tail model's inputs from Prometheus: arrival burstiness and request-length distributions.

Per model and namespace (the same grouping as :mod:`variant_autoscaler.adapters.prometheus`), one
instant query per quantity, whatever the number of models:

* **Burstiness**: for each window ``w``, the index of dispersion of the counts of successive ``w``-long
  windows over the look-back, from successive differences (an Allan variance, so that a slow rise or
  fall of the rate is left to the forecast), computed inside Prometheus with subqueries::

      avg_over_time(((X - X offset w) ^ 2)[L:w]) / (2 * avg_over_time(X[L:w]))
      with X = sum by (model_name, namespace) (increase(C[w]))

  kept only where the look-back holds its successive differences (:func:`min_differences`: all but one;
  a model deployed minutes ago has too few, and the ramp of its load would read as its burstiness: it is
  Poisson until then, as in the simulator), and the rate the burstiness was measured at: the mean count
  per shortest window over the same points, per second (``rate(C[L])`` would divide a young series'
  counts by the whole look-back). ``C`` is the counter of requests: vLLM's
  ``vllm:request_success_total`` by default (completions: they follow arrivals at windows longer than a
  request's service, smoothing shorter bursts), or an arrival counter where one exists (e.g. the
  inference gateway's). Windows must span at least two scrapes.
* **Lengths**: the buckets of ``vllm:request_prompt_tokens`` and ``vllm:request_generation_tokens``
  over the look-back, and their sums and counts (the means), read into
  :class:`~variant_autoscaler.core.workload.TokenLengths` as ``histogram_quantile`` would.

Building the queries and reading the samples are pure (:func:`build_tail_queries`,
:func:`read_tail_inputs`); :func:`collect_tail_inputs` runs them on any client with an async
``query(promql)`` (the collector's :class:`~variant_autoscaler.adapters.prometheus.PrometheusClient`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from variant_autoscaler.adapters.prometheus import LABEL_MODEL, LABEL_NAMESPACE, ModelKey, Sample
from variant_autoscaler.core.workload import Burstiness, RequestLengths, TokenLengths
from variant_autoscaler.errors import ModelError

__all__ = [
    "DEFAULT_COUNTER",
    "DEFAULT_WINDOWS_S",
    "MIN_DIFFERENCES",
    "TailInputs",
    "build_tail_queries",
    "collect_tail_inputs",
    "min_differences",
    "read_tail_inputs",
]

#: The requests counter whose counts give the burstiness.
DEFAULT_COUNTER = "vllm:request_success_total"
#: Windows (s) of the burstiness; with a 15 s scrape interval, 30 s is the shortest that spans two scrapes.
DEFAULT_WINDOWS_S: tuple[float, ...] = (30.0, 60.0, 120.0)
#: A window's IDC is read only from at least this many successive differences in the look-back.
MIN_DIFFERENCES = 4


def min_differences(lookback_s: float, window_s: float) -> int:
    """The successive differences a window's IDC is read from: those of the whole look-back but one (a
    subquery's points fall where its alignment puts them), and at least :data:`MIN_DIFFERENCES`. So a
    model younger than the look-back has no burstiness yet (Poisson), as in the simulator: read from a
    few minutes, the IDC is as much the ramp of a new deployment's load as its burstiness, and noisy
    (from k differences its relative error is about √(2/k))."""
    return max(MIN_DIFFERENCES, int(lookback_s // window_s) - 1)


_BY = f"by ({LABEL_MODEL}, {LABEL_NAMESPACE})"
_BY_LE = f"by ({LABEL_MODEL}, {LABEL_NAMESPACE}, le)"
_HISTOGRAMS = {"input": "vllm:request_prompt_tokens", "output": "vllm:request_generation_tokens"}


def _duration(seconds: float) -> str:
    whole = max(1, round(seconds))
    return f"{whole}s" if whole % 60 else f"{whole // 60}m"


def build_tail_queries(
    *,
    lookback_s: float = 600.0,
    windows_s: Sequence[float] = DEFAULT_WINDOWS_S,
    counter: str = DEFAULT_COUNTER,
) -> dict[str, str]:
    """The PromQL of one collection: ``idc:<w>`` per window, ``rate``, and per length histogram
    (``input``, ``output``) its ``:buckets``, ``:sum`` and ``:count`` over the look-back."""
    lookback = _duration(lookback_s)
    # Without windows, the rate over the look-back (no burstiness is read then).
    queries: dict[str, str] = {"rate": f"sum {_BY} (rate({counter}[{lookback}]))"}
    shortest = min(windows_s, default=None)
    for w in windows_s:
        if not 0 < w <= lookback_s / 4:
            raise ModelError(f"a burstiness window of {w:g} s needs a look-back of at least {4 * w:g} s")
        win = _duration(w)
        x = f"sum {_BY} (increase({counter}[{win}]))"
        lagged = f"sum {_BY} (increase({counter}[{win}] offset {win}))"
        differences = f"(({x} - {lagged}) ^ 2)[{lookback}:{win}]"
        mean = f"avg_over_time(({x})[{lookback}:{win}])"
        if w == shortest:
            # The mean count of the shortest window over the look-back's points, per second: the rate the
            # IDC is read at, also for a model younger than the look-back (rate() over it divides what a
            # new series counted by the whole look-back: a model deployed three minutes ago read at a
            # third of its rate, and its burstiness was then not thinned per replica).
            queries["rate"] = f"{mean} / {w:g}"
        idc = f"avg_over_time({differences}) / (2 * {mean})"
        # Only where the look-back holds its differences: a model younger than that (a new deployment)
        # would read the ramp of its load as its burstiness.
        enough = min_differences(lookback_s, w)
        queries[f"idc:{win}"] = f"({idc}) and (count_over_time({differences}) >= {enough})"
    for name, metric in _HISTOGRAMS.items():
        queries[f"{name}:buckets"] = f"sum {_BY_LE} (increase({metric}_bucket[{lookback}]))"
        queries[f"{name}:sum"] = f"sum {_BY} (increase({metric}_sum[{lookback}]))"
        queries[f"{name}:count"] = f"sum {_BY} (increase({metric}_count[{lookback}]))"
    return queries


@dataclass(frozen=True, slots=True)
class TailInputs:
    """What was read for one model: its burstiness (None: no usable counts) and request lengths (None:
    no histogram; the tail model then assumes exponential lengths with the collector's means)."""

    burstiness: Burstiness | None
    lengths: RequestLengths | None


def _key(sample: Sample) -> ModelKey:
    return sample.labels.get(LABEL_MODEL, ""), sample.labels.get(LABEL_NAMESPACE, "")


def _seconds(window: str) -> float:
    return float(window[:-1]) * (60.0 if window.endswith("m") else 1.0)


def _lengths(buckets: Sequence[Sample], total: float | None, count: float | None) -> TokenLengths | None:
    points: list[tuple[float, float]] = []
    for sample in buckets:
        le = sample.labels.get("le", "")
        try:
            bound = math.inf if le in ("+Inf", "Inf", "inf") else float(le)
        except ValueError:
            continue
        if math.isfinite(sample.value) and sample.value >= 0:
            points.append((bound, sample.value))
    mean = total / count if total is not None and count and count > 0 else None
    if not points or max(v for _, v in points) <= 0:
        return None
    points.sort()
    # Increases read at slightly different times can dip; a CDF never does.
    running = 0.0
    cumulative = []
    for _, value in points:
        running = max(running, value)
        cumulative.append(running)
    try:
        # Smoothed within vLLM's wide 1-2-5 buckets: read uniformly they put the upper percentiles of a
        # prompt-length distribution a quarter too high (core/workload.py).
        return TokenLengths.from_histogram([b for b, _ in points], cumulative, mean=mean, smooth=True)
    except ModelError:
        return None


def read_tail_inputs(results: Mapping[str, Sequence[Sample]]) -> dict[ModelKey, TailInputs]:
    """The inputs per (model, namespace) from the results of :func:`build_tail_queries`' queries. A
    window whose IDC is missing or not finite is left out; a model with none has no burstiness."""
    rates = {_key(s): s.value for s in results.get("rate", ()) if math.isfinite(s.value) and s.value > 0}
    windows = sorted((k for k in results if k.startswith("idc:")), key=lambda k: _seconds(k[4:]))
    idc: dict[ModelKey, list[tuple[float, float]]] = {}
    for name in windows:
        for sample in results[name]:
            if math.isfinite(sample.value) and sample.value >= 0:
                idc.setdefault(_key(sample), []).append((_seconds(name[4:]), sample.value))
    scalars = {
        name: {_key(s): s.value for s in results.get(name, ()) if math.isfinite(s.value)}
        for name in ("input:sum", "input:count", "output:sum", "output:count")
    }
    buckets: dict[str, dict[ModelKey, list[Sample]]] = {"input": {}, "output": {}}
    for name, by_key in buckets.items():
        for sample in results.get(f"{name}:buckets", ()):
            by_key.setdefault(_key(sample), []).append(sample)
    keys = set(rates) | set(idc) | set(buckets["input"]) | set(buckets["output"])
    found: dict[ModelKey, TailInputs] = {}
    for key in keys:
        points = idc.get(key, [])
        bursts = (
            Burstiness(tuple(w for w, _ in points), tuple(v for _, v in points), rates.get(key, 0.0))
            if points
            else None
        )
        per = {
            name: _lengths(
                buckets[name].get(key, []),
                scalars[f"{name}:sum"].get(key),
                scalars[f"{name}:count"].get(key),
            )
            for name in ("input", "output")
        }
        lengths = None
        if per["input"] is not None and per["output"] is not None:
            lengths = RequestLengths(per["input"], per["output"])
        found[key] = TailInputs(bursts, lengths)
    return found


class _Client(Protocol):
    def query(self, promql: str) -> Awaitable[list[Sample]]: ...


async def collect_tail_inputs(
    client: _Client,
    *,
    lookback_s: float = 600.0,
    windows_s: Sequence[float] = DEFAULT_WINDOWS_S,
    counter: str = DEFAULT_COUNTER,
) -> dict[ModelKey, TailInputs]:
    """Run :func:`build_tail_queries`' queries together and read them (a failed query raises the
    client's :class:`~variant_autoscaler.errors.CollectionError`)."""
    queries = build_tail_queries(lookback_s=lookback_s, windows_s=windows_s, counter=counter)
    answers = await asyncio.gather(*(client.query(promql) for promql in queries.values()))
    return read_tail_inputs(dict(zip(queries, answers, strict=True)))
