"""Fit α β γ δ to the operating points of a designed sweep (``variant-autoscaler profile``).

Each :class:`SweepPoint` is one phase of the sweep: a fixed number of requests kept in flight with one
prompt length, measured at the server (mean ITL, mean prefill time, time-average running batch, how
much it moved) and at the client (mean end-to-end latency). The two lines are fitted with the robust
relative-error fit of :mod:`variant_autoscaler.core.linefit`, with the regressors of the online
estimator (:func:`~variant_autoscaler.core.estimator.decode_batch`,
:func:`~variant_autoscaler.core.estimator.admission_batch`): within a phase the batch is capped by the
phase's concurrency, or by the server's maximum batch when that is lower.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from variant_autoscaler.core.estimator import admission_batch, decode_batch
from variant_autoscaler.core.linefit import LineFit, Point, fit_line
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.errors import ModelError

__all__ = ["SweepFit", "SweepPoint", "fit_sweep"]

_ROUNDS = 4  # decode regressors depend on α/β: refit until they settle (two rounds already do)


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One phase of a sweep, as measured (times in ms; ``None`` where the phase had none)."""

    concurrency: int
    prompt_tokens: float
    running: float
    dispersion: float
    itl_ms: float | None
    decode_tokens: float
    prefill_ms: float | None
    requests: float
    e2e_ms: float | None = None
    output_tokens: float | None = None


@dataclass(frozen=True, slots=True)
class SweepFit:
    """The fitted parameters and both line fits (points in phase order, phases without data left out)."""

    parms: ServiceParms
    decode: LineFit
    prefill: LineFit
    decode_phases: tuple[int, ...]
    prefill_phases: tuple[int, ...]

    def predicted_e2e_ms(self, point: SweepPoint) -> float | None:
        """The end-to-end latency the fit predicts for a request of that phase (no queueing)."""
        if point.output_tokens is None:
            return None
        p = self.parms
        batch = max(point.running, 1.0)
        prefill = p.gamma + p.delta * point.prompt_tokens * batch
        return prefill + max(point.output_tokens - 1.0, 0.0) * (p.alpha + p.beta * batch)


def _cap(point: SweepPoint, max_batch: int | None) -> int:
    cap = max(point.concurrency, 1)
    return min(cap, max_batch) if max_batch is not None else cap


def fit_sweep(points: Sequence[SweepPoint], max_batch: int | None) -> SweepFit:
    """Fit both lines; ``ModelError`` when the sweep did not give enough to fit one of them."""
    dec_idx = [
        i
        for i, p in enumerate(points)
        if p.itl_ms is not None and p.itl_ms > 0 and p.decode_tokens >= 10 and p.running > 0
    ]
    pre_idx = [
        i
        for i, p in enumerate(points)
        if p.prefill_ms is not None and p.prefill_ms > 0 and p.requests >= 3 and p.prompt_tokens > 0
    ]
    if len(dec_idx) < 2 or len({points[i].concurrency for i in dec_idx}) < 2:
        raise ModelError("the sweep measured decode time at fewer than two batch sizes")
    if len(pre_idx) < 2:
        raise ModelError("the sweep measured prefill time in fewer than two phases")
    alpha: float | None = None
    beta: float | None = None
    decode: LineFit | None = None
    for _ in range(_ROUNDS):
        dec_points = []
        for i in dec_idx:
            p = points[i]
            assert p.itl_ms is not None
            x = decode_batch(p.running, _cap(p, max_batch), alpha, beta, p.dispersion)
            dec_points.append(Point(x, p.itl_ms, p.decode_tokens / (p.decode_tokens + 50.0)))
        decode = fit_line(dec_points)
        if decode is None or decode.solution.slope is None:
            raise ModelError("decode time did not change with the batch size: α and β cannot be told apart")
        alpha, beta = decode.solution.intercept, decode.solution.slope
    assert decode is not None and alpha is not None and beta is not None
    pre_points = []
    for i in pre_idx:
        p = points[i]
        assert p.prefill_ms is not None
        x = p.prompt_tokens * admission_batch(p.running, _cap(p, max_batch), alpha, beta, p.dispersion)
        pre_points.append(Point(x, p.prefill_ms, p.requests / (p.requests + 5.0)))
    prefill = fit_line(pre_points)
    if prefill is None or prefill.solution.slope is None:
        raise ModelError(
            "prefill time did not change with prompt tokens × batch: γ and δ cannot be told apart"
        )
    parms = ServiceParms(
        alpha=alpha, beta=beta, gamma=prefill.solution.intercept, delta=prefill.solution.slope
    )
    if not all(math.isfinite(v) for v in (parms.alpha, parms.beta, parms.gamma, parms.delta)):
        raise ModelError("the fit did not converge")
    if parms.alpha + parms.beta <= 0:
        raise ModelError("the fitted decode time is zero")
    return SweepFit(parms, decode, prefill, tuple(dec_idx), tuple(pre_idx))
