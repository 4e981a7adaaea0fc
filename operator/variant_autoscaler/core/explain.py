"""Each variant's :class:`~variant_autoscaler.core.model.Decision` and the reason an admin reads.

Shared by both optimizer modes (and WVA's greedy baseline in the simulator): decisions for variants
that are not re-planned (no metrics, no feasible accelerator), a decision from a chosen candidate,
the predictions of a partial allocation, a pool's decisions, the devices decisions occupy, and the
wording every reason uses.
"""

from __future__ import annotations

from collections.abc import Mapping

from variant_autoscaler.core.analyzer import Load, SizingRequest
from variant_autoscaler.core.candidates import Candidate, CandidateSet, Sizer, tail_request
from variant_autoscaler.core.milp import KEPT_SHARE, UnitResult
from variant_autoscaler.core.model import AcceleratorType, Decision, Outcome, VariantInput
from variant_autoscaler.core.preparation import Pool, Prepared
from variant_autoscaler.core.tail import size_tail_allocation
from variant_autoscaler.errors import InfeasibleError, ModelError

__all__ = [
    "current_units",
    "decision_for",
    "device_usage",
    "held_decision",
    "infeasible_decision",
    "ms_text",
    "pool_decisions",
    "predict",
    "predicted_text",
    "rate_text",
    "replicas_text",
    "serve_text",
    "slo_text",
    "with_rejections",
]


# --- wording ---------------------------------------------------------------------------------------------


def ms_text(value: float) -> str:
    return f"{value:.1f} ms" if value < 100 else f"{value:.0f} ms"


def rate_text(rpm: float) -> str:
    return f"{rpm:.4g} req/min"


def slo_text(variant: VariantInput) -> str:
    return variant.service.slo.describe() or "no SLO"


def replicas_text(count: int) -> str:
    return f"{count} replica" if count == 1 else f"{count} replicas"


def with_rejections(reason: str, cset: CandidateSet | None) -> str:
    """``reason``, followed by why the candidates not used were rejected."""
    if cset is None:
        return reason
    summary = cset.rejection_summary()
    return f"{reason}; not used: {summary}" if summary else reason


# --- decisions ------------------------------------------------------------------------------------------


def _unit_cost(variant: VariantInput, accelerators: Mapping[str, AcceleratorType], name: str) -> float:
    """The cost of one replica on ``name`` (a stated variantCost wins)."""
    if variant.replica_cost is not None:
        return variant.replica_cost
    accelerator = accelerators.get(name)
    if accelerator is None:
        return 0.0
    profile = variant.profile(name)
    return accelerator.cost * (profile.acc_count if profile is not None else 1)


def current_units(
    variant: VariantInput, accelerators: Mapping[str, AcceleratorType]
) -> tuple[str, int] | None:
    """Device type and devices held by the current allocation, when known."""
    if not variant.current_accelerator or variant.current_replicas <= 0:
        return None
    accelerator = accelerators.get(variant.current_accelerator)
    if accelerator is None:
        return None
    profile = variant.profile(variant.current_accelerator)
    per_replica = (profile.acc_count if profile is not None else 1) * accelerator.multiplicity
    return accelerator.device, variant.current_replicas * per_replica


def _keep_current(
    variant: VariantInput,
    accelerators: Mapping[str, AcceleratorType],
    outcome: Outcome,
    reason: str,
) -> Decision:
    accelerator = variant.current_accelerator or None
    replicas = variant.current_replicas if accelerator is not None else 0
    profile = variant.profile(accelerator) if accelerator is not None else None
    batch = variant.max_batch_size or (profile.max_batch_size if profile is not None else 0)
    cost = replicas * _unit_cost(variant, accelerators, accelerator) if accelerator is not None else 0.0
    demand = variant.load.arrival_rate if variant.load is not None else 0.0
    return Decision(
        key=variant.key,
        accelerator=accelerator,
        replicas=replicas,
        max_batch=batch if replicas else 0,
        cost=cost,
        itl=0.0,
        ttft=0.0,
        outcome=outcome,
        reason=reason,
        served_rate=0.0,
        demand=demand,
    )


