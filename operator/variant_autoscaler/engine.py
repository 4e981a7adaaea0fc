"""One global cycle: collect → analyze → optimize → policy → actuate → status.

The engine knows nothing of kopf. ``handlers.py`` builds it at startup (:class:`Runtime`) with the
nodes' GPU facts (a kopf index) and tells it about node changes (:meth:`Engine.notify_node`); the
runtime keeps the VariantAutoscalings in an informer of its own
(:class:`~variant_autoscaler.adapters.informer.Informer`, which calls :meth:`Engine.notify_va`), and runs
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
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from variant_autoscaler.adapters import inventory as inv
from variant_autoscaler.adapters.events import EventRecorder, EventType
from variant_autoscaler.adapters.exporter import Exporter, VariantGauges
from variant_autoscaler.adapters.informer import Informer
from variant_autoscaler.adapters.kube import (
    AiohttpTransport,
    InvalidError,
    KubeClient,
    NotFoundError,
    ScaleTarget,
    hpa_targets,
    selector_matches,
    target_from_deployment,
    target_from_scale,
    with_max_num_seqs,
)
from variant_autoscaler.adapters.prometheus import Collector, Lookup, MetricsSnapshot, PrometheusClient
from variant_autoscaler.api.config import MainConfig, PrometheusConfig, parse_main_config
from variant_autoscaler.api.configmaps import parse_accelerator_costs, parse_service_classes
from variant_autoscaler.api.v1alpha1 import ActuationMode, VariantAutoscaling
from variant_autoscaler.core import status as st
from variant_autoscaler.core.decision import (
    ActuationResult,
    DecisionInputs,
    EventSpec,
    MetricsView,
    Report,
    TargetView,
    VariantDecision,
    decide,
    report,
    report_invalid,
    unchanged,
)
from variant_autoscaler.errors import (
    CollectionError,
    ConfigError,
    ConflictError,
    KubeError,
    VariantAutoscalerError,
)
from variant_autoscaler.planner import (
    ObservedLoad,
    OptimizerPlanner,
    PlannedVariant,
    Planner,
    PlanOutcome,
    PlanRequest,
    VariantKey,
    optimizer_config,
    planned_from_va,
)
from variant_autoscaler.settings import Settings

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


@dataclass
class _Context:
    """One VariantAutoscaling in one cycle."""

    body: Mapping[str, Any]
    key: VariantKey
    va: VariantAutoscaling | None = None
    invalid: str | None = None
    target: ScaleTarget | None = None
    target_error: str | None = None
    accelerator: str | None = None
    lookup: Lookup | None = None
    planned: PlannedVariant | None = None
    # Patch mode changed the target this cycle (replicas or batch size).
    patched: bool = False


# --- the engine ----------------------------------------------------------------------------------------


class LeaderLike(Protocol):
    def is_leader(self) -> bool: ...

    async def run(self) -> None: ...

    async def release(self) -> None: ...


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Engine:
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
        # Parsed specs of the last cycle and of this one (a cycle drops what it no longer sees).
        self._parsed: dict[tuple[Any, ...], VariantAutoscaling | str] = {}
        self._parsed_seen: dict[tuple[Any, ...], VariantAutoscaling | str] = {}

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
        self._parsed_seen = self._parsed
        self._parsed = {}
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
        contexts = [self._parse(body) for body in self._vas()]
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
            self._prepare(ctx, snapshot, cfg)
        outcome = await self._plan(contexts, costs, classes, cfg, config_error)

        # 5. Policy, actuation, status and Events, per variant.
        self._gauges = []

        async def one(ctx: _Context) -> VariantOutcome:
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

    def _parse(self, body: Mapping[str, Any]) -> _Context:
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        ctx = _Context(body=body, key=key)
        # The parsed spec depends on the spec and the labels only (not on the status we write each
        # cycle), so it is cached by generation and labels.
        fingerprint = (
            meta.get("uid"),
            key,
            meta.get("generation"),
            tuple(sorted((meta.get("labels") or {}).items())),
        )
        cached = self._parsed_seen.get(fingerprint)
        if cached is None:
            try:
                parsed = VariantAutoscaling.model_validate({k: v for k, v in body.items() if k != "status"})
                for profile in parsed.spec.model_profile.accelerators:
                    profile.perf_parms.validate_numbers()
                cached = parsed
            except (ValidationError, ValueError) as exc:
                cached = _short_validation(exc)
        self._parsed[fingerprint] = cached  # kept for the next cycle, hit or miss
        if isinstance(cached, str):
            ctx.invalid = cached
            return ctx
        va = cached
        ctx.va = va
        ctx.accelerator = va.accelerator_label
        if ctx.accelerator is None and len(va.spec.model_profile.accelerators) == 1:
            ctx.accelerator = va.spec.model_profile.accelerators[0].acc
        if ctx.accelerator is None:
            ctx.invalid = (
                "the label inference.optimization/acceleratorName is missing and the profile lists more than "
                "one accelerator: set the label to the accelerator the workload runs on"
            )
        elif va.spec.profile_for(ctx.accelerator) is None:
            ctx.invalid = f"the accelerator {ctx.accelerator!r} (label) has no entry in spec.modelProfile"
        return ctx

    async def _read_targets(self, contexts: Sequence[_Context]) -> None:
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

        async def other(ctx: _Context) -> None:
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
        self, contexts: Sequence[_Context], cfg: MainConfig
    ) -> dict[tuple[str, str, str], str]:
        namespaces = sorted(
            {c.key[0] for c in contexts if c.va is not None and self._mode(c.va, cfg) == "patch"}
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

    @staticmethod
    def _mode(va: VariantAutoscaling, cfg: MainConfig) -> ActuationMode:
        if va.spec.actuation is not None and va.spec.actuation.mode is not None:
            return va.spec.actuation.mode
        return cfg.default_actuation_mode

    def _prepare(self, ctx: _Context, snapshot: MetricsSnapshot | None, cfg: MainConfig) -> None:
        if ctx.va is None or ctx.invalid or ctx.target is None or ctx.accelerator is None:
            return
        ctx.lookup = snapshot.lookup(ctx.va.spec.model_id, ctx.key[0]) if snapshot is not None else None
        metrics = ctx.lookup.metrics if ctx.lookup is not None and ctx.lookup.state == "ok" else None
        # Without fresh metrics the variant is held: not re-planned, but its GPUs count.
        load = (
            ObservedLoad(metrics.arrival_rate * 60.0, metrics.avg_input_tokens, metrics.avg_output_tokens)
            if metrics is not None
            else None
        )
        try:
            ctx.planned = planned_from_va(
                ctx.va,
                namespace=ctx.key[0],
                accelerator=ctx.accelerator,
                current_replicas=ctx.target.spec_replicas,
                current_max_batch=ctx.target.max_num_seqs,
                load=load,
                config=cfg,
            )
        except ConfigError as exc:
            ctx.invalid = f"invalid spec: {exc}"

    async def _plan(
        self,
        contexts: Sequence[_Context],
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

    async def _capacity(self, contexts: Sequence[_Context]) -> dict[str, int]:
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
        ctx: _Context,
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
        ctx: _Context,
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
            await self._post_all(ctx, invalid.events, now)
            written = await self._write_status(ctx, invalid)
            return VariantOutcome(key=ctx.key, written=written, error=message)

        decision = decide(inputs)
        result = None if decision.settled is not None else await self._actuate(ctx, decision)
        rep = report(decision, result)
        await self._post_all(ctx, rep.events, now)
        if rep.gauges is not None:
            self._gauges.append(VariantGauges(**asdict(rep.gauges)))
        mode = inputs.mode
        if not rep.write:
            self.exporter.status_writes_skipped.inc()
            return VariantOutcome(
                key=ctx.key, written=False, decision=decision.policy.replicas, mode=mode, unchanged=True
            )
        written = await self._write_status(ctx, rep)
        # Ownership as in WVA: the VA is garbage-collected with its Deployment. (After the status write,
        # whose resourceVersion precondition this metadata change would otherwise break.)
        target = ctx.target
        if target is not None and target.uid and target.kind == "Deployment":
            await self._ensure_owner(ctx, target)
        return VariantOutcome(key=ctx.key, written=written, decision=decision.policy.replicas, mode=mode)

    async def _actuate(self, ctx: _Context, decision: VariantDecision) -> ActuationResult:
        """Patch mode: set what the decision asks of the target, on the version this cycle read."""
        target = ctx.target
        assert target is not None
        done: list[str] = []
        failed: st.Condition | None = None
        try:
            if decision.scale_to is not None:
                moved = await self._patch_replicas(target, decision.scale_to)
                if moved is not None:
                    return ActuationResult(
                        applied=False,
                        condition=self._target_changed(
                            target,
                            f"not patching {target.kind}/{target.name}: its replicas changed from "
                            f"{target.spec_replicas} to {moved} after this cycle read them (another "
                            "controller or a person); deciding again on the new count",
                        ),
                    )
                direction = "up" if decision.scale_to > target.spec_replicas else "down"
                self.exporter.scalings.labels(
                    variant_name=ctx.key[1], namespace=ctx.key[0], direction=direction, reason="optimizer"
                ).inc()
                done.append(
                    f"scaled {target.kind}/{target.name} from {target.spec_replicas} to {decision.scale_to}"
                )
            if decision.batch_to is not None:
                failed = await self._patch_max_batch(target, decision.batch_to)
                if failed is None:
                    done.append(f"set --max-num-seqs {decision.batch_to} (was {target.max_num_seqs})")
        except KubeError as exc:
            failed = st.Condition(st.ACTUATED, "False", st.REASON_SCALE_FAILED, str(exc))
        said = "; ".join(done)
        if failed is not None:
            # What was done before the failure stays said.
            message = f"{said}; then: {failed.message}" if said else failed.message
            return ActuationResult(
                applied=False, condition=replace(failed, message=message), done=tuple(done)
            )
        if done:
            return ActuationResult(
                applied=True,
                condition=st.Condition(st.ACTUATED, "True", st.REASON_SCALED, said),
                done=tuple(done),
            )
        return unchanged(decision)

    async def _patch_max_batch(self, target: ScaleTarget, max_batch: int) -> st.Condition | None:
        """Set the serving container's ``--max-num-seqs``, on the args this cycle read; None once done.

        The JSON patch tests the args first, so it never overwrites args changed since the read (the
        API server answers 422, which says nothing more): the object is read again to tell that case,
        reported as ``TargetChanged``, from a real rejection, which is raised.
        """
        path = f"/spec/template/spec/containers/{target.container_index}/{target.args_field}"
        old = list(target.container_args or ())
        ops: list[dict[str, Any]] = [{"op": "test", "path": path, "value": old}] if old else []
        ops.append(
            {"op": "replace" if old else "add", "path": path, "value": with_max_num_seqs(old, max_batch)}
        )
        try:
            await self.kube.json_patch(target.api_version, target.kind, target.namespace, target.name, ops)
            return None
        except InvalidError:
            fresh = await self.kube.get_object(target.api_version, target.kind, target.namespace, target.name)
            if target_from_deployment(fresh).container_args == target.container_args:
                raise
        return self._target_changed(
            target,
            f"not setting --max-num-seqs on {target.kind}/{target.name}: its container's "
            f"{target.args_field} changed after this cycle read them; deciding again on the new ones",
        )

    def _target_changed(self, target: ScaleTarget, message: str) -> st.Condition:
        """Someone changed the target after this cycle read it: nothing was overwritten, and the next
        cycle, soon, decides on what is there now."""
        self.trigger(f"{target.kind} {target.namespace}/{target.name} changed")
        return st.Condition(st.ACTUATED, "False", st.REASON_TARGET_CHANGED, message)

    async def _patch_replicas(self, target: ScaleTarget, replicas: int) -> int | None:
        """Set the target's replicas, on the version this cycle read; None once done.

        The patch carries the target's resourceVersion, so it never lands on a target that changed
        since it was read: neither on a ``kubectl scale`` or another controller's change, nor, from a
        process whose Lease expired while its patch hung, on the new leader's. After a 409 the scale is
        read again: if only the status moved on (pods starting), the patch is retried on the new
        version; if the replicas changed, nothing is patched and their new count is returned.
        """
        version = target.resource_version
        for attempt in range(self.settings.conflict_retries + 1):
            try:
                await self.kube.patch_scale(
                    target.api_version,
                    target.kind,
                    target.namespace,
                    target.name,
                    replicas,
                    resource_version=version,
                )
                return None
            except ConflictError:
                # Retry only while leading: after a lost Lease the 409 may well be the new leader's write.
                if attempt == self.settings.conflict_retries or not self.leader.is_leader():
                    raise
                scale = await self.kube.get_scale(
                    target.api_version, target.kind, target.namespace, target.name
                )
                now = int((scale.get("spec") or {}).get("replicas") or 0)
                if now != target.spec_replicas:
                    return now
                version = (scale.get("metadata") or {}).get("resourceVersion")
        return None  # pragma: no cover - the loop returns or raises

    async def _ensure_owner(self, ctx: _Context, target: ScaleTarget) -> None:
        refs = (ctx.body.get("metadata") or {}).get("ownerReferences") or []
        if any(r.get("controller") for r in refs):
            return
        owner = {
            "apiVersion": target.api_version,
            "kind": target.kind,
            "name": target.name,
            "uid": target.uid,
            "controller": True,
            "blockOwnerDeletion": False,
        }
        try:
            await self.kube.patch_va_metadata(ctx.key[0], ctx.key[1], {"ownerReferences": [*refs, owner]})
        except KubeError as exc:
            logger.warning("could not set the owner of %s/%s: %s", ctx.key[0], ctx.key[1], exc)

    async def _write_status(self, ctx: _Context, rep: Report) -> bool:
        """Write the status with the resourceVersion we read; on 409 re-read, rebuild and retry."""
        meta = ctx.body.get("metadata") or {}
        version = meta.get("resourceVersion")
        body: Mapping[str, Any] = rep.status
        current: Mapping[str, Any] = ctx.body
        for attempt in range(self.settings.conflict_retries + 1):
            if not self.leader.is_leader():
                # Lost the Lease during this variant (a slow scale patch, or a 409 that may be the new
                # leader's write): write nothing more.
                return False
            try:
                if attempt:
                    # After a 409: the VA as it is now, and the status rebuilt on it.
                    current = await self.kube.get_va(ctx.key[0], ctx.key[1])
                    version = (current.get("metadata") or {}).get("resourceVersion")
                    body = rep.on(current)
                # With the object it was read as: a PUT, cheaper for the API server than a patch.
                await self.kube.patch_va_status(ctx.key[0], ctx.key[1], body, version, current=current)
                return True
            except ConflictError:
                self.exporter.status_conflicts.inc()
                if attempt == self.settings.conflict_retries:
                    raise
            except NotFoundError:
                return False  # deleted meanwhile
        return False  # pragma: no cover - the loop returns or raises

    async def _post_all(self, ctx: _Context, events: Sequence[EventSpec], now: datetime) -> None:
        for event in events:
            await self._post(ctx, event.reason, event.message, event.type, now, dedupe=event.dedupe)

    async def _post(
        self, ctx: _Context, reason: str, message: str, type_: EventType, now: datetime, *, dedupe: str
    ) -> None:
        if not self.leader.is_leader():
            # Lost the Lease during this cycle (as _write_status): the new leader reports from now on.
            return
        uid = (ctx.body.get("metadata") or {}).get("uid") or ""
        digest = hashlib.sha256(f"{uid}|{reason}|{dedupe}".encode()).hexdigest()[:20]
        await self.events.post(
            ctx.body, reason=reason, message=message, type_=type_, now=now, name_suffix=digest
        )


def _target_view(target: ScaleTarget | None) -> TargetView | None:
    if target is None:
        return None
    return TargetView(
        kind=target.kind,
        name=target.name,
        spec_replicas=target.spec_replicas,
        ready_replicas=target.ready_replicas,
        status_replicas=target.status_replicas,
        max_num_seqs=target.max_num_seqs,
        controller=target.controller,
        batch_patchable=target.kind == "Deployment" and target.container_index is not None,
    )


def _metrics_view(lookup: Lookup | None) -> MetricsView | None:
    if lookup is None:
        return None
    m = lookup.metrics
    if m is None:
        return MetricsView("missing" if lookup.state == "ok" else lookup.state, lookup.message)
    return MetricsView(
        lookup.state,
        lookup.message,
        newest_sample=m.newest_sample,
        arrival_rate=m.arrival_rate,
        avg_input_tokens=m.avg_input_tokens,
        avg_output_tokens=m.avg_output_tokens,
        ttft_ms=m.ttft_ms,
        itl_ms=m.itl_ms,
    )


def decision_inputs(
    ctx: _Context,
    *,
    outcome: PlanOutcome,
    cfg: MainConfig,
    hpas: Mapping[tuple[str, str, str], str],
    config_error: str | None,
    metrics_error: str | None,
    now: datetime,
) -> DecisionInputs:
    """What the cycle read of one variant, as the pure decision's inputs."""
    meta = ctx.body.get("metadata") or {}
    generation = meta.get("generation")
    va, target = ctx.va, ctx.target
    mode = Engine._mode(va, cfg) if va is not None else cfg.default_actuation_mode
    low, high = (va.spec.min_replicas, va.spec.max_replicas) if va is not None else (None, None)
    profile = va.spec.profile_for(ctx.accelerator) if va is not None and ctx.accelerator else None
    stabilization = (
        float(va.spec.scale_down.stabilization_window_seconds)
        if va is not None
        and va.spec.scale_down is not None
        and va.spec.scale_down.stabilization_window_seconds is not None
        else cfg.stabilization_for(mode)
    )
    return DecisionInputs(
        now=now,
        namespace=ctx.key[0],
        name=ctx.key[1],
        uid=str(meta.get("uid") or ""),
        generation=generation if isinstance(generation, int) else None,
        previous=ctx.body.get("status") or {},
        mode=mode,
        min_replicas=low if low is not None else cfg.min_replicas_default,
        max_replicas=high,
        stabilization_seconds=stabilization,
        apply_max_batch=bool(va is not None and va.spec.actuation and va.spec.actuation.apply_max_batch),
        profile_max_batch=profile.max_batch_size if profile is not None else None,
        accelerator=ctx.accelerator,
        target=_target_view(target),
        target_error=ctx.target_error,
        hpa_owner=hpas.get((ctx.key[0], target.kind, target.name)) if target is not None else None,
        metrics=_metrics_view(ctx.lookup),
        metrics_error=metrics_error,
        config_error=config_error,
        plan=outcome.decisions.get(ctx.key),
        plan_failure=outcome.failures.get(ctx.key),
        plan_status=outcome.status,
        unit_cost=outcome.unit_costs.get(ctx.accelerator or "", 0.0),
        metrics_window_seconds=cfg.metrics_window_seconds,
        pending_timeout_seconds=cfg.pending_timeout_seconds,
        batch_stable_cycles=cfg.batch_stable_cycles,
        status_refresh_seconds=cfg.status_refresh_seconds,
    )


