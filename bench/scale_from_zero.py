"""Scale from zero: from the inference gateway's queue becoming non-zero to the ``/scale`` patch.

The operator's own share of the latency, in process: the engine runs one cycle on a variant at zero
replicas (the in-memory Kubernetes API and Prometheus of the engine tests, through the real adapters),
then the fast loop (:class:`~variant_autoscaler.engine.zero.ZeroWaker`) runs at its default period while
the gateway's queue for the model turns non-zero at a random moment; what is measured is the time from
that moment to the scale patch reaching the API. Not included: the gateway exporting its queue and
Prometheus scraping it (one scrape interval, typically 2-15 s on a real cluster, 2 s in the e2e suite),
and the pod's start.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time

from vatesting.fakes import NS, Harness, deployment, load_yaml

TRIALS = 40


def _variant(h: Harness) -> None:
    va = load_yaml("deploy/samples/variantautoscaling-final.yaml")
    va["spec"].update(minReplicas=0, actuation={"mode": "patch"})
    h.add_va(va, replicas=0)
    h.kube.put({**deployment("vllme-l4", NS, replicas=0), "status": {"replicas": 0, "readyReplicas": 0}})


class _Requests(list[tuple[str, str]]):
    """The fake API's request log, which signals the scale patch as it arrives."""

    def __init__(self, patched: asyncio.Event) -> None:
        super().__init__()
        self.patched = patched

    def append(self, request: tuple[str, str]) -> None:
        super().append(request)
        if request[0] == "PATCH" and request[1].endswith("/scale"):
            self.patched.set()


async def _trial(rng: random.Random) -> tuple[float, int]:
    h = Harness()
    _variant(h)
    h.load(0.0)
    await h.engine.run_cycle()
    patched = asyncio.Event()
    h.kube.requests = _Requests(patched)
    waker = asyncio.create_task(h.engine.zero.run())
    await asyncio.sleep(rng.uniform(0.0, h.engine.zero.interval))  # any phase of the loop
    h.prom.gateway["default/default"] = 2.0
    queued = time.perf_counter()
    await asyncio.wait_for(patched.wait(), timeout=10.0)
    took = time.perf_counter() - queued
    waker.cancel()
    await asyncio.gather(waker, return_exceptions=True)
    return took, h.prom.gateway_queries


def run() -> str:
    rng = random.Random(3)
    started = time.perf_counter()
    results = [asyncio.run(_trial(rng)) for _ in range(TRIALS)]
    times = sorted(t for t, _ in results)
    queries = [q for _, q in results]
    interval = Harness().engine.zero.interval
    elapsed = time.perf_counter() - started
    return "\n".join(
        [
            "## Scale from zero: gateway queue to scale patch (the operator's share)",
            "",
            f"Command: `python bench/scale_from_zero.py` ({elapsed:.1f} s). {TRIALS} trials: a variant "
            f"at zero replicas, the fast loop at its default period ({interval:g} s), the gateway's "
            "queue turning non-zero at a random phase of the loop; time to the `/scale` patch, through "
            "the real adapters against the in-memory API and Prometheus of the engine tests. Add the "
            "gateway metric's scrape interval for the end-to-end figure (the e2e suite records it: "
            "scenario 12).",
            "",
            "| trials | median | p90 | max | gateway queries per trial (one per tick) |",
            "|---|---|---|---|---|",
            f"| {TRIALS} | {statistics.median(times) * 1000:.0f} ms | "
            f"{times[int(0.9 * (len(times) - 1))] * 1000:.0f} ms | {times[-1] * 1000:.0f} ms | "
            f"{min(queries)}-{max(queries)} |",
        ]
    )


if __name__ == "__main__":
    print(run())
