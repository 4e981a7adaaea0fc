"""The rate forecast: Holt on the log rate, empirical quantiles of its horizon errors, a compact state."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from variant_autoscaler.core.forecast import ForecastConfig, ForecastState, forecast, update
from variant_autoscaler.errors import ModelError


def _run(rates: list[float], config: ForecastConfig) -> tuple[ForecastState, list[float]]:
    state, uppers = ForecastState(), []
    for r in rates:
        state = update(state, r, config)
        uppers.append(forecast(state, config).upper)
    return state, uppers


def test_nothing_seen_forecasts_nothing_and_a_steady_rate_forecasts_itself() -> None:
    config = ForecastConfig()
    assert forecast(ForecastState(), config).upper == 0.0
    state, _ = _run([10.0] * 50, config)
    f = forecast(state, config)
    assert f.level == pytest.approx(10.0) and f.point == pytest.approx(10.0)
    assert f.upper == pytest.approx(10.0, rel=1e-6)  # no error ever seen: no margin
    assert f.errors == 50 - config.steps


def test_the_margin_before_any_history_is_the_default() -> None:
    config = ForecastConfig(default_margin=0.3)
    state, _ = _run([5.0, 5.0, 5.0], config)
    f = forecast(state, config)
    assert f.upper == pytest.approx((5.0 + config.floor) * math.exp(0.3) - config.floor)


def test_a_rising_rate_is_forecast_ahead() -> None:
    config = ForecastConfig(horizon_s=300.0)
    rates = [10.0 * 1.02**k for k in range(60)]
    state, _ = _run(rates, config)
    f = forecast(state, config)
    assert f.point > rates[-1] * 1.02**4  # the trend carried over the five steps of the horizon


def test_the_upper_quantile_covers_the_horizon_peak_about_as_often_as_asked() -> None:
    rng = np.random.default_rng(5)
    t = np.arange(2000)
    mean = 20.0 + 10.0 * np.sin(2 * np.pi * t / 240.0)
    rates = (rng.poisson(mean * 60.0) / 60.0).tolist()
    for level in (0.8, 0.95):
        config = ForecastConfig(quantile=level)
        _, uppers = _run(rates, config)
        h = config.steps
        covered = [max(rates[i + 1 : i + 1 + h]) <= uppers[i] for i in range(200, len(rates) - h)]
        assert float(np.mean(covered)) == pytest.approx(level, abs=0.05)


def test_state_is_compact_json_and_round_trips() -> None:
    config = ForecastConfig()
    state, _ = _run([float(x) for x in range(1, 400)], config)
    data = state.to_json()
    assert len(data["errors"]) <= config.history and len(json.dumps(data)) < 8000
    back = ForecastState.from_json(json.loads(json.dumps(data)))
    assert forecast(back, config).upper == pytest.approx(forecast(state, config).upper, rel=1e-5)
    with pytest.raises(ModelError):
        ForecastState.from_json({"level": "x"})


def test_bad_inputs() -> None:
    with pytest.raises(ModelError):
        update(ForecastState(), -1.0, ForecastConfig())
    with pytest.raises(ModelError):
        update(ForecastState(), math.nan, ForecastConfig())
    for bad in ({"quantile": 1.0}, {"interval_s": 0.0}, {"alpha": 2.0}, {"floor": 0.0}):
        with pytest.raises(ModelError):
            ForecastConfig(**bad)  # type: ignore[arg-type]
    # Zero rates are fine (the floor keeps the log finite).
    state, _ = _run([0.0] * 10, ForecastConfig())
    assert forecast(state, ForecastConfig()).point == pytest.approx(0.0, abs=1e-12)
