"""Weighted straight-line fits ``y = intercept + slope·x`` with relative errors, for the profile learners.

Both halves of the queueing model's service time are straight lines in one regressor: decode
``α + β·b`` in the batch size and prefill ``γ + δ·(L·b)`` in prompt tokens times batch. The online
estimator (:mod:`variant_autoscaler.core.estimator`) and the offline ``profile`` command fit them with
the same arithmetic, kept here:

* :class:`Sums` holds the weighted sufficient statistics of a line (ten numbers, so it serialises in a
  status field), can be scaled (exponential forgetting) and solved;
* errors are taken as *relative*: every point is weighted by ``1/ŷ²`` (ŷ its predicted value), because
  timing noise grows with the time measured;
* :meth:`Sums.solve` keeps both parameters non-negative, and fits the intercept alone, with the slope
  held at a prior, when the regressor has not varied enough to tell them apart;
* every fitted parameter comes with a standard error, and an *impact*: its standard error times its
  regressor at the mean operating point, relative to the mean time measured (how far its uncertainty
  moves the predicted time where the server runs). The confidence level is read from the impact, so
  that a parameter which contributes little there (γ, when prompts × batch are large) does not make a
  profile untrustworthy for predictions it hardly affects.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "HIGH_IMPACT",
    "MEDIUM_IMPACT",
    "MIN_POINTS_CONFIDENT",
    "Confidence",
    "LineFit",
    "LineSolution",
    "Point",
    "Sums",
    "confidence_level",
    "fit_line",
    "huber_weight",
]

HIGH_IMPACT = 0.02
"""A parameter whose uncertainty moves the predicted time by at most this fraction: high confidence."""
MEDIUM_IMPACT = 0.05
"""... at most this, medium; above it, low."""
MIN_POINTS_CONFIDENT = 5.0
"""Fewer (effective) points than this never give more than low confidence: their scatter says little."""
MIN_REL_SIGMA = 0.01
"""Floor of the relative residual scale: a perfect fit of a handful of points is not proof."""
IDENTIFIED_SLOPE_RSE = 0.5
"""A slope whose relative standard error exceeds this is not identified: the regressor has not varied
enough; the slope then keeps its prior."""
MIN_SPREAD = 0.05
"""... nor is a slope whose regressor's coefficient of variation is below this."""


class Confidence(enum.StrEnum):
    """How well a parameter is known."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    NONE = "none"
    """Not learned: the parameter keeps its prior (or is unknown)."""

    @property
    def rank(self) -> int:
        return _RANK[self]

    def at_least(self, other: Confidence) -> bool:
        return self.rank >= other.rank


_RANK = {Confidence.NONE: 0, Confidence.LOW: 1, Confidence.MEDIUM: 2, Confidence.HIGH: 3}


def confidence_level(impact: float | None, points: float) -> Confidence:
    """The level of a learned parameter from its impact (see the module doc) and the points behind it."""
    if impact is None or not math.isfinite(impact):
        return Confidence.LOW
    if points < MIN_POINTS_CONFIDENT:
        return Confidence.LOW
    if impact <= HIGH_IMPACT:
        return Confidence.HIGH
    if impact <= MEDIUM_IMPACT:
        return Confidence.MEDIUM
    return Confidence.LOW


def huber_weight(residual: float, scale: float, k: float) -> float:
    """Huber's weight of a (relative) residual: 1 within ``k·scale``, shrinking as ``k·scale/|r|`` beyond."""
    limit = k * scale
    size = abs(residual)
    return 1.0 if size <= limit or size == 0.0 else limit / size


