"""The main ConfigMap (``workload-variant-autoscaler-variantautoscaling-config``) in WVA's format.

WVA's keys keep their meaning: ``PROMETHEUS_*``, ``GLOBAL_OPT_INTERVAL`` (a Go duration) and
``WVA_SCALE_TO_ZERO``. Ours are optional and default to WVA's behaviour:

========================================  ===========================================================
``OPTIMIZER_MODE``                        ``unlimited`` (WVA; GPU inventory ignored) or ``limited``
``SATURATION_POLICY``                     limited mode, when GPUs run out: ``None``,
                                          ``PriorityExhaustive``, ``PriorityRoundRobin``, ``RoundRobin``
``DEFAULT_ACTUATION_MODE``                ``metrics`` (WVA), ``patch`` or ``shadow``
``SCALE_DOWN_STABILIZATION_WINDOW``       default scale-down window (duration); unset: 5m in patch and
                                          shadow modes (1m for attainment classes whose forecast
                                          holds their plans), 0 in metrics mode (the HPA stabilises)
``METRICS_WINDOW``                        PromQL rate window (default ``1m``, WVA's)
``METRICS_STALENESS``                     newest sample older than this means stale (default ``2m``)
``QUEUE_DRAIN_TIME``                      time allowed to drain a waiting queue when estimating
                                          demand (default ``5m``)
``PENDING_REPLICAS_TIMEOUT``              how long new replicas may stay unready before the operator
                                          adds more anyway (default ``10m``)
``BATCH_STABLE_CYCLES``                   cycles a new batch size must persist before patch mode
                                          applies it (default ``3``)
``BATCH_SIZES``                           batch sizes the optimizer tries per accelerator: the
                                          server's, then halving (default ``1``: the server's only,
                                          as WVA; more only matters with ``applyMaxBatch``)
``KEEP_ACCELERATOR``                      ``true`` (default, WVA's): a variant stays on the accelerator
                                          it runs on; ``false`` lets the plan recommend another one
                                          of its profile (reported; actuation cannot move hardware)
``SATURATION_FLOOR``                      ``true`` (default, WVA's later rule): for a variant with a
                                          profile, the saturation analyzers are a safety floor under
                                          the model's decision; ``false``: the model alone
``STARTUP_TIME``                          how long a new replica takes to serve (default ``3m``): the
                                          forecast's horizon is this plus one interval
``FORECAST_QUANTILE``                     attainment classes scale up for this quantile of the
                                          demand forecast over the horizon (default ``0.5``; ``0``:
                                          no forecast)
``FORECAST_SCALE_DOWN_QUANTILE``          ... and scale down only below this quantile (default
                                          ``0.9``; ``0``: no hysteresis); with it, their default
                                          scale-down window in patch mode is ``1m``, not ``5m``
``FORECAST_TREND_DAMPING``                the forecast's trend damping in (0, 1] (default ``1``:
                                          Holt's linear trend; ``0.9`` forecasts less past a step)
``FORECAST_LEVEL_SHIFT``                  a rise beyond this many robust standard deviations of the
                                          forecast's errors is a new level, not a climb (default
                                          ``4``; ``0``: off)
``FORECAST_HISTORY``                      how far back a new forecaster (a model seen for the first
                                          time, with no state to resume) learns the model's rate from
                                          Prometheus, one range query (default ``4h``; ``0``: none)
``BURST_GUARD_INTERVAL``                  how often the burst guard reads the queues of models with
                                          attainment classes (default ``15s``; ``0``: off)
``BURST_GUARD_RISE_WINDOW``               a window shorter than ``METRICS_WINDOW`` over which the guard
                                          also reads arrivals: faster over it, they are rising, and
                                          the guard projects the rise over the start-up (default half
                                          of ``METRICS_WINDOW``; ``0``: off)
``CHUNKED_PREFILL``                       ``true`` (default: vLLM V1): a prompt is prefilled inside one step
                                          beside the running decodes; ``false``: at the pace of the
                                          whole batch (WVA's accounting); the tail model's TTFT
``MAX_NUM_BATCHED_TOKENS``                the servers' token budget per step, vLLM's
                                          ``--max-num-batched-tokens`` (default ``2048``): with
                                          chunked prefill, how many prompt tokens one step holds
                                          beside the decodes (long prompts take several steps)
``ARRIVAL_COUNTER``                       a counter of a model's arriving requests, such as the
                                          inference gateway's ``inference_objective_request_total``
                                          (default: none). Where set, the demand forecast learns its
                                          rate (what arrives, time-outs included, which vLLM's metrics
                                          do not see), and it is the burstiness counter's default
``BURSTINESS_COUNTER``                    the request counter whose counts give a model's burstiness
                                          (default ``ARRIVAL_COUNTER`` where set, else
                                          ``vllm:request_success_total``: an arrival counter is better
                                          where there is one)
========================================  ===========================================================

The main ConfigMap may also hold all of these as YAML under the single key ``config.yaml``, and go by any
of the names WVA gave it; :mod:`variant_autoscaler.api.main_config_sources` reads those forms and the
``--config-file``, and says which value wins.

Parsing is pure: :func:`parse_main_config` takes the ConfigMap's ``data`` and the environment overrides
(read once by :mod:`variant_autoscaler.settings`) and raises :class:`ConfigError` on a bad value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

from variant_autoscaler.api.v1alpha1 import ACTUATION_MODES, ActuationMode
from variant_autoscaler.core.forecast import (
    DEFAULT_DOWN_QUANTILE,
    DEFAULT_QUANTILE,
    DEFAULT_SHIFT_SIGMAS,
    ForecastConfig,
)
from variant_autoscaler.core.workload import DEFAULT_PREFILL_BUDGET
from variant_autoscaler.errors import ConfigError

OptimizerMode = Literal["unlimited", "limited"]
SaturationPolicy = Literal["None", "PriorityExhaustive", "PriorityRoundRobin", "RoundRobin"]

DEFAULT_INTERVAL_SECONDS = 60.0
DEFAULT_PATCH_STABILIZATION_SECONDS = 300.0
#: The default window in patch mode of a variant planned ahead with the forecast's hysteresis
#: (FORECAST_SCALE_DOWN_QUANTILE): the hysteresis holds its plans until the load has gone, which is what
#: the longer window was for (measured: docs/tail-slo.md, "Which quantile").
DEFAULT_AHEAD_STABILIZATION_SECONDS = 60.0

# The Prometheus keys, in WVA's spelling. When the environment sets PROMETHEUS_BASE_URL, every Prometheus
# setting comes from the environment and none from the ConfigMap (WVA's rule).
PROMETHEUS_KEYS: tuple[str, ...] = (
    "PROMETHEUS_BASE_URL",
    "PROMETHEUS_TLS_INSECURE_SKIP_VERIFY",
    "PROMETHEUS_CA_CERT_PATH",
    "PROMETHEUS_CLIENT_CERT_PATH",
    "PROMETHEUS_CLIENT_KEY_PATH",
    "PROMETHEUS_SERVER_NAME",
    "PROMETHEUS_BEARER_TOKEN",
    "PROMETHEUS_TOKEN_PATH",
    "PROMETHEUS_ALLOW_TOKEN_OVER_HTTP",
)

#: Every key the main ConfigMap may set (a unit test checks that parse_main_config reads no other); keys
#: outside it are reported once and ignored. WVA's keys it never used are accepted silently.
MAIN_CONFIG_KEYS: tuple[str, ...] = (
    *PROMETHEUS_KEYS,
    "GLOBAL_OPT_INTERVAL",
    "WVA_SCALE_TO_ZERO",
    "OPTIMIZER_MODE",
    "SATURATION_POLICY",
    "DEFAULT_ACTUATION_MODE",
    "SCALE_DOWN_STABILIZATION_WINDOW",
    "METRICS_WINDOW",
    "METRICS_STALENESS",
    "QUEUE_DRAIN_TIME",
    "PENDING_REPLICAS_TIMEOUT",
    "BATCH_STABLE_CYCLES",
    "BATCH_SIZES",
    "KEEP_ACCELERATOR",
    "STATUS_REFRESH_INTERVAL",
    "SATURATION_FLOOR",
    "STARTUP_TIME",
    "FORECAST_QUANTILE",
    "FORECAST_SCALE_DOWN_QUANTILE",
    "FORECAST_TREND_DAMPING",
    "FORECAST_LEVEL_SHIFT",
    "FORECAST_HISTORY",
    "BURST_GUARD_INTERVAL",
    "BURST_GUARD_RISE_WINDOW",
    "ARRIVAL_COUNTER",
    "BURSTINESS_COUNTER",
    "CHUNKED_PREFILL",
    "MAX_NUM_BATCHED_TOKENS",
)
#: In WVA's manifests but never read by WVA (or read by a part we do not have): accepted, ignored.
IGNORED_MAIN_CONFIG_KEYS: tuple[str, ...] = ("GLOBAL_OPT_TRIGGER", "DISABLING_TTFT")
IGNORED_MAIN_CONFIG_PREFIXES: tuple[str, ...] = ("PROMETHEUS_METRICS_CACHE_",)

_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # Go accepts both micro signs
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Parse a Go duration (``"90s"``, ``"1m30s"``, ``"1.5h"``, ``"250ms"``) into seconds.

    A bare number is taken as seconds (a lenient superset of Go's ``time.ParseDuration``).
    """
    raw = text.strip()
    if not raw:
        raise ConfigError("empty duration")
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or seconds < 0:
            raise ConfigError(f"duration {text!r} must be a finite number >= 0")
        return seconds
    sign = 1.0
    body = raw
    if body[0] in "+-":
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
    total = 0.0
    pos = 0
    while pos < len(body):
        match = _DURATION_PART.match(body, pos)
        if match is None:
            raise ConfigError(f"invalid duration {text!r} (expected e.g. 60s, 1m30s, 500ms)")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos == 0:
        raise ConfigError(f"invalid duration {text!r}")
    total *= sign
    if total < 0:
        raise ConfigError(f"duration {text!r} must not be negative")
    return total


