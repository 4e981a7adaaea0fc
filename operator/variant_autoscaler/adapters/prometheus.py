"""Collect vLLM load and latency from Prometheus: a fixed set of PromQL queries per cycle.

WVA issues six queries per VariantAutoscaling per cycle. Here every quantity is one query grouped
``by (model_name, namespace)``, so a cycle costs :data:`QUERIES_PER_CYCLE` queries however many variants
exist. The quantities and the window are WVA's (``[1m]`` by default): completion rate, mean input and
output tokens, mean TTFT and ITL. Two more queries read the waiting queue, because under overload the
completion rate under-reads demand (see :func:`demand_rate`). Four per-pod queries (still one each for
every pod) read the KV-cache usage, the waiting queue, the KV-cache size and the preemption rate.

Transport: httpx over HTTPS with a CA bundle, a client certificate, a bearer token or a token file
(re-read when it changes, for rotated ServiceAccount tokens). Certificate verification is on unless the
configuration explicitly skips it, and a token is never sent over plain ``http://`` unless the
configuration explicitly allows it. Bounded whatever Prometheus does: one deadline per query, retries
included (a response dribbled byte by byte used to hold a cycle for ever, since httpx's timeouts are per
read), one for the cycle's whole query set, and a cap on the size of a response. Every failure becomes
a :class:`~variant_autoscaler.errors.CollectionError`, and missing metrics never scale anything down.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from variant_autoscaler import USER_AGENT
from variant_autoscaler.api.config import PrometheusConfig
from variant_autoscaler.core.demand import demand_rate, fix_value
from variant_autoscaler.core.kvcache import KVCache
from variant_autoscaler.core.workload import Workload
from variant_autoscaler.errors import CollectionError, ConfigError

logger = logging.getLogger(__name__)

LABEL_MODEL = "model_name"
LABEL_NAMESPACE = "namespace"
_BY = f"by ({LABEL_MODEL}, {LABEL_NAMESPACE})"

ModelKey = tuple[str, str]  # (model_name, namespace); namespace "" for series without the label
_T = TypeVar("_T")


def _window(seconds: float) -> str:
    whole = max(1, round(seconds))
    return f"{whole}s" if whole % 60 else f"{whole // 60}m"


def _ratio(metric: str, window: str) -> str:
    return f"sum {_BY} (rate({metric}_sum[{window}])) / sum {_BY} (rate({metric}_count[{window}]))"


def build_queries(window_seconds: float) -> dict[str, str]:
    """The cycle's PromQL, one query per quantity, each grouped by model and namespace."""
    w = _window(window_seconds)
    return {
        # Newest sample per group: distinguishes missing series from stale ones.
        "newest": f"max {_BY} (timestamp(vllm:request_success_total))",
        "completion_rate": f"sum {_BY} (rate(vllm:request_success_total[{w}]))",
        "avg_input_tokens": _ratio("vllm:request_prompt_tokens", w),
        "avg_output_tokens": _ratio("vllm:request_generation_tokens", w),
        "ttft_seconds": _ratio("vllm:time_to_first_token_seconds", w),
        # vLLM >= 0.11 exports the new name (0.12 hides the old one, later releases drop it); 0.10 and
        # older only the old one. `or` keeps one query: the old name only where the new one is absent.
        "itl_seconds": f"({_ratio('vllm:inter_token_latency_seconds', w)}) or "
        f"({_ratio('vllm:time_per_output_token_seconds', w)})",
        "waiting": f"sum {_BY} (vllm:num_requests_waiting)",
        "waiting_growth": f"sum {_BY} (delta(vllm:num_requests_waiting[{w}]))",
    }


# --- saturation, scale to zero and scale from zero (WVA's later analyzers) -------------------------------

LABEL_POD = "pod"
_BY_POD = f"by ({LABEL_MODEL}, {LABEL_NAMESPACE}, {LABEL_POD})"
#: vllm:cache_config_info has no model_name (as vLLM's): joined to the pod's other series by pod.
_CAPACITY_LABELS = ("num_gpu_blocks", "block_size")


