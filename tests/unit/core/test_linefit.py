"""Relative-error line fits: exact recovery, non-negativity, identification, robustness, confidence."""

from __future__ import annotations

import math
import random

import pytest

from variant_autoscaler.core.linefit import (
    Confidence,
    Point,
    Sums,
    confidence_level,
    fit_line,
    huber_weight,
)


def _sums(points: list[tuple[float, float]]) -> Sums:
    sums = Sums()
    for x, y in points:
        sums = sums.add(x, y, 1.0, y)
    return sums


def test_an_exact_line_is_recovered_with_full_confidence() -> None:
    sums = _sums([(x, 20.0 + 0.4 * x) for x in (1, 4, 8, 16, 32, 64)])
    s = sums.solve()
    assert s is not None and s.slope is not None
    assert s.intercept == pytest.approx(20.0)
    assert s.slope == pytest.approx(0.4)
    assert s.slope_identified and s.bound is None and s.unidentified == ""
    # a perfect fit of six points is still judged with a 1 % floor on the scatter
    assert s.rel_sigma == pytest.approx(0.01)
    assert s.intercept_confidence is Confidence.HIGH
    assert s.slope_confidence is Confidence.HIGH


def test_a_regressor_that_has_not_varied_keeps_the_prior_slope() -> None:
    sums = _sums([(10.0, 24.0)] * 8)
    s = sums.solve(prior_slope=0.5)
    assert s is not None
    assert not s.slope_identified and s.unidentified == "flat"
    assert s.slope == 0.5
    assert s.intercept == pytest.approx(24.0 - 0.5 * 10.0)  # the line goes through the data
    assert s.slope_confidence is Confidence.NONE
    # an intercept fitted under an unchecked slope is never more than low confidence
    assert s.intercept_confidence is Confidence.LOW


def test_without_a_prior_an_unvaried_regressor_leaves_the_slope_unknown() -> None:
    s = _sums([(10.0, 24.0)] * 8).solve()
    assert s is not None
    assert s.slope is None and s.predict(3.0) is None
    assert s.intercept_confidence is Confidence.NONE


def test_too_few_points_do_not_identify_a_slope() -> None:
    s = _sums([(1.0, 21.0), (30.0, 32.0)]).solve(prior_slope=0.3)
    assert s is not None
    assert not s.slope_identified and s.unidentified == "few"


def test_parameters_never_go_negative() -> None:
    falling = _sums([(x, 30.0 - 0.02 * x) for x in (1, 10, 20, 30)]).solve()
    assert falling is not None and falling.bound == "slope"
    assert falling.slope == 0.0
    assert falling.intercept > 0
    through_origin = _sums([(x, -5.0 + 1.0 * x) for x in (10, 20, 40, 80)]).solve()
    assert through_origin is not None and through_origin.bound == "intercept"
    assert through_origin.intercept == 0.0
    assert through_origin.slope is not None and through_origin.slope > 0


def test_forgetting_scales_every_sum_and_keeps_the_line() -> None:
    sums = _sums([(x, 10.0 + 2.0 * x) for x in (1, 2, 3, 4, 5)])
    half = sums.scaled(0.5)
    assert half.n == pytest.approx(sums.n / 2)
    s1, s2 = sums.solve(), half.solve()
    assert s1 is not None and s2 is not None
    assert s2.intercept == pytest.approx(s1.intercept)
    assert s2.slope == pytest.approx(s1.slope)
    assert Sums.from_list(sums.as_list()) == sums
    with pytest.raises(ValueError, match="ten finite"):
        Sums.from_list([1.0, math.nan, *[0.0] * 8])


def test_huber_weights() -> None:
    assert huber_weight(0.01, 0.02, 2.0) == 1.0
    assert huber_weight(-0.08, 0.02, 2.0) == pytest.approx(0.5)
    assert huber_weight(0.0, 0.0, 2.0) == 1.0


def test_a_robust_fit_shrugs_off_an_outlier() -> None:
    rng = random.Random(3)
    points = [Point(x, (20.0 + 0.4 * x) * rng.lognormvariate(0, 0.01)) for x in range(1, 40, 3)]
    points.append(Point(20.0, 3 * (20.0 + 0.4 * 20.0)))  # one window three times too slow
    fit = fit_line(points)
    assert fit is not None and fit.solution.slope is not None
    assert fit.solution.intercept == pytest.approx(20.0, rel=0.03)
    assert fit.solution.slope == pytest.approx(0.4, rel=0.05)
    assert fit.weights[-1] < 0.1  # the outlier was down-weighted
    assert 0.0 < fit.r2 <= 1.0
    assert len(fit.residuals) == len(points)
    assert fit_line([]) is None


@pytest.mark.parametrize(
    ("impact", "points", "level"),
    [
        (0.01, 10, Confidence.HIGH),
        (0.04, 10, Confidence.MEDIUM),
        (0.2, 10, Confidence.LOW),
        (0.01, 3, Confidence.LOW),
        (None, 10, Confidence.LOW),
    ],
)
def test_confidence_levels(impact: float | None, points: float, level: Confidence) -> None:
    assert confidence_level(impact, points) is level


def test_confidence_ordering() -> None:
    assert Confidence.HIGH.at_least(Confidence.MEDIUM)
    assert not Confidence.LOW.at_least(Confidence.MEDIUM)
    assert Confidence.NONE.rank < Confidence.LOW.rank
