"""Unit tests of the queueing model: WVA's published numbers (wva.md §5.5, §9) and our deliberate choices."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from variant_autoscaler.core.queueing import (
    EPSILON,
    STABILITY_SAFETY_FRACTION,
    QueueAnalyzer,
    RequestSize,
    ServiceParms,
    TargetPerf,
    cached_analyzer,
)
from variant_autoscaler.errors import InfeasibleError, ModelError, VariantAutoscalerError

# WVA's upstream unit-test configuration (pkg/analyzer/queueanalyzer_test.go).
UPSTREAM = ServiceParms(alpha=1.0, beta=0.01, gamma=10.0, delta=0.001)
BENCH = ServiceParms(alpha=20.58, beta=0.41, gamma=20.58, delta=0.041)


def upstream(l_in: float = 100, l_out: float = 10) -> QueueAnalyzer:
    return QueueAnalyzer(8, 16, UPSTREAM, RequestSize(l_in, l_out))


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


# ---- per-stage times (wva.md §9, queueanalyzer_test.go) -------------------------------------------


@pytest.mark.parametrize(
    ("l_in", "batch", "expected"),
    [(0, 4, 0.0), (1000, 1, 11.0), (2000, 8, 26.0), (500, 2.5, 11.25)],
)
def test_prefill_time(l_in: float, batch: float, expected: float) -> None:
    qa = QueueAnalyzer(8, 16, UPSTREAM, RequestSize(l_in, 10))
    assert qa.prefill_time(batch) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(("batch", "expected"), [(1, 1.01), (4, 1.04), (8, 1.08), (2.5, 1.025)])
def test_decode_time(batch: float, expected: float) -> None:
    assert upstream().decode_time(batch) == pytest.approx(expected, abs=1e-6)


# ---- the worked example of wva.md §5.5 -----------------------------------------------------------


def test_rate_range_worked_example() -> None:
    qa = upstream()
    lo, hi = qa.rate_range
    assert rel(lo, 0.05211048) < 1e-6
    assert rel(hi, 389.4737) < 1e-6
    # μ_1 = 1/19.19 and μ_8 = 8/20.52 per ms, with the ε margins.
    assert lo == pytest.approx(1000 / 19.19 * EPSILON, rel=1e-12)
    assert hi == pytest.approx(1000 * 8 / 20.52 * (1 - EPSILON), rel=1e-12)


def test_analyze_worked_example() -> None:
    m = upstream().analyze(100.0)
    expected = {
        "throughput": 100.0,
        "avg_resp_time": 19.565443,
        "avg_wait_time": 0.0039959,
        "avg_num_in_serv": 1.956145,
        "avg_prefill_time": 10.295499,
        "itl": 1.0295498,
        "ttft": 10.299495,
        "rho": 0.2445181,
        "max_rate": 389.4737,
    }
    for name, value in expected.items():
        # WVA's waiting time is T - S in float32 (about 4 of its 7 digits cancel); ours is computed
        # directly from the queue tail, so it agrees to 1e-3 only.
        assert rel(getattr(m, name), value) < (1e-3 if name == "avg_wait_time" else 1e-5), name
    assert m.ttft == pytest.approx(m.avg_wait_time + m.avg_prefill_time, rel=1e-12)


def test_effective_concurrency_drives_ttft_and_itl() -> None:
    qa = upstream()
    m = qa.analyze(100.0)
    n_eff = (m.itl - UPSTREAM.alpha) / UPSTREAM.beta  # ITL = decode(n_eff)
    assert n_eff == pytest.approx(2.954985, rel=1e-5)
    assert m.avg_prefill_time == pytest.approx(qa.prefill_time(n_eff), rel=1e-12)
    # n_eff explains the mean service time S = L_serv / X (WVA's EffectiveConcurrency).
    service = m.avg_num_in_serv / (m.throughput / 1000)
    c0 = UPSTREAM.gamma + UPSTREAM.alpha * 9
    c1 = UPSTREAM.delta * 100 + UPSTREAM.beta * 9
    assert n_eff == pytest.approx((service - c0) / c1, rel=1e-9)


# ---- Analyze errors and validity (wva.md §9) -----------------------------------------------------


@pytest.mark.parametrize("rate", [0.0, -1.0, math.nan, math.inf])
def test_analyze_rejects_bad_rates(rate: float) -> None:
    with pytest.raises(ModelError, match="invalid request rate"):
        upstream().analyze(rate)


def test_analyze_rejects_rates_above_the_range() -> None:
    qa = upstream()
    with pytest.raises(ModelError, match="max allowed rate"):
        qa.analyze(qa.rate_range[1] * 1.1)


@pytest.mark.parametrize("fraction", [0.5 * EPSILON, 0.5, 0.9])
def test_analyze_accepts_rates_in_and_below_the_range(fraction: float) -> None:
    qa = upstream()
    m = qa.analyze(qa.rate_range[1] * fraction)
    assert 0.0 <= m.rho <= 1.0
    assert m.throughput > 0


def test_model_errors_are_value_errors_of_the_root_class() -> None:
    assert issubclass(ModelError, ValueError)
    assert issubclass(ModelError, VariantAutoscalerError)
    assert issubclass(InfeasibleError, VariantAutoscalerError)


@pytest.mark.parametrize(
    ("batch", "queue", "parms", "req", "match"),
    [
        (8, 16, UPSTREAM, RequestSize(0, 0), "avgOutputTokens"),
        (8, 16, UPSTREAM, RequestSize(-1, -1), "avgInputTokens"),
        (8, 16, UPSTREAM, RequestSize(50, 0), "avgOutputTokens"),
        (0, 16, UPSTREAM, RequestSize(100, 10), "maxBatchSize"),
        (-1, 16, UPSTREAM, RequestSize(100, 10), "maxBatchSize"),
        (8, -1, UPSTREAM, RequestSize(100, 10), "maxQueueSize"),
        (8, 16, None, RequestSize(100, 10), "ServiceParms"),
        (8, 16, ServiceParms(-1.0, 0.01, 10.0, 0.001), RequestSize(100, 10), "alpha"),
        (8, 16, ServiceParms(1.0, math.nan, 10.0, 0.001), RequestSize(100, 10), "beta"),
        (8, 16, ServiceParms(1.0, 0.01, math.inf, 0.001), RequestSize(100, 10), "gamma"),
        (8, 16, ServiceParms(0.0, 0.0, 0.0, 0.0), RequestSize(100, 10), "service time"),
        (8.0, 16, UPSTREAM, RequestSize(100, 10), "integer"),
        (True, 16, UPSTREAM, RequestSize(100, 10), "integer"),
    ],
)
def test_invalid_configurations(batch: object, queue: object, parms: object, req: object, match: str) -> None:
    with pytest.raises(ModelError, match=match):
        QueueAnalyzer(batch, queue, parms, req)  # type: ignore[arg-type]


@pytest.mark.parametrize(("l_in", "l_out"), [(0, 10), (0, 1), (100, 1), (200, 20)])
def test_valid_request_shapes(l_in: float, l_out: float) -> None:
    """WVA's accepted shapes: decode only, decode only with one token, prefill only, mixed."""
    qa = QueueAnalyzer(8, 16, UPSTREAM, RequestSize(l_in, l_out))
    m = qa.analyze(qa.rate_range[1] / 2)
    assert all(math.isfinite(v) and v >= 0 for v in (m.ttft, m.itl, m.avg_resp_time, m.throughput))


