"""Learn a variant's performance parameters (α β γ δ) online from the windowed metrics vLLM exports.

One estimator per variant (a model on one accelerator). Every cycle it is given one
:class:`PodWindow` per serving pod: means over the last window, computed by Prometheus from what vLLM
already exports. Two straight lines are fitted, each on quantities that measure service time only
(never TTFT, which mixes in queueing):

* **decode**: the mean inter-token latency against the batch size, ``ITL = α + β·b``;
* **prefill**: the mean prefill time (scheduled → first token) against prompt tokens times the batch
  the request joined, ``prefill = γ + δ·L·b``.

Which batch? The window gives the time-average ``m`` of running requests, but a token is produced
more often while the batch is small (a step takes ``α + β·b``), a request joining the batch counts
itself, and when the load moved during the window, requests and tokens came mostly while the batch was
large. With the batch spread like a binomial of ``N`` (the maximum batch) around ``m`` — Poisson-like
when ``m ≪ N``, pinned at ``N`` when saturated — and ``c ≥ 1`` its variance over its mean as the scraped
gauge shows it (``c > 1`` when the load moved):

* the batch a token sees is ``m + (1 − m/N)·c·α/(α + β·m)``;
* the batch a request joins is that plus ``(1 − m/N)·β·m/(α + β·m)`` (between ``m`` and ``m + c``).

Windows in which the load moved a lot (``c`` above 1.5) weigh less, ``(1.5/c)⁴``: which batch their
requests saw is only roughly known.

Identification: α and β separate only when the batch varies between windows or between pods; γ and δ
when prompt length × batch does. A slope whose regressor has not varied keeps its prior (the hand
profile's value) and says so; its intercept is then fitted given that slope.

Each line is a weighted least-squares fit over exponentially forgotten sufficient statistics
(:class:`~variant_autoscaler.core.linefit.Sums`), with relative-error weights, Huber weights once the
line is established (an outlier window is down-weighted, a gross one dropped), a drift detector (the
same-signed misfit for several cycles discards most of the history, so a new engine version is
followed within minutes rather than a half-life), bounded steps (each published parameter moves by at
most a fraction of itself per cycle), non-negative parameters, and a hold: windows that overlap a scale
event (plus a settling time) are not used.

Pure: the caller passes the time; the state is a frozen value with a JSON round-trip
(:meth:`EstimatorState.to_dict` / :meth:`EstimatorState.from_dict`) so that it can live in the
VariantAutoscaling's status and survive a restart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from variant_autoscaler.core.linefit import Confidence, LineSolution, Sums, huber_weight
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.errors import ModelError

__all__ = [
    "STATE_VERSION",
    "EstimatorConfig",
    "EstimatorState",
    "LearnedProfile",
    "LineState",
    "ParamEstimate",
    "PodWindow",
    "Update",
    "admission_batch",
    "decode_batch",
    "learned_profile",
    "update",
]

STATE_VERSION = 1


# ---- observations ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodWindow:
    """One pod's means over the window ``[end − seconds, end]``, as Prometheus computes them.

    * ``itl_ms``: mean inter-token latency (``rate(sum)/rate(count)`` of the ITL histogram);
      ``decode_tokens``: how many inter-token gaps the window holds (the weight of that mean).
    * ``prefill_ms``: mean prefill time of the requests that finished in the window;
      ``requests``: how many they are; ``prompt_tokens``: their mean prompt length.
    * ``running``: time-average number of running requests over the window. Best measured without
      sampling, by Little's law: ``rate(ITL sum)`` is the time-average number of requests decoding and
      ``rate(prefill sum)`` the number prefilling; else the gauge's ``avg_over_time``.
    * ``gauge_mean`` / ``gauge_var``: mean and variance of the scraped ``num_requests_running``
      samples in the window (``avg_over_time`` / ``stdvar_over_time``): how much the batch moved.
    * ``joined_batch``: the batch the window's requests joined, prompt-weighted (``Σ L·b / Σ L``), where
      it is known. vLLM does not export it, so the operator never has it and the batch is inferred from
      ``running`` (:func:`admission_batch`); a benchmark on emulated servers sets it to measure what
      that inference costs (``bench/profile_learning.py``).

    ``None`` (or a count of 0) marks what the window does not have.
    """

    namespace: str
    pod: str
    model: str
    end: float
    seconds: float
    itl_ms: float | None = None
    decode_tokens: float = 0.0
    prefill_ms: float | None = None
    requests: float = 0.0
    prompt_tokens: float | None = None
    running: float | None = None
    gauge_mean: float | None = None
    gauge_var: float | None = None
    joined_batch: float | None = None

    @property
    def start(self) -> float:
        return self.end - self.seconds

    @property
    def dispersion(self) -> float:
        """Variance over mean of the running batch, at least 1 (what a steady Poisson load gives).

        More than 1 when the load moved during the window: requests and tokens then come more often
        while the batch is large, and see a larger batch than the time-average.
        """
        m, v = self.gauge_mean, self.gauge_var
        if m is None or v is None or not (math.isfinite(m) and math.isfinite(v)) or m <= 0:
            return 1.0
        return min(max(v / m, 1.0), MAX_DISPERSION)


MAX_DISPERSION = 10.0
STEADY_DISPERSION = 1.5
"""Windows whose batch dispersion exceeds this weigh ``(1.5/dispersion)⁴``: the load moved during them,
and which batch their requests and tokens saw is then only roughly known."""


def _steadiness(dispersion: float) -> float:
    return min(1.0, (STEADY_DISPERSION / dispersion) ** 4)


def _finite_positive(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0


def _token_share(m: float, alpha: float | None, beta: float | None) -> float:
    """Share of a decode step's time that does not grow with the batch, ``α/(α + β·m)``."""
    if alpha is not None and beta is not None and alpha + beta * m > 0:
        return alpha / (alpha + beta * m)
    return 0.5


