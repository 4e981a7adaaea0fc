"""vLLM's Prometheus metrics, with the names, labels, help texts and buckets of a chosen vLLM version.

Which families a version exports is in :mod:`vllm_emulator.metric_sets` (0.10, 0.11, 0.12; the
buckets are the same in all three, from ``vllm/v1/metrics/loggers.py``). Every series carries the
labels ``model_name`` and ``engine`` (``"0"``; one engine per process), except
``vllm:cache_config_info``, which carries the cache configuration and ``engine``.

The values live in plain counters and :class:`Histogram` objects fed from engine outputs (an
observation can carry a count, so a decode step of 200 sequences is one call, and a run of steps
whose durations grow linearly is one call too); :class:`VllmCollector` turns them into metric
families when Prometheus scrapes, on an isolated :class:`prometheus_client.CollectorRegistry`.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import cast

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString as _float_to_go_string

from vllm_emulator.engine import EngineOutput
from vllm_emulator.engine import Sequence as EngineSequence
from vllm_emulator.engine_v1 import V1Output
from vllm_emulator.metric_sets import DEFAULT_VERSION, families_for

_go_float = cast(Callable[[float], str], _float_to_go_string)

__all__ = [
    "FINISH_REASONS",
    "INTER_TOKEN_LATENCY_BUCKETS",
    "ITERATION_TOKENS_BUCKETS",
    "REQUEST_LATENCY_BUCKETS",
    "TIME_TO_FIRST_TOKEN_BUCKETS",
    "EmulatorMetrics",
    "Histogram",
    "VllmCollector",
    "build_1_2_5_buckets",
]

REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
"""e2e, queue, inference, prefill and decode time histograms."""

TIME_TO_FIRST_TOKEN_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip

INTER_TOKEN_LATENCY_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
"""Inter-token latency and per-request time-per-output-token histograms."""

ITERATION_TOKENS_BUCKETS: tuple[float, ...] = (
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
)  # fmt: skip
"""``vllm:iteration_tokens_total``: tokens per engine step."""

PREFILL_TOKEN_TIME_BUCKETS: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
"""0.10's ``vllm:time_per_prefill_token_request_seconds``."""

PARAMS_N_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20)

FINISH_REASONS: tuple[str, ...] = ("stop", "length", "abort")
"""vLLM's ``FinishReason`` values, each pre-created at 0 as vLLM does (``abort`` never counts: see
``_finished``)."""