class PrometheusConfig(BaseModel):
    """How to reach Prometheus. Certificate verification is on unless explicitly skipped."""

    model_config = ConfigDict(frozen=True)

    base_url: str = ""
    insecure_skip_verify: bool = False
    ca_cert_path: str | None = None
    client_cert_path: str | None = None
    client_key_path: str | None = None
    server_name: str | None = None
    bearer_token: str | None = None
    token_path: str | None = None
    # A bearer token is sent over plain http:// only when this is set (exactly "true").
    allow_token_over_http: bool = False

    @classmethod
    def from_keys(cls, data: Mapping[str, str]) -> PrometheusConfig:
        def opt(key: str) -> str | None:
            value = data.get(key, "").strip()
            return value or None

        base_url = data.get("PROMETHEUS_BASE_URL", "").strip().rstrip("/")
        if base_url and not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"PROMETHEUS_BASE_URL {base_url!r} must start with https:// or http://")
        cert, key = opt("PROMETHEUS_CLIENT_CERT_PATH"), opt("PROMETHEUS_CLIENT_KEY_PATH")
        if (cert is None) != (key is None):
            raise ConfigError(
                "PROMETHEUS_CLIENT_CERT_PATH and PROMETHEUS_CLIENT_KEY_PATH must be set together"
            )
        return cls(
            base_url=base_url,
            # WVA's rule: only the exact string "true" skips verification.
            insecure_skip_verify=data.get("PROMETHEUS_TLS_INSECURE_SKIP_VERIFY", "").strip() == "true",
            ca_cert_path=opt("PROMETHEUS_CA_CERT_PATH"),
            client_cert_path=cert,
            client_key_path=key,
            server_name=opt("PROMETHEUS_SERVER_NAME"),
            bearer_token=opt("PROMETHEUS_BEARER_TOKEN"),
            token_path=opt("PROMETHEUS_TOKEN_PATH"),
            allow_token_over_http=data.get("PROMETHEUS_ALLOW_TOKEN_OVER_HTTP", "").strip() == "true",
        )