def test_default_queue_is_ten_batches() -> None:
    assert QueueAnalyzer(8, None, UPSTREAM, RequestSize(100, 10)).max_queue_size == 80


def test_one_output_token_without_input_uses_one_decode_step() -> None:
    """WVA's special case: L_in = 0 and L_out = 1 still takes one decode step per request."""
    qa = QueueAnalyzer(4, 0, UPSTREAM, RequestSize(0, 1))
    assert qa.rate_range[0] == pytest.approx(1000 * EPSILON / (UPSTREAM.alpha + UPSTREAM.beta))
    assert qa.rate_range[1] == pytest.approx(1000 * 4 / (UPSTREAM.alpha + 4 * UPSTREAM.beta) * (1 - EPSILON))


def test_batch_independent_service_uses_mean_in_service_for_itl() -> None:
    """With one output token and no prefill slope WVA divides 0 by 0; we use L_serv as n_eff (documented)."""
    qa = QueueAnalyzer(8, 80, ServiceParms(5.0, 0.5, 10.0, 0.0), RequestSize(100, 1))
    m = qa.analyze(qa.rate_range[1] / 2)
    assert m.itl == pytest.approx(5.0 + 0.5 * m.avg_num_in_serv, rel=1e-12)
    assert m.avg_prefill_time == pytest.approx(10.0)