def held_decision(variant: VariantInput, accelerators: Mapping[str, AcceleratorType]) -> Decision:
    """No load metrics: the current allocation is kept (missing metrics never scale anything down)."""
    current = (
        f"{replicas_text(variant.current_replicas)} on {variant.current_accelerator}"
        if variant.current_accelerator
        else replicas_text(variant.current_replicas)
    )
    return _keep_current(
        variant, accelerators, Outcome.HELD, f"no load metrics: keeping the current allocation ({current})"
    )


def infeasible_decision(
    variant: VariantInput, accelerators: Mapping[str, AcceleratorType], cset: CandidateSet
) -> Decision:
    """No accelerator meets the SLOs: the current allocation is kept, and the reason says why."""
    summary = cset.rejection_summary(limit=6) or "the model profile lists no accelerator"
    keep = (
        f"; keeping {replicas_text(variant.current_replicas)} on {variant.current_accelerator}"
        if variant.current_accelerator
        else ""
    )
    return _keep_current(
        variant,
        accelerators,
        Outcome.INFEASIBLE,
        f"no accelerator meets {slo_text(variant)}: {summary}{keep}",
    )


def predict(
    variant: VariantInput,
    option: Candidate,
    *,
    replicas: int,
    served_rps: float,
    load: Load,
    accelerators: Mapping[str, AcceleratorType],
    sizer: Sizer,
) -> tuple[float, float]:
    """Predicted ITL/TTFT of ``replicas`` replicas of ``option`` sharing ``served_rps`` req/s."""
    profile = variant.profile(option.accelerator)
    accelerator = accelerators.get(option.accelerator)
    if profile is None or accelerator is None or replicas <= 0:
        return option.itl, option.ttft
    share = Load(served_rps * 60.0 * (1.0 - 1e-9), load.avg_input_tokens, load.avg_output_tokens)
    slo = variant.service.slo
    try:
        if slo.is_tail:  # the tail model's means, as the candidate was sized
            req = tail_request(
                variant,
                SizingRequest(
                    option.accelerator, accelerator.cost, profile.acc_count, profile.parms, option.batch,
                    share, slo, replicas,
                ),
            )  # fmt: skip
            sizing = size_tail_allocation(
                accelerator=req.accelerator,
                unit_cost=req.unit_cost,
                acc_count=req.acc_count,
                parms=req.parms,
                max_batch_size=req.max_batch_size,
                load=req.load,
                slo=req.slo,
                lengths=req.lengths,
                burstiness=req.burstiness,
                min_replicas=req.min_replicas,
                chunked_prefill=req.chunked_prefill,
                prefill_budget=req.prefill_budget,
            )
            return sizing.itl, sizing.ttft
        sizing = sizer(
            accelerator=option.accelerator,
            unit_cost=accelerator.cost,
            acc_count=profile.acc_count,
            parms=profile.parms,
            max_batch_size=option.batch,
            load=share,
            slo=variant.service.slo,
            min_replicas=replicas,
        )
    except (InfeasibleError, ModelError):
        return option.itl, option.ttft
    return sizing.itl, sizing.ttft


def decision_for(
    variant: VariantInput,
    option: Candidate,
    replicas: int,
    *,
    served: float,
    outcome: Outcome,
    reason: str,
    itl: float | None = None,
    ttft: float | None = None,
) -> Decision:
    """``replicas`` of ``option`` serving ``served`` req/s (predictions: the option's unless given)."""
    demand = variant.load.arrival_rate if variant.load is not None else 0.0
    if replicas <= 0:
        return Decision(variant.key, None, 0, 0, 0.0, 0.0, 0.0, outcome, reason, 0.0, demand)
    return Decision(
        key=variant.key,
        accelerator=option.accelerator,
        replicas=replicas,
        max_batch=option.batch,
        cost=replicas * option.cost_per_replica,
        itl=option.itl if itl is None else itl,
        ttft=option.ttft if ttft is None else ttft,
        outcome=outcome,
        reason=reason,
        served_rate=served * 60.0,
        demand=demand,
        rate_per_replica=option.rate_per_replica,
    )


def serve_text(variant: VariantInput, option: Candidate, replicas: int, itl: float, ttft: float) -> str:
    assert variant.load is not None
    return (
        f"{replicas_text(replicas)} of {option.accelerator} (batch {option.batch}) serve "
        f"{rate_text(variant.load.arrival_rate)} within {slo_text(variant)} "
        f"{predicted_text(variant, itl, ttft)}"
    )