def decode_batch(
    running: float,
    max_batch: int | None,
    alpha: float | None,
    beta: float | None,
    dispersion: float = 1.0,
) -> float:
    """The batch size an average token sees, from the time-average ``running`` (see the module doc)."""
    m = max(running, 0.0)
    spread = 1.0
    if max_batch is not None and max_batch > 0:
        m = min(m, float(max_batch))
        spread = 1.0 - m / max_batch
    return m + spread * dispersion * _token_share(m, alpha, beta)


def admission_batch(
    running: float,
    max_batch: int | None,
    alpha: float | None = None,
    beta: float | None = None,
    dispersion: float = 1.0,
) -> float:
    """The batch size a request joins (itself included), from the time-average ``running``.

    Requests arrive at the rate tokens are produced (both scale with batch / step time), so the batch
    they join is the token-weighted batch plus the part of their own slot a token does not count.
    """
    m = max(running, 0.0)
    spread = 1.0
    if max_batch is not None and max_batch > 0:
        m = min(m, float(max_batch))
        spread = 1.0 - m / max_batch
    share = _token_share(m, alpha, beta)
    return max(1.0, decode_batch(running, max_batch, alpha, beta, dispersion) + spread * (1.0 - share))


# ---- configuration -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EstimatorConfig:
    """Tuning of the online estimator; the defaults are what the benchmark in docs/benchmarks.md used.

    * ``half_life_s``: old windows count half as much after this much time *with data* (an idle
      variant keeps what it learned); ``max_gap_s`` caps the time one cycle can forget.
    * ``settle_s``: windows starting earlier than this after a scale event are not used.
    * ``max_step``: a published parameter moves by at most this fraction of itself per cycle (or
      2 % of the line's mean time, for a parameter near zero).
    * ``huber_k``: residuals beyond ``k`` robust standard deviations are down-weighted;
      ``reject_k`` / ``reject_rel``: beyond both, dropped (counted as outliers).
    * ``drift_k`` / ``drift_rel`` / ``drift_cycles``: a cycle whose median residual is beyond both
      thresholds counts towards a drift; that many in a row with the same sign keep only
      ``drift_keep`` of the history.
    * ``min_decode_tokens`` / ``min_prefill_requests``: windows with less are not used; ``*_half``:
      the count at which a window weighs half as much as a full one.
    """

    half_life_s: float = 1800.0
    max_gap_s: float = 300.0
    settle_s: float = 60.0
    max_step: float = 0.25
    huber_k: float = 2.0
    reject_k: float = 8.0
    reject_rel: float = 0.5
    drift_k: float = 3.0
    drift_rel: float = 0.08
    drift_cycles: int = 3
    drift_keep: float = 0.02
    established_points: float = 5.0
    min_decode_tokens: float = 20.0
    decode_tokens_half: float = 50.0
    min_prefill_requests: float = 3.0
    prefill_requests_half: float = 5.0

    def __post_init__(self) -> None:
        if not (self.half_life_s > 0 and self.max_gap_s > 0 and self.settle_s >= 0):
            raise ModelError("estimator: half_life_s and max_gap_s must be > 0, settle_s >= 0")
        if not 0 < self.max_step <= 10:
            raise ModelError(f"estimator: max_step must be in (0, 10], got {self.max_step}")
        if not 0 < self.drift_keep <= 1 or self.drift_cycles < 1:
            raise ModelError("estimator: drift_keep must be in (0, 1] and drift_cycles >= 1")


