"""The burstiness, length, burst-guard, arrival and forecast-history queries are PromQL a real Prometheus
accepts (and answers for real series)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from localcluster import Binaries, PrometheusServer, wait_for
from localcluster.net import free_port
from localcluster.procs import Supervisor
from variant_autoscaler.adapters.burstiness import build_tail_queries
from variant_autoscaler.adapters.guard_signals import GuardSignals, build_guard_query, read_guard_signals
from variant_autoscaler.adapters.prometheus import (
    QUERIES_PER_CYCLE,
    Collector,
    MetricsSnapshot,
    PrometheusClient,
    Sample,
    arrivals_query,
    history_query,
)
from variant_autoscaler.api.config import PrometheusConfig

GATEWAY_COUNTER = "inference_objective_request_total"


class _Vllm(BaseHTTPRequestHandler):
    """The series the queries read, as a vLLM server exposes them (a counter that grows each scrape),
    and an inference gateway's counter of arriving requests, which grows faster: in overload requests
    arrive that vLLM never finishes."""

    count = 0

    def do_GET(self) -> None:
        _Vllm.count += 7
        labels = 'model_name="m",namespace="ns"'
        body = "\n".join(
            [
                f"# TYPE {GATEWAY_COUNTER} counter",
                f'{GATEWAY_COUNTER}{{{labels},target_model_name="m"}} {3 * _Vllm.count}',
                "# TYPE vllm:request_success_total counter",
                f"vllm:request_success_total{{{labels}}} {_Vllm.count}",
                "# TYPE vllm:num_requests_waiting gauge",
                f"vllm:num_requests_waiting{{{labels}}} {_Vllm.count % 5}",
                "# TYPE vllm:kv_cache_usage_perc gauge",
                f"vllm:kv_cache_usage_perc{{{labels}}} 0.25",
                *(
                    line
                    for name in ("vllm:request_prompt_tokens", "vllm:request_generation_tokens")
                    for line in (
                        f"# TYPE {name} histogram",
                        f'{name}_bucket{{{labels},le="100"}} {_Vllm.count // 2}',
                        f'{name}_bucket{{{labels},le="+Inf"}} {_Vllm.count}',
                        f"{name}_sum{{{labels}}} {_Vllm.count * 120}",
                        f"{name}_count{{{labels}}} {_Vllm.count}",
                    )
                ),
                "",
            ]
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[PrometheusServer]:
    binaries = Binaries.locate()
    binaries.require("prometheus")
    target = ThreadingHTTPServer(("127.0.0.1", free_port()), _Vllm)
    thread = threading.Thread(target=target.serve_forever, daemon=True)
    thread.start()
    supervisor = Supervisor(tmp_path)
    server = PrometheusServer(
        binary=binaries.prometheus, directory=tmp_path / "prometheus", supervisor=supervisor
    )
    server.start()
    server.add_targets("vllm", [f"127.0.0.1:{target.server_address[1]}"], {})
    try:
        yield server
    finally:
        supervisor.stop_all()
        target.shutdown()
        thread.join(10)


def test_every_query_is_valid_promql(prometheus: PrometheusServer) -> None:
    wait_for(lambda: prometheus.query("vllm:request_success_total"), timeout=90, what="the first scrape")
    # A series seconds old holds none of the look-back's successive differences: no burstiness yet.
    assert prometheus.query(build_tail_queries(lookback_s=120.0, windows_s=(30.0,))["idc:30s"]) == []
    for promql in build_tail_queries(lookback_s=120.0, windows_s=(30.0,)).values():
        prometheus.query(promql)  # raises on a parse or evaluation error
    # A bucketed series comes back grouped by le, as read_tail_inputs expects.
    buckets = wait_for(
        lambda: prometheus.query(build_tail_queries(lookback_s=120.0, windows_s=(30.0,))["input:buckets"]),
        timeout=90,
        what="the length buckets",
    )
    assert {row["metric"].get("le") for row in buckets} == {"100", "+Inf"}


def test_a_young_series_is_read_at_its_own_rate_not_diluted_by_the_look_back(
    prometheus: PrometheusServer,
) -> None:
    """The rate the burstiness is read at: 7 requests a 2 s scrape, 3.5 req/s, from a series some 20 s
    old, where rate() over the ten-minute look-back gives a thirtieth of it."""
    wait_for(
        lambda: prometheus.query("count_over_time(vllm:request_success_total[1m]) >= 10"),
        timeout=90,
        what="ten scrapes",
    )
    (row,) = prometheus.query(build_tail_queries(lookback_s=600.0, windows_s=(4.0, 8.0))["rate"])
    assert float(row["value"][1]) == pytest.approx(3.5, rel=0.3)
    diluted = prometheus.query("sum(rate(vllm:request_success_total[10m]))")
    assert float(diluted[0]["value"][1]) < 1.0


def test_the_burstiness_is_read_once_the_series_spans_the_look_back(prometheus: PrometheusServer) -> None:
    """Over a 24 s look-back of 4 s windows (five differences but one needed), the IDC comes once the
    series is about as old as the look-back, not before: 7 requests every 2 s scrape, no burstiness (0:
    successive counts equal)."""
    query = build_tail_queries(lookback_s=24.0, windows_s=(4.0,))["idc:4s"]
    first = wait_for(lambda: prometheus.query("vllm:request_success_total"), timeout=90, what="a scrape")
    born = float(first[0]["value"][0])
    rows = wait_for(lambda: prometheus.query(query), timeout=90, what="the IDC over 4 s")
    assert float(rows[0]["value"][0]) - born >= 20.0
    assert float(rows[0]["value"][1]) == pytest.approx(0.0, abs=0.2)


def test_the_guard_reads_its_signals_per_model_in_one_query(prometheus: PrometheusServer) -> None:
    """Four signals, and two more over the rise window (here 10 s of the 30 s window, 2 s scrapes)."""
    query = build_guard_query(30.0, 10.0)
    every = {"waiting", "growth", "completions", "kv", "growth_short", "completions_short"}

    def signals() -> GuardSignals | None:
        rows = prometheus.query(query)
        # The rates and the growths need two scrapes in their windows: wait for all six parts.
        if {r["metric"].get("signal") for r in rows} != every:
            return None
        samples = [Sample(r["metric"], float(r["value"][1]), float(r["value"][0])) for r in rows]
        return read_guard_signals(samples).get(("m", "ns"))

    found = wait_for(signals, timeout=120, what="all six guard signals")
    assert found.kv == 0.25 and found.completions > 0 and 0 <= found.waiting < 5
    assert found.completions_short is not None and found.completions_short > 0
    assert found.growth_short is not None


def test_the_arrival_counter_is_the_forecast_input_where_configured(prometheus: PrometheusServer) -> None:
    """With ARRIVAL_COUNTER, one query more reads each model's arrivals (what the forecast learns); without
    it, the cycle's queries are unchanged and nothing is made up."""
    wait_for(lambda: prometheus.query(arrivals_query(GATEWAY_COUNTER, 30.0)), timeout=90, what="two scrapes")

    async def collect(counter: str | None) -> MetricsSnapshot:
        client = PrometheusClient(PrometheusConfig(base_url=prometheus.url), backoff=0.1)
        try:
            collector = Collector(client)
            return await collector.collect(now=time.time(), window_seconds=30.0, arrival_counter=counter)
        finally:
            await client.aclose()

    with_counter, without = asyncio.run(collect(GATEWAY_COUNTER)), asyncio.run(collect(None))
    assert with_counter.queries == QUERIES_PER_CYCLE + 1 and without.queries == QUERIES_PER_CYCLE
    found, plain = with_counter.lookup("m", "ns").metrics, without.lookup("m", "ns").metrics
    assert found is not None and plain is not None and plain.offered_rate is None
    # the gateway's counter grows three times as fast as the completions
    assert found.offered_rate is not None
    assert found.offered_rate == pytest.approx(3 * found.completion_rate, rel=0.2)


