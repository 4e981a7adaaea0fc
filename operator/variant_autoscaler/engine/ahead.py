"""Ahead of the load, in the operator: the demand forecast of each model and the burst guard.

For variants whose service class states attainment or percentile targets (docs/tail-slo.md):

* :class:`ForecastBook` keeps one forecaster (:mod:`variant_autoscaler.core.forecast`) per model and
  namespace, updated once per interval with the model's arrival rate where an arrival counter is
  configured (``ARRIVAL_COUNTER``), else its demand as vLLM's metrics show it, and gives the planner its
  upper quantile over "start-up + one interval". Its state is written into the ``status.forecast`` of every
  VariantAutoscaling of the model, with the status the cycle writes anyway (no extra API call, no extra
  RBAC, and it goes with the objects it describes), and for an annotated HPA or ScaledObject into the
  ``forecast`` section of its entry in the annotated objects' ConfigMap (:mod:`.annotated_state`): a
  restarted operator, or a new leader, resumes from the most advanced state it finds there instead of
  relearning the error quantiles for twenty intervals. A model with no such state (new to the operator:
  a first install, a migration from WVA, a new VA on a model already serving) is warmed from its own
  past: one range query per cycle reads the rate of every such model over ``FORECAST_HISTORY``
  (:meth:`ForecastBook.backfill`), and the forecaster learns it as if it had run through it.
* :class:`BurstGuard` runs beside the cycles: every ``BURST_GUARD_INTERVAL`` one PromQL query reads the
  queue, its growth, the completions and the KV cache of every model
  (:mod:`variant_autoscaler.adapters.guard_signals`); :func:`variant_autoscaler.core.guard.guard` says
  whether a model's replicas are overrun, and the guard scales the target up (patch mode; never down)
  at once. Its count is handed to the next cycle as a recommendation, so that the scale-down
  stabilisation keeps it as it keeps the planner's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from variant_autoscaler.adapters.guard_signals import build_guard_query, read_guard_signals, signals_for
from variant_autoscaler.adapters.kube import ScaleTarget
from variant_autoscaler.adapters.prometheus import (
    LABEL_MODEL,
    LABEL_NAMESPACE,
    Collector,
    MetricsSnapshot,
    ModelKey,
    PrometheusClient,
    history_query,
)
from variant_autoscaler.api.config import MainConfig
from variant_autoscaler.core.decision import DecisionInputs, EventSpec
from variant_autoscaler.core.demand import forecast_input
from variant_autoscaler.core.forecast import (
    Forecast,
    ForecastConfig,
    ForecastState,
    forecast,
    replay,
    trailing_run,
    update,
)
from variant_autoscaler.core.guard import (
    GuardInput,
    GuardParams,
    GuardVariant,
    guard,
    serving,
    take_room,
)
from variant_autoscaler.core.policy import siblings_starting
from variant_autoscaler.core.status import workload_json
from variant_autoscaler.engine.configs import CycleConfig
from variant_autoscaler.engine.translate import VariantContext, actuation_mode, stabilization_window
from variant_autoscaler.errors import CollectionError, KubeError, ModelError, VariantAutoscalerError
from variant_autoscaler.planner import PlanOutcome, VariantKey

__all__ = [
    "HISTORY_QUERIES",
    "BurstGuard",
    "ForecastBook",
    "GuardAction",
    "ahead_inputs",
    "siblings_starting_of",
    "states_shares",
]

logger = logging.getLogger(__name__)

#: The queries a cycle adds where some model's forecaster is new (no state to resume): one range query
#: of the history of all of them (:meth:`ForecastBook.backfill`), whatever their number.
HISTORY_QUERIES = 1


def _step_seconds(cfg: MainConfig) -> float:
    """How often the forecaster learns: every interval, but not more often than the metrics window
    turns over (rates over overlapping windows are one observation, and fed as several they make a step
    look like a trend)."""
    return max(cfg.interval_seconds, cfg.metrics_window_seconds)


def _forecast_config(cfg: MainConfig) -> ForecastConfig | None:
    if cfg.forecast_quantile <= 0:
        return None
    return cfg.forecast_config(interval_s=_step_seconds(cfg), horizon_s=cfg.forecast_horizon_seconds)


@dataclass(slots=True)
class _Entry:
    state: ForecastState
    updated: datetime | None  # when it last learnt a rate
    found: Forecast | None = None
    shift: EventSpec | None = None  # the Event of the last level shift


class ForecastBook:
    """One forecaster per (model, namespace), restored after a restart from the VAs' status and the
    annotated objects' stored entries."""

    def __init__(self) -> None:
        self._entries: dict[ModelKey, _Entry] = {}
        self._looked_back: set[ModelKey] = set()  # models whose history was read (once a process)

    def restore(self, statuses: Iterable[tuple[ModelKey, Mapping[str, Any]]]) -> None:
        """Take up the state a previous process left in ``status.forecast`` (``statuses``: each VA's
        model key and status), the most advanced one per model, for models not already known."""
        found: dict[ModelKey, _Entry] = {}
        for key, status in statuses:
            raw = status.get("forecast") if isinstance(status, Mapping) else None
            if key in self._entries or not isinstance(raw, Mapping):
                continue
            try:
                state = ForecastState.from_json(raw)
            except ModelError as exc:
                logger.warning("status.forecast of %s/%s is not usable (%s): starting afresh", *key, exc)
                continue
            known = found.get(key)
            if known is None or state.step > known.state.step:
                found[key] = _Entry(state, _time(raw.get("updated")))
        self._entries.update(found)

    def resume(
        self,
        contexts: Sequence[VariantContext],
        snapshot: MetricsSnapshot | None,
        cfg: MainConfig,
        stored: Callable[[VariantContext], Mapping[str, Any] | None] = lambda _: None,
    ) -> None:
        """Take up the state a previous process left for the models of ``contexts``, once a cycle before
        :meth:`backfill` and :meth:`forecast`: in the VAs' ``status.forecast``, and for an annotated
        object (which has no status) the ``forecast`` section ``stored`` gives (its ConfigMap entry).
        Nothing with the forecast off or without metrics this cycle."""
        if cfg.forecast_quantile > 0 and snapshot is not None:
            self.restore(_previous(contexts, stored))

    async def backfill(
        self,
        contexts: Sequence[VariantContext],
        snapshot: MetricsSnapshot | None,
        *,
        client: PrometheusClient | None,
        cfg: MainConfig,
        now: datetime,
    ) -> dict[ModelKey, int]:
        """Warm the forecasters this cycle would start afresh from their models' past: for the models of
        ``contexts`` with metrics now and no state to resume (neither known here nor left by a previous
        process), or whose state is stale (last updated longer ago than the horizon: an operator down
        for a while; its pending forecasts can no longer be scored), one range query of every such
        model's rate over ``FORECAST_HISTORY`` (at most as far back as the forecaster keeps), at the
        forecaster's step, up to one step ago; each learns the run of intervals that ends there. Once
        per model and process: after a failed query, or for a model without history, a new one starts
        afresh and a stale one goes on from its state. Returns how many intervals each model learnt."""
        fcfg = _forecast_config(cfg)
        if fcfg is None or cfg.forecast_history_seconds <= 0 or snapshot is None or client is None:
            return {}
        step = _step_seconds(cfg)
        stale_before = now.timestamp() - (fcfg.steps + 1) * step
        new = [
            key
            for key in sorted(_models(contexts))
            if key not in self._looked_back
            and snapshot.lookup(*key).state == "ok"
            and ((entry := self._entries.get(key)) is None or _older(entry, stale_before))
        ]
        if not new:
            return {}
        self._looked_back.update(new)
        span = min(cfg.forecast_history_seconds, (fcfg.history + fcfg.steps) * step)
        end = now.timestamp() - step
        try:
            series = await client.query_range(
                history_query(cfg.arrival_counter, cfg.metrics_window_seconds, [m for m, _ in new]),
                start=end - span,
                end=end,
                step=step,
            )
        except CollectionError as exc:
            logger.warning("forecast history of %d model(s) not read (%s): they start afresh", len(new), exc)
            return {}
        points = {
            (s.labels.get(LABEL_MODEL, ""), s.labels.get(LABEL_NAMESPACE, "")): s.points for s in series
        }
        out: dict[ModelKey, int] = {}
        for key in new:
            found = points.get(key, ())
            run = trailing_run(found, step)
            if len(run) < 2 or abs(found[-1][0] - end) > 0.5 * step:
                continue  # no recent history: afresh, as before
            stale = key in self._entries
            self._entries[key] = _Entry(replay(run, fcfg), datetime.fromtimestamp(found[-1][0], tz=UTC))
            out[key] = len(run)
            logger.info(
                "forecast of %s/%s %s from %d intervals of its rate in Prometheus (%.3g req/s last)",
                key[1],
                key[0],
                "relearnt (its stored state was stale)" if stale else "warmed",
                len(run),
                run[-1],
            )
        return out

    def update(self, key: ModelKey, rate: float, now: datetime, cfg: MainConfig) -> Forecast | None:
        """Learn ``rate`` (req/s: ``core.demand.forecast_input``) once per interval (or metrics window, if
        longer) and return the forecast (None with the forecast off)."""
        fcfg = _forecast_config(cfg)
        if fcfg is None:
            return None
        entry = self._entries.setdefault(key, _Entry(ForecastState(), None))
        due = entry.updated is None or (now - entry.updated).total_seconds() >= 0.9 * _step_seconds(cfg)
        if due and math.isfinite(rate) and rate >= 0:
            before, expected = entry.state.shifted, entry.found
            entry.state = update(entry.state, rate, fcfg)
            entry.updated = now
            if entry.state.shifted is not None and entry.state.shifted != before:
                was = "none" if expected is None else f"{60.0 * expected.point:.4g} req/min"
                message = (
                    f"demand forecast of {key[0]}: a level shift to {60.0 * rate:.4g} req/min (the "
                    f"forecast was {was}), planned for as the new level, not as a climb "
                    f"(status.forecast.shifted: step {entry.state.shifted})"
                )
                entry.shift = EventSpec("DemandLevelShift", message, "Normal", f"shift|{entry.state.shifted}")
                logger.info("%s in %s", message, key[1])
        entry.found = forecast(entry.state, fcfg)
        return entry.found

    def shift_event(self, key: ModelKey) -> EventSpec | None:
        """The Event for the variants of that model when its latest interval was a level shift."""
        entry = self._entries.get(key)
        if entry is None or entry.state.shifted is None or entry.state.shifted != entry.state.step:
            return None
        return entry.shift

    def holds(self, key: ModelKey) -> bool:
        """Whether the model's forecast holds its plans (the hysteresis between the scale-up and
        scale-down quantiles is informed: past the forecaster's warm-up)."""
        entry = self._entries.get(key)
        return entry is not None and entry.found is not None and entry.found.holds

    def status(self, key: ModelKey) -> dict[str, Any] | None:
        """``status.forecast`` for the VAs of that model: the state and the latest forecast (req/min)."""
        entry = self._entries.get(key)
        if entry is None or entry.state.level is None:
            return None
        body: dict[str, Any] = {"model": key[0], **entry.state.to_json()}
        if entry.updated is not None:
            body["updated"] = entry.updated.isoformat().replace("+00:00", "Z")
        if entry.found is not None:
            body["upperRate"] = f"{60.0 * entry.found.upper:.4g}"
            body["pointRate"] = f"{60.0 * entry.found.point:.4g}"
            body["plannedRate"] = f"{60.0 * entry.found.planned:.4g}"
        return body

    def forecast(
        self,
        contexts: Sequence[VariantContext],
        snapshot: MetricsSnapshot | None,
        cfg: MainConfig,
        now: datetime,
    ) -> dict[ModelKey, float]:
        """One cycle: each model's rate to plan for (req/min: the forecast's upper quantile, held up to its
        scale-down quantile) by (model, namespace), learning this cycle's arrivals (or demand), for the
        models of the VAs and of the annotated HPAs and ScaledObjects in ``contexts`` (after
        :meth:`resume` took up what a previous process left)."""
        if cfg.forecast_quantile <= 0 or snapshot is None:
            return {}
        out: dict[ModelKey, float] = {}
        models = _models(contexts)
        for gone in set(self._entries) - models:  # no variant left (it comes back with its stored state)
            del self._entries[gone]
            self._looked_back.discard(gone)
        for model, namespace in sorted(models):
            lookup = snapshot.lookup(model, namespace)
            if lookup.state != "ok" or lookup.metrics is None:
                continue
            rate = forecast_input(lookup.metrics.arrival_rate, lookup.metrics.offered_rate)
            found = self.update((model, namespace), rate, now, cfg)
            if found is not None:
                out[(model, namespace)] = found.planned * 60.0
        return out


