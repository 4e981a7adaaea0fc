"""Traffic the way a Service sends it: ``vllm-loadgen`` over the serving pods of Deployments, per request.

:class:`LoadDriver` drives ``vllm-loadgen`` (its Python API) against the pods the local cluster's pod
runner serves for one or more Deployments: every few seconds it re-reads the serving pods and starts the
next load segment against them, round-robin, so new pods get traffic as soon as they serve and removed
ones stop getting it. Every request is recorded (per-request TTFT and mean ITL, measured at the load
generator) and tagged with the caller's current phase. :class:`PhaseStats` turns records into SLO
attainment: the share of requests that completed within a TTFT and an ITL target.

Used by ``make demo`` (:mod:`demo`) and the end-to-end suite (tests/e2e).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import math
import statistics
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes import config as kube_config

from localcluster import LocalCluster
from localcluster.names import ENDPOINT_ANNOTATION
from vllm_emulator.distributions import parse_distribution
from vllm_emulator.loadgen import LoadSpec, RequestRecord, run_load

__all__ = ["INSTANCE_LABEL", "LoadDriver", "PhaseStats", "Slo", "serving_urls"]

#: The label localcluster's emulator Deployments select their pods by.
INSTANCE_LABEL = "app.kubernetes.io/instance"


@dataclass(frozen=True)
class Slo:
    """A service class's targets for one model, in milliseconds."""

    ttft_ms: float
    itl_ms: float


@dataclass(frozen=True)
class PhaseStats:
    """SLO attainment of one phase, measured at the load generator.

    ``requests`` counts every request the phase wanted to send: completed, failed, cut off, and those
    that found no serving pod. A request *meets the SLOs* when it completed, its TTFT is within the TTFT
    target and the mean gap between its tokens within the ITL target.
    """

    requests: int
    completed: int
    failed: int
    ttft_met: int
    itl_met: int
    both_met: int
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    itl_mean_ms: float | None
    errors: Mapping[str, int] = field(default_factory=dict)

    @property
    def attainment(self) -> float | None:
        return self.both_met / self.requests if self.requests else None

    @classmethod
    def of(cls, records: Iterable[RequestRecord], slo: Slo, unserved: int = 0) -> PhaseStats:
        records = list(records)
        done = [r for r in records if r.error is None and r.e2e_s is not None]
        ttfts = sorted(1000.0 * r.ttft_s for r in done if r.ttft_s is not None)
        itls = [1000.0 * r.itl_s for r in done if r.itl_s is not None]

        def ttft_ok(r: RequestRecord) -> bool:
            return r.ttft_s is not None and 1000.0 * r.ttft_s <= slo.ttft_ms

        def itl_ok(r: RequestRecord) -> bool:
            # A one-token answer has no inter-token gap: nothing to miss.
            return r.itl_s is None or 1000.0 * r.itl_s <= slo.itl_ms

        errors: dict[str, int] = {}
        for r in records:
            if r.error is not None:
                errors[r.error] = errors.get(r.error, 0) + 1
        if unserved:
            errors["no_serving_pod"] = unserved
        return cls(
            requests=len(records) + unserved,
            completed=len(done),
            failed=len(records) - len(done) + unserved,
            ttft_met=sum(1 for r in done if ttft_ok(r)),
            itl_met=sum(1 for r in done if itl_ok(r)),
            both_met=sum(1 for r in done if ttft_ok(r) and itl_ok(r)),
            ttft_p50_ms=_quantile(ttfts, 0.5),
            ttft_p90_ms=_quantile(ttfts, 0.9),
            itl_mean_ms=statistics.fmean(itls) if itls else None,
            errors=dict(sorted(errors.items())),
        )

    def describe(self) -> str:
        if not self.requests:
            return "no requests"
        return (
            f"{self.both_met}/{self.requests} requests met both SLOs ({_pct(self.attainment)}); "
            f"TTFT met {self.ttft_met}, ITL met {self.itl_met}, failed {self.failed} {dict(self.errors)}; "
            f"TTFT p50 {_num(self.ttft_p50_ms)} ms p90 {_num(self.ttft_p90_ms)} ms, "
            f"mean ITL {_num(self.itl_mean_ms)} ms"
        )


def _quantile(ordered: Sequence[float], q: float) -> float | None:
    if not ordered:
        return None
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100.0 * value:.1f}%"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


# --------------------------------------------------------------------------------------------- load


@dataclass(frozen=True)
class _Sent:
    at: float  # wall-clock send time
    record: RequestRecord


