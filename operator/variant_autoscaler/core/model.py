"""Domain types of the optimizer: accelerators, service classes, variant inputs, decisions and the plan.

The operator's engine builds one :class:`VariantInput` per VariantAutoscaling each cycle and calls
:func:`variant_autoscaler.core.optimizer.optimize` once with all of them; the ``plan`` command builds the
same inputs from a file. Everything here is a frozen value; nothing performs I/O.

Units follow WVA: arrival rates in requests per **minute**, latencies in ms, costs in the unit of the
``accelerator-unit-costs`` ConfigMap (cents per hour per accelerator unit).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from variant_autoscaler.core.analyzer import SLO, Load
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.core.workload import Workload
from variant_autoscaler.errors import ConfigError

__all__ = [
    "DEFAULT_PRIORITY",
    "HIGHEST_PRIORITY",
    "LOWEST_PRIORITY",
    "SLO",
    "AcceleratorType",
    "BindingConstraint",
    "Decision",
    "Load",
    "ModelTarget",
    "OptimizerConfig",
    "Outcome",
    "Plan",
    "Profile",
    "SaturationPolicy",
    "ServiceClass",
    "ServiceParms",
    "ServiceTarget",
    "VariantInput",
    "find_service_class",
    "normalize_priority",
    "priority_weight",
]

#: WVA's priority range: 1 is the highest priority, 100 the lowest; anything else counts as 100.
HIGHEST_PRIORITY = 1
LOWEST_PRIORITY = 100
DEFAULT_PRIORITY = 100


def normalize_priority(priority: int) -> int:
    """WVA's rule: a priority outside ``[1, 100]`` becomes 100 (the lowest)."""
    if HIGHEST_PRIORITY <= priority <= LOWEST_PRIORITY:
        return priority
    return DEFAULT_PRIORITY


def priority_weight(priority: int) -> float:
    """Weight of one request/s of load of this priority in limited mode's objective: ``1 / priority``.

    A Premium (1) request counts as much as ten Freemium (10) ones; see docs/optimizer.md.
    """
    return 1.0 / normalize_priority(priority)


class SaturationPolicy(enum.StrEnum):
    """How capacity left over after full allocations is shared (WVA's ``SaturatedAllocationPolicy``)."""

    NONE = "None"
    PRIORITY_EXHAUSTIVE = "PriorityExhaustive"
    PRIORITY_ROUND_ROBIN = "PriorityRoundRobin"
    ROUND_ROBIN = "RoundRobin"

    @classmethod
    def parse(cls, value: str) -> SaturationPolicy:
        """The policy named ``value`` (exact spelling, as WVA's enum); ``ConfigError`` otherwise."""
        for policy in cls:
            if policy.value == value:
                return policy
        allowed = ", ".join(p.value for p in cls)
        raise ConfigError(f"unknown saturation policy {value!r}; expected one of {allowed}")

    @property
    def allows_partial(self) -> bool:
        """Whether a variant that cannot be fully served may get fewer replicas than it needs."""
        return self is not SaturationPolicy.NONE

    @property
    def spreads(self) -> bool:
        """Whether leftover capacity is spread evenly (round robin) rather than given exhaustively."""
        return self in (SaturationPolicy.PRIORITY_ROUND_ROBIN, SaturationPolicy.ROUND_ROBIN)


@dataclass(frozen=True, slots=True)
class AcceleratorType:
    """One entry of the ``accelerator-unit-costs`` ConfigMap.

    ``name`` is the key (e.g. ``A100``), ``device`` the device type that node inventories count (e.g.
    ``NVIDIA-A100-PCIE-80GB``), ``cost`` the price of one unit. ``multiplicity`` is the number of
    devices one unit occupies (WVA hard-codes 1).
    """

    name: str
    device: str
    cost: float
    multiplicity: int = 1

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("an accelerator needs a name")
        if not math.isfinite(self.cost) or self.cost < 0:
            raise ConfigError(
                f"accelerator {self.name!r}: cost must be a finite number >= 0, got {self.cost!r}"
            )
        if self.multiplicity < 1:
            raise ConfigError(
                f"accelerator {self.name!r}: multiplicity must be >= 1, got {self.multiplicity}"
            )


