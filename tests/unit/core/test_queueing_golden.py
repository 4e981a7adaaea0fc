"""Agreement with WVA's own numbers on 300 random cases (golden vectors in data/wva_golden.json).

How the vectors were produced is in the file's ``note``. WVA computes in float32 and we in float64, so:

* everything agrees to a relative 1e-3 (mostly far better), except WVA's waiting time, which it gets as the
  difference T - S of two nearly equal float32 numbers: there we allow 1e-3 relative plus 2e-5 of the
  response time (the size of that cancellation error);
* sizing results are compared where the case is well-conditioned (``wellConditioned``): a flat curve, a
  target within float32 noise of an end of the range, or a nearly flat curve at the root leave WVA's own
  answer undetermined (see docs/analyzer.md); for the others we only require a finite answer;
* replica counts are compared unless the load is within 2e-4 of a multiple of the per-replica rate.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from variant_autoscaler.core.analyzer import SLO, Load, size_allocation
from variant_autoscaler.core.queueing import QueueAnalyzer, RequestSize, ServiceParms, TargetPerf
from variant_autoscaler.errors import InfeasibleError

GOLDEN = json.loads((Path(__file__).parent / "data" / "wva_golden.json").read_text())
CASES: list[dict[str, Any]] = GOLDEN["cases"]
IDS = [f"case{i:03d}" for i in range(len(CASES))]

REL = 1e-3


def analyzer(inp: dict[str, Any]) -> QueueAnalyzer:
    return QueueAnalyzer(
        inp["maxBatchSize"],
        inp.get("maxQueueSize"),
        ServiceParms(inp["alpha"], inp["beta"], inp["gamma"], inp["delta"]),
        RequestSize(inp["avgInputTokens"], inp["avgOutputTokens"]),
    )


def close(value: float, ref: float, rel: float = REL, abs_: float = 0.0) -> bool:
    return math.isfinite(value) and abs(value - ref) <= rel * abs(ref) + abs_


def test_the_golden_set_exercises_every_path() -> None:
    """Guard against a vacuous comparison: enough feasible, infeasible, interior-root and zero-load cases."""
    good = [c for c in CASES if c["wellConditioned"]]
    feasible = [c for c in good if "error" not in c["wva"]["size"]]
    interior = [
        c
        for c in feasible
        if c["input"]["targetTTFT"] > 0
        and c["wva"]["size"]["rateTargetTTFT"] < c["wva"]["rateRange"][1] * 0.999
    ]
    assert len(good) >= 250 and len(feasible) >= 200 and len(interior) >= 100
    assert sum("error" in c["wva"]["size"] for c in good) >= 20
    assert sum(c["allocationInput"]["arrivalRate"] == 0 for c in CASES) >= 20
    assert sum(c["wva"]["allocation"].get("replicas", 0) > 1 for c in good) >= 50


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_rate_range_and_analysis(case: dict[str, Any]) -> None:
    qa = analyzer(case["input"])
    wva = case["wva"]
    assert close(qa.rate_range[0], wva["rateRange"][0], 1e-5)
    assert close(qa.rate_range[1], wva["rateRange"][1], 1e-5)
    m = qa.analyze(case["input"]["requestRate"])
    ref = wva["analysis"]
    for ours, key in (
        (m.throughput, "throughput"),
        (m.avg_resp_time, "avgRespTime"),
        (m.avg_num_in_serv, "avgNumInServ"),
        (m.avg_prefill_time, "avgPrefillTime"),
        (m.itl, "itl"),
        (m.rho, "rho"),
        (m.max_rate, "maxRate"),
    ):
        assert close(ours, ref[key], 1e-4, 1e-12), key
    cancellation = 2e-5 * m.avg_resp_time
    assert close(m.avg_wait_time, ref["avgWaitTime"], REL, cancellation)
    assert close(m.ttft, ref["ttft"], REL, cancellation)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_size(case: dict[str, Any]) -> None:
    qa = analyzer(case["input"])
    inp, ref = case["input"], case["wva"]["size"]
    targets = TargetPerf(inp["targetTTFT"], inp["targetITL"], inp["targetTPS"])
    try:
        ours = qa.size(targets)
    except InfeasibleError:
        ours = None
    if not case["wellConditioned"]:
        if ours is not None:  # WVA's answer is undetermined here; ours must still be a valid one
            assert all(math.isfinite(v) and v >= 0 for v in (ours.max_rate, ours.ttft, ours.itl, ours.tps))
        return
    assert (ours is None) == ("error" in ref), ref.get("error")
    if ours is None:
        return
    for value, key in (
        (ours.rate_target_ttft, "rateTargetTTFT"),
        (ours.rate_target_itl, "rateTargetITL"),
        (ours.rate_target_tps, "rateTargetTPS"),
        (ours.max_rate, "maxRate"),
        (ours.metrics.throughput, "throughput"),
        (ours.itl, "itl"),
        (ours.tps, "tps"),
    ):
        assert close(value, ref[key]), key
    assert close(ours.ttft, ref["ttft"], REL, 2e-5 * ours.metrics.avg_resp_time)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_allocation(case: dict[str, Any]) -> None:
    inp, alloc_in, ref = case["input"], case["allocationInput"], case["wva"]["allocation"]
    parms = ServiceParms(inp["alpha"], inp["beta"], inp["gamma"], inp["delta"])
    zero_load = alloc_in["arrivalRate"] == 0
    if not zero_load and (not case["wellConditioned"] or case["replicasAmbiguous"]):
        return
    try:
        ours = size_allocation(
            accelerator="acc",
            unit_cost=alloc_in["unitCost"],
            acc_count=alloc_in["accCount"],
            parms=parms,
            max_batch_size=inp["maxBatchSize"],
            load=Load(alloc_in["arrivalRate"], inp["avgInputTokens"], inp["avgOutputTokens"]),
            slo=SLO(inp["targetTTFT"], inp["targetITL"], inp["targetTPS"]),
            min_replicas=alloc_in["minReplicas"],
            memo=False,
        )
    except InfeasibleError:
        ours = None
    assert (ours is None) == ("error" in ref), ref.get("error")
    if ours is None:
        return
    assert (ours.accelerator, ours.replicas, ours.max_batch) == (
        ref["accelerator"],
        ref["replicas"],
        ref["maxBatch"],
    )
    for value, key in (
        (ours.cost, "cost"),
        (ours.itl, "itl"),
        (ours.rho, "rho"),
        (ours.max_rate_per_replica, "maxRatePerReplica"),
    ):
        assert close(value, ref[key], REL, 1e-12), key
    resp_time = 0.0
    if not zero_load:
        qa = QueueAnalyzer(
            inp["maxBatchSize"], None, parms, RequestSize(inp["avgInputTokens"], inp["avgOutputTokens"])
        )
        total = (
            alloc_in["arrivalRate"] / 60
            if inp["targetTPS"] == 0
            else inp["targetTPS"] / inp["avgOutputTokens"]
        )
        resp_time = qa.analyze(total / ours.replicas).avg_resp_time
    assert close(ours.ttft, ref["ttft"], REL, 2e-5 * resp_time + 1e-12)
