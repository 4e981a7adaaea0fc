"""The collector: a fixed query set per cycle, grouping, missing/stale detection, demand, errors, auth."""

from __future__ import annotations

import asyncio
import json
import math
import os
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest

from variant_autoscaler.adapters.prometheus import (
    HISTORY_MODELS_NAMED,
    QUERIES_PER_CYCLE,
    Collector,
    PrometheusClient,
    build_queries,
    build_saturation_queries,
    build_ssl_context,
    history_query,
)
from variant_autoscaler.api.config import PrometheusConfig
from variant_autoscaler.core.demand import demand_rate, forecast_input
from variant_autoscaler.errors import CollectionError, ConfigError

NOW = 1_700_000_000.0


def _vector(rows: list[tuple[dict[str, str], float]], ts: float = NOW) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": m, "value": [ts, repr(v)]} for m, v in rows]},
    }


class FakePrometheus:
    """Answers the collector's queries from a table keyed by quantity name."""

    def __init__(self, rows: dict[str, list[tuple[dict[str, str], float]]]) -> None:
        queries = {**build_queries(60.0), **build_saturation_queries(60.0)}
        self.by_query = {q: rows.get(name, []) for name, q in queries.items()}
        self.seen: list[httpx.Request] = []
        self.fail_next = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        if self.fail_next:
            self.fail_next -= 1
            return httpx.Response(503, text="overloaded")
        query = request.url.params["query"]
        if query not in self.by_query:
            return httpx.Response(400, json={"status": "error", "errorType": "bad_data", "error": "parse"})
        return httpx.Response(200, json=_vector(self.by_query[query]))


def _client(handler: Any, **cfg: Any) -> PrometheusClient:
    config = PrometheusConfig(base_url="https://prom.test:9090", **cfg)
    return PrometheusClient(config, transport=httpx.MockTransport(handler), backoff=0.0)


A = {"model_name": "llama", "namespace": "team-a"}
B = {"model_name": "granite", "namespace": "team-b"}
EMU = {"model_name": "emu"}  # no namespace label (WVA's emulator fallback)


async def test_one_query_per_quantity_whatever_the_number_of_models() -> None:
    rows = {
        "newest": [(A, NOW - 5), (B, NOW - 5)],
        "completion_rate": [(A, 2.0), (B, 0.5)],
        "avg_input_tokens": [(A, 100.0), (B, math.nan)],
        "avg_output_tokens": [(A, 200.0), (B, 50.0)],
        "ttft_seconds": [(A, 0.25)],
        "itl_seconds": [(A, 0.02), (B, math.inf)],
        "waiting": [(A, 0.0), (B, 0.0)],
        "waiting_growth": [(A, 0.0)],
    }
    fake = FakePrometheus(rows)
    snap = await Collector(_client(fake)).collect(now=NOW)
    # Eight for load and latency, four per pod (saturation, KV cache, preemptions; every model at once).
    assert len(fake.seen) == QUERIES_PER_CYCLE == snap.queries == 12
    a = snap.lookup("llama", "team-a")
    assert a.state == "ok" and a.metrics is not None
    assert a.metrics.completion_rate == 2.0 and a.metrics.arrival_rate == 2.0
    assert (a.metrics.avg_input_tokens, a.metrics.avg_output_tokens) == (100.0, 200.0)
    assert a.metrics.ttft_ms == pytest.approx(250.0) and a.metrics.itl_ms == pytest.approx(20.0)
    b = snap.lookup("granite", "team-b").metrics
    assert (
        b is not None and b.avg_input_tokens == 0.0 and b.itl_ms == 0.0 and b.ttft_ms == 0.0
    )  # NaN/Inf -> 0
    assert all(r.url.params["time"] == f"{NOW:.3f}" for r in fake.seen)


async def test_queries_group_by_model_and_namespace() -> None:
    for name, query in build_queries(60.0).items():
        assert "by (model_name, namespace)" in query, name
    assert "[1m]" in build_queries(60.0)["completion_rate"]
    assert "[90s]" in build_queries(90.0)["completion_rate"]
    assert "vllm:time_per_output_token_seconds_sum" in build_queries(60.0)["itl_seconds"]


async def test_missing_stale_and_namespace_fallback() -> None:
    rows = {"newest": [(A, NOW - 600), (EMU, NOW - 1)], "completion_rate": [(EMU, 1.0)]}
    snap = await Collector(_client(FakePrometheus(rows))).collect(now=NOW, staleness_seconds=120)
    stale = snap.lookup("llama", "team-a")
    assert stale.state == "stale" and "600s old" in stale.message
    missing = snap.lookup("mistral", "team-a")
    assert missing.state == "missing" and missing.metrics is None and "mistral" in missing.message
    emu = snap.lookup("emu", "anywhere")
    assert emu.state == "ok" and emu.metrics is not None and emu.metrics.completion_rate == 1.0