@dataclass(frozen=True, slots=True)
class ModelTarget:
    """SLOs of one model within a service class (``slo-tpot`` is the ITL target), in ms.

    ``ttft_percentile`` (ours, ``slo-ttft-percentile``): 0 means ``ttft`` bounds the mean TTFT, as in
    WVA; in (0, 100) it bounds that percentile of TTFT. ``itl_percentile`` (``slo-tpot-percentile``) and
    ``attainment`` (``slo-attainment``, the share of requests within both) likewise (see :class:`SLO`).
    """

    model: str
    itl: float
    ttft: float
    tps: float = 0.0
    ttft_percentile: float = 0.0
    itl_percentile: float = 0.0
    attainment: float = 0.0

    @property
    def slo(self) -> SLO:
        return SLO(
            ttft=self.ttft,
            itl=self.itl,
            tps=self.tps,
            ttft_percentile=self.ttft_percentile,
            itl_percentile=self.itl_percentile,
            attainment=self.attainment,
        )


@dataclass(frozen=True, slots=True)
class ServiceClass:
    """One document of the ``service-classes-config`` ConfigMap."""

    name: str
    priority: int
    targets: tuple[ModelTarget, ...] = ()
    # model -> its first entry; every variant looks its model up, every cycle.
    _first: Mapping[str, ModelTarget] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        first: dict[str, ModelTarget] = {}
        for target in self.targets:
            first.setdefault(target.model, target)
        object.__setattr__(self, "_first", first)

    def target(self, model: str) -> ModelTarget | None:
        """The first entry for ``model`` (WVA reads the list in order)."""
        return self._first.get(model)


def find_service_class(
    classes: Iterable[ServiceClass], model: str
) -> tuple[ServiceClass, ModelTarget] | None:
    """The class serving ``model``, found by model ID as WVA does.

    WVA takes the first class in Go map order (random) that lists the model; to be deterministic we
    take the highest priority first, then the order given.
    """
    found: list[tuple[int, int, ServiceClass, ModelTarget]] = []
    for index, cls in enumerate(classes):
        target = cls.target(model)
        if target is not None:
            found.append((normalize_priority(cls.priority), index, cls, target))
    if not found:
        return None
    _, _, cls, target = min(found, key=lambda item: (item[0], item[1]))
    return cls, target


@dataclass(frozen=True, slots=True)
class ServiceTarget:
    """The resolved service class of one variant: its name, priority and SLOs for the variant's model."""

    name: str
    priority: int
    slo: SLO

    @classmethod
    def of(cls, service_class: ServiceClass, target: ModelTarget) -> ServiceTarget:
        return cls(
            name=service_class.name, priority=normalize_priority(service_class.priority), slo=target.slo
        )


@dataclass(frozen=True, slots=True)
class Profile:
    """Performance of the variant's model on one accelerator (one ``modelProfile.accelerators[]``)."""

    accelerator: str
    acc_count: int
    max_batch_size: int
    parms: ServiceParms

    def __post_init__(self) -> None:
        if self.acc_count < 1:
            raise ConfigError(f"profile {self.accelerator!r}: accCount must be >= 1, got {self.acc_count}")
        if self.max_batch_size < 1:
            raise ConfigError(
                f"profile {self.accelerator!r}: maxBatchSize must be >= 1, got {self.max_batch_size}"
            )


