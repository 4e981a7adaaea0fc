"""In-memory fakes for engine tests: a Kubernetes API server and a Prometheus, as httpx transports.

They speak the real HTTP APIs (paths, verbs, merge and JSON patches, resourceVersion conflicts), so the
engine runs through its real adapters (KubeClient, PrometheusClient) with no network and no mocks.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from variant_autoscaler.adapters.burstiness import build_tail_queries
from variant_autoscaler.adapters.exporter import Exporter
from variant_autoscaler.adapters.guard_signals import build_guard_query
from variant_autoscaler.adapters.kube import CallableTransport, Credentials, KubeClient
from variant_autoscaler.adapters.profile_metrics import build_queries as build_profile_queries
from variant_autoscaler.adapters.prometheus import (
    GATEWAY_QUEUE_QUERY,
    Collector,
    PrometheusClient,
    build_queries,
    build_saturation_queries,
)
from variant_autoscaler.api.config import PrometheusConfig
from variant_autoscaler.controller.events import EventRecorder
from variant_autoscaler.controller.lease import AlwaysLeader
from variant_autoscaler.engine import Engine
from variant_autoscaler.planner import OptimizerPlanner
from variant_autoscaler.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_NS = "workload-variant-autoscaler-system"

_PLURALS = {
    "configmaps": ("", "v1"),
    "pods": ("", "v1"),
    "events": ("", "v1"),
    "deployments": ("apps", "v1"),
    "statefulsets": ("apps", "v1"),
    "horizontalpodautoscalers": ("autoscaling", "v2"),
    "variantautoscalings": ("llmd.ai", "v1alpha1"),
    "scaledobjects": ("keda.sh", "v1alpha1"),
}
_IDLE = re.compile(r"increase\(vllm:request_success_total\[(\w+)\]\)")
# The arrival counter's query (ARRIVAL_COUNTER), whatever the counter: answered from the "arrivals" values.
_ARRIVALS = re.compile(r"^sum by \(model_name, namespace\) \(rate\([a-zA-Z_:][a-zA-Z0-9_:]*\[\w+\]\)\)$")
_WINDOW = re.compile(r"\[(\d+)s\]")
_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>status|scale))?$"
)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(doc: Any, path: str) -> tuple[Any, str]:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]
    node = doc
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node, parts[-1]


class FakeKube:
    """A tiny Kubernetes API: objects by (plural, namespace, name), resourceVersions, 409 on stale writes."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.rv = 100
        self.requests: list[tuple[str, str]] = []
        self.status_conflicts_to_inject = 0
        # Plurals whose API is not served (a CRD not installed, e.g. KEDA's "scaledobjects"): 404.
        self.absent: set[str] = set()
        # Run on the stored target just before a /scale patch is handled: another writer got there first.
        self.before_scale_patch: list[Callable[[dict[str, Any]], None]] = []
        self.before_json_patch: list[Callable[[dict[str, Any]], None]] = []
        self.forbid: set[str] = set()
        # (plural, name): refused by name only (RBAC with resourceNames), in every namespace.
        self.forbid_names: set[tuple[str, str]] = set()

    # --- helpers for tests --------------------------------------------------------------------------

    def put(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(dict(obj))
        kind = obj["kind"]
        plural = {
            "Deployment": "deployments",
            "StatefulSet": "statefulsets",
            "ConfigMap": "configmaps",
            "HorizontalPodAutoscaler": "horizontalpodautoscalers",
            "Pod": "pods",
            "VariantAutoscaling": "variantautoscalings",
            "ScaledObject": "scaledobjects",
            "Namespace": "namespaces",
        }[kind]
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "" if kind == "Namespace" else "default")
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("generation", 1)
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        self.objects[(plural, meta["namespace"], meta["name"])] = obj
        return obj

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        return self.objects[(plural, namespace, name)]

    def list(self, plural: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for (p, _, _), o in sorted(self.objects.items()) if p == plural]

    def events(self) -> list[dict[str, Any]]:
        return self.list("events")

    def writes(self, method: str, needle: str) -> int:
        return sum(1 for m, p in self.requests if m == method and needle in p)

    # --- the API ------------------------------------------------------------------------------------

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.requests.append((request.method, path))
        if path in ("/apis/apps/v1",):
            return httpx.Response(
                200,
                json={
                    "resources": [
                        {"name": "deployments", "kind": "Deployment", "namespaced": True},
                        {"name": "deployments/scale", "kind": "Scale", "namespaced": True},
                        {"name": "statefulsets", "kind": "StatefulSet", "namespaced": True},
                    ]
                },
            )
        match = _PATH.match(path)
        if match is None:
            return _status(404, f"no route {path}")
        plural, ns, name, sub = match["plural"], match["ns"], match["name"], match["sub"]
        if plural in self.absent:
            return _status(404, f"the server could not find the requested resource ({plural})")
        if plural in self.forbid or (plural, name) in self.forbid_names:
            return _status(403, f"{plural} is forbidden")
        if request.url.params.get("watch") == "true":
            return httpx.Response(200, content=b"")
        if request.method == "GET" and name is None:
            items = [
                copy.deepcopy(o)
                for (p, n, _), o in sorted(self.objects.items())
                if p == plural and (ns is None or n == ns)
            ]
            return httpx.Response(200, json={"items": items, "metadata": {"resourceVersion": str(self.rv)}})
        if request.method == "POST":
            body = json.loads(request.content)
            meta = body.setdefault("metadata", {})
            if "name" not in meta:
                self.rv += 1
                meta["name"] = f"{meta.get('generateName', 'obj-')}{self.rv}"
            if (plural, ns or "", meta["name"]) in self.objects:
                return _status(409, "AlreadyExists")
            meta["namespace"] = ns
            self.rv += 1
            meta["resourceVersion"] = str(self.rv)
            self.objects[(plural, ns or "", meta["name"])] = body
            return httpx.Response(201, json=body)
        key = (plural, ns or "", name or "")
        if key not in self.objects:
            return _status(404, f"{plural} {ns}/{name} not found")
        obj = self.objects[key]
        if request.method == "GET":
            if sub == "scale":
                return httpx.Response(
                    200,
                    json={
                        "metadata": {
                            "name": obj["metadata"]["name"],
                            "namespace": obj["metadata"]["namespace"],
                            "resourceVersion": obj["metadata"]["resourceVersion"],
                        },
                        "spec": {"replicas": obj["spec"].get("replicas", 1)},
                        "status": {"replicas": obj.get("status", {}).get("replicas", 0)},
                    },
                )
            return httpx.Response(200, json=copy.deepcopy(obj))
        if request.method == "PATCH":
            patch = json.loads(request.content)
            ctype = request.headers["content-type"]
            if sub == "status":
                self._inject_status_conflict(obj)
            if ctype == "application/json-patch+json":
                if self.before_json_patch:
                    self.before_json_patch.pop(0)(obj)
                new = copy.deepcopy(obj)
                for op in patch:
                    parent, last = _pointer(new, op["path"])
                    if op["op"] == "test":
                        current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
                        if current != op["value"]:
                            return _status(422, "test failed")
                    else:
                        parent[last] = op["value"]
                obj = new
            elif sub == "scale":
                if self.before_scale_patch:
                    self.before_scale_patch.pop(0)(obj)
                    self.rv += 1
                    obj["metadata"]["resourceVersion"] = str(self.rv)
                wanted_rv = (patch.get("metadata") or {}).get("resourceVersion")
                if wanted_rv is not None and wanted_rv != obj["metadata"]["resourceVersion"]:
                    return _status(409, "the object has been modified")
                obj = merge_patch(obj, {"spec": {"replicas": patch["spec"]["replicas"]}})
            else:
                wanted_rv = (patch.get("metadata") or {}).get("resourceVersion")
                if wanted_rv is not None and wanted_rv != obj["metadata"]["resourceVersion"]:
                    return _status(409, "the object has been modified")
                patch = {k: v for k, v in patch.items() if k != "metadata"} | (
                    {"metadata": {k: v for k, v in patch["metadata"].items() if k != "resourceVersion"}}
                    if "metadata" in patch
                    else {}
                )
                if sub == "status":
                    patch = {"status": patch.get("status")}
                obj = merge_patch(obj, patch)
            return self._stored(key, obj)
        if request.method == "PUT" and sub is None:
            sent = json.loads(request.content)
            wanted_rv = (sent.get("metadata") or {}).get("resourceVersion")
            if wanted_rv is not None and wanted_rv != obj["metadata"]["resourceVersion"]:
                return _status(409, "the object has been modified")
            return self._stored(key, sent)
        if request.method == "PUT" and sub == "status":
            sent = json.loads(request.content)
            self._inject_status_conflict(obj)
            if sent["metadata"].get("resourceVersion") != obj["metadata"]["resourceVersion"]:
                return _status(409, "the object has been modified")
            return self._stored(key, {**obj, "status": sent.get("status") or {}})
        return _status(405, request.method)

    def _inject_status_conflict(self, obj: dict[str, Any]) -> None:
        """Someone else wrote the object meanwhile: its resourceVersion moves on."""
        if self.status_conflicts_to_inject > 0:
            self.status_conflicts_to_inject -= 1
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)

    def _stored(self, key: tuple[str, str, str], obj: dict[str, Any]) -> httpx.Response:
        """Store ``obj`` under a new resourceVersion and answer with it, as an update does."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[key] = obj
        return httpx.Response(200, json=copy.deepcopy(obj))

    def client(self) -> KubeClient:
        return KubeClient(
            Credentials(host="https://fake-k8s", verify=True),
            transport=CallableTransport.from_httpx(self),
            retries=0,
            backoff=0.0,
        )


def _status(code: int, message: str) -> httpx.Response:
    return httpx.Response(code, json={"kind": "Status", "code": code, "message": message})


class FakePrometheus:
    """Answers the collector's fixed queries from per-(model, namespace) values set by the test (an
    arrival counter's rate from an ``arrivals`` value, where one is set), the per-pod saturation queries
    from :meth:`set_pod`, the idle queries from :meth:`set_requests` and the gateway's queue from
    ``gateway``."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, str], dict[str, float]] = {}
        self.pods: dict[tuple[str, str, str], dict[str, float]] = {}
        self.requests_within: dict[tuple[str, str], float] = {}
        # The profile learning's per-pod windows: (model, namespace, pod) -> query name -> value.
        self.profile: dict[tuple[str, str, str], dict[str, float]] = {}
        self.gateway: dict[str, float] = {}
        # The tail model's inputs (adapters/burstiness.py's query names: idc:30s, rate, ...), per model.
        self.tail: dict[tuple[str, str], dict[str, float]] = {}
        # A range query's answer (the forecast's history): (model, namespace) -> [(time, req/s), ...].
        self.history: dict[tuple[str, str], list[tuple[float, float]]] = {}
        self.range_queries: list[dict[str, str]] = []
        self.history_error = False  # answer range queries with Prometheus' error
        self.down = False
        self.queries = 0
        self.gateway_queries = 0
        self.now = 0.0

    def set_pod(
        self,
        model: str,
        namespace: str,
        pod: str,
        *,
        kv: float,
        waiting: float = 0.0,
        blocks: int | None = None,
        block_size: int = 16,
        preemptions: float | None = None,
    ) -> None:
        """One serving pod's KV-cache usage and queue (the window's max), its cache size, and its
        preemptions per second (None: not exported)."""
        row = {"kv": kv, "waiting": waiting}
        if blocks is not None:
            row |= {"blocks": float(blocks), "block_size": float(block_size)}
        if preemptions is not None:
            row["preemptions"] = preemptions
        self.pods[(model, namespace, pod)] = row

    def set_profile_window(self, model: str, namespace: str, pod: str, **values: float) -> None:
        """One pod's answers to the profile learning's queries (adapters/profile_metrics.py's names:
        itl_sum, itl_count, prefill_sum, prefill_count, prompt_tokens, running_avg, running_var)."""
        self.profile[(model, namespace, pod)] = dict(values)

    def _profile_result(self, query: str) -> list[dict[str, Any]] | None:
        window = _WINDOW.search(query)
        if window is None:
            return None
        names = {q: name for name, q in build_profile_queries(float(window[1])).items()}
        name = names.get(query)
        if name is None:
            return None
        return [
            {"metric": {"model_name": m, "namespace": ns, "pod": pod}, "value": [self.now, repr(row[name])]}
            for (m, ns, pod), row in self.profile.items()
            if name in row
        ]

    def set_tail(self, model: str, namespace: str, values: Mapping[str, float]) -> None:
        """A model's answers to the burstiness queries (adapters/burstiness.py's names: ``idc:30s``,
        ``idc:1m``, ``idc:2m``, ``rate``); the length histograms stay unanswered."""
        self.tail[(model, namespace)] = dict(values)

    def _answered(self, query: str) -> list[dict[str, Any]] | None:
        """The answer to a profile-learning or tail query; None for any other."""
        found = self._profile_result(query)
        return found if found is not None else self._tail_result(query)

    def _tail_result(self, query: str) -> list[dict[str, Any]] | None:
        """None (an error) for a tail query while no model has tail answers, as before they existed."""
        if not self.tail:
            return None
        name = {q: n for n, q in build_tail_queries().items()}.get(query)
        if name is None:
            return None
        return [
            {"metric": {"model_name": m, "namespace": ns}, "value": [self.now, repr(row[name])]}
            for (m, ns), row in self.tail.items()
            if name in row
        ]

    def set_requests(self, model: str, namespace: str, count: float) -> None:
        """Requests that succeeded within any retention period (the idle query)."""
        self.requests_within[(model, namespace)] = count

    def _pod_result(self, name: str) -> list[dict[str, Any]]:
        result = []
        for (model, ns, pod), row in self.pods.items():
            if name == "pod_kv_capacity":
                if "blocks" in row:
                    labels = {
                        "namespace": ns,
                        "pod": pod,
                        "num_gpu_blocks": str(int(row["blocks"])),
                        "block_size": str(int(row["block_size"])),
                    }
                    result.append({"metric": labels, "value": [self.now, "1"]})
                continue
            if name == "pod_preemptions":
                if "preemptions" not in row:
                    continue
                value = row["preemptions"]
            else:
                value = row["kv"] if name == "pod_kv_usage" else row["waiting"]
            labels = {"model_name": model, "namespace": ns, "pod": pod}
            result.append({"metric": labels, "value": [self.now, repr(value)]})
        return result

    def set(self, model: str, namespace: str, **values: float) -> None:
        row = {
            "newest": self.now,
            "completion_rate": 0.0,
            "avg_input_tokens": 0.0,
            "avg_output_tokens": 0.0,
            "ttft_seconds": 0.0,
            "itl_seconds": 0.0,
            "waiting": 0.0,
            "waiting_growth": 0.0,
        }
        row.update(values)
        self.series[(model, namespace)] = row

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.queries += 1
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        query = request.url.params["query"]
        if request.url.path.endswith("/query_range"):
            return self._range(request)
        if query in (build_guard_query(60.0), build_guard_query(60.0, 30.0)):  # the burst guard's one query
            return self._guard()
        by_query = {q: name for name, q in build_queries(60.0).items()}
        saturation = {q: name for name, q in build_saturation_queries(60.0).items()}
        name = by_query.get(query)
        result: list[dict[str, Any]] = []
        if query in saturation:
            result = self._pod_result(saturation[query])
        elif query == GATEWAY_QUEUE_QUERY:
            self.gateway_queries += 1
            result = [
                {"metric": {"target_model_name": m}, "value": [self.now, repr(v)]}
                for m, v in self.gateway.items()
            ]
        elif (found := self._answered(query)) is not None:
            result = found
        elif _IDLE.search(query):
            for (model, ns), count in self.requests_within.items():
                labels = {"model_name": model, "namespace": ns}
                result.append({"metric": labels, "value": [self.now, repr(count)]})
        elif name is None and _ARRIVALS.match(query):
            for (model, ns), row in self.series.items():
                if "arrivals" in row:
                    labels = {"model_name": model, "namespace": ns}
                    result.append({"metric": labels, "value": [self.now, repr(row["arrivals"])]})
        elif name is None:
            return httpx.Response(400, json={"status": "error", "errorType": "bad_data", "error": query})
        else:
            for (model, ns), row in self.series.items():
                value = row.get(name, math.nan)
                labels = {"model_name": model, "namespace": ns} if ns else {"model_name": model}
                result.append({"metric": labels, "value": [self.now, repr(value)]})
        return httpx.Response(
            200, json={"status": "success", "data": {"resultType": "vector", "result": result}}
        )

    def _range(self, request: httpx.Request) -> httpx.Response:
        """A range query: the points of :attr:`history` between its start and end (a matrix)."""
        params = dict(request.url.params)
        self.range_queries.append(params)
        if self.history_error:
            return httpx.Response(
                422, json={"status": "error", "errorType": "execution", "error": "too many samples"}
            )
        start, end = float(params["start"]), float(params["end"])
        result = [
            {
                "metric": {"model_name": model, "namespace": ns},
                "values": [[t, repr(v)] for t, v in points if start - 1e-6 <= t <= end + 1e-6],
            }
            for (model, ns), points in self.history.items()
        ]
        return httpx.Response(
            200, json={"status": "success", "data": {"resultType": "matrix", "result": result}}
        )

    def _guard(self) -> httpx.Response:
        result = []
        signals = {
            "waiting": "waiting",
            "growth": "waiting_growth",
            "completions": "completion_rate",
            "kv": "kv",
        }
        # Over the rise window, only where a test sets them (a series Prometheus did not return).
        optional = {"growth_short": "waiting_growth_short", "completions_short": "completion_rate_short"}
        for (model, ns), row in self.series.items():
            for signal, column in signals.items():
                labels = {"model_name": model, "namespace": ns, "signal": signal}
                result.append({"metric": labels, "value": [self.now, repr(row.get(column, 0.0))]})
            for signal, column in optional.items():
                if column in row:
                    labels = {"model_name": model, "namespace": ns, "signal": signal}
                    result.append({"metric": labels, "value": [self.now, repr(row[column])]})
        return httpx.Response(
            200, json={"status": "success", "data": {"resultType": "vector", "result": result}}
        )

    def collector(self, cfg: PrometheusConfig) -> Collector:
        return Collector(PrometheusClient(cfg, transport=httpx.MockTransport(self), retries=0, backoff=0.0))


