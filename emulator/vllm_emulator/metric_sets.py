"""Which metric families each vLLM version exports, with their names, types and help texts.

Read from vLLM's ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``) as of three points of its
history (docs/emulator.md, "Metrics", names the sources):

* **0.10** — the 0.10.0/0.10.1 line: the ``gpu_``-prefixed names are still shown (deprecated in
  0.9.2 for ``kv_cache_usage_perc``, ``prefix_cache_queries`` and ``prefix_cache_hits``);
  ``time_per_output_token_seconds`` is the only per-token latency histogram; there is a
  ``time_per_prefill_token_request_seconds`` histogram.
* **0.11** — ``inter_token_latency_seconds`` added and ``time_per_output_token_seconds`` deprecated
  (same observations); the ``gpu_`` names hidden (``--show-hidden-metrics-for-version=0.10`` brings
  them back); ``request_time_per_output_token_seconds`` added.
* **0.12** — ``time_per_output_token_seconds`` hidden, the ``gpu_`` names removed;
  ``engine_sleep_state``, the external (KV-connector) prefix cache and the multi-modal cache counters
  added (at 0 here: there is no connector and no multi-modal input).

Every series carries ``model_name`` and ``engine``; ``vllm:cache_config_info`` instead carries the
cache configuration's fields and ``engine``, and no ``model_name``, as vLLM's does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DEFAULT_VERSION",
    "FAMILIES",
    "VERSIONS",
    "Family",
    "cache_config_labels",
    "families_for",
]

VERSIONS: tuple[str, ...] = ("0.10", "0.11", "0.12")
DEFAULT_VERSION = "0.12"

_ALL = frozenset(VERSIONS)
_V10 = frozenset({"0.10"})
_V11 = frozenset({"0.11"})
_FROM_V11 = frozenset({"0.11", "0.12"})
_V12 = frozenset({"0.12"})
_TO_V11 = frozenset({"0.10", "0.11"})

Kind = Literal["gauge", "counter", "histogram", "info", "success", "sleep"]


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family: ``source`` names the value in :class:`~vllm_emulator.metrics.EmulatorMetrics`
    (an attribute, or a live gauge: ``running``, ``waiting``, ``kv_usage``)."""

    name: str
    kind: Kind
    help: str
    source: str
    versions: frozenset[str]


_GPU_DEPRECATED = "DEPRECATED: Use vllm:{} instead."