def test_single_state_queue_is_solvable() -> None:
    """K = 1 (batch 1, no queue) is always invalid in WVA (stale rho check); we solve it (documented)."""
    qa = QueueAnalyzer(1, 0, UPSTREAM, RequestSize(100, 10))
    rate = qa.rate_range[1] / 2
    m = qa.analyze(rate)
    lam, mu = rate / 1000, 1 / 19.19
    # M/M/1/1: p1 = λ/(λ+μ), throughput λ(1 - p1), nobody waits.
    assert m.throughput == pytest.approx(1000 * lam * mu / (lam + mu), rel=1e-12)
    assert m.avg_wait_time == 0.0
    assert m.avg_resp_time == pytest.approx(19.19, rel=1e-12)


# ---- the chain -----------------------------------------------------------------------------------


def brute_force_probabilities(qa: QueueAnalyzer, parms: ServiceParms, rate: float) -> np.ndarray:
    """p_i straight from the birth-death recursion, state by state (no closed forms, log space)."""
    n, q = qa.max_batch_size, qa.max_queue_size
    l_in, l_out = qa.request.avg_input_tokens, qa.request.avg_output_tokens
    steps = 1.0 if l_in == 0 and l_out == 1 else l_out - 1
    mus = [
        b
        / (
            (parms.gamma + parms.delta * l_in * b if l_in > 0 else 0.0)
            + steps * (parms.alpha + parms.beta * b)
        )
        for b in range(1, n + 1)
    ]
    lam = rate / 1000
    log_p = [0.0]
    for i in range(1, n + q + 1):
        log_p.append(log_p[-1] + math.log(lam) - math.log(mus[min(i, n) - 1]))
    p = np.exp(np.array(log_p) - max(log_p))
    return p / p.sum()  # type: ignore[no-any-return]


@pytest.mark.parametrize(("n", "q"), [(1, 0), (1, 5), (4, 0), (8, 16), (64, 640), (300, 30)])
@pytest.mark.parametrize("fraction", [0.01, 0.5, 0.999])
def test_metrics_match_a_brute_force_chain(n: int, q: int, fraction: float) -> None:
    qa = QueueAnalyzer(n, q, BENCH, RequestSize(512, 256))
    rate = qa.rate_range[1] * fraction
    p = brute_force_probabilities(qa, BENCH, rate)
    np.testing.assert_allclose(qa.state_probabilities(rate), p, rtol=1e-9, atol=1e-300)
    states = np.arange(n + q + 1)
    m = qa.analyze(rate)
    lam = rate / 1000
    xput = lam * (1 - p[-1])
    # Exactly rounded sums (math.fsum), not BLAS dot products whose rounding depends on the CPU's
    # kernels; and the queue length summed over the queued states directly, never as the difference
    # of two nearly equal means (in system − in service), which cancels at low load.
    in_system = math.fsum(float(i) * float(pi) for i, pi in zip(states, p, strict=True))
    in_service = math.fsum(float(min(i, n)) * float(pi) for i, pi in zip(states, p, strict=True))
    queued = math.fsum(float(i - n) * float(p[i]) for i in range(n + 1, n + q + 1))
    assert m.throughput == pytest.approx(1000 * xput, rel=1e-9)
    assert m.avg_num_in_serv == pytest.approx(in_service, rel=1e-9)
    assert m.avg_resp_time == pytest.approx(in_system / xput, rel=1e-9)
    assert m.avg_wait_time == pytest.approx(queued / xput, rel=1e-7, abs=1e-12)


