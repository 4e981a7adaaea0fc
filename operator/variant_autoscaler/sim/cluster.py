"""The simulated cluster's objects (nodes, pods), the outcome codes of requests, the result of a run, and
the slowed replica of a degraded node.

:mod:`variant_autoscaler.sim.simulator` runs the event loop over these; they live here so that the loop's
module stays about the loop.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import overload

import numpy as np

from variant_autoscaler.sim.replica import Completion, Server
from variant_autoscaler.sim.scenario import Scenario
from variant_autoscaler.sim.traffic import Arrivals, rng_for

__all__ = [
    "DROP_KILLED",
    "DROP_NONE",
    "DROP_REJECTED",
    "DROP_TIMEOUT",
    "Node",
    "Pod",
    "PodState",
    "RunResult",
    "SlowedServer",
    "columns",
    "merge_arrivals",
    "scenario_arrivals",
]

DROP_NONE = 0
DROP_TIMEOUT = 1  # no first token within the client's timeout (waiting at the gateway or in a queue)
DROP_KILLED = 2  # the pod serving it died (node failure) or was deleted before it finished
DROP_REJECTED = 3  # the server refused it (prompt + output longer than the model accepts)


class PodState(IntEnum):
    PENDING = 0
    STARTING = 1
    READY = 2
    DRAINING = 3
    GONE = 4


class Node:
    """One node of a pool: ``gpus`` units of one accelerator; ``slow`` > 1 while it is degraded."""

    __slots__ = ("acc", "free", "gpus", "healthy", "index", "pods", "pool", "slow")

    def __init__(self, pool: str, index: int, acc: str, gpus: int) -> None:
        self.pool = pool
        self.index = index
        self.acc = acc
        self.gpus = gpus
        self.free = gpus
        self.healthy = True
        self.slow = 1.0  # every iteration of its replicas takes this many times as long
        self.pods: dict[Pod, None] = {}  # insertion-ordered, so runs are deterministic


class Pod:
    __slots__ = (
        "created",
        "inv_batch",
        "max_batch",
        "node",
        "outstanding",
        "pid",
        "placed",
        "ready_at",
        "server",
        "state",
        "var",
        "wake",
    )

    def __init__(self, pid: int, var: int, created: float, max_batch: int) -> None:
        self.pid = pid
        self.var = var
        self.created = created
        self.max_batch = max_batch
        self.inv_batch = 1.0 / max_batch
        self.state = PodState.PENDING
        self.node: Node | None = None
        self.placed = math.nan
        self.ready_at = math.nan
        self.server: Server | None = None
        self.outstanding = 0
        self.wake = math.inf  # the time of this pod's live wake-up entry in the heap


@dataclass(frozen=True, slots=True)
class RunResult:
    """Everything measured in one run; :mod:`variant_autoscaler.sim.report` summarises it."""

    policy: str
    scenario: Scenario
    variants: tuple[str, ...]
    models: tuple[str, ...]
    # Per request (all models, in arrival order).
    arrival_s: np.ndarray
    model_idx: np.ndarray
    variant_idx: np.ndarray  # -1 when never routed
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    ttft_s: np.ndarray  # nan when dropped
    itl_s: np.ndarray  # mean inter-token latency; 0 for one-token outputs; nan when dropped
    dropped: np.ndarray  # DROP_* codes
    # Per variant.
    gpu_seconds: Mapping[str, float]
    cost: Mapping[str, float]
    scale_ups: Mapping[str, int]
    scale_downs: Mapping[str, int]
    # Time series sampled every sample_interval_s: "t", and per variant/model lists.
    series: Mapping[str, object]
    decisions: int
    events: int
    cpu_s: float
    wall_s: float


def merge_arrivals(
    scenario: Scenario, arrivals: Mapping[str, Arrivals]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every model's requests in one arrival order: times, model indices, input and output tokens."""
    times: list[np.ndarray] = []
    models: list[np.ndarray] = []
    ins: list[np.ndarray] = []
    outs: list[np.ndarray] = []
    for m, model in enumerate(scenario.models):
        arr = arrivals[model.model_id]
        times.append(arr.times)
        models.append(np.full(len(arr), m, dtype=np.int64))
        ins.append(arr.input_tokens)
        outs.append(arr.output_tokens)
    t = np.concatenate(times) if times else np.zeros(0)
    order = np.argsort(t, kind="stable")
    return (
        t[order],
        np.concatenate(models)[order],
        np.concatenate(ins)[order],
        np.concatenate(outs)[order],
    )


