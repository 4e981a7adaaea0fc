"""The operator process's resources: API clients, the metrics endpoint, leader election, the informers
and the engine's task. ``handlers.startup`` starts them and keeps them in kopf's ``memo``;
``handlers.cleanup`` stops them; the liveness probe asks :meth:`Runtime.health`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from variant_autoscaler.adapters import inventory as inv
from variant_autoscaler.adapters.exporter import Exporter
from variant_autoscaler.adapters.kube import AiohttpTransport, KubeClient, load_credentials
from variant_autoscaler.adapters.metrics_auth import metrics_security
from variant_autoscaler.controller.events import EventRecorder
from variant_autoscaler.controller.informer import Informer
from variant_autoscaler.controller.lease import AlwaysLeader, LeaderElector
from variant_autoscaler.engine.cycle import Engine, LeaderLike
from variant_autoscaler.errors import VariantAutoscalerError
from variant_autoscaler.planner import OptimizerPlanner, Planner
from variant_autoscaler.settings import Settings

__all__ = ["Runtime", "va_collection_paths"]

logger = logging.getLogger(__name__)

Bodies = Callable[[], Iterable[Mapping[str, Any]]]


def va_collection_paths(settings: Settings) -> list[str]:
    """Where the VariantAutoscalings served live: one collection cluster-wide, or one per namespace."""
    if settings.clusterwide:
        return [KubeClient.va_collection(None)]
    return [KubeClient.va_collection(ns) for ns in settings.namespaces]


def leader_for(settings: Settings, kube: KubeClient) -> LeaderLike:
    if not settings.leader_election:
        return AlwaysLeader()
    return LeaderElector(
        kube,
        namespace=settings.operator_namespace,
        name=settings.lease_name,
        identity=settings.identity,
        lease_duration=settings.lease_duration_seconds,
        renew_deadline=settings.renew_deadline_seconds,
        retry_period=settings.retry_period_seconds,
    )


@dataclass
class Runtime:
    """Process-scoped resources and the background tasks that use them."""

    settings: Settings
    kube: KubeClient
    watch_kube: KubeClient
    exporter: Exporter
    leader: LeaderLike
    engine: Engine
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    @classmethod
    async def start(
        cls,
        settings: Settings,
        *,
        nodes: Callable[[], Iterable[inv.NodeGPUs]],
        vas: Bodies | None = None,
        planner: Planner | None = None,
    ) -> Runtime:
        """Start everything; ``vas``: the VariantAutoscalings from elsewhere (a kopf index) instead of
        this runtime's informer (``WVA_VA_WATCH=kopf``, for the benchmark: docs/design.md)."""
        credentials = load_credentials()
        kube = KubeClient(credentials, timeout=settings.kube_timeout_seconds)
        # Watches hold a connection each (one per served namespace): their own pool, so they never
        # take the connections the cycle's requests need.
        watch_kube = KubeClient(
            credentials,
            timeout=settings.kube_timeout_seconds,
            transport=AiohttpTransport(credentials, timeout=settings.kube_timeout_seconds, limit=0),
        )
        leader = leader_for(settings, kube)
        exporter = Exporter(is_active=leader.is_leader)
        await exporter.start(
            settings.metrics_host, settings.metrics_port, security=metrics_security(settings, kube)
        )
        informer = None
        if vas is None:
            informer = Informer(watch_kube, va_collection_paths(settings), what="VariantAutoscalings")
            vas = informer.values
        engine = Engine(
            settings,
            kube=kube,
            exporter=exporter,
            events=EventRecorder(kube, instance=settings.identity),
            leader=leader,
            planner=planner or OptimizerPlanner(),
            vas=vas,
            nodes=nodes,
        )
        # Only the ConfigMaps' changes matter (they trigger a cycle): the cycle reads them afresh.
        configmaps = Informer(
            watch_kube,
            [f"/api/v1/namespaces/{settings.operator_namespace}/configmaps"],
            what="ConfigMaps",
            on_event=engine.notify_configmap,
        )
        runtime = cls(
            settings=settings,
            kube=kube,
            watch_kube=watch_kube,
            exporter=exporter,
            leader=leader,
            engine=engine,
        )
        runtime._spawn("leader election", leader.run())
        runtime._spawn("ConfigMap informer", configmaps.run())
        if informer is not None:
            informer.on_event = engine.notify_va
            runtime._spawn("VariantAutoscaling informer", informer.run())
            # The first cycle runs at once: let it see every VariantAutoscaling (a cycle on a partial
            # view would drop the others' gauges). If listing fails, cycles fail and say why.
            try:
                async with asyncio.timeout(settings.kube_timeout_seconds):
                    await informer.wait_synced()
            except TimeoutError:
                logger.warning("VariantAutoscalings not listed yet: %s", informer.last_error or "no answer")
        runtime._spawn("engine", engine.run_forever())
        logger.info(
            "started: identity %s, %s, metrics on :%s",
            settings.identity,
            "cluster-wide" if settings.clusterwide else f"namespaces {', '.join(settings.namespaces)}",
            exporter.port,
        )
        return runtime

    def _spawn(self, what: str, coro: Any) -> None:
        self.tasks[what] = asyncio.get_running_loop().create_task(coro, name=f"variant-autoscaler {what}")

    def health(self) -> dict[str, Any]:
        """For the liveness probe: raises when a background task ended (each runs until cancelled, so
        one that ended died of a bug: the process can no longer lead, or sees the cluster frozen), or
        when cycles stopped completing (:meth:`Engine.health`)."""
        for what, task in self.tasks.items():
            if task.done():
                error = None if task.cancelled() else task.exception()
                raise VariantAutoscalerError(f"the {what} task stopped: {error!r}")
        return self.engine.health()

    async def stop(self) -> None:
        """Graceful shutdown: stop the tasks, give up the Lease, close everything."""
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        await self.leader.release()
        await self.engine.aclose()
        await self.exporter.stop()
        await self.kube.aclose()
        await self.watch_kube.aclose()
        logger.info("stopped")
