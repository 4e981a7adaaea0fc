"""One variant's decision in one cycle, pure: from what the cycle read to its status, Events and gauges.

The engine reads (the VA, its scale target, the metrics, the plan), calls :func:`decide`, carries out
the actuation it asks for (patch mode only: the scale patch and the batch-size patch are the only I/O
in between), and hands the outcome to :func:`report`, which returns the status body to write, the
Events to post and the gauges to export. A spec that cannot be used goes through :func:`report_invalid`.

Everything a decision needs from the past comes from the previous status (the last decision, the
stabilisation window's recommendations, the last scale time, the last time metrics were good), so a
restarted operator decides as the previous one would have.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from variant_autoscaler.core import status as st
from variant_autoscaler.core.policy import (
    PolicyDecision,
    PolicyInput,
    apply_policy,
    batch_stable_cycles,
    should_apply_batch,
)

__all__ = [
    "DEFAULT_MAX_BATCH",
    "KV_PRESSURE_MIN_SECONDS",
    "ActuationResult",
    "DecisionInputs",
    "EventSpec",
    "Gauges",
    "MetricsView",
    "Report",
    "TargetView",
    "VariantDecision",
    "VariantPlan",
    "decide",
    "report",
    "report_invalid",
    "spread",
    "unchanged",
]

DEFAULT_MAX_BATCH = 256  # WVA reports 256 when it cannot tell; we read --max-num-seqs when present
#: KVCachePressure stays True at least this long once set (at most one Warning per variant per period).
KV_PRESSURE_MIN_SECONDS = 600.0

EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True, slots=True)
class VariantPlan:
    """The planner's word on one variant (before the replica policy)."""

    accelerator: str
    replicas: int
    max_batch: int | None
    cost: float | None
    ttft_ms: float | None
    itl_ms: float | None
    reason: str
    # What decided: "optimizer" (the queueing model), a saturation analyzer ("saturation-v1", ...), their
    # combination, or "scale-to-zero"; the reason label of wva_replica_scaling_total.
    decided_by: str = "optimizer"


@dataclass(frozen=True, slots=True)
class TargetView:
    """The scale target as the cycle read it."""

    kind: str
    name: str
    spec_replicas: int
    ready_replicas: int | None
    status_replicas: int
    max_num_seqs: int | None = None
    # Another controller that owns it (e.g. ``LeaderWorkerSet/x``), or None.
    controller: str | None = None
    # A Deployment whose serving container was found: ``--max-num-seqs`` can be patched.
    batch_patchable: bool = False


@dataclass(frozen=True, slots=True)
class MetricsView:
    """The model's metrics as the collector found them (rates in requests/s, latencies in ms)."""

    state: Literal["ok", "missing", "stale"]
    message: str
    newest_sample: float = 0.0
    arrival_rate: float = 0.0
    avg_input_tokens: float = 0.0
    avg_output_tokens: float = 0.0
    ttft_ms: float = 0.0
    itl_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class DecisionInputs:
    """Everything one variant's decision depends on."""

    now: datetime
    namespace: str
    name: str
    uid: str
    generation: int | None
    previous: Mapping[str, Any]  # the status as read
    mode: str  # metrics | patch | shadow
    min_replicas: int = 1
    max_replicas: int | None = None
    stabilization_seconds: float = 0.0
    apply_max_batch: bool = False
    # The profile's maxBatchSize on the current accelerator, if any (the batch when --max-num-seqs is unset).
    profile_max_batch: int | None = None
    accelerator: str | None = None
    target: TargetView | None = None
    target_error: str | None = None
    # Whether the target exists: False sets TargetResolved=False (the VA stays, and resumes when the
    # target is back); None leaves the condition as it was (the target could not be read).
    target_found: bool | None = None
    # The HorizontalPodAutoscaler that manages the target (patch mode refuses to fight it), or None.
    hpa_owner: str | None = None
    metrics: MetricsView | None = None  # None: not collected for this variant
    metrics_error: str | None = None  # Prometheus failed this cycle
    config_error: str | None = None
    plan: VariantPlan | None = None
    plan_failure: str | None = None
    plan_status: str = ""
    unit_cost: float = 0.0
    metrics_window_seconds: float = 60.0
    pending_timeout_seconds: float = 600.0
    # Replicas of the model's other variants still starting or asked for by this plan: a scale-down
    # waits for them (make before break; core/policy.py rule 3d). 0 for mean classes.
    siblings_starting: int = 0
    # Replicas given up at once to higher-priority variants the plan puts on the same GPUs (rule 3e).
    yield_replicas: int = 0
    batch_stable_cycles: int = 3
    status_refresh_seconds: float = 0.0
    # ``status.learnedProfile`` as this cycle computed it (core/learning.py); None: left as stored.
    learned_profile: Mapping[str, Any] | None = None
    # status.forecast to write (the model's demand forecast, engine/ahead.py), or None.
    forecast: Mapping[str, Any] | None = None
    # status.workload to write (what the tail model sized the model with: core/status.workload_json), or None.
    workload: Mapping[str, Any] | None = None
    # Preemptions per second over the variant's pods in the metrics window (None: not reported).
    preemption_rate: float | None = None


