"""Policies that decide with the operator's optimizer: WVA, ours, the hindsight oracle, static peak.

They decide through the operator's own planner (:mod:`variant_autoscaler.planner`): each decision
builds the :class:`~variant_autoscaler.planner.PlanRequest` the operator builds from the cluster —
VariantAutoscaling objects (:func:`~variant_autoscaler.planner.planned_from_va`), the
``accelerator-unit-costs`` and ``service-classes-config`` data, the main ConfigMap and (limited mode)
the GPU inventory — and hands it to :class:`~variant_autoscaler.planner.OptimizerPlanner`.

* **WVA** (wva.md): every 60 s, unlimited mode, each VA keeps its accelerator, ``minReplicas`` 1, the
  load is ``rate(vllm:request_success_total[1m])`` of the VA's *model* (WVA selects series by
  ``model_name``, so two VAs of one model both see the model's whole load), batch = the profile's
  ``maxBatchSize``. An HPA with no stabilisation applies the number as it comes.
* **ours**: every ``interval_s``, limited mode over the healthy inventory, priorities and saturation
  policy, load = the operator collector's demand (completions plus the waiting queue's growth and
  backlog), variants of one model share its load (``shareModelLoad``), then the operator's replica
  policy (:func:`variant_autoscaler.core.policy.apply_policy`: bounds, scale-down stabilisation,
  no scale-up while earlier replicas are still starting), as in patch mode. For a model whose class
  states attainment targets, as the operator does: tail sizing with the burstiness and lengths read
  over the last ten minutes (:meth:`~variant_autoscaler.sim.observe.ModelView.workload`), the demand
  forecast's upper quantile over "start-up + one interval" (:mod:`variant_autoscaler.core.forecast`),
  and the burst guard every scrape (:mod:`variant_autoscaler.core.guard`), which bypasses the
  starting-replicas rule because it counts them as supply. ``sizing``, ``forecast`` and ``guard``
  override these per policy (the ablation).
* **oracle**: every ``interval_s``, limited mode fed with the *actual* load of the coming interval
  (the rate of its busiest 30 s, and for attainment classes the burstiness and lengths of the
  requests around it), replicas ready at once; no stabilisation. The cheapest allocation that the
  model says meets the SLO with perfect foresight: the lower bound on cost.
* **static**: the oracle's planner once, at each model's peak 5-minute load, held all run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Literal

import yaml

from variant_autoscaler.api.config import MainConfig, parse_main_config
from variant_autoscaler.api.configmaps import (
    ServiceClasses,
    parse_accelerator_costs,
    parse_service_classes,
)
from variant_autoscaler.api.v1alpha1 import ACCELERATOR_LABEL, VariantAutoscaling
from variant_autoscaler.core.demand import forecast_input
from variant_autoscaler.core.forecast import ForecastState, replay
from variant_autoscaler.core.forecast import forecast as forecast_rate
from variant_autoscaler.core.forecast import update as update_forecast
from variant_autoscaler.core.guard import GuardInput, GuardParams, GuardVariant, guard, take_room
from variant_autoscaler.core.model import AcceleratorType
from variant_autoscaler.core.policy import PolicyInput, Recommendation, apply_policy, siblings_starting
from variant_autoscaler.core.workload import (
    Workload,
)
from variant_autoscaler.errors import ConfigError
from variant_autoscaler.planner import (
    ObservedLoad,
    OptimizerPlanner,
    PlannedVariant,
    Planner,
    PlanOutcome,
    PlanRequest,
    optimizer_config,
    planned_from_va,
)
from variant_autoscaler.sim.loads import LoadSource, ModelLoad, future_loads, future_workloads, observed_loads
from variant_autoscaler.sim.observe import (
    GATEWAY_ARRIVAL_COUNTER,
    Action,
    Observation,
    PolicyContext,
    VariantView,
)
from variant_autoscaler.sim.policies import Policy
from variant_autoscaler.sim.replica import token_budget
from variant_autoscaler.sim.scenario import Scenario, Variant
from variant_autoscaler.sim.traffic import Arrivals

__all__ = [
    "NAMESPACE",
    "ForecastMode",
    "OptimizerPolicy",
    "OraclePolicy",
    "PlanInputs",
    "Sizing",
    "future_workloads",
    "ours_policy",
    "peak_allocation",
    "wva_policy",
]

NAMESPACE = "sim"
EPOCH = datetime(2025, 1, 1, tzinfo=UTC)  # simulated t = 0 as a wall-clock time for the replica policy
PEAK_WINDOW_S = 300.0
TREND_WINDOW_S = 300.0
#: The oracle plans each interval for the rate of its busiest stretch of this length (min-gpus' rule).
ORACLE_PEAK_S = 30.0
#: ``tail``: the classes as stated (attainment targets sized by the tail model); ``mean``: their share
#: targets dropped, the same TTFT and ITL read as means (WVA's meaning).
Sizing = Literal["tail", "mean"]
#: What the planner is told of the load to come: the observed demand (``none``), at least Holt's point
#: forecast of the horizon's peak (``point``), or at least its upper quantile (``quantile``).
ForecastMode = Literal["none", "point", "quantile"]


def _at(t: float) -> datetime:
    return EPOCH + timedelta(seconds=t)


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """The cluster as the operator reads it: VAs, the two ConfigMaps' data and the main config."""

    vas: Mapping[str, VariantAutoscaling]  # by variant name
    accelerator_costs: Mapping[str, str]
    service_classes: Mapping[str, str]
    config: MainConfig

    @property
    def accelerators(self) -> Mapping[str, AcceleratorType]:
        return parse_accelerator_costs(self.accelerator_costs, strict=True).accelerators

    @property
    def classes(self) -> ServiceClasses:
        return parse_service_classes(self.service_classes, strict=True)