@dataclass(frozen=True, slots=True)
class Point:
    """One observation: regressor ``x``, measured ``y``, and its weight (e.g. from its sample size)."""

    x: float
    y: float
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class LineSolution:
    """The fitted line and what is known about each parameter.

    ``slope_identified`` is False when the regressor has not varied enough to separate the two
    parameters: the slope is then ``prior_slope`` (or unknown: ``None``) and the intercept is fitted
    given it. ``bound`` names a parameter pinned at zero by the non-negativity constraint.
    ``*_impact``: standard error × the regressor's mean (1 for the intercept) / the mean ``y``.
    """

    intercept: float
    slope: float | None
    intercept_se: float | None
    slope_se: float | None
    intercept_impact: float | None
    slope_impact: float | None
    slope_identified: bool
    bound: str | None
    unidentified: str
    """Why the slope is not identified: ``few`` points, a ``flat`` regressor (it has not varied),
    or a ``noisy`` slope (it varied, but not enough for the scatter); empty when it is."""
    points: float
    rel_sigma: float | None
    x_mean: float
    x_sd: float
    y_mean: float

    def predict(self, x: float) -> float | None:
        if self.slope is None:
            return None
        return self.intercept + self.slope * x

    @property
    def intercept_confidence(self) -> Confidence:
        if self.slope is None:
            return Confidence.NONE
        level = confidence_level(self.intercept_impact, self.points)
        # An intercept fitted under a slope we could not check inherits the prior's doubt.
        return level if self.slope_identified else min(level, Confidence.LOW, key=lambda c: c.rank)

    @property
    def slope_confidence(self) -> Confidence:
        if not self.slope_identified:
            return Confidence.NONE
        return confidence_level(self.slope_impact, self.points)


