"""The rate forecast: Holt on the log rate, empirical quantiles of its horizon errors, a compact state."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from variant_autoscaler.core import forecast as fc
from variant_autoscaler.core.forecast import ForecastConfig, ForecastState, forecast, update
from variant_autoscaler.errors import ModelError


def _run(
    rates: list[float], config: ForecastConfig, what: str = "upper"
) -> tuple[ForecastState, list[float]]:
    """The state at the end and, after each rate, the forecast's ``what`` (``upper``, ``point``)."""
    state, out = ForecastState(), []
    for r in rates:
        state = update(state, r, config)
        out.append(getattr(forecast(state, config), what))
    return state, out


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


def test_the_warm_up_margin_moves_from_the_default_to_the_errors_as_they_come() -> None:
    """After k of the warm-up's twenty errors the margin is (1 - k/20) of the default plus k/20 of the
    errors' quantile: a steady rate (errors of 0) sheds the default a twentieth at a time, with no jump
    where the warm-up ends; a forecaster whose first errors exceed the default widens it at once."""
    config = ForecastConfig(default_margin=0.3)
    floor = config.floor
    margins = []
    for k in (1, 5, 10, 19, 20):
        state, _ = _run([5.0] * (config.steps + k), config)
        assert len(state.errors) == k and set(state.errors) == {0.0}
        margins.append(math.log((forecast(state, config).upper + floor) / (5.0 + floor)))
    assert margins == pytest.approx([0.3 * (1 - k / 20) for k in (1, 5, 10, 19)] + [0.0], abs=1e-9)

    # Doubling every interval: each horizon's realised peak far above its forecast.
    state, _ = _run([1.0 * 2.0**k for k in range(config.steps + 3)], config)
    f = forecast(state, config)
    assert f.errors == 3 and min(state.errors) > 0.3
    assert math.log((f.upper + floor) / (f.point + floor)) > 0.3


def test_a_rising_rate_is_forecast_ahead() -> None:
    rates = [10.0 * 1.02**k for k in range(60)]
    holt = ForecastConfig(horizon_s=300.0)  # the default: Holt's linear trend
    assert holt.damping == 1.0
    state, _ = _run(rates, holt)
    linear = forecast(state, holt).point
    assert linear > rates[-1] * 1.02**4  # Holt's trend carried over the five steps of the horizon
    damped = ForecastConfig(horizon_s=300.0, damping=0.9)
    state, _ = _run(rates, damped)
    assert rates[-1] < forecast(state, damped).point < linear  # damped: ahead, less far


def test_a_step_is_not_carried_on_as_a_climb() -> None:
    """A step in the load (a flash crowd) moves Holt's trend, which then carries the forecast past the
    new level for many intervals; a damped trend (0.9) overshoots less and settles sooner."""
    rates = [10.0] * 20 + [40.0] * 20

    holt, damped = _steps(rates, ForecastConfig())[1], _steps(rates, ForecastConfig(damping=0.9))[1]
    assert max(holt) > 1.5 * 40.0 and max(damped) < 1.35 * 40.0
    assert holt[29] > 1.35 * 40.0 and damped[29] < 1.15 * 40.0  # ten intervals into the plateau
    assert damped[-1] == pytest.approx(40.0, rel=0.02)


def _steps(rates: list[float], config: ForecastConfig) -> tuple[ForecastState, list[float]]:
    return _run(rates, config, "point")


def test_a_step_past_the_warm_up_is_a_new_level_not_a_climb() -> None:
    """Past the warm-up, a rise far beyond the forecaster's usual errors (a flash crowd) is taken as a
    new level: the forecast settles on it instead of carrying Holt's trend past it, and the step is not
    kept among the errors the quantiles are read from. Switched off (0), Holt's trend overshoots."""
    before, after = 60, 30
    rates = _noisy([10.0] * before + [40.0] * after, seed=7)
    shifted, points = _steps(rates, ForecastConfig())
    holt, holt_points = _steps(rates, ForecastConfig(shift_sigmas=0.0))
    assert shifted.shifted == before + 1 and holt.shifted is None
    assert max(points[before:]) < 1.1 * 40.0 < 1.35 * 40.0 < max(holt_points[before:])
    # The step (a log-rate error of about log 4 = 1.4) is in Holt's errors, not in the shifted ones.
    assert max(holt.errors) > 1.0 and max(shifted.errors) < 0.3
    config = ForecastConfig(quantile=0.95)
    assert forecast(_steps(rates, config)[0], config).upper < 1.25 * 40.0
    holt_config = ForecastConfig(quantile=0.95, shift_sigmas=0.0)
    assert forecast(_steps(rates, holt_config)[0], holt_config).upper > 1.5 * 40.0


def test_no_level_shift_in_noise_a_daily_cycle_a_fall_or_the_warm_up() -> None:
    t = np.arange(1500)
    cases = {
        "poisson noise": [20.0] * 1500,
        "a daily cycle": (20.0 + 10.0 * np.sin(2 * np.pi * t / 240.0)).tolist(),
        "a fall to a quarter": [40.0] * 60 + [10.0] * 60,
    }
    for name, mean in cases.items():
        state, _ = _steps(_noisy(mean, seed=11), ForecastConfig())
        assert state.shifted is None, name
    # A step before 20 horizons' errors are known: the forecaster cannot tell it from its noise yet.
    state, _ = _steps([10.0] * 15 + [40.0] * 10, ForecastConfig())
    assert state.shifted is None


