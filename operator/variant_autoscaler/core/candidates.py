"""Candidate allocations of one variant: accelerator × batch size → replicas, cost, predicted latency.

For each accelerator in the variant's profile (only the current one when it must keep its accelerator)
and each of a few batch sizes up to the profile's ``maxBatchSize`` (that value always included), the
analyzer gives the replicas the load needs, their cost, and the rate one replica sustains within the
SLOs. Combinations that cannot meet the SLOs are kept out, each with its reason.

A class that states its targets as shares of requests (``slo-attainment``, ``slo-ttft-percentile``,
``slo-tpot-percentile``) is sized by the tail model (:mod:`variant_autoscaler.core.tail`) with the
variant's measured :class:`~variant_autoscaler.core.workload.Workload` (length distribution, burstiness);
a class that says nothing keeps WVA's meaning, the mean, and the analyzer sizes it.

:func:`build_candidate_sets` does this for every variant of a plan with one call of the analyzer's batch
(:func:`~variant_autoscaler.core.analyzer.size_allocations`), which sizes all the candidates together;
:func:`build_candidates` sizes one variant's candidates one call each (a custom sizer, tests).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from variant_autoscaler.core.analyzer import (
    SLO,
    Load,
    Sizing,
    SizingOutcome,
    SizingRequest,
    Sizings,
    size_allocation,
    size_allocations,
)
from variant_autoscaler.core.model import AcceleratorType, Profile, VariantInput
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.core.tail import TailSizingRequest, size_tail_allocations
from variant_autoscaler.core.workload import DEFAULT_PREFILL_BUDGET, RequestLengths
from variant_autoscaler.errors import InfeasibleError, ModelError

__all__ = [
    "SAME_RATE",
    "BatchSizer",
    "Candidate",
    "CandidateSet",
    "Rejection",
    "Sizer",
    "TailBatchSizer",
    "batch_sizes",
    "batched",
    "build_candidate_sets",
    "build_candidates",
    "per_call",
]


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


#: Rates per replica closer than this (relative) count as the same rate when choosing a batch size.
SAME_RATE = 1e-6


@functools.lru_cache(maxsize=1024)
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
        dominated in every objective the optimizer uses. Rates within a relative :data:`SAME_RATE` of the
        highest count as tied: the analyzer finds rates to about 1e-7, so a closer difference is noise
        (typically two batch sizes the load never fills), and the larger batch should win whatever it is.
        """
        groups: dict[str, list[Candidate]] = {}
        for candidate in self.candidates:
            groups.setdefault(candidate.accelerator, []).append(candidate)
        best: list[Candidate] = []
        for name in sorted(groups):
            group = groups[name]
            fastest = max(c.rate_per_replica for c in group)
            tied = [c for c in group if c.rate_per_replica >= fastest * (1.0 - SAME_RATE)]
            best.append(max(tied, key=lambda c: (c.batch, c.rate_per_replica)))
        return tuple(best)

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


class BatchSizer(Protocol):
    """Sizes many candidates in one call (:func:`variant_autoscaler.core.analyzer.size_allocations`):
    entry ``i`` is ``requests[i]``'s sizing, or the InfeasibleError / ModelError explaining why not."""

    def __call__(self, requests: Sequence[SizingRequest]) -> Sequence[SizingOutcome]: ...


class TailBatchSizer(Protocol):
    """Sizes many candidates of classes with attainment or percentile targets
    (:func:`variant_autoscaler.core.tail.size_tail_allocations`), answered as :class:`BatchSizer`."""

    def __call__(self, requests: Sequence[TailSizingRequest]) -> Sequence[SizingOutcome]: ...


def tail_request(variant: VariantInput, request: SizingRequest) -> TailSizingRequest:
    """The tail model's form of a candidate's sizing: the variant's measured workload, or (unmeasured)
    exponential lengths with the load's means, read to the grid of
    :meth:`~variant_autoscaler.core.workload.Workload.rounded` so that the memo serves the next cycle."""
    workload = variant.workload
    lengths = workload.lengths if workload is not None else None
    if lengths is None:
        load = request.load
        lengths = RequestLengths.from_means(load.avg_input_tokens, max(load.avg_output_tokens, 1.0)).rounded()
    return TailSizingRequest(
        request.accelerator,
        request.unit_cost,
        request.acc_count,
        request.parms,
        request.max_batch_size,
        request.load,
        request.slo,
        request.min_replicas,
        lengths,
        workload.burstiness if workload is not None else None,
        None,
        workload.chunked_prefill if workload is not None else False,
        workload.prefill_budget if workload is not None else DEFAULT_PREFILL_BUDGET,
    )