@dataclass(frozen=True, slots=True)
class EventSpec:
    """An Event to post about the variant; ``dedupe`` names it, so a retried cycle posts it once."""

    reason: str
    message: str
    type: EventType
    dedupe: str


@dataclass(frozen=True, slots=True)
class Gauges:
    """The exported per-variant gauges (WVA's ``inferno_*``/``wva_*`` and ours)."""

    variant_name: str
    namespace: str
    accelerator: str
    mode: str
    desired_replicas: int
    current_replicas: int
    predicted_ttft_ms: float | None = None
    predicted_itl_ms: float | None = None
    observed_ttft_ms: float | None = None
    observed_itl_ms: float | None = None
    # What decided (VariantPlan.decided_by: "optimizer", "saturation-v1", ...), for the reason label of
    # wva_replica_scaling_total when the decision changes.
    scaling_reason: str = "optimizer"

    @property
    def desired_ratio(self) -> float:
        """WVA's ratio: desired/current, or desired when nothing runs."""
        if self.current_replicas == 0:
            return float(self.desired_replicas)
        return self.desired_replicas / self.current_replicas


@dataclass(frozen=True, slots=True)
class VariantDecision:
    """What :func:`decide` concluded; in patch mode ``scale_to`` / ``batch_to`` are what the engine must
    set on the target (None: nothing), otherwise ``settled`` is the ``Actuated`` condition already."""

    inputs: DecisionInputs
    conditions: tuple[st.Condition, ...]
    policy: PolicyDecision
    desired: st.DesiredView
    current: st.CurrentView | None
    stable_cycles: int
    last_scale_time: datetime | None
    last_metrics_time: datetime | None
    metrics_ok: bool
    settled: st.Condition | None = None
    scale_to: int | None = None
    batch_to: int | None = None


@dataclass(frozen=True, slots=True)
class ActuationResult:
    """What the engine's patches did: ``done`` lists what changed (in words), ``condition`` is the
    ``Actuated`` condition; ``patched`` when the target was changed this cycle."""

    applied: bool
    condition: st.Condition
    done: tuple[str, ...] = ()

    @property
    def patched(self) -> bool:
        return bool(self.done)


