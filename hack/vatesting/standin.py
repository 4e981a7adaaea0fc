"""A stand-in /metrics endpoint for tests: the series vLLM pods and the inference gateway export, without
running either, scraped by the local cluster's real Prometheus.

* Per pod (:meth:`VllmStandIn.pod`): ``vllm:request_success_total`` growing at a set rate, the prompt and
  generation token, TTFT and ITL summaries (``_sum``/``_count``, what the operator's ratios read), the
  waiting queue, ``vllm:kv_cache_usage_perc`` and ``vllm:cache_config_info`` — each labelled
  ``model_name``, ``namespace`` and ``pod`` (``cache_config_info`` without ``model_name``, as vLLM's).
* The gateway's ``inference_extension_flow_control_queue_size{target_model_name}`` (:meth:`queue`).

Counters are computed at scrape time from the rate, so ``rate()`` reads the rate set.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector

from localcluster import LocalCluster
from localcluster.net import free_port

__all__ = ["StandInPod", "VllmStandIn"]


@dataclass
class StandInPod:
    model: str
    namespace: str
    pod: str
    rpm: float = 30.0
    kv_usage: float = 0.3
    waiting: float = 0.0
    input_tokens: float = 100.0
    output_tokens: float = 64.0
    ttft_seconds: float = 0.05
    itl_seconds: float = 0.02
    num_gpu_blocks: int = 1000
    block_size: int = 16
    # Counter base, moved forward on each rate change so that counters never go down.
    _count: float = 0.0
    _since: float = 0.0

    def requests(self, now: float) -> float:
        return self._count + self.rpm / 60.0 * (now - self._since)


class _Collector(Collector):
    def __init__(self, owner: VllmStandIn) -> None:
        self.owner = owner

    def collect(self) -> Iterator[Any]:
        now = time.monotonic()
        with self.owner.lock:
            pods = list(self.owner.pods.values())
            queues = dict(self.owner.queues)
        labels = ["model_name", "namespace", "pod"]
        success = CounterMetricFamily("vllm:request_success", "requests", labels=[*labels, "finished_reason"])
        waiting = GaugeMetricFamily("vllm:num_requests_waiting", "waiting", labels=labels)
        usage = GaugeMetricFamily("vllm:kv_cache_usage_perc", "kv usage", labels=labels)
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "cache config",
            labels=["namespace", "pod", "num_gpu_blocks", "block_size"],
        )
        summaries = {
            name: SummaryMetricFamily(name, name, labels=labels)
            for name in (
                "vllm:request_prompt_tokens",
                "vllm:request_generation_tokens",
                "vllm:time_to_first_token_seconds",
                "vllm:time_per_output_token_seconds",
                "vllm:inter_token_latency_seconds",
            )
        }
        for p in pods:
            values = [p.model, p.namespace, p.pod]
            n = p.requests(now)
            success.add_metric([*values, "stop"], n)
            waiting.add_metric(values, p.waiting)
            usage.add_metric(values, p.kv_usage)
            info.add_metric([p.namespace, p.pod, str(p.num_gpu_blocks), str(p.block_size)], 1.0)
            per_request = {
                "vllm:request_prompt_tokens": p.input_tokens,
                "vllm:request_generation_tokens": p.output_tokens,
                "vllm:time_to_first_token_seconds": p.ttft_seconds,
                "vllm:time_per_output_token_seconds": p.itl_seconds,
                "vllm:inter_token_latency_seconds": p.itl_seconds,
            }
            for name, each in per_request.items():
                summaries[name].add_metric(values, count_value=n, sum_value=n * each)
        queue = GaugeMetricFamily(
            "inference_extension_flow_control_queue_size", "gateway queue", labels=["target_model_name"]
        )
        for model, size in queues.items():
            queue.add_metric([model], size)
        yield from (success, waiting, usage, info, *summaries.values(), queue)


def _handler(registry: CollectorRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # The classic text format, as vLLM serves it: prometheus_client's own server would negotiate
        # OpenMetrics, whose name escaping turns vLLM's "vllm:" prefix into "vllm_".
        def do_GET(self) -> None:
            body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


class VllmStandIn:
    """The endpoint, registered as a target of the cluster's Prometheus (job ``targets``)."""

    def __init__(self, cluster: LocalCluster, name: str = "vllm-standin") -> None:
        self.cluster = cluster
        self.name = name
        self.lock = threading.Lock()
        self.pods: dict[tuple[str, str], StandInPod] = {}
        self.queues: dict[str, float] = {}
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        self.port = free_port()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(registry))
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)
        self._thread.start()
        # honor_labels is off in the targets job: the series' own namespace/pod labels are kept as long as
        # the target carries none of its own.
        cluster.prometheus_server().add_targets(name, [f"127.0.0.1:{self.port}"])

    def pod(self, model: str, namespace: str, pod: str, **values: Any) -> StandInPod:
        """Add a pod's series, or change them (a rate change keeps the counters monotonic)."""
        now = time.monotonic()
        with self.lock:
            found = self.pods.get((namespace, pod))
            if found is None:
                found = StandInPod(model, namespace, pod, _since=now)
                self.pods[(namespace, pod)] = found
            found._count, found._since = found.requests(now), now
            for key, value in values.items():
                setattr(found, key, value)
            return found

    def remove(self, namespace: str, pod: str) -> None:
        with self.lock:
            self.pods.pop((namespace, pod), None)

    def queue(self, model: str, size: float | None) -> None:
        """The gateway's queue for ``model`` (None: no series)."""
        with self.lock:
            if size is None:
                self.queues.pop(model, None)
            else:
                self.queues[model] = size

    def close(self) -> None:
        self.cluster.prometheus_server().remove_targets(self.name)
        self._server.shutdown()
        self._thread.join(10)