def scenario_arrivals(scenario: Scenario) -> dict[str, Arrivals]:
    """The requests of every model, drawn once from the scenario's seed (shared by all policies)."""
    return {
        m.model_id: m.traffic.arrivals(rng_for(scenario.seed, m.model_id), scenario.duration_s)
        for m in scenario.models
    }


def columns(rows: list[list[int]], names: list[str]) -> dict[str, list[int]]:
    return {name: [row[i] for row in rows] for i, name in enumerate(names)}


# ------------------------------------------------------------------------------------- slowed nodes


class _Shifted(Sequence[float]):
    """``base[i] + shift``: arrival times moved onto a slowed replica's own clock."""

    __slots__ = ("_base", "_shift")

    def __init__(self, base: Sequence[float], shift: float) -> None:
        self._base = base
        self._shift = shift

    def __len__(self) -> int:
        return len(self._base)

    @overload
    def __getitem__(self, i: int) -> float: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[float]: ...
    def __getitem__(self, i: int | slice) -> float | Sequence[float]:
        if isinstance(i, slice):
            return [x + self._shift for x in self._base[i]]
        return self._base[i] + self._shift


class SlowedServer:
    """A replica on a degraded node (thermal throttling, a failing link): it runs ``factor`` times slower.

    The wrapped server runs on a clock of its own that advances ``1 / factor`` as fast as the cluster's
    from the moment the node slows down (and at the normal pace again once it recovers), so every
    iteration, including the one in progress, stretches by the factor: exactly a profile whose α, β, γ, δ
    are multiplied by it. Any :class:`~variant_autoscaler.sim.replica.Server` can be wrapped. Times
    crossing the boundary are mapped both ways.
    """

    __slots__ = ("_inner", "_rate", "_real", "_virt")

    def __init__(self, inner: Server, now: float, factor: float) -> None:
        if not factor > 0:
            raise ValueError("a slowdown factor must be > 0")
        self._inner = inner
        # Break points of the piecewise-linear clock: real times, the inner clock's times, and the inner
        # clock's rate from each point on.
        self._real = [now]
        self._virt = [now]
        self._rate = [1.0 / factor]

    @property
    def inner(self) -> Server:
        return self._inner

    def set_factor(self, now: float, factor: float) -> None:
        """From ``now`` on, run ``factor`` times slower than normal (1: normal speed)."""
        virt = self._to_inner(now)
        if now == self._real[-1]:
            self._rate[-1] = 1.0 / factor
            return
        self._real.append(now)
        self._virt.append(virt)
        self._rate.append(1.0 / factor)

    def _to_inner(self, t: float) -> float:
        return self._virt[-1] + (t - self._real[-1]) * self._rate[-1]

    def _to_real(self, v: float) -> float:
        if v == math.inf or v < self._virt[0]:
            return v  # the clocks were one before the node slowed down
        k = bisect.bisect_right(self._virt, v) - 1
        return self._real[k] + (v - self._virt[k]) / self._rate[k]

    def submit(self, rid: int, now: float, input_tokens: int, output_tokens: int) -> bool:
        return self._inner.submit(rid, self._to_inner(now), input_tokens, output_tokens)

    def advance(self, now: float) -> list[Completion]:
        done = self._inner.advance(self._to_inner(now))
        real = self._to_real
        return [Completion(c.rid, real(c.first_token_s), real(c.finish_s)) for c in done]

    def next_event_time(self) -> float:
        return self._to_real(self._inner.next_event_time())

    def expire(self, now: float, arrival: Sequence[float], timeout: float) -> list[int]:
        virt = self._to_inner(now)
        # The client's timeout runs on the cluster's clock: shift arrivals so that the inner server's
        # comparison `arrival <= its now - timeout` is the cluster's `arrival <= now - timeout`.
        return self._inner.expire(virt, _Shifted(arrival, virt - now), timeout)

    def in_flight(self) -> list[int]:
        return self._inner.in_flight()

    @property
    def num_running(self) -> int:
        return self._inner.num_running

    @property
    def num_waiting(self) -> int:
        return self._inner.num_waiting

    @property
    def kv_usage(self) -> float:
        return self._inner.kv_usage