class MainConfig(BaseModel):
    """The parsed main ConfigMap; times in seconds."""

    model_config = ConfigDict(frozen=True)

    prometheus: PrometheusConfig = PrometheusConfig()
    interval_seconds: float = DEFAULT_INTERVAL_SECONDS
    scale_to_zero: bool = False
    optimizer_mode: OptimizerMode = "unlimited"
    saturation_policy: SaturationPolicy = "None"
    default_actuation_mode: ActuationMode = "metrics"
    scale_down_stabilization_seconds: float | None = None
    metrics_window_seconds: float = 60.0
    metrics_staleness_seconds: float = 120.0
    queue_drain_seconds: float = 300.0
    pending_timeout_seconds: float = 600.0
    batch_stable_cycles: int = 3
    batch_sizes: int = 1
    keep_accelerator: bool = True
    # 0: every status is written every cycle (WVA's behaviour). Above 0: a status whose decision,
    # conditions and actuation are unchanged is rewritten only this often (for large fleets).
    status_refresh_seconds: float = 0.0
    saturation_floor: bool = True
    # Ahead of the load, for classes with attainment targets (docs/tail-slo.md): the start-up time of a
    # replica, the quantile of the demand forecast planned for (0: none) and the one below which the plan
    # may fall (None: no hysteresis), the burst guard's period (0: none), the counter of arriving
    # requests the forecast learns (None: the demand vLLM's metrics show), and the counter whose counts
    # give the burstiness.
    startup_seconds: float = 180.0
    forecast_quantile: float = DEFAULT_QUANTILE
    forecast_down_quantile: float | None = DEFAULT_DOWN_QUANTILE
    forecast_trend_damping: float = 1.0
    # A rise beyond this many robust standard deviations of the forecast's errors is a level shift (0: off).
    forecast_level_shift: float = DEFAULT_SHIFT_SIGMAS
    # How far back a new forecaster learns its model's past rate from Prometheus (0: it starts afresh).
    forecast_history_seconds: float = 4 * 3600.0
    guard_interval_seconds: float = 15.0
    # The burst guard's shorter window, over which a rise of the arrivals shows (0: none projected).
    guard_rise_window_seconds: float = 30.0
    arrival_counter: str | None = None
    burstiness_counter: str = "vllm:request_success_total"
    chunked_prefill: bool = True
    prefill_budget: int = DEFAULT_PREFILL_BUDGET

    @property
    def forecast_horizon_seconds(self) -> float:
        """How far ahead a plan must hold: a replica asked for now serves after the start-up time, until
        the next decision takes effect."""
        return self.startup_seconds + self.interval_seconds

    def forecast_config(
        self, *, interval_s: float, horizon_s: float, quantile: float | None = None
    ) -> ForecastConfig:
        """The demand forecast these settings ask for, learning every ``interval_s`` over ``horizon_s``:
        the scale-up quantile ``quantile`` (else ``forecast_quantile``, else the default) and the
        scale-down quantile, never below it (None: no hysteresis), the trend's damping and the
        level-shift threshold. The operator and the simulator both forecast with it."""
        up = quantile or self.forecast_quantile or DEFAULT_QUANTILE
        down = self.forecast_down_quantile
        return ForecastConfig(
            interval_s=interval_s,
            horizon_s=horizon_s,
            quantile=up,
            down_quantile=None if down is None else max(down, up),
            damping=self.forecast_trend_damping,
            shift_sigmas=self.forecast_level_shift,
        )

    @property
    def min_replicas_default(self) -> int:
        """WVA's minimum: 0 with scale-to-zero, else 1."""
        return 0 if self.scale_to_zero else 1

    @property
    def forecast_holds(self) -> bool:
        """Whether plans made ahead of the load hold with the forecast's hysteresis (scale-down only
        below ``forecast_down_quantile``)."""
        return self.forecast_quantile > 0 and self.forecast_down_quantile is not None

    def stabilization_for(self, mode: ActuationMode, *, ahead: bool = False) -> float:
        """The default scale-down window for a variant in ``mode`` (its spec may override it); ``ahead``:
        it is planned ahead of the load and its forecast's hysteresis holds its plans (past the
        forecaster's warm-up: ``Forecast.holds``)."""
        if self.scale_down_stabilization_seconds is not None:
            return self.scale_down_stabilization_seconds
        if mode == "metrics":
            return 0.0
        if ahead and self.forecast_holds:
            return DEFAULT_AHEAD_STABILIZATION_SECONDS
        return DEFAULT_PATCH_STABILIZATION_SECONDS


