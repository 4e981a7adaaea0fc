"""Scale from zero within about a second: a fast loop on the inference gateway's queue.

A variant at zero replicas has no server to measure, so the cycle (every ``GLOBAL_OPT_INTERVAL``) cannot
see its demand in time. The inference gateway queues the model's requests meanwhile and exports
``inference_extension_flow_control_queue_size{target_model_name=...}``. While at least one variant is at
zero, this loop reads that gauge for every model in **one** query per tick (whatever the number of
variants; no query at all while none is at zero) and, for a model with a non-zero queue, scales the
cheapest of its variants at zero in each namespace from 0 to 1 directly through ``/scale`` (on the
version read, only while leading), posts an Event and asks for a cycle; the cycle decides the rest. A
variant it woke is not idle for its retention period (no flapping back to zero before its first
requests complete).

Only the leader acts; a shadow-mode variant is never woken (shadow changes nothing).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from variant_autoscaler.adapters.kube import KubeClient
from variant_autoscaler.adapters.prometheus import Collector
from variant_autoscaler.controller.events import EventRecorder
from variant_autoscaler.errors import CollectionError, KubeError
from variant_autoscaler.planner import VariantKey

__all__ = ["Sleeper", "ZeroWaker"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Sleeper:
    """A variant at zero replicas, as the last cycle saw it."""

    key: VariantKey
    model_id: str
    api_version: str
    kind: str
    name: str
    cost: float
    body: Mapping[str, Any]  # the VA, HPA or ScaledObject (for the Event)


class ZeroWaker:
    """The fast scale-from-zero loop (see the module doc)."""

    def __init__(
        self,
        *,
        kube: KubeClient,
        events: EventRecorder,
        collector: Callable[[], Collector | None],
        leading: Callable[[], bool],
        trigger: Callable[[str], None],
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.events = events
        self._collector = collector
        self._leading = leading
        self._trigger = trigger
        self.interval = interval
        self._clock = clock
        self.sleepers: tuple[Sleeper, ...] = ()
        self._woken: dict[VariantKey, float] = {}
        self.queries = 0
        self.wakes = 0

    def update(self, sleepers: Sequence[Sleeper]) -> None:
        """The variants at zero, from the last cycle."""
        self.sleepers = tuple(sleepers)

    def woken_within(self, key: VariantKey, seconds: float) -> bool:
        """Whether this loop scaled ``key`` from zero less than ``seconds`` ago."""
        at = self._woken.get(key)
        return at is not None and self._clock() - at < seconds

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:  # a bug: keep the loop alive, the cycle still scales from zero
                logger.exception("scale-from-zero tick failed")
            await asyncio.sleep(self.interval)

    async def tick(self) -> list[VariantKey]:
        """One look at the gateway's queues; returns the variants scaled from zero."""
        if not self.sleepers or not self._leading():
            return []
        collector = self._collector()
        if collector is None:
            return []
        self.queries += 1
        try:
            queues = await collector.gateway_queues()
        except CollectionError as exc:
            logger.debug("scale from zero: cannot read the gateway's queues: %s", exc)
            return []
        chosen: dict[tuple[str, str], Sleeper] = {}
        for s in sorted(self.sleepers, key=lambda s: (s.cost, s.key)):
            if queues.get(s.model_id, 0.0) > 0:
                chosen.setdefault((s.key[0], s.model_id), s)
        results = await asyncio.gather(*(self._wake(s, queues) for s in chosen.values()))
        return [key for key in results if key is not None]

    async def _wake(self, s: Sleeper, queues: Mapping[str, float]) -> VariantKey | None:
        namespace = s.key[0]
        try:
            scale = await self.kube.get_scale(s.api_version, s.kind, namespace, s.name)
            if int((scale.get("spec") or {}).get("replicas") or 0) != 0 or not self._leading():
                return None  # woken already, by someone
            version = (scale.get("metadata") or {}).get("resourceVersion")
            await self.kube.patch_scale(s.api_version, s.kind, namespace, s.name, 1, resource_version=version)
        except KubeError as exc:
            logger.warning("scale from zero of %s %s/%s failed: %s", s.kind, namespace, s.name, exc)
            return None
        self.wakes += 1
        self._woken[s.key] = self._clock()
        message = (
            f"scaled {s.kind}/{s.name} from 0 to 1: the inference gateway queues "
            f"{queues.get(s.model_id, 0.0):g} requests for model {s.model_id}"
        )
        logger.info("%s/%s: %s", namespace, s.key[1], message)
        uid = (s.body.get("metadata") or {}).get("uid") or ""
        # Named after the version it scaled from: one Event per wake, even if posted twice.
        suffix = hashlib.sha256(f"{uid}|ScaledFromZero|{version}".encode()).hexdigest()[:20]
        await self.events.post(
            s.body,
            reason="ScaledFromZero",
            message=message,
            type_="Normal",
            now=datetime.now(UTC),
            name_suffix=suffix,
        )
        self._trigger(f"{s.kind} {namespace}/{s.name} scaled from zero")
        return s.key
