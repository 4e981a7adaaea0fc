"""The harness's Prometheus on its own: HTTPS with our CA, runtime scrape targets, restart keeping data."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from localcluster import Binaries, PrometheusServer, ScrapeJob, wait_for
from localcluster.net import free_port, http_get, ssl_context
from localcluster.pki import CertificateAuthority
from localcluster.procs import Supervisor


class _Metrics(BaseHTTPRequestHandler):
    body = b'# TYPE harness_probe gauge\nharness_probe{kind="test"} 42\n'

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def metrics_target() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join(10)


@pytest.fixture
def tls_prometheus(tmp_path: Path) -> Iterator[tuple[PrometheusServer, CertificateAuthority]]:
    binaries = Binaries.locate()
    binaries.require("prometheus")
    ca = CertificateAuthority(tmp_path / "pki", "test")
    serving = ca.issue(
        "prometheus", "prometheus", dns_names=("localhost",), ip_addresses=("127.0.0.1",), server=True
    )
    supervisor = Supervisor(tmp_path)
    server = PrometheusServer(
        binary=binaries.prometheus,
        directory=tmp_path / "prometheus",
        supervisor=supervisor,
        tls=serving,
        ca_file=ca.cert_path,
    )
    server.start()
    try:
        yield server, ca
    finally:
        supervisor.stop_all()


def test_prometheus_serves_https_verified_by_the_generated_ca(
    tls_prometheus: tuple[PrometheusServer, CertificateAuthority],
) -> None:
    server, ca = tls_prometheus
    assert server.url.startswith("https://127.0.0.1:")
    ok = http_get(f"{server.url}/-/ready", ssl_context(ca.cert_path))
    assert ok is not None
    assert ok[0] == 200
    assert http_get(f"{server.url}/-/ready", ssl_context()) is None  # not trusted without our CA
    plain = http_get(server.url.replace("https://", "http://") + "/-/ready")
    assert plain is not None
    assert plain[0] == 400  # "client sent an HTTP request to an HTTPS server"


def test_targets_added_at_runtime_are_scraped_and_survive_a_restart(
    tls_prometheus: tuple[PrometheusServer, CertificateAuthority], metrics_target: str
) -> None:
    server, _ = tls_prometheus
    server.add_targets("probe", [metrics_target], {"team": "harness"})
    found = wait_for(
        lambda: server.query('harness_probe{team="harness"}'), timeout=60, what="the probe target"
    )
    assert found[0]["value"][1] == "42"
    assert found[0]["metric"]["job"] == "targets"

    server.add_job(ScrapeJob(name="probe-job", targets=(metrics_target,), labels=(("source", "job"),)))
    assert wait_for(
        lambda: server.query('harness_probe{job="probe-job",source="job"}'), timeout=60, what="the job"
    )

    port = server.port
    server.restart()
    assert server.port == port
    # The TSDB directory is kept: samples from before the restart are still there.
    assert server.query('count_over_time(harness_probe{job="probe-job"}[10m])')
    server.remove_job("probe-job")
    server.remove_targets("probe")
