"""One global cycle: collect → analyze → optimize → policy → actuate → status.

The engine knows nothing of kopf. ``handlers.py`` builds it at startup (:class:`Runtime`) with the
nodes' GPU facts (a kopf index) and tells it about node changes (:meth:`Engine.notify_node`); the
runtime keeps the VariantAutoscalings in an informer of its own
(:class:`~variant_autoscaler.controller.informer.Informer`, which calls :meth:`Engine.notify_va`), and runs
:meth:`Engine.run_forever` as one background task.

A cycle runs every ``GLOBAL_OPT_INTERVAL`` and, debounced, soon after a VariantAutoscaling is created,
changed or deleted, one of the three ConfigMaps changes, or the GPU inventory changes. Only the leader
runs cycles. Per cycle, whatever the number of variants: three ConfigMap reads, one list of scale
targets per namespace (one in all for a cluster-wide operator), a fixed set of PromQL queries, one plan
for all variants, and then for each variant at most one scale patch and one status write (with its
resourceVersion, retried on 409 with a fresh read), plus Events when a decision changes.

Everything a cycle needs from the past lives in the VariantAutoscaling status (the last decision, the
recommendations of the stabilisation window, the last scale time, the last time metrics were good), so
a restarted operator continues where the previous one stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from variant_autoscaler.adapters import inventory as inv
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
from variant_autoscaler.api.config import MainConfig, PrometheusConfig, parse_main_config
from variant_autoscaler.api.configmaps import parse_accelerator_costs, parse_service_classes
from variant_autoscaler.controller.events import EventRecorder
from variant_autoscaler.core.decision import decide, report, report_invalid
from variant_autoscaler.engine.actuate import Actuator
from variant_autoscaler.engine.translate import (
    SpecCache,
    VariantContext,
    actuation_mode,
    decision_inputs,
    plan_variant,
)
from variant_autoscaler.errors import CollectionError, ConfigError, KubeError, VariantAutoscalerError
from variant_autoscaler.planner import Planner, PlanOutcome, PlanRequest, VariantKey, optimizer_config
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
        self.specs = SpecCache()
        self.actuator = Actuator(
            settings,
            kube=kube,
            exporter=exporter,
            events=events,
            leading=self._leading,
            trigger=self.trigger,
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
        if name not in self.settings.config_map_names:
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
        """Run cycles until cancelled: at once, then every interval or soon after a change."""
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
            )
        )

    async def _collector_for(self, cfg: PrometheusConfig) -> Collector:
        if self._collector is None or self._collector_cfg != cfg:
            if self._collector is not None:
                await self._collector.client.aclose()
                self._collector = None
            self._collector = self._collector_factory(cfg)
            self._collector_cfg = cfg
        return self._collector

    async def _read_configmaps(
        self,
    ) -> tuple[dict[str, str] | None, dict[str, str] | None, dict[str, str] | None]:
        ns = self.settings.operator_namespace
        names = self.settings.config_map_names
        bodies = await asyncio.gather(*(self.kube.get_configmap(ns, name) for name in names))
        out = []
        for body in bodies:
            if body is not None:
                self.notify_configmap("MODIFIED", body)
            out.append(dict(body.get("data") or {}) if body is not None else None)
        return out[0], out[1], out[2]

    async def run_cycle(self) -> CycleReport:
        self.specs.new_cycle()
        started_wall = self._clock()
        started = time.monotonic()
        queries_before = self._collector.client.queries_issued if self._collector else 0

        # 1. Configuration.
        main_data, costs, classes = await self._read_configmaps()
        config_error: str | None = None
        try:
            self._config = parse_main_config(main_data, env=self.settings.config_env())
        except ConfigError as exc:
            config_error = f"ConfigMap {self.settings.config_map_name}: {exc}"
        if costs is None and config_error is None:
            config_error = self._missing(self.settings.accelerator_costs_config_map)
        if classes is None and config_error is None:
            config_error = self._missing(self.settings.service_classes_config_map)
        cfg = self._config

        # 2. The variants, from the index.
        contexts = [self.specs.context(body) for body in self._vas()]
        contexts = [c for c in contexts if not (c.body.get("metadata") or {}).get("deletionTimestamp")]

        # 3. Scale targets, the HPAs that might own them, and the metrics (one fixed query set for
        # everything): independent reads, made at the same time.
        _, hpas, (snapshot, metrics_error) = await asyncio.gather(
            self._read_targets(contexts), self._read_hpas(contexts, cfg), self._collect(cfg, started_wall)
        )
        queries = 0
        if self._collector is not None:
            queries = self._collector.client.queries_issued - queries_before
        self.exporter.promql_queries.inc(queries)
        self.exporter.promql_queries_last_cycle.set(queries)

        # 4. Plan.
        for ctx in contexts:
            plan_variant(ctx, snapshot, cfg)
        outcome = await self._plan(contexts, costs, classes, cfg, config_error)

        # 5. Policy, actuation, status and Events, per variant.
        self._gauges = []

        async def one(ctx: VariantContext) -> VariantOutcome:
            async with self._semaphore:
                return await self._reconcile(
                    ctx,
                    outcome=outcome,
                    cfg=cfg,
                    hpas=hpas,
                    config_error=config_error,
                    metrics_error=metrics_error,
                    now=started_wall,
                )

        outcomes = await asyncio.gather(*(one(c) for c in contexts))

        # 6. Exported gauges, cycle metrics.
        self.exporter.decisions.replace(self._gauges)
        duration = time.monotonic() - started
        self.exporter.cycle_duration.observe(duration)
        self.exporter.last_cycle_duration.set(duration)
        self.exporter.cycles.labels(result="ok").inc()
        self.exporter.last_cycle.set(time.time())
        self.exporter.variants.set(len(contexts))
        self.last_completed = time.monotonic()
        self.cycles_completed += 1
        report = CycleReport(
            started=started_wall,
            duration_seconds=duration,
            variants=len(contexts),
            promql_queries=queries,
            plan_status=outcome.status,
            outcomes=tuple(outcomes),
            config_error=config_error,
            metrics_error=metrics_error,
        )
        self.last_report = report
        logger.info(
            "cycle done: %d variants in %.3fs, %d PromQL queries, plan %s%s%s",
            len(contexts),
            duration,
            queries,
            outcome.status,
            f"; config error: {config_error}" if config_error else "",
            f"; metrics error: {metrics_error}" if metrics_error else "",
        )
        return report

    # --- cycle steps --------------------------------------------------------------------------------

    async def _collect(self, cfg: MainConfig, now: datetime) -> tuple[MetricsSnapshot | None, str | None]:
        """The cycle's metrics, or why there are none."""
        try:
            collector = await self._collector_for(cfg.prometheus)
            snapshot = await collector.collect(
                now=now.timestamp(),
                window_seconds=cfg.metrics_window_seconds,
                staleness_seconds=cfg.metrics_staleness_seconds,
                drain_seconds=cfg.queue_drain_seconds,
            )
        except (CollectionError, ConfigError) as exc:
            return None, str(exc)
        return snapshot, None

    def _missing(self, name: str) -> str:
        return f"ConfigMap {self.settings.operator_namespace}/{name} not found"

    async def _read_targets(self, contexts: Sequence[VariantContext]) -> None:
        wanted = [c for c in contexts if c.va is not None]
        deployments: dict[tuple[str, str], Mapping[str, Any]] = {}
        namespaces = sorted(
            {c.key[0] for c in wanted if c.va is not None and c.va.target.kind == "Deployment"}
        )
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
            assert ctx.va is not None
            ref = ctx.va.target
            assert ref.api_version is not None and ref.kind is not None
            try:
                async with self._semaphore:
                    obj = await self.kube.get_object(ref.api_version, ref.kind, ctx.key[0], ref.name)
                    scale = await self.kube.get_scale(ref.api_version, ref.kind, ctx.key[0], ref.name)
                ctx.target = target_from_scale(ref.api_version, ref.kind, obj, scale)
            except NotFoundError:
                ctx.target_error = f"{ref.kind} {ctx.key[0]}/{ref.name} not found"
            except KubeError as exc:
                ctx.target_error = f"cannot read {ref.kind} {ctx.key[0]}/{ref.name}: {exc}"

        others = []
        for ctx in wanted:
            assert ctx.va is not None
            ref = ctx.va.target
            if ref.kind == "Deployment" and ref.api_version == "apps/v1":
                found = deployments.get((ctx.key[0], ref.name))
                if found is None:
                    ctx.target_error = f"Deployment {ctx.key[0]}/{ref.name} not found"
                else:
                    ctx.target = target_from_deployment(
                        {"apiVersion": "apps/v1", "kind": "Deployment", **found}
                    )
            else:
                others.append(other(ctx))
        await asyncio.gather(*others)

    async def _read_hpas(
        self, contexts: Sequence[VariantContext], cfg: MainConfig
    ) -> dict[tuple[str, str, str], str]:
        namespaces = sorted(
            {c.key[0] for c in contexts if c.va is not None and actuation_mode(c.va, cfg) == "patch"}
        )
        if not namespaces:
            return {}
        try:
            if self.settings.clusterwide and len(namespaces) > 1:
                listed = await self.kube.list_hpas(None)
            else:
                listed = [
                    h
                    for ls in await asyncio.gather(*(self.kube.list_hpas(ns) for ns in namespaces))
                    for h in ls
                ]
        except KubeError as exc:
            # Without knowing the HPAs, refusing to patch is the safe choice: mark every target as owned.
            logger.warning("cannot list HorizontalPodAutoscalers; patch mode paused this cycle: %s", exc)
            return {
                (c.key[0], c.target.kind, c.target.name): "(unknown: cannot list HPAs)"
                for c in contexts
                if c.target is not None
            }
        return hpa_targets(listed)

    async def _plan(
        self,
        contexts: Sequence[VariantContext],
        costs: Mapping[str, str] | None,
        classes: Mapping[str, str] | None,
        cfg: MainConfig,
        config_error: str | None,
    ) -> PlanOutcome:
        # Variants without good metrics go in as held: not re-planned, but their GPUs count.
        planned = tuple(c.planned for c in contexts if c.planned is not None)
        if config_error is not None or costs is None or classes is None:
            self.exporter.set_optimizer_status("config_error")
            return PlanOutcome(status="config_error", solve_seconds=0.0, decisions={})
        capacity: dict[str, int] | None = None
        if cfg.optimizer_mode == "limited":
            try:
                capacity = await self._capacity(contexts)
            except CollectionError as exc:
                self.exporter.set_optimizer_status("error")
                return PlanOutcome(
                    status="error",
                    solve_seconds=0.0,
                    decisions={},
                    failures={v.key: f"GPU inventory unavailable: {exc}" for v in planned},
                )
        accelerators = parse_accelerator_costs(costs)
        service_classes = parse_service_classes(classes)
        for problem in (*accelerators.problems, *service_classes.problems):
            logger.warning("ignored: %s", problem)
        request = PlanRequest(
            variants=planned,
            accelerators=accelerators.accelerators,
            classes=service_classes,
            classes_config_map=self.settings.service_classes_config_map,
            optimizer=optimizer_config(cfg),
            capacity=capacity,
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
        return outcome

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

    async def _reconcile(
        self,
        ctx: VariantContext,
        *,
        outcome: PlanOutcome,
        cfg: MainConfig,
        hpas: Mapping[tuple[str, str, str], str],
        config_error: str | None,
        metrics_error: str | None,
        now: datetime,
    ) -> VariantOutcome:
        # Leadership can be lost during a long cycle: from then on, write and actuate nothing (a new
        # leader may take over once the Lease expires, which is later than our renew deadline).
        if not self.leader.is_leader():
            return VariantOutcome(key=ctx.key, written=False, error="not the leader any more")
        try:
            return await self._reconcile_one(
                ctx,
                outcome=outcome,
                cfg=cfg,
                hpas=hpas,
                config_error=config_error,
                metrics_error=metrics_error,
                now=now,
            )
        except KubeError as exc:
            logger.error("variant %s/%s: %s", ctx.key[0], ctx.key[1], exc)
            return VariantOutcome(key=ctx.key, written=False, error=str(exc))

    async def _reconcile_one(
        self,
        ctx: VariantContext,
        *,
        outcome: PlanOutcome,
        cfg: MainConfig,
        hpas: Mapping[tuple[str, str, str], str],
        config_error: str | None,
        metrics_error: str | None,
        now: datetime,
    ) -> VariantOutcome:
        inputs = decision_inputs(
            ctx,
            outcome=outcome,
            cfg=cfg,
            hpas=hpas,
            config_error=config_error,
            metrics_error=metrics_error,
            now=now,
        )
        if ctx.va is None or ctx.invalid:
            message = ctx.invalid or "invalid spec"
            invalid = report_invalid(inputs, message)
            await self.actuator.post_all(ctx, invalid.events, now)
            written = await self.actuator.write_status(ctx, invalid)
            return VariantOutcome(key=ctx.key, written=written, error=message)

        decision = decide(inputs)
        result = None if decision.settled is not None else await self.actuator.actuate(ctx, decision)
        rep = report(decision, result)
        await self.actuator.post_all(ctx, rep.events, now)
        if rep.gauges is not None:
            self._gauges.append(VariantGauges(**asdict(rep.gauges)))
        mode = inputs.mode
        if not rep.write:
            self.exporter.status_writes_skipped.inc()
            return VariantOutcome(
                key=ctx.key, written=False, decision=decision.policy.replicas, mode=mode, unchanged=True
            )
        written = await self.actuator.write_status(ctx, rep)
        # Ownership as in WVA: the VA is garbage-collected with its Deployment. (After the status write,
        # whose resourceVersion precondition this metadata change would otherwise break.)
        target = ctx.target
        if target is not None and target.uid and target.kind == "Deployment":
            await self.actuator.ensure_owner(ctx, target)
        return VariantOutcome(key=ctx.key, written=written, decision=decision.policy.replicas, mode=mode)
