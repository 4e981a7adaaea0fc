"""Forecast of a model's arrival rate: an upper quantile over the horizon "start-up time + one interval".

Replicas asked for now are ready only after the start-up time and then serve until the next decision
takes effect, so a plan must cover the load up to ``start-up + interval`` ahead. This module forecasts
an upper quantile of the *largest* per-interval rate in that horizon:

* **Point forecast**: Holt's trend on the log of the rate (log: bursts and diurnal swings are
  multiplicative, and a forecast never goes negative), optionally damped (Gardner and McKenzie's damped
  trend: the trend counts ``damping``, ``damping``², ... over the steps ahead, and fades by ``damping``
  a step while the level stops following it, so that a step in the load is not carried on as a climb);
  the horizon's point forecast is the largest of the per-step forecasts. There is no seasonal term: over
  a horizon of minutes the level and trend follow a daily cycle (see ``bench/forecast.py``), and a
  seasonal term learnt beside a level this quick is not identifiable (it drifts while the level
  compensates).
* **Level shifts**: an interval whose log rate rises above the one-step forecast by more than
  ``shift_sigmas`` robust standard deviations of the forecaster's horizon errors (and by at least
  ``min_shift``) is taken as a new level, not as a climb (a flash crowd, a launch, traffic moved over
  from another cluster): the level jumps to it, the trend is not updated from it, and the horizon
  forecasts made before it are dropped, so that neither Holt's trend nor the error history carries the
  step on for the rest of the run. It needs ``min_history`` errors (past the warm-up); a fall is left to
  Holt's level (scale-down stays conservative).
* **Upper quantile**: the empirical quantile of the forecaster's own past errors on that same quantity
  (the realised largest log rate over a horizon minus what was forecast for it), over the last
  ``history`` horizons. Until ``min_history`` horizons have been seen, a fixed margin blended with
  the quantile of the errors seen so far, the errors weighing more with every one of them.
* **The rate to plan for**, with a hysteresis between two quantiles: it rises with the ``quantile``
  (scale-up) forecast at once, and falls only as far as the higher ``down_quantile`` forecast allows
  (``planned = max(up, min(down, planned before))``). A plan so made scales up on the likely peak and
  gives capacity back only when even a pessimistic forecast no longer needs it, which is what a
  scale-down stabilisation window did by holding every plan for minutes whatever the forecast said
  (measured: docs/tail-slo.md, "Which quantile").

Everything is pure: the state is a frozen value, :func:`update` returns a new one, time is a step count
(one step per planning interval), and :meth:`ForecastState.to_json` / :meth:`ForecastState.from_json`
give a compact form the operator can persist. Rates are requests per second. :func:`replay` learns a run
of past rates at once (:func:`trailing_run` picks it from a series' points): the operator warms a new
forecaster from the model's history in Prometheus instead of starting it with the fixed margin.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from variant_autoscaler.errors import ModelError

__all__ = [
    "DEFAULT_DOWN_QUANTILE",
    "DEFAULT_QUANTILE",
    "DEFAULT_SHIFT_SIGMAS",
    "Forecast",
    "ForecastConfig",
    "ForecastState",
    "forecast",
    "replay",
    "trailing_run",
    "update",
]

#: The scale-up forecast's default level (``FORECAST_QUANTILE``). The planner sizes for 99 % of
#: requests at that rate, replicas come whole, the burst guard covers what exceeds it, and the
#: scale-down quantile keeps what a plan has until a pessimistic forecast lets it go, so the plan may
#: rise with the median (measured: docs/tail-slo.md, "Which quantile").
DEFAULT_QUANTILE = 0.5
#: The scale-down forecast's default level in the operator (``FORECAST_SCALE_DOWN_QUANTILE``): the
#: planned rate falls only below this quantile of the forecast. (A bare :class:`ForecastConfig` has no
#: hysteresis.)
DEFAULT_DOWN_QUANTILE = 0.9
#: A rise of the log rate beyond this many robust standard deviations of the horizon errors above the
#: one-step forecast is a level shift (``FORECAST_LEVEL_SHIFT``; measured: docs/tail-slo.md, "Level
#: shifts").
DEFAULT_SHIFT_SIGMAS = 4.0


@dataclass(frozen=True, slots=True)
class ForecastConfig:
    """How to forecast.

    ``interval_s`` is the time between updates (the planning interval), ``horizon_s`` how far ahead the
    plan must hold (start-up time + one interval), ``quantile`` the level of the upper forecast (0.75:
    the horizon's peak stays below it three times out of four) and ``down_quantile`` the level below
    which the planned rate may fall (None: the planned rate is the upper forecast, no hysteresis).
    ``alpha`` and ``beta`` are Holt's smoothing weights of the level and the trend, ``damping`` the
    trend's damping factor (1, the default: Holt's linear trend; ``FORECAST_TREND_DAMPING``,
    docs/tail-slo.md, "A damped trend"). ``history`` errors are kept for the quantiles; below
    ``min_history`` the upper forecast adds ``default_margin`` (in log rate: 0.3 is +35 %) blended
    with the errors' quantile as they come (:func:`_margin`; docs/tail-slo.md, "The forecaster's
    warm-up"). ``floor`` (req/s) is added before taking logs so that an idle model has a finite log
    rate. ``shift_sigmas`` (0: off) and ``min_shift`` (log rate: 0.2 is +22 %) say when a rise is a
    level shift (the module doc; ``FORECAST_LEVEL_SHIFT``).
    """

    interval_s: float = 60.0
    horizon_s: float = 240.0
    quantile: float = DEFAULT_QUANTILE
    down_quantile: float | None = None
    alpha: float = 0.5
    beta: float = 0.1
    damping: float = 1.0
    history: int = 240
    min_history: int = 20
    default_margin: float = 0.3
    floor: float = 0.05
    shift_sigmas: float = DEFAULT_SHIFT_SIGMAS
    min_shift: float = 0.2

    def __post_init__(self) -> None:
        if not self.interval_s > 0 or not self.horizon_s > 0:
            raise ModelError("the forecast's interval and horizon must be > 0")
        if not 0.0 < self.quantile < 1.0:
            raise ModelError(f"the forecast quantile must be in (0, 1), got {self.quantile:g}")
        if self.down_quantile is not None and not self.quantile <= self.down_quantile < 1.0:
            raise ModelError(
                f"the forecast's scale-down quantile must be in [{self.quantile:g}, 1) (at least the "
                f"scale-up quantile), got {self.down_quantile:g}"
            )
        for name in ("alpha", "beta"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ModelError(f"the forecast's {name} must be in [0, 1]")
        if not 0.0 < self.damping <= 1.0:
            raise ModelError(f"the forecast's damping must be in (0, 1], got {self.damping:g}")
        if self.history < 1 or self.min_history < 1:
            raise ModelError("the forecast's history and min_history must be >= 1")
        if not self.floor > 0 or self.default_margin < 0:
            raise ModelError("the forecast's floor must be > 0 and its default margin >= 0")
        if not (self.shift_sigmas >= 0 and math.isfinite(self.shift_sigmas)) or not self.min_shift >= 0:
            raise ModelError("the forecast's level-shift threshold and minimum shift must be >= 0")

    @property
    def steps(self) -> int:
        """The horizon in updates (at least one)."""
        return max(1, math.ceil(self.horizon_s / self.interval_s - 1e-9))


@dataclass(frozen=True, slots=True)
class ForecastState:
    """The forecaster's memory: Holt's level and trend (log req/s, per step), the step count, the horizon
    forecasts still waiting for their outcome, the latest log rates, the last errors, the log rate the
    last update planned for (the hysteresis' memory) and the step of the last level shift (None: none).
    Small: a few hundred numbers at most."""

    level: float | None = None
    trend: float = 0.0
    step: int = 0
    pending: tuple[float, ...] = ()  # forecasts of the horizon's largest log rate, oldest first
    recent: tuple[float, ...] = ()  # the latest log rates, oldest first
    errors: tuple[float, ...] = ()  # realised − forecast, oldest first
    held: float | None = None  # the log rate planned for at the last update
    shifted: int | None = None  # the step of the last level shift

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (floats rounded to 6 significant digits)."""

        def r(values: Sequence[float]) -> list[float]:
            return [float(f"{v:.6g}") for v in values]

        return {
            "level": None if self.level is None else float(f"{self.level:.6g}"),
            "trend": float(f"{self.trend:.6g}"),
            "step": self.step,
            "pending": r(self.pending),
            "recent": r(self.recent),
            "errors": r(self.errors),
            **({} if self.held is None else {"held": float(f"{self.held:.6g}")}),
            **({} if self.shifted is None else {"shifted": self.shifted}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ForecastState:
        try:
            level = data.get("level")
            held = data.get("held")
            shifted = data.get("shifted")
            return cls(
                level=None if level is None else float(level),
                trend=float(data.get("trend", 0.0)),
                step=int(data.get("step", 0)),
                pending=tuple(float(v) for v in data.get("pending", ())),
                recent=tuple(float(v) for v in data.get("recent", ())),
                errors=tuple(float(v) for v in data.get("errors", ())),
                held=None if held is None else float(held),
                shifted=None if shifted is None else int(shifted),
            )
        except (TypeError, ValueError, AttributeError) as exc:
            raise ModelError(f"not a forecast state: {exc}") from None


@dataclass(frozen=True, slots=True)
class Forecast:
    """The current rate's smoothed value, the point forecast of the horizon's peak, its upper quantile,
    the rate to plan for (the upper quantile, held up to the scale-down quantile: see the module's
    docstring) (all req/s), and how many past horizons the quantiles rest on."""

    level: float
    point: float
    upper: float
    planned: float
    errors: int
    # Whether the hysteresis holds the plans on the forecaster's own errors: a scale-down quantile is
    # set and the warm-up is over (``min_history`` errors). Before, both quantiles still lean on the
    # one default margin (:func:`_margin`), and the longer scale-down window holds the plans as well.
    holds: bool = False


def _horizon_point(config: ForecastConfig, state: ForecastState) -> float:
    """The largest per-step point forecast (log req/s) over the next ``config.steps`` steps."""
    assert state.level is not None
    # Over the horizon the largest of level + (φ + ... + φ^k)·trend: its first or its last step.
    phi = config.damping
    ahead = config.steps if phi == 1.0 else phi * (1.0 - phi**config.steps) / (1.0 - phi)
    return state.level + max(phi * state.trend, ahead * state.trend)


def update(state: ForecastState, rate: float, config: ForecastConfig) -> ForecastState:
    """The state after observing ``rate`` (req/s, the mean over the interval just ended)."""
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.0 <= rate < math.inf:
        raise ModelError(f"an observed rate must be a finite number >= 0, got {rate!r}")
    y = math.log(rate + config.floor)
    step = state.step + 1
    h = config.steps
    # Errors of the horizon forecasts whose horizon this observation completes.
    recent = (*state.recent, y)[-h:]
    pending, errors = state.pending, state.errors
    if len(pending) == h and len(recent) == h:
        errors = (*errors, max(recent) - pending[0])[-config.history :]
        pending = pending[1:]
    if state.level is not None and _is_shift(state, y, config):
        # A new level: taken as it is, the trend as it was, and no horizon forecast made before it (or
        # error of one) kept: the step is neither a climb to project nor an error to plan for again.
        fresh = ForecastState(y, config.damping * state.trend, step, (), (y,), state.errors, state.held, step)
        fresh = replace(fresh, pending=(_horizon_point(config, fresh),))
    elif state.level is None:
        fresh = ForecastState(y, 0.0, step, (), recent, errors)
        fresh = replace(fresh, pending=(_horizon_point(config, fresh),))
    else:
        damped = config.damping * state.trend
        level = config.alpha * y + (1.0 - config.alpha) * (state.level + damped)
        trend = config.beta * (level - state.level) + (1.0 - config.beta) * damped
        fresh = ForecastState(level, trend, step, pending, recent, errors, state.held, state.shifted)
        fresh = replace(fresh, pending=(*pending, _horizon_point(config, fresh))[-h:])
    return replace(fresh, held=_levels(fresh, config)[2])


def _is_shift(state: ForecastState, y: float, config: ForecastConfig) -> bool:
    """Whether the log rate ``y`` is a level shift up from ``state`` (the module doc): above the one-step
    forecast by more than ``shift_sigmas`` robust standard deviations of the horizon errors (1.4826 ×
    their median absolute deviation) and by at least ``min_shift``."""
    if config.shift_sigmas <= 0 or len(state.errors) < config.min_history:
        return False
    assert state.level is not None
    errors = np.array(state.errors)
    spread = 1.4826 * float(np.median(np.abs(errors - np.median(errors))))
    rise = y - (state.level + config.damping * state.trend)
    return rise > max(config.shift_sigmas * spread, config.min_shift)


def _margin(state: ForecastState, config: ForecastConfig, quantile: float) -> float:
    """The horizon error's ``quantile`` (log), never below 0: a quantile under the point forecast would
    plan for less than expected.

    During the warm-up (fewer than ``min_history`` errors) a blend: ``default_margin`` weighed by the
    share of the warm-up still to come, the quantile of the errors seen so far by the share done
    (``k / min_history`` after ``k`` errors). The margin so moves from the prior to the data as the
    data comes, with no jump where the warm-up ends, and a forecaster whose first errors are large
    widens it instead of waiting for twenty of them."""
    k = len(state.errors)
    if k == 0:
        return config.default_margin
    empirical = max(float(np.quantile(np.array(state.errors), quantile)), 0.0)
    if k >= config.min_history:
        return empirical
    done = k / config.min_history
    return (1.0 - done) * config.default_margin + done * empirical


def _levels(state: ForecastState, config: ForecastConfig) -> tuple[float, float, float]:
    """The horizon's point forecast, its upper quantile and the rate to plan for (log req/s): the upper
    forecast, or with a hysteresis, the rate planned before within [upper, scale-down quantile]."""
    assert state.level is not None
    point = _horizon_point(config, state)
    up = point + _margin(state, config, config.quantile)
    if config.down_quantile is None or state.held is None:
        return point, up, up
    return point, up, max(up, min(point + _margin(state, config, config.down_quantile), state.held))


def forecast(state: ForecastState, config: ForecastConfig) -> Forecast:
    """The forecast from ``state``: the horizon's peak rate, point and upper quantile, and the rate to
    plan for (req/s). A state that has seen nothing forecasts 0."""
    if state.level is None:
        return Forecast(0.0, 0.0, 0.0, 0.0, 0, holds=False)
    point, up, planned = _levels(state, config)
    floor = config.floor

    def rate(log_rate: float) -> float:
        return max(math.exp(log_rate) - floor, 0.0)

    return Forecast(
        level=rate(state.level),
        point=rate(point),
        upper=rate(up),
        planned=rate(planned),
        errors=len(state.errors),
        holds=config.down_quantile is not None and len(state.errors) >= config.min_history,
    )


def replay(
    rates: Iterable[float], config: ForecastConfig, state: ForecastState | None = None
) -> ForecastState:
    """The state after observing ``rates`` in order, one per interval (from ``state``, else a new one):
    a forecaster warmed up on a model's past rates, as if it had run through them."""
    out = state if state is not None else ForecastState()
    for rate in rates:
        out = update(out, rate, config)
    return out


def trailing_run(points: Sequence[tuple[float, float]], step_s: float) -> list[float]:
    """The rates of the run of ``points`` ((time, req/s), oldest first) that ends with the last one,
    back to the first gap: each point one step after the one before it (within half a step) with a
    finite rate >= 0. The forecaster learns successive intervals only, up to the latest."""
    if not step_s > 0:
        raise ModelError(f"a step must be > 0 s, got {step_s!r}")
    run: list[float] = []
    later: float | None = None  # the time of the point after this one
    for t, rate in reversed(points):
        if not (math.isfinite(rate) and rate >= 0.0):
            break
        if later is not None and abs((later - t) - step_s) > 0.5 * step_s:
            break
        run.append(rate)
        later = t
    run.reverse()
    return run