# In vLLM's definition order.
FAMILIES: tuple[Family, ...] = (
    Family(
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        "running",
        _ALL,
    ),
    Family(
        "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", "waiting", _ALL
    ),
    Family(
        "vllm:engine_sleep_state",
        "sleep",
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
        "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
        "",
        _V12,
    ),
    Family(
        "vllm:gpu_cache_usage_perc",
        "gauge",
        "GPU KV-cache usage. 1 means 100 percent usage." + _GPU_DEPRECATED.format("kv_cache_usage_perc"),
        "kv_usage",
        _V10,
    ),
    Family(
        "vllm:gpu_prefix_cache_queries",
        "counter",
        "GPU prefix cache queries, in terms of number of queriedtokens. "
        + _GPU_DEPRECATED.format("prefix_cache_queries"),
        "prefix_queries_total",
        _V10,
    ),
    Family(
        "vllm:gpu_prefix_cache_hits",
        "counter",
        "GPU prefix cache hits, in terms of number of cached tokens. "
        + _GPU_DEPRECATED.format("prefix_cache_hits"),
        "prefix_hits_total",
        _V10,
    ),
    Family(
        "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", "kv_usage", _ALL
    ),
    Family(
        "vllm:prefix_cache_queries",
        "counter",
        "Prefix cache queries, in terms of number of queried tokens.",
        "prefix_queries_total",
        _ALL,
    ),
    Family(
        "vllm:prefix_cache_hits",
        "counter",
        "Prefix cache hits, in terms of number of cached tokens.",
        "prefix_hits_total",
        _ALL,
    ),
    Family(
        "vllm:external_prefix_cache_queries",
        "counter",
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number "
        "of queried tokens.",
        "zero",
        _V12,
    ),
    Family(
        "vllm:external_prefix_cache_hits",
        "counter",
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of "
        "cached tokens.",
        "zero",
        _V12,
    ),
    Family(
        "vllm:mm_cache_queries",
        "counter",
        "Multi-modal cache queries, in terms of number of queried items.",
        "zero",
        _V12,
    ),
    Family(
        "vllm:mm_cache_hits",
        "counter",
        "Multi-modal cache hits, in terms of number of cached items.",
        "zero",
        _V12,
    ),
    Family(
        "vllm:num_preemptions",
        "counter",
        "Cumulative number of preemption from the engine.",
        "preemptions_total",
        _ALL,
    ),
    Family(
        "vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", "prompt_tokens_total", _ALL
    ),
    Family(
        "vllm:generation_tokens",
        "counter",
        "Number of generation tokens processed.",
        "generation_tokens_total",
        _ALL,
    ),
    Family("vllm:request_success", "success", "Count of successfully processed requests.", "success", _ALL),
    Family(
        "vllm:request_prompt_tokens",
        "histogram",
        "Number of prefill tokens processed.",
        "prompt_tokens",
        _ALL,
    ),
    Family(
        "vllm:request_generation_tokens",
        "histogram",
        "Number of generation tokens processed.",
        "generation_tokens",
        _ALL,
    ),
    Family(
        "vllm:iteration_tokens_total",
        "histogram",
        "Histogram of number of tokens per engine_step.",
        "iteration_tokens",
        _ALL,
    ),
    Family(
        "vllm:request_max_num_generation_tokens",
        "histogram",
        "Histogram of maximum number of requested generation tokens.",
        "max_generation_tokens",
        _ALL,
    ),
    Family("vllm:request_params_n", "histogram", "Histogram of the n request parameter.", "params_n", _ALL),
    Family(
        "vllm:request_params_max_tokens",
        "histogram",
        "Histogram of the max_tokens request parameter.",
        "params_max_tokens",
        _ALL,
    ),
    Family(
        "vllm:time_to_first_token_seconds",
        "histogram",
        "Histogram of time to first token in seconds.",
        "ttft",
        _ALL,
    ),
    Family(
        "vllm:time_per_output_token_seconds",
        "histogram",
        "Histogram of time per output token in seconds.",
        "itl",
        _V10,
    ),
    Family(
        "vllm:time_per_output_token_seconds",
        "histogram",
        "Histogram of time per output token in seconds."
        + _GPU_DEPRECATED.format("inter_token_latency_seconds"),
        "itl",
        _V11,
    ),
    Family(
        "vllm:inter_token_latency_seconds",
        "histogram",
        "Histogram of inter-token latency in seconds.",
        "itl",
        _FROM_V11,
    ),
    Family(
        "vllm:request_time_per_output_token_seconds",
        "histogram",
        "Histogram of time_per_output_token_seconds per request.",
        "request_tpot",
        _FROM_V11,
    ),
    Family(
        "vllm:time_per_prefill_token_request_seconds",
        "histogram",
        "Time spent per token during prefill  phase in seconds",
        "prefill_token_time",
        _V10,
    ),
    Family(
        "vllm:e2e_request_latency_seconds",
        "histogram",
        "Histogram of e2e request latency in seconds.",
        "e2e",
        _ALL,
    ),
    Family(
        "vllm:request_queue_time_seconds",
        "histogram",
        "Histogram of time spent in WAITING phase for request.",
        "queue",
        _ALL,
    ),
    Family(
        "vllm:request_inference_time_seconds",
        "histogram",
        "Histogram of time spent in RUNNING phase for request.",
        "inference",
        _ALL,
    ),
    Family(
        "vllm:request_prefill_time_seconds",
        "histogram",
        "Histogram of time spent in PREFILL phase for request.",
        "prefill",
        _ALL,
    ),
    Family(
        "vllm:request_decode_time_seconds",
        "histogram",
        "Histogram of time spent in DECODE phase for request.",
        "decode",
        _ALL,
    ),
    Family("vllm:cache_config_info", "info", "Information of the LLMEngine CacheConfig", "", _ALL),
)


def families_for(version: str) -> tuple[Family, ...]:
    """The families ``version`` exports, in vLLM's order."""
    if version not in VERSIONS:
        raise ValueError(f"unknown vLLM version {version!r}; known: {', '.join(VERSIONS)}")
    return tuple(f for f in FAMILIES if version in f.versions)


def cache_config_labels(
    version: str,
    *,
    block_size: int,
    num_gpu_blocks: int,
    enable_prefix_caching: bool,
    gpu_memory_utilization: float = 0.9,
) -> dict[str, str]:
    """``vllm:cache_config_info``'s labels: the CacheConfig's fields as strings, then ``engine``.

    vLLM writes ``str(value)`` of every field of its ``CacheConfig`` (``metrics_info()``), so ``None``
    reads ``"None"`` and booleans ``"True"``/``"False"``. The field list changes between patch
    releases; the one here is our reading of each line (docs/emulator.md says which parts are sure).
    """
    labels: dict[str, str] = {
        "block_size": str(block_size),
        "gpu_memory_utilization": str(gpu_memory_utilization),
        "swap_space": "4",
        "cache_dtype": "auto",
        "is_attention_free": "False",
        "num_gpu_blocks_override": "None",
        "sliding_window": "None",
        "enable_prefix_caching": str(enable_prefix_caching),
        "prefix_caching_hash_algo": "builtin" if version == "0.10" else "sha256",
        "cpu_offload_gb": "0",
        "calculate_kv_scales": "False",
        "kv_sharing_fast_prefill": "False",
        "mamba_cache_dtype": "auto",
        "mamba_ssm_cache_dtype": "auto",
    }
    if version != "0.10":
        labels["kv_cache_memory_bytes"] = "None"
    labels["num_gpu_blocks"] = str(num_gpu_blocks)
    labels["num_cpu_blocks"] = "None"
    labels["engine"] = "0"
    return labels
