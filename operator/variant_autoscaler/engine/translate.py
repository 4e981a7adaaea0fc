"""From API objects to the planner's and the pure decision's inputs.

Parsing a VariantAutoscaling (cached by generation and labels, since the status written every cycle
does not change the spec), the planner's view of a variant (a VA, or an annotated HPA or ScaledObject:
WVA v0.9), which of a model's pods serve which variant, and the :class:`DecisionInputs` of one variant
from what the cycle read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from variant_autoscaler.adapters.kube import ScaleTarget
from variant_autoscaler.adapters.prometheus import Lookup, MetricsSnapshot, PodMetrics
from variant_autoscaler.api.annotated import AnnotatedVariant
from variant_autoscaler.api.config import MainConfig
from variant_autoscaler.api.saturation_config import AnalyzerConfig
from variant_autoscaler.api.v1alpha1 import ActuationMode, VariantAutoscaling, accelerator_of
from variant_autoscaler.core import status as st
from variant_autoscaler.core.decision import DecisionInputs, MetricsView, TargetView, VariantPlan
from variant_autoscaler.core.kvcache import KVCache
from variant_autoscaler.core.learning import LearningResult
from variant_autoscaler.core.model import Profile
from variant_autoscaler.core.profile_choice import ProfileSource
from variant_autoscaler.core.saturation import MODEL, ReplicaMetrics
from variant_autoscaler.engine.configs import CycleConfig
from variant_autoscaler.errors import ConfigError
from variant_autoscaler.planner import (
    IdleInput,
    ObservedLoad,
    PlannedVariant,
    PlanOutcome,
    SaturationInput,
    VariantKey,
    planned_from_va,
)

__all__ = [
    "CycleFacts",
    "SpecCache",
    "VariantContext",
    "actuation_mode",
    "assign_pods",
    "decision_inputs",
    "metrics_view",
    "plan_variant",
    "pod_owner",
    "short_validation",
    "stabilization_window",
    "target_view",
]


@dataclass
class VariantContext:
    """One variant in one cycle — a VariantAutoscaling, or an annotated HPA or ScaledObject
    (``annotated``, WVA v0.9, whose key names its kind: ``(namespace, "ScaledObject/name")``) — and what
    was read of it, step by step."""

    body: Mapping[str, Any]
    key: VariantKey
    va: VariantAutoscaling | None = None
    annotated: AnnotatedVariant | None = None
    invalid: str | None = None
    target: ScaleTarget | None = None
    target_error: str | None = None
    # False: the target does not exist (TargetResolved=False); None: not known (could not be read).
    target_found: bool | None = None
    accelerator: str | None = None
    lookup: Lookup | None = None
    planned: PlannedVariant | None = None
    pods: tuple[PodMetrics, ...] = ()
    # The previous status of an annotated object (kept in memory: it has no status of its own).
    memory: Mapping[str, Any] = field(default_factory=dict)
    # This cycle's profile learning (engine/learning.py), and the profiles the planner gets: None keeps
    # the spec's modelProfile; () sizes by saturation.
    learning: LearningResult | None = None
    profiles: tuple[Profile, ...] | None = None

    @property
    def model_id(self) -> str | None:
        if self.annotated is not None:
            return self.annotated.model_id
        return self.va.spec.model_id if self.va is not None else None

    @property
    def target_ref(self) -> tuple[str, str, str] | None:
        """``(apiVersion, kind, name)`` of the scale target, defaults filled in."""
        if self.annotated is not None:
            a = self.annotated
            return (a.target_api_version, a.target_kind, a.target_name)
        if self.va is None:
            return None
        ref = self.va.target
        assert ref.api_version is not None and ref.kind is not None
        return (ref.api_version, ref.kind, ref.name)

    @property
    def metrics_name(self) -> str:
        """``variant_name`` of its series: the VA's name; the target's for an annotated object."""
        if self.annotated is not None:
            return self.annotated.metrics_variant_name
        return self.key[1]

    @property
    def previous(self) -> Mapping[str, Any]:
        if self.annotated is not None:
            return self.memory
        return self.body.get("status") or {}


class SpecCache:
    """Parsed specs by (uid, key, generation, labels), kept from one cycle to the next.

    The parsed spec depends on the spec and the labels only (not on the status written each cycle);
    a cycle keeps what it saw and drops the rest.
    """

    def __init__(self) -> None:
        self._parsed: dict[tuple[Any, ...], VariantAutoscaling | str] = {}
        self._seen: dict[tuple[Any, ...], VariantAutoscaling | str] = {}

    def new_cycle(self) -> None:
        self._seen = self._parsed
        self._parsed = {}

    def context(self, body: Mapping[str, Any]) -> VariantContext:
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        ctx = VariantContext(body=body, key=key)
        # The parsed spec depends on the spec and the labels only (not on the status we write each
        # cycle), so it is cached by generation and labels.
        fingerprint = (
            meta.get("uid"),
            key,
            meta.get("generation"),
            tuple(sorted((meta.get("labels") or {}).items())),
        )
        cached = self._seen.get(fingerprint)
        if cached is None:
            try:
                parsed = VariantAutoscaling.model_validate({k: v for k, v in body.items() if k != "status"})
                for profile in parsed.spec.model_profile.accelerators:
                    profile.perf_parms.validate_numbers()
                cached = parsed
            except (ValidationError, ValueError) as exc:
                cached = short_validation(exc)
        self._parsed[fingerprint] = cached  # kept for the next cycle, hit or miss
        if isinstance(cached, str):
            ctx.invalid = cached
            return ctx
        va = cached
        ctx.va = va
        ctx.accelerator = va.accelerator_label
        if not va.spec.has_model_profile:
            return ctx  # sized by saturation: the accelerator (label) is informative only
        if ctx.accelerator is None and len(va.spec.model_profile.accelerators) == 1:
            ctx.accelerator = va.spec.model_profile.accelerators[0].acc
        if ctx.accelerator is None:
            ctx.invalid = (
                "the label inference.optimization/acceleratorName is missing and the profile lists more than "
                "one accelerator: set the label to the accelerator the workload runs on"
            )
        elif va.spec.profile_for(ctx.accelerator) is None:
            ctx.invalid = f"the accelerator {ctx.accelerator!r} (label) has no entry in spec.modelProfile"
        return ctx


def actuation_mode(va: VariantAutoscaling, cfg: MainConfig) -> ActuationMode:
    if va.spec.actuation is not None and va.spec.actuation.mode is not None:
        return va.spec.actuation.mode
    return cfg.default_actuation_mode


def pod_owner(contexts: Sequence[VariantContext]) -> Callable[[str, str, str], VariantContext | None]:
    """Which variant a serving pod belongs to, by ``(namespace, model, pod name)``: a pod is named after
    its workload (``<deployment>-<hash>-<suffix>``, ``<statefulset>-<ordinal>``), so it goes to the variant
    of the same model and namespace whose target name is the longest prefix of the pod's name."""
    groups: dict[tuple[str, str], list[VariantContext]] = {}
    for ctx in contexts:
        if ctx.target is not None and ctx.model_id is not None:
            groups.setdefault((ctx.key[0], ctx.model_id), []).append(ctx)
    for members in groups.values():
        members.sort(key=lambda c: len(c.target.name if c.target else ""), reverse=True)

    def owner(namespace: str, model: str, pod: str) -> VariantContext | None:
        for ctx in groups.get((namespace, model), ()):
            assert ctx.target is not None
            if pod.startswith(f"{ctx.target.name}-"):
                return ctx
        return None

    return owner


