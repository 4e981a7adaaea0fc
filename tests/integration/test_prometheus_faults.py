"""A Prometheus that misbehaves: the operator process, against the real API server and a Prometheus
stand-in (a small HTTP server in the test) that is slow, dribbles its answer a byte at a time for ever,
hangs, answers garbage, deeply nested JSON or a body without end.

Every such fault is one the operator must survive in bounded time: its cycles keep completing (a cycle
stuck on one response would stop them all), the variant reports why (``MetricsAvailable=False``,
``PrometheusError``, and an Event), and nothing is scaled down. At the end the stand-in answers properly
with a low load, and the same variant is scaled down: the faults, not the setup, held it.

A bearer token is never sent over plain ``http://`` unless the configuration explicitly allows it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from localcluster import LocalCluster, wait_for
from localcluster.net import free_port
from variant_autoscaler.adapters.prometheus import build_queries
from vatesting.harness import (
    OperatorProcess,
    conditions,
    deployment_replicas,
    events,
    get_va,
    install,
    running,
    set_main_config,
    va_manifest,
)

WINDOW_SECONDS = 5.0
# The operator's cap on one answer (WVA_PROMETHEUS_MAX_RESPONSE_BYTES), lowered from its 16 MiB so that
# the "huge" fault passes it well within the 1 s deadline on a busy machine: every query of the cycle
# streams at once from this one thread, and at 16 MiB each the deadline could come first.
RESPONSE_CAP = 1 << 20
MODEL = "default/default"  # WVA's sample VA


class PrometheusStandIn:
    """``/api/v1/query`` in one of several behaviours (``mode``), served from a thread of its own."""

    def __init__(self) -> None:
        self.mode = "healthy"
        self.namespace = ""
        self.requests: list[dict[str, Any]] = []
        self.port = free_port()
        self._queries = {query: name for name, query in build_queries(WINDOW_SECONDS).items()}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        asyncio.run_coroutine_threadsafe(self._cancel_the_rest(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    async def _cancel_the_rest(self) -> None:
        """Handlers still holding their answers (hang, slow) end with the stand-in."""
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/api/v1/query", self._query)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def _healthy(self, query: str, at: float) -> dict[str, Any]:
        """A quiet model: one request a minute, short prompts, fast tokens, nothing waiting."""
        name = self._queries.get(query)
        values = {
            "newest": at,
            "completion_rate": 1 / 60,
            "avg_input_tokens": 100.0,
            "avg_output_tokens": 64.0,
            "ttft_seconds": 0.05,
            "itl_seconds": 0.01,
        }
        value = values.get(name or "", 0.0)
        sample = {"metric": {"model_name": MODEL, "namespace": self.namespace}, "value": [at, repr(value)]}
        return {"status": "success", "data": {"resultType": "vector", "result": [sample]}}

    async def _query(self, request: web.Request) -> web.StreamResponse:
        self.requests.append({"mode": self.mode, "authorization": request.headers.get("Authorization")})
        at = float(request.query.get("time", "0") or 0)
        body = json.dumps(self._healthy(request.query.get("query", ""), at)).encode()
        match self.mode:
            case "healthy":
                return web.Response(body=body, content_type="application/json")
            case "slow":  # a valid answer, later than any deadline the operator keeps
                await asyncio.sleep(30)
                return web.Response(body=body, content_type="application/json")
            case "hang":
                await asyncio.Event().wait()
            case "garbage":
                return web.Response(body=b"\x00\x9f<html>proxy error</html>\xff", content_type="text/html")
            case "nested":
                return web.Response(
                    body=b'{"status":"success","data":' + b"[" * 200_000, content_type="application/json"
                )
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        if self.mode == "dribble":  # each byte arrives quickly, the answer never ends
            await response.write(body[:20])
            while True:
                await asyncio.sleep(0.05)
                await response.write(b" ")
        # "huge": a body without end, in 256 KiB chunks, no Content-Length
        chunk = b"[" + b" " * (1 << 18)
        for _ in range(4 * RESPONSE_CAP // len(chunk)):
            await response.write(chunk)
        return response


@pytest.fixture
def prometheus() -> Iterator[PrometheusStandIn]:
    stand_in = PrometheusStandIn()
    stand_in.start()
    try:
        yield stand_in
    finally:
        stand_in.stop()


def _deployment(namespace: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllme-deployment", "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "vllme"}},
            "template": {
                "metadata": {"labels": {"app": "vllme"}},
                "spec": {"containers": [{"name": "vllm", "image": "none.invalid/vllm"}]},
            },
        },
    }


FAULTS = {
    "slow": "did not complete within",
    "hang": "did not complete within",
    "dribble": "did not complete within",
    "garbage": "unexpected Prometheus response",
    "nested": "unexpected Prometheus response",
    "huge": f"passed the cap of {RESPONSE_CAP} bytes",
}


def test_a_misbehaving_prometheus_never_stalls_a_cycle_nor_scales_anything_down(
    api_cluster: LocalCluster, namespace: str, prometheus: PrometheusStandIn, tmp_path: Path
) -> None:
    prometheus.namespace = namespace
    prometheus.mode = "slow"
    kubeconfig = install(api_cluster, prometheus.url, METRICS_WINDOW="5s")
    api_cluster.apply(_deployment(namespace, replicas=3))
    api_cluster.apply(
        va_manifest(
            namespace,
            minReplicas=1,
            actuation={"mode": "patch"},
            scaleDown={"stabilizationWindowSeconds": 0},
        )
    )
    operator = OperatorProcess(
        kubeconfig,
        namespace,
        tmp_path,
        env={
            "WVA_PROMETHEUS_TIMEOUT_SECONDS": "1",
            "WVA_PROMETHEUS_RETRIES": "1",
            "WVA_PROMETHEUS_MAX_RESPONSE_BYTES": str(RESPONSE_CAP),
        },
    )
    with running(operator):
        for mode, message in FAULTS.items():
            prometheus.mode = mode
            done = operator.cycles()
            # Cycles go on completing while the stand-in holds its answers for ever.
            wait_for(
                lambda done=done: operator.cycles() >= done + 2,  # type: ignore[misc]
                timeout=60,
                what=f"two cycles with Prometheus {mode}",
            )

            def reported(message: str = message) -> dict[str, Any] | None:
                cond = conditions(get_va(api_cluster, namespace)).get("MetricsAvailable")
                ok = cond is not None and cond["reason"] == "PrometheusError" and message in cond["message"]
                return cond if ok else None

            wait_for(
                reported, timeout=60, what=f"MetricsAvailable=False naming the {mode} fault", interval=0.5
            )
            assert deployment_replicas(api_cluster, namespace, "vllme-deployment") == 3, mode
            status = get_va(api_cluster, namespace)["status"]
            assert status["desiredOptimizedAlloc"]["numReplicas"] == 3, (mode, status)
            assert operator.health()[0] == 200
        assert any(r["mode"] == mode for mode in FAULTS for r in prometheus.requests)
        warnings = [e for e in events(api_cluster, namespace) if e["type"] == "Warning"]
        assert "PrometheusError" in {e["reason"] for e in warnings}

        # The control: a quiet model's metrics, and the same variant is scaled down.
        prometheus.mode = "healthy"
        wait_for(
            lambda: deployment_replicas(api_cluster, namespace, "vllme-deployment") < 3,
            timeout=90,
            what="the scale-down once Prometheus answers properly",
        )
    assert operator.process is not None and operator.process.returncode == 0


def test_no_token_over_plain_http_unless_allowed(
    api_cluster: LocalCluster, namespace: str, prometheus: PrometheusStandIn, tmp_path: Path
) -> None:
    prometheus.namespace = namespace
    token = tmp_path / "token"
    token.write_text("s3cret-service-account-token")
    kubeconfig = install(api_cluster, prometheus.url, PROMETHEUS_TOKEN_PATH=str(token))
    api_cluster.apply(_deployment(namespace, replicas=1))
    api_cluster.apply(va_manifest(namespace))
    operator = OperatorProcess(kubeconfig, namespace, tmp_path)
    with running(operator):

        def refused() -> dict[str, Any] | None:
            cond = conditions(get_va(api_cluster, namespace)).get("MetricsAvailable")
            ok = cond is not None and "PROMETHEUS_ALLOW_TOKEN_OVER_HTTP" in cond["message"]
            return cond if ok else None

        cond = wait_for(refused, timeout=60, what="the token refused over http://", interval=0.5)
        assert cond["status"] == "False" and "plain http://" in cond["message"]
        assert prometheus.requests == []  # not even a request without it
        set_main_config(api_cluster, PROMETHEUS_ALLOW_TOKEN_OVER_HTTP="true")
        wait_for(
            lambda: (
                conditions(get_va(api_cluster, namespace)).get("MetricsAvailable", {}).get("status") == "True"
            ),
            timeout=60,
            what="metrics once the token may travel over http://",
            interval=0.5,
        )
    assert {r["authorization"] for r in prometheus.requests} == {"Bearer s3cret-service-account-token"}