def plan_inputs(
    scenario: Scenario,
    *,
    mode: Literal["unlimited", "limited"],
    share_load: bool,
    wva_bounds: bool,
    saturation_policy: str = "PriorityExhaustive",
    slo_scale: float = 1.0,
    sizing: Sizing = "tail",
    planning_attainment: float | None = None,
) -> PlanInputs:
    """Build the VariantAutoscalings and ConfigMap data of a scenario.

    Each VA lists only its own accelerator's profile: a variant is a Deployment on one accelerator
    type, so it keeps its accelerator; a model changes accelerator by shifting load between its
    variants (``shareModelLoad``). With ``wva_bounds`` (WVA's policy) the VAs carry no min/max (WVA's
    minimum 1) and the classes no TTFT percentile (WVA sizes for the mean). ``sizing="mean"`` drops the
    share targets (percentiles, attainment) from the classes as well; ``planning_attainment`` replaces
    the attainment of the classes that state one (the checked oracle's knob).
    ``slo_scale < 1`` plans against tighter SLOs than the ones requests are judged by (headroom).
    """
    if not 0 < slo_scale <= 1:
        raise ConfigError("slo_scale must be in (0, 1]")
    models = scenario.model_by_id
    vas: dict[str, VariantAutoscaling] = {}
    for var in scenario.variants:
        model = models[var.model]
        prof = model.profile(var.accelerator)
        spec: dict[str, object] = {
            "modelID": model.model_id,
            "sloClassRef": {"name": "service-classes-config", "key": f"{model.service_class}.yaml"},
            "modelProfile": {
                "accelerators": [
                    {
                        "acc": prof.accelerator,
                        "accCount": prof.acc_count,
                        "maxBatchSize": prof.max_batch_size,
                        "perfParms": {
                            "decodeParms": {"alpha": repr(prof.alpha), "beta": repr(prof.beta)},
                            "prefillParms": {"gamma": repr(prof.gamma), "delta": repr(prof.delta)},
                        },
                    }
                ]
            },
        }
        if not wva_bounds:
            spec["minReplicas"] = var.min_replicas
            if var.max_replicas is not None:
                spec["maxReplicas"] = var.max_replicas
        if share_load and model.share_load:
            spec["shareModelLoad"] = True
        vas[var.name] = VariantAutoscaling.model_validate(
            {
                "metadata": {
                    "name": var.name,
                    "namespace": NAMESPACE,
                    "labels": {ACCELERATOR_LABEL: var.accelerator},
                },
                "spec": spec,
            }
        )
    costs = {
        a.name: json.dumps({"device": a.device, "cost": f"{a.unit_cost:.2f}"}) for a in scenario.accelerators
    }
    classes: dict[str, str] = {}
    for cls in scenario.classes:
        entries = [
            {
                "model": m.model_id,
                "slo-tpot": _int_ms(m.slo_itl_ms, slo_scale),
                "slo-ttft": _int_ms(m.slo_ttft_ms, slo_scale),
                # WVA knows the mean only; our planner honours the class's percentiles and attainment.
                **(
                    {
                        key: value
                        for key, value in (
                            ("slo-ttft-percentile", m.slo_ttft_percentile),
                            ("slo-tpot-percentile", m.slo_itl_percentile),
                            (
                                "slo-attainment",
                                planning_attainment
                                if planning_attainment is not None and m.slo_attainment
                                else m.slo_attainment,
                            ),
                        )
                        if value
                    }
                    if not wva_bounds and sizing == "tail"
                    else {}
                ),
            }
            for m in scenario.models
            if m.service_class == cls.name
        ]
        classes[f"{cls.name}.yaml"] = yaml.safe_dump(
            {"name": cls.name, "priority": cls.priority, "data": entries}, sort_keys=False
        )
    config = parse_main_config(
        {
            "OPTIMIZER_MODE": mode,
            "SATURATION_POLICY": saturation_policy,
            "WVA_SCALE_TO_ZERO": "false",
            "DEFAULT_ACTUATION_MODE": "metrics" if wva_bounds else "patch",
            # The replicas' engine says how they prefill: chunked (v1), or at the batch's pace (wva).
            "CHUNKED_PREFILL": "false" if _batched_prefill(scenario) else "true",
            # ... and how many tokens one of their steps holds (the smallest budget, where they differ).
            **({"MAX_NUM_BATCHED_TOKENS": str(budget)} if (budget := _token_budget(scenario)) else {}),
            # The simulated cluster's requests come through an inference gateway, and our operator is
            # configured with its arrival counter (its burstiness is read from it too: observe.py).
            **({} if wva_bounds else {"ARRIVAL_COUNTER": GATEWAY_ARRIVAL_COUNTER}),
        }
    )
    return PlanInputs(vas=vas, accelerator_costs=costs, service_classes=classes, config=config)