def _older(entry: _Entry, before: float) -> bool:
    """Whether ``entry`` last learnt a rate before ``before`` (epoch seconds; unknown: not older)."""
    return entry.updated is not None and entry.updated.timestamp() < before


def _models(contexts: Sequence[VariantContext]) -> set[ModelKey]:
    """The (model, namespace) of every VA and annotated object in ``contexts``."""
    return {
        (c.model_id, c.key[0])
        for c in contexts
        if c.model_id and (c.va is not None or c.annotated is not None)
    }


def _previous(
    contexts: Sequence[VariantContext], stored: Callable[[VariantContext], Mapping[str, Any] | None]
) -> Iterable[tuple[ModelKey, Mapping[str, Any]]]:
    """Each variant's model key and the state a previous process left for it: a VA's status, an
    annotated object's stored entry (as ``{"forecast": ...}``, the status' shape)."""
    for c in contexts:
        if c.va is not None:
            yield (c.va.spec.model_id, c.key[0]), c.body.get("status") or {}
        elif c.annotated is not None and c.model_id and (found := stored(c)) is not None:
            yield (c.model_id, c.key[0]), {"forecast": found}


def states_shares(cycle: CycleConfig) -> bool:
    """Whether some service class (or the queueing-model ConfigMap) states attainment or percentile
    targets: then the cycle reads the tail model's inputs."""
    if any(t.slo.is_tail for c in cycle.classes.classes for t in c.targets):
        return True
    keys = ("attainment", "ttft_percentile", "itl_percentile")
    return any(
        isinstance(v := values.get(k), int | float) and v > 0
        for _, values in cycle.queueing.entries
        for k in keys
    )