async def test_overload_demand_exceeds_completions() -> None:
    rows = {
        "newest": [(A, NOW)],
        "completion_rate": [(A, 2.0)],
        "waiting": [(A, 60.0)],
        "waiting_growth": [(A, 30.0)],
    }
    snap = await Collector(_client(FakePrometheus(rows))).collect(now=NOW, drain_seconds=300)
    metrics = snap.lookup("llama", "team-a").metrics
    assert metrics is not None
    assert metrics.arrival_rate == pytest.approx(2.0 + 30.0 / 60 + 60.0 / 300)
    assert metrics.completion_rate == 2.0


def test_demand_rate_ignores_a_shrinking_queue_and_bad_values() -> None:
    assert demand_rate(1.0, 0.0, -20.0, 60.0, 300.0) == 1.0
    assert demand_rate(math.nan, math.nan, math.inf, 60.0, 300.0) == 0.0


def test_the_forecast_learns_the_arrivals_where_counted_else_the_demand() -> None:
    assert forecast_input(2.5, 4.0) == 4.0  # the gateway saw more arrive than vLLM finished
    assert forecast_input(2.5, 0.0) == 0.0  # nothing arrives: the backlog's drain is not a rate
    assert forecast_input(2.5, None) == 2.5
    assert forecast_input(2.5, math.nan) == 2.5


async def test_errors_become_collection_errors() -> None:
    def bad_query(_: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"status": "error", "errorType": "bad_data", "error": "parse error"})

    with pytest.raises(CollectionError, match="bad_data"):
        await Collector(_client(bad_query)).collect(now=NOW)

    def not_json(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>proxy</html>")

    with pytest.raises(CollectionError, match="unexpected Prometheus response"):
        await _client(not_json).query("up")

    def matrix(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": []}})

    with pytest.raises(CollectionError, match="expected a vector"):
        await _client(matrix).query("up[1m]")

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(CollectionError, match="after 3 attempts"):
        await _client(refused).query("up")


async def test_bounded_retries_on_server_errors() -> None:
    fake = FakePrometheus({"newest": [(A, NOW)]})
    fake.fail_next = 2
    client = _client(fake)
    samples = await client.query(build_queries(60.0)["newest"])
    assert len(samples) == 1 and len(fake.seen) == 3
    fake.fail_next = 3
    with pytest.raises(CollectionError, match="HTTP 503"):
        await client.query(build_queries(60.0)["newest"])


async def test_bearer_token_and_token_file(tmp_path: Path) -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(200, json=_vector([]))

    await _client(handler, bearer_token="static").query("up")
    token = tmp_path / "token"
    token.write_text("first\n")
    client = _client(handler, token_path=str(token))
    await client.query("up")
    token.write_text("second-rotated")

    os.utime(token, (NOW + 10, NOW + 10))
    await client.query("up")
    await _client(handler).query("up")
    assert seen == ["Bearer static", "Bearer first", "Bearer second-rotated", None]
    with pytest.raises(CollectionError, match="token file"):
        await _client(handler, token_path=str(tmp_path / "absent")).query("up")


def test_tls_verification_is_on_unless_skipped(tmp_path: Path) -> None:
    ctx = build_ssl_context(PrometheusConfig(base_url="https://p"))
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    insecure = build_ssl_context(PrometheusConfig(base_url="https://p", insecure_skip_verify=True))
    assert insecure.verify_mode == ssl.CERT_NONE
    with pytest.raises(ConfigError, match="TLS"):
        build_ssl_context(PrometheusConfig(base_url="https://p", ca_cert_path=str(tmp_path / "missing.crt")))
    with pytest.raises(ConfigError, match="PROMETHEUS_BASE_URL"):
        PrometheusClient(PrometheusConfig())


def test_response_shape_is_prometheus() -> None:
    # Guard the fake itself against drifting from Prometheus' API shape.
    body = _vector([(A, 1.5)])
    assert json.loads(json.dumps(body))["data"]["result"][0]["value"] == [NOW, "1.5"]


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"metric": {"a": "b"}, "value": [NOW, "2.5"]}, ({"a": "b"}, 2.5)),
        ({"metric": {}, "value": [NOW, "NaN"]}, ({}, math.nan)),
        ({"value": [int(NOW), "+Inf"]}, ({}, math.inf)),  # metric omitted, integer timestamp
        ({"metric": {"a": "b"}}, None),  # no value: skipped
        ({"metric": {"a": "b"}, "value": [NOW, 3]}, "malformed"),  # a number where a string belongs
        ({"metric": {"a": 1}, "value": [NOW, "1"]}, "malformed"),
        ({"metric": {"a": "b"}, "value": ["soon", "1"]}, "malformed"),
        ("garbage", "malformed"),
    ],
)
async def test_vector_samples_are_read_exactly_or_rejected(item: Any, expected: Any) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json={"status": "success", "data": {"resultType": "vector", "result": [item]}}
        )

    client = _client(answer)
    if expected == "malformed":
        with pytest.raises(CollectionError, match="malformed vector"):
            await client.query("up")
        return
    samples = await client.query("up")
    if expected is None:
        assert samples == []
        return
    (sample,) = samples
    labels, value = expected
    assert dict(sample.labels) == labels and sample.timestamp == NOW
    assert sample.value == value or (math.isnan(value) and math.isnan(sample.value))