@dataclass(frozen=True, slots=True)
class VariantInput:
    """Everything the optimizer needs to know about one VariantAutoscaling this cycle.

    * ``current_accelerator`` / ``current_replicas``: what runs now (WVA's ``acceleratorName`` label and
      the Deployment's replicas); used for the transition penalty, ``keep_accelerator`` and as the
      fallback when ``load`` is ``None`` (metrics missing: the variant is not re-planned).
    * ``min_replicas`` (0 or more), ``max_replicas`` (optional upper bound, ours).
    * ``max_batch_size``: overrides every profile's ``maxBatchSize`` (WVA's server-level override).
    * ``share_load``: the variant opts in to share its model's load with the other opted-in variants of
      the same ``model_id`` (ours).
    * ``workload``: its model's request-length distribution and arrival burstiness, measured online
      (ours); read only when its class states attainment or percentile targets (the tail model), None:
      exponential lengths with the load's means and Poisson arrivals.
    * ``kept_replicas``: of ``current_replicas`` on ``current_accelerator``, those the scale-down
      stabilisation keeps running this interval whatever the plan says (ours; 0: none). A pool's cost
      solve charges only for replicas beyond them, so that it does not start replicas on another
      accelerator for a saving smaller than what it pays for both while the window runs.
    """

    name: str
    namespace: str
    model_id: str
    service: ServiceTarget
    profiles: tuple[Profile, ...]
    load: Load | None
    current_accelerator: str | None = None
    current_replicas: int = 0
    min_replicas: int = 1
    max_replicas: int | None = None
    keep_accelerator: bool = False
    max_batch_size: int | None = None
    share_load: bool = False
    # The cost of one replica when the variant states it (WVA's variantCost), instead of the accelerator's
    # unit cost x its count; with it an accelerator missing from accelerator-unit-costs can still be sized.
    replica_cost: float | None = None
    workload: Workload | None = None
    kept_replicas: int = 0

    def __post_init__(self) -> None:
        where = f"variant {self.namespace}/{self.name}"
        if not self.name or not self.namespace:
            raise ConfigError(f"{where}: name and namespace must not be empty")
        if not self.model_id:
            raise ConfigError(f"{where}: modelID must not be empty")
        if self.current_replicas < 0:
            raise ConfigError(f"{where}: currentReplicas must be >= 0, got {self.current_replicas}")
        if not 0 <= self.kept_replicas <= self.current_replicas:
            raise ConfigError(f"{where}: kept replicas must be within 0..{self.current_replicas}")
        if self.min_replicas < 0:
            raise ConfigError(f"{where}: minReplicas must be >= 0, got {self.min_replicas}")
        if self.max_replicas is not None and self.max_replicas < max(self.min_replicas, 1):
            raise ConfigError(
                f"{where}: maxReplicas ({self.max_replicas}) must be >= 1 "
                f"and >= minReplicas ({self.min_replicas})"
            )
        if self.max_batch_size is not None and self.max_batch_size < 1:
            raise ConfigError(f"{where}: maxBatchSize must be >= 1, got {self.max_batch_size}")
        if self.replica_cost is not None and not (
            math.isfinite(self.replica_cost) and self.replica_cost >= 0
        ):
            raise ConfigError(f"{where}: variantCost must be a finite number >= 0, got {self.replica_cost!r}")
        seen: set[str] = set()
        for profile in self.profiles:
            if profile.accelerator in seen:
                raise ConfigError(f"{where}: accelerator {profile.accelerator!r} is profiled twice")
            seen.add(profile.accelerator)
        if self.load is not None:
            for label, value in (
                ("load.arrivalRate", self.load.arrival_rate),
                ("load.avgInputTokens", self.load.avg_input_tokens),
                ("load.avgOutputTokens", self.load.avg_output_tokens),
            ):
                if not math.isfinite(value) or value < 0:
                    raise ConfigError(f"{where}: {label} must be a finite number >= 0, got {value!r}")

    @property
    def key(self) -> str:
        """``namespace/name``: how plans and reports name the variant."""
        return f"{self.namespace}/{self.name}"

    @property
    def priority(self) -> int:
        return self.service.priority

    def profile(self, accelerator: str) -> Profile | None:
        for profile in self.profiles:
            if profile.accelerator == accelerator:
                return profile
        return None