def siblings_starting_of(contexts: Sequence[VariantContext], outcome: PlanOutcome) -> dict[VariantKey, int]:
    """Per variant planned ahead, the replicas of its model's other variants (same namespace) still
    starting or asked for by this plan (core/policy.py rule 3d: make before break)."""
    found = siblings_starting(
        (
            c.key,
            (c.key[0], c.va.spec.model_id),
            max(c.target.spec_replicas, p.replicas if p else 0),
            c.target.ready_replicas or 0,
        )
        for c in contexts
        if c.va is not None and c.target is not None
        for p in [outcome.decisions.get(c.key)]
    )
    return {key: n for key, n in found.items() if key in outcome.ahead}


def ahead_inputs(
    guard: BurstGuard,
    forecasts: ForecastBook,
    ctx: VariantContext,
    inputs: DecisionInputs,
    *,
    cfg: MainConfig,
    siblings: int = 0,
) -> DecisionInputs:
    """A variant planned for attainment targets: its model's forecast goes into its status, replicas
    still starting count as supply (no waiting for them before a larger plan: the plan covers
    start-up + one interval), a scale-down waits while ``siblings`` replicas of the model's other
    variants are still starting (make before break), a scale-up by the burst guard since the last
    cycle joins the recommendations, so that scale-down stabilisation keeps it, and once the forecast's
    hysteresis holds the model's plans, the shorter default scale-down window applies (until then, a
    new model's first plans, and its initial replicas, keep the longer one)."""
    assert ctx.va is not None
    model = (ctx.va.spec.model_id, ctx.key[0])
    previous = dict(inputs.previous)
    action = guard.actions().get(ctx.key)
    if action is not None:
        previous["recommendations"] = [
            *(previous.get("recommendations") or []),
            {"time": action.time.isoformat().replace("+00:00", "Z"), "numReplicas": action.replicas},
        ]
    return replace(
        inputs,
        previous=previous,
        pending_timeout_seconds=0.0,
        siblings_starting=siblings,
        forecast=forecasts.status(model),
        workload=workload_json(ctx.planned.workload)
        if ctx.planned is not None and ctx.planned.workload is not None
        else None,
        stabilization_seconds=stabilization_window(
            ctx.va, cfg, actuation_mode(ctx.va, cfg), ahead=forecasts.holds(model)
        ),
    )


