"""The one planner: the operator, the simulator and ``variant-autoscaler plan`` all decide through it.

A caller describes each variant as a :class:`PlannedVariant` (its model, performance profiles, service
class reference, what runs now, its load and bounds), the parsed accelerator costs and service classes,
how to optimize and, in limited mode, the GPU inventory: a :class:`PlanRequest`. :class:`OptimizerPlanner`
resolves every variant's service class, turns it into the optimizer's
:class:`~variant_autoscaler.core.model.VariantInput` and makes one
:func:`~variant_autoscaler.core.optimizer.optimize` call for all of them. Where the request comes from
is the caller's business: the engine builds it from the cluster each cycle, the simulator from a
scenario, the ``plan`` command from a file; what is decided from it is the same code for all three.

A variant without a performance profile is not sized by the queueing model: the saturation analyzers
size it, over every variant of its model; with ``saturation_floor`` they are also the safety floor under
the model's decisions, and an idle variant may go to zero (:mod:`variant_autoscaler.core.sizing`).

Pure apart from one clock read (the solver's time limit): no I/O.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from variant_autoscaler.api.config import MainConfig
from variant_autoscaler.api.configmaps import ServiceClasses
from variant_autoscaler.api.v1alpha1 import DEFAULT_VARIANT_COST, ModelProfile, VariantAutoscaling
from variant_autoscaler.core.analyzer import Load
from variant_autoscaler.core.decision import VariantPlan
from variant_autoscaler.core.inferred_slo import infer_slo
from variant_autoscaler.core.kvcache import KVCache, batch_ceiling
from variant_autoscaler.core.model import (
    DEFAULT_PRIORITY,
    AcceleratorType,
    ModelTarget,
    OptimizerConfig,
    Outcome,
    Plan,
    Profile,
    SaturationPolicy,
    ServiceClass,
    ServiceTarget,
    VariantInput,
    find_service_class,
)
from variant_autoscaler.core.optimizer import optimize
from variant_autoscaler.core.policy import priority_yields
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.core.saturation import MODEL, Decision
from variant_autoscaler.core.sizing import (
    AnalyzerLike,
    IdleInput,
    SaturationInput,
    ScaleUp,
    SizingMember,
    limit_scale_ups,
    size_group,
)
from variant_autoscaler.core.workload import DEFAULT_PREFILL_BUDGET, Workload
from variant_autoscaler.errors import ConfigError, ModelError
from variant_autoscaler.namespace_caps import NamespaceCap, template_gpus, within_namespace_caps

__all__ = [
    "IdleInput",
    "NamespaceCap",
    "ObservedLoad",
    "OptimizerPlanner",
    "PlanOutcome",
    "PlanRequest",
    "PlannedVariant",
    "Planner",
    "SaturationInput",
    "SloClassRef",
    "VariantKey",
    "VariantPlan",
    "optimizer_config",
    "planned_from_va",
    "profiles_of",
    "resolve_service_class",
]

logger = logging.getLogger(__name__)

VariantKey = tuple[str, str]  # (namespace, name)


# --- the seam --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ObservedLoad:
    """A variant's load for planning: requests per minute (WVA's unit) and mean tokens per request."""

    arrival_rate_rpm: float
    avg_input_tokens: float
    avg_output_tokens: float


@dataclass(frozen=True, slots=True)
class SloClassRef:
    """Which service class a variant asks for: a class name, or (``name`` = the service-classes
    ConfigMap) one of its keys (``key``, e.g. ``premium.yaml``), as a VA's ``sloClassRef``."""

    name: str
    key: str | None = None


