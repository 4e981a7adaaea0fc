"""Helpers of the simulator tests: a hand-computable fake replica and tiny scenarios."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np

from variant_autoscaler.sim.replica import Completion, Server
from variant_autoscaler.sim.scenario import (
    Accelerator,
    Failure,
    ModelSpec,
    NodePool,
    Profile,
    Scenario,
    ServiceClass,
    SimSettings,
    Variant,
)
from variant_autoscaler.sim.traffic import Arrivals, TraceTraffic
from vatesting.profiles import parms, sim_profile


class FakeServer:
    """A replica with ``slots`` parallel lanes and fixed timing: a request started at ``s`` has its
    first token at ``s + ttft`` and finishes ``(out - 1) * itl`` later. FIFO queue, no KV limit."""

    def __init__(self, slots: int, ttft: float, itl: float) -> None:
        self.slots = slots
        self.ttft = ttft
        self.itl = itl
        self.queue: deque[tuple[int, int]] = deque()  # (rid, out)
        self.running: dict[int, tuple[float, float]] = {}  # rid -> (first, finish)
        self.now = 0.0

    def _start(self, at: float) -> None:
        while self.queue and len(self.running) < self.slots:
            rid, out = self.queue.popleft()
            first = at + self.ttft
            self.running[rid] = (first, first + (out - 1) * self.itl)

    def submit(self, rid: int, now: float, input_tokens: int, output_tokens: int) -> bool:
        self.advance_state(now)
        self.queue.append((rid, output_tokens))
        self._start(now)
        return True

    def advance_state(self, now: float) -> list[Completion]:
        done: list[Completion] = []
        while self.running:
            rid, (first, finish) = min(self.running.items(), key=lambda kv: (kv[1][1], kv[0]))
            if finish > now:
                break
            del self.running[rid]
            done.append(Completion(rid, first, finish))
            self._start(finish)
        self.now = now
        return done

    def advance(self, now: float) -> list[Completion]:
        return self.advance_state(now)

    def next_event_time(self) -> float:
        if not self.running:
            return math.inf
        return min(f for _, f in self.running.values())

    def expire(self, now: float, arrival: Sequence[float], timeout: float) -> list[int]:
        gone = [rid for rid, _ in self.queue if arrival[rid] <= now - timeout]
        self.queue = deque((rid, out) for rid, out in self.queue if rid not in gone)
        return gone

    def in_flight(self) -> list[int]:
        return [rid for rid, _ in self.queue] + list(self.running)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.queue)

    @property
    def kv_usage(self) -> float:
        return len(self.running) / self.slots


def fake_factory(
    slots: int = 4, ttft: float = 0.1, itl: float = 0.01
) -> Callable[[Profile, int, int], Server]:
    def make(profile: Profile, max_batch: int, seed: int) -> Server:
        return FakeServer(slots, ttft, itl)

    return make


PROFILE = sim_profile("A100", batch=8, parms=parms(10.0, 0.1, 10.0, 0.01))


def trace(times: Sequence[float], inp: int = 100, out: int = 11) -> TraceTraffic:
    n = len(times)
    arr = Arrivals(
        np.asarray(times, dtype=np.float64), np.full(n, inp, dtype=np.int64), np.full(n, out, dtype=np.int64)
    )
    return TraceTraffic(arr, offset_s=float(times[0]) if n else 0.0)


def one_model(
    times: Sequence[float],
    *,
    replicas: int = 1,
    duration: float = 100.0,
    nodes: int = 1,
    gpus: int = 8,
    startup: float = 10.0,
    out: int = 11,
    failures: tuple[Failure, ...] = (),
    settings: SimSettings | None = None,
    cost: float = 36.0,
    slo_ttft_ms: float = 200.0,
    slo_itl_ms: float = 20.0,
) -> Scenario:
    """One model, one A100 variant, arrivals at ``times`` (100 input, ``out`` output tokens)."""
    return Scenario(
        name="tiny",
        duration_s=duration,
        seed=7,
        accelerators=(Accelerator("A100", "NVIDIA-A100", cost),),
        pools=(NodePool("pool", "A100", nodes, gpus),),
        classes=(ServiceClass("Premium", 1),),
        models=(
            ModelSpec("m", "Premium", slo_ttft_ms, slo_itl_ms, (PROFILE,), trace(times, out=out), startup),
        ),
        variants=(Variant("v", "m", "A100", initial_replicas=replicas),),
        failures=failures,
        settings=settings or SimSettings(scrape_interval_s=5.0, rate_window_s=20.0, sample_interval_s=10.0),
    )
