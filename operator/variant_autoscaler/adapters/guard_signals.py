"""The burst guard's one PromQL query: the queue, its growth, the completions and the KV cache of every
model at once.

Every few seconds the guard (:mod:`variant_autoscaler.core.guard`) needs four signals per model and
namespace; asking four queries would quadruple the load it puts on Prometheus, so they are one query
whose parts are told apart by a ``signal`` label::

    label_replace(sum by (model_name, namespace) (vllm:num_requests_waiting), "signal", "waiting", "", "")
    or label_replace(sum by (...) (delta(vllm:num_requests_waiting[1m])), "signal", "growth", "", "")
    or label_replace(sum by (...) (rate(vllm:request_success_total[1m])), "signal", "completions", "", "")
    or label_replace(avg by (...) (vllm:kv_cache_usage_perc), "signal", "kv", "", "")

The parts never share a label set (their ``signal`` differs), so ``or`` keeps them all. With a rise
window (``BURST_GUARD_RISE_WINDOW``, half the rate window by default) two parts more read the growth and
the completions over it (``growth_short``, ``completions_short``): arrivals that come faster over it
than over the whole window are rising, and the guard projects the rise. Building the query and reading
its samples are pure; the caller runs it on the collector's client.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from variant_autoscaler.adapters.prometheus import LABEL_MODEL, LABEL_NAMESPACE, ModelKey, Sample

__all__ = ["GuardSignals", "build_guard_query", "read_guard_signals"]

_BY = f"by ({LABEL_MODEL}, {LABEL_NAMESPACE})"
_SIGNALS = frozenset({"waiting", "growth", "completions", "kv", "growth_short", "completions_short"})


def _window(seconds: float) -> str:
    whole = max(1, round(seconds))
    return f"{whole}s" if whole % 60 else f"{whole // 60}m"


def build_guard_query(window_seconds: float = 60.0, rise_window_seconds: float = 0.0) -> str:
    """The guard's query for all models (``window_seconds``: the rate and growth window;
    ``rise_window_seconds``, when above 0, a shorter one read too)."""
    w = _window(window_seconds)
    parts = {
        "waiting": f"sum {_BY} (vllm:num_requests_waiting)",
        "growth": f"sum {_BY} (delta(vllm:num_requests_waiting[{w}]))",
        "completions": f"sum {_BY} (rate(vllm:request_success_total[{w}]))",
        "kv": f"avg {_BY} (vllm:kv_cache_usage_perc)",
    }
    if rise_window_seconds > 0:
        r = _window(rise_window_seconds)
        parts["growth_short"] = f"sum {_BY} (delta(vllm:num_requests_waiting[{r}]))"
        parts["completions_short"] = f"sum {_BY} (rate(vllm:request_success_total[{r}]))"
    return " or ".join(f'label_replace({q}, "signal", "{name}", "", "")' for name, q in parts.items())


@dataclass(frozen=True, slots=True)
class GuardSignals:
    """One model's signals (requests waiting, their growth over the window, completions/s, the mean
    KV-cache usage 0–1, and the growth and completions over the rise window); a signal Prometheus did
    not return reads 0, the rise window's None (not read: no rise is projected)."""

    waiting: float = 0.0
    growth: float = 0.0
    completions: float = 0.0
    kv: float = 0.0
    growth_short: float | None = None
    completions_short: float | None = None


def read_guard_signals(samples: Sequence[Sample]) -> dict[ModelKey, GuardSignals]:
    """The signals per (model, namespace) from the query's samples (non-finite values read 0)."""
    found: dict[ModelKey, dict[str, float]] = {}
    for sample in samples:
        model = sample.labels.get(LABEL_MODEL)
        signal = sample.labels.get("signal")
        if model is None or signal not in _SIGNALS:
            continue
        value = sample.value if math.isfinite(sample.value) else 0.0
        found.setdefault((model, sample.labels.get(LABEL_NAMESPACE, "")), {})[signal] = value
    return {key: GuardSignals(**values) for key, values in found.items()}


def signals_for(signals: Mapping[ModelKey, GuardSignals], model: str, namespace: str) -> GuardSignals | None:
    """A model's signals; like the collector, series without a namespace stand in for any."""
    return signals.get((model, namespace)) or signals.get((model, ""))
