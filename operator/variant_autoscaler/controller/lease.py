"""Leader election on a ``coordination.k8s.io/v1`` Lease, so two operator processes never both actuate.

kopf has no leader election (its peering pauses every replica of equal priority, and needs CRDs of its
own: docs/design.md, "kopf and what is custom"); ``handlers.py`` runs this one through kopf's startup,
cleanup and probe handlers. It gates what must be exclusive (cycles, status writes, scale patches,
Events, the ``inferno_*`` gauges), while a standby keeps its watches warm.

The algorithm is client-go's: a candidate takes the Lease when it is free or when its record has not
changed for ``lease_duration`` by the candidate's *own* clock (so clock skew between machines does not
matter); writes carry the ``resourceVersion``, so of two racing candidates one gets HTTP 409 and loses.
The leader renews every ``retry_period`` and considers itself leader only until ``renew_deadline`` after
its last successful renewal; since ``renew_deadline < lease_duration``, an old leader that cannot renew
stops acting before anyone else may take over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from variant_autoscaler.adapters.kube import JSON, KubeClient
from variant_autoscaler.errors import ConflictError, KubeError

logger = logging.getLogger(__name__)


def micro_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        kube: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        if not renew_deadline < lease_duration:
            raise ValueError("renew_deadline must be shorter than lease_duration")
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._clock = clock
        self._on_change = on_change
        self._renewed_at: float | None = None  # clock() of our last successful write as holder
        self._observed: tuple[Any, ...] | None = None  # the other holder's record as last seen
        self._observed_at = 0.0
        self._was_leader = False

    def is_leader(self) -> bool:
        """True while our last successful renewal is younger than the renew deadline."""
        return self._renewed_at is not None and self._clock() < self._renewed_at + self.renew_deadline

    def _notify(self) -> None:
        leader = self.is_leader()
        if leader != self._was_leader:
            self._was_leader = leader
            logger.info(
                "%s leadership of lease %s/%s", "acquired" if leader else "lost", self.namespace, self.name
            )
            if self._on_change is not None:
                self._on_change(leader)

    def _spec(self, *, acquire_time: str, transitions: int) -> JSON:
        now = micro_time(datetime.now(UTC))
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": acquire_time or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def try_acquire_or_renew(self) -> bool:
        """One round of the election; returns whether we lead afterwards."""
        started = self._clock()
        try:
            lease = await self.kube.get_lease(self.namespace, self.name)
            if lease is None:
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(acquire_time="", transitions=0),
                }
                await self.kube.create_lease(self.namespace, body)
                self._renewed_at = started
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"))
            if holder != self.identity:
                self._renewed_at = None
                if record != self._observed:
                    self._observed, self._observed_at = record, started
                duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
                if holder and started < self._observed_at + duration:
                    return False  # someone else holds a live lease
            transitions = int(spec.get("leaseTransitions") or 0)
            new_spec = (
                self._spec(acquire_time=str(spec.get("acquireTime") or ""), transitions=transitions)
                if holder == self.identity
                else self._spec(acquire_time="", transitions=transitions + 1)
            )
            body = {**lease, "spec": new_spec}
            await self.kube.replace_lease(self.namespace, self.name, body)
            self._renewed_at = started
            return True
        except ConflictError:
            logger.debug("lease %s/%s changed under us; not leading this round", self.namespace, self.name)
            return self.is_leader()
        except KubeError as exc:
            logger.warning("leader election round failed: %s", exc)
            return self.is_leader()
        finally:
            self._notify()

    async def run(self) -> None:
        """Campaign and renew until cancelled."""
        while True:
            await self.try_acquire_or_renew()
            await asyncio.sleep(self.retry_period)

    async def release(self) -> None:
        """Give the lease up (graceful shutdown), so a standby takes over at once."""
        if not self.is_leader():
            return
        self._renewed_at = None
        try:
            lease = await self.kube.get_lease(self.namespace, self.name)
            if lease is not None and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                spec = dict(lease.get("spec") or {})
                spec.update(
                    holderIdentity="", leaseDurationSeconds=1, renewTime=micro_time(datetime.now(UTC))
                )
                await self.kube.replace_lease(self.namespace, self.name, {**lease, "spec": spec})
        except KubeError as exc:
            logger.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc)
        finally:
            self._notify()


class AlwaysLeader:
    """Leader election switched off: this process always acts."""

    def is_leader(self) -> bool:
        return True

    async def run(self) -> None:
        await asyncio.Event().wait()

    async def release(self) -> None:
        return None