@dataclass(frozen=True, slots=True)
class Sums:
    """Weighted sufficient statistics of a line.

    ``n``, ``nx``, ``ny``, ``nxx``: sums of the points' weights ``n_i`` (not scaled by ``1/ŷ²``): the
    effective number of points and the plain means and spread of the regressor and of the measurement.
    ``s0 … syy``: sums of ``w_i = n_i/ŷ_i²`` times ``1, x, y, x², x·y, y²`` (relative-error weights).
    """

    n: float = 0.0
    nx: float = 0.0
    ny: float = 0.0
    nxx: float = 0.0
    s0: float = 0.0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0
    syy: float = 0.0

    def add(self, x: float, y: float, weight: float, predicted: float) -> Sums:
        """These sums plus one point of weight ``weight`` whose predicted value is ``predicted``."""
        w = weight / (predicted * predicted)
        return Sums(
            n=self.n + weight,
            nx=self.nx + weight * x,
            ny=self.ny + weight * y,
            nxx=self.nxx + weight * x * x,
            s0=self.s0 + w,
            sx=self.sx + w * x,
            sy=self.sy + w * y,
            sxx=self.sxx + w * x * x,
            sxy=self.sxy + w * x * y,
            syy=self.syy + w * y * y,
        )

    def scaled(self, factor: float) -> Sums:
        """Every sum times ``factor`` (exponential forgetting)."""
        return Sums(*(value * factor for value in self.as_list()))

    def as_list(self) -> list[float]:
        return [self.n, self.nx, self.ny, self.nxx, self.s0, self.sx, self.sy, self.sxx, self.sxy, self.syy]

    @classmethod
    def from_list(cls, values: Sequence[float]) -> Sums:
        if len(values) != 10 or not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
            raise ValueError("line sums need ten finite numbers")
        return cls(*(float(v) for v in values))

    @property
    def x_mean(self) -> float:
        return self.nx / self.n if self.n > 0 else 0.0

    @property
    def x_sd(self) -> float:
        if self.n <= 0:
            return 0.0
        mean = self.nx / self.n
        return math.sqrt(max(self.nxx / self.n - mean * mean, 0.0))

    @property
    def y_mean(self) -> float:
        return self.ny / self.n if self.n > 0 else 0.0

    def _rss(self, a: float, b: float) -> float:
        return max(
            self.syy
            - 2.0 * a * self.sy
            - 2.0 * b * self.sxy
            + a * a * self.s0
            + 2.0 * a * b * self.sx
            + b * b * self.sxx,
            0.0,
        )

    def _sigma(self, a: float, b: float, free: int) -> float | None:
        dof = self.n - free
        if dof <= 0:
            return None
        return max(math.sqrt(self._rss(a, b) / dof), MIN_REL_SIGMA)

    def solve(self, prior_slope: float | None = None) -> LineSolution | None:
        """The weighted least-squares line with non-negative parameters; None without data.

        The slope is fitted when the regressor has varied enough (coefficient of variation at least
        :data:`MIN_SPREAD`, and a standard error at most :data:`IDENTIFIED_SLOPE_RSE` of itself or an
        impact at most :data:`MEDIUM_IMPACT`);
        otherwise it is ``prior_slope`` (``None`` if there is none) and only the intercept is fitted.
        """
        if self.n <= 0 or self.s0 <= 0:
            return None
        x_mean, x_sd, y_mean = self.x_mean, self.x_sd, self.y_mean
        det = self.s0 * self.sxx - self.sx * self.sx
        spread = x_sd / x_mean if x_mean > 0 else 0.0
        if self.n <= 2.0:
            why = "few"
        elif det <= 1e-12 * self.s0 * self.sxx or spread < MIN_SPREAD:
            why = "flat"
        else:
            why = "noisy"
            full = self._solve_free(det)
            if full is not None and _identified(full):
                return full
        # Not identified: the intercept given the prior slope (or no slope at all).
        if prior_slope is None:
            return LineSolution(
                intercept=self.sy / self.s0,
                slope=None,
                intercept_se=None,
                slope_se=None,
                intercept_impact=None,
                slope_impact=None,
                slope_identified=False,
                bound=None,
                unidentified=why,
                points=self.n,
                rel_sigma=self._sigma(self.sy / self.s0, 0.0, 1),
                x_mean=x_mean,
                x_sd=x_sd,
                y_mean=y_mean,
            )
        b = max(prior_slope, 0.0)
        a = (self.sy - b * self.sx) / self.s0
        bound = None
        if a < 0.0:
            a, bound = 0.0, "intercept"
        sigma = self._sigma(a, b, 1)
        a_se = None if sigma is None else sigma / math.sqrt(self.s0)
        return LineSolution(
            intercept=a,
            slope=b,
            intercept_se=a_se,
            slope_se=None,
            intercept_impact=_impact(a_se, 1.0, y_mean),
            slope_impact=None,
            slope_identified=False,
            bound=bound,
            unidentified=why,
            points=self.n,
            rel_sigma=sigma,
            x_mean=x_mean,
            x_sd=x_sd,
            y_mean=y_mean,
        )

    def _solve_free(self, det: float) -> LineSolution | None:
        x_mean, x_sd, y_mean = self.x_mean, self.x_sd, self.y_mean
        b = (self.s0 * self.sxy - self.sx * self.sy) / det
        a = (self.sy - b * self.sx) / self.s0
        bound = None
        if b < 0.0:  # a decreasing line: the best non-negative one is flat
            a, b, bound = self.sy / self.s0, 0.0, "slope"
        elif a < 0.0:  # through the origin
            a, b, bound = 0.0, self.sxy / self.sxx, "intercept"
        sigma = self._sigma(a, b, 2 if bound is None else 1)
        if sigma is None:
            return None
        var_a = sigma * sigma * self.sxx / det
        var_b = sigma * sigma * self.s0 / det
        a_se, b_se = math.sqrt(var_a), math.sqrt(var_b)
        return LineSolution(
            intercept=a,
            slope=b,
            intercept_se=a_se,
            slope_se=b_se,
            intercept_impact=_impact(a_se, 1.0, y_mean),
            slope_impact=_impact(b_se, x_mean, y_mean),
            slope_identified=True,
            bound=bound,
            unidentified="",
            points=self.n,
            rel_sigma=sigma,
            x_mean=x_mean,
            x_sd=x_sd,
            y_mean=y_mean,
        )