def assign_pods(contexts: Sequence[VariantContext], snapshot: MetricsSnapshot | None) -> None:
    """Which of a model's serving pods belong to which variant (``ctx.pods``, see :func:`pod_owner`)."""
    if snapshot is None:
        return
    owner = pod_owner(contexts)
    owned: dict[int, list[PodMetrics]] = {}
    groups = {(c.key[0], c.model_id) for c in contexts if c.target is not None and c.model_id is not None}
    for namespace, model in groups:
        for pod in snapshot.pods(model, namespace):
            found = owner(namespace, model, pod.pod)
            if found is not None:
                owned.setdefault(id(found), []).append(pod)
    for ctx in contexts:
        if ctx.target is not None and ctx.model_id is not None:
            ctx.pods = tuple(owned.get(id(ctx), ()))


def _saturation(ctx: VariantContext, mode: ActuationMode) -> SaturationInput:
    target = ctx.target
    assert target is not None
    tokens = [p.kv_tokens for p in ctx.pods if p.kv_tokens is not None]
    previous = (ctx.previous.get("desiredOptimizedAlloc") or {}).get("numReplicas")
    return SaturationInput(
        ready=target.ready_replicas if target.ready_replicas is not None else target.spec_replicas,
        metrics=tuple(ReplicaMetrics(p.kv_usage, p.waiting) for p in ctx.pods),
        kv_tokens_per_replica=max(tokens) if tokens else None,
        # A decision is "not applied yet" only where something applies it (not in shadow mode).
        previous_desired=previous if isinstance(previous, int) and mode != "shadow" else None,
    )


