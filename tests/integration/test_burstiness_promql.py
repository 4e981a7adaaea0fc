"""The burstiness and length queries are PromQL a real Prometheus accepts (and answers for real series)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from localcluster import Binaries, PrometheusServer, wait_for
from localcluster.net import free_port
from localcluster.procs import Supervisor
from variant_autoscaler.adapters.burstiness import build_tail_queries


class _Vllm(BaseHTTPRequestHandler):
    """The series the queries read, as a vLLM server exposes them (a counter that grows each scrape)."""

    count = 0

    def do_GET(self) -> None:
        _Vllm.count += 7
        labels = 'model_name="m",namespace="ns"'
        body = "\n".join(
            [
                "# TYPE vllm:request_success_total counter",
                f"vllm:request_success_total{{{labels}}} {_Vllm.count}",
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
    for promql in build_tail_queries(lookback_s=120.0, windows_s=(30.0,)).values():
        prometheus.query(promql)  # raises on a parse or evaluation error
    # A bucketed series comes back grouped by le, as read_tail_inputs expects.
    buckets = wait_for(
        lambda: prometheus.query(build_tail_queries(lookback_s=120.0, windows_s=(30.0,))["input:buckets"]),
        timeout=90,
        what="the length buckets",
    )
    assert {row["metric"].get("le") for row in buckets} == {"100", "+Inf"}