def test_large_batches_switch_to_log_space_without_overflow() -> None:
    """Service rates growing ~linearly with the batch make the plain weights overflow at λmax."""
    qa = QueueAnalyzer(4096, None, ServiceParms(1000.0, 0.0001, 0.0, 0.0), RequestSize(0, 2))
    assert qa._log_mu_prod is not None  # the log-space path is the one under test
    for fraction in (1e-6, 0.5, 1.0):
        m = qa.analyze(qa.rate_range[1] * fraction)
        assert all(math.isfinite(v) for v in (m.ttft, m.itl, m.avg_resp_time, m.avg_num_in_serv))
    assert qa.state_probabilities(qa.rate_range[1]).sum() == pytest.approx(1.0)
    # Where plain products do not overflow (low rates) both paths give the same chain.
    lam = qa.rate_range[1] / 1000 * 0.05
    log_space = qa._head(lam)
    ws = np.cumprod(lam * qa._numpy_arrays()[0])
    plain = (1 + ws.sum(), ws @ np.arange(1, 4097), ws[-1])
    np.testing.assert_allclose(np.array(log_space) / log_space[0], np.array(plain) / plain[0], rtol=1e-9)
    target = qa.analyze(qa.rate_range[1] * 0.99).ttft  # queueing delay only (no input tokens), ~8 ms
    assert qa.size(TargetPerf(ttft=target)).ttft == pytest.approx(target, rel=1e-6)


@pytest.mark.parametrize("n", [8, 32, 33, 200])
def test_python_and_numpy_head_agree(n: int) -> None:
    """Small batches sum the chain's head in plain Python, larger ones with numpy: same numbers."""
    qa = QueueAnalyzer(n, None, BENCH, RequestSize(512, 256))
    lam = qa.rate_range[1] / 1000 * 0.7
    python_path = qa._head(lam) if qa._inv_mu_list is not None else None
    qa._inv_mu_list = None
    numpy_path = qa._head(lam)
    if python_path is not None:
        np.testing.assert_allclose(python_path, numpy_path, rtol=1e-12)
    ws = np.cumprod(lam * qa._numpy_arrays()[0])
    np.testing.assert_allclose(numpy_path, (1 + ws.sum(), ws @ np.arange(1, n + 1), ws[-1]), rtol=1e-12)


# ---- sizing (WVA's Size semantics) ---------------------------------------------------------------


def test_size_upstream_targets() -> None:
    """queueanalyzer_test.go: targets (50 ms, 5 ms, 100 tok/s) are met; TPS caps at 90 % of the max."""
    qa = upstream()
    s = qa.size(TargetPerf(ttft=50.0, itl=5.0, tps=100.0))
    hi = qa.rate_range[1]
    assert s.rate_target_ttft == hi  # "above": still met at the highest rate
    assert s.rate_target_itl == hi
    assert s.rate_target_tps == pytest.approx(hi * (1 - STABILITY_SAFETY_FRACTION))
    assert s.max_rate == s.rate_target_tps
    assert s.metrics.throughput == pytest.approx(qa.analyze(s.max_rate).throughput, rel=1e-12)
    assert s.tps == pytest.approx(s.metrics.throughput * 10)
    assert s.ttft == s.metrics.ttft and s.itl == s.metrics.itl


def test_size_without_targets_gives_the_top_of_the_range() -> None:
    qa = upstream()
    s = qa.size(TargetPerf())
    assert s.max_rate == s.rate_target_ttft == s.rate_target_itl == s.rate_target_tps == qa.rate_range[1]


@pytest.mark.parametrize("targets", [TargetPerf(-1, 5, 100), TargetPerf(50, -1, 100), TargetPerf(50, 5, -1)])
def test_size_rejects_negative_targets(targets: TargetPerf) -> None:
    with pytest.raises(ModelError, match="target"):
        upstream().size(targets)


def test_size_finds_the_root_of_the_binding_target() -> None:
    qa = QueueAnalyzer(64, None, BENCH, RequestSize(512, 256))
    s = qa.size(TargetPerf(ttft=500.0, itl=40.0))
    assert s.ttft == pytest.approx(500.0, rel=1e-6)
    assert qa.analyze(s.rate_target_itl).itl == pytest.approx(40.0, rel=1e-6)
    assert s.max_rate == min(s.rate_target_ttft, s.rate_target_itl)
    assert s.itl < 40.0