def _token_budget(scenario: Scenario) -> int | None:
    """The smallest token budget per step of the scenario's V1 replicas (None: none run V1)."""
    budgets = [
        token_budget(p.server, p.max_batch_size)
        for m in scenario.models
        for p in m.profiles
        if p.server is not None and p.server.engine != "wva"
    ]
    return min(budgets) if budgets else None


def _batched_prefill(scenario: Scenario) -> bool:
    """Whether the scenario's replicas run the wva engine (prefill at the batch's pace) rather than the
    V1 one (chunked prefill)."""
    return all(p.server is None or p.server.engine == "wva" for m in scenario.models for p in m.profiles)


def _int_ms(value: float, scale: float) -> int:
    # WVA's service-class SLOs are integers (ms); a fractional value would fail its YAML decoding.
    if value != int(value):
        raise ConfigError(f"SLO {value} ms is not a whole number of ms, as WVA's service classes need")
    return max(1, math.floor(value * scale))


@dataclass(slots=True)
class _VariantState:
    """What the operator keeps in a VA's status between cycles."""

    history: tuple[Recommendation, ...] = ()
    last_desired: int | None = None
    last_scale_time: datetime | None = None


class OptimizerPolicy(Policy):
    """Decide with the operator's planner (see the module doc for WVA and ours).

    ``interval_s`` is the planning interval. ``sizing``, ``forecast`` and ``guard`` (None: as the
    operator, i.e. on for models whose class states attainment targets) choose what runs; with the
    guard on for some model the policy is called every ``guard_interval_s`` and plans every
    ``interval_s``.
    """

    def __init__(
        self,
        scenario: Scenario,
        *,
        name: str,
        interval_s: float,
        mode: Literal["unlimited", "limited"],
        load_source: LoadSource,
        share_load: bool,
        replica_policy: bool,
        wva_bounds: bool,
        planner: Planner | None = None,
        stabilization_s: float | None = None,
        pending_timeout_s: float | None = None,
        slo_scale: float = 1.0,
        forecast_s: float = 0.0,
        sizing: Sizing = "tail",
        forecast: ForecastMode | None = None,
        guard: bool | None = None,
        guard_interval_s: float | None = None,
        forecast_quantile: float | None = None,
        workloads: bool = True,
        planning_attainment: float | None = None,
        forecast_history: Mapping[str, Sequence[float]] | None = None,
    ) -> None:
        if not interval_s > 0:
            raise ConfigError("a decision interval must be > 0")
        self.name = name
        self.plan_interval_s = interval_s
        self.scenario = scenario
        self.inputs = plan_inputs(
            scenario,
            mode=mode,
            share_load=share_load,
            wva_bounds=wva_bounds,
            slo_scale=slo_scale,
            sizing=sizing,
            planning_attainment=planning_attainment,
        )
        # Parsed once: the scenario's ConfigMaps do not change during a run.
        self._accelerators = self.inputs.accelerators
        self._classes = self.inputs.classes
        self.mode = mode
        self.load_source = load_source
        self.replica_policy = replica_policy
        self._planner = planner
        cfg = self.inputs.config
        self.pending_timeout_s = (
            pending_timeout_s if pending_timeout_s is not None else cfg.pending_timeout_seconds
        )
        self._state: dict[str, _VariantState] = {v.name: _VariantState() for v in scenario.variants}
        self.last_outcome: PlanOutcome | None = None
        if forecast_s < 0:
            raise ConfigError("forecast_s must be >= 0")
        self.forecast_s = forecast_s
        self._history: dict[str, list[tuple[float, float]]] = {}  # model -> (time, demand rpm)
        # What the operator does for a class with attainment targets (tail sizing, the forecast's upper
        # quantile, the guard), unless this policy says otherwise (the ablation).
        tail = {m.model_id for m in scenario.models if m.tail_slo and sizing == "tail" and not wva_bounds}
        ahead = {m.model_id for m in scenario.models if m.tail_slo and not wva_bounds}
        self._workloads = workloads and bool(tail)
        self._tail_models = frozenset(tail)
        self._supply_models = frozenset(ahead)
        # Without an explicit mode the forecast goes to the planner, which plans attainment classes for it
        # (the operator's path); an explicit mode raises the load itself (the ablation).
        self._forecast_auto = forecast is None
        self.forecast_mode: dict[str, ForecastMode] = {
            m.model_id: forecast if forecast is not None else ("quantile" if m.model_id in ahead else "none")
            for m in scenario.models
        }
        self.guarded = frozenset(
            m.model_id for m in scenario.models if (guard if guard is not None else m.model_id in ahead)
        )
        self._forecast_cfg = {  # the operator's, unless this policy names its quantile
            m.model_id: cfg.forecast_config(
                interval_s=interval_s, horizon_s=m.startup_s + interval_s, quantile=forecast_quantile
            )
            for m in scenario.models
        }
        # The scale-down window: this policy's, else the operator's default in patch mode, which is
        # shorter for a model planned ahead with the quantile forecast once its hysteresis holds the
        # plans (``holds``: past the forecaster's warm-up).
        self._window = stabilization_s
        self._holds: dict[str, bool] = {}
        # The replica policy keeps a variant's replicas through the scale-down window: plans know it.
        self._keeps = replica_policy and (
            stabilization_s > 0 if stabilization_s is not None else cfg.stabilization_for("patch") > 0
        )
        # A forecaster starts afresh, or where the operator would find the model's past rate in
        # Prometheus (``forecast_history``: per model, one rate per interval, oldest first), warmed
        # from it as the operator's backfill does (engine/ahead.py).
        history = forecast_history or {}
        self._forecasts: dict[str, ForecastState] = {
            m.model_id: replay(history.get(m.model_id, ()), self._forecast_cfg[m.model_id])
            for m in scenario.models
        }
        self._startup = {m.model_id: m.startup_s for m in scenario.models}
        tick = guard_interval_s if guard_interval_s is not None else scenario.settings.scrape_interval_s
        self.interval_s = min(interval_s, tick) if self.guarded else interval_s
        self._next_plan = interval_s
        self._rate_per_replica: dict[str, float] = {}
        self._planned: dict[str, int] = {}
        self._room: dict[str, int] = {}
        self._guard_params = GuardParams()
        self.guard_actions = 0

    def stabilization_s(self, model: str) -> float:
        """The scale-down window of ``model``'s variants now (s)."""
        if self._window is not None:
            return self._window
        return self.inputs.config.stabilization_for("patch", ahead=self._holds.get(model, False))

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = OptimizerPlanner()
        return self._planner

    def plan(
        self,
        loads: Mapping[str, ModelLoad],
        current: Mapping[str, int],
        capacity: Mapping[str, int],
        *,
        held: frozenset[str] = frozenset(),
        workloads: Mapping[str, Workload] | None = None,
        max_batch: Mapping[str, int] | None = None,
        ahead: Mapping[str, float] | None = None,
    ) -> PlanOutcome:
        """One planning call, as the operator makes it; the models in ``held`` have no metrics.
        ``workloads``: per model, its measured burstiness and lengths (tail sizing); ``max_batch``: per
        variant, the batch its server runs (None: the optimizer may choose); ``ahead``: per model, its
        demand forecast (req/min), planned for by attainment classes."""
        planned: list[PlannedVariant] = []
        cfg = self.inputs.config
        for var in self.scenario.variants:
            load = loads[var.model]
            planned.append(
                planned_from_va(
                    self.inputs.vas[var.name],
                    namespace=NAMESPACE,
                    accelerator=var.accelerator,
                    current_replicas=current[var.name],
                    current_max_batch=max_batch.get(var.name) if max_batch is not None else None,
                    load=None
                    if var.model in held
                    else ObservedLoad(load.rpm, load.avg_input_tokens, load.avg_output_tokens),
                    config=cfg,
                    workload=workloads.get(var.model) if workloads is not None else None,
                    ahead_rpm=ahead.get(var.model) if ahead is not None else None,
                    # As the operator: its replicas outlive this plan while the replica policy
                    # stabilises scale-down.
                    kept_replicas=current[var.name] if self._keeps else 0,
                )
            )
        request = PlanRequest(
            variants=tuple(planned),
            accelerators=self._accelerators,
            classes=self._classes,
            optimizer=optimizer_config(cfg),
            capacity=self._capacity_by_device(capacity) if self.mode == "limited" else None,
            chunked_prefill=cfg.chunked_prefill,
            prefill_budget=cfg.prefill_budget,
        )
        outcome = self.planner.plan(request)
        self.last_outcome = outcome
        return outcome

    def _capacity_by_device(self, capacity: Mapping[str, int]) -> dict[str, int]:
        device = {a.name: a.device for a in self.scenario.accelerators}
        out: dict[str, int] = {}
        for acc, units in capacity.items():
            out[device[acc]] = out.get(device[acc], 0) + units
        return out

    def decide(self, obs: Observation) -> Mapping[str, Action]:
        actions: dict[str, Action] = {}
        desired = {name: view.desired for name, view in obs.variants.items()}
        if obs.now >= self._next_plan - 1e-9:
            while self._next_plan <= obs.now + 1e-9:
                self._next_plan += self.plan_interval_s
            for name, action in self._decide_plan(obs).items():
                actions[name] = action
                desired[name] = action.replicas
        if self.guarded:
            for name, action in self._guard(obs, desired).items():
                actions[name] = action
        return actions

    def _decide_plan(self, obs: Observation) -> dict[str, Action]:
        cfg = self.inputs.config
        loads = observed_loads(obs, self.scenario, self.load_source, cfg.queue_drain_seconds)
        if cfg.arrival_counter:
            window = self.scenario.settings.rate_window_s
            loads = {
                m: replace(load, arrivals_rpm=obs.models[m].arrival_rpm(window) if m in obs.models else None)
                for m, load in loads.items()
            }
        if self.forecast_s > 0:
            loads = self._forecast(obs.now, loads)
        loads, ahead = self._ahead(loads)
        workloads = (
            {m: obs.models[m].workload() for m in self._tail_models if m in obs.models}
            if self._workloads
            else None
        )
        # A model's series exist while some pod of it is scraped (WVA's availability check; the
        # operator's staleness check); with none, the variant is skipped (WVA) or held (ours).
        metrics_ok = {
            model: any(v.metrics_ok and v.ready > 0 for v in obs.variants.values() if v.model == model)
            for model in loads
        }
        current = {name: view.desired for name, view in obs.variants.items()}
        # WVA skips a variant without metrics after planning; the operator holds it in the plan.
        held = frozenset(m for m, ok in metrics_ok.items() if not ok) if self.replica_policy else frozenset()
        batches = {name: view.max_batch for name, view in obs.variants.items()} if self._tail_models else None
        outcome = self.plan(
            loads, current, obs.capacity, held=held, workloads=workloads, max_batch=batches, ahead=ahead
        )
        self._room = {key[1]: n for key, n in outcome.room.items()}
        if outcome.plan is not None:
            for var in self.scenario.variants:
                d = outcome.plan.decisions.get(f"{NAMESPACE}/{var.name}")
                if d is not None and d.rate_per_replica > 0:
                    self._rate_per_replica[var.name] = d.rate_per_replica
                if d is not None:
                    self._planned[var.name] = d.replicas
        actions: dict[str, Action] = {}
        plans = {name: d.replicas for (_, name), d in outcome.decisions.items()}
        coming = siblings_starting(
            (n, v.model, max(v.desired, plans.get(n, 0)), v.ready) for n, v in obs.variants.items()
        )
        for var in self.scenario.variants:
            view = obs.variants[var.name]
            plan = outcome.decisions.get((NAMESPACE, var.name))
            if not self.replica_policy:
                # WVA: the VA is skipped when its metrics are missing; an HPA applies the rest as is.
                if plan is not None and metrics_ok[var.model] and plan.replicas != view.desired:
                    actions[var.name] = Action(replicas=plan.replicas)
                continue
            desired = self._apply_replica_policy(
                var=var,
                view=view,
                optimized=plan.replicas if plan else None,
                now=obs.now,
                metrics_ok=metrics_ok[var.model],
                failure=outcome.failures.get((NAMESPACE, var.name)),
                siblings=coming[var.name],
                yielding=outcome.yields.get((NAMESPACE, var.name), 0),
            )
            if desired != view.desired:
                actions[var.name] = Action(replicas=desired)
        return actions

    def _ahead(self, loads: Mapping[str, ModelLoad]) -> tuple[dict[str, ModelLoad], dict[str, float]]:
        """Each model's demand and forecast over "start-up + one interval": handed to the planner as
        the operator does (``ahead``, req/min), or with an explicit mode, the demand raised to it here.
        The forecaster learns every observed arrival rate (or demand: ``forecast_input``) either way."""
        out: dict[str, ModelLoad] = {}
        ahead: dict[str, float] = {}
        for model, load in loads.items():
            cfg = self._forecast_cfg[model]
            arrivals = load.arrivals_rpm / 60.0 if load.arrivals_rpm is not None else None
            state = update_forecast(self._forecasts[model], forecast_input(load.rpm / 60.0, arrivals), cfg)
            self._forecasts[model] = state
            mode = self.forecast_mode[model]
            out[model] = load
            if mode == "none":
                continue
            found = forecast_rate(state, cfg)
            self._holds[model] = mode == "quantile" and found.holds
            rate = (found.planned if mode == "quantile" else found.point) * 60.0
            if self._forecast_auto:
                ahead[model] = rate
            else:
                out[model] = ModelLoad(max(load.rpm, rate), load.avg_input_tokens, load.avg_output_tokens)
        return out, ahead

    def _guard(self, obs: Observation, desired: Mapping[str, int]) -> dict[str, Action]:
        """The burst guard on every guarded model (scale-up only; see core/guard.py), from what the
        operator's one guard query reads: per model, the queue, its growth, the completions and the
        KV-cache usage of its ready replicas."""
        actions: dict[str, Action] = {}
        window = self.scenario.settings.rate_window_s
        for model in self.scenario.models:
            if model.model_id not in self.guarded:
                continue
            variants = [v for v in self.scenario.variants if v.model == model.model_id]
            views = [obs.variants[v.name] for v in variants]
            if not any(v.metrics_ok for v in views):
                continue
            ready = sum(v.ready for v in views)
            decision = guard(
                GuardInput(
                    now=obs.now,
                    completion_rate=sum(v.success_rpm for v in views) / 60.0,
                    waiting=sum(v.waiting for v in views),
                    waiting_growth=sum(v.waiting_growth for v in views),
                    window_s=window,
                    kv_usage=sum(v.kv_usage * v.ready for v in views) / ready if ready else 0.0,
                    drain_s=model.startup_s,
                    completion_rate_short=_total((v.success_rpm_short for v in views), 60.0),
                    waiting_growth_short=_total(v.waiting_growth_short for v in views),
                    short_window_s=window / 2.0,
                    variants=tuple(
                        GuardVariant(
                            key=var.name,
                            desired=desired[var.name],
                            ready=view.ready,
                            rate_per_replica=self._rate_per_replica.get(var.name),
                            planned=self._planned.get(var.name, 0),
                            starting_ready_at=view.starting_ready_at,
                            max_replicas=self.inputs.vas[var.name].spec.max_replicas,
                            room=self._room.get(var.name),
                        )
                        for var, view in zip(variants, views, strict=True)
                    ),
                ),
                self._guard_params,
            )
            for name, replicas in decision.replicas.items():
                if replicas <= desired[name]:
                    continue
                actions[name] = Action(replicas=replicas)
                self.guard_actions += 1
                if name in self._room:
                    self._planned[name], self._room[name] = take_room(
                        self._planned.get(name, 0), self._room[name], replicas - desired[name]
                    )
                # The guard's count is a recommendation like the planner's: scale-down stays conservative.
                state = self._state[name]
                state.history = (*state.history, Recommendation(time=_at(obs.now), replicas=replicas))
                state.last_desired = replicas
                state.last_scale_time = _at(obs.now)
        return actions

    def _forecast(self, now: float, loads: Mapping[str, ModelLoad]) -> dict[str, ModelLoad]:
        """Experiment: add the demand's recent rise (slope over the last 5 minutes of decisions)
        projected ``forecast_s`` ahead; a falling demand is not projected."""
        out: dict[str, ModelLoad] = {}
        for model, load in loads.items():
            hist = self._history.setdefault(model, [])
            hist.append((now, load.rpm))
            while hist and hist[0][0] < now - TREND_WINDOW_S:
                hist.pop(0)
            t0, r0 = hist[0]
            slope = (load.rpm - r0) / (now - t0) if now > t0 else 0.0
            out[model] = ModelLoad(
                load.rpm + max(0.0, slope) * self.forecast_s, load.avg_input_tokens, load.avg_output_tokens
            )
        return out

    def _apply_replica_policy(
        self,
        *,
        var: Variant,
        view: VariantView,
        optimized: int | None,
        now: float,
        metrics_ok: bool,
        failure: str | None,
        siblings: int = 0,
        yielding: int = 0,
    ) -> int:
        state = self._state[var.name]
        va = self.inputs.vas[var.name]
        low = (
            va.spec.min_replicas
            if va.spec.min_replicas is not None
            else self.inputs.config.min_replicas_default
        )
        decision = apply_policy(
            PolicyInput(
                now=_at(now),
                optimized_replicas=optimized,
                optimized_reason=failure or "",
                metrics_ok=metrics_ok,
                metrics_reason="" if metrics_ok else "no vLLM series: no pod of the model is scraped",
                current_replicas=view.desired,
                ready_replicas=view.ready,
                last_desired=state.last_desired,
                min_replicas=low,
                max_replicas=va.spec.max_replicas,
                stabilization_seconds=self.stabilization_s(var.model),
                history=state.history,
                last_scale_time=state.last_scale_time,
                # Attainment classes count starting replicas as supply (the plan covers start-up + one
                # interval, by which time they serve): no waiting for them, and none scaled away first.
                pending_timeout_seconds=0.0 if var.model in self._supply_models else self.pending_timeout_s,
                siblings_starting=siblings if var.model in self._supply_models else 0,
                yield_replicas=yielding,
            )
        )
        state.history = decision.history
        state.last_desired = decision.replicas
        if decision.replicas != view.desired:
            state.last_scale_time = _at(now)
        return decision.replicas