def build_saturation_queries(window_seconds: float) -> dict[str, str]:
    """Per-pod inputs of the saturation analyzers and of the KV-cache cap, each one query for every pod
    of every model: the window's max of KV-cache usage and of the waiting queue (V1 and V2), the KV-cache
    size (V2, and the batch ceiling: core/kvcache.py) and the rate of preemptions (requests evicted from
    the KV cache to be recomputed: evidence that the pod runs over its cache)."""
    w = _window(window_seconds)
    return {
        "pod_kv_usage": f"max {_BY_POD} (max_over_time(vllm:kv_cache_usage_perc[{w}]))",
        "pod_waiting": f"max {_BY_POD} (max_over_time(vllm:num_requests_waiting[{w}]))",
        "pod_kv_capacity": f"max by ({LABEL_NAMESPACE}, {LABEL_POD}, {', '.join(_CAPACITY_LABELS)}) "
        "(vllm:cache_config_info)",
        "pod_preemptions": f"sum {_BY_POD} (rate(vllm:num_preemptions_total[{w}]))",
    }


def arrivals_query(counter: str, window_seconds: float) -> str:
    """Requests/s arriving per model, from a counter of arrivals (``ARRIVAL_COUNTER``): one query. The
    counter must carry the model in ``model_name`` as vLLM's series do (the inference gateway's
    ``inference_objective_request_total`` does: the model a request asked for)."""
    return f"sum {_BY} (rate({counter}[{_window(window_seconds)}]))"


#: A history query names its models (a regex on ``model_name``) up to this many; for more (a first
#: install on a large fleet) it reads every model's series rather than build a query too long to send.
HISTORY_MODELS_NAMED = 20


def history_query(counter: str | None, window_seconds: float, models: Sequence[str] = ()) -> str:
    """Each model's rate, as a range query reads it back in time for a new forecaster: its arrival
    counter's (``ARRIVAL_COUNTER``) where one is configured, else its completions (its demand while the
    servers kept up: the live demand adds the queue's growth and drain, which this leaves out). With a
    few ``models`` (at most :data:`HISTORY_MODELS_NAMED`), only theirs: a restarted operator with one
    new model among hundreds reads one series, not hundreds."""
    metric = counter or "vllm:request_success_total"
    names = sorted(set(models))
    if names and len(names) <= HISTORY_MODELS_NAMED:
        alternatives = "|".join(_promql_string(_re2_quote(n)) for n in names)
        metric = f'{metric}{{{LABEL_MODEL}=~"{alternatives}"}}'
    return arrivals_query(metric, window_seconds)


_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def _re2_quote(text: str) -> str:
    """``text`` as a regular expression that matches it literally (RE2, Prometheus' dialect)."""
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in text)