@dataclass(frozen=True, slots=True)
class Report:
    """The status body to write, the Events to post and the gauges to export.

    ``write`` is False when only figures and timestamps changed and ``STATUS_REFRESH_INTERVAL`` has not
    elapsed. After a 409 the engine re-reads the object and writes :meth:`on` of it instead.
    """

    status: Mapping[str, Any]
    events: tuple[EventSpec, ...]
    gauges: Gauges | None
    write: bool = True
    # How to rebuild the status on a fresh read: the full inputs, or (an invalid spec) the conditions.
    inputs: st.StatusInputs | None = None
    updates: tuple[st.Condition, ...] = ()
    now: datetime | None = None

    def on(self, fresh: Mapping[str, Any]) -> dict[str, Any]:
        """The same status merged onto a freshly read object's conditions and generation."""
        generation = (fresh.get("metadata") or {}).get("generation")
        previous = st.conditions_from_json((fresh.get("status") or {}).get("conditions"))
        if self.inputs is None:
            assert self.now is not None
            updates = [_with_generation(u, generation) for u in self.updates]
            merged = st.merge_conditions(previous, updates, self.now)
            return {"observedGeneration": generation, "conditions": [c.to_json() for c in merged]}
        return st.build_status(
            replace(
                self.inputs,
                generation=generation if isinstance(generation, int) else self.inputs.generation,
                previous_conditions=previous,
            )
        )


# --- the decision ---------------------------------------------------------------------------------------


def _metrics(
    inp: DecisionInputs, previous: Sequence[st.Condition]
) -> tuple[bool, str, st.Condition | None, str | None, datetime | None]:
    """(metrics ok, why not / what, the MetricsAvailable condition, scale-down hold, last good time)."""
    last_good = st.parse_time(inp.previous.get("lastMetricsTime"))
    if inp.metrics_error is not None:
        reason = f"Prometheus: {inp.metrics_error}"
        cond = st.Condition(st.METRICS_AVAILABLE, "False", st.REASON_PROMETHEUS_ERROR, reason)
        return False, reason, cond, None, last_good
    metrics = inp.metrics
    if metrics is None:
        return False, "metrics not collected", None, None, last_good
    if metrics.state != "ok":
        reason = st.REASON_METRICS_STALE if metrics.state == "stale" else st.REASON_METRICS_MISSING
        return (
            False,
            metrics.message,
            st.Condition(st.METRICS_AVAILABLE, "False", reason, metrics.message),
            None,
            last_good,
        )
    recovery = st.metrics_recovery(previous, inp.now, inp.metrics_window_seconds, metrics.newest_sample)
    if recovery is None:
        cond = st.Condition(st.METRICS_AVAILABLE, "True", st.REASON_METRICS_FOUND, metrics.message)
        return True, metrics.message, cond, None, inp.now
    if recovery.status != "True":  # back, but nothing scraped since the gap yet
        return False, recovery.message, recovery, None, last_good
    return True, metrics.message, recovery, recovery.message, inp.now


def _optimization(inp: DecisionInputs, metrics_ok: bool, metrics_reason: str) -> tuple[str, st.Condition]:
    """(the plan's reason, the OptimizationReady condition)."""
    if inp.config_error is not None:
        return inp.config_error, st.Condition(
            st.OPTIMIZATION_READY, "False", st.REASON_CONFIGURATION_INVALID, inp.config_error
        )
    if inp.target is None:
        reason = inp.target_error or "scale target unavailable"
        return reason, st.Condition(st.OPTIMIZATION_READY, "False", st.REASON_TARGET_NOT_FOUND, reason)
    if not metrics_ok:
        return metrics_reason, st.Condition(
            st.OPTIMIZATION_READY,
            "False",
            st.REASON_METRICS_UNAVAILABLE,
            f"holding the last decision: {metrics_reason}",
        )
    if inp.plan is None:
        reason = inp.plan_failure or f"no decision from the optimizer (plan {inp.plan_status})"
        return reason, st.Condition(st.OPTIMIZATION_READY, "False", st.REASON_OPTIMIZATION_FAILED, reason)
    on = f" on {inp.plan.accelerator}" if inp.plan.accelerator else ""
    by = f" (decided by {inp.plan.decided_by})" if inp.plan.decided_by != "optimizer" else ""
    return inp.plan.reason, st.Condition(
        st.OPTIMIZATION_READY,
        "True",
        st.REASON_OPTIMIZATION_SUCCEEDED,
        f"Optimization completed: {inp.plan.replicas} replicas{on}{by}",
    )


