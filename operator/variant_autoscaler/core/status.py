"""Pure builders of the VariantAutoscaling status and its conditions.

The result of :func:`build_status` is the JSON body of ``.status`` in the CRD's shape (WVA's fields,
formatted as WVA formats them, plus ours). Keys the operator owns but has no value for are present with
``None``, so that a JSON merge patch removes stale values. Conditions follow
``meta.SetStatusCondition``: the transition time changes only when the status flips.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

from variant_autoscaler.core.policy import Recommendation
from variant_autoscaler.core.workload import Workload

ConditionStatus = Literal["True", "False", "Unknown"]

# Condition types: WVA's (MetricsAvailable and OptimizationReady since 2025-10, TargetResolved in the final
# CRD), and ours.
METRICS_AVAILABLE = "MetricsAvailable"
OPTIMIZATION_READY = "OptimizationReady"
TARGET_RESOLVED = "TargetResolved"
ACTUATED = "Actuated"
# (ours) As a Node's MemoryPressure: True while the variant's pods preempt requests (their KV cache is
# full); absent until preemptions are first reported.
KV_CACHE_PRESSURE = "KVCachePressure"

# TargetResolved reasons (WVA's): the scale target exists, or not (the VA does not own its target: it
# stays, False, until the target is back).
REASON_TARGET_FOUND = "TargetFound"
REASON_TARGET_NOT_FOUND = "TargetNotFound"

# MetricsAvailable reasons (WVA's).
REASON_METRICS_FOUND = "MetricsFound"
REASON_METRICS_MISSING = "MetricsMissing"
REASON_METRICS_STALE = "MetricsStale"
REASON_PROMETHEUS_ERROR = "PrometheusError"
# (ours) Available again after a gap, but the rate window is not full of new samples yet.
REASON_METRICS_RECOVERING = "MetricsRecovering"

# OptimizationReady reasons (WVA's three, then ours).
REASON_OPTIMIZATION_SUCCEEDED = "OptimizationSucceeded"
REASON_OPTIMIZATION_FAILED = "OptimizationFailed"
REASON_METRICS_UNAVAILABLE = "MetricsUnavailable"
REASON_INVALID_SPEC = "InvalidSpec"
REASON_CONFIGURATION_INVALID = "ConfigurationInvalid"
# (WVA's final CRD) spelled differently from ours above; either may be set.
REASON_INVALID_CONFIGURATION = "InvalidConfiguration"
REASON_SKIPPED_PROCESSING = "SkippedProcessing"

# Actuated reasons (ours).
REASON_METRICS_EMITTED = "MetricsEmitted"
REASON_SCALED = "Scaled"
REASON_UNCHANGED = "Unchanged"
REASON_SHADOW = "ShadowMode"
REASON_CONFLICTING_CONTROLLER = "ConflictingController"
REASON_SCALE_FAILED = "ScaleFailed"
# Someone else changed the target (its replicas, or the args a batch patch sets) after the cycle read it:
# not overwritten this cycle.
REASON_TARGET_CHANGED = "TargetChanged"
REASON_NOT_ACTUATED = "NotActuated"

# KVCachePressure reasons (ours); the Warning Event when it turns True has the condition's type as reason.
REASON_PREEMPTING = "Preempting"
REASON_NO_PREEMPTIONS = "NoPreemptions"
REASON_PREEMPTIONS_NOT_REPORTED = "PreemptionsNotReported"


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: ConditionStatus
    reason: str
    message: str
    observed_generation: int | None = None
    last_transition_time: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message[:32768],
            "lastTransitionTime": format_time(self.last_transition_time or datetime.fromtimestamp(0, UTC)),
        }
        if self.observed_generation is not None:
            out["observedGeneration"] = self.observed_generation
        return out


@functools.lru_cache(maxsize=1024)
def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with second precision, as Kubernetes writes ``metav1.Time``.

    Cached: a cycle formats the same few instants (its start, the last scrape, transition times) once
    per variant; at 500 variants ``strftime`` was a twentieth of the operator's samples in py-spy.
    """
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: object) -> datetime | None:
    """Parse an RFC 3339 timestamp from a status; None when absent or malformed."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# Bounds the CRD's status schema sets (crds/: int32 counts, 32-character decimals, 4096-character reason):
# the builders stay within them, so the operator never writes a status its own CRD refuses.
INT32_MAX = 2**31 - 1
DECIMAL_CAP = 1e15  # "1000000000000000.00": 19 characters
REASON_MAX = 4096


def format_decimal(value: float | None) -> str:
    """WVA's ``%.2f`` status strings; NaN, infinities and negatives (never valid here) become 0.00, and
    absurdly large figures are capped (the schema bounds the string's length). Negative zero too: "-0.00"
    does not match the schema's pattern."""
    if value is None or not math.isfinite(value) or value <= 0:
        return "0.00"
    return f"{min(value, DECIMAL_CAP):.2f}"


def _count(value: int) -> int:
    return min(max(value, 0), INT32_MAX)


def conditions_from_json(raw: object) -> tuple[Condition, ...]:
    """Read ``status.conditions`` back; malformed entries are dropped."""
    if not isinstance(raw, list):
        return ()
    out: list[Condition] = []
    for item in raw:
        if not isinstance(item, Mapping):
            continue
        type_, status = item.get("type"), item.get("status")
        if not isinstance(type_, str) or status not in ("True", "False", "Unknown"):
            continue
        generation = item.get("observedGeneration")
        out.append(
            Condition(
                type=type_,
                status=status,
                reason=str(item.get("reason") or "Unknown"),
                message=str(item.get("message") or ""),
                observed_generation=generation if isinstance(generation, int) else None,
                last_transition_time=parse_time(item.get("lastTransitionTime")),
            )
        )
    return tuple(out)


def metrics_recovery(
    previous: Sequence[Condition], now: datetime, window_seconds: float, newest_sample: float | None = None
) -> Condition | None:
    """The ``MetricsAvailable`` condition of a variant whose metrics come back after a gap; None when
    there was no gap, or the rate window is full of new samples again.

    After an outage (Prometheus down, say) every ``rate(...[window])`` is computed from the samples since
    it ended but divided by the whole window, so it under-reads the load until one window of new samples
    has been scraped. Two stages:

    * Prometheus answers, but its newest sample (``newest_sample``, unix time) is not newer than the start
      of the gap (the ``False`` condition's transition time): nothing was scraped since. The condition
      stays ``False`` (``MetricsStale``), with its transition time: the variant holds its decision.
    * New samples arrive: ``True``/``MetricsRecovering`` from this cycle for one window (its transition
      time is that cycle's, so the hold survives an operator restart), during which the caller lets no
      scale-down through.
    """
    prev = next((c for c in previous if c.type == METRICS_AVAILABLE), None)
    if prev is None:
        return None
    if prev.status != "True":
        gap = prev.last_transition_time
        if gap is not None and newest_sample is not None and newest_sample <= gap.timestamp():
            return Condition(
                METRICS_AVAILABLE,
                "False",
                REASON_METRICS_STALE,
                "Prometheus answers again, but its newest vLLM sample "
                f"({format_time(datetime.fromtimestamp(newest_sample, UTC))}) predates the metrics gap "
                f"(since {format_time(gap)}): waiting for new scrapes",
                last_transition_time=gap,
            )
        since = now
    elif prev.reason == REASON_METRICS_RECOVERING and prev.last_transition_time is not None:
        since = prev.last_transition_time
    else:
        return None
    until = since.timestamp() + window_seconds
    if now.timestamp() >= until:
        return None
    return Condition(
        METRICS_AVAILABLE,
        "True",
        REASON_METRICS_RECOVERING,
        f"metrics are back since {format_time(since)}; until the {window_seconds:g}s rate window holds only "
        f"new samples ({format_time(datetime.fromtimestamp(until, UTC))}) they under-read the load, so "
        "no scale-down",
        last_transition_time=since,
    )


def set_condition(conditions: Sequence[Condition], new: Condition, now: datetime) -> tuple[Condition, ...]:
    """Insert or update ``new`` by type; keep the old transition time unless the status changed."""
    out: list[Condition] = []
    found = False
    for cond in conditions:
        if cond.type != new.type:
            out.append(cond)
            continue
        found = True
        if cond.status == new.status and cond.last_transition_time is not None:
            out.append(replace(new, last_transition_time=cond.last_transition_time))
        else:
            out.append(replace(new, last_transition_time=new.last_transition_time or now))
    if not found:
        out.append(replace(new, last_transition_time=new.last_transition_time or now))
    return tuple(out)


def merge_conditions(
    previous: Sequence[Condition], updates: Iterable[Condition], now: datetime
) -> tuple[Condition, ...]:
    result = tuple(previous)
    for update in updates:
        result = set_condition(result, update, now)
    return result


@dataclass(frozen=True, slots=True)
class CurrentView:
    """What runs now and what was observed (latencies in ms, arrival rate in requests per minute)."""

    accelerator: str
    replicas: int
    max_batch: int
    cost: float
    itl_ms: float
    ttft_ms: float
    arrival_rate_rpm: float
    avg_input_tokens: float
    avg_output_tokens: float
    # Preemptions per minute over its pods (vllm:num_preemptions_total); None: not reported.
    preemption_rate_rpm: float | None = None


@dataclass(frozen=True, slots=True)
class DesiredView:
    """The decision after policy (predictions in ms, None when there is no prediction)."""

    accelerator: str
    replicas: int
    last_run_time: datetime
    max_batch: int | None = None
    reason: str | None = None
    ttft_ms: float | None = None
    itl_ms: float | None = None
    cost: float | None = None


@dataclass(frozen=True, slots=True)
class ActuationView:
    applied: bool
    mode: str
    last_scale_time: datetime | None = None
    max_batch_stable_cycles: int | None = None


@dataclass(frozen=True, slots=True)
class StatusInputs:
    now: datetime
    generation: int | None
    previous_conditions: tuple[Condition, ...]
    condition_updates: tuple[Condition, ...]
    current: CurrentView | None = None
    desired: DesiredView | None = None
    actuation: ActuationView | None = None
    recommendations: tuple[Recommendation, ...] = ()
    last_metrics_time: datetime | None = None
    # ``status.learnedProfile`` (core/learning.py); None leaves the stored one as it is.
    learned_profile: Mapping[str, Any] | None = None
    # The demand forecast of the variant's model, kept across restarts (engine/ahead.py), or None.
    forecast: Mapping[str, Any] | None = None
    # ``status.workload`` (:func:`workload_json`: what the tail model sized the variant's model with), or
    # None (a mean class, or nothing read: Poisson arrivals and exponential lengths assumed).
    workload: Mapping[str, Any] | None = None


#: The length quantiles ``status.workload`` shows.
WORKLOAD_QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


def workload_json(workload: Workload) -> dict[str, Any] | None:
    """``status.workload``: the burstiness (per window, its index of dispersion: 1 is Poisson) and the
    rate it was measured at (req/min), and the prompt and output lengths' mean and quantiles, as the
    tail model read them from Prometheus; None when neither was read."""
    out: dict[str, Any] = {}
    bursts = workload.burstiness
    if bursts is not None and bursts.windows_s:
        out["burstiness"] = [
            {"windowSeconds": format_decimal(w), "indexOfDispersion": format_decimal(v)}
            for w, v in zip(bursts.windows_s[:16], bursts.idc[:16], strict=True)
        ]
        out["measuredRate"] = format_decimal(bursts.rate * 60.0)
    if workload.lengths is not None:
        for key, tokens in (
            ("promptTokens", workload.lengths.input),
            ("outputTokens", workload.lengths.output),
        ):
            figures = {"mean": format_decimal(tokens.mean)}
            figures.update({name: format_decimal(tokens.quantile(q)) for name, q in WORKLOAD_QUANTILES})
            out[key] = figures
    return out or None


def current_alloc_json(view: CurrentView) -> dict[str, Any]:
    return {
        "accelerator": view.accelerator or None,  # unknown (no label, no profile): left out
        "numReplicas": _count(view.replicas),
        "maxBatch": _count(view.max_batch),
        "variantCost": format_decimal(view.cost),
        "itlAverage": format_decimal(view.itl_ms),
        "ttftAverage": format_decimal(view.ttft_ms),
        "load": {
            "arrivalRate": format_decimal(view.arrival_rate_rpm),
            "avgInputTokens": format_decimal(view.avg_input_tokens),
            "avgOutputTokens": format_decimal(view.avg_output_tokens),
            "preemptionRate": format_decimal(view.preemption_rate_rpm)
            if view.preemption_rate_rpm is not None
            else None,
        },
    }


def desired_alloc_json(view: DesiredView) -> dict[str, Any]:
    return {
        "lastRunTime": format_time(view.last_run_time),
        "accelerator": view.accelerator or None,
        "numReplicas": _count(view.replicas),
        "maxBatch": _count(view.max_batch) if view.max_batch is not None and view.max_batch >= 0 else None,
        "reason": view.reason[:REASON_MAX] if view.reason is not None else None,
        "ttftAverage": format_decimal(view.ttft_ms) if view.ttft_ms is not None else None,
        "itlAverage": format_decimal(view.itl_ms) if view.itl_ms is not None else None,
        "variantCost": format_decimal(view.cost) if view.cost is not None else None,
    }


def build_status(inp: StatusInputs) -> dict[str, Any]:
    """The complete ``.status`` body (``None`` marks owned keys to clear in a merge patch)."""
    updates = tuple(replace(c, observed_generation=inp.generation) for c in inp.condition_updates)
    conditions = merge_conditions(inp.previous_conditions, updates, inp.now)
    actuation: dict[str, Any] | None = None
    if inp.actuation is not None:
        actuation = {
            "applied": inp.actuation.applied,
            "mode": inp.actuation.mode,
            "lastScaleTime": (
                format_time(inp.actuation.last_scale_time) if inp.actuation.last_scale_time else None
            ),
            "maxBatchStableCycles": (
                _count(inp.actuation.max_batch_stable_cycles)
                if inp.actuation.max_batch_stable_cycles is not None
                else None
            ),
        }
    out: dict[str, Any] = {
        "currentAlloc": current_alloc_json(inp.current) if inp.current is not None else None,
        "desiredOptimizedAlloc": desired_alloc_json(inp.desired) if inp.desired is not None else None,
        "actuation": actuation,
        "recommendations": [
            {"time": format_time(r.time), "numReplicas": _count(r.replicas)}
            for r in inp.recommendations[-64:]
        ]
        or None,
        "lastMetricsTime": format_time(inp.last_metrics_time) if inp.last_metrics_time else None,
        "forecast": dict(inp.forecast) if inp.forecast is not None else None,
        "workload": dict(inp.workload) if inp.workload is not None else None,
        "observedGeneration": inp.generation,
        # The schema's maxItems: the newest types (updates come last) are kept.
        "conditions": [c.to_json() for c in conditions[-32:]],
    }
    if inp.learned_profile is not None:
        out["learnedProfile"] = dict(inp.learned_profile)
    return out


def status_essentials(status: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """What must reach the API server as soon as it changes: the decision, what runs, the actuation,
    the stabilisation history, the conditions' states and the profile source in use. The rest (observed
    and predicted figures, the reason and messages in words, cycle timestamps, the learned profile's
    figures and state) changes nearly every cycle and can wait for a periodic refresh
    (``STATUS_REFRESH_INTERVAL``)."""
    s = strip_nulls(status or {})

    def pick(key: str, *fields: str) -> tuple[Any, ...]:
        part = s.get(key) or {}
        return tuple(part.get(f) for f in fields)

    conditions = sorted(
        (c.get("type"), c.get("status"), c.get("reason"), c.get("observedGeneration"))
        for c in s.get("conditions") or ()
        if isinstance(c, Mapping)
    )
    return (
        pick("desiredOptimizedAlloc", "numReplicas", "accelerator", "maxBatch"),
        pick("currentAlloc", "numReplicas", "accelerator", "maxBatch"),
        pick("actuation", "applied", "mode", "lastScaleTime", "maxBatchStableCycles"),
        tuple((r.get("time"), r.get("numReplicas")) for r in s.get("recommendations") or ()),
        s.get("observedGeneration"),
        tuple(conditions),
        pick("learnedProfile", "source", "accelerator"),
    )


def refresh_due(
    stored: Mapping[str, Any] | None, now: datetime, refresh_seconds: float, spread: float
) -> bool:
    """Whether a status whose essentials are unchanged must be rewritten anyway: its last write
    (``desiredOptimizedAlloc.lastRunTime``) is at least ``refresh_seconds`` old. ``spread`` in [0, 1)
    (from the object's uid) shortens the period by up to half, so that statuses written in the same
    cycle do not all fall due in the same later one."""
    if refresh_seconds <= 0:
        return True
    last = parse_time(((stored or {}).get("desiredOptimizedAlloc") or {}).get("lastRunTime"))
    if last is None:
        return True
    return (now - last).total_seconds() >= refresh_seconds * (1.0 - 0.5 * spread)


def recommendations_from_json(raw: object) -> tuple[Recommendation, ...]:
    """Read ``status.recommendations`` back; malformed entries are dropped."""
    if not isinstance(raw, list):
        return ()
    out: list[Recommendation] = []
    for item in raw:
        if not isinstance(item, Mapping):
            continue
        when = parse_time(item.get("time"))
        replicas = item.get("numReplicas")
        if when is not None and isinstance(replicas, int) and replicas >= 0:
            out.append(Recommendation(time=when, replicas=replicas))
    return tuple(out)


def strip_nulls(value: Any) -> Any:
    """The status as stored after a merge patch: ``None`` values removed, recursively."""
    if isinstance(value, Mapping):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value
