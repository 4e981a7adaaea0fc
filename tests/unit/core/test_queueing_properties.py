"""Property tests of the queueing model and the sizing (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, event, given, reject, settings
from hypothesis import strategies as st

from variant_autoscaler.core.analyzer import SLO, Load, size_allocation
from variant_autoscaler.core.queueing import (
    AnalysisMetrics,
    QueueAnalyzer,
    RequestSize,
    ServiceParms,
    SizeResult,
    TargetPerf,
)
from variant_autoscaler.errors import InfeasibleError, ModelError

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None)

times = st.one_of(st.just(0.0), st.floats(1e-4, 200.0))
parms_st = st.builds(
    ServiceParms,
    alpha=times,
    beta=st.one_of(st.just(0.0), st.floats(1e-5, 5.0)),
    gamma=times,
    delta=st.one_of(st.just(0.0), st.floats(1e-6, 0.5)),
)
request_st = st.builds(
    RequestSize,
    avg_input_tokens=st.one_of(st.just(0.0), st.integers(1, 16384).map(float), st.floats(0.5, 16384.0)),
    avg_output_tokens=st.one_of(st.just(1.0), st.integers(2, 8192).map(float), st.floats(1.0, 8192.0)),
)
batch_st = st.one_of(st.sampled_from([1, 2, 4, 8, 16, 32, 33, 64, 128, 256]), st.integers(1, 512))
queue_st = st.one_of(st.none(), st.integers(0, 3000))


@st.composite
def analyzers(draw: st.DrawFn) -> QueueAnalyzer:
    try:
        return QueueAnalyzer(draw(batch_st), draw(queue_st), draw(parms_st), draw(request_st))
    except ModelError:  # only a request that takes no time at all is invalid here
        reject()


fractions = st.floats(1e-6, 1.0, exclude_min=True)


def all_finite_non_negative(values: list[float]) -> bool:
    return all(math.isfinite(v) and v >= 0.0 for v in values)


def metric_values(m: AnalysisMetrics) -> list[float]:
    return [
        m.throughput,
        m.avg_resp_time,
        m.avg_wait_time,
        m.avg_num_in_serv,
        m.avg_prefill_time,
        m.ttft,
        m.itl,
        m.rho,
        m.max_rate,
    ]


@PROPERTY_SETTINGS
@given(qa=analyzers(), fraction=fractions)
def test_probabilities_sum_to_one_and_littles_law_holds(qa: QueueAnalyzer, fraction: float) -> None:
    rate = qa.rate_range[1] * fraction
    p = qa.state_probabilities(rate)
    assert np.all(p >= 0.0)
    assert p.sum() == pytest.approx(1.0, rel=1e-12)
    m = qa.analyze(rate)
    n = qa.max_batch_size
    states = np.arange(p.size)
    in_system = float(states @ p)
    in_service = float(np.minimum(states, n) @ p)
    xput = m.throughput / 1000.0  # req/ms
    assert xput == pytest.approx(rate / 1000.0 * (1.0 - p[-1]), rel=1e-9)
    # Little's law: L = X·T, for the whole system, the batch (L_serv = X·S) and the queue (Lq = X·W).
    assert xput * m.avg_resp_time == pytest.approx(in_system, rel=1e-8, abs=1e-300)
    assert m.avg_num_in_serv == pytest.approx(in_service, rel=1e-8, abs=1e-300)
    assert xput * m.avg_wait_time == pytest.approx(in_system - in_service, rel=1e-6, abs=1e-12 * in_system)
    assert 0.0 <= m.rho <= 1.0


@PROPERTY_SETTINGS
@given(qa=analyzers(), a=fractions, b=fractions)
def test_ttft_and_itl_never_decrease_with_rate(qa: QueueAnalyzer, a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    m_lo = qa.analyze(qa.rate_range[1] * lo)
    m_hi = qa.analyze(qa.rate_range[1] * hi)
    noise = 1e-9
    assert m_hi.ttft >= m_lo.ttft * (1 - noise) - 1e-12
    assert m_hi.itl >= m_lo.itl * (1 - noise)
    assert m_hi.avg_wait_time >= m_lo.avg_wait_time * (1 - noise) - 1e-12
    assert m_hi.throughput >= m_lo.throughput * (1 - noise)


@PROPERTY_SETTINGS
@given(qa=analyzers(), fraction=fractions)
def test_analysis_is_finite_and_non_negative(qa: QueueAnalyzer, fraction: float) -> None:
    assert all_finite_non_negative(metric_values(qa.analyze(qa.rate_range[1] * fraction)))
    assert 0 < qa.rate_range[0] < qa.rate_range[1] < math.inf


def size_values(s: SizeResult) -> list[float]:
    return [s.rate_target_ttft, s.rate_target_itl, s.rate_target_tps, s.max_rate, s.ttft, s.itl, s.tps]


@PROPERTY_SETTINGS
@given(
    qa=analyzers(),
    at=fractions,
    ttft_scale=st.one_of(st.just(0.0), st.floats(0.1, 10.0)),
    itl_scale=st.one_of(st.just(0.0), st.floats(0.5, 2.0)),
    tps=st.one_of(st.just(0.0), st.floats(1.0, 1e5)),
)
def test_sizing_meets_its_targets_or_says_why_not(
    qa: QueueAnalyzer, at: float, ttft_scale: float, itl_scale: float, tps: float
) -> None:
    ref = qa.analyze(qa.rate_range[1] * at)
    targets = TargetPerf(ttft=ref.ttft * ttft_scale, itl=ref.itl * itl_scale, tps=tps)
    try:
        s = qa.size(targets)
    except InfeasibleError as exc:
        assert "unreachable" in str(exc)
        return
    assert all_finite_non_negative(size_values(s) + metric_values(s.metrics))
    lo, hi = qa.rate_range
    assert lo * (1 - 1e-12) <= s.max_rate <= hi
    assert s.max_rate == min(s.rate_target_ttft, s.rate_target_itl, s.rate_target_tps)
    assert metric_values(s.metrics) == pytest.approx(
        metric_values(qa.analyze(s.max_rate)), rel=1e-9, abs=1e-12
    )
    # Where a root was found inside the range, the target is met there (to the search tolerance).
    for rate, value, target in (
        (s.rate_target_ttft, qa.analyze(s.rate_target_ttft).ttft, targets.ttft),
        (s.rate_target_itl, qa.analyze(s.rate_target_itl).itl, targets.itl),
    ):
        if target > 0 and lo < rate < hi:
            assert value == pytest.approx(target, rel=1e-6) or value < target


@PROPERTY_SETTINGS
@given(
    parms=parms_st,
    request=request_st,
    batch=st.sampled_from([1, 4, 8, 16, 64, 128]),
    loads=st.lists(st.floats(0.0, 1e6), min_size=2, max_size=6),
    slo=st.builds(
        SLO,
        ttft=st.one_of(st.just(0.0), st.floats(1.0, 1e5)),
        itl=st.one_of(st.just(0.0), st.floats(1.0, 1e3)),
    ),
    min_replicas=st.integers(0, 3),
)
def test_replicas_never_decrease_with_load(
    parms: ServiceParms, request: RequestSize, batch: int, loads: list[float], slo: SLO, min_replicas: int
) -> None:
    previous = -1
    for arrival in sorted(loads):
        try:
            sizing = size_allocation(
                accelerator="gpu",
                unit_cost=2.5,
                acc_count=2,
                parms=parms,
                max_batch_size=batch,
                load=Load(arrival, request.avg_input_tokens, request.avg_output_tokens),
                slo=slo,
                min_replicas=min_replicas,
            )
        except InfeasibleError:
            return  # the SLO is unreachable whatever the load (only zero load is sized without it)
        except ModelError:
            reject()
        assert sizing.replicas >= previous
        assert sizing.replicas >= min_replicas
        assert all_finite_non_negative(
            [sizing.cost, sizing.itl, sizing.ttft, sizing.rho, sizing.max_rate_per_replica]
        )
        assert sizing.cost == pytest.approx(2.5 * 2 * sizing.replicas)
        previous = sizing.replicas


# ---- the fast search against WVA's bisection, in float64 -----------------------------------------


def wva_bisection(f: object, x_min: float, x_max: float, target: float) -> tuple[float, int]:
    """WVA's BinarySearch (utils.go), transcribed to float64: (x, indicator)."""
    assert callable(f)
    tol = 1e-6

    def within(x: float, v: float) -> bool:
        return x == v or (v != 0 and abs((x - v) / v) <= tol)

    y_lo, y_hi = f(x_min), f(x_max)
    if within(y_lo, target):
        return x_min, 0
    if within(y_hi, target):
        return x_max, 0
    increasing = y_lo < y_hi
    if (increasing and target < y_lo) or (not increasing and target > y_lo):
        return x_min, -1
    if (increasing and target > y_hi) or (not increasing and target < y_hi):
        return x_max, 1
    x = x_min
    for _ in range(100):
        x = 0.5 * (x_min + x_max)
        y = f(x)
        if within(y, target):
            break
        if (increasing and target < y) or (not increasing and target > y):
            x_max = x
        else:
            x_min = x
    return x, 0


@settings(max_examples=200, deadline=None)
@given(
    qa=analyzers(),
    at=st.floats(0.001, 1.0),
    field=st.sampled_from(["ttft", "itl"]),
    scale=st.floats(0.9, 1.1),
)
def test_search_agrees_with_wva_bisection(qa: QueueAnalyzer, at: float, field: str, scale: float) -> None:
    """Our root is within 1e-3 of the answer of WVA's bisection wherever that answer is determined."""
    lo, hi = qa.rate_range

    def f(rate: float) -> float:
        value: float = getattr(qa.analyze(rate), field)
        return value

    target = f(hi * at) * scale
    assume(target > 0)
    f_lo, f_hi = f(lo), f(hi)
    assume(abs(f_hi - f_lo) > 1e-6 * max(f_lo, f_hi))  # flat curves: our documented deviation
    ref_rate, indicator = wva_bisection(f, lo, hi, target)
    try:
        s = qa.size(TargetPerf(**{field: target}))
    except InfeasibleError:
        assert indicator == -1
        return
    assert indicator != -1
    ours = s.rate_target_ttft if field == "ttft" else s.rate_target_itl
    if indicator == 1 or ref_rate in (lo, hi):
        assert ours == ref_rate
        return
    # Condition number of the root: WVA stops within 1e-6 of the target in f, which moves the rate by
    # 1e-6 / elasticity; compare only where that is below 1e-4.
    h = 1e-4
    elasticity = (math.log(f(min(ref_rate * (1 + h), hi))) - math.log(f(ref_rate * (1 - h)))) / (2 * h)
    assume(elasticity > 1e-2)
    event("compared an interior root")
    assert ours == pytest.approx(ref_rate, rel=1e-3)
