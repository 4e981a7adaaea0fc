"""The process's resources: the liveness probe's view of the background tasks."""

from __future__ import annotations

import asyncio

import pytest

from variant_autoscaler.controller.lease import AlwaysLeader
from variant_autoscaler.engine import Runtime
from variant_autoscaler.errors import VariantAutoscalerError
from vatesting.fakes import Harness


def _runtime(h: Harness) -> Runtime:
    client = h.kube.client()
    return Runtime(
        settings=h.settings,
        kube=client,
        watch_kube=client,
        exporter=h.exporter,
        leader=AlwaysLeader(),
        engine=h.engine,
    )


async def test_health_fails_when_a_background_task_died() -> None:
    # Each task runs until cancelled: one that ended died of a bug (an election that can never lead
    # again, a store that no longer changes), which the cycles alone would not show.
    h = Harness()
    runtime = _runtime(h)

    async def forever() -> None:
        await asyncio.Event().wait()

    async def broken() -> None:
        raise RuntimeError("bug")

    runtime._spawn("leader election", forever())
    runtime._spawn("VariantAutoscaling informer", forever())
    await asyncio.sleep(0)
    assert runtime.health()["cycles"] == 0
    runtime._spawn("ConfigMap informer", broken())
    await asyncio.sleep(0)
    with pytest.raises(
        VariantAutoscalerError, match=r"the ConfigMap informer task stopped: RuntimeError\('bug'\)"
    ):
        runtime.health()
    await runtime.stop()
    assert all(task.done() for task in runtime.tasks.values())


async def test_health_fails_when_cycles_stop_as_the_engine_says() -> None:
    h = Harness()
    h.add_va()
    h.load(60.0)
    await h.engine.run_cycle()
    runtime = _runtime(h)
    assert runtime.health() == h.engine.health()
    h.engine.last_completed = (h.engine.last_completed or 0.0) - 10_000
    with pytest.raises(VariantAutoscalerError, match="no cycle has completed"):
        runtime.health()