@dataclass(frozen=True, slots=True)
class PlannedVariant:
    """Everything the planner needs about one variant.

    * ``profiles``: its model's performance per accelerator (from the VA's ``modelProfile``, or learned).
    * ``load``: ``None`` when there are no fresh metrics: the variant is *held*, not re-planned (its
      allocation is kept and, in limited mode, its GPUs count).
    * ``max_batch``: the batch size the server runs when the operator may not change it; ``None`` lets
      the optimizer try the profile's ``maxBatchSize`` (and smaller ones with ``batch_sizes > 1``).
    * ``share_group``: variants of one model that share its load (``shareModelLoad``) have the same
      group; see :attr:`PlanRequest.group_load_is_total`.
    * ``profiles`` empty: sized by the saturation analyzers (``analyzers``, over the variants of its
      model in its namespace), not by the queueing model.
    * ``variant_cost``: the cost of one replica when the variant states it (``variantCost``, an
      annotation); otherwise the accelerator's unit cost × its count (WVA's default 10.0 when unknown).
    * ``saturation``: what the analyzers see of it (None: nothing read); ``idle``: scale to zero.
    * ``default_slo``: its SLOs when no service class has an entry for its model (WVA's
      queueing-model ConfigMap).
    * ``slo_multiplier``: WVA's ``sloMultiplier`` and where it was read, when that ConfigMap covers its
      model without explicit targets: with no service class either, its SLOs are inferred from its
      profile so that a replica runs at ``1 − 1/k`` of what it sustains
      (:func:`~variant_autoscaler.core.inferred_slo.infer_slo`).
    * ``workload``: its model's request-length distribution and arrival burstiness as measured (the
      whole model's stream; None: not measured). Only classes with attainment or percentile targets read
      it; the planner reads it to about 2 % (:meth:`~variant_autoscaler.core.workload.Workload.rounded`).
    * ``ahead_rpm``: the forecast of its model's demand over "start-up + one interval" (req/min, the
      same total as ``load``; None: no forecast). A class with attainment or percentile targets is
      planned for it where it is above the load; a class that states means keeps WVA's numbers.
    * ``kv_cache``: the KV cache of one replica on its current accelerator, as its pods export it
      (``vllm:cache_config_info``; None: unknown); ``kv_pressure``: its pods preempt, or did within the
      ``KVCachePressure`` condition's hold. Under pressure the batch on that accelerator is at most what
      the cache holds for the load's lengths (:func:`~variant_autoscaler.core.kvcache.batch_ceiling`).
      Without it the batch the server runs evidently fits: the ceiling, an average with a margin, would
      only shrink replicas that do not preempt (measured on the policy benchmark's Azure replay: +17 %
      cost at the same attainment).
    * ``kept_replicas``: the current replicas that the scale-down stabilisation keeps running whatever
      the plan says (0: none, or no stabilisation); a pool's plan pays only for replicas beyond them
      (:attr:`~variant_autoscaler.core.model.VariantInput.kept_replicas`).
    * ``gpus``: its accelerator and the GPUs one replica requests (its pod template), for a variant sized
      by saturation; None: unknown. In limited mode (WVA's ``enableLimiter``) the GPUs its replicas hold
      are kept out of the model's plan, and its scale-ups get only the GPUs that plan leaves free
      (:func:`~variant_autoscaler.core.sizing.limit_scale_ups`), the more saturated first, each
      weighted by ``saturation_priority`` (WVA's per-model ``priority`` in the saturation ConfigMap).
    """

    key: VariantKey
    model_id: str
    profiles: tuple[Profile, ...]
    accelerator: str | None
    current_replicas: int
    load: ObservedLoad | None
    min_replicas: int
    max_replicas: int | None
    slo_class_ref: SloClassRef | None = None
    keep_accelerator: bool = True
    max_batch: int | None = None
    share_group: str | None = None
    variant_cost: float | None = None
    saturation: SaturationInput | None = None
    analyzers: tuple[AnalyzerLike, ...] = ()
    idle: IdleInput | None = None
    default_slo: ModelTarget | None = None
    slo_multiplier: tuple[float, str] | None = None
    workload: Workload | None = None
    ahead_rpm: float | None = None
    kv_cache: KVCache | None = None
    kv_pressure: bool = False
    kept_replicas: int = 0
    gpus: tuple[str, int] | None = None
    saturation_priority: float = 1.0

    @property
    def held(self) -> bool:
        return self.load is None

    @property
    def sized_by_model(self) -> bool:
        """Whether the queueing model sizes it (it has a profile); otherwise saturation does."""
        return bool(self.profiles)

    def replica_cost(self, accelerators: Mapping[str, AcceleratorType]) -> float:
        """The cost of one replica: stated, else the current accelerator's unit cost × its count, else
        WVA's default 10.0."""
        if self.variant_cost is not None:
            return self.variant_cost
        acc = accelerators.get(self.accelerator or "")
        if acc is not None:
            count = next((p.acc_count for p in self.profiles if p.accelerator == self.accelerator), 1)
            return acc.cost * count
        return DEFAULT_VARIANT_COST


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """One planning call.

    ``group_load_is_total``: the operator's collector measures a model's load once per namespace, so
    every member of a share group reports the group's whole load, and each is given an equal part of it
    (the optimizer pools a group by adding its members' loads). A ``plan`` file states each member's own
    load instead (False).
    """

    variants: tuple[PlannedVariant, ...]
    accelerators: Mapping[str, AcceleratorType]
    classes: ServiceClasses
    optimizer: OptimizerConfig
    # GPUs per device type, for limited mode; None in unlimited mode.
    capacity: Mapping[str, int] | None
    classes_config_map: str = "service-classes-config"
    group_load_is_total: bool = True
    # Saturation as the safety floor under the model's decisions (SATURATION_FLOOR); unlimited mode only
    # (with a capacity, the plan's GPU bounds come first).
    saturation_floor: bool = False
    # How the servers prefill, for the tail model (attainment classes): chunked, inside one step beside
    # the running decodes (vLLM V1, the default), or at the pace of the whole batch (WVA's accounting).
    chunked_prefill: bool = True
    # The tokens one engine step holds when chunked (vLLM's --max-num-batched-tokens).
    prefill_budget: int = DEFAULT_PREFILL_BUDGET
    # Limited mode: GPU caps per namespace (WVA's namespace-scoped quotas), by namespace. A namespace
    # never grows past its cap; what it holds already stays (as a Kubernetes ResourceQuota).
    namespace_caps: Mapping[str, NamespaceCap] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    status: str
    solve_seconds: float
    decisions: Mapping[VariantKey, VariantPlan]
    # Variants without a decision, and why (infeasible SLO, unknown accelerator, ...).
    failures: Mapping[VariantKey, str] = field(default_factory=dict)
    # Unit cost per accelerator name (for currentAlloc.variantCost).
    unit_costs: Mapping[str, float] = field(default_factory=dict)
    # The optimizer's own plan (binding constraints, solver figures); None when it did not run.
    plan: Plan | None = None
    # Variants planned for attainment or percentile targets: the forecast, the burst guard and starting
    # replicas counted as supply apply to them (docs/tail-slo.md).
    ahead: frozenset[VariantKey] = frozenset()
    # Limited mode: per variant, the replicas that still fit on its device beside the plan (the burst
    # guard adds no more); absent in unlimited mode.
    room: Mapping[VariantKey, int] = field(default_factory=dict)
    # Limited mode: per variant the plan scales down, the replicas it gives up at once to higher-priority
    # variants the plan puts on the same device (core/policy.py rule 3e); absent where none.
    yields: Mapping[VariantKey, int] = field(default_factory=dict)
    # Per variant the model sized, where its SLOs came from (the bracket its reason ends with).
    slo_sources: Mapping[VariantKey, str] = field(default_factory=dict)