# --- bounds: whatever Prometheus does, a query and a cycle end, and a body has a size limit -------------


def _bounded(handler: Any, **kwargs: Any) -> PrometheusClient:
    config = PrometheusConfig(base_url="https://prom.test:9090")
    return PrometheusClient(config, transport=httpx.MockTransport(handler), backoff=0.0, **kwargs)


async def _dribble() -> Any:
    """One byte at a time, for ever: each read is quick, the response never ends."""
    yield b'{"status":"success","data":{"resultType":"vector","result":['
    while True:
        await asyncio.sleep(0.01)
        yield b" "


async def test_a_dribbled_response_ends_at_the_query_deadline() -> None:
    client = _bounded(lambda _: httpx.Response(200, content=_dribble()), timeout=0.3, retries=5)
    with pytest.raises(CollectionError, match="deadline"):
        await client.query("up")
    assert client.queries_issued == 1  # the deadline covers retries: none was started after it


async def test_a_hanging_prometheus_ends_at_the_query_deadline() -> None:
    async def hang(_: httpx.Request) -> httpx.Response:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    with pytest.raises(CollectionError, match="deadline"):
        await _bounded(hang, timeout=0.2).query("up")


async def test_retries_stop_at_the_deadline() -> None:
    calls = []

    async def slow_503(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        await asyncio.sleep(0.1)
        return httpx.Response(503, text="overloaded")

    with pytest.raises(CollectionError):
        await _bounded(slow_503, timeout=0.25, retries=100).query("up")
    assert 1 <= len(calls) <= 3  # not 101


async def test_the_cycle_has_one_deadline_for_all_its_queries() -> None:
    """Each query alone would finish within its own deadline; together they share the cycle's."""
    fake = FakePrometheus({"newest": [(A, NOW)]})

    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.5)
        return fake(request)

    client = _bounded(slow, timeout=5.0, cycle_timeout=0.2)
    with pytest.raises(CollectionError, match=r"deadline|within"):
        await Collector(client).collect(now=NOW)
    quick = _bounded(fake, timeout=5.0, cycle_timeout=5.0)
    assert (await Collector(quick).collect(now=NOW)).lookup("llama", "team-a").state == "ok"