def _target_resolved(inp: DecisionInputs) -> st.Condition | None:
    """WVA's TargetResolved: the target exists, or not; None when it could not be read (unchanged)."""
    if inp.target is not None:
        return st.Condition(
            st.TARGET_RESOLVED, "True", st.REASON_TARGET_FOUND, f"{inp.target.kind}/{inp.target.name} found"
        )
    if inp.target_found is False:
        return st.Condition(
            st.TARGET_RESOLVED,
            "False",
            st.REASON_TARGET_NOT_FOUND,
            f"{inp.target_error or 'the scale target does not exist'}; scaling resumes when it is back",
        )
    return None


def _pressure(
    inp: DecisionInputs, previous: Sequence[st.Condition]
) -> tuple[st.Condition | None, str | None]:
    """(the KVCachePressure condition, why no scale-down this cycle). Pods that preempt run over their
    KV cache: fewer replicas would preempt more, so the variant is not scaled down. Not reported: the
    condition turns Unknown if it was set, and stays absent otherwise."""
    rate = inp.preemption_rate
    if rate is None:
        if not any(c.type == st.KV_CACHE_PRESSURE for c in previous):
            return None, None
        return st.Condition(
            st.KV_CACHE_PRESSURE,
            "Unknown",
            st.REASON_PREEMPTIONS_NOT_REPORTED,
            "no vllm:num_preemptions_total series for its pods this cycle",
        ), None
    window = f"{inp.metrics_window_seconds:g}s"
    if rate <= 0:
        before = next((c for c in previous if c.type == st.KV_CACHE_PRESSURE), None)
        since = before.last_transition_time if before is not None and before.status == "True" else None
        if since is not None and (inp.now - since).total_seconds() < KV_PRESSURE_MIN_SECONDS:
            # Sporadic preemptions would flip it (and warn) every other cycle: it clears only once it
            # has stood for KV_PRESSURE_MIN_SECONDS.
            until = st.format_time(since + timedelta(seconds=KV_PRESSURE_MIN_SECONDS))
            return st.Condition(
                st.KV_CACHE_PRESSURE,
                "True",
                st.REASON_PREEMPTING,
                f"its pods preempted no requests over the last {window}; the condition clears from "
                f"{until} if they preempt no more",
            ), None
        return st.Condition(
            st.KV_CACHE_PRESSURE,
            "False",
            st.REASON_NO_PREEMPTIONS,
            f"its pods preempted no requests over the last {window}",
        ), None
    why = f"its pods preempt {rate * 60.0:.3g} requests/min (KV cache full)"
    return st.Condition(
        st.KV_CACHE_PRESSURE,
        "True",
        st.REASON_PREEMPTING,
        f"{why} over the last {window}: no scale-down while they do; see docs/troubleshooting.md, "
        "KVCachePressure",
    ), why