def _kv_cache(pods: Sequence[PodMetrics]) -> KVCache | None:
    """The smallest KV cache among the variant's pods (its batch ceiling holds on every pod)."""
    caches = [p.kv_cache for p in pods if p.kv_cache is not None]
    return min(caches, key=lambda c: c.tokens) if caches else None


def _preemption_rate(pods: Sequence[PodMetrics]) -> float | None:
    """Preemptions per second over the variant's pods; None when none of them reports any."""
    rates = [p.preemption_rate for p in pods if p.preemption_rate is not None]
    return sum(rates) if rates else None


def _kv_pressure(ctx: VariantContext) -> bool:
    """Its pods preempt now, or its KVCachePressure condition still holds (it stays True a while after
    the last preemption, so the batch ceiling does not come and go with every quiet window)."""
    rate = _preemption_rate(ctx.pods)
    if rate is not None and rate > 0:
        return True
    return any(
        c.type == st.KV_CACHE_PRESSURE and c.status == "True"
        for c in st.conditions_from_json(ctx.previous.get("conditions"))
    )


def plan_variant(
    ctx: VariantContext,
    snapshot: MetricsSnapshot | None,
    cycle: CycleConfig,
    *,
    analyzers: tuple[AnalyzerConfig, ...] = (),
    priority: float = 1.0,
    woken: bool = False,
    ahead: Mapping[tuple[str, str], float] | None = None,
) -> None:
    """The planner's view of the variant (``ctx.planned``), once its target is read.

    ``analyzers``: the saturation analyzers of its model, ``priority`` its weight in WVA's GPU limiter
    (the saturation ConfigMap's per-model ``priority``); ``woken``: scaled from zero within its
    retention period (not idle, whatever the counter says); ``ahead``: the demand forecasts by (model,
    namespace), req/min. Its profiles are ``ctx.profiles`` when the profile learning chose them
    (engine/learning.py), the spec's otherwise."""
    if ctx.invalid or ctx.target is None or (ctx.va is None and ctx.annotated is None):
        return
    model, namespace, cfg = ctx.model_id or "", ctx.key[0], cycle.main
    ctx.lookup = snapshot.lookup(model, namespace) if snapshot is not None else None
    metrics = ctx.lookup.metrics if ctx.lookup is not None and ctx.lookup.state == "ok" else None
    # Without fresh metrics the variant is held: not re-planned, but its GPUs count.
    load = (
        ObservedLoad(metrics.arrival_rate * 60.0, metrics.avg_input_tokens, metrics.avg_output_tokens)
        if metrics is not None
        else None
    )
    zero = cycle.zero_for(model, namespace)
    requests = None
    if snapshot is not None and zero.enabled and not woken:
        requests = snapshot.requests(model, namespace, zero.retention_seconds)
    idle = IdleInput(zero.enabled, requests, zero.retention_seconds)
    mode = actuation_mode(ctx.va, cfg) if ctx.va is not None else "metrics"
    # What the tail model and the forecast know of its model (used where its class states attainment).
    workload = snapshot.workload(model, namespace) if snapshot is not None else None
    ahead_rpm = (ahead or {}).get((model, namespace))
    extra = {
        "saturation": _saturation(ctx, mode),
        "analyzers": analyzers,
        "idle": idle,
        "default_slo": cycle.queueing.slo_for(model, namespace),
        "slo_multiplier": cycle.queueing.multiplier_for(model, namespace),
        "kv_cache": _kv_cache(ctx.pods),
        "kv_pressure": _kv_pressure(ctx),
        "gpus": _gpus(ctx),
        "saturation_priority": priority,
    }
    if ctx.annotated is not None:
        a = ctx.annotated
        ctx.planned = PlannedVariant(
            key=ctx.key,
            model_id=model,
            profiles=ctx.profiles or (),
            accelerator=ctx.accelerator if ctx.profiles else None,
            current_replicas=ctx.target.spec_replicas,
            load=load,
            min_replicas=a.min_replicas,
            max_replicas=a.max_replicas,
            variant_cost=a.variant_cost,
            workload=workload,
            ahead_rpm=ahead_rpm,
            **extra,  # type: ignore[arg-type]
        )
        return
    assert ctx.va is not None
    try:
        planned = planned_from_va(
            ctx.va,
            namespace=namespace,
            accelerator=ctx.accelerator,
            current_replicas=ctx.target.spec_replicas,
            current_max_batch=ctx.target.max_num_seqs,
            load=load,
            config=cfg,
            profiles=ctx.profiles,
            workload=workload,
            ahead_rpm=ahead_rpm,
            # Its replicas outlive this plan while its scale-down is stabilised (the replica policy).
            kept_replicas=ctx.target.spec_replicas if stabilization_window(ctx.va, cfg, mode) > 0 else 0,
        )
    except ConfigError as exc:
        ctx.invalid = f"invalid spec: {exc}"
        return
    ctx.planned = replace(planned, **extra)  # type: ignore[arg-type]