def _total(values: Iterable[float | None], per: float = 1.0) -> float | None:
    """The sum of ``values`` divided by ``per``; None when any is None (not read)."""
    out = 0.0
    for v in values:
        if v is None:
            return None
        out += v
    return out / per


def wva_policy(
    scenario: Scenario, *, planner: Planner | None = None, name: str = "wva-2025", slo_scale: float = 1.0
) -> OptimizerPolicy:
    """WVA as wva.md describes it, the 2025 generation (unlimited, keep accelerator, 60 s, completion
    rate, min 1); ``slo_scale < 1`` plans against tighter SLOs (more capacity, to compare at equal
    attainment)."""
    return OptimizerPolicy(
        scenario,
        name=name,
        slo_scale=slo_scale,
        interval_s=60.0,
        mode="unlimited",
        load_source="wva",
        share_load=False,
        replica_policy=False,
        wva_bounds=True,
        planner=planner,
    )


def ours_policy(
    scenario: Scenario,
    *,
    interval_s: float = 60.0,
    planner: Planner | None = None,
    slo_scale: float = 1.0,
    forecast_s: float = 0.0,
    name: str = "ours",
    sizing: Sizing = "tail",
    forecast: ForecastMode | None = None,
    guard: bool | None = None,
    forecast_history: Mapping[str, Sequence[float]] | None = None,
) -> OptimizerPolicy:
    """Our operator in patch mode: limited mode, shared model load, demand from the queue, replica policy;
    for attainment classes tail sizing on the measured workload, the forecast's upper quantile and the
    burst guard (as the operator's defaults).

    ``slo_scale < 1`` and ``forecast_s > 0`` are experiments, not the operator's behaviour: plan
    against SLOs scaled by ``slo_scale``; add the demand's recent rise projected ``forecast_s`` ahead.
    ``sizing``, ``forecast`` and ``guard`` override the operator's choices (the ablation);
    ``forecast_history`` warms the forecasters from each model's past rate, as the operator does from
    Prometheus (``FORECAST_HISTORY``).
    """
    return OptimizerPolicy(
        scenario,
        name=name,
        slo_scale=slo_scale,
        forecast_s=forecast_s,
        interval_s=interval_s,
        mode="limited",
        load_source="ours",
        share_load=True,
        replica_policy=True,
        wva_bounds=False,
        planner=planner,
        sizing=sizing,
        forecast=forecast,
        guard=guard,
        forecast_history=forecast_history,
    )