class Planner(Protocol):
    """Turns a cycle's variants into decisions (pure, may be slow)."""

    def plan(self, request: PlanRequest) -> PlanOutcome: ...


# --- building the inputs ---------------------------------------------------------------------------------


def profiles_of(model_profile: ModelProfile) -> tuple[Profile, ...]:
    """The optimizer's profiles from a CR's ``modelProfile`` (raises ConfigError on a bad entry)."""
    try:
        return tuple(
            Profile(
                accelerator=p.acc,
                acc_count=p.acc_count,
                max_batch_size=p.max_batch_size,
                parms=ServiceParms(
                    p.perf_parms.alpha, p.perf_parms.beta, p.perf_parms.gamma, p.perf_parms.delta
                ),
            )
            for p in model_profile.accelerators
        )
    except ValueError as exc:  # a parameter that is not a positive finite number
        raise ConfigError(str(exc)) from None


def planned_from_va(
    va: VariantAutoscaling,
    *,
    namespace: str,
    accelerator: str | None,
    current_replicas: int,
    current_max_batch: int | None,
    load: ObservedLoad | None,
    config: MainConfig,
    profiles: tuple[Profile, ...] | None = None,
    workload: Workload | None = None,
    ahead_rpm: float | None = None,
    kept_replicas: int = 0,
) -> PlannedVariant:
    """A VariantAutoscaling as the planner sees it (the operator and the simulator build them so).

    The batch size is the one the server runs (``--max-num-seqs``, else the profile's ``maxBatchSize``)
    unless the VA lets the operator apply another (``spec.actuation.applyMaxBatch``). ``profiles``
    replaces the spec's ``modelProfile`` when given (profiles learned online, say); without either, the
    variant is sized by saturation. Left-out bounds mean what they meant in the VA's generation
    (:meth:`~variant_autoscaler.api.v1alpha1.VariantAutoscalingSpec.effective_min_replicas`).
    """
    spec = va.spec
    applies_batch = bool(spec.actuation and spec.actuation.apply_max_batch)
    ref = spec.slo_class if spec.has_slo_class_ref else None
    return PlannedVariant(
        key=(namespace, va.metadata.name),
        model_id=spec.model_id,
        profiles=profiles if profiles is not None else profiles_of(spec.model_profile),
        accelerator=accelerator,
        current_replicas=current_replicas,
        load=load,
        min_replicas=spec.effective_min_replicas(config.scale_to_zero),
        max_replicas=spec.effective_max_replicas(),
        slo_class_ref=SloClassRef(ref.name, ref.key) if ref is not None else None,
        keep_accelerator=config.keep_accelerator,
        max_batch=None if applies_batch else current_max_batch,
        share_group=f"{namespace}/{spec.model_id}" if spec.share_model_load else None,
        variant_cost=float(spec.variant_cost) if spec.variant_cost is not None else None,
        workload=workload,
        ahead_rpm=ahead_rpm,
        kept_replicas=kept_replicas,
    )


