"""How many requests arrive near a request (core.neighbours): the within-interval IDC, the prompts queued
ahead, the arrivals behind; and what the chunked tail makes of them (core.chunked)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from variant_autoscaler.core.neighbours import (
    EDGES,
    WithinCurve,
    ahead_sf,
    behind_bins,
    bins_from_sf,
    within_interval,
)
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.core.tail import TailModel, TailTargets
from variant_autoscaler.core.workload import RequestLengths, TokenLengths, burstiness_from_times

A100 = ServiceParms(alpha=20.58, beta=0.41, gamma=20.58, delta=0.041)


def _poisson_idc(lam: np.ndarray, window: np.ndarray) -> np.ndarray:
    return np.ones(np.broadcast(lam, window).shape)


def _within_minute(times: np.ndarray, window: float, interval: float = 60.0) -> float:
    """The plain IDC of counts over ``window`` around each interval's own mean, pooled."""
    k = int(interval // window)
    n = int(times[-1] // interval)
    counts = np.bincount((times // window).astype(int), minlength=n * k)[: n * k].reshape(n, k)
    deviation = counts - counts.mean(axis=1, keepdims=True)
    return float((deviation**2).sum() / (n * (k - 1)) / counts.mean())


def test_the_within_interval_idc_adds_the_octaves_the_allan_idc_leaves_out() -> None:
    # A rate switching every ~5 s between 0.4x and 1.6x: over 1 s windows the Allan IDC (successive
    # differences) sees little of it, the counts around each minute's mean see it all.
    rng = np.random.default_rng(5)
    t, out = 0.0, []
    while t < 3600.0:
        end = t + rng.exponential(5.0)
        rate = rng.choice((0.4, 1.6)) * 20.0
        while True:
            t += rng.exponential(1.0 / rate)
            if t > end:
                t = end
                break
            out.append(t)
    times = np.array(out)
    allan = burstiness_from_times(times, (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0))
    curve = allan.curve()
    assert curve is not None
    table = WithinCurve.of(lambda w: curve(w * 1e-3), 0.0, 60_000.0)
    for window in (1.0, 4.0):
        measured = _within_minute(times, window)
        derived = float(table(np.array([0.0]), np.array([window * 1000.0]))[0])
        assert derived == pytest.approx(measured, rel=0.15), window
        assert derived > 1.5 * float(curve(np.array([window]))[0])
    # Poisson stays Poisson; a window as long as the interval has nothing inside it to add.
    assert within_interval(_poisson_idc, np.array([1.0]), np.array([500.0]), 60_000.0)[0] == 1.0
    assert within_interval(lambda lam, w: np.full(w.shape, 9.0), np.zeros(1), np.array([60_000.0]), 60_000.0)[
        0
    ] == pytest.approx(1.0)


def test_a_replica_sees_its_share_of_the_streams_excess() -> None:
    table = WithinCurve.of(lambda w: np.full(w.shape, 5.0), 0.01, 60_000.0)
    whole = float(table(np.array([0.01]), np.array([1000.0]))[0])
    quarter = float(table(np.array([0.0025]), np.array([1000.0]))[0])
    assert quarter - 1.0 == pytest.approx((whole - 1.0) / 4.0)


def test_poisson_arrivals_queue_ahead_as_a_geometric_count() -> None:
    # Poisson: the prefill queue an arrival finds at load rho = lambda * d is geometric, rho^j.
    lam = np.array([0.004])  # req/ms
    d = np.array([50.0])
    sf = ahead_sf(lam, d, d, _poisson_idc)[0, 0]
    rho = 0.2
    assert sf[:6] == pytest.approx(rho ** EDGES[:6], rel=1e-3)
    assert np.all(np.diff(sf) <= 0.0)


def test_a_burst_that_outpaces_the_prefill_piles_prompts_up() -> None:
    # The same mean rate with the within-interval IDC rising to 40 over seconds (bursts of seconds, as
    # the Azure code trace): far more arrivals find ten or more prompts ahead.
    lam = np.array([0.0007])
    d = np.array([100.0])

    def bursty(rate: np.ndarray, window: np.ndarray) -> np.ndarray:
        return 1.0 + 39.0 * np.minimum(
            np.broadcast_to(window, np.broadcast(rate, window).shape) / 5000.0, 1.0
        )

    calm = ahead_sf(lam, d, d, _poisson_idc)[0, 0]
    burst = ahead_sf(lam, d, d, bursty)[0, 0]
    ten = int(np.searchsorted(EDGES, 10))
    assert calm[ten] < 1e-9 < 0.001 < burst[ten]
    assert np.all(burst >= calm - 1e-12)


def test_arrivals_behind_a_request_are_poisson_or_overdispersed() -> None:
    lam = np.array([0.002])
    window = np.array([1500.0])  # 3 arrivals expected
    bins = behind_bins(lam, window, _poisson_idc)[0]
    poisson = stats.poisson(3.0)
    assert bins[0] == pytest.approx(poisson.pmf(0), rel=1e-4)
    assert bins[1] == pytest.approx(poisson.pmf(1), rel=1e-4)
    assert bins.sum() == pytest.approx(1.0)
    clumped = behind_bins(lam, window, lambda rate, w: np.full(np.broadcast(rate, w).shape, 6.0))[0]
    mean = float(clumped[1:] @ np.concatenate(((EDGES[:-1] + EDGES[1:] - 1.0) / 2.0, EDGES[-1:])))
    assert mean == pytest.approx(3.0 + (6.0 - 1.0) / 2.0, rel=0.1)  # lambda T + (J - 1)/2 on one side
    assert clumped[0] > bins[0]  # more often none, more often many


def test_bins_from_survival_values_sum_to_one() -> None:
    sf = np.array([[0.5, 0.6, 0.1] + [0.0] * (len(EDGES) - 3)])
    bins = bins_from_sf(sf)
    assert bins.sum() == pytest.approx(1.0) and np.all(bins >= 0.0)


def test_the_chunked_itl_share_is_the_mixture_it_states() -> None:
    # A request's mean ITL over its k gaps at a batch b: alpha + beta*b + delta*min(S, k*C)/k, S the
    # prompts of those arriving behind it. Sampling that mixture gives the model's share.
    lengths = RequestLengths(TokenLengths((200.0, 3000.0), (0.0, 1.0)), TokenLengths((2.0, 40.0), (0.0, 1.0)))
    model = TailModel(A100, 16, lengths, chunked_prefill=True)
    chunked = model._chunked
    assert chunked is not None
    lam = np.array([2.0 / 1000.0])
    state = model._state(lam)
    seen = model._batch_seen(state)
    life = model._ttft_mean(state)[:, None] + chunked.gaps[None, :] * model._itl_mean(state)[:, None]
    target = 45.0
    share = float(chunked.itl_miss(lam, target, seen, life, model._within)[0])
    rng = np.random.default_rng(2)
    n = 300_000
    b = rng.choice(np.arange(1, 17), n, p=seen[0])
    k_index = rng.integers(0, len(chunked.gaps), n)
    k = chunked.gaps[k_index]
    arrivals = rng.poisson(lam[0] * life[0, k_index])
    prompts = np.array([rng.uniform(200.0, 3000.0, m).sum() if m else 0.0 for m in arrivals])
    cap = 2048.0 - b
    itl = A100.alpha + A100.beta * b + A100.delta * np.minimum(prompts, k * cap) / k
    assert share == pytest.approx(float(np.mean(itl > target)), abs=0.01)
    assert 0.02 < share < 0.9


def test_short_outputs_next_to_long_prompts_miss_an_itl_target_the_mean_meets() -> None:
    # The Azure code trace's shape: prompts of thousands of tokens, outputs of a handful. The mean ITL
    # is well within 50 ms, yet a request whose few steps carry a chunk of another prompt is not.
    lengths = RequestLengths(TokenLengths((100.0, 7400.0), (0.0, 1.0)), TokenLengths((2.0, 60.0), (0.0, 1.0)))
    model = TailModel(A100, 64, lengths, chunked_prefill=True)
    p = model.predict(1.0, TailTargets(itl=50.0))
    assert p.itl < 35.0
    assert p.itl_miss > 0.02
    # Beyond delta * C per step nothing can miss: a target above alpha + beta*b + delta*C is always met.
    assert (
        model.predict(0.5, TailTargets(itl=A100.alpha + A100.beta * 64 + A100.delta * 2048 + 1)).itl_miss
        == 0.0
    )
    assert math.isclose(model.itl_quantile(0.5, 0.5), model.itl_quantile(0.5, 0.5))
