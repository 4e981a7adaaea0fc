"""The operator process's resources: API clients, metrics endpoint, leader election, informers and the
engine's task; started by ``handlers.startup`` and stopped by ``handlers.cleanup``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from variant_autoscaler.adapters import inventory as inv
from variant_autoscaler.adapters.events import EventRecorder
from variant_autoscaler.adapters.exporter import Exporter
from variant_autoscaler.adapters.informer import Informer
from variant_autoscaler.adapters.kube import AiohttpTransport, KubeClient
from variant_autoscaler.adapters.metrics_auth import metrics_security
from variant_autoscaler.engine.cycle import Engine, LeaderLike
from variant_autoscaler.planner import OptimizerPlanner, Planner
from variant_autoscaler.settings import Settings

__all__ = ["Runtime", "va_collection_paths"]

logger = logging.getLogger(__name__)


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
        await exporter.start(
            settings.metrics_host, settings.metrics_port, security=metrics_security(settings, kube)
        )
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