def optimizer_config(config: MainConfig) -> OptimizerConfig:
    """How the operator optimizes, from its main ConfigMap (the solver gets half an interval, 1–10 s)."""
    return OptimizerConfig(
        unlimited=config.optimizer_mode == "unlimited",
        saturation_policy=SaturationPolicy.parse(config.saturation_policy),
        batch_sizes=config.batch_sizes,
        time_limit_s=max(1.0, min(10.0, config.interval_seconds / 2)),
    )


def resolve_service_class(
    model_id: str, ref: SloClassRef | None, classes: ServiceClasses, classes_config_map: str
) -> tuple[ServiceTarget, str] | None:
    """The variant's service class and SLOs, and how it was found.

    ``sloClassRef`` is honoured when it names a class that has an entry for the model: either a key of
    the service-classes ConfigMap (``name`` = that ConfigMap, ``key`` = e.g. ``premium.yaml``) or a class
    name (``name: premium`` for the class ``Premium``; an exact match first). Otherwise the class is
    found by ``modelID``, as WVA does (highest priority first, then key order: deterministic).
    """
    if ref is not None:
        named: Iterable[ServiceClass] = ()
        if ref.name == classes_config_map and ref.key is not None and ref.key in classes.by_key:
            named = (classes.by_key[ref.key],)
        else:
            wanted = ref.name.lower()
            named = sorted(
                (c for c in classes.classes if c.name.lower() == wanted), key=lambda c: c.name != ref.name
            )
        for cls in named:
            target = cls.target(model_id)
            if target is not None:
                return ServiceTarget.of(cls, target), f"class {cls.name} (sloClassRef)"
    found = find_service_class(classes.classes, model_id)
    if found is None:
        return None
    return ServiceTarget.of(*found), f"class {found[0].name} (by modelID)"


# --- the planner -----------------------------------------------------------------------------------------