DEFAULT_CONFIG = EstimatorConfig()
_INITIAL_SCALE = 0.03
_SCALE_RATE = 0.2
_MIN_SCALE = 0.01 / 1.4826


# ---- state -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LineState:
    """One line's learning state: its sums, the published parameters and the robustness bookkeeping."""

    sums: Sums = field(default_factory=Sums)
    intercept: float | None = None
    slope: float | None = None
    scale: float = _INITIAL_SCALE
    drift_run: int = 0
    updated_at: float | None = None
    drift_at: float | None = None
    outliers: int = 0
    windows: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "sums": [_num(v) for v in self.sums.as_list()],
            "value": [None if self.intercept is None else _num(self.intercept),
                      None if self.slope is None else _num(self.slope)],
            "scale": _num(self.scale),
            "driftRun": self.drift_run,
            "updatedAt": self.updated_at,
            "driftAt": self.drift_at,
            "outliers": self.outliers,
            "windows": self.windows,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LineState:
        value = data.get("value", [None, None])
        if not isinstance(value, list) or len(value) != 2:
            raise ValueError("value must be [intercept, slope]")
        intercept, slope = (_opt_float(v, "value") for v in value)
        return cls(
            sums=Sums.from_list(data.get("sums", [0.0] * 10)),
            intercept=intercept,
            slope=slope,
            scale=_float(data.get("scale", _INITIAL_SCALE), "scale"),
            drift_run=int(data.get("driftRun", 0)),
            updated_at=_opt_float(data.get("updatedAt"), "updatedAt"),
            drift_at=_opt_float(data.get("driftAt"), "driftAt"),
            outliers=int(data.get("outliers", 0)),
            windows=int(data.get("windows", 0)),
        )


