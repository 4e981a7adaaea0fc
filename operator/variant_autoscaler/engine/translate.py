"""From API objects to the planner's and the pure decision's inputs.

Parsing a VariantAutoscaling (cached by generation and labels, since the status written every cycle
does not change the spec), the planner's view of a variant, and the :class:`DecisionInputs` of one
variant from what the cycle read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from variant_autoscaler.adapters.kube import ScaleTarget
from variant_autoscaler.adapters.prometheus import Lookup, MetricsSnapshot
from variant_autoscaler.api.config import MainConfig
from variant_autoscaler.api.v1alpha1 import ActuationMode, VariantAutoscaling
from variant_autoscaler.core.decision import DecisionInputs, MetricsView, TargetView
from variant_autoscaler.errors import ConfigError
from variant_autoscaler.planner import (
    ObservedLoad,
    PlannedVariant,
    PlanOutcome,
    VariantKey,
    planned_from_va,
)

__all__ = [
    "SpecCache",
    "VariantContext",
    "actuation_mode",
    "decision_inputs",
    "metrics_view",
    "plan_variant",
    "short_validation",
    "target_view",
]


@dataclass
class VariantContext:
    """One VariantAutoscaling in one cycle: what was read of it, step by step."""

    body: Mapping[str, Any]
    key: VariantKey
    va: VariantAutoscaling | None = None
    invalid: str | None = None
    target: ScaleTarget | None = None
    target_error: str | None = None
    accelerator: str | None = None
    lookup: Lookup | None = None
    planned: PlannedVariant | None = None


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


def plan_variant(ctx: VariantContext, snapshot: MetricsSnapshot | None, cfg: MainConfig) -> None:
    """The planner's view of the variant (``ctx.planned``), once its target is read."""
    if ctx.va is None or ctx.invalid or ctx.target is None or ctx.accelerator is None:
        return
    ctx.lookup = snapshot.lookup(ctx.va.spec.model_id, ctx.key[0]) if snapshot is not None else None
    metrics = ctx.lookup.metrics if ctx.lookup is not None and ctx.lookup.state == "ok" else None
    # Without fresh metrics the variant is held: not re-planned, but its GPUs count.
    load = (
        ObservedLoad(metrics.arrival_rate * 60.0, metrics.avg_input_tokens, metrics.avg_output_tokens)
        if metrics is not None
        else None
    )
    try:
        ctx.planned = planned_from_va(
            ctx.va,
            namespace=ctx.key[0],
            accelerator=ctx.accelerator,
            current_replicas=ctx.target.spec_replicas,
            current_max_batch=ctx.target.max_num_seqs,
            load=load,
            config=cfg,
        )
    except ConfigError as exc:
        ctx.invalid = f"invalid spec: {exc}"


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


def decision_inputs(
    ctx: VariantContext,
    *,
    outcome: PlanOutcome,
    cfg: MainConfig,
    hpas: Mapping[tuple[str, str, str], str],
    config_error: str | None,
    metrics_error: str | None,
    now: datetime,
) -> DecisionInputs:
    """What the cycle read of one variant, as the pure decision's inputs."""
    meta = ctx.body.get("metadata") or {}
    generation = meta.get("generation")
    va, target = ctx.va, ctx.target
    mode = actuation_mode(va, cfg) if va is not None else cfg.default_actuation_mode
    low, high = (va.spec.min_replicas, va.spec.max_replicas) if va is not None else (None, None)
    profile = va.spec.profile_for(ctx.accelerator) if va is not None and ctx.accelerator else None
    stabilization = (
        float(va.spec.scale_down.stabilization_window_seconds)
        if va is not None
        and va.spec.scale_down is not None
        and va.spec.scale_down.stabilization_window_seconds is not None
        else cfg.stabilization_for(mode)
    )
    return DecisionInputs(
        now=now,
        namespace=ctx.key[0],
        name=ctx.key[1],
        uid=str(meta.get("uid") or ""),
        generation=generation if isinstance(generation, int) else None,
        previous=ctx.body.get("status") or {},
        mode=mode,
        min_replicas=low if low is not None else cfg.min_replicas_default,
        max_replicas=high,
        stabilization_seconds=stabilization,
        apply_max_batch=bool(va is not None and va.spec.actuation and va.spec.actuation.apply_max_batch),
        profile_max_batch=profile.max_batch_size if profile is not None else None,
        accelerator=ctx.accelerator,
        target=target_view(target),
        target_error=ctx.target_error,
        hpa_owner=hpas.get((ctx.key[0], target.kind, target.name)) if target is not None else None,
        metrics=metrics_view(ctx.lookup),
        metrics_error=metrics_error,
        config_error=config_error,
        plan=outcome.decisions.get(ctx.key),
        plan_failure=outcome.failures.get(ctx.key),
        plan_status=outcome.status,
        unit_cost=outcome.unit_costs.get(ctx.accelerator or "", 0.0),
        metrics_window_seconds=cfg.metrics_window_seconds,
        pending_timeout_seconds=cfg.pending_timeout_seconds,
        batch_stable_cycles=cfg.batch_stable_cycles,
        status_refresh_seconds=cfg.status_refresh_seconds,
    )


def short_validation(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors()[:5]:
            loc = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{loc}: {err.get('msg')}")
        return "invalid spec: " + "; ".join(parts)
    return f"invalid spec: {exc}"