class OptimizerPlanner:
    """The global optimizer behind the planning seam: one ``VariantInput`` per variant, one
    :func:`~variant_autoscaler.core.optimizer.optimize` call for all of them, its decisions handed back
    per variant with the reason an admin reads (and the service class they were planned for).
    """

    def plan(self, request: PlanRequest) -> PlanOutcome:
        """The plan; with namespace caps, re-planned so that the GPUs a capped namespace may not take go
        to others (:func:`~variant_autoscaler.namespace_caps.within_namespace_caps`)."""
        return within_namespace_caps(self._plan, request)

    def _plan(self, request: PlanRequest) -> PlanOutcome:
        started = time.perf_counter()
        members: dict[str, int] = {}
        if request.group_load_is_total:
            for v in request.variants:
                if v.share_group is not None and not v.held:
                    members[v.share_group] = members.get(v.share_group, 0) + 1
        inputs: list[VariantInput] = []
        keys: dict[str, VariantKey] = {}
        how: dict[VariantKey, str] = {}
        failures: dict[VariantKey, str] = {}
        no_slo: set[VariantKey] = set()
        ahead: set[VariantKey] = set()
        kv_notes: dict[VariantKey, tuple[str, str]] = {}
        for v in request.variants:
            if not v.sized_by_model:
                continue  # sized by saturation, below
            resolved = resolve_service_class(
                v.model_id, v.slo_class_ref, request.classes, request.classes_config_map
            )
            if resolved is None and v.default_slo is not None:
                resolved = (
                    ServiceTarget("queueing-model", DEFAULT_PRIORITY, v.default_slo.slo),
                    "SLOs of wva-queueing-model-config",
                )
            if resolved is None and v.slo_multiplier is not None:
                resolved, why_not = _inferred_service(v)
                if resolved is None:
                    failures[v.key] = why_not
                    no_slo.add(v.key)
                    continue
            if resolved is None:
                # No SLOs to size it by: saturation does (as WVA v0.4 did for every variant).
                failures[v.key] = f"no service class has an entry for model {v.model_id!r}"
                no_slo.add(v.key)
                continue
            service, how[v.key] = resolved
            share = members.get(v.share_group, 1) if v.share_group is not None else 1
            rpm = v.load.arrival_rate_rpm if v.load is not None else 0.0
            tokens = (v.load.avg_input_tokens, v.load.avg_output_tokens) if v.load is not None else (0.0, 0.0)
            if service.slo.is_tail:
                ahead.add(v.key)
                if v.ahead_rpm is not None and v.load is not None and v.ahead_rpm > rpm:
                    how[v.key] += f"; planned for the forecast {v.ahead_rpm:.4g} req/min"
                    rpm = v.ahead_rpm
                    tokens = _forecast_tokens(v, tokens)
                how[v.key] += _burstiness_note(v.workload)
            profiles, max_batch, capped = _kv_capped(v)
            try:
                variant = VariantInput(
                    name=v.key[1],
                    namespace=v.key[0],
                    model_id=v.model_id,
                    service=service,
                    profiles=profiles,
                    load=None if v.load is None else Load(rpm / share, *tokens),
                    current_accelerator=v.accelerator,
                    current_replicas=v.current_replicas,
                    min_replicas=v.min_replicas,
                    max_replicas=v.max_replicas,
                    keep_accelerator=v.keep_accelerator,
                    max_batch_size=max_batch,
                    share_load=v.share_group is not None,
                    replica_cost=v.variant_cost,
                    kept_replicas=min(v.kept_replicas, v.current_replicas),
                    workload=replace(
                        v.workload or Workload(),
                        chunked_prefill=request.chunked_prefill,
                        prefill_budget=request.prefill_budget,
                    ).rounded(),
                )
            except ConfigError as exc:
                failures[v.key] = str(exc)
                continue
            inputs.append(variant)
            keys[variant.key] = v.key
            if capped is not None:
                kv_notes[v.key] = capped
        # In limited mode the GPUs that saturation-sized variants hold now are not the model's plan's to
        # give (its own variants and theirs share the inventory; WVA's limiter counted them as used).
        reserved = _saturation_gpus(request, no_slo)
        milp = request
        if request.capacity is not None and reserved:
            milp = replace(
                request,
                capacity={d: max(0, n - reserved.get(d, 0)) for d, n in request.capacity.items()},
            )
        plan = optimize(
            inputs, request.accelerators, request.optimizer, milp.capacity, clock=time.perf_counter
        )
        decisions: dict[VariantKey, VariantPlan] = {}
        for variant in inputs:
            key = keys[variant.key]
            d = plan.decisions[variant.key]
            if d.outcome in (Outcome.INFEASIBLE, Outcome.HELD):
                failures[key] = d.reason
                continue
            note = kv_notes.get(key)
            if note is not None and d.accelerator == note[0]:
                how[key] += f"; {note[1]}"
            reason = f"{d.reason} [{how[key]}]"
            if d.outcome is not Outcome.FULL:
                reason = f"{d.outcome.value}: {reason}"
            decisions[key] = VariantPlan(
                accelerator=d.accelerator or variant.current_accelerator or "",
                replicas=d.replicas,
                max_batch=d.max_batch or None,
                cost=d.cost,
                ttft_ms=d.ttft if d.replicas > 0 else None,
                itl_ms=d.itl if d.replicas > 0 else None,
                reason=reason,
            )
        status = plan.status
        if any(d.outcome is Outcome.INFEASIBLE for d in plan.decisions.values()):
            status = f"{status}, some infeasible"
        by_saturation = _with_saturation(request, decisions, failures, no_slo)
        _limit_saturation(milp, decisions, no_slo, plan.usage)
        if by_saturation and not inputs:
            status = "saturation"
        return PlanOutcome(
            status=status,
            solve_seconds=time.perf_counter() - started,
            decisions=decisions,
            failures=failures,
            unit_costs={name: acc.cost for name, acc in request.accelerators.items()},
            plan=plan,
            ahead=frozenset(ahead),
            room=_room(inputs, keys, milp, plan),
            yields=_yields(inputs, keys, milp, plan),
            slo_sources={keys[v.key]: how[keys[v.key]] for v in inputs},
        )


