"""Profile metrics: a fixed query set per cycle, vLLM's names with the older ITL name as fallback,
per-pod windows, and which pods belong to a variant."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from variant_autoscaler.adapters.profile_metrics import (
    QUERIES_PER_CYCLE,
    ProfileMetrics,
    build_queries,
    deployment_pod,
    windows_from_values,
)
from variant_autoscaler.adapters.prometheus import PrometheusClient
from variant_autoscaler.api.config import PrometheusConfig
from variant_autoscaler.errors import CollectionError

NOW = 1_700_000_000.0
WINDOW = 60.0


def test_one_query_per_quantity_grouped_by_namespace_pod_and_model() -> None:
    queries = build_queries(WINDOW)
    assert len(queries) == QUERIES_PER_CYCLE == 7
    for query in queries.values():
        assert "by (namespace, pod, model_name)" in query
        assert "[60s]" in query
    # current vLLM name first, the deprecated one as a fallback in the same expression
    itl = queries["itl_sum"]
    assert itl.index("vllm:inter_token_latency_seconds_sum") < itl.index(" or ")
    assert itl.index(" or ") < itl.index("vllm:time_per_output_token_seconds_sum")
    assert "vllm:request_prefill_time_seconds_sum" in queries["prefill_sum"]
    assert "vllm:request_prompt_tokens_sum" in queries["prompt_tokens"]
    assert "avg_over_time(vllm:num_requests_running[60s])" in queries["running_avg"]
    assert "stdvar_over_time(vllm:num_requests_running[60s])" in queries["running_var"]
    assert "time_to_first_token" not in " ".join(queries.values())  # TTFT mixes in queueing


def test_windows_from_query_values() -> None:
    key = ("team-a", "llm-7c9d-abcde", "llama")
    values = {
        "itl_sum": {key: 12.0},  # 12 requests decoding on average
        "itl_count": {key: 500.0},  # gaps per second
        "prefill_sum": {key: 0.5},
        "prefill_count": {key: 4.0},
        "prompt_tokens": {key: 300.0},
        "running_avg": {key: 12.2},
        "running_var": {key: 24.4},
    }
    (w,) = windows_from_values(values, now=NOW, window_seconds=WINDOW)
    assert (w.namespace, w.pod, w.model) == key
    assert w.itl_ms == pytest.approx(24.0)
    assert w.decode_tokens == pytest.approx(30_000.0)
    assert w.prefill_ms == pytest.approx(125.0)
    assert w.requests == pytest.approx(240.0)
    assert w.prompt_tokens == 300.0
    assert w.running == pytest.approx(12.5)  # Little's law: decoding + prefilling
    assert w.dispersion == pytest.approx(2.0)
    assert w.end == NOW and w.start == NOW - WINDOW


def test_missing_histograms_fall_back_to_the_gauge_and_leave_means_empty() -> None:
    key = ("team-a", "p", "llama")
    (w,) = windows_from_values(
        {"running_avg": {key: 3.0}, "itl_count": {key: 0.0}}, now=NOW, window_seconds=WINDOW
    )
    assert w.running == 3.0
    assert w.itl_ms is None and w.prefill_ms is None and w.prompt_tokens is None
    assert w.decode_tokens == 0.0 and w.requests == 0.0


def test_nan_values_are_treated_as_missing() -> None:
    key = ("ns", "p", "m")
    (w,) = windows_from_values({"prompt_tokens": {key: float("nan")}}, now=NOW, window_seconds=WINDOW)
    assert w.prompt_tokens is None


def test_deployment_pods_are_recognised_by_name() -> None:
    assert deployment_pod("llm-7c9d8b6f5-x2x9q", "llm")
    assert not deployment_pod("llm-big-7c9d8b6f5-x2x9q", "llm")  # another Deployment's pod
    assert not deployment_pod("llm", "llm")
    assert deployment_pod("llm-big-7c9d8b6f5-x2x9q", "llm-big")


class FakePrometheus:
    """Answers every query with one row per pod; counts the queries."""

    def __init__(self, pods: list[dict[str, str]]) -> None:
        self.pods = pods
        self.queries: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        self.queries.append(query)
        value = "0.5" if "prefill_time_seconds_sum" in query else "10"
        rows: list[dict[str, Any]] = [{"metric": labels, "value": [NOW, value]} for labels in self.pods]
        return httpx.Response(
            200, json={"status": "success", "data": {"resultType": "vector", "result": rows}}
        )


def _metrics(fake: Any) -> ProfileMetrics:
    cfg = PrometheusConfig(base_url="http://prom.test:9090")
    return ProfileMetrics(PrometheusClient(cfg, transport=httpx.MockTransport(fake), retries=0, backoff=0.0))


@pytest.mark.parametrize("pods", [1, 40])
def test_the_number_of_queries_does_not_grow_with_pods_or_variants(pods: int) -> None:
    labels = [
        {"namespace": f"ns{i % 3}", "pod": f"v{i % 5}-abc12-{i:05d}", "model_name": f"m{i % 2}"}
        for i in range(pods)
    ]
    fake = FakePrometheus(labels)
    metrics = _metrics(fake)
    snapshot = asyncio.run(metrics.collect(now=NOW, window_seconds=WINDOW))
    asyncio.run(metrics.client.aclose())
    assert len(fake.queries) == QUERIES_PER_CYCLE == snapshot.queries
    assert len(snapshot.windows) == pods
    ns, pod, model = labels[0]["namespace"], labels[0]["pod"], labels[0]["model_name"]
    mine = snapshot.for_variant(ns, model, pods={pod})
    assert [w.pod for w in mine] == [pod]
    assert all(w.namespace == ns and w.model == model for w in snapshot.for_variant(ns, model))
    assert snapshot.for_variant(ns, model, deployment="v0") == [
        w for w in snapshot.windows if w.namespace == ns and w.model == model and w.pod.startswith("v0-")
    ]


def test_series_without_a_model_label_are_ignored_and_a_missing_pod_label_is_empty() -> None:
    fake = FakePrometheus([{"namespace": "ns"}, {"namespace": "ns", "model_name": "m"}])
    metrics = _metrics(fake)
    snapshot = asyncio.run(metrics.collect(now=NOW, window_seconds=WINDOW))
    asyncio.run(metrics.client.aclose())
    assert [(w.namespace, w.pod, w.model) for w in snapshot.windows] == [("ns", "", "m")]


def test_a_failing_query_is_a_collection_error() -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"status": "error", "errorType": "bad_data", "error": "parse error"})

    metrics = _metrics(broken)
    with pytest.raises(CollectionError, match="bad_data"):
        asyncio.run(metrics.collect(now=NOW, window_seconds=WINDOW))
    with pytest.raises(CollectionError, match="> 0 seconds"):
        asyncio.run(metrics.collect(now=NOW, window_seconds=0))