def decide(inp: DecisionInputs) -> VariantDecision:
    """The variant's conditions, its replica decision after policy, and what actuation must do."""
    raw = inp.previous
    previous = st.conditions_from_json(raw.get("conditions"))
    prev_desired = raw.get("desiredOptimizedAlloc") or {}
    prev_actuation = raw.get("actuation") or {}
    last_desired = _int(prev_desired.get("numReplicas"))
    last_scale_time = st.parse_time(prev_actuation.get("lastScaleTime"))
    target, plan = inp.target, inp.plan

    metrics_ok, metrics_reason, metrics_cond, scale_down_hold, last_metrics_time = _metrics(inp, previous)
    plan_reason, ready_cond = _optimization(inp, metrics_ok, metrics_reason)
    resolved = _target_resolved(inp)
    pressure_cond, pressure_hold = _pressure(inp, previous)
    conditions = (
        *(() if resolved is None else (resolved,)),
        *(() if metrics_cond is None else (metrics_cond,)),
        ready_cond,
        *(() if pressure_cond is None else (pressure_cond,)),
    )

    # A change of the target's replicas since the last status (ours before a restart, or anyone's)
    # counts as a scale for the pending-replicas rule.
    prev_current = (raw.get("currentAlloc") or {}).get("numReplicas")
    if target is not None and isinstance(prev_current, int) and prev_current != target.spec_replicas:
        last_scale_time = inp.now
    policy = apply_policy(
        PolicyInput(
            now=inp.now,
            optimized_replicas=plan.replicas
            if plan is not None and target is not None and inp.config_error is None
            else None,
            optimized_reason=plan_reason,
            metrics_ok=metrics_ok,
            metrics_reason=metrics_reason,
            current_replicas=target.spec_replicas if target is not None else None,
            ready_replicas=target.ready_replicas if target is not None else None,
            last_desired=last_desired,
            min_replicas=inp.min_replicas,
            max_replicas=inp.max_replicas,
            stabilization_seconds=inp.stabilization_seconds,
            history=st.recommendations_from_json(raw.get("recommendations")),
            last_scale_time=last_scale_time,
            pending_timeout_seconds=inp.pending_timeout_seconds,
            scale_down_hold=scale_down_hold,
            pressure_hold=pressure_hold,
            siblings_starting=inp.siblings_starting,
            yield_replicas=inp.yield_replicas,
        )
    )
    accelerator = plan.accelerator if plan is not None else (inp.accelerator or "")
    max_batch = plan.max_batch if plan is not None else prev_desired.get("maxBatch")
    prev_batch = _int(prev_desired.get("maxBatch"))
    # Counted up to what the batch rule needs (a count that grows for ever changes every status).
    stable = min(
        batch_stable_cycles(prev_batch, int(prev_actuation.get("maxBatchStableCycles") or 0), max_batch),
        inp.batch_stable_cycles,
    )
    observed = inp.metrics
    current = None
    if target is not None:
        current = st.CurrentView(
            accelerator=inp.accelerator or "",  # a profile-less variant may not name it: left out
            replicas=target.spec_replicas,
            max_batch=target.max_num_seqs or inp.profile_max_batch or DEFAULT_MAX_BATCH,
            cost=target.spec_replicas * inp.unit_cost,
            itl_ms=observed.itl_ms if observed else 0.0,
            ttft_ms=observed.ttft_ms if observed else 0.0,
            arrival_rate_rpm=observed.arrival_rate * 60.0 if observed else 0.0,
            avg_input_tokens=observed.avg_input_tokens if observed else 0.0,
            avg_output_tokens=observed.avg_output_tokens if observed else 0.0,
            preemption_rate_rpm=inp.preemption_rate * 60.0 if inp.preemption_rate is not None else None,
        )
    predicted = plan is not None and not policy.held
    desired = st.DesiredView(
        # A profile-less variant without the accelerator label: left out of the status (WVA's final CRD
        # deprecated the field).
        accelerator=accelerator if len(accelerator) >= 2 else (inp.accelerator or ""),
        replicas=policy.replicas,
        last_run_time=inp.now,
        max_batch=max_batch if isinstance(max_batch, int) else None,
        reason=policy.reason,
        ttft_ms=plan.ttft_ms if predicted and plan is not None else None,
        itl_ms=plan.itl_ms if predicted and plan is not None else None,
        cost=plan.cost if predicted and plan is not None else None,
    )
    decision = VariantDecision(
        inputs=inp,
        conditions=conditions,
        policy=policy,
        desired=desired,
        current=current,
        stable_cycles=stable,
        last_scale_time=last_scale_time,
        last_metrics_time=last_metrics_time,
        metrics_ok=metrics_ok,
    )
    return _actuation(decision, max_batch)