def per_call(sizer: Sizer) -> BatchSizer:
    """A :class:`BatchSizer` that calls ``sizer`` once per request (a custom sizer, e.g. in tests)."""

    def size_each(requests: Sequence[SizingRequest]) -> Sequence[SizingOutcome]:
        outcomes: list[SizingOutcome] = []
        for r in requests:
            extra = {} if r.max_queue_size is None else {"max_queue_size": r.max_queue_size}
            try:
                outcomes.append(
                    sizer(
                        accelerator=r.accelerator,
                        unit_cost=r.unit_cost,
                        acc_count=r.acc_count,
                        parms=r.parms,
                        max_batch_size=r.max_batch_size,
                        load=r.load,
                        slo=r.slo,
                        min_replicas=r.min_replicas,
                        **extra,
                    )
                )
            except (InfeasibleError, ModelError) as exc:
                outcomes.append(exc)
        return outcomes

    return size_each


def _numbers_of(
    outcomes: Sequence[SizingOutcome],
) -> Callable[[int], tuple[int, float, float, float, float, float] | InfeasibleError | ModelError]:
    """:meth:`Sizings.numbers` for any sequence of outcomes."""

    def numbers(i: int) -> tuple[int, float, float, float, float, float] | InfeasibleError | ModelError:
        o = outcomes[i]
        if isinstance(o, Sizing):
            return (o.replicas, o.cost, o.itl, o.ttft, o.rho, o.max_rate_per_replica)
        return o

    return numbers


def batched(sizer: Sizer) -> BatchSizer:
    """The batch form of ``sizer``: :func:`size_allocations` for the analyzer's own
    :func:`size_allocation` (same results, vectorised), else ``sizer`` called once per request."""
    return size_allocations if sizer is size_allocation else per_call(sizer)


class _Slot(NamedTuple):
    """A candidate waiting for its sizing: ``request`` is its index in the batch."""

    name: str
    device: str
    batch: int
    units: int
    cost_per_replica: float
    request: int  # index in the batch of mean requests (>= 0) or, as -1 - index, of tail requests


def _priced(
    listed: AcceleratorType | None, name: str, profile: Profile, replica_cost: float | None
) -> AcceleratorType | None:
    """The accelerator as the variant pays for it: a stated cost of one replica (variantCost) replaces
    the unit cost x count, and then the accelerator need not be listed (its device is its name)."""
    if replica_cost is None:
        return listed
    return AcceleratorType(
        name,
        listed.device if listed is not None else name,
        replica_cost / profile.acc_count,
        listed.multiplicity if listed is not None else 1,
    )