@dataclass(frozen=True, slots=True)
class EstimatorState:
    """Everything the estimator keeps about one variant; JSON-serialisable (a few hundred bytes)."""

    decode: LineState = field(default_factory=LineState)
    prefill: LineState = field(default_factory=LineState)
    updated_at: float | None = None
    held_until: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "updatedAt": self.updated_at,
            "heldUntil": self.held_until,
            "decode": self.decode.to_dict(),
            "prefill": self.prefill.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EstimatorState:
        """The state :meth:`to_dict` wrote; ``ModelError`` if it is not one (start afresh then)."""
        try:
            if data.get("version") != STATE_VERSION:
                raise ValueError(f"unknown version {data.get('version')!r}")
            return cls(
                decode=LineState.from_dict(data["decode"]),
                prefill=LineState.from_dict(data["prefill"]),
                updated_at=_opt_float(data.get("updatedAt"), "updatedAt"),
                held_until=_opt_float(data.get("heldUntil"), "heldUntil"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ModelError(f"learned-profile state is not readable: {exc}") from exc


def _num(value: float) -> float:
    """Nine significant digits: compact in JSON, and stable through a round-trip."""
    return float(f"{value:.9g}")


def _float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _opt_float(value: Any, name: str) -> float | None:
    return None if value is None else _float(value, name)


# ---- the update --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Update:
    """What one cycle did: the new state and, for logs and Events, what was used and noticed."""

    state: EstimatorState
    decode_windows: int = 0
    prefill_windows: int = 0
    outliers: int = 0
    held: bool = False
    drift: tuple[str, ...] = ()
    """Names of the lines (``decode``, ``prefill``) whose drift detector fired this cycle."""


def update(
    state: EstimatorState,
    windows: Sequence[PodWindow],
    *,
    now: float,
    prior: ServiceParms | None = None,
    max_batch: int | None = None,
    last_scale: float | None = None,
    config: EstimatorConfig = DEFAULT_CONFIG,
) -> Update:
    """Fold one cycle's pod windows into ``state``.

    ``prior`` is the hand profile, if any (the starting point, and the value of a parameter that
    cannot be identified); ``max_batch`` the servers' maximum batch (``--max-num-seqs``);
    ``last_scale`` the time of the variant's last replica change (windows overlapping it and the
    settling time after it are not used).
    """
    held_until: float | None = None
    usable: list[PodWindow] = []
    for window in windows:
        if last_scale is not None and window.start < last_scale + config.settle_s:
            held_until = max(held_until or 0.0, last_scale + config.settle_s + window.seconds)
            continue
        usable.append(window)
    held = bool(windows) and not usable and held_until is not None

    dec = state.decode
    alpha = dec.intercept if dec.intercept is not None else (prior.alpha if prior else None)
    beta = dec.slope if dec.slope is not None else (prior.beta if prior else None)
    decode_points: list[tuple[float, float, float]] = []
    prefill_points: list[tuple[float, float, float]] = []
    for w in usable:
        if w.running is None or not math.isfinite(w.running) or w.running < 0:
            continue
        if _finite_positive(w.itl_ms) and w.decode_tokens >= config.min_decode_tokens and w.running > 0:
            assert w.itl_ms is not None
            x = decode_batch(w.running, max_batch, alpha, beta, w.dispersion)
            weight = (
                w.decode_tokens / (w.decode_tokens + config.decode_tokens_half) * _steadiness(w.dispersion)
            )
            decode_points.append((x, w.itl_ms, weight))
        if (
            _finite_positive(w.prefill_ms)
            and _finite_positive(w.prompt_tokens)
            and w.requests >= config.min_prefill_requests
        ):
            assert w.prefill_ms is not None and w.prompt_tokens is not None
            joined = w.joined_batch
            if joined is None or not _finite_positive(joined):
                joined = admission_batch(w.running, max_batch, alpha, beta, w.dispersion)
            x = w.prompt_tokens * joined
            weight = w.requests / (w.requests + config.prefill_requests_half) * _steadiness(w.dispersion)
            prefill_points.append((x, w.prefill_ms, weight))

    decode_prior = (prior.alpha, prior.beta) if prior else None
    prefill_prior = (prior.gamma, prior.delta) if prior else None
    new_decode, dec_out, dec_drift = _update_line(state.decode, decode_points, now, decode_prior, config)
    new_prefill, pre_out, pre_drift = _update_line(state.prefill, prefill_points, now, prefill_prior, config)
    drift = tuple(name for name, fired in (("decode", dec_drift), ("prefill", pre_drift)) if fired)
    return Update(
        state=EstimatorState(
            decode=new_decode,
            prefill=new_prefill,
            updated_at=now if (decode_points or prefill_points) else state.updated_at,
            held_until=held_until if held_until is not None and held_until > now else None,
        ),
        decode_windows=len(decode_points),
        prefill_windows=len(prefill_points),
        outliers=dec_out + pre_out,
        held=held,
        drift=drift,
    )


def _update_line(
    line: LineState,
    points: Sequence[tuple[float, float, float]],
    now: float,
    prior: tuple[float, float] | None,
    config: EstimatorConfig,
) -> tuple[LineState, int, bool]:
    """One cycle of one line: forget, weigh, detect drift, add, solve, take a bounded step."""
    intercept, slope = line.intercept, line.slope
    if intercept is None and prior is not None:
        intercept, slope = prior
    if not points:
        return replace(line, intercept=intercept, slope=slope), 0, False

    sums = line.sums
    if line.updated_at is not None and now > line.updated_at:
        elapsed = min(now - line.updated_at, config.max_gap_s)
        sums = sums.scaled(0.5 ** (elapsed / config.half_life_s))

    current = sums.solve(slope)
    # Residuals against the current fit of the history (not the published values, which may still be
    # walking towards it): the robust weights and the drift test judge the data, not the step limit.
    established = (
        current is not None
        and current.slope_identified
        and current.slope is not None
        and current.points >= config.established_points
    )
    residuals: list[float] = []
    for x, y, _ in points:
        if established and current is not None and current.slope is not None:
            yhat = current.intercept + current.slope * x
        else:
            yhat = y
        yhat = yhat if yhat > 0 else y
        residuals.append((y - yhat) / yhat)

    sigma = max(1.4826 * line.scale, 0.01)
    scale, drift_run, drift_at, drifted = line.scale, line.drift_run, line.drift_at, False
    robust = [1.0] * len(points)
    outliers = 0
    if established:
        typical = _median(residuals)
        if abs(typical) > max(config.drift_k * sigma, config.drift_rel):
            sign = 1 if typical > 0 else -1
            drift_run = drift_run + sign if drift_run * sign > 0 else sign
        else:
            drift_run = 0
        if abs(drift_run) >= config.drift_cycles:
            # The same misfit, cycle after cycle: the server changed. Keep little of the history.
            sums = sums.scaled(config.drift_keep)
            drifted, drift_run, drift_at = True, 0, now
            scale = _INITIAL_SCALE
        else:
            for i, r in enumerate(residuals):
                if abs(r) > max(config.reject_k * sigma, config.reject_rel):
                    robust[i] = 0.0
                    outliers += 1
                else:
                    robust[i] = huber_weight(r, sigma, config.huber_k)
    for (x, y, weight), h in zip(points, robust, strict=True):
        if h > 0:
            # Relative-error weights from the measured value, not the prediction: a prediction from a
            # prior that is off would leave stale weights in the history.
            sums = sums.add(x, y, weight * h, y)
    if established and not drifted:
        spread = min(_median([abs(r) for r in residuals]), 3.0 * sigma)
        scale = max((1 - _SCALE_RATE) * scale + _SCALE_RATE * spread, _MIN_SCALE)

    solution = sums.solve(slope if slope is not None else None)
    new_intercept, new_slope = intercept, slope
    if solution is not None and solution.slope is not None:
        if intercept is None or slope is None:
            new_intercept, new_slope = solution.intercept, solution.slope
        else:
            new_intercept = _step(intercept, solution.intercept, solution.y_mean, config.max_step)
            slope_floor = solution.y_mean / solution.x_mean if solution.x_mean > 0 else solution.y_mean
            new_slope = _step(slope, solution.slope, slope_floor, config.max_step)
    elif solution is not None and intercept is None:
        new_intercept = solution.intercept  # a level without a slope: shown, never used
    return (
        LineState(
            sums=sums,
            intercept=new_intercept,
            slope=new_slope,
            scale=scale,
            drift_run=drift_run,
            updated_at=now,
            drift_at=drift_at,
            outliers=line.outliers + outliers,
            windows=line.windows + len(points) - outliers,
        ),
        outliers,
        drifted,
    )


def _step(old: float, target: float, reference: float, max_step: float) -> float:
    """Move from ``old`` towards ``target`` by at most ``max_step·|old|`` (at least 2 % of ``reference``)."""
    limit = max(max_step * abs(old), 0.02 * abs(reference))
    return max(min(target, old + limit), old - limit, 0.0)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


# ---- what was learned --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParamEstimate:
    """One parameter as learned.

    ``source``: ``learned`` (from the metrics), ``prior`` (its regressor has not varied: the hand
    profile's value is kept) or ``none`` (nothing known yet). ``se``: standard error (ms, or ms per
    unit of the regressor); ``impact``: how far that uncertainty moves the predicted time at the mean
    operating point, as a fraction of it; ``confidence``: from ``impact`` and the number of windows.
    """

    name: str
    value: float | None
    source: str
    confidence: Confidence
    se: float | None = None
    impact: float | None = None
    note: str = ""

    @property
    def rse(self) -> float | None:
        """Relative standard error of the parameter itself."""
        if self.se is None or self.value is None or self.value <= 0:
            return None
        return self.se / self.value

    def describe(self) -> str:
        if self.value is None:
            return f"{self.name} unknown ({self.note})" if self.note else f"{self.name} unknown"
        text = f"{self.name} {self.value:.4g}"
        if self.source == "learned" and self.rse is not None:
            text += f" ±{100 * self.rse:.0f}% ({self.confidence.value})"
        elif self.source == "learned":
            text += f" ({self.confidence.value})"
        else:
            text += f" ({self.source})"
        return text


@dataclass(frozen=True, slots=True)
class LearnedProfile:
    """The learned parameters of one variant, their confidence, and where they were learned.

    ``batch_range`` and ``prefill_range``: mean ± standard deviation of the decode batch and of
    prompt tokens × batch over the windows that count (the operating points visited).
    """

    alpha: ParamEstimate
    beta: ParamEstimate
    gamma: ParamEstimate
    delta: ParamEstimate
    decode_windows: float
    prefill_windows: float
    batch_range: tuple[float, float]
    prefill_range: tuple[float, float]
    updated_at: float | None
    held_until: float | None
    drift_at: float | None

    @property
    def params(self) -> tuple[ParamEstimate, ParamEstimate, ParamEstimate, ParamEstimate]:
        return (self.alpha, self.beta, self.gamma, self.delta)

    @property
    def parms(self) -> ServiceParms | None:
        """The parameters as the analyzer takes them; None while any of them is unknown."""
        values = [p.value for p in self.params]
        if any(v is None for v in values):
            return None
        a, b, g, d = (float(v) for v in values if v is not None)
        if a + b <= 0:
            return None
        return ServiceParms(alpha=a, beta=b, gamma=g, delta=d)

    @property
    def learned_all(self) -> bool:
        """Every parameter was learned from metrics (none only carried over from the prior)."""
        return all(p.source == "learned" for p in self.params)

    @property
    def confidence(self) -> Confidence:
        """The weakest parameter's confidence."""
        return min((p.confidence for p in self.params), key=lambda c: c.rank)

    def confident(self, level: Confidence = Confidence.MEDIUM) -> bool:
        """Every parameter learned, each with at least ``level`` confidence."""
        return self.learned_all and self.confidence.at_least(level)

    def summary(self) -> str:
        """One line for ``kubectl describe`` and logs, e.g. ``α 20.6 ±1% (high), β 0.41 ±3% (high), …``."""
        return ", ".join(p.describe() for p in self.params)

    def to_status(self) -> dict[str, Any]:
        """The status view: value, confidence, relative error and source of every parameter."""

        def one(p: ParamEstimate) -> dict[str, Any]:
            out: dict[str, Any] = {"source": p.source, "confidence": p.confidence.value}
            if p.value is not None:
                out["value"] = f"{p.value:.6g}"
            if p.rse is not None and math.isfinite(p.rse):
                out["relativeError"] = f"{p.rse:.3f}"
            if p.impact is not None and math.isfinite(p.impact):
                out["impact"] = f"{p.impact:.3f}"
            if p.note:
                out["note"] = p.note
            return out

        return {
            "alpha": one(self.alpha),
            "beta": one(self.beta),
            "gamma": one(self.gamma),
            "delta": one(self.delta),
            "confidence": self.confidence.value,
            "decodeWindows": round(self.decode_windows, 1),
            "prefillWindows": round(self.prefill_windows, 1),
        }


def learned_profile(state: EstimatorState, prior: ServiceParms | None = None) -> LearnedProfile:
    """What ``state`` has learned, with a confidence per parameter (see :class:`ParamEstimate`)."""
    dec_prior = (prior.alpha, prior.beta) if prior else None
    pre_prior = (prior.gamma, prior.delta) if prior else None
    alpha, beta, dec_range = _line_params(state.decode, dec_prior, ("alpha", "beta"), "the batch size")
    gamma, delta, pre_range = _line_params(
        state.prefill, pre_prior, ("gamma", "delta"), "prompt tokens × batch"
    )
    drifts = [t for t in (state.decode.drift_at, state.prefill.drift_at) if t is not None]
    return LearnedProfile(
        alpha=alpha,
        beta=beta,
        gamma=gamma,
        delta=delta,
        decode_windows=state.decode.sums.n,
        prefill_windows=state.prefill.sums.n,
        batch_range=dec_range,
        prefill_range=pre_range,
        updated_at=state.updated_at,
        held_until=state.held_until,
        drift_at=max(drifts) if drifts else None,
    )


def _line_params(
    line: LineState, prior: tuple[float, float] | None, names: tuple[str, str], regressor: str
) -> tuple[ParamEstimate, ParamEstimate, tuple[float, float]]:
    a_name, b_name = names
    prior_a, prior_b = prior if prior is not None else (None, None)
    intercept = line.intercept if line.intercept is not None else prior_a
    slope = line.slope if line.slope is not None else prior_b
    solution = line.sums.solve(slope)
    if solution is None:
        note = "no metrics yet"
        src = "prior" if prior is not None else "none"
        return (
            ParamEstimate(a_name, intercept, src, Confidence.NONE, note=note),
            ParamEstimate(b_name, slope, src, Confidence.NONE, note=note),
            (0.0, 0.0),
        )
    lo = solution.x_mean - solution.x_sd
    hi = solution.x_mean + solution.x_sd
    span = (max(lo, 0.0), hi)
    if not solution.slope_identified:
        if solution.unidentified == "few":
            note = f"too few windows yet ({solution.points:.1f})"
        elif solution.unidentified == "flat":
            note = f"{regressor} has not varied (about {solution.x_mean:.3g} ± {solution.x_sd:.2g})"
        else:
            note = (
                f"{regressor} has not varied enough for the scatter "
                f"(about {solution.x_mean:.3g} ± {solution.x_sd:.2g})"
            )
        if slope is None:
            return (
                ParamEstimate(a_name, None, "none", Confidence.NONE, note=note),
                ParamEstimate(b_name, None, "none", Confidence.NONE, note=note + "; no prior"),
                span,
            )
        return (
            ParamEstimate(
                a_name,
                intercept,
                "learned",
                solution.intercept_confidence,
                se=solution.intercept_se,
                impact=solution.intercept_impact,
                note=f"fitted with {b_name} held at its prior",
            ),
            ParamEstimate(
                b_name, slope, "prior", Confidence.NONE, note=note + f"; {b_name} kept at its prior"
            ),
            span,
        )
    return (
        _estimate(a_name, intercept, solution.intercept, solution, intercept=True),
        _estimate(b_name, slope, solution.slope, solution, intercept=False),
        span,
    )


def _estimate(
    name: str, published: float | None, fitted: float | None, solution: LineSolution, *, intercept: bool
) -> ParamEstimate:
    se = solution.intercept_se if intercept else solution.slope_se
    impact = solution.intercept_impact if intercept else solution.slope_impact
    level = solution.intercept_confidence if intercept else solution.slope_confidence
    note = ""
    if solution.bound == ("intercept" if intercept else "slope"):
        note = "held at 0 (the fit wanted a negative value)"
    value = published if published is not None else fitted
    if value is not None and fitted is not None and se is not None and abs(value - fitted) > 2.0 * se + 1e-12:
        # The published value is still walking (bounded steps) towards the fit: not there yet.
        level = min(level, Confidence.LOW, key=lambda c: c.rank)
        note = note or f"converging towards {fitted:.4g}"
    return ParamEstimate(name, value, "learned", level, se=se, impact=impact, note=note)