def _short_validation(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors()[:5]:
            loc = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{loc}: {err.get('msg')}")
        return "invalid spec: " + "; ".join(parts)
    return f"invalid spec: {exc}"


__all__ = ["CycleReport", "Engine", "Runtime", "VariantOutcome"]


# --- the process runtime -----------------------------------------------------------------------------


def va_collection_paths(settings: Settings) -> list[str]:
    """Where the VariantAutoscalings served live: one collection cluster-wide, or one per namespace."""
    if settings.clusterwide:
        return [KubeClient.va_collection(None)]
    return [KubeClient.va_collection(ns) for ns in settings.namespaces]


@dataclass
class Runtime:
    """Process-scoped resources: clients, metrics endpoint, leader election, and the engine's tasks."""

    settings: Settings
    kube: KubeClient
    exporter: Exporter
    leader: LeaderLike
    engine: Engine
    watch_kube: KubeClient
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @classmethod
    async def start(
        cls,
        settings: Settings,
        *,
        nodes: Callable[[], Iterable[inv.NodeGPUs]],
        planner: Planner | None = None,
    ) -> Runtime:
        from variant_autoscaler.adapters.kube import load_credentials
        from variant_autoscaler.adapters.lease import AlwaysLeader, LeaderElector

        credentials = load_credentials()
        kube = KubeClient(credentials, timeout=settings.kube_timeout_seconds)
        # Watches hold a connection each (one per served namespace): their own pool, so they never
        # take the connections the cycle's requests need.
        watch_kube = KubeClient(
            credentials,
            timeout=settings.kube_timeout_seconds,
            transport=AiohttpTransport(credentials, timeout=settings.kube_timeout_seconds, limit=0),
        )
        leader: LeaderLike
        if settings.leader_election:
            leader = LeaderElector(
                kube,
                namespace=settings.operator_namespace,
                name=settings.lease_name,
                identity=settings.identity,
                lease_duration=settings.lease_duration_seconds,
                renew_deadline=settings.renew_deadline_seconds,
                retry_period=settings.retry_period_seconds,
            )
        else:
            leader = AlwaysLeader()
        exporter = Exporter(is_active=leader.is_leader)
        await exporter.start(settings.metrics_host, settings.metrics_port)
        vas = Informer(watch_kube, va_collection_paths(settings), what="VariantAutoscalings")
        engine = Engine(
            settings,
            kube=kube,
            exporter=exporter,
            events=EventRecorder(kube, instance=settings.identity),
            leader=leader,
            planner=planner or OptimizerPlanner(),
            vas=vas.values,
            nodes=nodes,
        )
        vas.on_event = engine.notify_va
        # The operator namespace's ConfigMaps, watched the same way; only changes matter (the cycle
        # reads the three it uses afresh).
        configmaps = Informer(
            watch_kube,
            [f"/api/v1/namespaces/{settings.operator_namespace}/configmaps"],
            what="ConfigMaps",
            on_event=engine.notify_configmap,
        )
        runtime = cls(
            settings=settings,
            kube=kube,
            exporter=exporter,
            leader=leader,
            engine=engine,
            watch_kube=watch_kube,
        )
        loop = asyncio.get_running_loop()
        runtime.tasks = [
            loop.create_task(leader.run(), name="variant-autoscaler leader election"),
            loop.create_task(vas.run(), name="variant-autoscaler VariantAutoscaling informer"),
            loop.create_task(configmaps.run(), name="variant-autoscaler ConfigMap informer"),
        ]
        # The first cycle runs at once: let it see every VariantAutoscaling (a cycle on a partial view
        # would drop the others' gauges). If listing fails, cycles fail and say why until it works.
        try:
            async with asyncio.timeout(settings.kube_timeout_seconds):
                await vas.wait_synced()
        except TimeoutError:
            logger.warning("VariantAutoscalings not listed yet: %s", vas.last_error or "no answer")
        runtime.tasks.append(loop.create_task(engine.run_forever(), name="variant-autoscaler engine"))
        logger.info(
            "started: identity %s, %s, metrics on :%s",
            settings.identity,
            "cluster-wide" if settings.clusterwide else f"namespaces {', '.join(settings.namespaces)}",
            exporter.port,
        )
        return runtime

    async def stop(self) -> None:
        """Graceful shutdown: stop the tasks, give up the Lease, close everything."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.leader.release()
        await self.engine.aclose()
        await self.exporter.stop()
        await self.kube.aclose()
        await self.watch_kube.aclose()
        logger.info("stopped")
