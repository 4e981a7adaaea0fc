"""vLLM's Prometheus metrics, with vLLM's names, labels, help texts and bucket boundaries.

Names and buckets follow vLLM's V1 engine as of v0.11 (``vllm/v1/metrics/loggers.py`` at
vllm-project/vllm 005a810 and ``vllm/v1/metrics/buckets.py`` at 139b1c3): every series carries the
labels ``model_name`` and ``engine`` (``"0"``; one engine per process), and
``vllm:time_per_output_token_seconds`` (deprecated in v0.11, the name WVA reads) is exported beside
its replacement ``vllm:inter_token_latency_seconds`` with identical observations.

The values live in plain counters and :class:`Histogram` objects fed from
:class:`~vllm_emulator.engine.EngineOutput` batches (an observation can carry a count, so a decode
step of 200 sequences is one call); :class:`VllmCollector` turns them into metric families when
Prometheus scrapes, on an isolated :class:`prometheus_client.CollectorRegistry`.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator, Sequence
from typing import cast

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString as _float_to_go_string

from vllm_emulator.engine import EngineOutput
from vllm_emulator.engine import Sequence as EngineSequence

_go_float = cast(Callable[[float], str], _float_to_go_string)

__all__ = [
    "FINISH_REASONS",
    "INTER_TOKEN_LATENCY_BUCKETS",
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

FINISH_REASONS: tuple[str, ...] = ("stop", "length", "abort")
"""vLLM's ``FinishReason`` values, each pre-created at 0 as vLLM does."""


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

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs, ``+Inf`` last."""
        out: list[tuple[str, float]] = []
        running = 0
        for le, n in zip(self._les, self._counts, strict=True):
            running += n
            out.append((le, float(running)))
        return out


_HISTOGRAMS: tuple[tuple[str, str, str], ...] = (
    # (attribute, metric name, help text); buckets chosen in EmulatorMetrics.__init__
    ("ttft", "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
    (
        "tpot",
        "vllm:time_per_output_token_seconds",
        "Histogram of time per output token in seconds."
        "DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
    ),
    ("itl", "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
    (
        "request_tpot",
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
    ),
    ("e2e", "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
    ("queue", "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."),
    (
        "inference",
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
    ),
    ("prefill", "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request."),
    ("decode", "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request."),
    ("prompt_tokens", "vllm:request_prompt_tokens", "Number of prefill tokens processed."),
    ("generation_tokens", "vllm:request_generation_tokens", "Number of generation tokens processed."),
)


class EmulatorMetrics:
    """The emulator's metric values, fed from engine outputs; gauges are read through callbacks."""

    def __init__(self, model_name: str, max_model_len: int) -> None:
        self.model_name = model_name
        self.labels = (model_name, "0")
        self.created = time.time()
        token_buckets = build_1_2_5_buckets(max_model_len)
        self.ttft = Histogram(TIME_TO_FIRST_TOKEN_BUCKETS)
        self.tpot = Histogram(INTER_TOKEN_LATENCY_BUCKETS)
        self.itl = Histogram(INTER_TOKEN_LATENCY_BUCKETS)
        self.request_tpot = Histogram(INTER_TOKEN_LATENCY_BUCKETS)
        self.e2e = Histogram(REQUEST_LATENCY_BUCKETS)
        self.queue = Histogram(REQUEST_LATENCY_BUCKETS)
        self.inference = Histogram(REQUEST_LATENCY_BUCKETS)
        self.prefill = Histogram(REQUEST_LATENCY_BUCKETS)
        self.decode = Histogram(REQUEST_LATENCY_BUCKETS)
        self.prompt_tokens = Histogram(token_buckets)
        self.generation_tokens = Histogram(token_buckets)
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.preemptions_total = 0
        self.success: dict[str, int] = dict.fromkeys(FINISH_REASONS, 0)

    def histogram(self, attribute: str) -> Histogram:
        value = getattr(self, attribute)
        assert isinstance(value, Histogram)
        return value

    def record(self, out: EngineOutput) -> None:
        """Account one engine output batch (tokens, TTFTs, inter-token gaps, finished requests)."""
        for seq in out.first_tokens:
            assert seq.first_token_time is not None
            self.ttft.observe(seq.first_token_time - seq.arrival_time)
            self.prompt_tokens_total += seq.prompt_tokens
        for gap, count in out.itl:
            self.itl.observe(gap, count)
            self.tpot.observe(gap, count)
        self.generation_tokens_total += out.generation_tokens
        self.preemptions_total += out.preemptions
        for seq in out.finished:
            self._finished(seq)

    def _finished(self, seq: EngineSequence) -> None:
        reason = seq.finish_reason or "abort"
        self.success[reason] = self.success.get(reason, 0) + 1
        if reason == "abort" or seq.first_token_time is None or seq.scheduled_time is None:
            return  # aborted requests are counted, not timed
        last = seq.last_token_time if seq.last_token_time is not None else seq.first_token_time
        finish = seq.finish_time if seq.finish_time is not None else last
        decode = last - seq.first_token_time
        generated = seq.output_tokens
        self.e2e.observe(finish - seq.arrival_time)
        self.queue.observe(seq.scheduled_time - seq.arrival_time)
        self.prefill.observe(seq.first_token_time - seq.scheduled_time)
        self.decode.observe(decode)
        self.inference.observe(last - seq.scheduled_time)
        self.request_tpot.observe(decode / (generated - 1) if generated > 1 else 0.0)
        self.prompt_tokens.observe(seq.prompt_tokens)
        self.generation_tokens.observe(generated)


class VllmCollector(Collector):
    """Exposes :class:`EmulatorMetrics` plus live gauges as vLLM's metric families."""

    def __init__(
        self,
        metrics: EmulatorMetrics,
        *,
        running: Callable[[], float],
        waiting: Callable[[], float],
        kv_usage: Callable[[], float],
        before_collect: Callable[[], None] | None = None,
    ) -> None:
        self._m = metrics
        self._running = running
        self._waiting = waiting
        self._kv_usage = kv_usage
        self._before_collect = before_collect

    def collect(self) -> Iterator[Metric]:
        if self._before_collect is not None:
            self._before_collect()
        m = self._m
        names = ["model_name", "engine"]
        labels = list(m.labels)
        created = m.created

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=names)
            family.add_metric(labels, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=names)
            family.add_metric(labels, value, created=created)
            return family

        yield gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", self._running()
        )
        yield gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", self._waiting()
        )
        usage = self._kv_usage()
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage)
        yield gauge(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
            usage,
        )
        yield counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", m.preemptions_total
        )
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", m.prompt_tokens_total)
        yield counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", m.generation_tokens_total
        )
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )
        for reason, value in m.success.items():
            success.add_metric([*labels, reason], value, created=created)
        yield success
        for attribute, name, doc in _HISTOGRAMS:
            hist = m.histogram(attribute)
            family = HistogramMetricFamily(name, doc, labels=names)
            family.add_metric(labels, hist.buckets(), hist.sum)
            yield family


def build_registry(collector: VllmCollector) -> CollectorRegistry:
    """An isolated registry holding only the emulator's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry
