"""TTFT percentile targets (ours): the wait's distribution in the analyzer's chain, and sizing by it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from variant_autoscaler.api.configmaps import parse_service_classes
from variant_autoscaler.core.analyzer import (
    SLO,
    Load,
    SizingRequest,
    size_allocation,
    size_allocations,
)
from variant_autoscaler.core.queueing import (
    QueueAnalyzer,
    RequestSize,
    ServiceParms,
    TargetPerf,
)
from variant_autoscaler.errors import ConfigError, InfeasibleError, ModelError

WVA = ServiceParms(alpha=20.58, beta=0.41, gamma=20.58, delta=0.041)
LARGE = ServiceParms(alpha=8.0, beta=0.05, gamma=15.0, delta=0.002)


def _erlang_sf(k: int, x: float) -> float:
    """P(Erlang(k, 1) > x), by its finite sum."""
    return math.exp(-x) * sum(x**j / math.factorial(j) for j in range(k))


def _brute_force_tail(qa: QueueAnalyzer, rate: float, t: float) -> float:
    """P(W > t) from the state probabilities: an admitted arrival finding N + m waits m + 1 completions."""
    p = qa.state_probabilities(rate)
    n, q = qa.max_batch_size, qa.max_queue_size
    mu_n = n / (qa.prefill_time(n) + (qa.request.avg_output_tokens - 1) * qa.decode_time(n))  # req/ms
    admitted = 1.0 - p[n + q]
    return sum(p[n + m] * _erlang_sf(m + 1, mu_n * t) for m in range(q)) / admitted


@pytest.mark.parametrize(
    ("n", "q", "parms", "request_size"),
    [
        (4, None, WVA, RequestSize(128, 128)),  # the plain-loop head
        (4, 3, WVA, RequestSize(128, 128)),  # a short queue: the truncation matters
        (48, 60, LARGE, RequestSize(256, 128)),  # the numpy head
        (8, 0, WVA, RequestSize(64, 32)),  # no queue: nobody waits
    ],
)
@pytest.mark.parametrize("load", [0.2, 0.6, 0.95])
def test_the_closed_form_tail_is_the_erlang_mixture(
    n: int, q: int | None, parms: ServiceParms, request_size: RequestSize, load: float
) -> None:
    qa = QueueAnalyzer(n, q, parms, request_size)
    rate = load * qa.rate_range[1]
    tail = qa._wait_tail(qa._solve(rate / 1000.0))
    for t in (0.0, 50.0, 500.0, 5000.0):
        assert tail(t) == pytest.approx(_brute_force_tail(qa, rate, t), rel=1e-9, abs=1e-12)


def test_the_tail_integrates_to_the_mean_wait() -> None:
    qa = QueueAnalyzer(4, None, WVA, RequestSize(128, 128))
    rate = 0.8 * qa.rate_range[1]
    point = qa._solve(rate / 1000.0)
    tail = qa._wait_tail(point)
    ts = np.linspace(0.0, 300_000.0, 60_001)
    integral = float(np.trapezoid([tail(t) for t in ts], ts))
    assert integral == pytest.approx(qa.analyze(rate).avg_wait_time, rel=1e-4)


def test_percentiles_grow_with_the_percentile_and_the_rate() -> None:
    qa = QueueAnalyzer(4, None, WVA, RequestSize(128, 128))
    top = qa.rate_range[1]
    at = [[qa.ttft_percentile(f * top, p) for p in (50, 90, 99)] for f in (0.2, 0.5, 0.8)]
    for row in at:
        assert row == sorted(row)
    for column in zip(*at, strict=True):
        assert list(column) == sorted(column)
    # At a low load most requests do not wait: the median is the prefill.
    assert at[0][0] == pytest.approx(qa.analyze(0.2 * top).avg_prefill_time)


def test_sizing_by_a_percentile_meets_it_exactly_inside_the_range() -> None:
    qa = QueueAnalyzer(4, None, WVA, RequestSize(128, 128))
    mean = qa.size(TargetPerf(ttft=500, itl=24))
    p99 = qa.size(TargetPerf(ttft=500, itl=24, ttft_percentile=99))
    p90 = qa.size(TargetPerf(ttft=500, itl=24, ttft_percentile=90))
    assert p99.max_rate < p90.max_rate < mean.max_rate
    assert p99.ttft_at_percentile == pytest.approx(500.0, rel=1e-5)
    assert qa.ttft_percentile(p99.max_rate, 99) == pytest.approx(500.0, rel=1e-5)
    assert mean.ttft_at_percentile is None
    # The ITL target still applies: with a loose TTFT percentile the ITL bound decides.
    loose = qa.size(TargetPerf(ttft=60_000, itl=21.6, ttft_percentile=50))
    assert loose.max_rate == pytest.approx(qa.size(TargetPerf(itl=21.6)).max_rate)


def test_percentile_end_point_rules_and_bad_values() -> None:
    qa = QueueAnalyzer(4, None, WVA, RequestSize(128, 128))
    with pytest.raises(InfeasibleError, match="TTFT p99 target 20 ms unreachable"):
        qa.size(TargetPerf(ttft=20, ttft_percentile=99))  # below the prefill time alone
    generous = qa.size(TargetPerf(ttft=10_000_000, ttft_percentile=99))
    assert generous.max_rate == pytest.approx(qa.rate_range[1])
    for bad in (-1, 100, 150, math.nan):
        with pytest.raises(ModelError, match="percentile"):
            qa.size(TargetPerf(ttft=500, ttft_percentile=bad))
    with pytest.raises(ModelError, match="percentile"):
        qa.ttft_percentile(0.5, 0)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 64),
    load=st.floats(0.05, 0.97),
    percentile=st.floats(1.0, 99.9),
)
def test_percentile_sizing_never_exceeds_its_target(n: int, load: float, percentile: float) -> None:
    qa = QueueAnalyzer(n, None, LARGE, RequestSize(256, 128))
    target = qa.ttft_percentile(load * qa.rate_range[1], percentile)
    found = qa.size(TargetPerf(ttft=target, ttft_percentile=percentile))
    assert found.ttft_at_percentile is not None
    assert found.ttft_at_percentile <= target * (1 + 1e-6)
    assert found.max_rate >= load * qa.rate_range[1] * (1 - 1e-5)


def test_sizing_a_variant_by_a_percentile_takes_more_replicas_and_the_batch_agrees() -> None:
    load = Load(arrival_rate=120.0, avg_input_tokens=128, avg_output_tokens=128)
    common = {"accelerator": "A100", "unit_cost": 40.0, "acc_count": 1, "parms": WVA, "max_batch_size": 4}
    mean = size_allocation(load=load, slo=SLO(ttft=500, itl=24), **common)  # type: ignore[arg-type]
    p99_slo = SLO(ttft=500, itl=24, ttft_percentile=99)
    p99 = size_allocation(load=load, slo=p99_slo, **common)  # type: ignore[arg-type]
    assert p99.replicas > mean.replicas
    batch = size_allocations(
        [
            SizingRequest(load=load, slo=p99_slo, **common),  # type: ignore[arg-type]
            SizingRequest(load=load, slo=SLO(ttft=500, itl=24), **common),  # type: ignore[arg-type]
        ]
    )
    assert batch[0] == p99  # sized by the scalar analyzer, as size_allocation does
    mean_batched = batch[1]
    assert not isinstance(mean_batched, Exception)
    assert mean_batched.replicas == mean.replicas
    assert mean_batched.max_rate_per_replica == pytest.approx(mean.max_rate_per_replica, rel=1e-6)
    assert SLO(ttft=500, itl=24, ttft_percentile=99).describe() == "ITL ≤ 24 ms, TTFT p99 ≤ 500 ms"
    assert SLO(ttft=500, itl=24).describe() == "ITL ≤ 24 ms, TTFT ≤ 500 ms"


def test_service_classes_take_a_ttft_percentile() -> None:
    doc = (
        "name: Premium\npriority: 1\n"
        "data:\n  - {model: m, slo-tpot: 24, slo-ttft: 500, slo-ttft-percentile: 99}\n"
    )
    classes = parse_service_classes({"premium.yaml": doc}, strict=True)
    (target,) = classes.classes[0].targets
    assert target.slo == SLO(ttft=500, itl=24, ttft_percentile=99)
    plain = parse_service_classes(
        {"p.yaml": "name: P\npriority: 1\ndata: [{model: m, slo-tpot: 24, slo-ttft: 500}]"}, strict=True
    )
    assert plain.classes[0].targets[0].slo.ttft_percentile == 0.0  # WVA's: the mean
    with pytest.raises(ConfigError, match="slo-ttft-percentile must be between 0 and 100"):
        parse_service_classes({"p.yaml": doc.replace("99}", "100}")}, strict=True)