def _actuation(decision: VariantDecision, max_batch: object) -> VariantDecision:
    """The ``Actuated`` condition where no I/O is needed, else what patch mode must set."""
    inp, replicas = decision.inputs, decision.policy.replicas
    target = inp.target

    def settled(status: st.ConditionStatus, reason: str, message: str) -> VariantDecision:
        return replace(decision, settled=st.Condition(st.ACTUATED, status, reason, message))

    if inp.mode == "shadow":
        return settled(
            "True", st.REASON_SHADOW, f"shadow mode: recommending {replicas} replicas, nothing changed"
        )
    if inp.mode == "metrics":
        return settled(
            "True", st.REASON_METRICS_EMITTED, f"inferno_desired_replicas={replicas} exported for the HPA"
        )
    if target is None:
        return settled("False", st.REASON_NOT_ACTUATED, inp.target_error or "no scale target")
    if inp.hpa_owner is not None:
        return settled(
            "False",
            st.REASON_CONFLICTING_CONTROLLER,
            f"not patching {target.kind}/{target.name}: HorizontalPodAutoscaler {inp.hpa_owner} manages it "
            "(use actuation mode metrics, or remove the HPA)",
        )
    if target.controller is not None:
        return settled(
            "False",
            st.REASON_CONFLICTING_CONTROLLER,
            f"not patching {target.kind}/{target.name}: it is controlled by {target.controller}",
        )
    batch = max_batch if isinstance(max_batch, int) else None
    apply_batch = (
        should_apply_batch(
            enabled=inp.apply_max_batch,
            current_batch=target.max_num_seqs,
            batch=batch,
            stable_cycles=decision.stable_cycles,
            required_cycles=inp.batch_stable_cycles,
        )
        and target.batch_patchable
        and batch is not None
    )
    return replace(
        decision,
        scale_to=replicas if replicas != target.spec_replicas else None,
        batch_to=batch if apply_batch else None,
    )


def unchanged(decision: VariantDecision) -> ActuationResult:
    """Patch mode when nothing had to be set: the target already runs the decision."""
    target = decision.inputs.target
    assert target is not None
    return ActuationResult(
        applied=True,
        condition=st.Condition(
            st.ACTUATED,
            "True",
            st.REASON_UNCHANGED,
            f"{target.kind}/{target.name} already has {decision.policy.replicas} replicas",
        ),
    )


# --- the report -----------------------------------------------------------------------------------------


def _flip(previous: Sequence[st.Condition], cond: st.Condition) -> EventSpec | None:
    """A Warning when ``cond`` is new or changed status or reason (once per transition)."""
    before = next((c for c in previous if c.type == cond.type), None)
    if before is not None and before.status == cond.status and before.reason == cond.reason:
        return None
    stamp = before.last_transition_time.isoformat() if before and before.last_transition_time else "-"
    return EventSpec(cond.reason, cond.message, "Warning", f"{cond.type}|{stamp}")