class OraclePolicy(Policy):
    """Hindsight: plan each interval for the load that will arrive in it (its busiest 30 s, and for
    attainment classes the burstiness and lengths of the requests around it), replicas ready at once.

    ``planning_attainment`` plans the attainment classes for that share instead of their own; the
    checked oracle (:func:`variant_autoscaler.sim.runner.checked_oracle`) chooses it by simulation."""

    ignores_startup = True

    def __init__(
        self,
        scenario: Scenario,
        *,
        interval_s: float = 60.0,
        planner: Planner | None = None,
        name: str = "oracle",
        planning_attainment: float | None = None,
    ) -> None:
        self.name = name
        self.interval_s = interval_s
        self._inner = OptimizerPolicy(
            scenario,
            name=name,
            interval_s=interval_s,
            mode="limited",
            load_source="ours",
            share_load=True,
            replica_policy=False,
            wva_bounds=False,
            planner=planner,
            guard=False,
            planning_attainment=planning_attainment,
        )
        self.scenario = scenario
        self._arrivals: Mapping[str, Arrivals] = {}
        self._current: dict[str, int] = {v.name: v.initial_replicas for v in scenario.variants}
        self._tail = {m.model_id for m in scenario.models if m.tail_slo}

    def _allocation(
        self, start: float, current: Mapping[str, int], capacity: Mapping[str, int]
    ) -> dict[str, int]:
        end = min(start + self.interval_s, self.scenario.duration_s)
        loads = future_loads(self._arrivals, start, end, peak_s=ORACLE_PEAK_S)
        workloads = (
            future_workloads({m: a for m, a in self._arrivals.items() if m in self._tail}, start, end, loads)
            if self._tail
            else None
        )
        outcome = self._inner.plan(loads, current, capacity, workloads=workloads)
        out: dict[str, int] = {}
        for var in self.scenario.variants:
            plan = outcome.decisions.get((NAMESPACE, var.name))
            out[var.name] = plan.replicas if plan is not None else current[var.name]
        return out

    def start(self, ctx: PolicyContext) -> Mapping[str, int] | None:
        self._arrivals = ctx.arrivals
        return self._allocation(0.0, self._current, ctx.scenario.capacity())

    def decide(self, obs: Observation) -> Mapping[str, Action]:
        current = {name: view.desired for name, view in obs.variants.items()}
        if obs.now >= self.scenario.duration_s:
            return {}
        target = self._allocation(obs.now, current, obs.capacity)
        return {name: Action(n) for name, n in target.items() if n != current[name]}


