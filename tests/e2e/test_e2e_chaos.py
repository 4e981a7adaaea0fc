"""Scenario 13, chaos: for a few minutes, the operator killed and restarted, Prometheus stopped and the API
server restarted at random points while the load changes; the invariants hold throughout.

The fault schedule is drawn from a fixed seed (``VA_CHAOS_SEED`` changes it, ``VA_CHAOS_SECONDS`` its
length). Invariants checked:

* no scale-down without metrics: neither the decision nor the Deployment goes down while Prometheus is
  down, nor while the status says metrics are missing or recovering (until a metrics window of new
  samples has been scraped after they came back);
* no lost action: once the faults stop, the Deployment runs the decision in the status;
* no duplicated action: the decision changes and the scale patches each form one chain, every change
  starting where the previous one ended (an action repeated after a restart would not);
* every status the operator wrote and the sampler read is valid.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from localcluster import LocalCluster, wait_for
from vatesting.e2e import (
    A100,
    HIGH_RPM,
    LOW_RPM,
    MODEL,
    PREMIUM,
    VA,
    WVA_A100,
    E2EResults,
    Kube,
    LoadDriver,
    Operator,
    Sampler,
    desired,
    emulator_variant,
    valid_status,
    wait_va,
)
from vatesting.harness import va_manifest

CHAOS_SECONDS = float(os.environ.get("VA_CHAOS_SECONDS", "180"))
SEED = int(os.environ.get("VA_CHAOS_SEED", "13"))


def test_scenario_13_chaos_operator_prometheus_and_api_server(
    full_cluster: LocalCluster,
    kube: Kube,
    scenario_namespace: str,
    install_operator: Callable[..., Path],
    operator_factory: Callable[..., Operator],
    load_factory: Callable[..., LoadDriver],
    e2e_results: E2EResults,
    timed: None,
) -> None:
    ns = scenario_namespace
    rng = random.Random(SEED)
    kubeconfig = install_operator()
    full_cluster.apply(
        emulator_variant(VA, ns, model=MODEL, vendor="nvidia", product=A100, profile=WVA_A100, max_batch=4)
    )
    wait_for(lambda: len(kube.serving(ns, VA)) == 1, timeout=90, what="the first pod serving")
    # Patch mode, no scale-down stabilisation: a wrong scale-down would show in the Deployment at once.
    full_cluster.apply(
        va_manifest(ns, actuation={"mode": "patch"}, scaleDown={"stabilizationWindowSeconds": 0})
    )
    operator = operator_factory(kubeconfig)
    load = load_factory(ns, [VA], MODEL, PREMIUM).start(LOW_RPM, "chaos")
    wait_va(kube, ns, VA, lambda v: desired(v) is not None, "a first decision")
    prometheus = full_cluster.prometheus_server()
    outages: list[tuple[float, float]] = []  # Prometheus down (from, to), wall clock
    faults: list[str] = []
    fault_times: list[tuple[float, str]] = []

    def sample() -> tuple[int | None, int, dict[str, Any]]:
        va = kube.va(ns, VA)
        return desired(va), kube.replicas(ns, VA), va

    with Sampler(sample, interval=0.5) as sampler:
        deadline = time.monotonic() + CHAOS_SECONDS
        kinds = ("operator", "prometheus", "apiserver")
        # Every kind of fault in each round, in a random order.
        schedule = itertools.chain.from_iterable(rng.sample(kinds, len(kinds)) for _ in itertools.count())
        while time.monotonic() < deadline:
            load.set_rate(rng.choice([LOW_RPM, (LOW_RPM + HIGH_RPM) / 2, HIGH_RPM]))
            time.sleep(rng.uniform(3.0, 12.0))  # a random point of the cycle
            fault = next(schedule)
            down = rng.uniform(2.0, 12.0)
            faults.append(f"{fault} {down:.0f}s")
            fault_times.append((time.time(), fault))
            if fault == "operator":
                operator.kill()
                time.sleep(down)
                operator = operator_factory(kubeconfig, identity="e2e-operator")
            elif fault == "prometheus":
                began = time.time()
                prometheus.stop()
                time.sleep(down)
                prometheus.start()
                outages.append((began, time.time()))
            else:
                full_cluster.restart_apiserver(down_seconds=down)
            time.sleep(rng.uniform(5.0, 15.0))
        # The faults stop; the load stays: every action must land.
        load.set_rate(HIGH_RPM)
        load.mark("after chaos")
        va = wait_for(
            lambda: (
                (va := kube.va(ns, VA)) is not None
                and desired(va) is not None
                and desired(va) == kube.replicas(ns, VA)
                and operator.cycles() >= 3
                and va
            ),
            timeout=180,
            what="the Deployment running the status' decision",
            interval=1.0,
        )
    load.stop(drain_timeout=30.0)

    samples = sampler.samples

    # No scale-down without metrics: not while Prometheus is down (nor in the cycle under way when it
    # comes back), nor while the status says metrics are missing or recovering (the rate window refills).
    def without_metrics(t: float, va: dict[str, Any]) -> bool:
        cond = next(
            (
                c
                for c in (va.get("status") or {}).get("conditions") or ()
                if c.get("type") == "MetricsAvailable"
            ),
            {},
        )
        during = any(began <= t <= ended + 4.0 for began, ended in outages)
        return during or cond.get("status") == "False" or cond.get("reason") == "MetricsRecovering"

    for i, ((_, (d0, r0, _)), (t1, (d1, r1, va1))) in enumerate(itertools.pairwise(samples)):
        judged = va1
        if r1 < r0 and d1 != r1:
            # The operator patches the scale, then writes the status of the same cycle: a sample can
            # catch the new replicas beside the previous cycle's status (its decision, its metrics
            # condition). Judge the scale-down by the status written with it: the first later one whose
            # decision is the new count (Prometheus' outages are still judged at the patch's time).
            judged = next((va for _, (d, _, va) in samples[i + 2 :] if d == r1), va1)
        if without_metrics(t1, judged):
            assert (d1 is None or d0 is None or d1 >= d0) and r1 >= r0, (
                f"scaled down without metrics at {t1:.0f} (outages {outages}): decision {d0} -> {d1}, "
                f"replicas {r0} -> {r1}; faults {faults}"
            )
    # Every status read is valid.
    for _, (_, _, body) in samples:
        if (body.get("status") or {}).get("desiredOptimizedAlloc"):
            valid_status(body)
    valid_status(va)
    # No duplicated action: the decisions and the scale patches each form one chain (every change starts
    # where the previous one ended: an action repeated after a restart would start from where it had
    # already taken the Deployment). An Event the API server's restart swallowed leaves a gap, allowed
    # only across a restart.
    restarts = [at for at, fault in fault_times if fault == "apiserver"]
    for reason, pattern in (
        ("DecisionChanged", r"^(\S+) -> (\d+) replicas"),
        ("Scaled", r"scaled \S+ from (\d+) to (\d+)"),
    ):
        chain = sorted(
            (e.metadata.creation_timestamp.timestamp(), m.group(1), m.group(2))
            for e in kube.events(ns, VA, reason)
            if (m := re.search(pattern, e.message or ""))
        )
        for (t0, _, to), (t1, start, _) in itertools.pairwise(chain):
            restarted = any(t0 - 2.0 <= at <= t1 + 2.0 for at in restarts)
            assert start == to or restarted, f"{reason}: a change from {start} after one to {to}: {chain}"
    e2e_results.add(
        "13 chaos",
        f"{CHAOS_SECONDS:g} s of faults ({len(faults)}: {', '.join(faults)}), load changing",
        load.stats("chaos"),
        PREMIUM,
        prometheus_outages=len(outages),
        sampler_errors=sampler.errors,
        final=f"{desired(va)} replicas",
    )