def predicted_text(variant: VariantInput, itl: float, ttft: float) -> str:
    # The predictions are means; say so where the targets bound shares of requests.
    mean = "mean " if variant.service.slo.is_tail else ""
    return f"(predicted ITL {ms_text(itl)}, {mean}TTFT {ms_text(ttft)})"


# --- pools and device usage ------------------------------------------------------------------------------


def pool_decisions(
    pool: Pool,
    result: UnitResult,
    *,
    by_key: Mapping[str, VariantInput],
    prepared: Prepared,
    accelerators: Mapping[str, AcceleratorType],
    sizer: Sizer,
    decisions: dict[str, Decision],
) -> None:
    """Each pool member's decision into ``decisions``; members share the served load by their capacity."""
    running = [m for m in result.members if m.option is not None and m.replicas > 0]
    total_rate = sum(m.replicas * m.option.rate_per_replica for m in running if m.option is not None)
    demand = pool.load.arrival_rate / 60.0
    full = result.served >= demand * (1.0 - 1e-9)
    names = ", ".join(sorted(m.key for m in running)) or "none"
    # Replicas a scale-down window keeps cost the plan little (MilpMember.kept): say so where it counts.
    kept = sum(by_key[m.key].kept_replicas for m in result.members)
    cheaper = "at lower cost" + (" (counting the replicas scale-down windows keep)" if kept else "")
    for member in result.members:
        variant = by_key[member.key]
        cset = prepared.candidates[member.key]
        if member.option is None or member.replicas <= 0:
            decisions[member.key] = Decision(
                member.key,
                None,
                0,
                0,
                0.0,
                0.0,
                0.0,
                Outcome.FULL if full else Outcome.UNSERVED,
                f"shares {pool.model_id}'s load ({rate_text(pool.load.arrival_rate)}) with {names}; "
                + (f"not needed: the others serve it {cheaper}" if full else "no capacity left for it"),
                0.0,
                variant.load.arrival_rate if variant.load is not None else 0.0,
            )
            continue
        option = member.option
        share = (
            result.served * (member.replicas * option.rate_per_replica) / total_rate if total_rate else 0.0
        )
        itl, ttft = predict(
            variant,
            option,
            replicas=member.replicas,
            served_rps=share,
            load=pool.load,
            accelerators=accelerators,
            sizer=sizer,
        )
        reason = (
            f"shares {pool.model_id}'s load ({rate_text(pool.load.arrival_rate)}) with {names}: "
            f"{replicas_text(member.replicas)} of {option.accelerator} (batch {option.batch}) take "
            f"{rate_text(share * 60.0)} within {slo_text(variant)} {predicted_text(variant, itl, ttft)}"
        )
        if variant.kept_replicas and option.accelerator == variant.current_accelerator:
            reason += (
                f"; {replicas_text(variant.kept_replicas)} running, kept by the scale-down window, "
                f"count at {KEPT_SHARE * 100:g} % of their price"
            )
        if not full:
            reason += f"; the model's load is only {result.served / demand:.0%} served"
        decisions[member.key] = Decision(
            member.key,
            option.accelerator,
            member.replicas,
            option.batch,
            member.replicas * option.cost_per_replica,
            itl,
            ttft,
            Outcome.FULL if full else Outcome.PARTIAL,
            with_rejections(reason, cset),
            share * 60.0,
            variant.load.arrival_rate if variant.load is not None else 0.0,
            option.rate_per_replica,
        )


def device_usage(
    decisions: Mapping[str, Decision],
    by_key: Mapping[str, VariantInput],
    accelerators: Mapping[str, AcceleratorType],
) -> dict[str, int]:
    """Devices per device type that ``decisions`` occupy (a plan's ``usage``)."""
    used: dict[str, int] = {}
    for key, decision in decisions.items():
        if decision.accelerator is None or decision.replicas <= 0:
            continue
        accelerator = accelerators.get(decision.accelerator)
        if accelerator is None:
            continue
        profile = by_key[key].profile(decision.accelerator)
        units = (profile.acc_count if profile is not None else 1) * accelerator.multiplicity
        used[accelerator.device] = used.get(accelerator.device, 0) + decision.replicas * units
    return dict(sorted(used.items()))
