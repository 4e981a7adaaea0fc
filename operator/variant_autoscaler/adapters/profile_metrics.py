"""Per-pod windows of vLLM metrics for the online profile estimator: a fixed set of PromQL queries.

Seven instant queries per cycle, each grouped ``by (namespace, pod, model_name)``, however many
variants and pods exist (:data:`QUERIES_PER_CYCLE`). From them, one
:class:`~variant_autoscaler.core.estimator.PodWindow` per pod and model:

==================  =====================================================================================
``itl_sum``         ``rate(vllm:inter_token_latency_seconds_sum[W])``, or the older
                    ``vllm:time_per_output_token_seconds`` where a server has only that (``or``): the
                    time-average number of requests decoding (Little's law), and with ``itl_count`` the
                    mean inter-token latency
``itl_count``       the same histograms' ``_count``: inter-token gaps per second
``prefill_sum``     ``rate(vllm:request_prefill_time_seconds_sum[W])``: requests prefilling on average
``prefill_count``   its ``_count``: requests finished per second; their mean prefill time
``prompt_tokens``   mean of ``vllm:request_prompt_tokens`` over the same requests (``rate(sum)/rate(count)``)
``running_avg``     ``avg_over_time(vllm:num_requests_running[W])``
``running_var``     ``stdvar_over_time(vllm:num_requests_running[W])``: how much the batch moved
==================  =====================================================================================

The time-average batch is ``itl_sum + prefill_sum`` (no sampling error, aligned with the window),
or the gauge's average where the histograms are missing. TTFT is not used: it adds queueing to
service time. Which pods belong to which variant is the caller's knowledge (the Deployment's pods);
:func:`deployment_pod` recognises a Deployment's pod names when nothing better is at hand.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from variant_autoscaler.adapters.prometheus import PrometheusClient, Sample
from variant_autoscaler.core.estimator import PodWindow
from variant_autoscaler.errors import CollectionError

__all__ = [
    "LABEL_POD",
    "QUERIES_PER_CYCLE",
    "PodKey",
    "ProfileMetrics",
    "ProfileSnapshot",
    "build_queries",
    "deployment_pod",
    "windows_from_values",
]

LABEL_MODEL = "model_name"
LABEL_NAMESPACE = "namespace"
LABEL_POD = "pod"
_BY = f"by ({LABEL_NAMESPACE}, {LABEL_POD}, {LABEL_MODEL})"

PodKey = tuple[str, str, str]  # (namespace, pod, model_name); "" for a label a series lacks


def _window(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


def _rate(metric: str, w: str) -> str:
    return f"sum {_BY} (rate({metric}[{w}]))"


def build_queries(window_seconds: float) -> dict[str, str]:
    """The cycle's PromQL, one query per quantity, each grouped by namespace, pod and model."""
    w = _window(window_seconds)
    itl, tpot = "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"
    prompt = "vllm:request_prompt_tokens"
    return {
        "itl_sum": f"{_rate(itl + '_sum', w)} or {_rate(tpot + '_sum', w)}",
        "itl_count": f"{_rate(itl + '_count', w)} or {_rate(tpot + '_count', w)}",
        "prefill_sum": _rate("vllm:request_prefill_time_seconds_sum", w),
        "prefill_count": _rate("vllm:request_prefill_time_seconds_count", w),
        "prompt_tokens": f"{_rate(prompt + '_sum', w)} / {_rate(prompt + '_count', w)}",
        "running_avg": f"sum {_BY} (avg_over_time(vllm:num_requests_running[{w}]))",
        "running_var": f"sum {_BY} (stdvar_over_time(vllm:num_requests_running[{w}]))",
    }