def _identified(solution: LineSolution) -> bool:
    """A slope known to half its value, or whose uncertainty hardly moves the predictions (a slope
    that is really about zero, say a decode time that does not grow with the batch)."""
    if solution.slope is None or solution.slope_se is None:
        return False
    if solution.slope_se <= IDENTIFIED_SLOPE_RSE * solution.slope:
        return True
    return solution.slope_impact is not None and solution.slope_impact <= MEDIUM_IMPACT


def _impact(se: float | None, scale: float, y_mean: float) -> float | None:
    if se is None:
        return None
    return se * scale / y_mean if y_mean > 0 else math.inf


@dataclass(frozen=True, slots=True)
class LineFit:
    """An offline robust fit: the solution, the R² of the weighted fit, and per-point diagnostics.

    ``residuals`` are relative, ``(y − ŷ)/ŷ``; ``weights`` the robust weights the points ended with
    (1 for a point that fits, less for an outlier).
    """

    solution: LineSolution
    r2: float
    points: tuple[Point, ...]
    residuals: tuple[float, ...]
    weights: tuple[float, ...]


def fit_line(
    points: Sequence[Point],
    *,
    prior_slope: float | None = None,
    huber_k: float = 2.0,
    iterations: int = 20,
) -> LineFit | None:
    """Robust (Huber, iteratively reweighted) relative-error fit of a line to ``points``.

    The first pass weighs each point by ``1/y²``; later passes by ``1/ŷ²`` from the previous fit and by
    Huber's weight of its relative residual. None when there are no points with a positive ``y``.
    """
    usable = [p for p in points if p.y > 0 and p.weight > 0 and math.isfinite(p.x) and math.isfinite(p.y)]
    if not usable:
        return None
    robust = [1.0] * len(usable)
    predicted = [p.y for p in usable]
    solution: LineSolution | None = None
    for _ in range(max(1, iterations)):
        sums = Sums()
        for p, r, yhat in zip(usable, robust, predicted, strict=True):
            sums = sums.add(p.x, p.y, p.weight * r, yhat)
        solution = sums.solve(prior_slope)
        if solution is None or solution.slope is None:
            break
        new_pred = [max(solution.intercept + solution.slope * p.x, 1e-12) for p in usable]
        residuals = [(p.y - yhat) / yhat for p, yhat in zip(usable, new_pred, strict=True)]
        scale = max(1.4826 * _median([abs(r) for r in residuals]), MIN_REL_SIGMA)
        new_robust = [huber_weight(r, scale, huber_k) for r in residuals]
        settled = (
            max(abs(a - b) for a, b in zip(new_robust, robust, strict=True)) < 1e-6
            and max(abs(a - b) / b for a, b in zip(new_pred, predicted, strict=True)) < 1e-9
        )
        robust, predicted = new_robust, new_pred
        if settled:
            break
    assert solution is not None
    if solution.slope is None:
        residuals = [(p.y - solution.intercept) / solution.intercept for p in usable]
        return LineFit(solution, 0.0, tuple(usable), tuple(residuals), tuple(robust))
    fitted = [solution.intercept + solution.slope * p.x for p in usable]
    residuals = [(p.y - f) / f if f > 0 else math.inf for p, f in zip(usable, fitted, strict=True)]
    return LineFit(solution, _r2(usable, fitted, robust), tuple(usable), tuple(residuals), tuple(robust))


def _r2(points: Sequence[Point], fitted: Sequence[float], robust: Sequence[float]) -> float:
    """R² of the fit with the fit's own weights (``n_i·h_i/ŷ_i²``)."""
    weights = [
        p.weight * h / (f * f) if f > 0 else 0.0 for p, f, h in zip(points, fitted, robust, strict=True)
    ]
    total = sum(weights)
    if total <= 0:
        return 0.0
    mean = sum(w * p.y for w, p in zip(weights, points, strict=True)) / total
    ss_tot = sum(w * (p.y - mean) ** 2 for w, p in zip(weights, points, strict=True))
    ss_res = sum(w * (p.y - f) ** 2 for w, p, f in zip(weights, points, fitted, strict=True))
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])
