"""What both optimizer modes start from: variants in key order, their sized candidates, and the pools.

Sizing every candidate is the analyzer's share of a plan; :func:`prepare` does it once, so a caller
that plans the same inputs twice (the benchmark's MILP against WVA's greedy) can reuse it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from variant_autoscaler.core.analyzer import Load, size_allocation
from variant_autoscaler.core.candidates import Candidate, CandidateSet, Sizer, batched, build_candidate_sets
from variant_autoscaler.core.milp import MilpMember, MilpUnit
from variant_autoscaler.core.model import AcceleratorType, OptimizerConfig, VariantInput, priority_weight
from variant_autoscaler.errors import ConfigError

__all__ = ["Clock", "Pool", "Prepared", "has_no_load", "milp_member", "pool_units", "prepare"]

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Pool:
    """Opted-in variants of one model sharing its load."""

    model_id: str
    members: tuple[str, ...]
    load: Load
    priority: int

    @property
    def key(self) -> str:
        return f"pool:{self.model_id}"


@dataclass(frozen=True, slots=True)
class Prepared:
    """Variants sorted by key, their candidate sets (variants with load only) and the pools."""

    variants: tuple[VariantInput, ...]
    candidates: Mapping[str, CandidateSet]
    pools: tuple[Pool, ...]
    pool_of: Mapping[str, Pool]
    analyzer_seconds: float | None
    sizings: int


def has_no_load(load: Load) -> bool:
    """No requests, or requests without output tokens: only ``minReplicas`` matter."""
    return load.arrival_rate == 0.0 or load.avg_output_tokens == 0.0


def _pools(variants: Sequence[VariantInput]) -> tuple[Pool, ...]:
    groups: dict[str, list[VariantInput]] = {}
    for variant in variants:
        if variant.share_load and variant.load is not None:
            groups.setdefault(variant.model_id, []).append(variant)
    pools: list[Pool] = []
    for model_id in sorted(groups):
        members = groups[model_id]
        total = sum(v.load.arrival_rate for v in members if v.load is not None)
        if len(members) < 2 or total <= 0.0:
            continue
        loads = [v.load for v in members if v.load is not None]
        pooled = Load(
            arrival_rate=total,
            avg_input_tokens=sum(ld.arrival_rate * ld.avg_input_tokens for ld in loads) / total,
            avg_output_tokens=sum(ld.arrival_rate * ld.avg_output_tokens for ld in loads) / total,
        )
        if pooled.avg_output_tokens == 0.0:
            continue
        pools.append(Pool(model_id, tuple(v.key for v in members), pooled, min(v.priority for v in members)))
    return tuple(pools)


def prepare(
    variants: Sequence[VariantInput],
    accelerators: Mapping[str, AcceleratorType],
    config: OptimizerConfig,
    *,
    sizer: Sizer = size_allocation,
    clock: Clock | None = None,
) -> Prepared:
    """Sort the variants, form the pools and size every candidate (the analyzer's share of the work)."""
    ordered = tuple(sorted(variants, key=lambda v: v.key))
    for first, second in itertools.pairwise(ordered):
        if first.key == second.key:
            raise ConfigError(f"variant {first.key} is listed twice")
    pools = _pools(ordered)
    pool_of = {key: pool for pool in pools for key in pool.members}
    started = clock() if clock is not None else None
    candidates: dict[str, CandidateSet] = {}
    sizings = 0
    # Every candidate of every variant is sized in one batch (the analyzer's vectorised path).
    jobs = [(v, pool_of[v.key].load if v.key in pool_of else None) for v in ordered if v.load is not None]
    batch = batched(sizer)
    for cset in build_candidate_sets(jobs, accelerators, batch_count=config.batch_sizes, sizer=batch):
        candidates[cset.key] = cset
        sizings += cset.sizings
    seconds = None if clock is None or started is None else clock() - started
    return Prepared(ordered, candidates, pools, pool_of, seconds, sizings)


# --- pools as MILP units (both modes solve pools with the MILP) -------------------------------------------


def milp_member(variant: VariantInput, options: tuple[Candidate, ...]) -> MilpMember:
    """A variant as the MILP sees it: its options, replica bounds and the replicas it runs now."""
    return MilpMember(
        variant.key,
        options,
        variant.min_replicas,
        variant.max_replicas,
        kept=variant.kept_replicas,
        kept_on=variant.current_accelerator or None,
    )


def pool_units(
    prepared: Prepared, by_key: Mapping[str, VariantInput]
) -> tuple[list[MilpUnit], dict[str, Pool]]:
    """One MILP unit per pool, of its members with a feasible accelerator; the pools by unit key."""
    units: list[MilpUnit] = []
    pools: dict[str, Pool] = {}
    for pool in prepared.pools:
        members = tuple(
            milp_member(by_key[k], prepared.candidates[k].best_per_accelerator())
            for k in pool.members
            if prepared.candidates[k].candidates
        )
        if not members:
            continue
        units.append(
            MilpUnit(
                pool.key, members, pool.load.arrival_rate / 60.0, priority_weight(pool.priority), pooled=True
            )
        )
        pools[pool.key] = pool
    return units, pools