def test_size_below_the_region_is_infeasible_with_a_readable_reason() -> None:
    qa = QueueAnalyzer(64, None, BENCH, RequestSize(512, 256))
    lowest = qa.analyze(qa.rate_range[0]).itl
    with pytest.raises(
        InfeasibleError, match=r"^ITL target 20 ms unreachable: 20\.99 ms at the lowest rate$"
    ):
        qa.size(TargetPerf(itl=20.0))
    assert lowest == pytest.approx(20.99, abs=0.01)
    with pytest.raises(InfeasibleError, match="TTFT target 1 ms unreachable"):
        qa.size(TargetPerf(ttft=1.0, itl=40.0))


def test_size_target_at_the_lowest_rate_returns_the_lowest_rate() -> None:
    qa = upstream()
    f_lo = qa.analyze(qa.rate_range[0]).ttft
    s = qa.size(TargetPerf(ttft=f_lo * (1 + 1e-7)))
    assert s.max_rate == pytest.approx(qa.rate_range[0], rel=1e-12)


@pytest.mark.parametrize("parms", [ServiceParms(20.0, 0.0, 20.0, 0.04), ServiceParms(20.0, 0.4, 20.0, 0.04)])
def test_flat_itl_is_met_everywhere_or_nowhere(parms: ServiceParms) -> None:
    """β = 0, or a batch of one, makes ITL independent of the rate. WVA then calls any target other than
    that constant "below" (infeasible), even a looser one; we accept targets at or above it (documented)."""
    batch = 1 if parms.beta else 16
    qa = QueueAnalyzer(batch, None, parms, RequestSize(512, 256))
    flat_itl = qa.analyze(qa.rate_range[1] / 3).itl
    s = qa.size(TargetPerf(itl=flat_itl * 1.5))
    assert s.rate_target_itl == qa.rate_range[1]
    assert qa.size(TargetPerf(itl=flat_itl)).rate_target_itl == qa.rate_range[1]
    with pytest.raises(InfeasibleError, match="at every rate"):
        qa.size(TargetPerf(itl=flat_itl * 0.99))


def test_size_results_are_memoised_per_analyzer() -> None:
    qa = QueueAnalyzer(64, None, BENCH, RequestSize(512, 256))
    first = qa.size(TargetPerf(ttft=500.0))
    assert qa.size(TargetPerf(ttft=500.0)) is first
    with pytest.raises(InfeasibleError) as one:
        qa.size(TargetPerf(itl=1.0))
    with pytest.raises(InfeasibleError) as two:
        qa.size(TargetPerf(itl=1.0))
    assert str(one.value) == str(two.value)
    for i in range(100):  # the memo stays bounded
        qa.size(TargetPerf(ttft=200.0 + i))
    assert len(qa._size_memo) <= QueueAnalyzer._SIZE_MEMO_LIMIT


def test_cached_analyzer_shares_instances() -> None:
    request = RequestSize(512, 256)
    a = cached_analyzer(64, None, BENCH, request)
    assert cached_analyzer(64, None, BENCH, RequestSize(512, 256)) is a
    assert cached_analyzer(64, 10, BENCH, request) is not a
    assert cached_analyzer.cache_info().maxsize is not None


def test_size_agrees_with_the_tps_target_independent_of_its_value() -> None:
    """As in WVA, only the sign of the TPS target matters inside Size."""
    qa = upstream()
    assert qa.size(TargetPerf(tps=1.0)).max_rate == qa.size(TargetPerf(tps=1e9)).max_rate


def test_a_negligible_decode_slope_is_not_divided_into_rounding_noise() -> None:
    """1 + 2e-16 output tokens and no prefill slope: S = c0 + c1·n_eff with c1 ~ 4e-16, so
    (S − c0)/c1 was rounding noise and ITL jumped between 1 and 4 ms with the rate (hypothesis found
    it); the negligible slope is now treated as none, as for exactly one output token."""
    qa = QueueAnalyzer(2, 20, ServiceParms(0, 2, 1, 0), RequestSize(1.0, 1.0000000000000002))
    lo, hi = qa.rate_range
    itls = [qa.analyze(lo + (hi - lo) * k / 200).itl for k in range(200)]
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(itls))  # non-decreasing with the rate
    target = qa.analyze(hi / 2).itl * 1.0625
    rate = qa.size(TargetPerf(itl=target)).rate_target_itl
    assert qa.analyze(rate).itl == pytest.approx(target, rel=1e-6)
