"""The tail model (core.tail) and its inputs (core.workload): distributions, burstiness, the chain, sizing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from variant_autoscaler.core.analyzer import SLO, Load, size_allocation
from variant_autoscaler.core.chunked import QUEUED_POINTS
from variant_autoscaler.core.queueing import QueueAnalyzer, RequestSize, ServiceParms, TargetPerf
from variant_autoscaler.core.tail import (
    TailModel,
    TailSizingRequest,
    TailTargets,
    size_tail_allocation,
    size_tail_allocations,
)
from variant_autoscaler.core.workload import (
    Burstiness,
    RequestLengths,
    TokenLengths,
    burstiness_from_times,
    index_of_dispersion,
)
from variant_autoscaler.errors import InfeasibleError, ModelError

A100 = ServiceParms(alpha=20.58, beta=0.41, gamma=20.58, delta=0.041)
LOGNORMAL = RequestLengths(
    TokenLengths.lognormal(512, 0.6, high=4096), TokenLengths.lognormal(256, 0.6, low=2, high=2048)
)

# ---- lengths ---------------------------------------------------------------------------------------


def test_fixed_and_sampled_lengths_have_their_moments() -> None:
    fixed = TokenLengths.fixed(128)
    assert fixed.mean == 128 and fixed.variance == 0.0 and fixed.quantile(0.99) == 128
    rng = np.random.default_rng(1)
    data = rng.gamma(2.0, 250.0, 200_000)
    lengths = TokenLengths.from_samples(data)
    assert lengths.mean == pytest.approx(data.mean(), rel=0.02)
    assert math.sqrt(lengths.variance) == pytest.approx(data.std(), rel=0.05)
    assert lengths.quantile(0.99) == pytest.approx(np.quantile(data, 0.99), rel=1e-9)


def test_parametric_lengths() -> None:
    ln = TokenLengths.lognormal(512, 0.6)
    assert ln.mean == pytest.approx(512, rel=0.03)
    assert math.sqrt(ln.variance) / ln.mean == pytest.approx(0.6, rel=0.1)
    clipped = TokenLengths.lognormal(512, 0.6, high=1000)
    assert clipped.values[-1] == 1000 and clipped.mean < ln.mean
    ex = TokenLengths.exponential(100)
    assert ex.mean == pytest.approx(100, rel=0.02)
    assert math.sqrt(ex.variance) / ex.mean == pytest.approx(1.0, rel=0.05)


def test_lengths_from_a_prometheus_histogram() -> None:
    # 10 requests up to 100 tokens, 30 up to 1000, 10 more beyond; the mean says where the last ones end.
    bounds = [100.0, 1000.0, math.inf]
    cumulative = [10.0, 40.0, 50.0]
    h = TokenLengths.from_histogram(bounds, cumulative, mean=800.0)
    assert h.levels == (0.0, 0.2, 0.8, 1.0)
    assert h.mean == pytest.approx(800.0)
    assert h.quantile(0.5) == pytest.approx(550.0)  # as histogram_quantile interpolates
    no_mean = TokenLengths.from_histogram(bounds, cumulative)
    assert no_mean.values[-1] == 2000.0
    with pytest.raises(ModelError, match="empty"):
        TokenLengths.from_histogram([100.0], [0.0])


def test_lengths_round_trip_json_and_reject_nonsense() -> None:
    assert TokenLengths.from_json(LOGNORMAL.input.to_json()) == LOGNORMAL.input
    assert RequestLengths.from_json(LOGNORMAL.to_json()) == LOGNORMAL
    for values, levels in (((1.0,), (0.0,)), ((2.0, 1.0), (0.0, 1.0)), ((1.0, 2.0), (0.0, 0.5))):
        with pytest.raises(ModelError):
            TokenLengths(values, levels)
    with pytest.raises(ModelError, match="not a length distribution"):
        TokenLengths.from_json({"values": [1]})


# ---- burstiness ------------------------------------------------------------------------------------


def test_index_of_dispersion() -> None:
    rng = np.random.default_rng(2)
    assert index_of_dispersion(rng.poisson(50, 5000)) == pytest.approx(1.0, abs=0.06)
    # A steady rise of the rate is not burstiness (successive differences), but a plain variance sees it.
    rising = rng.poisson(np.linspace(20, 200, 5000))
    assert index_of_dispersion(rising) == pytest.approx(1.0, abs=0.1)
    assert index_of_dispersion(rising, detrend=False) > 10
    assert index_of_dispersion([3.0]) == 1.0 and index_of_dispersion([0.0, 0.0]) == 1.0


def test_burstiness_from_renewal_arrivals_is_their_squared_cv() -> None:
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.gamma(0.25, 1.0 / (0.25 * 20.0), 200_000))  # CV 2 at 20 req/s
    b = burstiness_from_times(times, (1.0, 10.0))
    assert b.rate == pytest.approx(20.0, rel=0.02)
    assert b.idc[1] == pytest.approx(4.0, rel=0.15)
    poisson = burstiness_from_times(np.cumsum(rng.exponential(0.05, 200_000)), (1.0, 10.0))
    assert all(v == pytest.approx(1.0, abs=0.1) for v in poisson.idc)


def test_burstiness_below_the_smallest_window_follows_the_curve_above_it() -> None:
    rng = np.random.default_rng(5)
    # Gamma gaps of CV 2 cluster within tens of ms: the IDC is flat from 1 s on, and below 1 s it falls
    # like t^(1/CV²), which a line from 1 at 0 misses by a factor of two at 100 ms.
    renewal = np.cumsum(rng.gamma(0.25, 1.0 / (0.25 * 10.0), 300_000))
    measured = burstiness_from_times(renewal, (0.05, 0.1, 0.2))
    b = burstiness_from_times(renewal, (1.0, 2.0, 5.0, 10.0, 30.0))
    assert b.short_exponent() == pytest.approx(1.0 / b.idc[-1])
    for window, idc in zip(measured.windows_s, measured.idc, strict=True):
        assert b.at(window) == pytest.approx(idc, rel=0.1)
        assert 1.0 + (b.idc[0] - 1.0) * window < 0.75 * idc  # the line
    # A rate switching every 2 s: IDC − 1 climbs faster than the window between 1 and 2 s; linear below.
    switching = Burstiness((1.0, 2.0, 5.0), (1.6, 2.6, 4.0))
    assert switching.short_exponent() == 1.0 and switching.at(0.5) == pytest.approx(1.3)
    assert Burstiness((1.0,), (3.0,)).short_exponent() == 1.0  # one window: nothing to read a slope from
    assert Burstiness((1.0, 2.0), (0.9, 0.8)).short_exponent() == 1.0  # under-dispersed


def test_burstiness_reads_between_windows_and_splits() -> None:
    b = Burstiness((1.0, 10.0), (2.0, 11.0), rate=10.0)
    assert b.short_exponent() == pytest.approx(1.0)  # IDC − 1 still climbs ×10 over ×10 of window
    assert b.at(0.5) == pytest.approx(1.5)  # so linear from 1 at a window of 0
    assert b.at(math.sqrt(10.0)) == pytest.approx(6.5)  # linear in log(window)
    assert b.at(100.0) == 11.0
    half = b.split(5.0)  # a thinned stream keeps the rate's relative variance
    assert half.idc == (1.5, 6.0) and half.rate == 5.0
    assert b.split(20.0) is b and Burstiness().at(5.0) == 1.0
    assert Burstiness.from_json(b.to_json()) == b
    with pytest.raises(ModelError):
        Burstiness((10.0, 1.0), (1.0, 1.0))


# ---- the chain -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "load"), [(4, 0.5), (4, 0.9), (32, 0.8)])
def test_for_poisson_arrivals_and_memoryless_service_it_is_the_analyzers_chain(n: int, load: float) -> None:
    lengths = RequestLengths(TokenLengths.fixed(128), TokenLengths.fixed(128))
    model = TailModel(A100, n, lengths)
    model._cs2 = 1.0  # the chain's exponential service times
    rate = load * model.rate_range[1]
    lam = np.array([rate / 1000.0])
    p_head, p_wait, eta = model._chain(lam, np.ones(1))
    analyzer = QueueAnalyzer(n, 200_000, A100, RequestSize(128, 128))  # a queue long enough to be unbounded
    p = analyzer.state_probabilities(rate)
    assert p_head[0] == pytest.approx(p[:n], rel=1e-6, abs=1e-15)
    assert p_wait[0] == pytest.approx(p[n:].sum(), rel=1e-6)
    mu_n = float(model._mu[-1])
    assert eta[0] == pytest.approx(mu_n - lam[0], rel=1e-9)  # the chain's wait: Exp(μ_N − λ)


def test_shares_grow_with_the_rate_and_shrink_with_looser_targets() -> None:
    model = TailModel(A100, 64, LOGNORMAL)
    top = model.rate_range[1]
    shares = [model.predict(f * top, TailTargets(ttft=1000.0)).ttft_miss for f in (0.2, 0.4, 0.6, 0.8)]
    assert shares == sorted(shares) and shares[0] < shares[-1]
    looser = [model.predict(0.6 * top, TailTargets(ttft=t)).ttft_miss for t in (500.0, 1000.0, 2000.0)]
    assert looser == sorted(looser, reverse=True)
    q95, q99 = model.ttft_quantile(0.6 * top, 0.95), model.ttft_quantile(0.6 * top, 0.99)
    assert q95 < q99
    at = model.predict(0.6 * top, TailTargets(ttft=q99)).ttft_miss
    assert at == pytest.approx(0.01, rel=1e-3)


def test_burstiness_and_service_variability_move_the_tail_the_right_way() -> None:
    top = TailModel(A100, 4, RequestLengths(TokenLengths.fixed(128), TokenLengths.fixed(128))).rate_range[1]
    rate = 0.7 * top

    def p99(lengths: RequestLengths, bursts: Burstiness | None = None) -> float:
        return TailModel(A100, 4, lengths, bursts).ttft_quantile(rate, 0.99)

    fixed = RequestLengths(TokenLengths.fixed(128), TokenLengths.fixed(128))
    varied = RequestLengths(TokenLengths.fixed(128), TokenLengths.exponential(128))
    assert p99(fixed) < p99(varied)  # regular services queue less
    assert p99(fixed) < p99(fixed, Burstiness((1.0, 10.0), (4.0, 4.0)))  # bursts queue more


def test_the_kv_cache_caps_the_batch() -> None:
    model = TailModel(A100, 64, LOGNORMAL, kv_cache_tokens=32_768)
    assert model.max_batch_size == int(32_768 // (LOGNORMAL.input.mean + LOGNORMAL.output.mean / 2 + 1))
    assert TailModel(A100, 64, LOGNORMAL, kv_cache_tokens=10**9).max_batch_size == 64


# ---- sizing ----------------------------------------------------------------------------------------


def test_max_rate_sits_at_the_budget() -> None:
    model = TailModel(A100, 64, LOGNORMAL, Burstiness((1.0, 10.0), (1.5, 3.0), rate=5.0))
    targets = TailTargets(ttft=1000.0, itl=50.0, joint_miss=0.01)
    size = model.max_rate(targets)
    assert size.binding == "joint"
    shares = size.prediction.ttft_miss + size.prediction.itl_miss
    assert 0.009 <= shares <= 0.01 * (1 + 1e-9)
    above = model.predict(size.max_rate * 1.01, targets)
    assert above.ttft_miss + above.itl_miss > 0.01


def test_unreachable_and_mean_targets() -> None:
    model = TailModel(A100, 64, LOGNORMAL)
    with pytest.raises(InfeasibleError, match="unreachable"):
        model.max_rate(TailTargets(ttft=50.0, ttft_miss=0.01))  # long prompts alone take longer
    mean = model.max_rate(TailTargets(ttft=1000.0, itl=50.0))  # no budget: WVA's mean targets
    analyzer = QueueAnalyzer(64, None, A100, RequestSize(LOGNORMAL.input.mean, LOGNORMAL.output.mean))
    assert mean.binding == "mean"
    assert mean.max_rate == pytest.approx(analyzer.size(TargetPerf(ttft=1000.0, itl=50.0)).max_rate)


def test_a_looser_ttft_target_never_plans_a_lower_attainment() -> None:
    """The issue's long-context case: sizing on the mean prompt let batches grow until long prompts
    missed, so a looser target lowered attainment; sized on the distribution, a looser target allows
    more load and the predicted share within stays at the target."""
    rng = np.random.default_rng(4)
    lengths = RequestLengths(
        TokenLengths.from_samples(np.clip(rng.lognormal(6.8, 0.9, 50_000), 1, 14_000)),
        TokenLengths.from_samples(np.clip(rng.lognormal(4.9, 0.8, 50_000), 2, 1000)),
    )
    model = TailModel(A100, 64, lengths, kv_cache_tokens=65_536)
    previous = 0.0
    for ttft in (1000.0, 2000.0, 5000.0):
        size = model.max_rate(TailTargets(ttft=ttft, itl=50.0, joint_miss=0.01))
        assert size.max_rate > previous
        assert size.prediction.ttft_miss + size.prediction.itl_miss <= 0.01 * (1 + 1e-9)
        previous = size.max_rate


def test_targets_from_slos() -> None:
    t = TailTargets.from_slo(SLO(ttft=1000, itl=50, ttft_percentile=95, attainment=99))
    assert (t.ttft_miss, t.itl_miss, t.joint_miss) == pytest.approx((0.05, 0.0, 0.01))
    assert t.is_tail and t.mean_targets() == TargetPerf(ttft=0.0, itl=0.0)
    plain = TailTargets.from_slo(SLO(ttft=1000, itl=50))
    assert not plain.is_tail and plain.mean_targets() == TargetPerf(ttft=1000.0, itl=50.0)
    only_itl = TailTargets.from_slo(SLO(ttft=1000, itl=50, itl_percentile=99))
    assert only_itl.mean_targets() == TargetPerf(ttft=1000.0, itl=0.0)
    assert "99 % of requests within both" in TailTargets(ttft=1, itl=1, joint_miss=0.01).describe()
    with pytest.raises(ModelError):
        TailTargets(ttft=1000, ttft_miss=1.0)


def test_size_tail_allocation_is_shaped_like_size_allocation() -> None:
    slo = SLO(ttft=1000.0, itl=50.0, attainment=99.0)
    common = {"accelerator": "A100", "unit_cost": 40.0, "acc_count": 2, "parms": A100, "max_batch_size": 64}
    sized = size_tail_allocation(**common, load=Load(600.0, 512.0, 256.0), slo=slo, lengths=LOGNORMAL)
    assert sized.replicas == math.ceil(10.0 / sized.max_rate_per_replica)
    assert sized.cost == pytest.approx(80.0 * sized.replicas)
    assert 0 < sized.rho < 1 and sized.ttft > 0 and sized.itl > A100.alpha
    # Without tail targets it sizes as the analyzer does (WVA's mean meaning).
    plain = SLO(ttft=1000.0, itl=50.0)
    load = Load(600.0, 512.0, 256.0)
    mean = size_tail_allocation(**common, load=load, slo=plain)
    assert mean.max_rate_per_replica == pytest.approx(
        size_allocation(**common, load=load, slo=plain).max_rate_per_replica, rel=1e-9
    )
    idle = size_tail_allocation(**common, load=Load(0.0, 512.0, 256.0), slo=slo, min_replicas=0)
    assert idle.replicas == 0 and idle.cost == 0.0
    assert size_tail_allocation(**common, load=Load(0.0, 512.0, 256.0), slo=slo).replicas == 1
    with pytest.raises(ModelError):
        size_tail_allocation(**common, load=Load(600.0, 512.0, 256.0), slo=slo, min_replicas=-1)


def test_the_batch_form_answers_each_request_in_order() -> None:
    load = Load(600.0, 512.0, 256.0)
    ok = TailSizingRequest("A100", 40.0, 1, A100, 64, load, SLO(ttft=1000.0, itl=50.0, attainment=99.0))
    bad = TailSizingRequest("A100", 40.0, 1, A100, 64, load, SLO(ttft=10.0, itl=50.0, attainment=99.0))
    out = size_tail_allocations([ok, bad, ok])
    assert isinstance(out[1], InfeasibleError)
    assert (
        out[0]
        == out[2]
        == size_tail_allocation(
            accelerator="A100",
            unit_cost=40.0,
            acc_count=1,
            parms=A100,
            max_batch_size=64,
            load=load,
            slo=ok.slo,
        )
    )


# ---- chunked prefill: the step under way ----------------------------------------------------------


def test_chunked_miss_is_the_mixture_it_states_integrated_exactly() -> None:
    # _chunked_miss integrates the rest of the step under way (uniform) and the steps a prompt takes
    # in closed form over the prompt's piecewise-linear CDF; sampling the same mixture must give the
    # same shares. A small token budget makes prompts span several steps.
    burst = Burstiness((1.0, 10.0), (3.0, 4.0), rate=2.0)
    model = TailModel(A100, 64, LOGNORMAL, burst, chunked_prefill=True, prefill_budget=400)
    lam = np.array([2.0 / 1000.0])
    chunked = model._chunked
    assert chunked is not None
    f, weights, counts = chunked.mix(lam, model._within)
    assert 0.0 < f[0, 10] < 1.0 and 0.0 < counts[0, 10, 0] < 1.0
    assert counts.sum(axis=2) == pytest.approx(np.ones((1, 64)))
    _, chunk, rest = chunked.chunks()
    rng = np.random.default_rng(3)
    n = 400_000
    values, levels = LOGNORMAL.input.knots()
    prompt = np.interp(rng.uniform(size=n), levels, values)
    points = chunked.under_way
    queued = np.split(chunked.queued, np.cumsum(QUEUED_POINTS)[:-1])  # the points of each count bin
    for b in (1, 11, 40):
        step, cap = chunked.step[b - 1], chunked.capacity[b - 1]
        assert cap == max(400.0 - (b - 1), 1.0)
        # prompts queued ahead: a count bin drawn by its share (0: none), then one of its points
        number = rng.choice(len(QUEUED_POINTS) + 1, n, p=counts[0, b - 1] / counts[0, b - 1].sum())
        companion = np.zeros(n)
        for k, bin_points in enumerate(queued, start=1):
            picked = bin_points[rng.integers(0, len(bin_points), n)]
            companion = np.where(number == k, picked, companion)
        which = rng.choice(len(points), n, p=weights[b - 1])
        carrying = rng.uniform(size=n) < f[0, b - 1]
        span = np.where(carrying, step + A100.delta * chunk[b - 1, which], step)
        ahead = np.where(carrying, rest[b - 1, which], 0.0) + companion
        steps = np.maximum(np.ceil((ahead + prompt) / cap), 1.0)
        ttft = rng.uniform(size=n) * span + steps * step + A100.delta * (ahead + prompt)
        for target in (60.0, 120.0, 250.0):
            exact = float(chunked.miss(lam, target, model._within)[0, b - 1])
            assert exact == pytest.approx(float(np.mean(ttft > target)), abs=4e-3), (b, target)


def test_chunked_ttft_grows_with_the_clustering_next_to_an_arrival() -> None:
    poisson = TailModel(A100, 64, LOGNORMAL, chunked_prefill=True)
    bursty = TailModel(
        A100, 64, LOGNORMAL, Burstiness((1.0, 10.0), (4.0, 4.0), rate=2.0), chunked_prefill=True
    )
    alone = poisson.ttft_quantile(0.02, 0.99)  # nearly idle: half a lone step + own step, no company
    p = A100
    assert alone == pytest.approx(1.5 * p.alpha + p.delta * LOGNORMAL.input.quantile(0.99), rel=0.03)
    assert bursty.ttft_quantile(2.0, 0.99) > poisson.ttft_quantile(2.0, 0.99) > alone
    assert bursty.predict(2.0).ttft > poisson.predict(2.0).ttft


def test_a_long_prompt_takes_more_steps_on_a_smaller_token_budget() -> None:
    # Prompts of 1,000-3,000 tokens: within one step of 8,192 tokens, over two to twelve of 256, each
    # step paying its decodes' α + β·i again.
    prompts = RequestLengths(TokenLengths((1000.0, 3000.0), (0.0, 1.0)), TokenLengths.fixed(200))
    big = TailModel(A100, 64, prompts, chunked_prefill=True, prefill_budget=8192)
    small = TailModel(A100, 64, prompts, chunked_prefill=True, prefill_budget=256)
    alone = big.ttft_quantile(0.01, 0.5)  # nearly idle: half a lone step + its own, 2,000 tokens
    assert alone == pytest.approx(1.5 * A100.alpha + A100.delta * 2000, rel=0.02)
    # At 256 tokens a step (~8 steps for 2,000 tokens) the median adds about 7 more fixed parts.
    assert small.ttft_quantile(0.01, 0.5) == pytest.approx(alone + 7 * A100.alpha, rel=0.05)
    assert small.predict(1.0).ttft > big.predict(1.0).ttft
    sized = [
        size_tail_allocation(
            accelerator="A100", unit_cost=40.0, acc_count=1, parms=A100, max_batch_size=64,
            load=Load(600.0, 2000.0, 200.0), slo=SLO(ttft=600.0, itl=60.0, attainment=99.0),
            lengths=prompts, chunked_prefill=True, prefill_budget=budget,
        )
        for budget in (8192, 256)
    ]  # fmt: skip
    assert sized[1].replicas > 2 * sized[0].replicas