def build_1_2_5_buckets(max_value: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value`` (vLLM's buckets for token-count histograms)."""
    buckets: list[float] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * scale
            if value > max_value:
                return buckets
            buckets.append(float(value))
        scale *= 10


class Histogram:
    """A Prometheus histogram's state: per-bucket counts (non-cumulative), sum and count."""

    __slots__ = ("_bounds", "_counts", "_les", "count", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise ValueError("histogram bounds must be strictly increasing")
        self._bounds = tuple(float(b) for b in bounds)
        self._les = (*(_go_float(b) for b in self._bounds), "+Inf")
        self._counts = [0] * (len(self._bounds) + 1)
        self.sum = 0.0
        self.count = 0

    @property
    def bounds(self) -> tuple[float, ...]:
        return self._bounds

    def observe(self, value: float, count: int = 1) -> None:
        """Record ``count`` observations of ``value`` (a bucket's bound is inclusive, as ``le``)."""
        self._counts[bisect.bisect_left(self._bounds, value)] += count
        self.sum += value * count
        self.count += count

    def observe_run(self, first: float, increment: float, steps: int, count: int) -> None:
        """Record ``count`` observations of each of ``first + i·increment`` for ``i < steps``."""
        if steps <= 0 or count <= 0:
            return
        if increment <= 0 or steps == 1:
            self.observe(first, steps * count)
            return
        counts = self._counts
        below = 0  # values at or below the bounds seen so far
        for index, bound in enumerate(self._bounds):
            if bound < first:
                continue
            within = min(steps, int((bound - first) / increment) + 1)
            counts[index] += (within - below) * count
            below = within
            if below == steps:
                break
        counts[-1] += (steps - below) * count
        self.sum += count * (steps * first + increment * (steps * (steps - 1) / 2))
        self.count += steps * count

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs, ``+Inf`` last."""
        out: list[tuple[str, float]] = []
        running = 0
        for le, n in zip(self._les, self._counts, strict=True):
            running += n
            out.append((le, float(running)))
        return out


class EmulatorMetrics:
    """The emulator's metric values, fed from engine outputs; gauges are read through callbacks."""

    def __init__(self, model_name: str, max_model_len: int) -> None:
        self.model_name = model_name
        self.labels = (model_name, "0")
        self.created = time.time()
        token_buckets = build_1_2_5_buckets(max_model_len)
        self.ttft = Histogram(TIME_TO_FIRST_TOKEN_BUCKETS)
        self.itl = Histogram(INTER_TOKEN_LATENCY_BUCKETS)
        self.request_tpot = Histogram(INTER_TOKEN_LATENCY_BUCKETS)
        self.e2e = Histogram(REQUEST_LATENCY_BUCKETS)
        self.queue = Histogram(REQUEST_LATENCY_BUCKETS)
        self.inference = Histogram(REQUEST_LATENCY_BUCKETS)
        self.prefill = Histogram(REQUEST_LATENCY_BUCKETS)
        self.decode = Histogram(REQUEST_LATENCY_BUCKETS)
        self.prompt_tokens = Histogram(token_buckets)
        self.generation_tokens = Histogram(token_buckets)
        self.iteration_tokens = Histogram(ITERATION_TOKENS_BUCKETS)
        self.max_generation_tokens = Histogram(token_buckets)
        self.params_n = Histogram(PARAMS_N_BUCKETS)
        self.params_max_tokens = Histogram(token_buckets)
        self.prefill_token_time = Histogram(PREFILL_TOKEN_TIME_BUCKETS)
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.preemptions_total = 0
        self.prefix_queries_total = 0
        self.prefix_hits_total = 0
        self.zero = 0
        self.success: dict[str, int] = dict.fromkeys(FINISH_REASONS, 0)
        self._pending_tokens = 0  # wva engine: tokens waiting for a decode step to be counted in

    def histogram(self, attribute: str) -> Histogram:
        value = getattr(self, attribute)
        assert isinstance(value, Histogram)
        return value

    def counter(self, attribute: str) -> float:
        value = getattr(self, attribute)
        assert isinstance(value, int | float)
        return value

    def record(self, out: EngineOutput) -> None:
        """Account one engine output batch (tokens, TTFTs, inter-token gaps, finished requests)."""
        prompt_done = 0
        for seq in out.first_tokens:
            assert seq.first_token_time is not None
            self.ttft.observe(seq.first_token_time - seq.arrival_time)
            prompt_done += seq.prompt_tokens
        self.prompt_tokens_total += prompt_done
        itl = self.itl
        for gap, count in out.itl:
            itl.observe(gap, count)
        self.generation_tokens_total += out.generation_tokens
        self.preemptions_total += out.preemptions
        if isinstance(out, V1Output):
            for first, increment, steps, count in out.itl_runs:
                itl.observe_run(first, increment, steps, count)
            for tokens, steps in out.iteration_tokens:
                self.iteration_tokens.observe(tokens, steps)
            self.prefix_queries_total += out.prefix_queries
            self.prefix_hits_total += out.prefix_hits
        else:
            # The wva engine has no steps for its prefills (they run on their own clocks): their tokens
            # go into the next decode steps, spread evenly, so the histogram's sum and count are exact.
            tokens = self._pending_tokens + prompt_done + out.generation_tokens
            if out.steps:
                self.iteration_tokens.observe(tokens / out.steps, out.steps)
                tokens = 0
            self._pending_tokens = tokens
        for seq in out.finished:
            self._finished(seq)

    def request_params(self, max_tokens: int | None) -> None:
        """A request finished: its ``n`` (always 1 here) and its ``max_tokens`` when it had one."""
        self.params_n.observe(1)
        if max_tokens:
            self.params_max_tokens.observe(max_tokens)

    def _finished(self, seq: EngineSequence) -> None:
        reason = seq.finish_reason or "abort"
        if reason == "abort":
            # As vLLM (V1, through 0.13 and main as of 2026-09): a request the client abandoned leaves no
            # trace in the per-request metrics, and its ``finished_reason="abort"`` series stays at 0
            # (vllm-project/vllm issues 31503 and 55634). A server's completions therefore under-read
            # its arrivals while clients time out.
            return
        self.success[reason] = self.success.get(reason, 0) + 1
        if seq.first_token_time is None or seq.scheduled_time is None:
            return
        last = seq.last_token_time if seq.last_token_time is not None else seq.first_token_time
        finish = seq.finish_time if seq.finish_time is not None else last
        decode = last - seq.first_token_time
        prefill = seq.first_token_time - seq.scheduled_time
        generated = seq.output_tokens
        self.e2e.observe(finish - seq.arrival_time)
        self.queue.observe(seq.scheduled_time - seq.arrival_time)
        self.prefill.observe(prefill)
        self.decode.observe(decode)
        self.inference.observe(last - seq.scheduled_time)
        self.request_tpot.observe(decode / (generated - 1) if generated > 1 else 0.0)
        self.prompt_tokens.observe(seq.prompt_tokens)
        self.generation_tokens.observe(generated)
        self.max_generation_tokens.observe(generated)
        if seq.prompt_tokens > 0:
            self.prefill_token_time.observe(prefill / seq.prompt_tokens)


class VllmCollector(Collector):
    """Exposes :class:`EmulatorMetrics` plus live gauges as one vLLM version's metric families."""

    def __init__(
        self,
        metrics: EmulatorMetrics,
        *,
        running: Callable[[], float],
        waiting: Callable[[], float],
        kv_usage: Callable[[], float],
        before_collect: Callable[[], None] | None = None,
        version: str = DEFAULT_VERSION,
        cache_info: Mapping[str, str] | None = None,
    ) -> None:
        self._m = metrics
        self._gauges = {"running": running, "waiting": waiting, "kv_usage": kv_usage}
        self._before_collect = before_collect
        self._families = families_for(version)
        self._cache_info = dict(cache_info or {"engine": "0"})
        if "model_name" in self._cache_info:
            raise ValueError("vllm:cache_config_info carries no model_name label, as vLLM's does not")

    def collect(self) -> Iterator[Metric]:
        if self._before_collect is not None:
            self._before_collect()
        m = self._m
        names = ["model_name", "engine"]
        labels = list(m.labels)
        created = m.created
        gauges: dict[str, float] = {}
        for family in self._families:
            kind = family.kind
            if kind == "histogram":
                hist = m.histogram(family.source)
                h = HistogramMetricFamily(family.name, family.help, labels=names)
                h.add_metric(labels, hist.buckets(), hist.sum)
                yield h
            elif kind == "counter":
                c = CounterMetricFamily(family.name, family.help, labels=names)
                c.add_metric(labels, m.counter(family.source), created=created)
                yield c
            elif kind == "gauge":
                source = family.source
                if source not in gauges:  # read each live value once per scrape
                    gauges[source] = self._gauges[source]()
                g = GaugeMetricFamily(family.name, family.help, labels=names)
                g.add_metric(labels, gauges[source])
                yield g
            elif kind == "success":
                s = CounterMetricFamily(family.name, family.help, labels=[*names, "finished_reason"])
                for reason, value in m.success.items():
                    s.add_metric([*labels, reason], value, created=created)
                yield s
            elif kind == "sleep":
                g = GaugeMetricFamily(family.name, family.help, labels=[*names, "sleep_state"])
                for state, awake in (("awake", 1.0), ("weights_offloaded", 0.0), ("discard_all", 0.0)):
                    g.add_metric([*labels, state], awake)
                yield g
            else:  # info: a gauge at 1 carrying the cache configuration
                info = self._cache_info
                g = GaugeMetricFamily(family.name, family.help, labels=list(info))
                g.add_metric(list(info.values()), 1.0)
                yield g


def build_registry(collector: VllmCollector) -> CollectorRegistry:
    """An isolated registry holding only the emulator's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry
