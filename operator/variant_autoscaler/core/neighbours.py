"""How many other requests arrive close to a request: the counts the chunked-prefill tail needs.

On a server that prefills chunked (vLLM V1, :mod:`variant_autoscaler.core.chunked`) a request's first
token waits for the prompts queued ahead of it, and its decode steps carry the prompts of the requests
that arrive after it. Both counts depend on how arrivals cluster near a request, at the scale of the
prefill (a tenth of a second to tens of seconds), not only on the mean rate.

**The local rate.** The planner plans an interval on its mean rate ``λ``. Within the interval the rate
moves: over a window ``T`` arrivals come at a local rate ``Λ_T`` whose spread around ``λ`` is what the
index of dispersion of counts *within the interval* says, ``Var[N(T)] = λT·J(T)``. The measured
burstiness (:class:`~variant_autoscaler.core.workload.Burstiness`) is an Allan IDC ``A(T)``: from
successive differences, it leaves out what moves slower than ``T`` (the forecast's business). ``J`` adds
back the octaves up to the interval ``M``, each counted at its share of the window:

    ``J(T) = 1 + ½ Σₖ (A(2ᵏT) − 1) / 2ᵏ``  over ``2ᵏT < M``

(a window's count deviates from its pair's mean by half the Allan variance of the pair, the pair's mean
from its own pair's likewise; measured on the Azure LLM traces 2023, code and conversation, within 10 %
of the plain within-minute IDC from 0.25 s to 20 s windows). ``Λ_T`` is taken gamma with that variance,
shape ``r = λT/(J − 1)``; an arrival falls where the rate is high, so the rate *next to an arrival* (on
one side of it) is gamma with shape ``r + ½`` (a mean ``λT + (J − 1)/2`` of arrivals on one side over
``T``, the clustering term the rest of the tail model uses). Poisson arrivals (``J = 1``) keep ``λ``.

**Prompts queued ahead.** Each prompt holds the prefill for ``d`` (its steps and tokens; in a backlog the
steps are full, so less than alone: ``j`` prompts take ``j·d = first + (j − 1)·drain``). At a local rate
``Λ`` with ``x = Λ·d < 1`` the prefill queue an arrival finds is geometric, ``P(n ≥ j) = xʲ``, the rate
read over ``(2j − 1)·d`` (the time the ``j`` prompts take and as long again for them to gather:
calibrated on ``bench/tail.py``'s gamma-renewal points at 30–50 % load, whose p99 TTFT ``j·d``
over-predicted by 16–27 %, and whose share of arrivals with a prompt ahead ``2j·d`` put a quarter too
low, the first prompt ahead being a matter of the last ``d``); where the local
rate exceeds the prefill's pace over a window ``T`` (``x > 1``: a burst), the queue grows through it and
an arrival in its middle finds ``(x − 1)·T/(2d)`` ahead. So ``P(n ≥ j)`` is the larger of
``E[min(x, 1)ʲ]`` and, over windows ``T`` from half a second to half a minute, ``P(x_T ≥ 1 + 2j·d/T)``;
both in closed form for the gamma rate (incomplete gamma functions).

**Prompts arriving behind.** Over the window ``T`` a request stays on its server, the number arriving
after it is Poisson at the local rate next to it: negative binomial with shape ``r + ½``.

Counts are returned over bins (:data:`EDGES`): the share with ``n`` in ``[EDGES[k], EDGES[k + 1])``,
the last open-ended, with the share of none first. Pure: times in ms, rates in requests per ms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "EDGES",
    "PLANNING_INTERVAL_MS",
    "REPRESENTATIVE",
    "WithinCurve",
    "ahead_sf",
    "behind_bins",
    "bins_from_sf",
    "within_interval",
]

FloatArray = npt.NDArray[np.float64]
#: ``idc(λ, window_ms)``: the (Allan) index of dispersion a replica's arrivals at rates λ show over a window.
IdcFn = Callable[[FloatArray, FloatArray], FloatArray]

#: The interval a planned rate is the mean of (the per-minute rates the forecast and the oracle plan on).
PLANNING_INTERVAL_MS = 60_000.0
#: The lower edges of the count bins (the last bin open-ended): exact up to six, then wider.
EDGES: FloatArray = np.array(
    [1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 96, 128, 192, 256], dtype=float
)
#: The count each bin stands for (its middle; the last one its lower edge).
REPRESENTATIVE: FloatArray = np.concatenate(((EDGES[:-1] + EDGES[1:] - 1.0) / 2.0, EDGES[-1:]))
#: The windows (ms) over which a burst may outpace the prefill (half a second to half a minute).
BURST_WINDOWS_MS: FloatArray = 1000.0 * np.array([0.5, 1.0, 2.0, 5.0, 10.0, 30.0])
#: Windows (ms) at which :class:`WithinCurve` tabulates ``J`` (log-spaced, 1 ms to the interval).
TABLE_POINTS = 64
#: At most this many octaves are summed into J (windows from 2^-12 of the interval up).
MAX_OCTAVES = 16
#: J − 1 below this is Poisson.
POISSON = 1e-6


def within_interval(idc: IdcFn, lam: FloatArray, window_ms: FloatArray, interval_ms: float) -> FloatArray:
    """``J(T)``: the IDC of counts over ``window_ms`` around the interval's mean rate, from the Allan IDC
    ``idc`` (see the module doc). ``lam`` and ``window_ms`` broadcast together."""
    lam_b, window = np.broadcast_arrays(np.asarray(lam, dtype=float), np.asarray(window_ms, dtype=float))
    total = np.zeros(window.shape)
    span = window.copy()
    for k in range(MAX_OCTAVES):
        inside = span < interval_ms * (1.0 - 1e-9)
        if not inside.any():
            break
        value = idc(lam_b.ravel(), span.ravel()).reshape(span.shape)
        total += np.where(inside, (value - 1.0) / 2.0**k, 0.0)
        span = span * 2.0
    out: FloatArray = 1.0 + 0.5 * np.maximum(total, 0.0)
    return out


@dataclass(frozen=True, slots=True)
class WithinCurve:
    """``J(T) − 1`` of a whole stream, tabulated over log-spaced windows up to the interval, read for a
    replica receiving ``λ`` of it: a random share of a stream keeps that share of the excess (``rate``,
    req/ms, the stream's; 0 when unknown: unthinned). Built once per model, read in every sizing."""

    log_windows: FloatArray
    excess: FloatArray
    rate: float

    @classmethod
    def of(cls, idc: Callable[[FloatArray], FloatArray], rate: float, interval_ms: float) -> WithinCurve:
        """From the stream's Allan IDC over windows in ms, ``idc(window_ms)``."""
        windows = np.geomspace(1.0, interval_ms * (1.0 - 1e-6), TABLE_POINTS)
        table = within_interval(lambda _, w: idc(w), np.zeros(1), windows, interval_ms)
        return cls(np.log(windows), table - 1.0, max(float(rate), 0.0))

    def __call__(self, lam: FloatArray, window_ms: FloatArray) -> FloatArray:
        excess = np.interp(np.log(np.maximum(window_ms, 1e-9)), self.log_windows, self.excess)
        if self.rate > 0:
            excess = np.minimum(np.asarray(lam, dtype=float) / self.rate, 1.0) * excess
        out: FloatArray = 1.0 + np.maximum(excess, 0.0)
        return out


def _gamma_rate(lam: FloatArray, window: FloatArray, j_idc: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``(shape, scale)`` of the local rate next to an arrival, in units of ``λ``: ``Λ/λ`` is gamma with
    ``shape = r + ½`` and ``scale = 1/r``, ``r = λT/(J − 1)`` (``r`` infinite for Poisson is capped)."""
    excess = np.maximum(j_idc - 1.0, POISSON)
    r = np.minimum(lam * window / excess, 1e9)
    return r + 0.5, 1.0 / r


def ahead_sf(lam: FloatArray, first: FloatArray, drain: FloatArray, within: IdcFn) -> FloatArray:
    """(G, B, E): ``P(n ≥ EDGES[e])``, the prompts an arrival finds queued for prefill ahead of it, at
    rates ``lam`` (G,) where a prompt holds the prefill for ``first`` (B,) ms alone and one more of a
    backlog for ``drain`` (B,) ms (a backlog fills every step's budget), so ``j`` of them for ``j·d =
    first + (j − 1)·drain`` (see the module doc). ``within(λ, T)`` is the within-interval IDC ``J``."""
    from scipy.special import gammainc, gammaincc, gammaln  # noqa: PLC0415  scipy: +0.3 s on `--help`

    g = np.asarray(lam, dtype=float)[:, None, None]
    j = EDGES[None, None, :]
    d = (
        np.asarray(first, dtype=float)[None, :, None]
        + (j - 1.0) * np.asarray(drain, dtype=float)[None, :, None]
    ) / j
    # The prefill's own pace, the rate read over (2j − 1)·d: E[min(x, 1)^j], x = Λ·d gamma.
    window = (2.0 * j - 1.0) * d
    shape, scale = _gamma_rate(g, window, within(g, window))
    theta = scale * g * d  # x = Λ·d ~ Gamma(shape, theta)
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        log_moment = j * np.log(theta) + gammaln(shape + j) - gammaln(shape)
        below = np.where(
            log_moment < 700.0, np.exp(np.minimum(log_moment, 700.0)) * gammainc(shape + j, 1.0 / theta), 0.0
        )
    paced = np.nan_to_num(below) + gammaincc(shape, 1.0 / theta)
    # A burst outpacing the prefill over a window T: an arrival in its middle finds (x − 1)·T/(2d) ahead.
    t = BURST_WINDOWS_MS[None, :]  # (1, W) against the rates (G, 1)
    s, sc = _gamma_rate(g[:, :, 0], t, within(g[:, :, 0], t))  # (G, W)
    excess = 2.0 * (j * d)[..., None] / t[:, None, None, :]  # (G, B, E, W)
    theta_t = (sc * g[:, :, 0])[:, None, None, :] * d[..., None]
    burst = gammaincc(s[:, None, None, :], (1.0 + excess) / theta_t).max(axis=-1)
    sf = np.clip(np.maximum(paced, burst), 0.0, 1.0)
    out: FloatArray = np.minimum.accumulate(sf, axis=-1)  # a count's survival never rises
    return out


def behind_bins(lam: FloatArray, window_ms: FloatArray, within: IdcFn) -> FloatArray:
    """(..., 1 + E): the shares of no arrival and of each count bin among the arrivals within
    ``window_ms`` after a request (``lam`` and ``window_ms`` broadcast; negative binomial, see the module
    doc)."""
    from scipy.special import betainc  # noqa: PLC0415  scipy: +0.3 s on `--help`

    lam_b, window = np.broadcast_arrays(np.asarray(lam, dtype=float), np.asarray(window_ms, dtype=float))
    shape, scale = _gamma_rate(lam_b, window, within(lam_b, window))
    # N | Λ Poisson(Λ·T), Λ/λ ~ Gamma(shape, scale): negative binomial, P(N ≤ m) = I_p(shape, m + 1).
    p = 1.0 / (1.0 + scale * lam_b * window)
    sf = 1.0 - betainc(shape[..., None], EDGES, p[..., None])  # P(N ≥ e) = 1 − P(N ≤ e − 1)
    return bins_from_sf(np.clip(sf, 0.0, 1.0))


def bins_from_sf(sf: FloatArray) -> FloatArray:
    """(..., 1 + E) bin shares from (..., E) survival values at :data:`EDGES` (none first)."""
    sf = np.minimum.accumulate(np.clip(sf, 0.0, 1.0), axis=-1)
    upper = np.concatenate((np.ones((*sf.shape[:-1], 1)), sf), axis=-1)
    lower = np.concatenate((sf, np.zeros((*sf.shape[:-1], 1))), axis=-1)
    out: FloatArray = upper - lower
    return out
