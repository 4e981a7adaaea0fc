"""Leader election: one leader at a time, takeover only after expiry, 409 loses, renew deadline, release."""

from __future__ import annotations

import json
from typing import Any

import httpx

from variant_autoscaler.adapters.kube import CallableTransport, Credentials, KubeClient
from variant_autoscaler.controller.lease import LeaderElector


class FakeLeases:
    """An API server holding Leases with resourceVersion checks (PUT with a stale version -> 409)."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.rv = 0
        self.down = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            return httpx.Response(503, json={"message": "unavailable"})
        name = request.url.path.rsplit("/", 1)[-1]
        if request.method == "GET":
            if name not in self.leases:
                return httpx.Response(404, json={"message": "not found"})
            return httpx.Response(200, json=self.leases[name])
        body = json.loads(request.content)
        if request.method == "POST":
            name = body["metadata"]["name"]
            if name in self.leases:
                return httpx.Response(409, json={"message": "exists"})
        elif self.leases[name]["metadata"]["resourceVersion"] != body["metadata"].get("resourceVersion"):
            return httpx.Response(409, json={"message": "conflict"})
        self.rv += 1
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.leases[name] = body
        return httpx.Response(200, json=body)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _elector(server: FakeLeases, identity: str, clock: Clock) -> LeaderElector:
    kube = KubeClient(
        Credentials(host="https://k8s.test", verify=True),
        transport=CallableTransport.from_httpx(server),
        retries=0,
    )
    return LeaderElector(
        kube,
        namespace="ops",
        name="leader",
        identity=identity,
        lease_duration=15,
        renew_deadline=10,
        retry_period=2,
        clock=clock,
    )


async def test_one_leader_and_takeover_after_expiry() -> None:
    server, clock = FakeLeases(), Clock()
    a, b = _elector(server, "a", clock), _elector(server, "b", clock)
    assert await a.try_acquire_or_renew() is True
    assert await b.try_acquire_or_renew() is False
    assert a.is_leader() and not b.is_leader()
    clock.t += 5
    assert await a.try_acquire_or_renew() is True  # renewal
    clock.t += 14  # b saw a renewal 14 s ago by its own clock: still live
    assert await b.try_acquire_or_renew() is False
    # a stops renewing (it is stuck); after its renew deadline it no longer thinks it leads ...
    clock.t += 2
    assert not a.is_leader()
    # ... and only after a full lease duration since b last saw a change may b take over.
    clock.t += 14
    assert await b.try_acquire_or_renew() is True
    assert server.leases["leader"]["spec"]["holderIdentity"] == "b"
    assert server.leases["leader"]["spec"]["leaseTransitions"] == 1
    assert await a.try_acquire_or_renew() is False


async def test_stale_write_loses() -> None:
    server, clock = FakeLeases(), Clock()
    a, b = _elector(server, "a", clock), _elector(server, "b", clock)
    await a.try_acquire_or_renew()
    await a.release()
    free = json.loads(json.dumps(server.leases["leader"]))
    assert await b.try_acquire_or_renew() is True
    original_get = a.kube.get_lease

    async def stale_get(namespace: str, name: str) -> dict[str, Any]:
        return free  # a still sees the free lease it read before b's write

    a.kube.get_lease = stale_get  # type: ignore[method-assign]
    assert await a.try_acquire_or_renew() is False
    assert not a.is_leader() and b.is_leader()
    a.kube.get_lease = original_get  # type: ignore[method-assign]


async def test_leader_keeps_leading_through_short_outages_only() -> None:
    server, clock = FakeLeases(), Clock()
    a = _elector(server, "a", clock)
    await a.try_acquire_or_renew()
    server.down = True
    clock.t += 6
    assert await a.try_acquire_or_renew() is True  # within the renew deadline
    clock.t += 5
    assert await a.try_acquire_or_renew() is False  # 11 s without a renewal
    server.down = False
    assert await a.try_acquire_or_renew() is True  # the lease still names a: it renews


async def test_release_lets_a_standby_take_over_at_once() -> None:
    server, clock = FakeLeases(), Clock()
    changes: list[bool] = []
    a, b = _elector(server, "a", clock), _elector(server, "b", clock)
    a._on_change = changes.append
    await a.try_acquire_or_renew()
    assert await b.try_acquire_or_renew() is False
    await a.release()
    assert not a.is_leader() and changes == [True, False]
    assert await b.try_acquire_or_renew() is True
