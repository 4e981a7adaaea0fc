"""The first token of a request on a server that prefills chunked (vLLM V1), for the tail model.

vLLM V1 runs one step at a time over the running decodes and as many prompt tokens as its token budget
(``--max-num-batched-tokens``) has room for beside them, first come first served; a prompt longer than
that room is prefilled over several steps. An arrival that finds ``b − 1`` requests decoding therefore
gets its first token after

* the rest of the step under way, ``U·S`` with ``U`` uniform on (0, 1): a plain decode step ``α + β·(b −
  1)``, or, when another request's prompt is being prefilled in it (chance ``f``), that step with one
  chunk of that prompt, whose rest ``R`` is then ahead of the arrival;
* its own prompt ``L``, after the prompts ``Q`` of the ``n`` requests queued for prefill ahead of it or
  beside it in the same step, prefilled over ``k = ⌈(R + Q + L) / C⌉`` steps, ``C`` the budget less the
  decodes, each ``α + β·(b − 1)`` plus the prompt tokens it computes:

  ``TTFT = U·S + k·(α + β·(b − 1)) + δ·(R + Q + L)``.

``f`` is the Palm chance that another arrival came while a prompt's steps ran, ``g`` that one came in
the same step: a mean ``λ·T + (IDC(T) − 1)/2`` of them on one side of an arrival over a time ``T``
(``λ·T`` for Poisson; a bursty stream clusters arrivals next to each other). The number queued is
geometric, ``P(n ≥ j) = gʲ``: each prompt ahead holds the budget longer, and so lets the next one
arrive while it waits (measured on the V1-like engine replaying the Azure trace: 27 %, 7 %, 2 % of
arrivals had at least one, two, three others not yet at their first token). The other prompts are
taken at equal-mass points of the prompt lengths (of the sum of ``n`` of them), the one under way
length-biased (a prompt prefilled for longer is likelier met). Over ``U`` and ``L`` the share over a
target is integrated in closed form, the prompt's CDF being piecewise linear
(:class:`~variant_autoscaler.core.workload.TokenLengths`). The IDC over a step is mostly below the
shortest window the burstiness is measured over: it is read there as
:meth:`~variant_autoscaler.core.workload.Burstiness.at` reads it (docs/tail-slo.md, "How well it agrees
with the engine").

Pure: times in ms, rates in requests per ms.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.core.workload import TokenLengths

__all__ = ["ChunkedPrefill"]

FloatArray = npt.NDArray[np.float64]
#: ``idc(λ, window_ms)``: the index of dispersion a replica's arrivals at rates λ show over a window.
IdcFn = Callable[[FloatArray, FloatArray], FloatArray]

#: Points of the prompt a prefill in the step under way carries (equal mass).
UNDER_WAY_POINTS = 8
#: Points of the prompts queued ahead of an arrival, by their number: one prompt, two, three (equal mass
#: of the sum of that many prompts). Three stands for three or more.
QUEUED_POINTS = (4, 2, 2)
#: At most this share of arrivals find the step under way carrying another prompt.
UNDER_WAY_MAX = 0.95
#: The shares over a target are computed at up to this many batch sizes, interpolated between.
BATCH_GRID = 16
#: A prompt's prefill is followed over at most this many steps (the rest counts as the last).
MAX_PREFILL_STEPS = 32


def mass_points(knots: tuple[FloatArray, FloatArray], count: int) -> FloatArray:
    """``count`` points of equal mass of a piecewise-linear CDF (the midpoints of its quantile bins)."""
    values, levels = knots
    out: FloatArray = np.interp((np.arange(count) + 0.5) / count, levels, values)
    return out


def sf_integral_knots(values: FloatArray, levels: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``(values, survival, H)`` at the knots of a piecewise-linear CDF: ``H(l) = ∫₀ˡ P(L > y) dy``."""
    sf = 1.0 - levels
    h = values[0] + np.concatenate(([0.0], np.cumsum(np.diff(values) * (sf[:-1] + sf[1:]) / 2.0)))
    return values, sf, h


def sf_integral(knots: tuple[FloatArray, FloatArray, FloatArray], x: FloatArray) -> FloatArray:
    """``H(x) = ∫₀ˣ P(L > y) dy`` (``x`` below the smallest length: ``x``, as P(L > y) = 1 there)."""
    values, sf, h = knots
    j = np.clip(np.searchsorted(values, x, side="right") - 1, 0, len(values) - 2)
    v0, v1 = values[j], values[j + 1]
    s0, s1 = sf[j], sf[j + 1]
    u = np.clip(x, v0, v1) - v0
    at = s0 + (s1 - s0) * u / np.maximum(v1 - v0, 1e-300)
    inside = h[j] + u * (s0 + at) / 2.0
    out: FloatArray = np.where(x <= values[0], x, np.where(x >= values[-1], h[-1], inside))
    return out