def build_candidate_sets(
    jobs: Sequence[tuple[VariantInput, Load | None]],
    accelerators: Mapping[str, AcceleratorType],
    *,
    batch_count: int,
    sizer: BatchSizer = size_allocations,
    tail_sizer: TailBatchSizer = size_tail_allocations,
) -> list[CandidateSet]:
    """The candidates of every ``(variant, load)`` job (load None: the variant's own), sized in one call
    of ``sizer`` so that the analyzer can solve them all together (and those of classes with attainment
    or percentile targets in one call of ``tail_sizer``); the same sets, in the same order, as
    :func:`build_candidates` gives one by one.

    The caller handles variants without load; passing none here is a programming error.
    """
    plans: list[tuple[VariantInput, list[Rejection | _Slot]]] = []
    requests: list[SizingRequest] = []
    tails: list[TailSizingRequest] = []
    for variant, given in jobs:
        load = given if given is not None else variant.load
        if load is None:
            raise ValueError(f"variant {variant.key} has no load to size")
        entries: list[Rejection | _Slot] = []
        if variant.keep_accelerator and variant.current_accelerator:
            names = [variant.current_accelerator]
            if variant.profile(variant.current_accelerator) is None:
                entries.append(
                    Rejection(
                        variant.current_accelerator,
                        None,
                        "keepAccelerator is set but the model profile has no entry for the current "
                        "accelerator",
                    )
                )
                names = []
        else:
            names = sorted(p.accelerator for p in variant.profiles)
        profiles: dict[str, Profile] = {}
        for p in variant.profiles:
            profiles.setdefault(p.accelerator, p)  # the first one, as VariantInput.profile
        slo = variant.service.slo
        tail = slo.is_tail
        for name in names:
            profile = profiles[name]
            accelerator = _priced(accelerators.get(name), name, profile, variant.replica_cost)
            if accelerator is None:
                entries.append(Rejection(name, None, "not listed in accelerator-unit-costs"))
                continue
            units = profile.acc_count * accelerator.multiplicity
            top = variant.max_batch_size if variant.max_batch_size is not None else profile.max_batch_size
            for batch in batch_sizes(top, batch_count):
                request = SizingRequest(  # positional, in the order of the fields (faster than keywords)
                    name,
                    accelerator.cost,
                    profile.acc_count,
                    profile.parms,
                    batch,
                    load,
                    slo,
                    variant.min_replicas,
                )
                if tail:  # tail requests are numbered after the mean ones: -1 - index
                    index = -1 - len(tails)
                    tails.append(tail_request(variant, request))
                else:
                    index = len(requests)
                    requests.append(request)
                entries.append(
                    _Slot(name, accelerator.device, batch, units, accelerator.cost * profile.acc_count, index)
                )
        plans.append((variant, entries))
    outcomes = sizer(requests) if requests else []
    if len(outcomes) != len(requests):
        raise ValueError(f"the sizer answered {len(outcomes)} of {len(requests)} requests")
    tail_outcomes = tail_sizer(tails) if tails else []
    if len(tail_outcomes) != len(tails):
        raise ValueError(f"the tail sizer answered {len(tail_outcomes)} of {len(tails)} requests")
    # The analyzer's batch gives its numbers without building a Sizing for each candidate.
    mean_numbers = outcomes.numbers if isinstance(outcomes, Sizings) else _numbers_of(outcomes)
    tail_numbers = _numbers_of(tail_outcomes)

    def numbers(i: int) -> tuple[int, float, float, float, float, float] | InfeasibleError | ModelError:
        return mean_numbers(i) if i >= 0 else tail_numbers(-1 - i)

    sets: list[CandidateSet] = []
    for variant, entries in plans:
        candidates: list[Candidate] = []
        rejections: list[Rejection] = []
        sizings = 0
        for entry in entries:
            if isinstance(entry, Rejection):
                rejections.append(entry)
                continue
            sizings += 1
            outcome = numbers(entry.request)
            if isinstance(outcome, InfeasibleError | ModelError):
                rejections.append(Rejection(entry.name, entry.batch, str(outcome) or type(outcome).__name__))
                continue
            replicas, _, itl, ttft, rho, rate = outcome
            candidates.append(  # positional, in the order of the fields (faster than keywords)
                Candidate(
                    entry.name,
                    entry.device,
                    entry.batch,
                    replicas,
                    entry.units,
                    entry.cost_per_replica,
                    rate,
                    itl,
                    ttft,
                    rho,
                )
            )
        sets.append(CandidateSet(variant.key, tuple(candidates), tuple(rejections), sizings))
    return sets


def build_candidates(
    variant: VariantInput,
    accelerators: Mapping[str, AcceleratorType],
    *,
    batch_count: int,
    sizer: Sizer,
    load: Load | None = None,
) -> CandidateSet:
    """All feasible candidates of ``variant`` for ``load`` (default: the variant's own load), each sized
    by one call of ``sizer`` (:func:`build_candidate_sets` sizes many variants in one batch).

    The caller handles variants without load; passing none here is a programming error.
    """
    (cset,) = build_candidate_sets(
        [(variant, load)], accelerators, batch_count=batch_count, sizer=per_call(sizer)
    )
    return cset