def _gpus(ctx: VariantContext) -> tuple[str, int] | None:
    """The variant's accelerator (its label, on a VA or an annotated object) and the GPUs one replica
    requests, for WVA's limiter (None: either unknown)."""
    assert ctx.target is not None
    accelerator = ctx.accelerator
    if accelerator is None and ctx.va is None:
        accelerator = accelerator_of((ctx.body.get("metadata") or {}).get("labels"))
    units = ctx.target.gpus_per_replica
    return (accelerator, units) if accelerator and units else None


def stabilization_window(
    va: VariantAutoscaling | None, cfg: MainConfig, mode: ActuationMode, *, ahead: bool = False
) -> float:
    """The variant's scale-down stabilisation window (s): its spec's, else the default for its mode
    (``ahead``: it is planned ahead of the load, with the forecast's hysteresis holding its plans)."""
    if va is not None and va.spec.scale_down is not None:
        window = va.spec.scale_down.stabilization_window_seconds
        if window is not None:
            return float(window)
    return cfg.stabilization_for(mode, ahead=ahead)


def target_view(target: ScaleTarget | None) -> TargetView | None:
    if target is None:
        return None
    return TargetView(
        kind=target.kind,
        name=target.name,
        spec_replicas=target.spec_replicas,
        ready_replicas=target.ready_replicas,
        status_replicas=target.status_replicas,
        max_num_seqs=target.max_num_seqs,
        controller=target.controller,
        batch_patchable=target.kind == "Deployment" and target.container_index is not None,
    )


def metrics_view(lookup: Lookup | None) -> MetricsView | None:
    if lookup is None:
        return None
    m = lookup.metrics
    if m is None:
        return MetricsView("missing" if lookup.state == "ok" else lookup.state, lookup.message)
    return MetricsView(
        lookup.state,
        lookup.message,
        newest_sample=m.newest_sample,
        arrival_rate=m.arrival_rate,
        avg_input_tokens=m.avg_input_tokens,
        avg_output_tokens=m.avg_output_tokens,
        ttft_ms=m.ttft_ms,
        itl_ms=m.itl_ms,
    )


@dataclass(frozen=True, slots=True)
class CycleFacts:
    """What one cycle read and planned for every variant alike: the plan, the main configuration, the
    HPAs by target, the cycle's configuration and metrics errors, and its start time. Built once per
    cycle and handed to each variant's decision with the variant's own context."""

    outcome: PlanOutcome
    cfg: MainConfig
    config_error: str | None
    metrics_error: str | None
    now: datetime
    # (namespace, kind, name) of a scale target -> the HPA that scales it; empty for annotated variants,
    # whose own HPA or ScaledObject acts on the exported decision.
    hpas: Mapping[tuple[str, str, str], str] = field(default_factory=dict)


