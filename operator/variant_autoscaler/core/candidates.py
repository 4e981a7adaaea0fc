"""Candidate allocations of one variant: accelerator × batch size → replicas, cost, predicted latency.

For each accelerator in the variant's profile (only the current one when it must keep its accelerator)
and each of a few batch sizes up to the profile's ``maxBatchSize`` (that value always included), the
analyzer (:func:`~variant_autoscaler.core.analyzer.size_allocation`) gives the replicas the load needs,
their cost, and the rate one replica sustains within the SLOs. Combinations that cannot meet the SLOs
are kept out, each with its reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from variant_autoscaler.core.analyzer import SLO, Load, Sizing
from variant_autoscaler.core.model import AcceleratorType, VariantInput
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.errors import InfeasibleError, ModelError

__all__ = ["Candidate", "CandidateSet", "Rejection", "Sizer", "batch_sizes", "build_candidates"]


class Sizer(Protocol):
    """The analyzer's sizing call (:func:`variant_autoscaler.core.analyzer.size_allocation`)."""

    def __call__(
        self,
        *,
        accelerator: str,
        unit_cost: float,
        acc_count: int,
        parms: ServiceParms,
        max_batch_size: int,
        load: Load,
        slo: SLO,
        min_replicas: int = 1,
        max_queue_size: int | None = None,
    ) -> Sizing: ...


def batch_sizes(max_batch: int, count: int) -> tuple[int, ...]:
    """Up to ``count`` batch sizes: ``max_batch`` then halving (``256, 128, 64, 32``; ``4, 2, 1``)."""
    if max_batch < 1 or count < 1:
        return ()
    sizes: list[int] = []
    size = max_batch
    while size >= 1 and len(sizes) < count:
        if size not in sizes:
            sizes.append(size)
        size //= 2
    return tuple(sizes)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One feasible way to run a variant.

    ``replicas`` serve the whole load within the SLOs (at least the variant's ``min_replicas``; 0 only
    with no load and ``min_replicas == 0``). ``rate_per_replica`` (req/s) is what one replica sustains
    within the SLOs (WVA's rateStar); ``units_per_replica`` the devices one replica occupies.
    """

    accelerator: str
    device: str
    batch: int
    replicas: int
    units_per_replica: int
    cost_per_replica: float
    rate_per_replica: float
    itl: float
    ttft: float
    rho: float

    @property
    def cost(self) -> float:
        return self.replicas * self.cost_per_replica

    @property
    def units(self) -> int:
        return self.replicas * self.units_per_replica

    def label(self) -> str:
        return f"{self.accelerator} (batch {self.batch})"


@dataclass(frozen=True, slots=True)
class Rejection:
    """An accelerator (and batch size, when the analyzer was asked) that cannot serve the variant."""

    accelerator: str
    batch: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class CandidateSet:
    key: str
    candidates: tuple[Candidate, ...]
    rejections: tuple[Rejection, ...]
    sizings: int = 0

    def best_per_accelerator(self) -> tuple[Candidate, ...]:
        """Per accelerator, the batch size with the highest rate per replica (ties: the larger batch).

        On one accelerator every batch size costs the same per replica and occupies the same devices, so
        the fastest one needs the fewest replicas and serves the most per replica: the others are
        dominated in every objective the optimizer uses.
        """
        best: dict[str, Candidate] = {}
        for candidate in self.candidates:
            kept = best.get(candidate.accelerator)
            if kept is None or (candidate.rate_per_replica, candidate.batch) > (
                kept.rate_per_replica,
                kept.batch,
            ):
                best[candidate.accelerator] = candidate
        return tuple(best[name] for name in sorted(best))

    def rejection_summary(self, limit: int = 3) -> str:
        """Why accelerators with no feasible batch size were left out, e.g. ``G2: ITL ... unreachable``."""
        feasible = {c.accelerator for c in self.candidates}
        reasons: dict[str, str] = {}
        for rejection in self.rejections:
            if rejection.accelerator not in feasible and rejection.accelerator not in reasons:
                reasons[rejection.accelerator] = rejection.reason
        parts = [f"{name}: {reasons[name]}" for name in sorted(reasons)]
        if len(parts) > limit:
            parts = [*parts[:limit], f"{len(parts) - limit} more"]
        return "; ".join(parts)


def build_candidates(
    variant: VariantInput,
    accelerators: Mapping[str, AcceleratorType],
    *,
    batch_count: int,
    sizer: Sizer,
    load: Load | None = None,
) -> CandidateSet:
    """All feasible candidates of ``variant`` for ``load`` (default: the variant's own load).

    The caller handles variants without load; passing none here is a programming error.
    """
    load = load if load is not None else variant.load
    if load is None:
        raise ValueError(f"variant {variant.key} has no load to size")
    rejections: list[Rejection] = []
    candidates: list[Candidate] = []
    sizings = 0
    if variant.keep_accelerator and variant.current_accelerator:
        names = [variant.current_accelerator]
        if variant.profile(variant.current_accelerator) is None:
            rejections.append(
                Rejection(
                    variant.current_accelerator,
                    None,
                    "keepAccelerator is set but the model profile has no entry for the current accelerator",
                )
            )
            names = []
    else:
        names = sorted(p.accelerator for p in variant.profiles)
    for name in names:
        profile = variant.profile(name)
        assert profile is not None
        accelerator = accelerators.get(name)
        if accelerator is None:
            rejections.append(Rejection(name, None, "not listed in accelerator-unit-costs"))
            continue
        units = profile.acc_count * accelerator.multiplicity
        top = variant.max_batch_size if variant.max_batch_size is not None else profile.max_batch_size
        for batch in batch_sizes(top, batch_count):
            sizings += 1
            try:
                sizing = sizer(
                    accelerator=name,
                    unit_cost=accelerator.cost,
                    acc_count=profile.acc_count,
                    parms=profile.parms,
                    max_batch_size=batch,
                    load=load,
                    slo=variant.service.slo,
                    min_replicas=variant.min_replicas,
                )
            except (InfeasibleError, ModelError) as exc:
                rejections.append(Rejection(name, batch, str(exc) or type(exc).__name__))
                continue
            candidates.append(
                Candidate(
                    accelerator=name,
                    device=accelerator.device,
                    batch=batch,
                    replicas=sizing.replicas,
                    units_per_replica=units,
                    cost_per_replica=accelerator.cost * profile.acc_count,
                    rate_per_replica=sizing.max_rate_per_replica,
                    itl=sizing.itl,
                    ttft=sizing.ttft,
                    rho=sizing.rho,
                )
            )
    return CandidateSet(variant.key, tuple(candidates), tuple(rejections), sizings)