def peak_allocation(
    scenario: Scenario,
    arrivals: Mapping[str, Arrivals],
    *,
    planner: Planner | None = None,
    window_s: float = PEAK_WINDOW_S,
    headroom: float = 1.0,
) -> dict[str, int]:
    """Static peak provisioning: the oracle's planner at each model's busiest ``window_s`` load
    (windows start every ``window_s / 2``), that load's rate times ``headroom`` (an admin's margin
    over the peak: ``static@1.5`` plans for half as much again), and, for models of attainment classes,
    the request lengths and burstiness of that window as the oracle reads them (without them the
    planner would assume exponential lengths, whose many one- and two-token outputs an ITL target
    prices high)."""
    loads: dict[str, ModelLoad] = {}
    workloads: dict[str, Workload] = {}
    tail = {m.model_id for m in scenario.models if m.tail_slo}
    for model, arr in arrivals.items():
        best, busiest = ModelLoad(0.0, 0.0, 0.0), (0.0, 0.0)
        start = 0.0
        while start < scenario.duration_s:
            end = min(start + window_s, scenario.duration_s)
            load = future_loads({model: arr}, start, end)[model]
            if load.rpm > best.rpm:
                best, busiest = load, (start, end)
            start += window_s / 2.0
        loads[model] = replace(best, rpm=best.rpm * headroom)
        if model in tail:
            workloads.update(future_workloads({model: arr}, *busiest, {model: best}))
    inner = OptimizerPolicy(
        scenario,
        name="static",
        interval_s=math.inf,
        mode="limited",
        load_source="ours",
        share_load=True,
        replica_policy=False,
        wva_bounds=False,
        planner=planner,
    )
    current = {v.name: v.initial_replicas for v in scenario.variants}
    outcome = inner.plan(loads, current, scenario.capacity(), workloads=workloads or None)
    return {
        v.name: (plan.replicas if (plan := outcome.decisions.get((NAMESPACE, v.name))) else current[v.name])
        for v in scenario.variants
    }