def decision_inputs(ctx: VariantContext, facts: CycleFacts) -> DecisionInputs:
    """What the cycle read of one variant, as the pure decision's inputs."""
    outcome, cfg, hpas, now = facts.outcome, facts.cfg, facts.hpas, facts.now
    meta = ctx.body.get("metadata") or {}
    generation = meta.get("generation")
    va, target = ctx.va, ctx.target
    mode = actuation_mode(va, cfg) if va is not None else cfg.default_actuation_mode
    low, high = (
        (va.spec.effective_min_replicas(cfg.scale_to_zero), va.spec.effective_max_replicas())
        if va is not None
        else (None, None)
    )
    if ctx.annotated is not None:
        # Its HPA or ScaledObject acts on the exported decision: always metrics mode.
        mode, low, high = "metrics", ctx.annotated.min_replicas, ctx.annotated.max_replicas
    profile = va.spec.profile_for(ctx.accelerator) if va is not None and ctx.accelerator else None
    unit_cost = outcome.unit_costs.get(ctx.accelerator or "", 0.0)
    if va is not None and va.spec.variant_cost is not None:
        unit_cost = float(va.spec.variant_cost)
    elif ctx.annotated is not None:
        unit_cost = ctx.annotated.variant_cost
    stabilization = stabilization_window(va, cfg, mode)
    return DecisionInputs(
        now=now,
        namespace=ctx.key[0],
        name=ctx.metrics_name,
        uid=str(meta.get("uid") or ""),
        generation=generation if isinstance(generation, int) else None,
        previous=ctx.previous,
        mode=mode,
        min_replicas=low if low is not None else cfg.min_replicas_default,
        max_replicas=high,
        stabilization_seconds=stabilization,
        apply_max_batch=bool(va is not None and va.spec.actuation and va.spec.actuation.apply_max_batch),
        profile_max_batch=profile.max_batch_size if profile is not None else None,
        accelerator=ctx.accelerator,
        target=target_view(target),
        target_error=ctx.target_error,
        target_found=True if target is not None else ctx.target_found,
        hpa_owner=hpas.get((ctx.key[0], target.kind, target.name)) if target is not None else None,
        metrics=metrics_view(ctx.lookup),
        metrics_error=facts.metrics_error,
        config_error=facts.config_error,
        plan=_with_profile(outcome.decisions.get(ctx.key), ctx),
        plan_failure=outcome.failures.get(ctx.key),
        plan_status=outcome.status,
        yield_replicas=outcome.yields.get(ctx.key, 0),
        unit_cost=unit_cost,
        metrics_window_seconds=cfg.metrics_window_seconds,
        pending_timeout_seconds=cfg.pending_timeout_seconds,
        batch_stable_cycles=cfg.batch_stable_cycles,
        status_refresh_seconds=cfg.status_refresh_seconds,
        learned_profile=ctx.learning.status if ctx.learning is not None and va is not None else None,
        preemption_rate=_preemption_rate(ctx.pods),
    )


def _with_profile(plan: VariantPlan | None, ctx: VariantContext) -> VariantPlan | None:
    """The plan's reason, saying which profile the model used (or why saturation sized it)."""
    result = ctx.learning
    if plan is None or result is None:
        return plan
    choice = result.choice
    # The queueing model decided, alone or with saturation agreeing ("model+saturation-v1", ...).
    by_model = plan.decided_by == "optimizer" or MODEL in plan.decided_by.split("+")
    if by_model and ctx.profiles != ():
        if choice.source is ProfileSource.LEARNED:
            text = f"learned profile, confidence {result.learned.confidence.value}"
        else:
            text = "spec profile"
    elif choice.source is ProfileSource.SATURATION:
        text = f"profile: {choice.reason}"
    else:
        return plan
    return replace(plan, reason=f"{plan.reason} [{text}]")


def short_validation(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors()[:5]:
            loc = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{loc}: {err.get('msg')}")
        return "invalid spec: " + "; ".join(parts)
    return f"invalid spec: {exc}"