class LoadDriver:
    """Open-loop load at a settable rate (requests per minute) over the serving pods of Deployments.

    Runs in a thread of its own with its own event loop; the test thread calls :meth:`set_rate`,
    :meth:`mark` (start a phase) and reads :meth:`stats`. Arrivals are evenly spaced (WVA's load
    generator's default), prompts and answers have fixed lengths, answers are streamed (the client-side
    TTFT and ITL need it).
    """

    def __init__(
        self,
        cluster: LocalCluster,
        namespace: str,
        deployments: Sequence[str],
        model: str,
        slo: Slo,
        *,
        input_tokens: int = 100,
        output_tokens: int = 64,
        segment_seconds: float = 4.0,
        seed: int = 1,
    ) -> None:
        self.namespace = namespace
        self.deployments = tuple(deployments)
        self.model = model
        self.slo = slo
        self.segment_seconds = segment_seconds
        self._input = parse_distribution(str(input_tokens))
        self._output = parse_distribution(str(output_tokens))
        self._seed = seed
        load: Any = kube_config.new_client_from_config  # the client's typing is partial
        self._api = load(config_file=str(cluster.admin_kubeconfig))
        self._core: Any = client.CoreV1Api(self._api)
        self._lock = threading.Lock()
        self._rpm = 0.0
        self._stopping = threading.Event()
        self._sent: list[_Sent] = []
        self._unserved: list[tuple[float, int]] = []  # (time, requests that found no serving pod)
        self._phases: list[tuple[float, str]] = [(0.0, "")]
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    # --------------------------------------------------------------------------------- control
    def start(self, rpm: float, phase: str) -> LoadDriver:
        self.mark(phase)
        self.set_rate(rpm)
        self._thread = threading.Thread(target=self._thread_main, name="e2e-load", daemon=True)
        self._thread.start()
        return self

    def set_rate(self, rpm: float) -> None:
        with self._lock:
            self._rpm = rpm

    @property
    def rpm(self) -> float:
        with self._lock:
            return self._rpm

    def mark(self, phase: str) -> None:
        """Requests sent from now on belong to ``phase``."""
        with self._lock:
            self._phases.append((time.time(), phase))

    def stop(self, drain_timeout: float = 90.0) -> None:
        """Stop sending and wait (bounded) for the requests in flight."""
        self._stopping.set()
        with self._lock:
            loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop has finished already
                loop.call_soon_threadsafe(wake.set)
        if self._thread is not None:
            self._thread.join(drain_timeout + 30.0)
        with contextlib.suppress(Exception):
            self._api.close()
        if self._failure is not None:
            raise AssertionError(f"the load driver failed: {self._failure!r}") from self._failure

    # --------------------------------------------------------------------------------- results
    def records(self, phase: str | None = None, since: float | None = None) -> list[RequestRecord]:
        """Requests sent in ``phase`` and/or since the wall-clock time ``since`` (finished ones only)."""
        with self._lock:
            return [s.record for s in self._sent if self._wanted(s.at, phase, since)]

    def stats(self, phase: str | None = None, since: float | None = None) -> PhaseStats:
        with self._lock:
            records = [s.record for s in self._sent if self._wanted(s.at, phase, since)]
            unserved = sum(n for at, n in self._unserved if self._wanted(at, phase, since))
        return PhaseStats.of(records, self.slo, unserved)

    def _wanted(self, at: float, phase: str | None, since: float | None) -> bool:
        return (since is None or at >= since) and (phase is None or self._phase_at(at) == phase)

    def completed_by_target(self, phase: str) -> dict[str, int]:
        """Completed requests per target URL (pod) in ``phase``."""
        counts: dict[str, int] = {}
        for record in self.records(phase):
            if record.error is None:
                counts[record.target] = counts.get(record.target, 0) + 1
        return counts

    def _phase_at(self, at: float) -> str:
        index = bisect.bisect_right([t for t, _ in self._phases], at) - 1
        return self._phases[max(index, 0)][1]

    # --------------------------------------------------------------------------------- the loop
    def endpoints(self) -> list[str]:
        """URLs of the Running, annotated (serving) pods of the Deployments, as a Service would route."""
        return serving_urls(self._core, self.namespace, self.deployments)

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by stop()
            self._failure = exc

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        with self._lock:
            self._loop, self._wake = loop, wake
        segments: set[asyncio.Task[Any]] = set()
        k = 0
        due = loop.time()
        urls: list[str] = []
        while not self._stopping.is_set():
            rpm = self.rpm
            if rpm > 0:
                # The API server away: keep routing as before, as a Service's rules outlive it.
                with contextlib.suppress(Exception):
                    urls = await asyncio.to_thread(self.endpoints)
                if urls:
                    task = loop.create_task(self._segment(urls, rpm, self._seed + k))
                    segments.add(task)
                    task.add_done_callback(segments.discard)
                else:
                    with self._lock:
                        self._unserved.append((time.time(), round(rpm / 60.0 * self.segment_seconds)))
            k += 1
            due += self.segment_seconds
            if not self._stopping.is_set() and (left := due - loop.time()) > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout=left)
        if segments:
            await asyncio.wait(set(segments), timeout=90.0)
            for task in segments:
                task.cancel()

    async def _segment(self, urls: list[str], rpm: float, seed: int) -> None:
        spec = LoadSpec(
            targets=tuple(urls),
            schedule=((self.segment_seconds, rpm / 60.0),),
            model=self.model,
            arrival="deterministic",
            input_tokens=self._input,
            output_tokens=self._output,
            stream=True,
            seed=seed,
            max_concurrency=512,
            request_timeout=120.0,
            drain_timeout=90.0,
        )
        started = time.time()

        def record(r: RequestRecord) -> None:
            with self._lock:
                self._sent.append(_Sent(started + r.sent_at, r))

        await run_load(spec, on_request=record)


def serving_urls(core: Any, namespace: str, deployments: Sequence[str]) -> list[str]:
    """URLs of the serving pods of ``deployments``: Running, not deleting, annotated by the pod runner.

    ``core`` is a ``kubernetes.client.CoreV1Api``.
    """
    selector = f"{INSTANCE_LABEL} in ({','.join(deployments)})"
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    urls = []
    for pod in pods:
        address = (pod.metadata.annotations or {}).get(ENDPOINT_ANNOTATION)
        if address and pod.metadata.deletion_timestamp is None and pod.status.phase == "Running":
            urls.append(f"http://{address}")
    return sorted(urls)