def report(decision: VariantDecision, result: ActuationResult | None = None) -> Report:
    """The status, Events and gauges of a decision, once its actuation is done (``result``; None when
    :func:`decide` settled it)."""
    inp = decision.inputs
    raw = inp.previous
    previous = st.conditions_from_json(raw.get("conditions"))
    if result is None:
        assert decision.settled is not None, "patch mode needs the actuation's result"
        result = ActuationResult(applied=decision.settled.status == "True", condition=decision.settled)
    conditions = (*decision.conditions, result.condition)
    last_scale_time = inp.now if result.patched else decision.last_scale_time
    status_inputs = st.StatusInputs(
        now=inp.now,
        generation=inp.generation,
        previous_conditions=previous,
        condition_updates=conditions,
        current=decision.current,
        desired=decision.desired,
        actuation=st.ActuationView(
            applied=result.applied,
            mode=inp.mode,
            last_scale_time=last_scale_time,
            max_batch_stable_cycles=decision.stable_cycles,
        ),
        recommendations=decision.policy.history,
        last_metrics_time=decision.last_metrics_time,
        learned_profile=inp.learned_profile,
        forecast=inp.forecast,
        workload=inp.workload,
    )
    status = st.build_status(status_inputs)

    events: list[EventSpec] = []
    if result.done:
        dedupe = f"{inp.now.isoformat()}|{list(result.done)}"
        events.append(EventSpec("Scaled", "; ".join(result.done), "Normal", dedupe))
    prev_desired = raw.get("desiredOptimizedAlloc") or {}
    last_desired = _int(prev_desired.get("numReplicas"))
    prev_batch = _int(prev_desired.get("maxBatch"))
    desired = decision.desired
    # An accelerator left out of the status (a profile-less variant) reads back as absent.
    prev_key = (last_desired, prev_desired.get("accelerator") or "", prev_batch)
    new_key = (desired.replicas, desired.accelerator or "", desired.max_batch)
    if prev_key != new_key:
        events.append(
            EventSpec(
                "DecisionChanged",
                f"{last_desired if last_desired is not None else '-'} -> {desired.replicas} replicas on "
                f"{desired.accelerator}"
                + (f", batch {desired.max_batch}" if desired.max_batch else "")
                + f": {desired.reason}",
                "Normal",
                f"{prev_desired.get('lastRunTime')}|{prev_key}|{new_key}",
            )
        )
    events.extend(
        e
        for c in conditions
        if c.status == "False" and c.type != st.KV_CACHE_PRESSURE and (e := _flip(previous, c)) is not None
    )
    pressure = next((c for c in conditions if c.type == st.KV_CACHE_PRESSURE and c.status == "True"), None)
    if pressure is not None and (event := _flip(previous, pressure)) is not None:
        # Once per episode (a transition to True), as the other conditions' Warnings.
        events.append(replace(event, reason=st.KV_CACHE_PRESSURE))

    target, metrics = inp.target, inp.metrics
    prev_current = (raw.get("currentAlloc") or {}).get("numReplicas")
    observed = metrics if metrics is not None and decision.metrics_ok else None
    gauges = Gauges(
        variant_name=inp.name,
        namespace=inp.namespace,
        accelerator=desired.accelerator,
        mode=inp.mode,
        desired_replicas=desired.replicas,
        current_replicas=target.status_replicas
        if target is not None
        else (prev_current if isinstance(prev_current, int) else 0),
        predicted_ttft_ms=desired.ttft_ms,
        predicted_itl_ms=desired.itl_ms,
        observed_ttft_ms=observed.ttft_ms if observed is not None else None,
        observed_itl_ms=observed.itl_ms if observed is not None else None,
        scaling_reason=inp.plan.decided_by if inp.plan is not None and not decision.policy.held else "hold",
    )
    write = not (
        inp.status_refresh_seconds > 0
        and raw
        and st.status_essentials(status) == st.status_essentials(raw)
        and not st.refresh_due(raw, inp.now, inp.status_refresh_seconds, spread(inp.uid))
    )
    return Report(status=status, events=tuple(events), gauges=gauges, write=write, inputs=status_inputs)


def report_invalid(inp: DecisionInputs, message: str) -> Report:
    """A spec the operator cannot use: ``OptimizationReady=False/InvalidSpec`` and nothing else."""
    previous = st.conditions_from_json(inp.previous.get("conditions"))
    update = _with_generation(
        st.Condition(st.OPTIMIZATION_READY, "False", st.REASON_INVALID_SPEC, message), inp.generation
    )
    merged = st.merge_conditions(previous, [update], inp.now)
    flip = _flip(previous, update)
    return Report(
        status={"observedGeneration": inp.generation, "conditions": [c.to_json() for c in merged]},
        events=() if flip is None else (flip,),
        gauges=None,
        updates=(update,),
        now=inp.now,
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def spread(uid: str) -> float:
    """A number in [0, 1) fixed per object (from its uid), to spread periodic status refreshes."""
    return int(hashlib.sha256(uid.encode()).hexdigest()[:8], 16) / 2**32


def _with_generation(cond: st.Condition, generation: object) -> st.Condition:
    return replace(cond, observed_generation=generation if isinstance(generation, int) else None)