def _inferred_service(v: PlannedVariant) -> tuple[tuple[ServiceTarget, str] | None, str]:
    """The variant's service target from WVA's ``sloMultiplier`` (``v.slo_multiplier`` set): the SLOs that
    load one replica on its current accelerator (else its first profile) to ``1 − 1/k`` of what it
    sustains, for the lengths it serves now; or None and why not (then saturation sizes it)."""
    assert v.slo_multiplier is not None
    k, where = v.slo_multiplier
    if v.load is None or v.load.avg_input_tokens <= 0 or v.load.avg_output_tokens <= 0:
        return None, (
            f"SLOs inferred with sloMultiplier {k:g} ({where}) need the request lengths it serves: "
            "none measured this cycle"
        )
    profile = next((p for p in v.profiles if p.accelerator == v.accelerator), v.profiles[0])
    try:
        found = infer_slo(
            profile,
            k,
            v.load.avg_input_tokens,
            v.load.avg_output_tokens,
            max_batch_size=v.max_batch,
        )
    except ModelError as exc:
        return None, f"SLOs inferred with sloMultiplier {k:g} ({where}): {exc}"
    how = f"SLOs inferred with sloMultiplier {k:g} ({where}): {found.describe()}"
    return (ServiceTarget("queueing-model", DEFAULT_PRIORITY, found.slo), how), ""


#: Arrivals whose index of dispersion reaches this at some window are called bursty in a plan's reason.
BURSTY_IDC = 2.0


def _burstiness_note(workload: Workload | None) -> str:
    """The reason's note on the burstiness a tail class is sized for: its largest index of dispersion
    and the window it was read over, where that is at least :data:`BURSTY_IDC` (else nothing: near
    Poisson, it explains little). See ``status.workload`` for every window."""
    bursts = workload.burstiness if workload is not None else None
    if bursts is None or not bursts.windows_s:
        return ""
    idc, window = max(zip(bursts.idc, bursts.windows_s, strict=True))
    if idc < BURSTY_IDC:
        return ""
    return f"; sized for bursty arrivals (index of dispersion {idc:.3g} over {window:g} s)"


def _forecast_tokens(v: PlannedVariant, tokens: tuple[float, float]) -> tuple[float, float]:
    """The request lengths to plan a forecast demand with: the window's means, or, where no request
    finished in the window (a silent minute between bursts), the means of the lengths measured over the
    longer look-back (the workload): a forecast of requests to come is not a load of empty requests."""
    if tokens[1] > 0 or v.workload is None or v.workload.lengths is None:
        return tokens
    lengths = v.workload.lengths
    return (lengths.input.mean, lengths.output.mean)


def _kv_capped(v: PlannedVariant) -> tuple[tuple[Profile, ...], int | None, tuple[str, str] | None]:
    """The variant's profiles and batch override with its current accelerator's batch capped by what
    its KV cache holds for the load's lengths, while its pods are under KV pressure; and (that
    accelerator, the reason's note) when the cap binds. No pressure, unknown capacity or lengths: as
    given."""
    profile = next((p for p in v.profiles if p.accelerator == v.accelerator), None)
    if v.load is None or profile is None or not v.kv_pressure:
        return v.profiles, v.max_batch, None
    lengths = v.workload.lengths if v.workload is not None else None
    ceiling = batch_ceiling(
        v.kv_cache,
        v.load.avg_input_tokens,
        v.load.avg_output_tokens,
        output=lengths.output if lengths is not None else None,
    )
    top = v.max_batch if v.max_batch is not None else profile.max_batch_size
    if ceiling is None or v.kv_cache is None or ceiling.batch >= top:
        return v.profiles, v.max_batch, None
    # The server-wide override moves into each profile, so that the cap holds on this accelerator only
    # (another accelerator has another cache).
    capped = tuple(
        replace(
            p,
            max_batch_size=ceiling.batch
            if p.accelerator == v.accelerator
            else (v.max_batch if v.max_batch is not None else p.max_batch_size),
        )
        for p in v.profiles
    )
    note = (
        f"batch capped at {ceiling.batch} (not {top}) by the KV cache: {v.kv_cache.tokens} tokens per "
        f"replica, {ceiling.per_sequence:.0f} per running sequence on average"
    )
    return capped, None, (profile.accelerator, note)