def _promql_string(text: str) -> str:
    """``text`` inside a double-quoted PromQL string: backslashes and quotes escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def idle_query(retention_seconds: float) -> str:
    """Requests that succeeded within the retention period, per model (0: idle, may go to zero)."""
    return f"sum {_BY} (increase(vllm:request_success_total[{_window(retention_seconds)}]))"


#: The inference gateway's queue per model: read by the scale-from-zero loop, one query for all models.
GATEWAY_QUEUE_LABEL = "target_model_name"
GATEWAY_QUEUE_QUERY = f"sum by ({GATEWAY_QUEUE_LABEL}) (inference_extension_flow_control_queue_size)"

#: Queries of one cycle, whatever the number of variants (plus one per distinct scale-to-zero retention
#: period when scale to zero is enabled for some model, and one with an ARRIVAL_COUNTER).
QUERIES_PER_CYCLE = len(build_queries(60.0)) + len(build_saturation_queries(60.0))


# --- the HTTP client ------------------------------------------------------------------------------------


class _Result(BaseModel):
    model_config = ConfigDict(extra="ignore")

    metric: dict[str, str] = {}
    value: tuple[float, str] | None = None


class _Data(BaseModel):
    model_config = ConfigDict(extra="ignore")

    resultType: str  # Prometheus' field names
    result: Any = None


class _Response(BaseModel):
    model_config = ConfigDict(extra="ignore")

    status: Literal["success", "error"]
    data: _Data | None = None
    errorType: str | None = None
    error: str | None = None


class _RangeResult(BaseModel):
    model_config = ConfigDict(extra="ignore")

    metric: dict[str, str] = {}
    values: list[tuple[float, str]] = []


@dataclass(frozen=True, slots=True)
class Sample:
    labels: Mapping[str, str]
    value: float  # NaN and infinities are kept; callers decide
    timestamp: float


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a range query: its labels and its (time, value) points, oldest first."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


def build_ssl_context(cfg: PrometheusConfig) -> ssl.SSLContext:
    """TLS for Prometheus: verification on by default, optional CA bundle and client certificate."""
    try:
        ctx = ssl.create_default_context(cafile=cfg.ca_cert_path)
        if cfg.insecure_skip_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cfg.client_cert_path and cfg.client_key_path:
            ctx.load_cert_chain(cfg.client_cert_path, cfg.client_key_path)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"Prometheus TLS configuration: {exc}") from exc
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


class _TokenSource:
    """A static bearer token, or a token file re-read whenever it changes."""

    def __init__(self, token: str | None, path: str | None) -> None:
        self._token = token
        self._path = path
        self._cached: tuple[float, str] | None = None

    def get(self) -> str | None:
        if self._token:
            return self._token
        if not self._path:
            return None
        try:
            mtime = os.stat(self._path).st_mtime
            if self._cached is None or self._cached[0] != mtime:
                with open(self._path, encoding="utf-8") as fh:
                    self._cached = (mtime, fh.read().strip())
        except OSError as exc:
            raise CollectionError(f"cannot read the Prometheus token file {self._path}: {exc}") from exc
        return self._cached[1] or None


#: The largest response body read (after content decoding). A cycle's query at 500 variants answers
#: about 100 KB; anything near this is not a vLLM fleet's metrics.
DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024


class PrometheusClient:
    """Instant (and, for a new forecaster's history, range) queries against Prometheus' HTTP API,
    bounded in time and size, with bounded retries.

    ``timeout`` is the total deadline of one query (connecting, waiting, reading the whole body, and
    retries); ``cycle_timeout`` (default: ``timeout``) the total deadline of the collector's query set.
    """

    def __init__(
        self,
        cfg: PrometheusConfig,
        *,
        timeout: float = 10.0,
        retries: int = 2,
        backoff: float = 0.25,
        transport: httpx.AsyncBaseTransport | None = None,
        cycle_timeout: float | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        if not cfg.base_url:
            raise ConfigError("PROMETHEUS_BASE_URL is not set")
        if (
            cfg.base_url.startswith("http://")
            and (cfg.bearer_token or cfg.token_path)
            and not cfg.allow_token_over_http
        ):
            raise ConfigError(
                f"PROMETHEUS_BASE_URL {cfg.base_url} is plain http://: the bearer token "
                "(PROMETHEUS_TOKEN_PATH or PROMETHEUS_BEARER_TOKEN) would travel unencrypted; use https://, "
                'remove the token, or set PROMETHEUS_ALLOW_TOKEN_OVER_HTTP: "true"'
            )
        self.cfg = cfg
        self.timeout = timeout
        self.cycle_timeout = cycle_timeout if cycle_timeout is not None else timeout
        self.max_response_bytes = max_response_bytes
        self._retries = retries
        self._backoff = backoff
        self._token = _TokenSource(cfg.bearer_token, cfg.token_path)
        verify: ssl.SSLContext | bool = build_ssl_context(cfg) if cfg.base_url.startswith("https") else True
        self._client = httpx.AsyncClient(
            base_url=cfg.base_url,
            verify=verify,
            timeout=timeout,
            transport=transport,
            headers={"User-Agent": USER_AGENT},
        )
        self.queries_issued = 0

    async def aclose(self) -> None:
        await self._client.aclose()

    async def query(
        self, promql: str, *, at: float | None = None, deadline: float | None = None
    ) -> list[Sample]:
        """Run an instant query; return its vector samples (a non-vector result is an error).

        Done within ``timeout`` seconds, retries included, or by ``deadline`` (the event loop's clock)
        if that is earlier; otherwise a :class:`CollectionError`.
        """
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return await self._retrying(lambda: self._query_once(params), deadline)

    async def query_range(
        self, promql: str, *, start: float, end: float, step: float, deadline: float | None = None
    ) -> list[Series]:
        """Run a range query (``/api/v1/query_range``): each series' values at ``start``, ``start +
        step``, … up to ``end`` (the points Prometheus has). Bounded as :meth:`query`."""
        if not (step > 0 and end >= start):
            raise CollectionError(
                f"a range query needs step > 0 and end >= start (got {start}, {end}, {step})"
            )
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return await self._retrying(lambda: self._range_once(params), deadline)

    async def _retrying(self, once: Callable[[], Awaitable[_T]], deadline: float | None) -> _T:
        loop = asyncio.get_running_loop()
        started = loop.time()
        end = started + self.timeout
        if deadline is not None:
            end = min(end, deadline)
        attempt = 0
        while True:
            try:
                async with asyncio.timeout_at(end):
                    return await once()
            except TimeoutError:
                raise CollectionError(
                    f"Prometheus query did not complete within its deadline ({end - started:.3g}s, "
                    f"{attempt + 1} attempt(s))"
                ) from None
            except _Retryable as exc:
                delay = self._backoff * (2**attempt)
                if attempt >= self._retries or loop.time() + delay >= end:
                    raise CollectionError(
                        f"Prometheus query failed after {attempt + 1} attempts: {exc}"
                    ) from exc
                await asyncio.sleep(delay)
                attempt += 1

    async def query_set(self, queries: Mapping[str, str], *, at: float) -> dict[str, list[Sample]]:
        """Run a named set of instant queries at once, within one deadline (``cycle_timeout``) whatever
        each one's retries do; each one's samples by name, or a :class:`CollectionError` if any failed."""
        names = list(queries)
        deadline = asyncio.get_running_loop().time() + self.cycle_timeout
        try:
            async with asyncio.timeout_at(deadline):
                results = await asyncio.gather(
                    *(self.query(queries[name], at=at, deadline=deadline) for name in names),
                    return_exceptions=True,
                )
        except TimeoutError:
            raise CollectionError(
                f"the cycle's Prometheus queries did not complete within {self.cycle_timeout:g}s"
            ) from None
        out: dict[str, list[Sample]] = {}
        for name, result in zip(names, results, strict=True):
            if isinstance(result, CollectionError):
                raise result
            if isinstance(result, BaseException):
                raise CollectionError(f"Prometheus query {name!r} failed: {result}") from result
            out[name] = result
        return out

    async def _fetch(self, path: str, params: dict[str, str], kind: str) -> _Data:
        """One request to ``path``; its data, which must be of ``kind`` (``vector``, ``matrix``)."""
        headers = {}
        token = self._token.get()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        extensions = {"sni_hostname": self.cfg.server_name} if self.cfg.server_name else None
        self.queries_issued += 1
        try:
            async with self._client.stream(
                "GET", path, params=params, headers=headers, extensions=extensions
            ) as response:
                status = response.status_code
                content = await self._read_capped(response)
        except httpx.TransportError as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}") from exc
        text = content[:200].decode(errors="replace")
        if status >= 500 or status == 429:
            raise _Retryable(f"HTTP {status}: {text}")
        try:
            body = _Response.model_validate_json(content)
        except ValidationError as exc:
            raise CollectionError(f"unexpected Prometheus response (HTTP {status}): {text}") from exc
        if body.status != "success" or body.data is None:
            raise CollectionError(f"Prometheus error {body.errorType}: {body.error}")
        if body.data.resultType != kind:
            raise CollectionError(f"expected a {kind} result, got {body.data.resultType}")
        return body.data

    async def _range_once(self, params: dict[str, str]) -> list[Series]:
        data = await self._fetch("/api/v1/query_range", params, "matrix")
        out: list[Series] = []
        for item in data.result or ():
            try:
                result = _RangeResult.model_validate(item)
            except (ValidationError, TypeError) as exc:
                raise CollectionError(f"malformed matrix in the Prometheus response: {exc}") from exc
            points = tuple((float(t), _float(v)) for t, v in result.values)
            out.append(Series(labels=result.metric, points=points))
        return out

    async def _query_once(self, params: dict[str, str]) -> list[Sample]:
        data = await self._fetch("/api/v1/query", params, "vector")
        samples: list[Sample] = []
        for item in data.result or ():
            # By hand rather than a model per sample: a cycle reads thousands of them.
            sample = _sample(item)
            if sample is None:  # not the exact shape Prometheus writes: the model decides, and words errors
                try:
                    result = _Result.model_validate(item)
                except (ValidationError, TypeError) as exc:
                    raise CollectionError(f"malformed vector in the Prometheus response: {exc}") from exc
                if result.value is None:
                    continue
                sample = _sample({"metric": result.metric, "value": [result.value[0], result.value[1]]})
                assert sample is not None
            samples.append(sample)
        return samples

    async def _read_capped(self, response: httpx.Response) -> bytes:
        """The whole body, or a :class:`CollectionError` as soon as it passes the size cap."""
        cap = self.max_response_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise CollectionError(f"the Prometheus response is {declared} bytes, more than the cap of {cap}")
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > cap:
                raise CollectionError(f"the Prometheus response passed the cap of {cap} bytes")
            chunks.append(chunk)
        return b"".join(chunks)


def _sample(item: object) -> Sample | None:
    """A vector sample ``{"metric": {...}, "value": [ts, "v"]}``; None if it has no value or another shape."""
    if type(item) is not dict:
        return None
    metric = item.get("metric", {})
    pair = item.get("value")
    if type(metric) is not dict or type(pair) is not list or len(pair) != 2:
        return None
    ts, raw = pair
    if not all(type(v) is str for v in metric.values()) or type(raw) is not str:
        return None
    if type(ts) not in (int, float):
        return None
    return Sample(labels=metric, value=_float(raw), timestamp=float(ts))


class _Retryable(Exception):
    pass


def _float(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        return math.nan


# --- the collector --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelMetrics:
    """Load and latency of one model in one namespace (all replicas of all its variants together)."""

    model: str
    namespace: str
    newest_sample: float  # unix time of the newest success-counter sample
    completion_rate: float  # requests/s finished (what WVA calls the arrival rate)
    arrival_rate: float  # requests/s of demand: completions plus queue growth and backlog
    avg_input_tokens: float
    avg_output_tokens: float
    ttft_ms: float
    itl_ms: float
    waiting: float
    absent: tuple[str, ...] = ()  # queries (build_queries' names) that returned nothing for this model
    # requests/s arriving, from the configured arrival counter (ARRIVAL_COUNTER, e.g. the inference
    # gateway's); None without one, or without a series for this model
    offered_rate: float | None = None


# What each quantity reads, for the message when its series are absent.
_SERIES = {
    "avg_input_tokens": "vllm:request_prompt_tokens",
    "avg_output_tokens": "vllm:request_generation_tokens",
    "ttft_seconds": "vllm:time_to_first_token_seconds",
    "itl_seconds": "vllm:inter_token_latency_seconds (or the deprecated vllm:time_per_output_token_seconds)",
    "waiting": "vllm:num_requests_waiting",
}


@dataclass(frozen=True, slots=True)
class PodMetrics:
    """One serving pod, for the saturation analyzers: the window's max of KV-cache usage (0 to 1) and of
    requests waiting, its KV cache (None when it does not export it) and its preemptions per second over
    the window (None when it does not export them)."""

    pod: str
    kv_usage: float
    waiting: float
    kv_cache: KVCache | None = None
    preemption_rate: float | None = None

    @property
    def kv_tokens(self) -> float | None:
        """The KV-cache size in tokens, None when unknown."""
        return float(self.kv_cache.tokens) if self.kv_cache is not None else None


MetricsState = Literal["ok", "missing", "stale"]


@dataclass(frozen=True, slots=True)
class Lookup:
    state: MetricsState
    metrics: ModelMetrics | None
    message: str


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """One cycle's metrics for every model and namespace that has them."""

    taken_at: float
    staleness_seconds: float
    by_key: Mapping[ModelKey, ModelMetrics]
    queries: int
    #: Per model: its serving pods' saturation inputs.
    pods_by_key: Mapping[ModelKey, tuple[PodMetrics, ...]] = field(default_factory=dict)
    #: Per retention period (seconds): requests that succeeded within it, per model.
    requests_within: Mapping[float, Mapping[ModelKey, float]] = field(default_factory=dict)

    def pods(self, model: str, namespace: str) -> tuple[PodMetrics, ...]:
        """The pods serving ``model`` in ``namespace`` (as :meth:`lookup`, falling back to no namespace)."""
        found = self.pods_by_key.get((model, namespace))
        return found if found is not None else self.pods_by_key.get((model, ""), ())

    def requests(self, model: str, namespace: str, retention_seconds: float) -> float | None:
        """Requests of ``model`` that succeeded within the retention period; None when unknown (no series,
        or the period was not queried): never read as idle."""
        values = self.requests_within.get(retention_seconds)
        if values is None:
            return None
        found = values.get((model, namespace))
        if found is None:
            found = values.get((model, ""))
        return found if found is not None and math.isfinite(found) else None

    # The tail model's inputs per model (lengths, burstiness; adapters/burstiness.py), where read.
    workloads: Mapping[ModelKey, Workload] = field(default_factory=dict)

    def workload(self, model: str, namespace: str) -> Workload | None:
        """The lengths and burstiness of ``model`` in ``namespace`` (series without one stand in)."""
        return self.workloads.get((model, namespace)) or self.workloads.get((model, ""))

    def lookup(self, model: str, namespace: str) -> Lookup:
        """The metrics of ``model`` in ``namespace``; like WVA, fall back to series with no namespace."""
        found = self.by_key.get((model, namespace)) or self.by_key.get((model, ""))
        if found is None:
            return Lookup(
                "missing",
                None,
                f"no vllm:request_success_total series for model_name={model!r} in namespace {namespace!r}",
            )
        age = self.taken_at - found.newest_sample
        if age > self.staleness_seconds:
            return Lookup(
                "stale",
                found,
                f"newest vLLM sample for model_name={model!r} is {age:.0f}s old "
                f"(limit {self.staleness_seconds:.0f}s)",
            )
        if found.absent:
            missing = "; ".join(_SERIES[name] for name in found.absent)
            return Lookup(
                "ok",
                found,
                f"vLLM metrics are up to date, but expected series are absent for model_name={model!r}, "
                f"so what they measure is unknown (the 0 shown is not a measurement): {missing}",
            )
        return Lookup("ok", found, "vLLM metrics are available and up to date")


def _by_key(samples: list[Sample]) -> dict[ModelKey, float]:
    out: dict[ModelKey, float] = {}
    for s in samples:
        model = s.labels.get(LABEL_MODEL)
        if model is None:
            continue
        out[(model, s.labels.get(LABEL_NAMESPACE, ""))] = s.value
    return out


class Collector:
    """Runs the cycle's fixed query set concurrently and groups the results by model and namespace."""

    def __init__(self, client: PrometheusClient) -> None:
        self.client = client

    async def collect(
        self,
        *,
        now: float,
        window_seconds: float = 60.0,
        staleness_seconds: float = 120.0,
        drain_seconds: float = 300.0,
        retention_periods: Sequence[float] = (),
        arrival_counter: str | None = None,
    ) -> MetricsSnapshot:
        """Every model's metrics over the window ending at ``now``; ``arrival_counter``: a counter of
        arriving requests (one query more), whose rate becomes each model's ``offered_rate``."""
        queries = {**build_queries(window_seconds), **build_saturation_queries(window_seconds)}
        retentions = sorted(set(retention_periods))
        queries.update({f"idle_{r:g}": idle_query(r) for r in retentions})
        if arrival_counter:
            queries["arrivals"] = arrivals_query(arrival_counter, window_seconds)
        raw = await self.client.query_set(queries, at=now)
        values = {name: _by_key(samples) for name, samples in raw.items()}
        by_key: dict[ModelKey, ModelMetrics] = {}
        for key, newest in values["newest"].items():

            def get(name: str, _key: ModelKey = key) -> float:
                return fix_value(values[name].get(_key, 0.0))

            completion = get("completion_rate")
            offered = values["arrivals"].get(key) if arrival_counter else None
            by_key[key] = ModelMetrics(
                model=key[0],
                namespace=key[1],
                newest_sample=newest if math.isfinite(newest) else 0.0,
                completion_rate=completion,
                arrival_rate=demand_rate(
                    completion, get("waiting"), get("waiting_growth"), window_seconds, drain_seconds
                ),
                avg_input_tokens=get("avg_input_tokens"),
                avg_output_tokens=get("avg_output_tokens"),
                ttft_ms=get("ttft_seconds") * 1000.0,
                itl_ms=get("itl_seconds") * 1000.0,
                waiting=get("waiting"),
                absent=tuple(name for name in _SERIES if key not in values[name]),
                offered_rate=max(offered, 0.0) if offered is not None and math.isfinite(offered) else None,
            )
        return MetricsSnapshot(
            taken_at=now,
            staleness_seconds=staleness_seconds,
            by_key=by_key,
            queries=len(queries),
            pods_by_key=_pods(
                raw["pod_kv_usage"], raw["pod_waiting"], raw["pod_kv_capacity"], raw["pod_preemptions"]
            ),
            requests_within={r: values[f"idle_{r:g}"] for r in retentions},
        )

    async def gateway_queues(self) -> dict[str, float]:
        """The inference gateway's queued requests per model (``target_model_name``): one query."""
        out: dict[str, float] = {}
        for s in await self.client.query(GATEWAY_QUEUE_QUERY):
            model = s.labels.get(GATEWAY_QUEUE_LABEL)
            if model is not None and math.isfinite(s.value):
                out[model] = s.value
        return out


def _pod_key(s: Sample) -> tuple[str, str] | None:
    pod = s.labels.get(LABEL_POD)
    return None if pod is None else (s.labels.get(LABEL_NAMESPACE, ""), pod)


def _pods(
    usage: list[Sample], waiting: list[Sample], capacity: list[Sample], preemptions: list[Sample]
) -> dict[ModelKey, tuple[PodMetrics, ...]]:
    """Per model, its pods' KV-cache usage and waiting queue, with each pod's KV cache (``num_gpu_blocks``
    and ``block_size`` of its ``vllm:cache_config_info``) and preemption rate where exported. A pod that
    reports its usage but not its queue (or the reverse) is left out: half a measurement is none."""
    caches: dict[tuple[str, str], KVCache] = {}
    for s in capacity:
        key = _pod_key(s)
        try:
            blocks, size = (int(s.labels.get(label, "")) for label in _CAPACITY_LABELS)
            cache = KVCache(blocks, size)
        except ValueError:
            continue
        if key is not None:
            caches[key] = cache
    queues = _per_pod(waiting)
    rates = _per_pod(preemptions)
    out: dict[ModelKey, list[PodMetrics]] = {}
    for s in usage:
        pod, model = s.labels.get(LABEL_POD), s.labels.get(LABEL_MODEL)
        namespace = s.labels.get(LABEL_NAMESPACE, "")
        at = (model or "", namespace, pod or "")
        queue = queues.get(at)
        if pod is None or model is None or queue is None or not math.isfinite(s.value):
            continue
        out.setdefault((model, namespace), []).append(
            PodMetrics(pod, min(max(s.value, 0.0), 1.0), queue, caches.get((namespace, pod)), rates.get(at))
        )
    return {key: tuple(sorted(pods, key=lambda p: p.pod)) for key, pods in out.items()}


def _per_pod(samples: list[Sample]) -> dict[tuple[str, str, str], float]:
    """Finite, non-negative values by (model, namespace, pod)."""
    out: dict[tuple[str, str, str], float] = {}
    for s in samples:
        pod, model = s.labels.get(LABEL_POD), s.labels.get(LABEL_MODEL)
        if pod is not None and model is not None and math.isfinite(s.value):
            out[(model, s.labels.get(LABEL_NAMESPACE, ""), pod)] = max(s.value, 0.0)
    return out
