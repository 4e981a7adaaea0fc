"""One global cycle: collect → analyze → optimize → policy → actuate → status.

The engine knows nothing of kopf. ``handlers.py`` builds it at startup (:class:`Runtime`) with the
nodes' GPU facts (a kopf index) and tells it about node changes (:meth:`Engine.notify_node`); the
runtime keeps the VariantAutoscalings in an informer of its own
(:class:`~variant_autoscaler.controller.informer.Informer`, which calls :meth:`Engine.notify_va`), and runs
:meth:`Engine.run_forever` as one background task.

A cycle runs every ``GLOBAL_OPT_INTERVAL`` and, debounced, soon after a VariantAutoscaling is created,
changed or deleted, one of the ConfigMaps changes, or the GPU inventory changes. Only the leader runs
cycles. Per cycle, whatever the number of variants: one list of the operator namespace's ConfigMaps
(:mod:`.configs`) and, cluster-wide, one of the namespaces (``wva.llmd.ai/exclude``), two GETs per
namespace holding variants (its own saturation and scale-to-zero ConfigMaps), one list of HPAs and one
of KEDA ScaledObjects (annotated ones are variants too, :mod:`.annotated`), one list of scale targets
per namespace (one in all for a cluster-wide operator),
fixed sets of PromQL queries (the load; the profile learning's pod windows, :mod:`.learning`), one plan
for all variants, and then for each variant at most one scale patch and one status write (with its
resourceVersion, retried on 409 with a fresh read), plus Events when a decision or the profile source
changes; at most one write of the annotated objects' learned profiles (one ConfigMap). Beside the
cycles, a fast loop scales variants from zero (:mod:`.zero`).

With ``CONTROLLER_INSTANCE`` set, only the VAs (and annotated objects) labelled
``wva.llmd.ai/controller-instance`` with its value are managed; unset, every one. A cluster-wide
operator leaves alone every variant of a namespace annotated ``wva.llmd.ai/exclude: "true"``.

Everything a cycle needs from the past lives in the VariantAutoscaling status (the last decision, the
recommendations of the stabilisation window, the last scale time, the last time metrics were good, the
learned profile), so a restarted operator continues where the previous one stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from variant_autoscaler.adapters import inventory as inv
from variant_autoscaler.adapters.burstiness import collect_tail_inputs
from variant_autoscaler.adapters.exporter import Exporter, VariantGauges
from variant_autoscaler.adapters.kube import (
    KubeClient,
    NotFoundError,
    hpa_targets,
    selector_matches,
    target_from_deployment,
    target_from_scale,
)
from variant_autoscaler.adapters.prometheus import Collector, MetricsSnapshot, PrometheusClient
from variant_autoscaler.api.config import MainConfig, PrometheusConfig
from variant_autoscaler.api.v1alpha1 import labels_select_instance
from variant_autoscaler.controller.events import EventRecorder
from variant_autoscaler.core.decision import EventSpec, decide, report, report_invalid
from variant_autoscaler.core.model import AcceleratorType
from variant_autoscaler.core.workload import Workload
from variant_autoscaler.engine.actuate import Actuator
from variant_autoscaler.engine.ahead import (
    BurstGuard,
    ForecastBook,
    ahead_inputs,
    siblings_starting_of,
    states_shares,
)
from variant_autoscaler.engine.annotated import AnnotatedSource, Listed
from variant_autoscaler.engine.annotated_state import AnnotatedState
from variant_autoscaler.engine.configs import ConfigReader, CycleConfig
from variant_autoscaler.engine.learning import ProfileLearner
from variant_autoscaler.engine.translate import (
    CycleFacts,
    SpecCache,
    VariantContext,
    actuation_mode,
    assign_pods,
    decision_inputs,
    plan_variant,
)
from variant_autoscaler.engine.zero import Sleeper, ZeroWaker
from variant_autoscaler.errors import CollectionError, ConfigError, KubeError, VariantAutoscalerError
from variant_autoscaler.namespace_caps import gpu_usage, namespace_cap, with_quotas
from variant_autoscaler.planner import (
    Planner,
    PlanOutcome,
    PlanRequest,
    VariantKey,
    optimizer_config,
)
from variant_autoscaler.settings import Settings

__all__ = ["CycleReport", "Engine", "LeaderLike", "VariantOutcome"]

logger = logging.getLogger(__name__)


# --- per-cycle results ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VariantOutcome:
    key: VariantKey
    # Whether the status was written; False with ``unchanged`` when only figures and timestamps changed
    # and STATUS_REFRESH_INTERVAL had not elapsed.
    written: bool
    decision: int | None = None
    unchanged: bool = False
    mode: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CycleReport:
    started: datetime
    duration_seconds: float
    variants: int
    promql_queries: int
    plan_status: str
    outcomes: tuple[VariantOutcome, ...]
    config_error: str | None = None
    metrics_error: str | None = None


# --- the engine ----------------------------------------------------------------------------------------


class LeaderLike(Protocol):
    def is_leader(self) -> bool: ...

    async def run(self) -> None: ...

    async def release(self) -> None: ...


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Engine:
    """Runs the cycles (see the module doc): reads, plans, decides per variant, writes."""

    def __init__(
        self,
        settings: Settings,
        *,
        kube: KubeClient,
        exporter: Exporter,
        events: EventRecorder,
        leader: LeaderLike,
        planner: Planner,
        vas: Callable[[], Iterable[Mapping[str, Any]]],
        nodes: Callable[[], Iterable[inv.NodeGPUs]],
        clock: Callable[[], datetime] = _utcnow,
        collector_factory: Callable[[PrometheusConfig], Collector] | None = None,
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.exporter = exporter
        self.events = events
        self.leader = leader
        self.planner = planner
        self._vas = vas
        self._nodes = nodes
        self._clock = clock
        self._collector_factory = collector_factory or self._default_collector
        self._collector: Collector | None = None
        self._collector_cfg: PrometheusConfig | None = None
        self._wake = asyncio.Event()
        self._config = MainConfig()
        self._va_fingerprints: dict[str, tuple[Any, ...]] = {}
        self._node_fingerprints: dict[str, Any] = {}
        self._cm_versions: dict[str, str] = {}
        self._semaphore = asyncio.Semaphore(settings.kube_concurrency)
        self.last_completed: float | None = None  # time.monotonic() of the last completed cycle
        self.last_report: CycleReport | None = None
        self._last_tick = time.monotonic()
        # time.monotonic() when this process last became the leader (None while it is not).
        self._leading_since: float | None = None
        self.cycles_completed = 0
        self._gauges: list[VariantGauges] = []
        self._siblings: dict[VariantKey, int] = {}  # this cycle's make-before-break counts (engine/ahead.py)
        self.specs = SpecCache()
        # Learned profiles and forecasts of annotated objects (no status): one ConfigMap.
        self.annotated_state = AnnotatedState(settings, kube)
        # Profiles learned online, and which profile sizes each variant (engine/learning.py).
        self.learning = ProfileLearner(settings, self.annotated_state)
        self.configs = ConfigReader(settings, kube)
        self.annotated = AnnotatedSource(settings, kube)
        exporter.decisions.configure(
            controller_instance=settings.controller_instance,
            inferno=settings.emit_inferno_metrics,
            wva=settings.emit_wva_metrics,
        )
        self.zero = ZeroWaker(
            kube=kube,
            events=events,
            collector=lambda: self._collector,
            leading=self._leading,
            trigger=self.trigger,
            interval=settings.scale_from_zero_interval_seconds,
        )
        self.actuator = Actuator(
            settings,
            kube=kube,
            exporter=exporter,
            events=events,
            leading=self._leading,
            trigger=self.trigger,
        )
        # Ahead of the load (classes with attainment targets): the forecasts, and the burst guard's loop.
        self.forecasts = ForecastBook()
        self.guard = BurstGuard(
            patch=self.actuator.patch_replicas,
            collector=lambda: self._collector,
            leading=self._leading,
            clock=self._clock,
            on_scale=self._guard_scaled,
        )

    def _leading(self) -> bool:
        return self.leader.is_leader()  # looked up each time: the leader may be replaced (tests do)

    # --- triggers ---------------------------------------------------------------------------------

    def trigger(self, reason: str) -> None:
        if not self._wake.is_set():
            logger.debug("cycle requested: %s", reason)
        self._wake.set()

    def notify_va(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A VariantAutoscaling event; triggers a cycle when its spec, labels or existence changed."""
        meta = body.get("metadata") or {}
        uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        if event_type == "DELETED":
            self._va_fingerprints.pop(uid, None)
            self.trigger(f"VariantAutoscaling {meta.get('namespace')}/{meta.get('name')} deleted")
            return
        labels = meta.get("labels") or {}
        fingerprint = (meta.get("generation"), tuple(sorted(labels.items())), meta.get("deletionTimestamp"))
        if self._va_fingerprints.get(uid) != fingerprint:
            self._va_fingerprints[uid] = fingerprint
            self.trigger(f"VariantAutoscaling {meta.get('namespace')}/{meta.get('name')} changed")

    def notify_node(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A Node event; triggers a cycle when the node's GPU facts changed."""
        name = str((body.get("metadata") or {}).get("name"))
        if event_type == "DELETED":
            if self._node_fingerprints.pop(name, None):
                self.trigger(f"node {name} deleted")
            return
        node = inv.node_gpus(body)
        fingerprint = (node.usable, node.gpus) if node.gpus else None
        if self._node_fingerprints.get(name) != fingerprint:
            had = self._node_fingerprints.get(name)
            self._node_fingerprints[name] = fingerprint
            if had is not None or fingerprint is not None:
                self.trigger(f"GPU inventory of node {name} changed")

    def notify_configmap(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        name = str(meta.get("name"))
        if name not in self.settings.wva_config_map_names:
            return
        data = body.get("data") or {}
        digest = hashlib.sha256(repr(sorted(data.items())).encode()).hexdigest()
        version = "deleted" if event_type == "DELETED" else digest
        if self._cm_versions.get(name) != version:
            first = name not in self._cm_versions
            self._cm_versions[name] = version
            if not first:
                self.trigger(f"ConfigMap {name} changed")

    # --- the loop -----------------------------------------------------------------------------------

    async def run_forever(self) -> None:
        """Run cycles until cancelled: at once, then every interval or soon after a change (and the
        scale-from-zero loop and the burst guard's loop beside them)."""
        waker = asyncio.create_task(self.zero.run(), name="variant-autoscaler scale from zero")
        guarding = asyncio.create_task(self.guard.run(), name="variant-autoscaler burst guard")
        try:
            await self._cycles()
        finally:
            waker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waker
            await self.guard.aclose(guarding)

    def _guard_scaled(self, key: VariantKey, replicas: int, reason: str) -> None:
        self.exporter.scalings.labels(
            variant_name=key[1], namespace=key[0], direction="up", reason="guard"
        ).inc()

    async def _cycles(self) -> None:
        next_due = time.monotonic()
        while True:
            self._last_tick = time.monotonic()
            timeout = max(0.0, next_due - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
            if self._wake.is_set():
                await asyncio.sleep(self.settings.debounce_seconds)
                self._wake.clear()
            self._last_tick = time.monotonic()
            if not self.leader.is_leader():
                self._leading_since = None
                self.exporter.leader.set(0)
                next_due = time.monotonic() + min(
                    self.settings.retry_period_seconds, self._config.interval_seconds
                )
                continue
            self.exporter.leader.set(1)
            started = time.monotonic()
            if self._leading_since is None:
                self._leading_since = started
                self.learning.new_term()  # another process may have led (and learned) meanwhile
            try:
                await self.run_cycle()
            except VariantAutoscalerError as exc:
                self.exporter.cycles.labels(result="error").inc()
                logger.error("cycle failed: %s", exc)
            except Exception:
                # A bug, not a condition of the cluster: keep the traceback, count it, try again next
                # interval. Cycles that keep failing stop completing, and the liveness probe fails.
                self.exporter.cycles.labels(result="error").inc()
                logger.exception("cycle failed unexpectedly")
            next_due = started + self._config.interval_seconds

    def health(self) -> dict[str, Any]:
        """For the liveness probe: raises when cycles stopped completing (or the loop stalled)."""
        now = time.monotonic()
        max_age = self.settings.max_cycle_age(self._config.interval_seconds)
        if now - self._last_tick > max_age:
            raise VariantAutoscalerError(f"the cycle loop has not run for {now - self._last_tick:.0f}s")
        leader = self.leader.is_leader()
        # Cycles are due from the moment this process leads: one that leads and never completes a
        # cycle (every one fails) is as stuck as one whose cycles stopped.
        due_since = max(
            (t for t in (self.last_completed, self._leading_since) if t is not None), default=None
        )
        if leader and due_since is not None and now - due_since > max_age:
            if self.last_completed is None or self.last_completed < due_since:
                raise VariantAutoscalerError(
                    f"no cycle has completed since leading for {now - due_since:.0f}s"
                )
            raise VariantAutoscalerError(f"no cycle has completed for {now - due_since:.0f}s")
        return {
            "leader": leader,
            "cycles": self.cycles_completed,
            "last_cycle_age_seconds": None
            if self.last_completed is None
            else round(now - self.last_completed, 1),
        }

    async def aclose(self) -> None:
        if self._collector is not None:
            await self._collector.client.aclose()
            self._collector = None

    # --- one cycle ----------------------------------------------------------------------------------

    def _default_collector(self, cfg: PrometheusConfig) -> Collector:
        return Collector(
            PrometheusClient(
                cfg,
                timeout=self.settings.prometheus_timeout_seconds,
                retries=self.settings.prometheus_retries,
                max_response_bytes=self.settings.prometheus_max_response_bytes,
            )
        )

    async def _collector_for(self, cfg: PrometheusConfig) -> Collector:
        if self._collector is None or self._collector_cfg != cfg:
            # Replaced before anything is awaited: the cycle's concurrent reads share one collector.
            old, self._collector = self._collector, None
            self._collector = self._collector_factory(cfg)
            self._collector_cfg = cfg
            if old is not None:
                await old.client.aclose()
        return self._collector

    def _managed(self, ctx: VariantContext) -> bool:
        meta = ctx.body.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return False
        return labels_select_instance(meta.get("labels"), self.settings.controller_instance)

    async def run_cycle(self) -> CycleReport:
        self.specs.new_cycle()
        started_wall = self._clock()
        started = time.monotonic()
        queries_before = self._collector.client.queries_issued if self._collector else 0

        # 1. Configuration, and the HPAs and ScaledObjects (annotated ones are variants).
        cycle, listed = await asyncio.gather(self.configs.read(), self.annotated.read())
        self._config = cfg = cycle.main
        config_error = cycle.error

        # 2. The variants: the VAs from the index (those this controller instance manages), and the
        # annotated objects; none in a namespace annotated wva.llmd.ai/exclude (left alone). Then the
        # ConfigMaps of their own namespaces (namespace-local configuration).
        contexts = [
            c
            for c in (self.specs.context(body) for body in self._vas())
            if self._managed(c) and c.key[0] not in cycle.excluded
        ]
        annotated, refused = self.annotated.contexts(
            listed, taken={(c.key[0], c.metrics_name) for c in contexts}, excluded=cycle.excluded
        )
        for obj, message in refused:
            await self._refuse(obj, message, started_wall)
        everything = [*contexts, *annotated]
        cycle = await self.configs.read_local(cycle, {c.key[0] for c in everything})
        tail = states_shares(cycle)  # some class states attainment: its variants are planned ahead

        # 3. Scale targets and the metrics (fixed query sets for everything: the model's load, the
        # profile learning's pod windows): independent reads, made at the same time.
        _, (snapshot, metrics_error), (windows, _) = await asyncio.gather(
            self._read_targets(everything),
            self._collect(cfg, started_wall, self._retentions(everything, cycle), tail=tail),
            self.learning.collect(
                lambda: self._collector_for(cfg.prometheus), started_wall.timestamp(), cfg.interval_seconds
            ),
        )
        hpas = self._hpas(listed, everything)

        # 4. Plan: with each model's demand forecast (learnt once per interval, resumed from the status,
        # or for a model new to this process with no state to resume, warmed from its history).
        assign_pods(everything, snapshot)
        self.annotated_state.load(everything, cycle.listed)
        self.learning.apply(everything, windows, started_wall, cycle.queueing)
        self.forecasts.resume(everything, snapshot, cfg, self.annotated_state.forecast)
        client = self._collector.client if self._collector is not None else None
        if tail:  # (mean classes are never planned for the forecast: no history to read for them)
            await self.forecasts.backfill(everything, snapshot, client=client, cfg=cfg, now=started_wall)
        ahead = self.forecasts.forecast(everything, snapshot, cfg, started_wall)
        queries = 0 if client is None else client.queries_issued - queries_before
        self.exporter.promql_queries.inc(queries)
        self.exporter.promql_queries_last_cycle.set(queries)
        self._plan_variants(everything, snapshot, cycle, ahead)
        outcome = await self._plan(everything, cycle, config_error)
        self._siblings = siblings_starting_of(contexts, outcome)

        # 5. Policy, actuation, status and Events, per variant.
        self._gauges = []

        facts = CycleFacts(outcome, cfg, config_error, metrics_error, started_wall, hpas)

        async def one(ctx: VariantContext) -> VariantOutcome:
            async with self._semaphore:
                return await self._reconcile(ctx, facts)

        outcomes = await asyncio.gather(*(one(c) for c in contexts))
        for ctx in annotated:
            await self._reconcile_annotated(ctx, replace(facts, hpas={}))
        await self.annotated_state.persist(
            annotated, self.forecasts.status, started_wall, cfg.status_refresh_seconds
        )
        self.zero.update(self._sleepers(everything, cfg, cycle.accelerators.accelerators))
        self._arm_guard(contexts, outcomes, outcome, cfg)

        # 6. Exported gauges, cycle metrics.
        self.exporter.decisions.replace(self._gauges)
        duration = time.monotonic() - started
        self.exporter.cycle_duration.observe(duration)
        self.exporter.last_cycle_duration.set(duration)
        self.exporter.cycles.labels(result="ok").inc()
        self.exporter.last_cycle.set(time.time())
        self.exporter.variants.set(len(everything))
        self.last_completed = time.monotonic()
        self.cycles_completed += 1
        report = CycleReport(
            started=started_wall,
            duration_seconds=duration,
            variants=len(everything),
            promql_queries=queries,
            plan_status=outcome.status,
            outcomes=tuple(outcomes),
            config_error=config_error,
            metrics_error=metrics_error,
        )
        self.last_report = report
        logger.info(
            "cycle done: %d variants in %.3fs, %d PromQL queries, plan %s%s%s",
            len(everything),
            duration,
            queries,
            outcome.status,
            f"; config error: {config_error}" if config_error else "",
            f"; metrics error: {metrics_error}" if metrics_error else "",
        )
        return report

    # --- cycle steps --------------------------------------------------------------------------------

    async def _collect(
        self, cfg: MainConfig, now: datetime, retentions: Sequence[float] = (), *, tail: bool = False
    ) -> tuple[MetricsSnapshot | None, str | None]:
        """The cycle's metrics, or why there are none; with ``tail`` (some class states attainment
        targets) also every model's burstiness and request lengths (a fixed set of queries more)."""
        try:
            collector = await self._collector_for(cfg.prometheus)
            snapshot, inputs = await asyncio.gather(
                collector.collect(
                    now=now.timestamp(),
                    window_seconds=cfg.metrics_window_seconds,
                    staleness_seconds=cfg.metrics_staleness_seconds,
                    drain_seconds=cfg.queue_drain_seconds,
                    retention_periods=retentions,
                    arrival_counter=cfg.arrival_counter,
                ),
                collect_tail_inputs(collector.client, counter=cfg.burstiness_counter)
                if tail
                else asyncio.sleep(0, {}),
                return_exceptions=True,
            )
        except ConfigError as exc:
            return None, str(exc)
        if isinstance(snapshot, BaseException):
            if isinstance(snapshot, CollectionError | ConfigError):
                return None, str(snapshot)
            raise snapshot
        if isinstance(inputs, CollectionError):
            # The tail model then assumes exponential lengths and Poisson arrivals: no reason to stop.
            logger.warning("burstiness and request lengths not read this cycle: %s", inputs)
        elif isinstance(inputs, BaseException):
            raise inputs
        elif inputs:
            snapshot = replace(
                snapshot,
                workloads={key: Workload(t.lengths, t.burstiness) for key, t in inputs.items()},
            )
        return snapshot, None

    @staticmethod
    def _retentions(contexts: Sequence[VariantContext], cycle: CycleConfig) -> list[float]:
        """The scale-to-zero retention periods to query: one query each, for the models that may go to
        zero (usually one period, or none)."""
        periods = set()
        for ctx in contexts:
            if ctx.model_id is not None:
                zero = cycle.zero_for(ctx.model_id, ctx.key[0])
                if zero.enabled:
                    periods.add(zero.retention_seconds)
        return sorted(periods)

    def _plan_variants(
        self,
        contexts: Sequence[VariantContext],
        snapshot: MetricsSnapshot | None,
        cycle: CycleConfig,
        ahead: Mapping[tuple[str, str], float] | None = None,
    ) -> None:
        """Each variant's planner input; a model's variants share its saturation analyzers (V2 when all
        of them are annotated objects, V1 otherwise, unless the saturation ConfigMap names them)."""
        groups: dict[tuple[str, str], list[VariantContext]] = {}
        for ctx in contexts:
            if ctx.model_id is not None:
                groups.setdefault((ctx.key[0], ctx.model_id), []).append(ctx)
        for (namespace, model), members in groups.items():
            only_annotated = all(c.annotated is not None for c in members)
            saturation = cycle.saturation_for(namespace)
            settings = saturation.for_model(model, namespace, annotated=only_annotated)
            retention = cycle.zero_for(model, namespace).retention_seconds
            for ctx in members:
                plan_variant(
                    ctx,
                    snapshot,
                    cycle,
                    analyzers=settings.analyzers,
                    priority=settings.priority,
                    woken=self.zero.woken_within(ctx.key, retention),
                    ahead=ahead,
                )

    async def _read_targets(self, contexts: Sequence[VariantContext]) -> None:
        wanted = [c for c in contexts if c.target_ref is not None and not c.invalid]
        deployments: dict[tuple[str, str], Mapping[str, Any]] = {}

        def is_deployment(ctx: VariantContext) -> bool:
            ref = ctx.target_ref
            return ref is not None and ref[:2] == ("apps/v1", "Deployment")

        namespaces = sorted({c.key[0] for c in wanted if is_deployment(c)})
        if namespaces:
            try:
                if self.settings.clusterwide and len(namespaces) > 1:
                    listed = await self.kube.list_deployments(None)
                else:
                    listed = [
                        d
                        for lists in await asyncio.gather(
                            *(self.kube.list_deployments(ns) for ns in namespaces)
                        )
                        for d in lists
                    ]
            except KubeError as exc:
                for c in wanted:
                    c.target_error = f"cannot list Deployments: {exc}"
                return
            for dep in listed:
                meta = dep.get("metadata") or {}
                deployments[(str(meta.get("namespace")), str(meta.get("name")))] = dep

        async def other(ctx: VariantContext) -> None:
            assert ctx.target_ref is not None
            api_version, kind, name = ctx.target_ref
            try:
                async with self._semaphore:
                    obj = await self.kube.get_object(api_version, kind, ctx.key[0], name)
                    scale = await self.kube.get_scale(api_version, kind, ctx.key[0], name)
                ctx.target = target_from_scale(api_version, kind, obj, scale)
            except NotFoundError:
                ctx.target_error = f"{kind} {ctx.key[0]}/{name} not found"
                ctx.target_found = False
            except KubeError as exc:
                ctx.target_error = f"cannot read {kind} {ctx.key[0]}/{name}: {exc}"

        others = []
        for ctx in wanted:
            if is_deployment(ctx):
                assert ctx.target_ref is not None
                name = ctx.target_ref[2]
                found = deployments.get((ctx.key[0], name))
                if found is None:
                    ctx.target_error = f"Deployment {ctx.key[0]}/{name} not found"
                    ctx.target_found = False
                else:
                    ctx.target = target_from_deployment(
                        {"apiVersion": "apps/v1", "kind": "Deployment", **found}
                    )
            else:
                others.append(other(ctx))
        await asyncio.gather(*others)

    def _hpas(self, listed: Listed, contexts: Sequence[VariantContext]) -> dict[tuple[str, str, str], str]:
        """The targets HPAs manage (patch mode refuses to fight them)."""
        if listed.hpa_error is None:
            return hpa_targets(listed.hpas)
        cfg = self._config
        if not any(c.va is not None and actuation_mode(c.va, cfg) == "patch" for c in contexts):
            return {}
        # Without knowing the HPAs, refusing to patch is the safe choice: mark every target as owned.
        logger.warning(
            "cannot list HorizontalPodAutoscalers; patch mode paused this cycle: %s", listed.hpa_error
        )
        return {
            (c.key[0], c.target.kind, c.target.name): "(unknown: cannot list HPAs)"
            for c in contexts
            if c.target is not None
        }

    async def _plan(
        self, contexts: Sequence[VariantContext], cycle: CycleConfig, config_error: str | None
    ) -> PlanOutcome:
        # Variants without good metrics go in as held: not re-planned, but their GPUs count.
        planned = tuple(c.planned for c in contexts if c.planned is not None)
        cfg = cycle.main
        if config_error is not None:
            self.exporter.set_optimizer_status("config_error")
            return PlanOutcome(status="config_error", solve_seconds=0.0, decisions={})
        accelerators = cycle.accelerators.accelerators
        # WVA's limiter (the saturation ConfigMap's default entry; ours is one global plan): enableLimiter
        # with gpu-inventory is our limited mode, a quota caps the GPUs of a type on top of it.
        limits = cycle.saturation.for_model("", "")
        quotas = limits.gpu_quotas()
        per_namespace = {
            ns: quota
            for ns in sorted({v.key[0] for v in planned})
            if (quota := limits.namespace_quota(ns)) is not None
        }
        capacity: dict[str, int] | None = None
        if cfg.optimizer_mode == "limited" or limits.limited_mode or quotas or per_namespace:
            try:
                capacity = with_quotas(await self._capacity(contexts), quotas, accelerators)
            except CollectionError as exc:
                self.exporter.set_optimizer_status("error")
                return PlanOutcome(
                    status="error",
                    solve_seconds=0.0,
                    decisions={},
                    failures={v.key: f"GPU inventory unavailable: {exc}" for v in planned},
                )
        optimizer = optimizer_config(cfg)
        if capacity is not None and optimizer.unlimited:
            optimizer = replace(optimizer, unlimited=False)
        request = PlanRequest(
            variants=planned,
            accelerators=accelerators,
            classes=cycle.classes,
            classes_config_map=self.settings.service_classes_config_map,
            optimizer=optimizer,
            capacity=capacity,
            saturation_floor=cfg.saturation_floor,
            chunked_prefill=cfg.chunked_prefill,
            prefill_budget=cfg.prefill_budget,
            namespace_caps={
                ns: namespace_cap(quota, capacity, accelerators) for ns, quota in per_namespace.items()
            }
            if capacity is not None
            else {},
        )
        started = time.monotonic()
        try:
            outcome = await asyncio.to_thread(self.planner.plan, request)
        except VariantAutoscalerError as exc:
            logger.error("planning failed: %s", exc)
            outcome = PlanOutcome(
                status="error",
                solve_seconds=time.monotonic() - started,
                decisions={},
                failures={v.key: f"optimization failed: {exc}" for v in planned},
            )
        self.exporter.optimizer_duration.set(outcome.solve_seconds)
        self.exporter.set_optimizer_status(outcome.status)
        self._export_gpus(request, outcome)
        return outcome

    def _export_gpus(self, request: PlanRequest, outcome: PlanOutcome) -> None:
        """The plan's GPUs as gauges (limited mode): available and planned per device type, and each
        capped namespace's cap, holding and plan."""
        self.exporter.gpus.clear()
        self.exporter.namespace_gpus.clear()
        if request.capacity is None or outcome.status in ("error", "config_error"):
            return
        held, planned = gpu_usage(request, outcome, capped_only=False)
        totals: dict[str, int] = {}
        for (_, device), count in planned.items():
            totals[device] = totals.get(device, 0) + count
        for device in sorted({*request.capacity, *totals}):
            self.exporter.gpus.labels(device=device, kind="available").set(request.capacity.get(device, 0))
            self.exporter.gpus.labels(device=device, kind="planned").set(totals.get(device, 0))
        for namespace, cap in request.namespace_caps.items():
            for device, count in cap.devices.items():
                cell = (namespace, device)
                for kind, value in (
                    ("cap", count),
                    ("held", held.get(cell, 0)),
                    ("planned", planned.get(cell, 0)),
                ):
                    self.exporter.namespace_gpus.labels(namespace=namespace, device=device, kind=kind).set(
                        value
                    )

    async def _capacity(self, contexts: Sequence[VariantContext]) -> dict[str, int]:
        selectors = [
            (c.key[0], c.target.selector) for c in contexts if c.target is not None and c.target.selector
        ]

        def ours(pod: Mapping[str, Any]) -> bool:
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            return any(ns == meta.get("namespace") and selector_matches(sel, labels) for ns, sel in selectors)

        try:
            pods = await self.kube.list_pods(field_selector="status.phase!=Succeeded,status.phase!=Failed")
        except KubeError as exc:
            raise CollectionError(f"cannot list pods for the GPU inventory: {exc}") from exc
        return inv.available_gpus(self._nodes(), pods, ours)

    # --- per variant ------------------------------------------------------------------------------

    async def _reconcile(self, ctx: VariantContext, facts: CycleFacts) -> VariantOutcome:
        # Leadership can be lost during a long cycle: from then on, write and actuate nothing (a new
        # leader may take over once the Lease expires, which is later than our renew deadline).
        if not self.leader.is_leader():
            return VariantOutcome(key=ctx.key, written=False, error="not the leader any more")
        try:
            return await self._reconcile_one(ctx, facts)
        except KubeError as exc:
            logger.error("variant %s/%s: %s", ctx.key[0], ctx.key[1], exc)
            return VariantOutcome(key=ctx.key, written=False, error=str(exc))

    def _arm_guard(
        self,
        contexts: Sequence[VariantContext],
        outcomes: Sequence[VariantOutcome],
        outcome: PlanOutcome,
        cfg: MainConfig,
    ) -> None:
        """Hand the guard this cycle's variants, at the replicas the cycle decided."""
        decided = {o.key: o.decision for o in outcomes}
        armed = []
        for c in contexts:
            if c.va is None or c.target is None:
                continue
            target = c.target
            replicas = decided.get(c.key)
            if replicas is not None and replicas != target.spec_replicas:
                target = replace(target, spec_replicas=replicas)
            armed.append(
                (c.key, c.va.spec.model_id, target, c.va.spec.max_replicas, actuation_mode(c.va, cfg))
            )
        self.guard.arm(cfg, outcome, armed)

    async def _reconcile_one(self, ctx: VariantContext, facts: CycleFacts) -> VariantOutcome:
        inputs = decision_inputs(ctx, facts)
        now = facts.now
        if ctx.va is not None and ctx.key in facts.outcome.ahead:
            siblings = self._siblings.get(ctx.key, 0)
            inputs = ahead_inputs(self.guard, self.forecasts, ctx, inputs, cfg=facts.cfg, siblings=siblings)
        if ctx.va is None or ctx.invalid:
            message = ctx.invalid or "invalid spec"
            invalid = report_invalid(inputs, message)
            await self.actuator.post_all(ctx, invalid.events, now)
            written = await self.actuator.write_status(ctx, invalid)
            return VariantOutcome(key=ctx.key, written=written, error=message)

        decision = decide(inputs)
        result = None if decision.settled is not None else await self.actuator.actuate(ctx, decision)
        rep = report(decision, result)
        await self.actuator.post_all(ctx, (*rep.events, *self._forecast_events(ctx)), now)
        if ctx.learning is not None:
            await self.actuator.post_all(ctx, ctx.learning.events, now)
        if rep.gauges is not None:
            self._gauges.append(rep.gauges)
        mode = inputs.mode
        if not rep.write:
            self.exporter.status_writes_skipped.inc()
            return VariantOutcome(
                key=ctx.key, written=False, decision=decision.policy.replicas, mode=mode, unchanged=True
            )
        written = await self.actuator.write_status(ctx, rep)
        # A VA does not own its target (WVA's final CRD): the ownerReference an earlier version set goes.
        # (After the status write, whose resourceVersion precondition this change would otherwise break.)
        await self.actuator.release_owner(ctx)
        return VariantOutcome(key=ctx.key, written=written, decision=decision.policy.replicas, mode=mode)

    # --- annotated HPAs and ScaledObjects -----------------------------------------------------------

    async def _reconcile_annotated(self, ctx: VariantContext, facts: CycleFacts) -> None:
        """Decide, export and explain (Events on the object); no status: the history stays in memory."""
        if not self.leader.is_leader():
            return
        now = facts.now
        rep = report(decide(decision_inputs(ctx, facts)))
        await self.actuator.post_all(ctx, (*rep.events, *self._forecast_events(ctx)), now)
        if ctx.learning is not None:
            await self.actuator.post_all(ctx, ctx.learning.events, now)
        if rep.gauges is not None:
            self._gauges.append(rep.gauges)
        self.annotated.remember(ctx, rep.status)

    def _forecast_events(self, ctx: VariantContext) -> tuple[EventSpec, ...]:
        """A level shift in the variant's model's demand forecast, on each of its variants."""
        event = self.forecasts.shift_event((ctx.model_id, ctx.key[0])) if ctx.model_id else None
        return () if event is None else (event,)

    async def _refuse(self, obj: Mapping[str, Any], message: str, now: datetime) -> None:
        """A managed annotated object that cannot be planned: one Warning Event on it."""
        meta = obj.get("metadata") or {}
        logger.warning("%s", message)
        ctx = VariantContext(body=obj, key=(str(meta.get("namespace")), str(meta.get("name"))))
        await self.actuator.post(ctx, "InvalidAnnotations", message, "Warning", now, dedupe=message)

    def _sleepers(
        self, contexts: Sequence[VariantContext], cfg: MainConfig, accelerators: Mapping[str, AcceleratorType]
    ) -> list[Sleeper]:
        """The variants at zero replicas the fast loop may wake (not in shadow mode)."""
        out = []
        for ctx in contexts:
            target, ref = ctx.target, ctx.target_ref
            if target is None or ref is None or target.spec_replicas != 0 or ctx.model_id is None:
                continue
            if ctx.va is not None and actuation_mode(ctx.va, cfg) == "shadow":
                continue
            planned = ctx.planned
            cost = planned.replica_cost(accelerators) if planned is not None else 0.0
            out.append(Sleeper(ctx.key, ctx.model_id, ref[0], ref[1], ref[2], cost, ctx.body))
        return out