def _with_saturation(
    request: PlanRequest,
    decisions: dict[VariantKey, VariantPlan],
    failures: dict[VariantKey, str],
    no_slo: set[VariantKey],
) -> int:
    """Size the profile-less variants (and those without SLOs) by saturation and, with the floor on, put
    saturation under the model's decisions, model by model (in place); returns how many variants
    saturation sized."""
    groups: dict[tuple[str, str], list[PlannedVariant]] = {}
    for v in request.variants:
        groups.setdefault((v.key[0], v.model_id), []).append(v)
    # In limited mode the plan is bounded by the GPUs there are, which saturation does not count: raising
    # or holding a variant above it would leave replicas Pending. The floor is off there.
    floor = request.saturation_floor and request.capacity is None
    sized = 0
    for members in groups.values():
        if not floor and all(
            v.sized_by_model and v.key not in no_slo and (v.idle is None or not v.idle.enabled)
            for v in members
        ):
            continue  # the model alone, as before: nothing to combine
        by_name = {_name(v.key): v for v in members}
        analyzers = next((v.analyzers for v in members if v.analyzers), ())
        tokens = next((v.load.avg_input_tokens for v in members if v.load is not None), 0.0)
        result = size_group(
            [_member(v, decisions.get(v.key), request.accelerators, v.key not in no_slo) for v in members],
            analyzers,
            floor=floor,
            avg_input_tokens=tokens,
        )
        for name, decision in result.items():
            v = by_name[name]
            sized += not v.sized_by_model or v.key in no_slo
            why = failures.get(v.key) if v.key in no_slo else None
            _apply(v, decision, decisions, failures, request.accelerators, why_not_model=why)
    return sized


def _by_saturation(v: PlannedVariant, no_slo: set[VariantKey]) -> bool:
    return not v.sized_by_model or v.key in no_slo


def _saturation_gpus(request: PlanRequest, no_slo: set[VariantKey]) -> dict[str, int]:
    """GPUs per device type held now by the variants saturation sizes (limited mode; else none)."""
    held: dict[str, int] = {}
    if request.capacity is None:
        return held
    for v in request.variants:
        on = template_gpus(v, request)
        if on is not None and _by_saturation(v, no_slo):
            held[on[0]] = held.get(on[0], 0) + on[1] * v.current_replicas
    return held


def _limit_saturation(
    request: PlanRequest,
    decisions: dict[VariantKey, VariantPlan],
    no_slo: set[VariantKey],
    usage: Mapping[str, int],
) -> None:
    """WVA's GPU limiter on the variants saturation sized (in place; limited mode only): their scale-ups
    share the GPUs the model's plan left free (``request.capacity``: the inventory without the GPUs they
    hold now; ``usage``: the plan's), the most saturated first."""
    if request.capacity is None:
        return
    asks: list[ScaleUp] = []
    members: dict[str, tuple[PlannedVariant, str, int]] = {}
    for v in request.variants:
        on = template_gpus(v, request)
        d = decisions.get(v.key)
        if on is None or d is None or not _by_saturation(v, no_slo) or d.replicas <= v.current_replicas:
            continue
        spare = v.saturation.mean_spare if v.saturation is not None else None
        asks.append(
            ScaleUp(
                _name(v.key),
                on[0],
                on[1],
                v.current_replicas,
                d.replicas,
                1.0 if spare is None else spare,
                v.saturation_priority,
            )
        )
        members[_name(v.key)] = (v, *on)
    free = {device: n - usage.get(device, 0) for device, n in request.capacity.items()}
    for name, replicas in limit_scale_ups(asks, free).items():
        v, device, units = members[name]
        d = decisions[v.key]
        decisions[v.key] = replace(
            d,
            replicas=replicas,
            cost=replicas * v.replica_cost(request.accelerators),
            reason=(
                f"{d.reason}; limited by the GPU inventory to {replicas} (asked {d.replicas}): "
                f"{max(free.get(device, 0), 0)} {device} free beside the plan, {units} per replica, "
                "the more saturated variants (times their priority) first"
            ),
        )