QUERIES_PER_CYCLE = len(build_queries(60.0))


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def windows_from_values(
    values: Mapping[str, Mapping[PodKey, float]], *, now: float, window_seconds: float
) -> list[PodWindow]:
    """One window per (namespace, pod, model) seen in any query, from each query's values by key."""
    keys: set[PodKey] = set()
    for by_key in values.values():
        keys.update(by_key)
    out: list[PodWindow] = []
    for key in sorted(keys):

        def get(name: str, _key: PodKey = key) -> float | None:
            return _finite(values.get(name, {}).get(_key))

        itl_sum, itl_count = get("itl_sum"), get("itl_count")
        pre_sum, pre_count = get("prefill_sum"), get("prefill_count")
        gauge_mean, gauge_var = get("running_avg"), get("running_var")
        itl_ms = 1000.0 * itl_sum / itl_count if itl_sum is not None and itl_count else None
        prefill_ms = 1000.0 * pre_sum / pre_count if pre_sum is not None and pre_count else None
        if itl_sum is not None and pre_sum is not None:
            running: float | None = itl_sum + pre_sum  # Little's law: decoding + prefilling
        else:
            running = gauge_mean
        out.append(
            PodWindow(
                namespace=key[0],
                pod=key[1],
                model=key[2],
                end=now,
                seconds=window_seconds,
                itl_ms=itl_ms,
                decode_tokens=(itl_count or 0.0) * window_seconds,
                prefill_ms=prefill_ms,
                requests=(pre_count or 0.0) * window_seconds,
                prompt_tokens=get("prompt_tokens"),
                running=running,
                gauge_mean=gauge_mean,
                gauge_var=gauge_var,
            )
        )
    return out


_POD_SUFFIX = re.compile(r"-[a-z0-9]{1,10}-[a-z0-9]{5}")


def deployment_pod(pod: str, deployment: str) -> bool:
    """Whether ``pod`` is named like a pod of Deployment ``deployment`` (``<name>-<hash>-<5 chars>``)."""
    return pod.startswith(deployment) and _POD_SUFFIX.fullmatch(pod[len(deployment) :]) is not None


@dataclass(frozen=True, slots=True)
class ProfileSnapshot:
    """One cycle's pod windows for every pod and model that has the metrics."""

    taken_at: float
    window_seconds: float
    windows: tuple[PodWindow, ...]
    queries: int

    def for_variant(
        self,
        namespace: str,
        model: str,
        *,
        pods: Collection[str] | None = None,
        deployment: str | None = None,
    ) -> list[PodWindow]:
        """The windows of ``model`` in ``namespace`` from the given pods (by name), or from the pods
        named like ``deployment``'s, or all of them when neither is given."""
        out = []
        for w in self.windows:
            if w.namespace != namespace or w.model != model:
                continue
            if pods is not None and w.pod not in pods:
                continue
            if deployment is not None and pods is None and not deployment_pod(w.pod, deployment):
                continue
            out.append(w)
        return out


def _by_key(samples: list[Sample]) -> dict[PodKey, float]:
    out: dict[PodKey, float] = {}
    for s in samples:
        model = s.labels.get(LABEL_MODEL)
        if model is None:
            continue
        key = (s.labels.get(LABEL_NAMESPACE, ""), s.labels.get(LABEL_POD, ""), model)
        out[key] = s.value
    return out


class ProfileMetrics:
    """Runs the fixed query set concurrently and builds the pod windows."""

    def __init__(self, client: PrometheusClient) -> None:
        self.client = client

    async def collect(self, *, now: float, window_seconds: float = 60.0) -> ProfileSnapshot:
        """Every pod's window ending at ``now``; ``CollectionError`` if a query fails."""
        if not window_seconds > 0:
            raise CollectionError(f"the profile window must be > 0 seconds, got {window_seconds}")
        queries = build_queries(window_seconds)
        raw = await self.client.query_set(queries, at=now)
        values = {name: _by_key(samples) for name, samples in raw.items()}
        windows = windows_from_values(values, now=now, window_seconds=window_seconds)
        return ProfileSnapshot(
            taken_at=now, window_seconds=window_seconds, windows=tuple(windows), queries=len(queries)
        )
