"""The collector reads what each vLLM version exports, and says which expected series are absent."""

from __future__ import annotations

from typing import Any

import httpx

from variant_autoscaler.adapters.prometheus import (
    QUERIES_PER_CYCLE,
    Collector,
    PrometheusClient,
    build_queries,
    build_saturation_queries,
)
from variant_autoscaler.api.config import PrometheusConfig

NOW = 1_700_000_000.0
A = {"model_name": "llama", "namespace": "team-a"}


def test_itl_reads_the_current_name_with_the_deprecated_one_as_fallback_in_one_query() -> None:
    itl = build_queries(60.0)["itl_seconds"]
    new, _, old = itl.partition(") or (")
    assert "vllm:inter_token_latency_seconds_sum" in new and "vllm:inter_token_latency_seconds_count" in new
    assert "vllm:time_per_output_token_seconds_sum" in old and "inter_token_latency" not in old
    # The fallback costs no query: eight for load and latency (and four per pod: saturation, KV cache).
    assert len(build_queries(60.0)) == 8 and QUERIES_PER_CYCLE == 12


def _collector(rows: dict[str, list[tuple[dict[str, str], float]]]) -> Collector:
    queries = {**build_queries(60.0), **build_saturation_queries(60.0)}
    by_query = {q: rows.get(name, []) for name, q in queries.items()}

    def handler(request: httpx.Request) -> httpx.Response:
        result = [{"metric": m, "value": [NOW, repr(v)]} for m, v in by_query[request.url.params["query"]]]
        body: dict[str, Any] = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return httpx.Response(200, json=body)

    config = PrometheusConfig(base_url="https://prom.test:9090")
    return Collector(PrometheusClient(config, transport=httpx.MockTransport(handler), backoff=0.0))


FULL = {
    "newest": [(A, NOW - 5)],
    "completion_rate": [(A, 2.0)],
    "avg_input_tokens": [(A, 100.0)],
    "avg_output_tokens": [(A, 200.0)],
    "ttft_seconds": [(A, 0.25)],
    "itl_seconds": [(A, 0.02)],
    "waiting": [(A, 0.0)],
    "waiting_growth": [(A, 0.0)],
}


async def test_every_expected_series_present() -> None:
    lookup = (await _collector(FULL).collect(now=NOW)).lookup("llama", "team-a")
    assert lookup.state == "ok" and lookup.message == "vLLM metrics are available and up to date"
    assert lookup.metrics is not None and lookup.metrics.absent == ()


async def test_an_absent_series_is_named_in_the_message_instead_of_reading_zero_silently() -> None:
    rows = {k: v for k, v in FULL.items() if k not in {"itl_seconds", "ttft_seconds"}}
    lookup = (await _collector(rows).collect(now=NOW)).lookup("llama", "team-a")
    assert lookup.state == "ok" and lookup.metrics is not None
    assert lookup.metrics.absent == ("ttft_seconds", "itl_seconds")
    assert "vllm:inter_token_latency_seconds" in lookup.message
    assert "vllm:time_per_output_token_seconds" in lookup.message
    assert "vllm:time_to_first_token_seconds" in lookup.message
    assert "not a measurement" in lookup.message