def _name(key: VariantKey) -> str:
    return f"{key[0]}/{key[1]}"


def _member(
    v: PlannedVariant, plan: VariantPlan | None, accelerators: Mapping[str, AcceleratorType], slo: bool
) -> SizingMember:
    return SizingMember(
        key=_name(v.key),
        current=v.current_replicas,
        cost=v.replica_cost(accelerators),
        min_replicas=v.min_replicas,
        max_replicas=v.max_replicas,
        sized_by_model=v.sized_by_model and slo,
        model=(plan.replicas, plan.reason) if plan is not None else None,
        saturation=v.saturation,
        idle=v.idle,
    )


def _apply(
    v: PlannedVariant,
    decision: Decision,
    decisions: dict[VariantKey, VariantPlan],
    failures: dict[VariantKey, str],
    accelerators: Mapping[str, AcceleratorType],
    *,
    why_not_model: str | None,
) -> None:
    """Record what decided ``v``: the model's plan kept, or replaced by saturation's or zero's count
    (``why_not_model``: why the model could not size a variant that has a profile)."""
    plan = decisions.get(v.key)
    if decision.decided_by == "none":
        failures[v.key] = "; ".join(x for x in (why_not_model, f"no decision: {decision.reason}") if x)
        return
    if plan is not None and decision.decided_by == MODEL:
        return  # the model's own plan, predictions and all
    reason = f"{decision.decided_by}: {decision.reason}"
    if why_not_model is not None and plan is None:
        reason = f"{reason} ({why_not_model}: sized by saturation)"
    if plan is not None:
        same = decision.replicas == plan.replicas
        decisions[v.key] = VariantPlan(
            accelerator=plan.accelerator,
            replicas=decision.replicas,
            max_batch=plan.max_batch,
            cost=plan.cost if same else decision.replicas * v.replica_cost(accelerators),
            ttft_ms=plan.ttft_ms if same else None,  # no prediction for saturation's count
            itl_ms=plan.itl_ms if same else None,
            reason=reason,
            decided_by=decision.decided_by,
        )
        return
    failures.pop(v.key, None)
    decisions[v.key] = VariantPlan(
        accelerator=v.accelerator or "",
        replicas=decision.replicas,
        max_batch=v.max_batch,
        cost=decision.replicas * v.replica_cost(accelerators),
        ttft_ms=None,
        itl_ms=None,
        reason=reason,
        decided_by=decision.decided_by,
    )


def _on_device(variant: VariantInput, request: PlanRequest) -> tuple[str, int] | None:
    """The device type a variant's replicas run on now and the units each holds (None: unknown)."""
    name = variant.current_accelerator
    acc = request.accelerators.get(name or "")
    profile = variant.profile(name) if name else None
    if acc is None or profile is None:
        return None
    return acc.device, profile.acc_count * acc.multiplicity


def _yields(
    inputs: Iterable[VariantInput], keys: Mapping[str, VariantKey], request: PlanRequest, plan: Plan
) -> dict[VariantKey, int]:
    """Per variant, the replicas it gives up at once to higher-priority variants on its device (limited
    mode only; a plan that would move a variant to another accelerator leaves it out: actuation cannot
    move hardware)."""
    if request.capacity is None:
        return {}
    rows = []
    for variant in sorted(inputs, key=lambda v: v.key):
        on = _on_device(variant, request)
        decision = plan.decisions.get(variant.key)
        if on is None or decision is None:
            continue
        current = variant.current_replicas
        moved = decision.accelerator not in (variant.current_accelerator, None, "")
        planned = current if moved else decision.replicas
        rows.append((keys[variant.key], on[0], variant.service.priority, on[1], current, planned))
    return priority_yields(rows, request.capacity)


def _room(
    inputs: Iterable[VariantInput], keys: Mapping[str, VariantKey], request: PlanRequest, plan: Plan
) -> dict[VariantKey, int]:
    """Per variant, the replicas of its current accelerator that still fit beside the plan (limited
    mode only)."""
    if request.capacity is None:
        return {}
    room: dict[VariantKey, int] = {}
    for variant in inputs:
        on = _on_device(variant, request)
        if on is None:
            continue
        device, units = on
        free = request.capacity.get(device, 0) - plan.usage.get(device, 0)
        room[keys[variant.key]] = max(0, free // units)
    return room