def test_the_last_level_shift_survives_a_restart() -> None:
    state, _ = _steps(_noisy([10.0] * 60 + [40.0] * 5), ForecastConfig())
    data = json.loads(json.dumps(state.to_json()))
    assert data["shifted"] == 61 and ForecastState.from_json(data).shifted == 61
    assert "shifted" not in ForecastState().to_json()


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
    for bad in (
        {"quantile": 1.0},
        {"interval_s": 0.0},
        {"alpha": 2.0},
        {"floor": 0.0},
        {"default_margin": -0.1},
        {"damping": 0.0},
        {"damping": 1.1},
        {"shift_sigmas": -1.0},
        {"shift_sigmas": math.inf},
        {"min_shift": -0.1},
    ):
        with pytest.raises(ModelError):
            ForecastConfig(**bad)  # type: ignore[arg-type]
    # Zero rates are fine (the floor keeps the log finite).
    state, _ = _run([0.0] * 10, ForecastConfig())
    assert forecast(state, ForecastConfig()).point == pytest.approx(0.0, abs=1e-12)


def _planned(rates: list[float], config: ForecastConfig) -> tuple[ForecastState, list[tuple[float, float]]]:
    """Per step: the planned rate and the scale-up (upper) forecast."""
    state, out = ForecastState(), []
    for r in rates:
        state = update(state, r, config)
        f = forecast(state, config)
        out.append((f.planned, f.upper))
    return state, out


def _noisy(mean: list[float], seed: int = 3) -> list[float]:
    rng = np.random.default_rng(seed)
    return (rng.poisson(np.array(mean) * 60.0) / 60.0).tolist()


def test_without_a_scale_down_quantile_the_plan_follows_the_upper_forecast() -> None:
    config = ForecastConfig(quantile=0.5)
    _, steps = _planned(_noisy([20.0] * 100 + [5.0] * 50), config)
    assert all(planned == upper for planned, upper in steps)


def test_the_hysteresis_rises_with_the_upper_forecast_and_falls_only_below_the_scale_down_quantile() -> None:
    up, down = ForecastConfig(quantile=0.5), ForecastConfig(quantile=0.5, down_quantile=0.9)
    rates = _noisy([20.0] * 150 + [40.0] * 20 + [8.0] * 60)
    state, steps = _planned(rates, down)
    plain = _run(rates, up)[1]
    highs = _run(rates, ForecastConfig(quantile=0.9))[1]
    previous = 0.0
    for k, ((planned, upper), bare, high) in enumerate(zip(steps, plain, highs, strict=True)):
        assert upper == pytest.approx(bare)  # the scale-up forecast itself is unchanged
        assert upper - 1e-9 <= planned <= max(high, upper) + 1e-9
        if planned < previous - 1e-9:  # a fall: only as far as the 0.9 quantile asks
            assert planned == pytest.approx(max(upper, high), rel=1e-9), k
        previous = planned
    # On a steady noisy load the plan sits above the median forecast (it keeps what the noise asked)...
    steady = [p - u for p, u in steps[60:150]]
    assert float(np.mean(steady)) > 0 and max(p / u for p, u in steps[60:150]) > 1.02
    # ...rises at once with the step up, and comes down after the load has fallen.
    assert steps[152][0] >= steps[152][1] and steps[-1][0] < 0.5 * steps[165][0]
    # The held rate is part of the state and round-trips.
    back = ForecastState.from_json(json.loads(json.dumps(state.to_json())))
    assert back.held is not None and forecast(back, down).planned == pytest.approx(steps[-1][0], rel=1e-5)


def test_a_scale_down_quantile_below_the_scale_up_one_is_refused() -> None:
    with pytest.raises(ModelError, match="scale-down quantile"):
        ForecastConfig(quantile=0.75, down_quantile=0.5)
    with pytest.raises(ModelError):
        ForecastConfig(quantile=0.5, down_quantile=1.0)
    ForecastConfig(quantile=0.5, down_quantile=0.5)  # equal: no hysteresis, allowed


def test_replay_is_the_updates_in_order_and_warms_the_quantiles() -> None:
    cfg = ForecastConfig(interval_s=60.0, horizon_s=240.0, quantile=0.5, down_quantile=0.9)
    rates = [10.0 * (1.0 + 0.2 * math.sin(k / 5.0)) for k in range(40)]
    state = ForecastState()
    for rate in rates:
        state = update(state, rate, cfg)
    assert fc.replay(rates, cfg) == state
    assert fc.replay(rates[20:], cfg, fc.replay(rates[:20], cfg)) == state  # a run continued from a state
    warm = forecast(state, cfg)
    assert warm.holds and warm.errors >= cfg.min_history  # no warm-up left
    assert not forecast(fc.replay(rates[:5], cfg), cfg).holds
    assert fc.replay([], cfg) == ForecastState()


def test_trailing_run_is_the_gapless_run_that_ends_with_the_last_point() -> None:
    steady = [(60.0 * k, float(k)) for k in range(1, 6)]
    assert fc.trailing_run(steady, 60.0) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert fc.trailing_run([*steady[:2], *steady[3:]], 60.0) == [4.0, 5.0]  # a missing point
    assert fc.trailing_run([(60.0, 1.0), (120.0, math.nan), (180.0, 3.0)], 60.0) == [3.0]
    assert fc.trailing_run([(60.0, 1.0), (120.0, -1.0)], 60.0) == []  # the last one is not a rate
    assert fc.trailing_run([(0.0, 1.0), (100.0, 2.0), (160.0, 3.0)], 60.0) == [2.0, 3.0]  # off the step
    assert fc.trailing_run([(60.0, 1.0), (115.0, 2.0)], 60.0) == [1.0, 2.0]  # within half a step
    assert fc.trailing_run([], 60.0) == []
    with pytest.raises(ModelError, match="step must be > 0"):
        fc.trailing_run(steady, 0.0)
