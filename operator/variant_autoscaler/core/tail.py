"""Tail latency of one inference server, and sizing for attainment targets ("99 % of requests within 1 s").

WVA sizes replicas so that the *mean* TTFT and ITL meet the SLO; users state SLOs per request. This module
predicts the share of requests over each target and sizes for a budget on it. The model is the analyzer's
state-dependent chain (:mod:`variant_autoscaler.core.queueing`) with three corrections, each measured in
``bench/tail.py`` against the emulator's engine (see docs/tail-slo.md):

The inputs beyond the analyzer's (length distributions, burstiness) are in
:mod:`variant_autoscaler.core.workload`, re-exported here.

* **The length distribution, not only its mean.** An arrival that finds ``i < N`` requests in the system
  starts at once and its first token comes after ``prefill(L, i + 1) = γ + δ·L·(i + 1)`` with ``L`` its
  own prompt length; one that finds the batch full waits, then prefills at batch ``N``. The share over a
  TTFT target therefore mixes the chain's state probabilities with the *distribution* of prompt lengths
  (:class:`TokenLengths`): long prompts in large batches are what miss.
* **Service-time variability in the queue.** Beyond ``N`` the chain completes requests as a Poisson
  process at ``μ_N``; real requests of similar lengths leave far more regularly. The queue's geometric
  decay ``r`` is replaced by the large-deviation (Lundberg) decay of a queue whose departures have the
  variability of the service time at a full batch (``c_s²`` from the length distributions), so fixed
  lengths queue about half as much as exponential ones in heavy traffic (Kingman's ``(c_a² + c_s²)/2``).
* **Arrival burstiness.** ``c_a²`` is the index of dispersion of arrival counts (:class:`Burstiness`),
  taken at the time scale of one request's service. Below ``N`` the chain's ratios become the diffusion
  form ``log(λ/μ_b)·(λ + μ_b)/(λ·c_a² + μ_b)`` (the same chain for Poisson arrivals; the peakedness
  ``(1 + c_a²)/2`` of an infinite-server queue); the queue's decay uses ``c_a²`` too.

An arrival that waits waits an exponential time with the rate ``η = Λ_A(θ*)`` of the queue's decay (for
Poisson arrivals and exponential services, ``μ_N − λ``: the analyzer's own wait). The per-request mean ITL
is ``α + β·b`` with ``b`` the batch a request in service sees (size-biased), a slightly conservative
reading since a request averages its batch over its life. The queue is unbounded (the gateway holds
requests), unlike the analyzer's ``K = 11·N``. On a server that prefills chunked (vLLM V1) an arrival
that starts at once gets its first token as :mod:`variant_autoscaler.core.chunked` gives it: after the
rest of the step under way and the prompts ahead of it, over the steps its prompt needs.

Everything is pure: times in ms, rates in requests per second at the public surface (per ms inside).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from variant_autoscaler.core.analyzer import SLO, Load, Sizing, SizingOutcome
from variant_autoscaler.core.chunked import ChunkedPrefill
from variant_autoscaler.core.neighbours import PLANNING_INTERVAL_MS, WithinCurve
from variant_autoscaler.core.queueing import (
    EPSILON,
    QueueAnalyzer,
    RequestSize,
    ServiceParms,
)
from variant_autoscaler.core.tail_targets import TailTargets
from variant_autoscaler.core.tail_targets import checked_number as _number
from variant_autoscaler.core.workload import (
    DEFAULT_PREFILL_BUDGET,
    IDC_RANGE,
    Burstiness,
    RequestLengths,
    TokenLengths,
    burstiness_from_times,
    index_of_dispersion,
)
from variant_autoscaler.errors import InfeasibleError, ModelError

__all__ = [
    "Burstiness",
    "RequestLengths",
    "TailModel",
    "TailPrediction",
    "TailSize",
    "TailSizingRequest",
    "TailTargets",
    "TokenLengths",
    "burstiness_from_times",
    "clear_tail_memo",
    "index_of_dispersion",
    "size_tail_allocation",
    "size_tail_allocations",
]

FloatArray = npt.NDArray[np.float64]

#: The tail search stops refining its grid when the bracket is this narrow (relative); secant steps then
#: land closer.
_RATE_TOLERANCE = 2e-3
#: Points per grid of the search: one evaluation of the model costs about the same for 2 or 40 points.
_GRID = 40


# ---- the model -------------------------------------------------------------------------------------


class TailPrediction(NamedTuple):
    """Predicted behaviour of one replica at one rate: shares of requests over the TTFT and ITL targets,
    the probability an arrival waits for a slot, mean TTFT and ITL (ms) and mean batch occupancy ``rho``
    (the means over the rate regimes below capacity, see :class:`TailModel`)."""

    rate: float
    ttft_miss: float
    itl_miss: float
    p_wait: float
    ttft: float
    itl: float
    rho: float


class TailSize(NamedTuple):
    """The largest rate (req/s) one replica sustains within the targets, and the prediction there.
    ``binding`` names the constraint that sets it (``"TTFT"``, ``"ITL"``, ``"joint"``, ``"mean"``,
    ``"range"``)."""

    max_rate: float
    prediction: TailPrediction
    binding: str


#: The time a queue takes to build up to the waits of interest, in units of the mean wait / (1 − ρ):
#: the scale over which departures are compared with arrivals. Calibrated on bench/tail.py's points
#: (1 to 3 tried; 2-2.5 put the most within 20 %: docs/tail-slo.md, "Service-time variability").
_BUILD_UP = 2.0


def _lundberg(lam: FloatArray, mu: float, a: FloatArray | float, d: FloatArray | float) -> FloatArray:
    """θ* > 0 with ``Λ_A(θ) + Λ_D(−θ) = 0`` for gamma-renewal arrivals (rate λ, IDC ``a``) and departures
    (rate μ, IDC ``d``): ``λ(e^{aθ} − 1)/a + μ(e^{−dθ} − 1)/d = 0``. The queue length then decays like
    ``e^{−θ* m}`` (exact for M/M and M/D servers; Kingman's ``2(μ − λ)/(λa + μd)`` in heavy traffic)."""
    a_ = np.broadcast_to(np.asarray(a, dtype=float), lam.shape)
    d_ = np.maximum(np.broadcast_to(np.asarray(d, dtype=float), lam.shape), 1e-6)

    def g(th: FloatArray) -> FloatArray:
        return lam * np.expm1(a_ * th) / a_ + mu * np.expm1(-d_ * th) / d_  # type: ignore[no-any-return]

    # The root where a = d (exact: e^{aθ} = μ/λ), a close start otherwise.
    theta = np.log(mu / lam) * (2.0 / (a_ + d_))
    if np.all(a_ == d_):
        return theta  # type: ignore[no-any-return]
    # Convex in θ with g(0) = 0 and g'(0) = λ − μ < 0: Newton from a point where g > 0 converges
    # monotonically to the positive root.
    value = g(theta)
    for _ in range(64):
        low = value <= 0.0
        if not low.any():
            break
        theta = np.where(low, theta * 1.5, theta)
        value = g(theta)
    for _ in range(60):
        step = value / (lam * np.exp(a_ * theta) - mu * np.exp(-d_ * theta))
        theta = theta - step
        if np.all(np.abs(step) <= 1e-12 * theta):
            break
        value = g(theta)
    return theta  # type: ignore[no-any-return]


class _State(NamedTuple):
    """The model at a vector of G rates."""

    p_head: FloatArray  # (G, N) P(an arrival finds i = 0..N-1 requests in the system)
    p_wait: FloatArray  # (G,) P(it finds the batch full)
    eta: FloatArray  # (G,) the rate of its exponential wait then (1/ms)
    lam: FloatArray  # (G,) the rates (req/ms)


class TailModel:
    """One server (a model on an accelerator with batch ``max_batch_size``) under a request-length
    distribution and an arrival burstiness. Immutable; cheap to build.

    The burstiness a replica sees is the stream's thinned to its share (:meth:`Burstiness.split`): the
    IDC at one service time ``S`` widens the chain below ``N``, the IDC over the time a queue takes to
    build up sets how fast the queue decays. ``chunked_prefill``: the server prefills inside its steps
    (vLLM V1), ``prefill_budget`` tokens a step (``--max-num-batched-tokens``; core/chunked.py), rather
    than at the pace of the whole batch (WVA's accounting).
    """

    __slots__ = (
        "_bursts",
        "_chunked",
        "_cs2",
        "_idc_curve",
        "_in_knots",
        "_mu",
        "_pre0",
        "_pre1",
        "_within_curve",
        "chunked_prefill",
        "lengths",
        "max_batch_size",
        "parms",
        "rate_range",
        "service_time_ms",
    )

    def __init__(
        self,
        parms: ServiceParms,
        max_batch_size: int,
        lengths: RequestLengths,
        burstiness: Burstiness | None = None,
        *,
        kv_cache_tokens: int | None = None,
        chunked_prefill: bool = False,
        prefill_budget: int = DEFAULT_PREFILL_BUDGET,
    ) -> None:
        if not isinstance(parms, ServiceParms):
            raise ModelError(f"service parameters must be ServiceParms, got {type(parms).__name__}")
        for name in ("alpha", "beta", "gamma", "delta"):
            _number(name, getattr(parms, name))
        if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ModelError(f"maximum batch size must be an integer >= 1, got {max_batch_size!r}")
        if not isinstance(lengths, RequestLengths):
            raise ModelError(f"lengths must be RequestLengths, got {type(lengths).__name__}")
        n = max_batch_size
        l_in, l_out = lengths.input.mean, max(lengths.output.mean, 1.0)
        if kv_cache_tokens is not None:
            # A request holds its prompt and, on average over its life, half its output in the KV cache:
            # the cache caps how many run at once whatever the batch size says.
            fits = int(_number("KV cache tokens", kv_cache_tokens) // (l_in + l_out / 2.0 + 1.0))
            n = max(1, min(n, fits))
        self.parms, self.max_batch_size, self.lengths = parms, n, lengths
        self.chunked_prefill = bool(chunked_prefill)
        steps = l_out - 1.0
        # The prefill's fixed part: WVA's γ, or (chunked, vLLM V1) the step's own α.
        fixed = parms.alpha if chunked_prefill else parms.gamma
        a = (fixed if l_in > 0 else 0.0) + steps * parms.alpha
        s = parms.delta * l_in + steps * parms.beta
        if not a + s > 0:
            raise ModelError("the service time is zero for these parameters and lengths")
        b = np.arange(1.0, n + 1.0)
        self._mu = b / (a + s * b)  # μ_b, req/ms
        full = a + s * n  # mean service time at a full batch (ms)
        # A request's own prefill: δ·L·N of its service in WVA's accounting, δ·L once when chunked.
        own = parms.delta * (1.0 if chunked_prefill else n)
        var = own**2 * lengths.input.variance + (parms.alpha + parms.beta * n) ** 2 * lengths.output.variance
        # TTFT of an arrival that finds b − 1 others running (b = 1..N): pre0[b] + pre1[b]·L. WVA's
        # accounting prefills at batch b, γ + δ·L·b. A chunked prefill (vLLM V1) runs inside the steps
        # beside the b − 1 decodes: an arrival that starts at once is core/chunked.py's; one that waited
        # for a slot starts at a step boundary, half a step on average: 1.5·(α + β·(b − 1)) + δ·L.
        if chunked_prefill:
            self._pre0 = 1.5 * (parms.alpha + parms.beta * (b - 1.0))
            self._pre1 = np.full(n, parms.delta)
        else:
            self._pre0 = np.full(n, parms.gamma)
            self._pre1 = parms.delta * b
        self.service_time_ms = full
        self._cs2 = var / (full * full)
        self._bursts = burstiness or Burstiness()
        if not isinstance(self._bursts, Burstiness):
            raise ModelError(f"burstiness must be Burstiness, got {type(burstiness).__name__}")
        self._idc_curve = self._bursts.curve()
        self._within_curve: WithinCurve | None = None
        self._in_knots = lengths.input.knots()
        # A chunked prefill's first token, beside the decodes and other prompts (core/chunked.py).
        self._chunked = (
            ChunkedPrefill(parms, n, lengths.input, prefill_budget, lengths.output)
            if chunked_prefill
            else None
        )
        self.rate_range = (
            float(self._mu[0]) * EPSILON * 1000.0,
            float(self._mu[-1]) * (1 - EPSILON) * 1000.0,
        )

    @property
    def service_scv(self) -> float:
        """``c_s²``: the squared coefficient of variation of the service time at a full batch."""
        return self._cs2

    def arrival_idc(self, rate: float) -> float:
        """``c_a²``: the IDC a replica receiving ``rate`` req/s sees over one service time."""
        return float(self._idc(np.array([rate / 1000.0]), np.array([self.service_time_ms]))[0])

    # -- the chain
    def _idc(self, lam: FloatArray, window_ms: FloatArray) -> FloatArray:
        """The IDC of a replica's arrivals at rates ``lam`` (req/ms) over windows (ms): the stream's,
        thinned to the replica's share of it."""
        curve = self._idc_curve
        if curve is None:
            return np.ones_like(lam)
        idc = curve(window_ms * 1e-3)
        rate = self._bursts.rate
        if rate > 0:
            idc = 1.0 + np.minimum(lam * (1000.0 / rate), 1.0) * (idc - 1.0)
        out: FloatArray = np.clip(idc, IDC_RANGE[0], IDC_RANGE[1])
        return out

    def _within(self, lam: FloatArray, window_ms: FloatArray) -> FloatArray:
        """The IDC of a replica's arrivals over windows (ms) around the planned interval's mean rate
        (:class:`~variant_autoscaler.core.neighbours.WithinCurve`): what the chunked prefill's
        neighbours of an arrival see. Tabulated at the first call."""
        if self._within_curve is None:
            curve = self._idc_curve
            self._within_curve = WithinCurve.of(
                (lambda w: np.clip(curve(w * 1e-3), *IDC_RANGE)) if curve is not None else np.ones_like,
                self._bursts.rate / 1000.0,
                PLANNING_INTERVAL_MS,
            )
        return self._within_curve(lam, window_ms)

    def _state(self, lam: FloatArray) -> _State:
        return _State(*self._chain(lam, self._idc(lam, np.full(len(lam), self.service_time_ms))), lam)

    def _chain(self, lam: FloatArray, ca2: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        mu = self._mu
        mu_n = float(mu[-1])
        lam_c = lam[:, None]
        # Below N: the chain's log(λ/μ_b) in the diffusion form, whose spread matches the peakedness
        # 1 + β·(c_a² − 1) of an infinite-server queue (β = 1/2 for exponential services, 1 for fixed).
        beta = 1.0 / (1.0 + self._cs2)
        head_ca2 = np.maximum(1.0 + 2.0 * beta * (ca2 - 1.0), IDC_RANGE[0])[:, None]
        ratio = np.log(lam_c / mu) * ((lam_c + mu) / (lam_c * head_ca2 + mu))
        logw = np.concatenate((np.zeros((len(lam), 1)), np.cumsum(ratio, axis=1)), axis=1)  # 0..N
        w = np.exp(logw - logw.max(axis=1, keepdims=True))
        # P(the batch is full): beyond N the queue's mass decays at the Lundberg rate of these arrivals
        # against memoryless departures at μ_N (the chain's own, for Poisson arrivals).
        theta = _lundberg(lam, mu_n, ca2, 1.0)
        queue = w[:, -1] / -np.expm1(-theta)
        z = w[:, :-1].sum(axis=1) + queue
        # How long a waiting arrival waits: departures are as regular as the service times, and arrivals as
        # bursty, as they are over the time the queue takes to build up to such waits.
        a, d = self._queue_dispersion(lam, ca2, mu_n)
        th = _lundberg(lam, mu_n, a, d)
        eta = lam * np.expm1(th * a) / a
        return w[:, :-1] / z[:, None], queue / z, eta

    def _queue_dispersion(
        self, lam: FloatArray, ca2: FloatArray, mu_n: float
    ) -> tuple[FloatArray, FloatArray]:
        """``(c_a², c_d²)`` over the build-up time ``τ = _BUILD_UP · E[W | W > 0] / (1 − ρ)``: the
        arrivals' IDC at that window, and the departures', which look Poisson over short times and as
        regular as the service times over long ones, ``c_d² = c_s² + (1 − c_s²)·e^{−τ/S}``. A fixed point,
        found on Kingman's heavy-traffic wait by damped iteration in log τ (cheap: no root finding)."""
        rho = lam / mu_n
        cs2, service = self._cs2, self.service_time_ms
        scale = _BUILD_UP / (2.0 * lam * (mu_n - lam) * (1.0 - rho))
        tau = np.full(len(lam), service)
        for _ in range(6):
            a = self._idc(lam, tau)
            d = cs2 + (1.0 - cs2) * np.exp(-tau / service)
            # Kingman's E[W | W > 0] = (λ c_a² + μ c_d²) / (2 λ (μ − λ)); halfway in log τ (damped).
            tau = np.sqrt(tau * (lam * a + mu_n * d) * scale)
        return self._idc(lam, tau), cs2 + (1.0 - cs2) * np.exp(-tau / service)

    # -- shares over targets
    def _prefill_sf(self, limit: FloatArray) -> FloatArray:
        """P(prompt > limit) for an array of token limits."""
        values, levels = self._in_knots
        return 1.0 - np.interp(limit, values, levels, left=0.0, right=1.0)

    def _ttft_miss(self, state: _State, target: float) -> FloatArray:
        if target <= 0:
            return np.zeros(len(state.p_wait))
        if self._chunked is not None:
            head: FloatArray = np.sum(
                state.p_head * self._chunked.miss(state.lam, target, self._within), axis=1
            )
        else:
            c0, c1 = self._pre0, self._pre1
            with np.errstate(divide="ignore", invalid="ignore"):
                limit = np.where(c1 > 0, (target - c0) / c1, np.where(target >= c0, np.inf, -np.inf))
            head = state.p_head @ self._prefill_sf(limit)  # starts at once, beside the i others
        return head + state.p_wait * self._queued_miss(state.eta, target)

    def _queued_miss(self, eta: FloatArray, target: float) -> FloatArray:
        """P(W + prefill(L, N) > target) with W ~ Exp(η): the prefill's piecewise-uniform segments
        integrated in closed form."""
        values, levels = self._in_knots
        x = self._pre0[-1] + self._pre1[-1] * values  # prefill at a full batch, at the knots
        mass = np.diff(levels)
        lo, hi = x[:-1], x[1:]
        over = np.sum(mass * np.clip((hi - target) / (hi - lo), 0.0, 1.0))  # P(prefill > target)
        upper = np.minimum(hi, target)
        width = np.maximum(upper - lo, 0.0)
        e = eta[:, None]
        y = e * width
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            avg = np.where(y > 1e-12, -np.expm1(-y) / y, 1.0)  # mean of e^{-η(upper - u)} on the segment
            part = mass * (width / (hi - lo)) * np.exp(-e * (target - upper)) * avg
        return over + np.sum(np.where(lo < target, part, 0.0), axis=1)  # type: ignore[no-any-return]

    def _batch_seen(self, state: _State) -> FloatArray:
        """Per rate, P(a request in service sees a batch of b), b = 1..N: the batch distribution,
        size-biased."""
        n = self.max_batch_size
        batch = np.concatenate((state.p_head[:, 1:], state.p_wait[:, None]), axis=1)  # b = 1..N
        weighted = batch * np.arange(1.0, n + 1.0)
        return weighted / weighted.sum(axis=1, keepdims=True)  # type: ignore[no-any-return]

    def _itl_scale(self, lam: FloatArray) -> FloatArray:
        """How much longer the decode steps are than ``α + β·b``: with chunked prefill the steps also
        carry the new requests' prompts, a share ``λ·δ·E[L]`` of the server's time."""
        if not self.chunked_prefill:
            return np.ones_like(lam)
        busy = lam * self.parms.delta * self.lengths.input.mean
        return 1.0 / (1.0 - np.minimum(busy, 0.95))

    def _itl_miss(self, state: _State, target: float) -> FloatArray:
        if target <= 0:
            return np.zeros(len(state.p_wait))
        if self._chunked is not None:
            # A request stays for its TTFT and its gaps; prompts arriving meanwhile ride its steps.
            life = (
                self._ttft_mean(state)[:, None] + self._chunked.gaps[None, :] * self._itl_mean(state)[:, None]
            )
            seen = self._batch_seen(state)
            return self._chunked.itl_miss(state.lam, target, seen, life, self._within)
        p = self.parms
        itl = (p.alpha + p.beta * np.arange(1.0, self.max_batch_size + 1.0))[None, :]
        over = itl * self._itl_scale(state.lam)[:, None] > target * (1.0 + 1e-9)
        return np.sum(self._batch_seen(state) * over, axis=1)  # type: ignore[no-any-return]

    def _check_rate(self, rate: float) -> float:
        r = _number("request rate", rate)
        if not 0.0 < r <= self.rate_range[1]:
            raise ModelError(
                f"rate={r:g} req/s is outside the model's range (0, {self.rate_range[1]:.4g}] req/s"
            )
        return r

    def predict(self, rate: float, targets: TailTargets | None = None) -> TailPrediction:
        """The prediction at ``rate`` req/s (shares over ``targets``' TTFT and ITL, 0 without them)."""
        r = self._check_rate(rate)
        return self._predict(np.array([r / 1000.0]), targets or TailTargets())[0]

    def _ttft_mean(self, state: _State) -> FloatArray:
        l_in = self.lengths.input.mean
        prefill = (self._pre0 if l_in > 0 else 0.0) + self._pre1 * l_in
        head = state.p_head @ prefill
        if self._chunked is not None and l_in > 0:
            head = np.sum(state.p_head * self._chunked.mean(state.lam, self._within), axis=1)
        out: FloatArray = head + state.p_wait * (1.0 / state.eta + prefill[-1])
        return out

    def _itl_mean(self, state: _State) -> FloatArray:
        p = self.parms
        batch = np.arange(1.0, self.max_batch_size + 1.0)
        out: FloatArray = (self._batch_seen(state) @ (p.alpha + p.beta * batch)) * self._itl_scale(state.lam)
        return out

    def _predict(self, lam: FloatArray, targets: TailTargets) -> list[TailPrediction]:
        state = self._state(lam)
        n = self.max_batch_size
        batch = np.arange(1.0, n + 1.0)
        ttft, itl = self._ttft_mean(state), self._itl_mean(state)
        rho = (state.p_head[:, 1:] @ batch[:-1] + state.p_wait * n) / n
        columns = (
            (lam * 1000.0).tolist(),
            self._ttft_miss(state, targets.ttft).tolist(),
            self._itl_miss(state, targets.itl).tolist(),
            state.p_wait.tolist(),
            ttft.tolist(),
            itl.tolist(),
            rho.tolist(),
        )
        return [TailPrediction(*row) for row in zip(*columns, strict=True)]

    def ttft_quantile(self, rate: float, level: float) -> float:
        """The ``level`` quantile (0..1) of TTFT (ms) at ``rate`` req/s."""
        state = self._state(np.array([self._check_rate(rate) / 1000.0]))
        top = float(self._pre0[-1] + self._pre1[-1] * self.lengths.input.values[-1])
        return self._quantile(lambda t: float(self._ttft_miss(state, t)[0]), 1.0 - self._level(level), top)

    @staticmethod
    def _quantile(share: Callable[[float], float], miss: float, top: float) -> float:
        """The smallest target whose ``share`` over it is at most ``miss`` (bisection)."""
        lo, hi = 0.0, max(top, 1.0)
        while share(hi) > miss:
            lo, hi = hi, hi * 2.0
        while hi - lo > 1e-6 * hi:
            mid = 0.5 * (lo + hi)
            if share(mid) > miss:
                lo = mid
            else:
                hi = mid
        return hi

    def itl_quantile(self, rate: float, level: float) -> float:
        """The ``level`` quantile (0..1) of the per-request mean ITL (ms) at ``rate`` req/s."""
        lvl = self._level(level)
        state = self._state(np.array([self._check_rate(rate) / 1000.0]))
        if self._chunked is not None:
            top = float(self._itl_mean(state)[0]) + self.parms.delta * float(self._chunked.capacity[0])
            return self._quantile(lambda t: float(self._itl_miss(state, t)[0]), 1.0 - lvl, top)
        seen = self._batch_seen(state)[0]
        over = 1.0 - np.cumsum(seen)  # P(batch > b), b = 1..N
        b = int(np.searchsorted(-over, -(1.0 - lvl)))  # the first b with P(batch > b) <= 1 - level
        scale = float(self._itl_scale(state.lam)[0])
        return float(self.parms.alpha + self.parms.beta * (b + 1)) * scale

    @staticmethod
    def _level(level: float) -> float:
        lvl = _number("level", level)
        if not 0.0 < lvl < 1.0:
            raise ModelError(f"a quantile level must be in (0, 1), got {lvl:g}")
        return lvl

    # -- sizing
    def _shares(self, lam: FloatArray, targets: TailTargets) -> tuple[FloatArray, FloatArray]:
        state = self._state(lam)
        zeros = np.zeros(len(lam))
        t = self._ttft_miss(state, targets.ttft) if targets._ttft_bounded else zeros
        i = self._itl_miss(state, targets.itl) if targets._itl_bounded else zeros
        return t, i

    @staticmethod
    def _ratios(t: FloatArray, i: FloatArray, targets: TailTargets) -> dict[str, FloatArray]:
        """Each bounded share over its budget (1 = at the budget)."""
        out: dict[str, FloatArray] = {}
        if targets._ttft_bounded and targets.ttft_miss > 0:
            out["TTFT"] = t / targets.ttft_miss
        if targets._itl_bounded and targets.itl_miss > 0:
            out["ITL"] = i / targets.itl_miss
        if targets.joint_miss > 0:
            out["joint"] = (t + i) / targets.joint_miss
        return out

    def _excess(self, lam: FloatArray, targets: TailTargets) -> FloatArray:
        ratios = self._ratios(*self._shares(lam, targets), targets)
        return np.max(np.stack(list(ratios.values())), axis=0)  # type: ignore[no-any-return]

    def max_rate(self, targets: TailTargets, tps: float = 0.0) -> TailSize:
        """The largest rate (req/s) meeting every target: the tail ones here, the mean ones (and a TPS
        target) by the analyzer with WVA's rules. :class:`InfeasibleError` when none does."""
        if not isinstance(targets, TailTargets):
            raise ModelError(f"targets must be TailTargets, got {type(targets).__name__}")
        lam_lo, lam_hi = self.rate_range[0] / 1000.0, self.rate_range[1] / 1000.0
        best, binding = lam_hi, "range"
        if targets.is_tail:
            found = self._search(targets, lam_lo, lam_hi)
            if isinstance(found, str):
                raise InfeasibleError(found)
            if found is not None:
                best, binding = found, ""
        mean = targets.mean_targets(tps)
        if mean.ttft > 0 or mean.itl > 0 or mean.tps > 0:
            l_in, l_out = self.lengths.input.mean, max(self.lengths.output.mean, 1.0)
            analyzer = QueueAnalyzer(self.max_batch_size, None, self.parms, RequestSize(l_in, l_out))
            rate = analyzer.size(mean).max_rate / 1000.0
            if rate < best:
                best, binding = rate, "mean"
        prediction = self._predict(np.array([best]), targets)[0]
        if not binding:  # the tail constraint closest to its budget there
            ratios = self._ratios(np.array([prediction.ttft_miss]), np.array([prediction.itl_miss]), targets)
            binding = max(ratios, key=lambda name: float(ratios[name][0]))
        return TailSize(best * 1000.0, prediction, binding)

    def _search(self, targets: TailTargets, lam_lo: float, lam_hi: float) -> float | str | None:
        """The largest λ in [lam_lo, lam_hi] with excess(λ) <= 1 (the shares grow with λ), None when the
        top of the range is within, or why even the bottom is not. A grid over the range, then finer
        grids in the bracket (one vectorised evaluation each: the cost of one evaluation is mostly
        per call, not per point, so wide grids and few calls) until it is :data:`_RATE_TOLERANCE` wide
        or two refinements were made, then a secant step on log(excess) vs log(λ) inside the bracket (the
        shares are smooth in λ: the step lands within about 1e-5 of the root)."""
        grid = np.linspace(lam_lo, lam_hi, _GRID)
        ex = self._excess(grid, targets)
        if ex[0] > 1.0:
            return self._unreachable(targets)
        if ex[-1] <= 1.0:
            return None
        lo = hi = f_lo = f_hi = 0.0
        for _ in range(2):
            k = int(np.argmax(ex > 1.0))  # >= 1: the first point is within
            lo, hi, f_lo, f_hi = float(grid[k - 1]), float(grid[k]), float(ex[k - 1]), float(ex[k])
            if hi - lo <= _RATE_TOLERANCE * hi:
                break
            inner = np.linspace(lo, hi, _GRID)[1:-1]
            grid = np.concatenate(([lo], inner, [hi]))
            ex = np.concatenate(([f_lo], self._excess(inner, targets), [f_hi]))
        for _ in range(1 if hi - lo <= _RATE_TOLERANCE * hi else 2):
            if not 0 < f_lo < 1.0 < f_hi:
                break
            # A secant step on log(excess) vs log(λ), kept inside the bracket, which it then narrows.
            t = -math.log(f_lo) / (math.log(f_hi) - math.log(f_lo))
            lam = math.exp(math.log(lo) + t * (math.log(hi) - math.log(lo)))
            f = float(self._excess(np.array([lam]), targets)[0])
            if f <= 1.0:
                lo, f_lo = lam, f
            else:
                hi, f_hi = lam, f
        return lo

    def _unreachable(self, targets: TailTargets) -> str:
        pred = self.predict(self.rate_range[0], targets)
        parts = []
        if targets._ttft_bounded:
            parts.append(f"{100 * pred.ttft_miss:.3g} % over TTFT {targets.ttft:g} ms")
        if targets._itl_bounded:
            parts.append(f"{100 * pred.itl_miss:.3g} % over ITL {targets.itl:g} ms")
        budget = ", ".join(
            f"{label} {100 * share:g} %"
            for label, share in (
                ("TTFT", targets.ttft_miss),
                ("ITL", targets.itl_miss),
                ("either", targets.joint_miss),
            )
            if share > 0
        )
        return f"tail targets unreachable: {' and '.join(parts)} at the lowest rate (allowed: {budget})"


# ---- sizing, shaped like the analyzer's ---------------------------------------------------------


def size_tail_allocation(
    *,
    accelerator: str,
    unit_cost: float,
    acc_count: int,
    parms: ServiceParms,
    max_batch_size: int,
    load: Load,
    slo: SLO,
    lengths: RequestLengths | None = None,
    burstiness: Burstiness | None = None,
    min_replicas: int = 1,
    kv_cache_tokens: int | None = None,
    chunked_prefill: bool = False,
    prefill_budget: int = DEFAULT_PREFILL_BUDGET,
) -> Sizing:
    """:func:`~variant_autoscaler.core.analyzer.size_allocation` for an SLO with percentile or attainment
    targets: the replicas, cost and rate per replica such that the predicted share of requests over each
    target stays within its budget at the load's arrival rate (req/min, as WVA).

    ``lengths`` defaults to exponential lengths with the load's means; ``burstiness`` to Poisson;
    ``chunked_prefill`` says how the server prefills and ``prefill_budget`` how many tokens one of its
    steps holds (see :class:`TailModel`). The
    returned :class:`Sizing` carries the *mean* TTFT and ITL the model predicts per replica (as the
    analyzer's does); :class:`TailModel` gives the shares and quantiles. An SLO without tail targets is
    sized by the mean model here too (WVA's meaning), so the function is a drop-in for every class.
    Raises :class:`InfeasibleError` / :class:`ModelError` as the analyzer does.
    """
    outcome = size_tail_allocations(
        [
            TailSizingRequest(
                accelerator, unit_cost, acc_count, parms, max_batch_size, load, slo, min_replicas,
                lengths, burstiness, kv_cache_tokens, chunked_prefill, prefill_budget,
            )
        ]
    )[0]  # fmt: skip
    if isinstance(outcome, InfeasibleError | ModelError):
        raise outcome
    return outcome


#: How many (server, workload, targets) sizings :func:`size_tail_allocation` remembers.
TAIL_MEMO_LIMIT = 4096
_TailKey = tuple[
    ServiceParms, int, RequestLengths, Burstiness | None, int | None, TailTargets, float, bool, int
]
_TAIL_MEMO: OrderedDict[_TailKey, tuple[TailModel, TailSize] | InfeasibleError | ModelError] = OrderedDict()


def clear_tail_memo() -> None:
    """Forget the sizings :func:`size_tail_allocation` remembers (benchmarks use it)."""
    _TAIL_MEMO.clear()


def _sized(key: _TailKey) -> tuple[TailModel, TailSize]:
    """The model and its largest rate for ``(parms, max batch, lengths, burstiness, KV cache, targets,
    tps, chunked prefill, prefill budget)``, remembered (the search is the costly part, and a cycle
    whose traffic did not change asks the same again: the planner rounds its inputs so that it does, see
    :meth:`~variant_autoscaler.core.workload.Workload.rounded`)."""
    parms, max_batch, lengths, burstiness, kv_cache_tokens, targets, tps, chunked, budget = key
    try:
        known = _TAIL_MEMO.get(key)
        hashable = True
    except TypeError:  # an unhashable input (a list where a tuple belongs): size it, do not remember
        known, hashable = None, False
    if known is None:
        try:
            model = TailModel(
                parms,
                max_batch,
                lengths,
                burstiness,
                kv_cache_tokens=kv_cache_tokens,
                chunked_prefill=chunked,
                prefill_budget=budget,
            )
            known = (model, model.max_rate(targets, tps=tps))
        except (InfeasibleError, ModelError) as exc:
            known = exc
        if hashable:
            _TAIL_MEMO[key] = known
            while len(_TAIL_MEMO) > TAIL_MEMO_LIMIT:
                _TAIL_MEMO.popitem(last=False)
    else:
        _TAIL_MEMO.move_to_end(key)
    if isinstance(known, InfeasibleError | ModelError):
        raise type(known)(*known.args)
    return known


@dataclass(frozen=True, slots=True)
class TailSizingRequest:
    """The arguments of one :func:`size_tail_allocation` call: a
    :class:`~variant_autoscaler.core.analyzer.SizingRequest` plus what the tail model reads."""

    accelerator: str
    unit_cost: float
    acc_count: int
    parms: ServiceParms
    max_batch_size: int
    load: Load
    slo: SLO
    min_replicas: int = 1
    lengths: RequestLengths | None = None
    burstiness: Burstiness | None = None
    kv_cache_tokens: int | None = None
    chunked_prefill: bool = False
    prefill_budget: int = DEFAULT_PREFILL_BUDGET


class _Pending(NamedTuple):
    """A request waiting for its server's sizing: its place, the load (req/s) and what it costs."""

    at: int
    request: TailSizingRequest
    total: float
    per_replica_cost: float


def _prepare(req: TailSizingRequest) -> Sizing | tuple[_TailKey, float, float]:
    """Check a request: the trivial sizing of no load, or its server's key, its load (req/s) and the
    cost of one replica (raises ModelError on bad input)."""
    unit = _number("unit cost", req.unit_cost)
    if isinstance(req.acc_count, bool) or not isinstance(req.acc_count, int):
        raise ModelError(f"accelerator count must be an integer, got {req.acc_count!r}")
    low = req.min_replicas
    if isinstance(low, bool) or not isinstance(low, int) or low < 0:
        raise ModelError(f"minimum replicas must be an integer >= 0, got {low!r}")
    load, parms = req.load, req.parms
    arrival = _number("arrival rate", load.arrival_rate)
    per_replica_cost = unit * max(req.acc_count, 1)
    if arrival == 0.0 or load.avg_output_tokens == 0.0:
        if low == 0:
            return Sizing("", 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0)
        itl = parms.alpha + parms.beta
        return Sizing(
            req.accelerator, low, req.max_batch_size, per_replica_cost * low, itl,
            parms.gamma + parms.delta, 0.0, 0.0,
        )  # fmt: skip
    lengths = req.lengths or RequestLengths.from_means(load.avg_input_tokens, load.avg_output_tokens)
    slo = req.slo
    targets = TailTargets.from_slo(slo)
    key: _TailKey = (
        parms,
        req.max_batch_size,
        lengths,
        req.burstiness,
        req.kv_cache_tokens,
        targets,
        slo.tps,
        req.chunked_prefill,
        req.prefill_budget if req.chunked_prefill else DEFAULT_PREFILL_BUDGET,
    )
    total = arrival / 60.0 if slo.tps == 0 else slo.tps / max(lengths.output.mean, 1.0)
    return key, total, per_replica_cost


def size_tail_allocations(requests: Sequence[TailSizingRequest]) -> list[SizingOutcome]:
    """:func:`size_tail_allocation` for every request, in order: each entry the :class:`Sizing`, or the
    :class:`InfeasibleError` / :class:`ModelError` that call raises (returned, not raised), as
    :func:`~variant_autoscaler.core.analyzer.size_allocations` answers the candidate builder.

    Requests of one server (model, batch, workload, targets) share its search (remembered across calls,
    :data:`TAIL_MEMO_LIMIT`) and one evaluation of the model at all their rates per replica, so a plan
    costs one search and one evaluation per distinct server, however many variants share it."""
    out: list[SizingOutcome | None] = [None] * len(requests)
    groups: dict[_TailKey, list[_Pending]] = {}
    loose: list[_Pending] = []  # unhashable inputs (a list where a tuple belongs): each on its own
    for i, req in enumerate(requests):
        try:
            prepared = _prepare(req)
        except ModelError as exc:
            out[i] = exc
            continue
        if isinstance(prepared, Sizing):
            out[i] = prepared
            continue
        key, total, cost = prepared
        try:
            groups.setdefault(key, []).append(_Pending(i, req, total, cost))
        except TypeError:
            loose.append(_Pending(i, req, total, cost))
    for key, members in groups.items():
        _size_group(key, members, out)
    for member in loose:
        _size_group(None, [member], out)
    return [o for o in out if o is not None]


def _size_group(key: _TailKey | None, members: Sequence[_Pending], out: list[SizingOutcome | None]) -> None:
    """The sizings of the requests of one server (see :func:`size_tail_allocations`), into ``out``."""
    try:
        model, size = _sized(key) if key is not None else _sized_once(members[0].request)
    except (InfeasibleError, ModelError) as exc:
        for m in members:
            out[m.at] = type(exc)(*exc.args)
        return
    rate_star = size.prediction.rate  # no blocking: the throughput is the arrival rate
    targets = TailTargets.from_slo(members[0].request.slo)
    placed: list[tuple[_Pending, int, float]] = []
    for m in members:
        needed = m.total / rate_star
        if not needed <= 1_000_000:
            out[m.at] = InfeasibleError(f"the load of {m.total:.4g} req/s needs {needed:.3g} replicas")
            continue
        replicas = max(math.ceil(needed), m.request.min_replicas, 1)
        placed.append((m, replicas, model._check_rate(min(m.total / replicas, model.rate_range[1]))))
    if not placed:
        return
    rates = np.array(sorted({r for _, _, r in placed}))
    at = dict(zip(rates.tolist(), model._predict(rates / 1000.0, targets), strict=True))
    for m, replicas, rate in placed:
        prediction = at[rate]
        out[m.at] = Sizing(
            accelerator=m.request.accelerator,
            replicas=replicas,
            max_batch=m.request.max_batch_size,
            cost=m.per_replica_cost * replicas,
            itl=prediction.itl,
            ttft=prediction.ttft,
            rho=prediction.rho,
            max_rate_per_replica=rate_star,
        )


def _sized_once(req: TailSizingRequest) -> tuple[TailModel, TailSize]:
    """A server whose inputs cannot be remembered (unhashable): sized as given."""
    lengths = req.lengths or RequestLengths.from_means(req.load.avg_input_tokens, req.load.avg_output_tokens)
    model = TailModel(
        req.parms, req.max_batch_size, lengths, req.burstiness, kv_cache_tokens=req.kv_cache_tokens
    )
    return model, model.max_rate(TailTargets.from_slo(req.slo), tps=req.slo.tps)