def _time(raw: object) -> datetime | None:
    if not isinstance(raw, str):
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class GuardAction:
    """A scale-up the guard made: when, to how many, and why (for the next cycle's recommendations)."""

    time: datetime
    replicas: int
    reason: str


@dataclass(slots=True)
class _Armed:
    """One guarded variant as the last cycle left it."""

    key: VariantKey
    model: ModelKey
    target: ScaleTarget
    rate_per_replica: float | None
    planned: int
    max_replicas: int | None
    room: int | None

    def starting_ready_at(self, asked: Sequence[tuple[float, int]], startup_s: float) -> tuple[float, ...]:
        """When its replicas not ready at the last cycle's read are expected to be ready: each
        ``startup_s`` after the scale-up that asked for it (``asked``: time and replicas added, oldest
        first; the newest are the ones still starting). None of a variant's pending pods beyond the
        GPUs its plan may hold (limited mode) is among them; one whose scale-up is not known (asked
        before this process led, or long ago) has no expected time: it still counts as supply, but
        the guard credits nothing it serves against the backlog (core/guard.py)."""
        ready = self.target.ready_replicas or 0
        count = max(0, serving(self.target.spec_replicas, ready, self.planned, self.room) - ready)
        out: list[float] = []
        for at, added in reversed(asked):
            out.extend([at + startup_s] * min(added, count - len(out)))
            if len(out) >= count:
                break
        return tuple(sorted(out))