class ChunkedPrefill:
    """The TTFT of an arrival beside ``b − 1`` decodes (b = 1..N) on one chunked-prefill server (see
    the module doc). Built by :class:`~variant_autoscaler.core.tail.TailModel`; what does not depend on
    the rate is kept for the last target asked (a sizing search asks one target often)."""

    __slots__ = (
        "_caps",
        "_delta",
        "_h_knots",
        "_knots",
        "_mean",
        "_memo",
        "_one",
        "_span",
        "_step",
        "_weights",
        "queued",
        "under_way",
    )

    def __init__(self, parms: ServiceParms, max_batch: int, prompts: TokenLengths, budget: int) -> None:
        b = np.arange(1.0, max_batch + 1.0)
        self._delta = parms.delta
        # The step under way beside b − 1 decodes, and the prompt tokens a step has room for beside them.
        self._step = parms.alpha + parms.beta * (b - 1.0)
        self._caps = np.maximum(float(budget) - (b - 1.0), 1.0)
        self._knots = prompts.knots()
        self._h_knots = sf_integral_knots(*self._knots)
        self._mean = prompts.mean
        # The prompt a step under way carries, and those queued ahead of an arrival: for one, two and
        # three of them, equal-mass points of the sum of that many prompts (from the under-way points).
        self.under_way = mass_points(self._knots, UNDER_WAY_POINTS)
        sums = [self.under_way]
        for _ in QUEUED_POINTS[1:]:
            sums.append((sums[-1][:, None] + self.under_way[None, :]).ravel())
        self.queued = np.concatenate(
            [
                np.quantile(total, (np.arange(count) + 0.5) / count)
                for total, count in zip(sums, QUEUED_POINTS, strict=True)
            ]
        )
        # What the rate does not change, computed once: how long each prompt point is prefilled for
        # (N, K), its length-biased weight, the mean of that time, and one step carrying a prompt.
        steps, _, _ = self.chunks()
        busy = steps * self._step[:, None] + self._delta * self.under_way[None, :]
        self._weights = busy / np.maximum(busy.sum(axis=1, keepdims=True), 1e-12)
        self._span = busy.mean(axis=1)
        self._one = self._step + self._delta * np.minimum(self._mean, self._caps)
        self._memo: tuple[float, FloatArray, FloatArray] | None = None

    @property
    def step(self) -> FloatArray:
        """(N,) the decode step beside ``b − 1`` decodes (ms)."""
        return self._step

    @property
    def capacity(self) -> FloatArray:
        """(N,) the prompt tokens one step has room for beside ``b − 1`` decodes."""
        return self._caps

    def chunks(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        """For the prompt points a step under way may carry (N, K): the steps such a prompt is
        prefilled over (``⌈x / C⌉``), the tokens of one of its steps (their mean) and what is left of it
        after the step under way (on average over which of its steps that is)."""
        cap = self._caps[:, None]
        x = self.under_way[None, :]
        steps = np.maximum(np.ceil(x / cap), 1.0)
        return steps, x / steps, x * (steps - 1.0) / (2.0 * steps)

    def mix(self, lam: FloatArray, idc: IdcFn) -> tuple[FloatArray, FloatArray, FloatArray]:
        """At rates ``lam`` (G,): the chance ``f`` (G, N) that the step under way prefills another
        prompt too, the weights (N, K) of the prompt points it then carries, and the ratio ``g`` (G, N)
        of the geometric number of prompts queued ahead of an arrival (``P(n ≥ j) = gʲ``)."""
        span, one = self._span, self._one
        excess = 0.5 * (idc(lam[:, None], span[None, :]) - 1.0)
        f = np.clip(-np.expm1(-(lam[:, None] * span + excess)), 0.0, UNDER_WAY_MAX)
        near = 0.5 * (idc(lam[:, None], one[None, :]) - 1.0)
        g = np.clip(-np.expm1(-(lam[:, None] * one + 2.0 * near)), 0.0, UNDER_WAY_MAX)
        return f, self._weights, g

    def miss(self, lam: FloatArray, target: float, idc: IdcFn) -> FloatArray:
        """(G, N): P(TTFT > target) at rates ``lam``, for an arrival beside ``b − 1`` decodes."""
        f, _, g = self.mix(lam, idc)
        decode, carrying = self._shares(target)  # (N, 1 + J) each: by what is queued ahead
        queued = self._queued_weights(g)  # (G, N, 1 + J)
        out: FloatArray = (1.0 - f) * np.sum(queued * decode, axis=2) + f * np.sum(queued * carrying, axis=2)
        return out

    @staticmethod
    def _queued_weights(g: FloatArray) -> FloatArray:
        """(G, N, 1 + J): the weight of no prompt queued ahead and of each queued point, the number
        queued geometric with ratio ``g`` (three standing for three or more)."""
        counts = [1.0 - g, g * (1.0 - g), g * g * (1.0 - g), g * g * g]
        parts = [counts[0][..., None]]
        for c, points in zip(counts[1:], QUEUED_POINTS, strict=True):
            parts.append(np.repeat((c / points)[..., None], points, axis=-1))
        out: FloatArray = np.concatenate(parts, axis=-1)
        return out

    def mean(self, lam: FloatArray, idc: IdcFn) -> FloatArray:
        """(G, N): the mean TTFT at rates ``lam``, for an arrival beside ``b − 1`` decodes."""
        s, delta = self._step, self._delta
        f, weights, g = self.mix(lam, idc)
        _, chunk, left = self.chunks()
        carrying = np.sum(weights * (s[:, None] + delta * chunk), axis=1)
        rest = 0.5 * ((1.0 - f) * s[None, :] + f * carrying[None, :])  # half the step under way
        queued = g + g * g + g * g * g  # the mean number queued ahead (three for three or more)
        ahead = f * np.sum(weights * left, axis=1)[None, :] + queued * self._mean  # prompt tokens first
        steps = np.ceil((ahead[:, :, None] + self.under_way[None, None, :]) / self._caps[None, :, None])
        out: FloatArray = rest + np.maximum(steps, 1.0).mean(axis=2) * s + delta * (ahead + self._mean)
        return out

    def _shares(self, target: float) -> tuple[FloatArray, FloatArray]:
        """(N, 1 + J) shares over ``target`` with no prompt queued ahead (0) or the queued point j
        (1..J): the step under way a decode step, and carrying a prompt (over its points, weighted as
        :meth:`mix` weighs them: neither depends on the rate). Computed at up to ``BATCH_GRID`` batch
        sizes and interpolated between them (the step and its room are linear in the batch)."""
        if self._memo is not None and self._memo[0] == target:
            return self._memo[1], self._memo[2]
        n = len(self._step)
        at = np.unique(np.round(np.linspace(0.0, n - 1.0, min(n, BATCH_GRID))).astype(int))
        s, cap, delta = self._step[at], self._caps[at], self._delta
        _, chunk, rest = (a[at] for a in self.chunks())
        span = np.concatenate((s[:, None], s[:, None] + delta * chunk), axis=1)[:, :, None]  # (B, P, 1)
        ahead = (
            np.concatenate((np.zeros((len(at), 1)), rest), axis=1)[:, :, None]
            + np.concatenate(([0.0], self.queued))[None, None, :]
        )
        shares = self._over(target, s[:, None, None], cap[:, None, None], span, ahead)  # (B, 1 + K, 1 + J)
        grid = (shares[:, 0, :], np.einsum("bkj,bk->bj", shares[:, 1:, :], self._weights[at]))
        every = np.arange(float(n))
        decode, carrying = (np.stack([np.interp(every, at, column) for column in g.T], axis=1) for g in grid)
        self._memo = (target, decode, carrying)
        return decode, carrying

    def _over(
        self, target: float, step: FloatArray, cap: FloatArray, span: FloatArray, ahead: FloatArray
    ) -> FloatArray:
        """P(U·span + k·step + δ·(ahead + L) > target), ``U`` uniform on (0, 1) and ``k = ⌈(ahead +
        L)/cap⌉``, summed over the ranges of ``L`` with the same ``k``: on each, the uniform wait
        against the integral of the prompt's survival function."""
        delta = self._delta
        width = np.maximum(span, 1e-9)
        top = float(self._knots[0][-1])
        # The steps to the prompt's last token, last axis: from the first step that reaches past what is
        # ahead, as many as the longest prompt can need (the last one open-ended).
        count = int(min(MAX_PREFILL_STEPS, np.ceil(top / float(np.min(cap))) + 1.0))
        d = max(delta, 1e-12)
        step, cap, span, ahead, width = (a[..., None] for a in (step, cap, span, ahead, width))
        k = np.floor(ahead / cap) + 1.0 + np.arange(float(count))
        lo_l = (k - 1.0) * cap - ahead  # L in (lo_l, hi_l] takes k steps
        hi_l = np.where(np.arange(count) == count - 1, np.inf, k * cap - ahead)
        y_hi = (target - k * step - delta * ahead) / d  # L over this is over the target (U = 0)
        part = self._clipped(y_hi, y_hi - width / d, lo_l, hi_l)
        out: FloatArray = np.clip(np.sum(part, axis=-1) * (d / width[..., 0]), 0.0, 1.0)
        return out

    def _clipped(self, y1: FloatArray, y0: FloatArray, lo: FloatArray, hi: FloatArray) -> FloatArray:
        """``G(y1) − G(y0)``, ``G(y) = ∫_lo^y [P(L > clip(v, lo, hi)) − P(L > hi)] dv``: the share of
        prompts in (lo, hi] over ``v``, integrated."""
        values, levels = self._knots
        sf_lo = 1.0 - np.interp(lo, values, levels, left=0.0, right=1.0)
        sf_hi = 1.0 - np.interp(hi, values, levels, left=0.0, right=1.0)
        knots = self._h_knots

        def g(y: FloatArray) -> FloatArray:
            inside = sf_integral(knots, np.minimum(np.maximum(y, lo), hi))
            out: FloatArray = inside - sf_hi * np.minimum(y, hi) + sf_lo * np.minimum(y - lo, 0.0)
            return out

        return g(y1) - g(y0)
