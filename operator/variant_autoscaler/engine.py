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
from dataclasses import dataclass, field, replace
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
from variant_autoscaler.core.policy import (
    PolicyDecision,
    PolicyInput,
    apply_policy,
    batch_stable_cycles,
    should_apply_batch,
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

DEFAULT_MAX_BATCH = 256  # WVA reports 256 when it cannot tell; we read --max-num-seqs when present


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

    def _min_max(self, va: VariantAutoscaling, cfg: MainConfig) -> tuple[int, int | None]:
        low = va.spec.min_replicas if va.spec.min_replicas is not None else cfg.min_replicas_default
        return low, va.spec.max_replicas

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
        raw_status = ctx.body.get("status") or {}
        prev_conditions = st.conditions_from_json(raw_status.get("conditions"))
        generation = (ctx.body.get("metadata") or {}).get("generation")

        if ctx.va is None or ctx.invalid:
            message = ctx.invalid or "invalid spec"
            update = st.Condition(st.OPTIMIZATION_READY, "False", st.REASON_INVALID_SPEC, message)
            status = {
                "observedGeneration": generation,
                "conditions": [
                    c.to_json()
                    for c in st.merge_conditions(prev_conditions, [_with_generation(update, generation)], now)
                ],
            }
            await self._post_on_flip(ctx, prev_conditions, update, "Warning", now)
            written = await self._write_status(
                ctx, status, lambda fresh: _only_conditions(fresh, [update], now)
            )
            return VariantOutcome(key=ctx.key, written=written, error=message)

        va = ctx.va
        mode = self._mode(va, cfg)
        prev_desired = raw_status.get("desiredOptimizedAlloc") or {}
        prev_actuation = raw_status.get("actuation") or {}
        last_desired = (
            prev_desired.get("numReplicas") if isinstance(prev_desired.get("numReplicas"), int) else None
        )
        last_scale_time = st.parse_time(prev_actuation.get("lastScaleTime"))
        last_metrics_time = st.parse_time(raw_status.get("lastMetricsTime"))
        target = ctx.target
        low, high = self._min_max(va, cfg)
        conditions: list[st.Condition] = []

        # Metrics.
        metrics_ok = False
        scale_down_hold: str | None = None
        if metrics_error is not None:
            metrics_reason = f"Prometheus: {metrics_error}"
            conditions.append(
                st.Condition(st.METRICS_AVAILABLE, "False", st.REASON_PROMETHEUS_ERROR, metrics_reason)
            )
        elif ctx.lookup is None:
            metrics_reason = "metrics not collected"
        elif ctx.lookup.state == "ok" and ctx.lookup.metrics is not None:
            recovery = st.metrics_recovery(
                prev_conditions, now, cfg.metrics_window_seconds, ctx.lookup.metrics.newest_sample
            )
            metrics_reason = ctx.lookup.message
            if recovery is None:
                conditions.append(
                    st.Condition(st.METRICS_AVAILABLE, "True", st.REASON_METRICS_FOUND, ctx.lookup.message)
                )
            else:
                conditions.append(recovery)
                if recovery.status != "True":  # back, but nothing scraped since the gap yet
                    metrics_reason = recovery.message
                else:
                    scale_down_hold = recovery.message
            metrics_ok = recovery is None or recovery.status == "True"
            if metrics_ok:
                last_metrics_time = now
        else:
            metrics_reason = ctx.lookup.message
            reason = st.REASON_METRICS_STALE if ctx.lookup.state == "stale" else st.REASON_METRICS_MISSING
            conditions.append(st.Condition(st.METRICS_AVAILABLE, "False", reason, ctx.lookup.message))

        # The plan's word on this variant.
        plan = outcome.decisions.get(ctx.key)
        if config_error is not None:
            plan_reason = config_error
            conditions.append(
                st.Condition(st.OPTIMIZATION_READY, "False", st.REASON_CONFIGURATION_INVALID, config_error)
            )
        elif target is None:
            plan_reason = ctx.target_error or "scale target unavailable"
            conditions.append(
                st.Condition(st.OPTIMIZATION_READY, "False", st.REASON_TARGET_NOT_FOUND, plan_reason)
            )
        elif not metrics_ok:
            plan_reason = metrics_reason
            conditions.append(
                st.Condition(
                    st.OPTIMIZATION_READY,
                    "False",
                    st.REASON_METRICS_UNAVAILABLE,
                    f"holding the last decision: {metrics_reason}",
                )
            )
        elif plan is None:
            plan_reason = (
                outcome.failures.get(ctx.key) or f"no decision from the optimizer (plan {outcome.status})"
            )
            conditions.append(
                st.Condition(st.OPTIMIZATION_READY, "False", st.REASON_OPTIMIZATION_FAILED, plan_reason)
            )
        else:
            plan_reason = plan.reason
            conditions.append(
                st.Condition(
                    st.OPTIMIZATION_READY,
                    "True",
                    st.REASON_OPTIMIZATION_SUCCEEDED,
                    f"Optimization completed: {plan.replicas} replicas on {plan.accelerator}",
                )
            )

        # Policy.
        stabilization = (
            float(va.spec.scale_down.stabilization_window_seconds)
            if va.spec.scale_down is not None and va.spec.scale_down.stabilization_window_seconds is not None
            else cfg.stabilization_for(mode)
        )
        # A change of the target's replicas since the last status (ours before a restart, or anyone's)
        # counts as a scale for the pending-replicas rule.
        prev_current = (raw_status.get("currentAlloc") or {}).get("numReplicas")
        if target is not None and isinstance(prev_current, int) and prev_current != target.spec_replicas:
            last_scale_time = now
        decision: PolicyDecision = apply_policy(
            PolicyInput(
                now=now,
                optimized_replicas=plan.replicas
                if plan is not None and target is not None and config_error is None
                else None,
                optimized_reason=plan_reason,
                metrics_ok=metrics_ok,
                metrics_reason=metrics_reason,
                current_replicas=target.spec_replicas if target is not None else None,
                ready_replicas=target.ready_replicas if target is not None else None,
                last_desired=last_desired,
                min_replicas=low,
                max_replicas=high,
                stabilization_seconds=stabilization,
                history=st.recommendations_from_json(raw_status.get("recommendations")),
                last_scale_time=last_scale_time,
                pending_timeout_seconds=cfg.pending_timeout_seconds,
                scale_down_hold=scale_down_hold,
            )
        )
        accelerator = plan.accelerator if plan is not None else (ctx.accelerator or "")
        max_batch = plan.max_batch if plan is not None else prev_desired.get("maxBatch")
        prev_batch = prev_desired.get("maxBatch") if isinstance(prev_desired.get("maxBatch"), int) else None
        # Counted up to what the batch rule needs (a count that grows for ever changes every status).
        stable = min(
            batch_stable_cycles(prev_batch, int(prev_actuation.get("maxBatchStableCycles") or 0), max_batch),
            cfg.batch_stable_cycles,
        )

        # Actuation.
        applied, actuated = await self._actuate(
            ctx,
            mode=mode,
            decision=decision,
            max_batch=max_batch,
            stable_cycles=stable,
            cfg=cfg,
            hpas=hpas,
            now=now,
        )
        if ctx.patched:
            last_scale_time = now
        conditions.append(actuated)

        # Status.
        unit_cost = outcome.unit_costs.get(ctx.accelerator or "", 0.0)
        metrics = ctx.lookup.metrics if ctx.lookup is not None else None
        current = None
        if target is not None and ctx.accelerator is not None:
            profile = va.spec.profile_for(ctx.accelerator)
            current = st.CurrentView(
                accelerator=ctx.accelerator,
                replicas=target.spec_replicas,
                max_batch=target.max_num_seqs or (profile.max_batch_size if profile else DEFAULT_MAX_BATCH),
                cost=target.spec_replicas * unit_cost,
                itl_ms=metrics.itl_ms if metrics else 0.0,
                ttft_ms=metrics.ttft_ms if metrics else 0.0,
                arrival_rate_rpm=metrics.arrival_rate * 60.0 if metrics else 0.0,
                avg_input_tokens=metrics.avg_input_tokens if metrics else 0.0,
                avg_output_tokens=metrics.avg_output_tokens if metrics else 0.0,
            )
        desired = st.DesiredView(
            accelerator=accelerator if len(accelerator) >= 2 else (ctx.accelerator or "unknown"),
            replicas=decision.replicas,
            last_run_time=now,
            max_batch=max_batch if isinstance(max_batch, int) else None,
            reason=decision.reason,
            ttft_ms=plan.ttft_ms if plan is not None and not decision.held else None,
            itl_ms=plan.itl_ms if plan is not None and not decision.held else None,
            cost=plan.cost if plan is not None and not decision.held else None,
        )
        inputs = st.StatusInputs(
            now=now,
            generation=generation,
            previous_conditions=prev_conditions,
            condition_updates=tuple(conditions),
            current=current,
            desired=desired,
            actuation=st.ActuationView(
                applied=applied, mode=mode, last_scale_time=last_scale_time, max_batch_stable_cycles=stable
            ),
            recommendations=decision.history,
            last_metrics_time=last_metrics_time,
        )
        status = st.build_status(inputs)

        # Events: the decision changed, or a condition went bad.
        prev_key = (last_desired, prev_desired.get("accelerator"), prev_batch)
        new_key = (decision.replicas, desired.accelerator, desired.max_batch)
        if prev_key != new_key:
            await self._post(
                ctx,
                "DecisionChanged",
                f"{last_desired if last_desired is not None else '-'} -> {decision.replicas} replicas on "
                f"{desired.accelerator}"
                + (f", batch {desired.max_batch}" if desired.max_batch else "")
                + f": {decision.reason}",
                "Normal",
                now,
                dedupe=f"{prev_desired.get('lastRunTime')}|{prev_key}|{new_key}",
            )
        for cond in conditions:
            if cond.status == "False":
                await self._post_on_flip(ctx, prev_conditions, cond, "Warning", now)

        # Gauges (exported at the end of the cycle).
        self._gauges.append(
            VariantGauges(
                variant_name=ctx.key[1],
                namespace=ctx.key[0],
                accelerator=desired.accelerator,
                mode=mode,
                desired_replicas=decision.replicas,
                current_replicas=target.status_replicas
                if target is not None
                else (prev_current if isinstance(prev_current, int) else 0),
                predicted_ttft_ms=desired.ttft_ms,
                predicted_itl_ms=desired.itl_ms,
                observed_ttft_ms=metrics.ttft_ms if metrics is not None and metrics_ok else None,
                observed_itl_ms=metrics.itl_ms if metrics is not None and metrics_ok else None,
            )
        )

        if (
            cfg.status_refresh_seconds > 0
            and raw_status
            and st.status_essentials(status) == st.status_essentials(raw_status)
            and not st.refresh_due(raw_status, now, cfg.status_refresh_seconds, _spread(ctx.body))
        ):
            self.exporter.status_writes_skipped.inc()
            return VariantOutcome(
                key=ctx.key, written=False, decision=decision.replicas, mode=mode, unchanged=True
            )
        written = await self._write_status(
            ctx, status, lambda fresh: st.build_status(_refreshed(inputs, fresh))
        )
        # Ownership as in WVA: the VA is garbage-collected with its Deployment. (After the status write,
        # whose resourceVersion precondition this metadata change would otherwise break.)
        if target is not None and target.uid and target.kind == "Deployment":
            await self._ensure_owner(ctx, target)
        return VariantOutcome(key=ctx.key, written=written, decision=decision.replicas, mode=mode)

    async def _actuate(
        self,
        ctx: _Context,
        *,
        mode: ActuationMode,
        decision: PolicyDecision,
        max_batch: int | None,
        stable_cycles: int,
        cfg: MainConfig,
        hpas: Mapping[tuple[str, str, str], str],
        now: datetime,
    ) -> tuple[bool, st.Condition]:
        target = ctx.target
        if mode == "shadow":
            return True, st.Condition(
                st.ACTUATED,
                "True",
                st.REASON_SHADOW,
                f"shadow mode: recommending {decision.replicas} replicas, nothing changed",
            )
        if mode == "metrics":
            return True, st.Condition(
                st.ACTUATED,
                "True",
                st.REASON_METRICS_EMITTED,
                f"inferno_desired_replicas={decision.replicas} exported for the HPA",
            )
        # Patch mode.
        if target is None:
            return False, st.Condition(
                st.ACTUATED, "False", st.REASON_NOT_ACTUATED, ctx.target_error or "no scale target"
            )
        owner = hpas.get((ctx.key[0], target.kind, target.name))
        if owner is not None:
            return False, st.Condition(
                st.ACTUATED,
                "False",
                st.REASON_CONFLICTING_CONTROLLER,
                f"not patching {target.kind}/{target.name}: HorizontalPodAutoscaler {owner} manages it "
                "(use actuation mode metrics, or remove the HPA)",
            )
        if target.controller is not None:
            return False, st.Condition(
                st.ACTUATED,
                "False",
                st.REASON_CONFLICTING_CONTROLLER,
                f"not patching {target.kind}/{target.name}: it is controlled by {target.controller}",
            )
        messages: list[str] = []
        failed: st.Condition | None = None
        try:
            if decision.replicas != target.spec_replicas:
                moved = await self._patch_replicas(target, decision.replicas)
                if moved is not None:
                    return False, self._target_changed(
                        target,
                        f"not patching {target.kind}/{target.name}: its replicas changed from "
                        f"{target.spec_replicas} to {moved} after this cycle read them (another "
                        "controller or a person); deciding again on the new count",
                    )
                direction = "up" if decision.replicas > target.spec_replicas else "down"
                self.exporter.scalings.labels(
                    variant_name=ctx.key[1], namespace=ctx.key[0], direction=direction, reason="optimizer"
                ).inc()
                messages.append(
                    f"scaled {target.kind}/{target.name} from {target.spec_replicas} to {decision.replicas}"
                )
                ctx.patched = True
            apply_batch = bool(ctx.va and ctx.va.spec.actuation and ctx.va.spec.actuation.apply_max_batch)
            if (
                should_apply_batch(
                    enabled=apply_batch,
                    current_batch=target.max_num_seqs,
                    batch=max_batch,
                    stable_cycles=stable_cycles,
                    required_cycles=cfg.batch_stable_cycles,
                )
                and target.kind == "Deployment"
                and target.container_index is not None
                and max_batch is not None
            ):
                failed = await self._patch_max_batch(target, max_batch)
                if failed is None:
                    messages.append(f"set --max-num-seqs {max_batch} (was {target.max_num_seqs})")
                    ctx.patched = True
        except KubeError as exc:
            failed = st.Condition(st.ACTUATED, "False", st.REASON_SCALE_FAILED, str(exc))
        done = "; ".join(messages)
        if done:
            await self._post(ctx, "Scaled", done, "Normal", now, dedupe=f"{now.isoformat()}|{messages}")
        if failed is not None:
            # What was done before the failure stays said.
            return False, replace(failed, message=f"{done}; then: {failed.message}") if done else failed
        if done:
            return True, st.Condition(st.ACTUATED, "True", st.REASON_SCALED, done)
        return True, st.Condition(
            st.ACTUATED,
            "True",
            st.REASON_UNCHANGED,
            f"{target.kind}/{target.name} already has {decision.replicas} replicas",
        )

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

    async def _write_status(
        self,
        ctx: _Context,
        status: Mapping[str, Any],
        rebuild: Callable[[Mapping[str, Any]], Mapping[str, Any]],
    ) -> bool:
        """Patch the status with the resourceVersion we read; on 409 re-read, rebuild and retry."""
        meta = ctx.body.get("metadata") or {}
        version = meta.get("resourceVersion")
        body = status
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
                    body = rebuild(current)
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

    async def _post_on_flip(
        self,
        ctx: _Context,
        previous: Sequence[st.Condition],
        cond: st.Condition,
        type_: EventType,
        now: datetime,
    ) -> None:
        before = next((c for c in previous if c.type == cond.type), None)
        if before is not None and before.status == cond.status and before.reason == cond.reason:
            return
        stamp = before.last_transition_time.isoformat() if before and before.last_transition_time else "-"
        await self._post(ctx, cond.reason, cond.message, type_, now, dedupe=f"{cond.type}|{stamp}")


def _spread(body: Mapping[str, Any]) -> float:
    """A number in [0, 1) fixed per object (from its uid), to spread periodic status refreshes."""
    uid = str((body.get("metadata") or {}).get("uid") or "")
    return int(hashlib.sha256(uid.encode()).hexdigest()[:8], 16) / 2**32


def _with_generation(cond: st.Condition, generation: object) -> st.Condition:
    return st.Condition(
        cond.type,
        cond.status,
        cond.reason,
        cond.message,
        generation if isinstance(generation, int) else None,
        cond.last_transition_time,
    )


def _only_conditions(
    fresh: Mapping[str, Any], updates: Sequence[st.Condition], now: datetime
) -> dict[str, Any]:
    generation = (fresh.get("metadata") or {}).get("generation")
    previous = st.conditions_from_json((fresh.get("status") or {}).get("conditions"))
    merged = st.merge_conditions(previous, [_with_generation(u, generation) for u in updates], now)
    return {"observedGeneration": generation, "conditions": [c.to_json() for c in merged]}


def _refreshed(inputs: st.StatusInputs, fresh: Mapping[str, Any]) -> st.StatusInputs:
    """The same decision, merged onto a freshly read object's conditions and generation."""
    generation = (fresh.get("metadata") or {}).get("generation")
    previous = st.conditions_from_json((fresh.get("status") or {}).get("conditions"))
    return st.StatusInputs(
        now=inputs.now,
        generation=generation if isinstance(generation, int) else inputs.generation,
        previous_conditions=previous,
        condition_updates=inputs.condition_updates,
        current=inputs.current,
        desired=inputs.desired,
        actuation=inputs.actuation,
        recommendations=inputs.recommendations,
        last_metrics_time=inputs.last_metrics_time,
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
