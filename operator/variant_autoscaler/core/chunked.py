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

``f`` is the Palm chance that another arrival came while a prompt's steps ran: a mean ``λ·T + (J(T) −
1)/2`` of them on one side of an arrival over a time ``T`` (``λ·T`` for Poisson; a bursty stream
clusters arrivals next to each other; ``J`` the IDC within the planning interval,
:mod:`variant_autoscaler.core.neighbours`). The number queued ahead is that module's: geometric at the
local rate next to the arrival, over the time those prompts take, or what a burst outpacing the prefill
has piled up (measured on the V1-like engine replaying the Azure traces: the conversation trace's 27 %,
7 %, 2 % of arrivals with at least one, two, three others not yet at their first token; the code
trace's clumps, where one arrival in thirty found ten or more). The other prompts are taken at
equal-mass points of the prompt lengths (of the sum of one, two, three of them; of more, a normal
approximation of their sum), the one under way length-biased (a prompt prefilled for longer is likelier
met). Over ``U`` and ``L`` the share over a target is integrated in closed form, the prompt's CDF being
piecewise linear (:class:`~variant_autoscaler.core.workload.TokenLengths`).

**The decode steps.** A request's decode steps carry the prompts of the requests that arrive after it
(first come, first served: those before it were prefilled before its first token). Over its ``k``
inter-token gaps at a batch ``b`` its mean ITL is ``α + β·b + δ·min(S, k·C)/k``, ``S`` the prompt tokens
of the requests arriving while it is on the server (negative binomial in number,
:mod:`~variant_autoscaler.core.neighbours`), ``C`` the budget beside the decodes. Requests with few
output tokens next to a burst of long prompts are what miss an ITL target: a step that carries a full
chunk of prompt lasts ``α + β·b + δ·C``.

Pure: times in ms, rates in requests per ms.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from variant_autoscaler.core.neighbours import EDGES, REPRESENTATIVE, ahead_sf, behind_bins, bins_from_sf
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.core.workload import TokenLengths

__all__ = ["ChunkedPrefill"]

FloatArray = npt.NDArray[np.float64]
#: ``idc(λ, window_ms)``: the index of dispersion a replica's arrivals at rates λ show over a window.
IdcFn = Callable[[FloatArray, FloatArray], FloatArray]

#: Points of the prompt a prefill in the step under way carries (equal mass).
UNDER_WAY_POINTS = 8
#: Points of the prompts queued ahead of an arrival, for each count bin of
#: :data:`~variant_autoscaler.core.neighbours.EDGES`: one prompt, two, three (equal mass of the sum of that
#: many prompts), then two points of a normal approximation of the sum for each wider bin.
QUEUED_POINTS = (4, 2, 2) + (2,) * (len(EDGES) - 3)
#: Points of the output lengths a request's decode steps are averaged over (equal mass).
OUTPUT_POINTS = 16
#: The standard normal quantiles of two equal-mass points (the quartiles' midpoints: ±0.6745).
_HALVES = np.array([-0.6744897501960817, 0.6744897501960817])
#: At most this share of arrivals find the step under way carrying another prompt.
UNDER_WAY_MAX = 0.95
#: The shares over a target are computed at up to this many batch sizes, interpolated between.
BATCH_GRID = 16
#: The prompts queued ahead are computed at up to this many batch sizes, interpolated between.
AHEAD_GRID = 6
#: The decode steps' shares over an ITL target are computed at up to this many batch sizes (exact up to
#: a batch of 64), interpolated between.
ITL_GRID = 64
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


def _grid_points(n: int, points: int) -> npt.NDArray[np.int_]:
    """Up to ``points`` batch indices of ``0..n − 1``, evenly spread, the ends included."""
    out: npt.NDArray[np.int_] = np.unique(np.round(np.linspace(0.0, n - 1.0, min(n, points))).astype(int))
    return out


def _batch_grid(n: int, points: int) -> tuple[npt.NDArray[np.int_], npt.NDArray[np.int_], FloatArray]:
    """:func:`_grid_points`, and for every index of ``0..n − 1`` the grid point at or below it and its
    fraction of the way to the next (linear interpolation)."""
    at = _grid_points(n, points)
    if len(at) == 1:
        return np.array([0, 0]), np.zeros(n, dtype=int), np.zeros(n)
    left = np.clip(np.searchsorted(at, np.arange(n), side="right") - 1, 0, len(at) - 2)
    width = np.maximum(at[left + 1] - at[left], 1)
    return at, left, np.clip((np.arange(n) - at[left]) / width, 0.0, 1.0)


class ChunkedPrefill:
    """The TTFT of an arrival beside ``b − 1`` decodes (b = 1..N) on one chunked-prefill server (see
    the module doc). Built by :class:`~variant_autoscaler.core.tail.TailModel`; what does not depend on
    the rate is kept for the last target asked (a sizing search asks one target often)."""

    __slots__ = (
        "_ahead_grid",
        "_caps",
        "_delta",
        "_drain",
        "_gap_weights",
        "_gaps",
        "_h_knots",
        "_itl_grid",
        "_itl_memo",
        "_knots",
        "_mean",
        "_memo",
        "_mix_memo",
        "_prompt_sd",
        "_slope",
        "_span",
        "_step",
        "_to_bins",
        "_weights",
        "queued",
        "under_way",
    )

    def __init__(
        self,
        parms: ServiceParms,
        max_batch: int,
        prompts: TokenLengths,
        budget: int,
        outputs: TokenLengths | None = None,
    ) -> None:
        b = np.arange(1.0, max_batch + 1.0)
        self._delta = parms.delta
        self._slope = parms.beta
        # A request's inter-token gaps (output tokens less one, at least one), at equal-mass points.
        gaps = mass_points((outputs or TokenLengths.fixed(2)).knots(), OUTPUT_POINTS)
        self._gaps = np.maximum(gaps - 1.0, 1.0)
        self._gap_weights = np.full(OUTPUT_POINTS, 1.0 / OUTPUT_POINTS)
        # The step under way beside b − 1 decodes, and the prompt tokens a step has room for beside them.
        self._step = parms.alpha + parms.beta * (b - 1.0)
        self._caps = np.maximum(float(budget) - (b - 1.0), 1.0)
        self._knots = prompts.knots()
        self._h_knots = sf_integral_knots(*self._knots)
        self._mean = prompts.mean
        # The prompt a step under way carries, and those queued ahead of an arrival: for one, two and
        # three of them, equal-mass points of the sum of that many prompts (from the under-way points);
        # for each wider count bin, two points of a normal approximation of the sum of its count.
        self.under_way = mass_points(self._knots, UNDER_WAY_POINTS)
        sums = [self.under_way]
        for _ in range(2):
            sums.append((sums[-1][:, None] + self.under_way[None, :]).ravel())
        sd = float(np.sqrt(prompts.variance))
        wide = [np.maximum(n * self._mean + np.sqrt(n) * sd * _HALVES, 0.0) for n in REPRESENTATIVE[3:]]
        self.queued = np.concatenate(
            [
                np.quantile(total, (np.arange(count) + 0.5) / count)
                for total, count in zip(sums, QUEUED_POINTS[:3], strict=True)
            ]
            + wide
        )
        self._prompt_sd = sd
        # What the rate does not change, computed once: how long each prompt point is prefilled for
        # (N, K), its length-biased weight, and the mean of that time (one prompt's hold on the prefill).
        steps, _, _ = self.chunks()
        busy = steps * self._step[:, None] + self._delta * self.under_way[None, :]
        self._weights = busy / np.maximum(busy.sum(axis=1, keepdims=True), 1e-12)
        self._span = busy.mean(axis=1)
        # One more prompt of a backlog: full steps, so its tokens at the step's pace per token.
        self._drain = self._mean * (self._step / self._caps + self._delta)
        # The queue ahead is computed at a few batch sizes and interpolated (the drain is linear in b), the
        # decode steps' shares at more (the step is linear in b, the share over a target is not).
        self._ahead_grid = _batch_grid(len(b), AHEAD_GRID)
        self._itl_grid = _batch_grid(len(b), ITL_GRID)
        # Each queued point's column to its count bin's (a bin's share is spread evenly over its points).
        bins = np.repeat(np.arange(1, len(QUEUED_POINTS) + 1), QUEUED_POINTS)
        self._to_bins = np.zeros((1 + len(bins), 1 + len(QUEUED_POINTS)))
        self._to_bins[0, 0] = 1.0
        self._to_bins[np.arange(1, 1 + len(bins)), bins] = 1.0 / np.repeat(QUEUED_POINTS, QUEUED_POINTS)
        self._mix_memo: tuple[bytes, tuple[FloatArray, FloatArray, FloatArray]] | None = None
        self._memo: tuple[float, FloatArray, FloatArray] | None = None
        self._itl_memo: tuple[float, FloatArray] | None = None

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

    def mix(self, lam: FloatArray, within: IdcFn) -> tuple[FloatArray, FloatArray, FloatArray]:
        """At rates ``lam`` (G,): the chance ``f`` (G, N) that the step under way prefills another
        prompt too, the weights (N, K) of the prompt points it then carries, and the shares (G, N, 1 + E)
        of the number of prompts queued ahead of an arrival, none first, then each count bin of
        :data:`~variant_autoscaler.core.neighbours.EDGES`. ``within(λ, T)`` is the IDC within the
        planning interval (:func:`~variant_autoscaler.core.neighbours.within_interval`)."""
        key = lam.tobytes()
        if self._mix_memo is not None and self._mix_memo[0] == key:  # asked again for the same rates
            return self._mix_memo[1]
        span = self._span
        excess = 0.5 * (within(lam[:, None], span[None, :]) - 1.0)
        f = np.clip(-np.expm1(-(lam[:, None] * span + excess)), 0.0, UNDER_WAY_MAX)
        at, left, frac = self._ahead_grid
        sf = ahead_sf(lam, span[at], self._drain[at], within)  # (G, B, E) on the grid, linear between
        full = sf[:, left, :] * (1.0 - frac)[None, :, None] + sf[:, left + 1, :] * frac[None, :, None]
        out = (f, self._weights, bins_from_sf(full))
        self._mix_memo = (key, out)
        return out

    def miss(self, lam: FloatArray, target: float, within: IdcFn) -> FloatArray:
        """(G, N): P(TTFT > target) at rates ``lam``, for an arrival beside ``b − 1`` decodes."""
        f, _, counts = self.mix(lam, within)
        decode, carrying = self._shares(target)  # (N, 1 + E) each: by the count queued ahead
        out: FloatArray = (1.0 - f) * np.sum(counts * decode, axis=2) + f * np.sum(counts * carrying, axis=2)
        return out

    def mean(self, lam: FloatArray, within: IdcFn) -> FloatArray:
        """(G, N): the mean TTFT at rates ``lam``, for an arrival beside ``b − 1`` decodes."""
        s, delta = self._step, self._delta
        f, weights, counts = self.mix(lam, within)
        _, chunk, left = self.chunks()
        carrying = np.sum(weights * (s[:, None] + delta * chunk), axis=1)
        rest = 0.5 * ((1.0 - f) * s[None, :] + f * carrying[None, :])  # half the step under way
        queued = counts[..., 1:] @ REPRESENTATIVE  # the mean number queued ahead
        ahead = f * np.sum(weights * left, axis=1)[None, :] + queued * self._mean  # prompt tokens first
        steps = np.ceil((ahead[:, :, None] + self.under_way[None, None, :]) / self._caps[None, :, None])
        out: FloatArray = rest + np.maximum(steps, 1.0).mean(axis=2) * s + delta * (ahead + self._mean)
        return out

    # -- the decode steps
    @property
    def gaps(self) -> FloatArray:
        """(K,) equal-mass points of a request's inter-token gaps (output tokens less one, at least 1)."""
        return self._gaps

    def itl_miss(
        self,
        lam: FloatArray,
        target: float,
        seen: FloatArray,
        life_ms: FloatArray,
        within: IdcFn,
    ) -> FloatArray:
        """(G,): the share of requests whose mean ITL exceeds ``target`` at rates ``lam`` (G,), a request
        in service seeing a batch of ``b`` with chance ``seen`` (G, N) (itself included), one with the
        :attr:`gaps` ``k`` staying on the server for ``life_ms`` (G, K) (see the module doc)."""
        behind = behind_bins(lam[:, None], life_ms, within)  # (G, K, 1 + E)
        over = self._itl_over(target)  # (B, K, 1 + E) at the grid's batch sizes
        grid = np.einsum("gke,bke,k->gb", behind, over, self._gap_weights)
        _, left, frac = self._itl_grid
        per_batch = grid[:, left] * (1.0 - frac) + grid[:, left + 1] * frac  # (G, N), linear between
        out: FloatArray = np.sum(seen * per_batch, axis=1)
        return out

    def _itl_over(self, target: float) -> FloatArray:
        """(B, K, 1 + E): for a batch of ``b`` (itself included; the grid's), ``k`` gaps and each count of
        prompts arriving behind it, P(α + β·b + δ·min(S, k·C)/k > target) with ``S`` their prompt tokens
        (one prompt's lengths exactly, more by a normal approximation of their sum)."""
        from scipy.special import ndtr  # noqa: PLC0415  scipy: +0.3 s on `--help`

        if self._itl_memo is not None and self._itl_memo[0] == target:
            return self._itl_memo[1]
        at = self._itl_grid[0]
        base = (self._step[at] + self._slope)[:, None, None]  # α + β·b at the grid's b
        room = (target - base) / max(self._delta, 1e-12)  # prompt tokens a step may add on average
        cap = np.maximum(self._caps[at] - 1.0, 1.0)[:, None, None]  # beside the b decodes
        x = self._gaps[None, :, None] * room  # prompt tokens over the k gaps at which the mean ITL is over
        n = np.concatenate(([0.0], REPRESENTATIVE))[None, None, :]
        values, levels = self._knots
        one = 1.0 - np.interp(x, values, levels, left=0.0, right=1.0)
        sd = np.sqrt(np.maximum(n, 1e-12)) * max(self._prompt_sd, 1e-9)
        many = ndtr((n * self._mean - x) / sd)
        tail = np.where(n == 0.0, 0.0, np.where(n == 1.0, one, many))
        out: FloatArray = np.where(room <= 0.0, 1.0, np.where(room >= cap, 0.0, tail))
        self._itl_memo = (target, out)
        return out

    def _shares(self, target: float) -> tuple[FloatArray, FloatArray]:
        """(N, 1 + E) shares over ``target`` with no prompt queued ahead (0) or each count bin of the
        prompts queued ahead (its mean share over its queued points): the step under way a decode step,
        and carrying a prompt (over its points, weighted as :meth:`mix` weighs them: neither depends on
        the rate). Computed at up to ``BATCH_GRID`` batch sizes and interpolated between them (the step
        and its room are linear in the batch), once per target."""
        if self._memo is not None and self._memo[0] == target:
            return self._memo[1], self._memo[2]
        n = len(self._step)
        at = _grid_points(n, BATCH_GRID)
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
        decode, carrying = (
            np.stack([np.interp(every, at, column) for column in g.T], axis=1) @ self._to_bins for g in grid
        )
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