async def test_a_body_over_the_cap_is_refused() -> None:
    huge = _vector([(A, 1.0)] * 50)
    size = len(json.dumps(huge))
    declared = _bounded(lambda _: httpx.Response(200, json=huge), max_response_bytes=size // 2)
    with pytest.raises(CollectionError, match="cap"):
        await declared.query("up")

    async def endless() -> Any:
        yield b'{"status":"success","data":{"resultType":"vector","result":['
        while True:
            yield b'{"metric":{},"value":[1,"1"]},' * 100

    streamed = _bounded(lambda _: httpx.Response(200, content=endless()), max_response_bytes=1 << 20)
    with pytest.raises(CollectionError, match="cap"):
        await streamed.query("up")
    assert (
        len(await _bounded(lambda _: httpx.Response(200, json=huge), max_response_bytes=size).query("up"))
        == 50
    )


@pytest.mark.parametrize(
    "body",
    [
        b"\x00\xff garbage",
        b"[" * 100_000,  # nested far beyond any recursion limit
        b'{"status":"success","data":' + b'{"a":' * 50_000 + b"1" + b"}" * 50_001,
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":1},"value":[1,"x"]}]}}',
        b'{"status":"success"',
    ],
)
async def test_garbage_is_a_collection_error(body: bytes) -> None:
    with pytest.raises(CollectionError):
        await _bounded(lambda _: httpx.Response(200, content=body)).query("up")


def test_no_token_over_plain_http_unless_allowed(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret")
    for cfg in (
        PrometheusConfig(base_url="http://prom:9090", token_path=str(token)),
        PrometheusConfig(base_url="http://prom:9090", bearer_token="s3cret"),
    ):
        with pytest.raises(ConfigError, match="PROMETHEUS_ALLOW_TOKEN_OVER_HTTP"):
            PrometheusClient(cfg)
    PrometheusClient(PrometheusConfig(base_url="http://prom:9090"))  # no token: fine
    PrometheusClient(PrometheusConfig(base_url="https://prom:9090", token_path=str(token)))
    allowed = PrometheusConfig.from_keys(
        {
            "PROMETHEUS_BASE_URL": "http://prom:9090",
            "PROMETHEUS_TOKEN_PATH": str(token),
            "PROMETHEUS_ALLOW_TOKEN_OVER_HTTP": "true",
        }
    )
    assert allowed.allow_token_over_http
    PrometheusClient(allowed)


# --- range queries (a new forecaster's history) -------------------------------------------------------------


async def test_a_range_query_reads_each_series_points_and_sends_its_span() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        result = [
            {"metric": {"model_name": "m", "namespace": "ns"}, "values": [[NOW - 60, "1.5"], [NOW, "NaN"]]},
            {"metric": {"model_name": "other"}, "values": []},
        ]
        return httpx.Response(
            200, json={"status": "success", "data": {"resultType": "matrix", "result": result}}
        )

    client = _client(handler)
    query = history_query(None, 60.0)
    assert query == "sum by (model_name, namespace) (rate(vllm:request_success_total[1m]))"
    series = await client.query_range(query, start=NOW - 3600, end=NOW, step=60.0)
    assert seen[0].url.path == "/api/v1/query_range"
    params = dict(seen[0].url.params)
    assert params == {"query": query, "start": f"{NOW - 3600:.3f}", "end": f"{NOW:.3f}", "step": "60"}
    assert series[0].labels == {"model_name": "m", "namespace": "ns"}
    assert series[0].points[0] == (NOW - 60, 1.5) and math.isnan(series[0].points[1][1])
    assert series[1].points == () and client.queries_issued == 1
    assert history_query("inference_objective_request_total", 60.0).startswith(
        "sum by (model_name, namespace) (rate(inference_objective_request_total[1m]))"
    )


def test_a_history_query_names_a_few_models_literally_and_reads_all_of_many() -> None:
    few = history_query(None, 60.0, ["meta/llama-3.1-8b", 'odd.name+(v2)"', "meta/llama-3.1-8b"])
    # RE2 metacharacters escaped, then the backslashes and the quote escaped for the PromQL string.
    selector = '{model_name=~"meta/llama-3\\\\.1-8b|odd\\\\.name\\\\+\\\\(v2\\\\)\\""}'
    assert few == f"sum by (model_name, namespace) (rate(vllm:request_success_total{selector}[1m]))"
    many = history_query(None, 60.0, [f"m{i}" for i in range(HISTORY_MODELS_NAMED + 1)])
    assert many == "sum by (model_name, namespace) (rate(vllm:request_success_total[1m]))"


async def test_a_range_query_refuses_other_results_and_bad_spans_and_retries_like_instant_ones() -> None:
    vector = _client(lambda _r: httpx.Response(200, json=_vector([({"model_name": "m"}, 1.0)])))
    with pytest.raises(CollectionError, match="expected a matrix result, got vector"):
        await vector.query_range("x", start=NOW - 60, end=NOW, step=60.0)
    with pytest.raises(CollectionError, match="step > 0 and end >= start"):
        await vector.query_range("x", start=NOW, end=NOW - 60, step=60.0)
    malformed = _client(
        lambda _r: httpx.Response(
            200, json={"status": "success", "data": {"resultType": "matrix", "result": [{"values": "x"}]}}
        )
    )
    with pytest.raises(CollectionError, match="malformed matrix"):
        await malformed.query_range("x", start=NOW - 60, end=NOW, step=60.0)
    calls = 0

    def flaky(_request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            return httpx.Response(503, text="overloaded")
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": []}})

    assert await _client(flaky).query_range("x", start=NOW - 60, end=NOW, step=60.0) == []
    assert calls == 2