class BurstGuard:
    """The guard's loop (see the module doc). :meth:`arm` after every cycle; :meth:`run` as a task."""

    def __init__(
        self,
        *,
        patch: Callable[[ScaleTarget, int], Any],
        collector: Callable[[], Collector | None],
        leading: Callable[[], bool],
        clock: Callable[[], datetime],
        on_scale: Callable[[VariantKey, int, str], None] | None = None,
    ) -> None:
        self._patch = patch
        self._collector = collector
        self._leading = leading
        self._clock = clock
        self._on_scale = on_scale
        self._armed: dict[VariantKey, _Armed] = {}
        # Per variant, the scale-ups this process saw (time, replicas added), oldest first: when its
        # replicas still starting are expected to be ready.
        self._asked: dict[VariantKey, list[tuple[float, int]]] = {}
        self._cfg = MainConfig()
        self._actions: dict[VariantKey, GuardAction] = {}
        self.ticks = 0
        self.queries = 0

    def arm(
        self,
        cfg: MainConfig,
        outcome: PlanOutcome,
        variants: Iterable[tuple[VariantKey, str, ScaleTarget | None, int | None, str]],
    ) -> None:
        """After a cycle: the variants to guard (``variants``: key, model, scale target, maxReplicas and
        actuation mode of each), with the rate one replica sustains from ``outcome``."""
        self._cfg = cfg
        self._actions.clear()  # handed to the cycle that just ran
        armed: dict[VariantKey, _Armed] = {}
        decisions = outcome.plan.decisions if outcome.plan is not None else {}
        for key, model, target, max_replicas, mode in variants:
            if key not in outcome.ahead or target is None or mode != "patch" or target.controller:
                continue
            d = decisions.get(f"{key[0]}/{key[1]}")
            rate = d.rate_per_replica if d is not None and d.rate_per_replica > 0 else None
            planned = d.replicas if d is not None else 0
            armed[key] = _Armed(
                key, (model, key[0]), target, rate, planned, max_replicas, outcome.room.get(key)
            )
            # Newly guarded, its replicas beyond those ready are taken as asked for now (no credit).
            before = self._armed.get(key)
            prior = before.target.spec_replicas if before is not None else target.ready_replicas or 0
            if target.spec_replicas > prior:
                self._scaled_up(key, target.spec_replicas - prior)
        self._armed = armed
        self._asked = {key: asked for key, asked in self._asked.items() if key in armed}

    def _scaled_up(self, key: VariantKey, added: int) -> None:
        """Remember a scale-up of ``key`` now (forgetting those that are long past start-up)."""
        now = self._clock().timestamp()
        keep = now - max(2.0 * self._cfg.startup_seconds, 600.0)
        asked = [(at, n) for at, n in self._asked.get(key, []) if at >= keep]
        self._asked[key] = [*asked, (now, added)]

    def actions(self) -> Mapping[VariantKey, GuardAction]:
        """The scale-ups made since the last cycle (it records them as recommendations)."""
        return dict(self._actions)

    async def run(self) -> None:
        """Tick every ``BURST_GUARD_INTERVAL`` until cancelled; a failed tick is logged and the next one
        tried (the cycles go on regardless)."""
        while True:
            period = self._cfg.guard_interval_seconds
            await asyncio.sleep(period if period > 0 else 5.0)
            if period <= 0 or not self._armed or not self._leading():
                continue
            try:
                await self.tick()
            except VariantAutoscalerError as exc:
                logger.warning("burst guard: %s", exc)

    async def tick(self) -> dict[VariantKey, int]:
        """One look at every guarded model: one query, then the scale-ups it asks for."""
        collector = self._collector()
        if collector is None or not self._armed:
            return {}
        self.ticks += 1
        self.queries += 1
        samples = await collector.client.query(
            build_guard_query(self._cfg.metrics_window_seconds, self._cfg.guard_rise_window_seconds)
        )
        signals = read_guard_signals(samples)
        now = self._clock()
        by_model: dict[ModelKey, list[_Armed]] = {}
        for armed in self._armed.values():
            by_model.setdefault(armed.model, []).append(armed)
        scaled: dict[VariantKey, int] = {}
        for (model, namespace), members in sorted(by_model.items()):
            found = signals_for(signals, model, namespace)
            if found is None:
                continue
            ready = sum(m.target.ready_replicas or 0 for m in members)
            kv_ready = found.kv if ready else 0.0
            decision = guard(
                GuardInput(
                    now=now.timestamp(),
                    completion_rate=found.completions,
                    waiting=found.waiting,
                    waiting_growth=found.growth,
                    window_s=self._cfg.metrics_window_seconds,
                    kv_usage=kv_ready,
                    drain_s=self._cfg.startup_seconds,
                    completion_rate_short=found.completions_short,
                    waiting_growth_short=found.growth_short,
                    short_window_s=self._cfg.guard_rise_window_seconds,
                    variants=tuple(
                        GuardVariant(
                            key=f"{m.key[0]}/{m.key[1]}",
                            desired=m.target.spec_replicas,
                            ready=m.target.ready_replicas or 0,
                            rate_per_replica=m.rate_per_replica,
                            planned=m.planned,
                            starting_ready_at=m.starting_ready_at(
                                self._asked.get(m.key, ()), self._cfg.startup_seconds
                            ),
                            max_replicas=m.max_replicas,
                            room=m.room,
                        )
                        for m in members
                    ),
                ),
                GuardParams(),
            )
            for name, replicas in decision.replicas.items():
                key = (name.split("/", 1)[0], name.split("/", 1)[1])
                armed = self._armed[key]
                if replicas <= armed.target.spec_replicas or not self._leading():
                    continue
                try:
                    moved = await self._patch(armed.target, replicas)
                except KubeError as exc:
                    logger.warning("burst guard: scaling %s/%s failed: %s", *key, exc)
                    continue
                if moved is not None:
                    continue  # someone changed it since the cycle read it: the next cycle decides
                logger.info("%s/%s: %s", key[0], key[1], decision.reason)
                added = replicas - armed.target.spec_replicas
                if armed.room is not None:
                    armed.planned, armed.room = take_room(armed.planned, armed.room, added)
                self._scaled_up(key, added)
                armed.target = replace(armed.target, spec_replicas=replicas)
                self._actions[key] = GuardAction(now, replicas, decision.reason)
                if self._on_scale is not None:
                    self._on_scale(key, replicas, decision.reason)
                scaled[key] = replicas
        return scaled

    async def aclose(self, task: asyncio.Task[None] | None) -> None:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