@dataclass(frozen=True, slots=True)
class OptimizerConfig:
    """How to optimize (WVA's ``OptimizerSpec`` names, plus ours).

    * ``unlimited`` (WVA's only mode, the default): each variant on its own, GPU inventory ignored.
    * ``saturation_policy`` / ``delayed_best_effort``: limited mode only, see docs/optimizer.md.
    * ``batch_sizes``: how many batch sizes per profile to try (the profile's ``maxBatchSize``, then
      halving); 1 fixes the batch at the profile's value, as WVA does.
    * ``mip_rel_gap``: relative MIP gap at which HiGHS stops; ``time_limit_s``: wall-clock limit for
      all MILP solves of one plan when ``optimize`` is given a clock, for each solve otherwise (the
      best solution found so far is used, with its gap reported).
    """

    unlimited: bool = True
    saturation_policy: SaturationPolicy = SaturationPolicy.NONE
    delayed_best_effort: bool = False
    batch_sizes: int = 4
    mip_rel_gap: float = 1e-4
    time_limit_s: float = 10.0

    def __post_init__(self) -> None:
        if self.batch_sizes < 1:
            raise ConfigError(f"batchSizes must be >= 1, got {self.batch_sizes}")
        if not 0.0 <= self.mip_rel_gap < 1.0:
            raise ConfigError(f"mipRelGap must be in [0, 1), got {self.mip_rel_gap}")
        if not self.time_limit_s > 0:
            raise ConfigError(f"timeLimit must be > 0 seconds, got {self.time_limit_s}")


class Outcome(enum.StrEnum):
    """What a decision means for the variant's load."""

    FULL = "full"  # all of its load is served within the SLOs (also: no load and nothing needed)
    PARTIAL = "partial"  # fewer replicas than the load needs (capacity or maxReplicas); the rest is unserved
    UNSERVED = "unserved"  # no replicas: capacity went to other variants
    INFEASIBLE = "infeasible"  # no accelerator meets the SLOs; the current allocation is kept
    HELD = "held"  # no load metrics: the current allocation is kept, not re-planned


@dataclass(frozen=True, slots=True)
class Decision:
    """The plan for one variant. ``accelerator`` is ``None`` when it gets no replicas.

    ``itl``/``ttft`` are the predicted mean latencies (ms) at the load each replica takes (0 when there
    is no prediction: no replicas, or a held allocation). ``served_rate`` is the load (req/min) the plan
    serves within the SLOs; ``demand`` the load it was asked to serve; ``rate_per_replica`` (req/s) what
    one replica of the chosen candidate sustains within the SLOs (0 when unknown; the burst guard reads it).
    """

    key: str
    accelerator: str | None
    replicas: int
    max_batch: int
    cost: float
    itl: float
    ttft: float
    outcome: Outcome
    reason: str
    served_rate: float = 0.0
    demand: float = 0.0
    rate_per_replica: float = 0.0

    @property
    def served_fraction(self) -> float:
        if self.demand <= 0.0:
            return 1.0 if self.outcome is Outcome.FULL else 0.0
        return min(self.served_rate / self.demand, 1.0)


@dataclass(frozen=True, slots=True)
class BindingConstraint:
    """A device type whose capacity limited the plan, and the variants it limited."""

    device: str
    capacity: int
    used: int
    variants: tuple[str, ...]

    def describe(self) -> str:
        limited = ", ".join(self.variants)
        return f"{self.device}: {self.used} of {self.capacity} in use; limits {limited}"


@dataclass(frozen=True, slots=True)
class Plan:
    """The optimizer's answer for one cycle.

    ``status``: ``optimal`` (proven within ``mip_gap``), ``feasible`` (a time limit stopped the solver;
    ``mip_gap`` says how far from proven it is), ``direct`` (no MILP was needed: unlimited mode, or
    limited mode where every variant's cheapest allocation fits).
    ``solve_seconds`` / ``analyzer_seconds`` are measured with the clock passed to ``optimize`` (None
    when none was passed).
    """

    decisions: Mapping[str, Decision]
    mode: str
    status: str
    total_cost: float
    binding: tuple[BindingConstraint, ...] = ()
    usage: Mapping[str, int] = field(default_factory=dict)
    capacity: Mapping[str, int] = field(default_factory=dict)
    mip_gap: float | None = None
    solve_seconds: float | None = None
    analyzer_seconds: float | None = None
    sizings: int = 0
    solves: int = 0