def test_a_new_forecasters_history_is_one_range_query_of_every_models_rate(
    prometheus: PrometheusServer,
) -> None:
    """The range query a new forecaster learns from (engine/ahead.py: backfill), against a real
    Prometheus: one series per model, a point per step, the completions' or the arrival counter's rate."""
    wait_for(lambda: prometheus.query(arrivals_query(GATEWAY_COUNTER, 30.0)), timeout=90, what="two scrapes")
    time.sleep(4.0)  # a few more scrapes: several steps of history

    async def history(counter: str | None) -> list[tuple[float, float]]:
        client = PrometheusClient(PrometheusConfig(base_url=prometheus.url), backoff=0.1)
        try:
            now = time.time()
            found = await client.query_range(history_query(counter, 30.0), start=now - 60, end=now, step=2.0)
            # Named (a few new models), with a name that needs escaping beside: the same series.
            named = await client.query_range(
                history_query(counter, 30.0, ["m", 'odd.name+(v2)"']), start=now - 60, end=now, step=2.0
            )
            assert [s.labels for s in named] == [s.labels for s in found if s.labels.get("model_name") == "m"]
            assert client.queries_issued == 2
        finally:
            await client.aclose()
        (series,) = [s for s in found if s.labels.get("model_name") == "m"]
        assert series.labels.get("namespace") == "ns"
        return list(series.points)

    completions, arrivals = asyncio.run(history(None)), asyncio.run(history(GATEWAY_COUNTER))
    assert len(completions) >= 3 and all(
        b[0] - a[0] == pytest.approx(2.0) for a, b in itertools.pairwise(completions)
    )
    assert all(v > 0 for _, v in completions[-3:])
    # the gateway's counter grows three times as fast as the completions
    assert arrivals[-1][1] == pytest.approx(3 * completions[-1][1], rel=0.2)