def load_yaml(relative: str) -> Any:
    return yaml.safe_load((ROOT / relative).read_text())


def wva_configmaps(
    prometheus_url: str = "https://prometheus.test:9090", **extra: str
) -> list[dict[str, Any]]:
    """The shipped ConfigMaps (WVA's formats), with Prometheus pointed at the fake."""
    main = load_yaml("deploy/manager/configmap.yaml")
    main["data"] = {"PROMETHEUS_BASE_URL": prometheus_url, "GLOBAL_OPT_INTERVAL": "60s", **extra}
    return [
        main,
        load_yaml("deploy/manager/configmap-accelerator-unitcost.yaml"),
        load_yaml("deploy/manager/configmap-serviceclass.yaml"),
    ]


def deployment(
    name: str, namespace: str, replicas: int = 1, ready: int | None = None, args: list[str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "vllm", "args": args or ["--model", "m"]}]},
            },
        },
        "status": {"replicas": replicas, "readyReplicas": replicas if ready is None else ready},
    }


class Clock:
    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2025, 6, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def exporter() -> Exporter:
    return Exporter(is_active=lambda: True)


NS = "llm-d-sim"
VA = "vllme-deployment"


class Harness:
    def __init__(self, *, planner: Any = None, **cm_extra: str) -> None:
        self.kube = FakeKube()
        self.prom = FakePrometheus()
        self.clock = Clock()
        self.prom.now = self.clock.now.timestamp()
        for cm in wva_configmaps(**cm_extra):
            self.kube.put(cm)
        self.settings = Settings(debounce_seconds=0, leader_election=False, conflict_retries=3)
        self.planner = planner or OptimizerPlanner()
        self.engine = self.new_engine()

    def new_engine(self) -> Engine:
        client = self.kube.client()
        self.exporter = exporter()
        return Engine(
            self.settings,
            kube=client,
            exporter=self.exporter,
            events=EventRecorder(client, instance="test"),
            leader=AlwaysLeader(),
            planner=self.planner,
            vas=lambda: self.kube.list("variantautoscalings"),
            nodes=lambda: [],
            clock=self.clock,
            collector_factory=self.prom.collector,
        )

    def add_va(self, body: dict[str, Any] | None = None, *, replicas: int = 1, **spec: Any) -> dict[str, Any]:
        va = copy.deepcopy(body or load_yaml("deploy/samples/variantautoscaling.yaml"))
        va["spec"].update(spec)
        self.kube.put(va)
        name = va["metadata"]["name"]
        target = (va["spec"].get("scaleTargetRef") or {}).get("name", name)
        if ("deployments", va["metadata"]["namespace"], target) not in self.kube.objects:
            self.kube.put(deployment(target, va["metadata"]["namespace"], replicas=replicas))
        return va

    def load(
        self,
        rpm: float,
        *,
        model: str = "default/default",
        namespace: str = NS,
        out: float = 128.0,
        inp: float = 100.0,
        **extra: float,
    ) -> None:
        self.prom.now = self.clock.now.timestamp()
        self.prom.set(
            model,
            namespace,
            completion_rate=rpm / 60.0,
            avg_input_tokens=inp,
            avg_output_tokens=out,
            ttft_seconds=0.05,
            itl_seconds=0.02,
            **extra,
        )

    def advance(self, seconds: float) -> None:
        self.clock.now += timedelta(seconds=seconds)
        self.prom.now = self.clock.now.timestamp()
        for row in self.prom.series.values():
            row["newest"] = self.prom.now

    def status(self, name: str = VA) -> dict[str, Any]:
        return self.kube.get("variantautoscalings", NS, name).get("status") or {}

    def conditions(self, name: str = VA) -> dict[str, dict[str, Any]]:
        return {c["type"]: c for c in self.status(name).get("conditions", [])}

    def replicas(self, name: str = VA) -> int:
        return int(self.kube.get("deployments", NS, name)["spec"]["replicas"])

    def gauges(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        out = {}
        for family in text_string_to_metric_families(self.exporter.render().decode()):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out