def _choice(data: Mapping[str, str], key: str, allowed: tuple[str, ...], default: str) -> str:
    raw = data.get(key, "").strip()
    if not raw:
        return default
    for option in allowed:
        if raw.lower() == option.lower():
            return option
    raise ConfigError(f"{key}={raw!r} is not one of {', '.join(allowed)}")


def _number(data: Mapping[str, str], key: str, default: float) -> tuple[float, str]:
    """A decimal setting and its text as given (``default`` when unset); ``ConfigError`` when not a
    number."""
    raw = data.get(key, "").strip()
    try:
        return (float(raw) if raw else default), raw
    except ValueError:
        raise ConfigError(f"{key}={raw!r} is not a number") from None


def _duration(data: Mapping[str, str], key: str, default: float, *, positive: bool = False) -> float:
    raw = data.get(key, "").strip()
    if not raw:
        return default
    try:
        value = parse_duration(raw)
    except ConfigError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    if positive and value <= 0:
        raise ConfigError(f"{key}={raw!r} must be greater than zero")
    return value


def parse_main_config(
    data: Mapping[str, str] | None,
    *,
    env: Mapping[str, str] | None = None,
) -> MainConfig:
    """Parse the main ConfigMap's ``data``; ``env`` holds WVA-compatible environment overrides.

    ``env`` may carry the ``PROMETHEUS_*`` keys (all taken from it when it sets ``PROMETHEUS_BASE_URL``,
    as WVA does) and ``WVA_SCALE_TO_ZERO`` (used when the ConfigMap does not set the key, so that a
    ConfigMap edit always takes effect without a restart).
    """
    cm: Mapping[str, str] = data or {}
    env = env or {}
    if env.get("PROMETHEUS_BASE_URL", "").strip():
        prometheus = PrometheusConfig.from_keys(env)
    else:
        prometheus = PrometheusConfig.from_keys(cm)
    scale_to_zero_raw = cm.get("WVA_SCALE_TO_ZERO", env.get("WVA_SCALE_TO_ZERO", "false"))

    cycles_raw = cm.get("BATCH_STABLE_CYCLES", "").strip()
    try:
        batch_stable_cycles = int(cycles_raw) if cycles_raw else 3
    except ValueError:
        raise ConfigError(f"BATCH_STABLE_CYCLES={cycles_raw!r} is not an integer") from None
    if batch_stable_cycles < 1:
        raise ConfigError(f"BATCH_STABLE_CYCLES={cycles_raw!r} must be at least 1")

    sizes_raw = cm.get("BATCH_SIZES", "").strip()
    try:
        batch_sizes = int(sizes_raw) if sizes_raw else 1
    except ValueError:
        raise ConfigError(f"BATCH_SIZES={sizes_raw!r} is not an integer") from None
    if not 1 <= batch_sizes <= 16:
        raise ConfigError(f"BATCH_SIZES={sizes_raw!r} must be between 1 and 16")
    keep_raw = cm.get("KEEP_ACCELERATOR", "true").strip().lower()
    if keep_raw not in ("true", "false"):
        raise ConfigError(f"KEEP_ACCELERATOR={keep_raw!r} must be true or false")

    floor_raw = cm.get("SATURATION_FLOOR", "true").strip().lower()
    if floor_raw not in ("true", "false"):
        raise ConfigError(f"SATURATION_FLOOR={floor_raw!r} must be true or false")

    stabilization_raw = cm.get("SCALE_DOWN_STABILIZATION_WINDOW", "").strip()
    forecast_quantile, quantile_raw = _number(cm, "FORECAST_QUANTILE", DEFAULT_QUANTILE)
    if not 0.0 <= forecast_quantile < 1.0:
        raise ConfigError(f"FORECAST_QUANTILE={quantile_raw!r} must be in [0, 1) (0: no forecast)")
    down_quantile, down_raw = _number(
        cm, "FORECAST_SCALE_DOWN_QUANTILE", max(DEFAULT_DOWN_QUANTILE, forecast_quantile)
    )
    if down_quantile != 0.0 and not forecast_quantile <= down_quantile < 1.0:
        raise ConfigError(
            f"FORECAST_SCALE_DOWN_QUANTILE={down_raw!r} must be in [FORECAST_QUANTILE, 1) "
            f"(FORECAST_QUANTILE is {forecast_quantile:g}; 0: no hysteresis)"
        )
    damping, damping_raw = _number(cm, "FORECAST_TREND_DAMPING", 1.0)
    if not 0.0 < damping <= 1.0:
        raise ConfigError(
            f"FORECAST_TREND_DAMPING={damping_raw!r} must be in (0, 1] (1: Holt's linear trend)"
        )
    shift, shift_raw = _number(cm, "FORECAST_LEVEL_SHIFT", DEFAULT_SHIFT_SIGMAS)
    if not 0.0 <= shift < math.inf:
        raise ConfigError(
            f"FORECAST_LEVEL_SHIFT={shift_raw!r} must be a number of standard deviations >= 0 (0: off)"
        )
    chunked_raw = cm.get("CHUNKED_PREFILL", "true").strip().lower()
    if chunked_raw not in ("true", "false"):
        raise ConfigError(f"CHUNKED_PREFILL={chunked_raw!r} must be true or false")
    budget_raw = cm.get("MAX_NUM_BATCHED_TOKENS", "").strip()
    try:
        prefill_budget = int(budget_raw) if budget_raw else DEFAULT_PREFILL_BUDGET
    except ValueError:
        raise ConfigError(f"MAX_NUM_BATCHED_TOKENS={budget_raw!r} is not an integer") from None
    if prefill_budget < 1:
        raise ConfigError(f"MAX_NUM_BATCHED_TOKENS={budget_raw!r} must be at least 1 (tokens per step)")
    arrivals = _metric_name(cm, "ARRIVAL_COUNTER") or None
    counter = _metric_name(cm, "BURSTINESS_COUNTER") or arrivals or "vllm:request_success_total"
    metrics_window = _duration(cm, "METRICS_WINDOW", 60.0, positive=True)
    rise_window = _duration(cm, "BURST_GUARD_RISE_WINDOW", metrics_window / 2.0)
    if rise_window >= metrics_window:
        raise ConfigError(
            f"BURST_GUARD_RISE_WINDOW={cm.get('BURST_GUARD_RISE_WINDOW', '')!r} must be shorter than "
            f"METRICS_WINDOW ({metrics_window:g}s): arrivals rise where they come faster over it (0: off)"
        )
    return MainConfig(
        prometheus=prometheus,
        interval_seconds=_duration(cm, "GLOBAL_OPT_INTERVAL", DEFAULT_INTERVAL_SECONDS, positive=True),
        scale_to_zero=scale_to_zero_raw.strip() == "true",
        optimizer_mode=_choice(cm, "OPTIMIZER_MODE", get_args(OptimizerMode), "unlimited"),  # type: ignore[arg-type]
        saturation_policy=_choice(cm, "SATURATION_POLICY", get_args(SaturationPolicy), "None"),  # type: ignore[arg-type]
        default_actuation_mode=_choice(cm, "DEFAULT_ACTUATION_MODE", ACTUATION_MODES, "metrics"),  # type: ignore[arg-type]
        scale_down_stabilization_seconds=(
            _duration(cm, "SCALE_DOWN_STABILIZATION_WINDOW", 0.0) if stabilization_raw else None
        ),
        metrics_window_seconds=metrics_window,
        metrics_staleness_seconds=_duration(cm, "METRICS_STALENESS", 120.0, positive=True),
        queue_drain_seconds=_duration(cm, "QUEUE_DRAIN_TIME", 300.0, positive=True),
        pending_timeout_seconds=_duration(cm, "PENDING_REPLICAS_TIMEOUT", 600.0),
        batch_stable_cycles=batch_stable_cycles,
        batch_sizes=batch_sizes,
        keep_accelerator=keep_raw == "true",
        status_refresh_seconds=_duration(cm, "STATUS_REFRESH_INTERVAL", 0.0),
        saturation_floor=floor_raw == "true",
        startup_seconds=_duration(cm, "STARTUP_TIME", 180.0),
        forecast_quantile=forecast_quantile,
        forecast_down_quantile=down_quantile or None,
        forecast_trend_damping=damping,
        forecast_level_shift=shift,
        forecast_history_seconds=_duration(cm, "FORECAST_HISTORY", 4 * 3600.0),
        guard_interval_seconds=_duration(cm, "BURST_GUARD_INTERVAL", 15.0),
        guard_rise_window_seconds=rise_window,
        arrival_counter=arrivals,
        burstiness_counter=counter,
        chunked_prefill=chunked_raw == "true",
        prefill_budget=prefill_budget,
    )


def _metric_name(cm: Mapping[str, str], key: str) -> str:
    """A Prometheus metric name (empty when unset); ``ConfigError`` for anything else."""
    name = cm.get(key, "").strip()
    if name and not re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", name):
        raise ConfigError(f"{key}={name!r} is not a Prometheus metric name")
    return name
