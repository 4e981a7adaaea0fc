"""vLLM metric names, labels, buckets and values, from engine outputs to the exposition text."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from vllm_emulator.engine import Engine, EngineConfig, Profile
from vllm_emulator.metrics import (
    INTER_TOKEN_LATENCY_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TIME_TO_FIRST_TOKEN_BUCKETS,
    EmulatorMetrics,
    Histogram,
    VllmCollector,
    build_1_2_5_buckets,
    build_registry,
)

REQUIRED = {  # vLLM 0.11: the deprecated per-token latency name beside its replacement
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:time_per_output_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
}


def test_bucket_boundaries_are_vllms() -> None:
    assert (
        TIME_TO_FIRST_TOKEN_BUCKETS[:3] == (0.001, 0.005, 0.01) and TIME_TO_FIRST_TOKEN_BUCKETS[-1] == 2560.0
    )
    assert len(TIME_TO_FIRST_TOKEN_BUCKETS) == 22
    assert len(INTER_TOKEN_LATENCY_BUCKETS) == 19 and INTER_TOKEN_LATENCY_BUCKETS[-1] == 80.0
    assert len(REQUEST_LATENCY_BUCKETS) == 21 and REQUEST_LATENCY_BUCKETS[-1] == 7680.0
    assert build_1_2_5_buckets(100) == [1, 2, 5, 10, 20, 50, 100]
    assert build_1_2_5_buckets(8192) == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]


def test_histogram_bounds_are_inclusive_and_cumulative() -> None:
    h = Histogram([0.1, 1.0])
    h.observe(0.1)
    h.observe(0.5, count=3)
    h.observe(7.0)
    assert h.buckets() == [("0.1", 1.0), ("1.0", 4.0), ("+Inf", 5.0)]
    assert h.count == 5 and h.sum == pytest.approx(0.1 + 1.5 + 7.0)
    with pytest.raises(ValueError):
        Histogram([1.0, 0.5])


def _served(version: str = "0.11") -> tuple[Engine, EmulatorMetrics, str]:
    engine = Engine(EngineConfig(Profile(20.0, 1.0, 10.0, 0.1), max_num_seqs=2, kv_cache_tokens=8192))
    metrics = EmulatorMetrics("org/model-a", max_model_len=8192)
    for i, (prompt, out) in enumerate([(100, 10), (50, 4), (10, 1)]):
        engine.submit(i, prompt, out, now=0.0, stop_reason="stop" if i == 1 else "length")
    waiting = engine.submit("w", 10, 5, now=0.0)
    engine.abort(waiting, now=0.0)
    metrics.record(engine.advance(10.0))
    registry = build_registry(
        VllmCollector(metrics, running=lambda: 3, waiting=lambda: 2, kv_usage=lambda: 0.25, version=version)
    )
    return engine, metrics, generate_latest(registry).decode()


def test_exposition_has_vllms_names_types_and_labels() -> None:
    _, _, text = _served()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, kind in REQUIRED.items():
        assert name in families, name
        assert families[name].type == kind, name
        for sample in families[name].samples:
            assert sample.labels["model_name"] == "org/model-a"
            assert sample.labels["engine"] == "0"
    assert "vllm:num_preemptions_total{" in text
    assert "vllm:request_success_total{" in text


def test_values_are_consistent_with_what_was_served() -> None:
    _, _, text = _served()
    samples = {
        (
            s.name,
            tuple(sorted((k, v) for k, v in s.labels.items() if k not in {"model_name", "engine"})),
        ): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("vllm:num_requests_running") == 3
    assert value("vllm:num_requests_waiting") == 2
    assert value("vllm:kv_cache_usage_perc") == 0.25
    assert value("vllm:request_success_total", finished_reason="length") == 2
    assert value("vllm:request_success_total", finished_reason="stop") == 1
    # One request was aborted: as in vLLM, it is in no per-request metric and "abort" stays at 0.
    assert value("vllm:request_success_total", finished_reason="abort") == 0
    assert value("vllm:prompt_tokens_total") == 160
    assert value("vllm:generation_tokens_total") == 15
    assert value("vllm:request_prompt_tokens_sum") == 160
    assert value("vllm:request_generation_tokens_sum") == 15
    assert value("vllm:request_generation_tokens_bucket", le="5.0") == 2
    assert value("vllm:time_to_first_token_seconds_count") == 3
    # inter-token gaps: one per token after the first
    assert value("vllm:inter_token_latency_seconds_count") == 9 + 3
    assert value("vllm:time_per_output_token_seconds_sum") == value("vllm:inter_token_latency_seconds_sum")
    assert value("vllm:e2e_request_latency_seconds_count") == 3  # the aborted one is counted, not timed
    assert value("vllm:request_queue_time_seconds_count") == 3


def test_ttft_includes_queueing_and_phases_add_up() -> None:
    engine = Engine(EngineConfig(Profile(20.0, 1.0, 10.0, 0.1), max_num_seqs=1))
    metrics = EmulatorMetrics("m", 8192)
    engine.submit("a", 100, 5, now=0.0)
    queued = engine.submit("b", 100, 5, now=0.0)
    metrics.record(engine.advance(10.0))
    assert queued.scheduled_time is not None and queued.scheduled_time > 0
    ttft_b = queued.first_token_time - queued.arrival_time  # type: ignore[operator]
    assert metrics.ttft.sum == pytest.approx(0.02 + ttft_b)
    assert metrics.queue.sum == pytest.approx(queued.scheduled_time)
    # e2e = queue + prefill + decode for every finished request
    assert metrics.e2e.sum == pytest.approx(metrics.queue.sum + metrics.prefill.sum + metrics.decode.sum)
    assert metrics.inference.sum == pytest.approx(metrics.prefill.sum + metrics.decode.sum)
    assert metrics.request_tpot.count == 2
