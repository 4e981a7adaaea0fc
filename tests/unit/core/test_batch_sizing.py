"""The batched sizing path (QueueBatch, size_batch, size_allocations) against the scalar reference.

The scalar path (QueueAnalyzer.size, size_allocation) stays the reference. The batch must give:

* the same outcome kind for every case (a sizing, an unreachable target, an invalid input), with the same
  message;
* the same rates, to rounding, wherever no root search is involved (the top or bottom of the range, a TPS
  cap), and the same max rate to 1e-6 relative where the binding root is well-conditioned: the scalar
  search stops within 1e-7 of its target, which moves the rate by 1e-7 / elasticity (elasticity = the
  relative change of TTFT or ITL per relative change of the rate), so "well-conditioned" means an
  elasticity of at least 0.1;
* the same replica counts, except where the load is within 1e-4 of a whole multiple of the rate per
  replica (then a rounding-level difference in that rate may move the count by one).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from variant_autoscaler.core import analyzer
from variant_autoscaler.core.analyzer import (
    SLO,
    Load,
    Sizing,
    SizingOutcome,
    SizingRequest,
    _SizingMemo,
    clear_sizing_memo,
    size_allocation,
    size_allocations,
)
from variant_autoscaler.core.candidates import (
    batch_sizes,
    batched,
    build_candidate_sets,
    build_candidates,
    per_call,
)
from variant_autoscaler.core.model import (
    AcceleratorType,
    OptimizerConfig,
    Profile,
    ServiceTarget,
    VariantInput,
)
from variant_autoscaler.core.optimizer import optimize, prepare
from variant_autoscaler.core.queueing import (
    QueueAnalyzer,
    QueueBatch,
    RequestSize,
    ServerInputs,
    ServiceParms,
    SizeResult,
    TargetPerf,
    size_batch,
)
from variant_autoscaler.errors import InfeasibleError, ModelError

GOLDEN = json.loads((Path(__file__).parent / "data" / "wva_golden.json").read_text())
CASES: list[dict[str, Any]] = GOLDEN["cases"]

RATE_REL = 1e-6  # max rate, batch against scalar, where well-conditioned
WELL_CONDITIONED = 0.1  # elasticity of the binding output at the root
TIE = 1e-4  # replica counts may differ where load / rate per replica is this close to an integer


# ---- random cases ---------------------------------------------------------------------------------


def random_cases(seed: int, count: int) -> list[tuple[ServerInputs, TargetPerf]]:
    """Servers and targets over the ranges of the property tests: zeros, flat curves, batches of 1 to 512,
    explicit and default queues, targets from easy to unreachable."""
    rng = random.Random(seed)

    def one_of(*choices: Any) -> Any:
        choice = rng.choice(choices)
        return choice() if callable(choice) else choice

    cases = []
    for _ in range(count):
        parms = ServiceParms(
            one_of(0.0, lambda: rng.uniform(1e-4, 200.0)),
            one_of(0.0, lambda: 10 ** rng.uniform(-5, 0.7)),
            one_of(0.0, lambda: rng.uniform(1e-4, 200.0)),
            one_of(0.0, lambda: 10 ** rng.uniform(-6, -0.3)),
        )
        request = RequestSize(
            one_of(0.0, lambda: float(rng.randint(1, 16384)), lambda: rng.uniform(0.5, 16384.0)),
            one_of(1.0, lambda: float(rng.randint(2, 8192)), lambda: rng.uniform(1.0, 8192.0)),
        )
        batch = one_of(
            lambda: rng.choice([1, 2, 4, 8, 16, 32, 33, 64, 128, 256]), lambda: rng.randint(1, 512)
        )
        queue = one_of(None, lambda: rng.randint(0, 3000))
        targets = TargetPerf(
            one_of(0.0, lambda: 10 ** rng.uniform(0, 4)),
            one_of(0.0, lambda: 10 ** rng.uniform(-1, 3)),
            one_of(0.0, 0.0, 0.0, 100.0),
        )
        cases.append(((batch, queue, parms, request), targets))
    return cases


def scalar_size(server: ServerInputs, targets: TargetPerf) -> SizeResult | ModelError | InfeasibleError:
    try:
        return QueueAnalyzer(*server).size(targets)
    except (InfeasibleError, ModelError) as exc:
        return exc


def elasticity(qa: QueueAnalyzer, rate: float, field: str) -> float:
    """d log f / d log rate at ``rate`` (req/s) for output ``field`` (ttft or itl), by central differences."""
    lo, hi = qa.rate_range
    h = 1e-4
    up, down = min(rate * (1 + h), hi), max(rate * (1 - h), lo)
    f_up, f_down = getattr(qa.analyze(up), field), getattr(qa.analyze(down), field)
    if f_up <= 0.0 or f_down <= 0.0:
        return 0.0
    return (math.log(f_up) - math.log(f_down)) / (math.log(up) - math.log(down))


def binding(result: SizeResult, targets: TargetPerf, qa: QueueAnalyzer) -> str | None:
    """The output whose root fixes the max rate ("ttft", "itl"), or None when an end or the TPS cap does."""
    lo, hi = qa.rate_range
    for field, rate in (("ttft", result.rate_target_ttft), ("itl", result.rate_target_itl)):
        if getattr(targets, field) > 0 and rate == result.max_rate and lo < rate < hi:
            return field
    return None


def compare_sizes(cases: list[tuple[ServerInputs, TargetPerf]]) -> dict[str, int]:
    """Assert batch == scalar for every case; return how many cases of each kind were compared."""
    batch = size_batch([s for s, _ in cases], [t for _, t in cases])
    tally = {"roots": 0, "ill-conditioned": 0, "ends": 0, "infeasible": 0, "invalid": 0}
    for (server, targets), ours in zip(cases, batch, strict=True):
        ref = scalar_size(server, targets)
        assert type(ours) is type(ref), (server, targets, ref, ours)
        if isinstance(ref, ModelError | InfeasibleError):
            assert str(ours) == str(ref)
            tally["invalid" if isinstance(ref, ModelError) else "infeasible"] += 1
            continue
        assert isinstance(ours, SizeResult)
        qa = QueueAnalyzer(*server)
        field = binding(ref, targets, qa)
        if field is None:
            # No search decides the max rate: the same rate, and the same metrics there, to rounding.
            assert ours.max_rate == pytest.approx(ref.max_rate, rel=1e-12)
            for name in ("throughput", "ttft", "itl", "rho", "avg_num_in_serv"):
                assert getattr(ours.metrics, name) == pytest.approx(
                    getattr(ref.metrics, name), rel=1e-9, abs=1e-12
                )
            tally["ends"] += 1
            continue
        e = abs(elasticity(qa, ref.max_rate, field))
        if e < WELL_CONDITIONED:
            # Both rates are valid answers (each within its tolerance of the target); check that.
            assert getattr(ours, field) == pytest.approx(getattr(targets, field), rel=1e-6)
            tally["ill-conditioned"] += 1
            continue
        assert ours.max_rate == pytest.approx(ref.max_rate, rel=RATE_REL), (server, targets, e)
        assert ours.metrics.throughput == pytest.approx(ref.metrics.throughput, rel=RATE_REL)
        # The batch stops 100 times closer to the target than the scalar search, or where the bracket is
        # 1e-10 wide in log(rate) (on a steep curve), which moves the output by about e·1e-10.
        assert abs(getattr(ours, field) / getattr(targets, field) - 1.0) <= max(2e-9, 4e-10 * e)
        tally["roots"] += 1
    return tally


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_batch_sizes_equal_scalar_on_random_cases(seed: int) -> None:
    tally = compare_sizes(random_cases(seed, 700))
    # Not vacuous: every kind of outcome appears, most rates come from well-conditioned roots.
    assert tally["roots"] >= 80 and tally["ends"] >= 150 and tally["infeasible"] >= 100, tally


def test_batch_sizes_equal_scalar_on_the_golden_vectors() -> None:
    cases = [
        (
            (
                c["input"]["maxBatchSize"],
                c["input"].get("maxQueueSize"),
                ServiceParms(
                    c["input"]["alpha"], c["input"]["beta"], c["input"]["gamma"], c["input"]["delta"]
                ),
                RequestSize(c["input"]["avgInputTokens"], c["input"]["avgOutputTokens"]),
            ),
            TargetPerf(c["input"]["targetTTFT"], c["input"]["targetITL"], c["input"]["targetTPS"]),
        )
        for c in CASES
    ]
    tally = compare_sizes(cases)
    assert tally["roots"] >= 100 and tally["infeasible"] >= 20, tally


def test_batch_sizes_agree_with_wva_on_the_golden_vectors() -> None:
    """The same check as test_queueing_golden's, on the batch: WVA's numbers to 1e-3."""
    good = [c for c in CASES if c["wellConditioned"]]
    servers = [
        (
            c["input"]["maxBatchSize"],
            c["input"].get("maxQueueSize"),
            ServiceParms(c["input"]["alpha"], c["input"]["beta"], c["input"]["gamma"], c["input"]["delta"]),
            RequestSize(c["input"]["avgInputTokens"], c["input"]["avgOutputTokens"]),
        )
        for c in good
    ]
    targets = [
        TargetPerf(c["input"]["targetTTFT"], c["input"]["targetITL"], c["input"]["targetTPS"]) for c in good
    ]
    compared = 0
    for case, ours in zip(good, size_batch(servers, targets), strict=True):
        ref = case["wva"]["size"]
        assert isinstance(ours, InfeasibleError) == ("error" in ref)
        if not isinstance(ours, SizeResult):
            continue
        for value, key in (
            (ours.max_rate, "maxRate"),
            (ours.metrics.throughput, "throughput"),
            (ours.itl, "itl"),
        ):
            assert value == pytest.approx(ref[key], rel=1e-3), key
        compared += 1
    assert compared >= 200


def test_analyze_equals_scalar() -> None:
    cases = random_cases(7, 300)
    servers = [s for s, _ in cases]
    batch = QueueBatch(servers)
    rng = np.random.default_rng(7)
    fractions = rng.uniform(0.0, 1.0, len(servers)) ** 3
    rates = [batch.rate_range[1][i] * f for i, f in enumerate(fractions)]
    rates[0] = 0.0  # invalid rate
    rates[1] = batch.rate_range[1][1] * 1.01  # above the range
    metrics = batch.analyze(range(len(servers)), rates)
    checked = 0
    for i, (server, rate) in enumerate(zip(servers, rates, strict=True)):
        try:
            ref = QueueAnalyzer(*server).analyze(rate)
        except ModelError as exc:
            assert str(metrics.result(i)) == str(exc)
            continue
        ours = metrics.result(i)
        assert not isinstance(ours, Exception)
        for name in ("throughput", "avg_resp_time", "avg_num_in_serv", "rho"):
            assert getattr(ours, name) == pytest.approx(getattr(ref, name), rel=1e-9, abs=1e-12), name
        assert ours.avg_wait_time == pytest.approx(ref.avg_wait_time, rel=1e-9, abs=1e-12 * ref.avg_resp_time)
        # The effective batch n_eff = (S - c0) / c1 (WVA's formula) cancels where the mean service time S
        # is close to c0: rounding in S moves it by about 1e-16 · S / c1.
        batch_size, _, parms, request = server
        error = n_eff_error(parms, request, batch_size)
        prefill_error = parms.delta * request.avg_input_tokens * error + 1e-12
        assert ours.avg_prefill_time == pytest.approx(ref.avg_prefill_time, rel=1e-9, abs=prefill_error)
        assert ours.itl == pytest.approx(ref.itl, rel=1e-9, abs=parms.beta * error + 1e-12)
        assert ours.ttft == pytest.approx(ref.ttft, rel=1e-9, abs=prefill_error + 1e-12 * ref.avg_resp_time)
        assert ours.max_rate == ref.max_rate
        checked += 1
    assert checked >= 200
    assert isinstance(metrics.result(0), ModelError) and isinstance(metrics.result(1), ModelError)


def test_a_servers_answer_does_not_depend_on_the_rest_of_the_batch() -> None:
    cases = random_cases(11, 400)
    together = size_batch([s for s, _ in cases], [t for _, t in cases])
    for (server, targets), mixed in zip(cases[:60], together, strict=False):
        (alone,) = size_batch([server], [targets])
        assert type(alone) is type(mixed)
        if isinstance(alone, SizeResult) and isinstance(mixed, SizeResult):
            assert alone.max_rate == pytest.approx(mixed.max_rate, rel=1e-8)


def test_servers_beyond_the_vectorised_path_go_to_queue_analyzer() -> None:
    long_prefill = ServiceParms(alpha=20.0, beta=0.01, gamma=500.0, delta=0.5)  # weights overflow: log space
    servers: list[ServerInputs] = [
        (2048, None, ServiceParms(20.58, 0.41, 20.58, 0.041), RequestSize(512.0, 256.0)),  # batch > 1024
        (900, None, long_prefill, RequestSize(2048.0, 64.0)),
        (64, None, ServiceParms(20.58, 0.41, 20.58, 0.041), RequestSize(512.0, 256.0)),
    ]
    targets = [TargetPerf(ttft=5000.0, itl=60.0)] * 3
    for server, target, ours in zip(servers, targets, size_batch(servers, targets), strict=True):
        ref = scalar_size(server, target)
        assert type(ours) is type(ref)
        if isinstance(ref, SizeResult) and isinstance(ours, SizeResult):
            assert ours.max_rate == pytest.approx(ref.max_rate, rel=RATE_REL)


@pytest.mark.parametrize(
    ("server", "targets"),
    [
        ((0, None, ServiceParms(1, 1, 1, 1), RequestSize(10, 10)), TargetPerf(ttft=100)),
        ((8, -1, ServiceParms(1, 1, 1, 1), RequestSize(10, 10)), TargetPerf(ttft=100)),
        ((8, None, ServiceParms(True, 1, 1, 1), RequestSize(10, 10)), TargetPerf(ttft=100)),
        ((8, None, ServiceParms(math.nan, 1, 1, 1), RequestSize(10, 10)), TargetPerf(ttft=100)),
        ((8, None, ServiceParms(0, 0, 0, 0), RequestSize(0, 1)), TargetPerf(ttft=100)),
        ((8, None, ServiceParms(1, 1, 1, 1), RequestSize(10, 0.5)), TargetPerf(ttft=100)),
        ((8, None, ServiceParms(1, 1, 1, 1), RequestSize(10, 10)), TargetPerf(ttft=-1)),
        ((8, None, "parms", RequestSize(10, 10)), TargetPerf(ttft=100)),
        ((8.0, None, ServiceParms(1, 1, 1, 1), RequestSize(10, 10)), TargetPerf(ttft=100)),
    ],
)
def test_invalid_inputs_fail_as_in_the_scalar_path_without_stopping_the_others(
    server: Any, targets: TargetPerf
) -> None:
    good: ServerInputs = (8, None, ServiceParms(1.0, 0.01, 10.0, 0.001), RequestSize(100.0, 10.0))
    ours = size_batch([good, server, good], [TargetPerf(ttft=50.0), targets, TargetPerf(ttft=50.0)])
    ref = scalar_size(server, targets)
    assert isinstance(ref, ModelError)
    assert isinstance(ours[1], ModelError) and str(ours[1]) == str(ref)
    assert isinstance(ours[0], SizeResult) and ours[0] == ours[2]


# ---- allocations (replicas, cost, per-replica latency) -----------------------------------------------


def allocation_requests(seed: int, count: int) -> list[SizingRequest]:
    rng = random.Random(seed)
    requests = []
    for (server, targets), k in zip(random_cases(seed, count), range(count), strict=True):
        batch, queue, parms, request = server
        arrival = rng.choice([0.0, 10 ** rng.uniform(-1, 5), 10 ** rng.uniform(-1, 5)])
        requests.append(
            SizingRequest(
                accelerator=f"acc{k % 5}",
                unit_cost=rng.choice([1.0, 40.0, 65.5]),
                acc_count=rng.choice([0, 1, 2, 8]),
                parms=parms,
                max_batch_size=batch,
                load=Load(arrival, request.avg_input_tokens, request.avg_output_tokens),
                slo=SLO(targets.ttft, targets.itl, targets.tps),
                min_replicas=rng.choice([0, 1, 1, 3]),
                max_queue_size=queue,
            )
        )
    return requests


def scalar_allocation(req: SizingRequest) -> SizingOutcome:
    return req.sized(memo=False)


def is_tie(ref: Sizing, req: SizingRequest) -> bool:
    """The load sits within TIE of a whole multiple of the rate per replica (replicas may differ by one)."""
    tps = req.slo.tps
    total = req.load.arrival_rate / 60.0 if tps == 0 else tps / req.load.avg_output_tokens
    ratio = total / ref.max_rate_per_replica
    return abs(ratio - round(ratio)) <= TIE * max(ratio, 1.0)


def n_eff_error(parms: ServiceParms, request: RequestSize, batch: int) -> float:
    """How far rounding can move WVA's effective batch n_eff = (S - c0) / c1: about 1e-16 · S / c1, where
    the mean service time S is at most a + s·N (see queueing._server). Here with a factor 1e4 to spare."""
    l_in, l_out = request.avg_input_tokens, request.avg_output_tokens
    steps = 1.0 if (l_in == 0 and l_out == 1) else l_out - 1.0
    a = (parms.gamma if l_in > 0 else 0.0) + steps * parms.alpha
    s = (parms.delta * l_in if l_in > 0 else 0.0) + steps * parms.beta
    c1 = parms.delta * l_in + parms.beta * (l_out - 1.0)
    return 1e-12 * (a + s * batch) / c1 if c1 > 0 else 1e-12


def rate_allowance(req: SizingRequest) -> tuple[float, bool]:
    """How far (relative) the batch's rate per replica may be from the scalar one, and whether the case is
    well-conditioned (then replica counts must match, ties aside)."""
    targets = TargetPerf(req.slo.ttft, req.slo.itl, req.slo.tps)
    request = RequestSize(req.load.avg_input_tokens, req.load.avg_output_tokens)
    qa = QueueAnalyzer(req.max_batch_size, req.max_queue_size, req.parms, request)
    sized = qa.size(targets)
    field = binding(sized, targets, qa)
    if field is None:
        return 1e-12, True
    e = abs(elasticity(qa, sized.max_rate, field))
    if e >= WELL_CONDITIONED:
        return RATE_REL, True
    return 3e-7 / max(e, 1e-12), False


def compare_allocations(requests: list[SizingRequest], outcomes: Sequence[SizingOutcome]) -> dict[str, int]:
    tally = {"sized": 0, "ill-conditioned": 0, "ties": 0, "failed": 0, "zero load": 0}
    for req, ours in zip(requests, outcomes, strict=True):
        ref = scalar_allocation(req)
        assert type(ours) is type(ref), (req, ref, ours)
        if not isinstance(ref, Sizing):
            assert str(ours) == str(ref)
            tally["failed"] += 1
            continue
        assert isinstance(ours, Sizing)
        if req.load.arrival_rate == 0:
            assert ours == ref
            tally["zero load"] += 1
            continue
        allowed, well_conditioned = rate_allowance(req)
        assert ours.max_rate_per_replica == pytest.approx(ref.max_rate_per_replica, rel=allowed), req
        if not well_conditioned:
            tally["ill-conditioned"] += 1
            continue
        if ours.replicas != ref.replicas:
            assert is_tie(ref, req) and abs(ours.replicas - ref.replicas) == 1, (req, ref, ours)
            tally["ties"] += 1
            continue
        assert (ours.accelerator, ours.max_batch, ours.cost) == (ref.accelerator, ref.max_batch, ref.cost)
        # The per-replica analysis is at the same rate (same replicas): equal to rounding.
        request = RequestSize(req.load.avg_input_tokens, req.load.avg_output_tokens)
        error = n_eff_error(req.parms, request, req.max_batch_size)
        assert ours.rho == pytest.approx(ref.rho, rel=1e-9, abs=1e-12)
        assert ours.itl == pytest.approx(ref.itl, rel=1e-9, abs=req.parms.beta * error + 1e-12)
        prefill_error = req.parms.delta * request.avg_input_tokens * error
        assert ours.ttft == pytest.approx(ref.ttft, rel=1e-9, abs=prefill_error + 1e-9 * ref.ttft + 1e-12)
        tally["sized"] += 1
    return tally


@pytest.mark.parametrize("seed", [21, 22])
def test_batch_allocations_equal_scalar_on_random_cases(seed: int) -> None:
    requests = allocation_requests(seed, 800)
    tally = compare_allocations(requests, size_allocations(requests, memo=False))
    assert tally["sized"] >= 150 and tally["failed"] >= 50 and tally["zero load"] >= 50, tally


def test_batch_allocations_equal_scalar_and_wva_on_the_golden_vectors() -> None:
    requests = []
    for c in CASES:
        inp, alloc = c["input"], c["allocationInput"]
        requests.append(
            SizingRequest(
                accelerator="acc",
                unit_cost=alloc["unitCost"],
                acc_count=alloc["accCount"],
                parms=ServiceParms(inp["alpha"], inp["beta"], inp["gamma"], inp["delta"]),
                max_batch_size=inp["maxBatchSize"],
                load=Load(alloc["arrivalRate"], inp["avgInputTokens"], inp["avgOutputTokens"]),
                slo=SLO(inp["targetTTFT"], inp["targetITL"], inp["targetTPS"]),
                min_replicas=alloc["minReplicas"],
            )
        )
    outcomes = size_allocations(requests, memo=False)
    compare_allocations(requests, outcomes)
    matched = 0
    for case, ours in zip(CASES, outcomes, strict=True):
        ref = case["wva"]["allocation"]
        zero_load = case["allocationInput"]["arrivalRate"] == 0
        if not zero_load and (not case["wellConditioned"] or case["replicasAmbiguous"]):
            continue
        assert isinstance(ours, InfeasibleError) == ("error" in ref)
        if isinstance(ours, Sizing):
            assert (ours.replicas, ours.max_batch) == (ref["replicas"], ref["maxBatch"])
            assert ours.cost == pytest.approx(ref["cost"], rel=1e-3)
            matched += 1
    assert matched >= 150


def test_invalid_requests_fail_as_in_the_scalar_path() -> None:
    base = SizingRequest(
        "a", 40.0, 1, ServiceParms(1.0, 0.01, 10.0, 0.001), 8, Load(60.0, 100.0, 10.0), SLO(ttft=50.0)
    )
    bad = [
        replace(base, unit_cost=-1.0),
        replace(base, unit_cost=True),
        replace(base, acc_count=1.5),  # type: ignore[arg-type]
        replace(base, min_replicas=-1),
        replace(base, max_batch_size=0),
        replace(base, max_batch_size=8.0),  # type: ignore[arg-type]
        replace(base, max_queue_size=-2),
        replace(base, load=Load(math.inf, 100.0, 10.0)),
        replace(base, load=Load(60.0, 100.0, 0.5)),
        replace(base, slo=SLO(ttft=-5.0)),
        replace(base, slo=SLO(itl=0.5)),  # unreachable
        replace(base, parms=ServiceParms(-1.0, 0.01, 10.0, 0.001)),
        replace(base, parms=ServiceParms(0.0, 0.0, 0.0, 0.0), load=Load(60.0, 0.0, 1.0)),
        replace(base, load=Load(1e11, 100.0, 10.0)),  # over a million replicas
    ]
    requests = [base, *bad, base]
    outcomes = size_allocations(requests)
    for req, ours in zip(requests, outcomes, strict=True):
        ref = scalar_allocation(req)
        assert type(ours) is type(ref)
        if not isinstance(ref, Sizing):
            assert str(ours) == str(ref)
    assert sum(isinstance(o, ModelError) for o in outcomes) >= 10
    assert isinstance(outcomes[0], Sizing) and outcomes[0] == outcomes[-1]


def comparable(outcomes: Sequence[SizingOutcome]) -> list[object]:
    return [(type(o).__name__, str(o)) if isinstance(o, Exception) else o for o in outcomes]


def test_identical_requests_get_identical_answers_and_the_memo_changes_nothing() -> None:
    requests = allocation_requests(31, 300)
    clear_sizing_memo()
    cold = comparable(size_allocations(requests + requests))
    assert cold[: len(requests)] == cold[len(requests) :]
    # The batch sized them (the scalar path has its own memo): one entry per distinct server and SLOs.
    loaded = [o for r, o in zip(requests, cold[: len(requests)], strict=True) if r.load.arrival_rate > 0]
    assert sum(isinstance(o, Sizing) for o in loaded) >= 60
    assert 0 < len(analyzer._MEMO) <= len(requests)
    warm = comparable(size_allocations(requests))  # the rates from the memo
    assert warm == cold[: len(requests)] == comparable(size_allocations(requests, memo=False))
    others = allocation_requests(32, 200)
    mixed = comparable(size_allocations(others + requests))  # some rates remembered, some not
    assert mixed == comparable(size_allocations(others + requests, memo=False))


def test_the_memo_is_a_bounded_lru() -> None:
    memo = _SizingMemo(limit=2)
    memo.update([((1.0,), 1.0), ((2.0,), "unreachable")])
    assert memo.get((1.0,)) == 1.0  # now the most recent
    memo.update([((3.0,), 3.0)])
    assert (memo.get((2.0,)), memo.get((1.0,)), memo.get((3.0,)), len(memo)) == (None, 1.0, 3.0, 2)


def test_empty_batch() -> None:
    assert list(size_allocations([])) == []
    assert size_batch([], []) == []


# ---- candidates and the optimizer use the batch ---------------------------------------------------

ACCS = {
    "A100": AcceleratorType("A100", "NVIDIA-A100-PCIE-80GB", 40.0),
    "H100": AcceleratorType("H100", "NVIDIA-H100-80GB-HBM3", 100.0),
    "G2": AcceleratorType("G2", "Intel-Gaudi-2-96GB", 23.0),
}


def variants(seed: int, count: int) -> list[VariantInput]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        scale = rng.uniform(0.5, 1.5)  # α at most 30 ms: ITL targets of 60 or 90 ms are well-conditioned
        profiles = tuple(
            Profile(
                acc,
                1,
                rng.choice([16, 64, 256]),
                ServiceParms(
                    20 * scale / speed, 0.2 * scale / speed, 20 * scale / speed, 0.004 * scale / speed
                ),
            )
            for acc, speed in (("A100", 1.0), ("H100", 2.5), ("G2", 0.8))
        )
        out.append(
            VariantInput(
                f"v{i}",
                "ns",
                f"model-{i % 4}",  # variants of one model share a load now and then
                service=ServiceTarget(
                    "Premium", 1, SLO(ttft=rng.choice([500.0, 2000.0]), itl=rng.choice([60.0, 90.0]))
                ),
                profiles=profiles,
                load=Load(rng.lognormvariate(4.0, 1.5), rng.randint(64, 2048), rng.randint(16, 512)),
                current_accelerator=rng.choice(["A100", "H100", "G2"]),
                current_replicas=rng.randint(0, 3),
            )
        )
    return out


def test_candidate_sets_from_the_batch_match_those_sized_one_by_one() -> None:
    vs = variants(41, 60)
    batch = build_candidate_sets([(v, None) for v in vs], ACCS, batch_count=4)
    for v, ours in zip(vs, batch, strict=True):
        ref = build_candidates(v, ACCS, batch_count=4, sizer=size_allocation)
        assert (ours.key, ours.sizings) == (ref.key, ref.sizings)
        assert [(r.accelerator, r.batch, r.reason) for r in ours.rejections] == [
            (r.accelerator, r.batch, r.reason) for r in ref.rejections
        ]
        assert [(c.accelerator, c.batch) for c in ours.candidates] == [
            (c.accelerator, c.batch) for c in ref.candidates
        ]
        for c, r in zip(ours.candidates, ref.candidates, strict=True):
            assert c.rate_per_replica == pytest.approx(r.rate_per_replica, rel=RATE_REL)
            assert c.replicas == r.replicas
            assert (c.device, c.units_per_replica, c.cost_per_replica) == (
                r.device,
                r.units_per_replica,
                r.cost_per_replica,
            )


def test_a_custom_sizer_is_called_once_per_candidate() -> None:
    calls: list[tuple[str, int]] = []

    def sizer(**kwargs: Any) -> Sizing:
        calls.append((kwargs["accelerator"], kwargs["max_batch_size"]))
        return size_allocation(**kwargs)

    vs = variants(43, 5)
    sets = build_candidate_sets([(v, None) for v in vs], ACCS, batch_count=2, sizer=batched(sizer))
    assert len(calls) == sum(s.sizings for s in sets) == 5 * 3 * 2
    assert batched(size_allocation) is size_allocations
    assert batched(sizer) is not size_allocations
    assert per_call(sizer)([]) == []


def test_the_optimizer_plans_the_same_with_the_batch_and_one_by_one() -> None:
    vs = variants(47, 40)
    one_by_one = per_call(size_allocation)

    def scalar_sizer(**kwargs: Any) -> Sizing:  # not size_allocation itself, so prepare sizes one by one
        return size_allocation(**kwargs)

    config = OptimizerConfig(batch_sizes=3)
    fast = optimize(vs, ACCS, config)
    slow = optimize(vs, ACCS, config, sizer=scalar_sizer)
    assert fast.sizings == slow.sizings == sum(3 * len(batch_sizes(256, 3)) for _ in vs)
    for key, decision in fast.decisions.items():
        other = slow.decisions[key]
        assert (decision.accelerator, decision.max_batch) == (other.accelerator, other.max_batch), key
        assert decision.replicas == other.replicas, key
    assert fast.total_cost == slow.total_cost
    assert one_by_one([]) == []
    assert prepare(vs, ACCS, config).sizings == fast.sizings
