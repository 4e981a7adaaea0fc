"""The main ConfigMap in WVA's format, our optional keys, and WVA's environment precedence."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from variant_autoscaler.api.config import MainConfig, PrometheusConfig, parse_duration, parse_main_config
from variant_autoscaler.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("60s", 60.0),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        ("250ms", 0.25),
        ("2h45m0.5s", 9900.5),
        ("300us", 0.0003),
        ("0", 0.0),
        ("45", 45.0),  # bare numbers are seconds (lenient)
        ("+5m", 300.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "abc", "5 m", "1d", "-5s", "m", "1m-3s", "nan"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_duration(text)


def test_defaults_are_wva_behaviour() -> None:
    cfg = parse_main_config(None)
    assert cfg == MainConfig()
    assert cfg.interval_seconds == 60.0
    assert cfg.scale_to_zero is False and cfg.min_replicas_default == 1
    assert cfg.optimizer_mode == "unlimited"
    assert cfg.default_actuation_mode == "metrics"
    assert cfg.metrics_window_seconds == 60.0
    assert cfg.prometheus.insecure_skip_verify is False
    assert cfg.status_refresh_seconds == 0.0  # every status written every cycle, as WVA


def test_shipped_configmap_parses() -> None:
    cm = yaml.safe_load((ROOT / "deploy" / "manager" / "configmap.yaml").read_text())
    cfg = parse_main_config(cm["data"])
    assert cfg.prometheus.base_url.startswith("https://")
    assert cfg.prometheus.insecure_skip_verify is False
    assert cfg.prometheus.token_path == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert cfg.interval_seconds == 60.0


def test_wva_keys_and_ours() -> None:
    cfg = parse_main_config(
        {
            "PROMETHEUS_BASE_URL": "https://prom.monitoring:9090/",
            "PROMETHEUS_TLS_INSECURE_SKIP_VERIFY": "true",
            "PROMETHEUS_CA_CERT_PATH": "/ca.crt",
            "PROMETHEUS_SERVER_NAME": "prom.internal",
            "GLOBAL_OPT_INTERVAL": "30s",
            "WVA_SCALE_TO_ZERO": "true",
            "OPTIMIZER_MODE": "Limited",
            "SATURATION_POLICY": "priorityroundrobin",
            "DEFAULT_ACTUATION_MODE": "patch",
            "SCALE_DOWN_STABILIZATION_WINDOW": "2m",
            "METRICS_WINDOW": "2m",
            "BATCH_STABLE_CYCLES": "5",
            "STATUS_REFRESH_INTERVAL": "5m",
            "GLOBAL_OPT_TRIGGER": "ignored, as in WVA",
        }
    )
    assert cfg.prometheus.base_url == "https://prom.monitoring:9090"
    assert cfg.prometheus.insecure_skip_verify is True
    assert cfg.prometheus.server_name == "prom.internal"
    assert cfg.interval_seconds == 30.0
    assert cfg.min_replicas_default == 0
    assert cfg.optimizer_mode == "limited"
    assert cfg.saturation_policy == "PriorityRoundRobin"
    assert cfg.default_actuation_mode == "patch"
    assert cfg.stabilization_for("metrics") == 120.0
    assert cfg.metrics_window_seconds == 120.0
    assert cfg.batch_stable_cycles == 5
    assert cfg.status_refresh_seconds == 300.0


def test_an_arrival_counter_is_learnt_from_and_counts_the_bursts_unless_told_otherwise() -> None:
    assert parse_main_config({}).arrival_counter is None
    assert parse_main_config({}).burstiness_counter == "vllm:request_success_total"
    gateway = parse_main_config({"ARRIVAL_COUNTER": " inference_objective_request_total "})
    assert gateway.arrival_counter == "inference_objective_request_total"
    assert gateway.burstiness_counter == "inference_objective_request_total"
    both = parse_main_config(
        {"ARRIVAL_COUNTER": "inference_objective_request_total", "BURSTINESS_COUNTER": "my:arrivals_total"}
    )
    assert both.arrival_counter == "inference_objective_request_total"
    assert both.burstiness_counter == "my:arrivals_total"


def test_only_exact_true_skips_verification() -> None:
    for value in ("True", "yes", "1", "false", ""):
        cfg = parse_main_config({"PROMETHEUS_TLS_INSECURE_SKIP_VERIFY": value})
        assert cfg.prometheus.insecure_skip_verify is False, value


def test_stabilization_defaults_depend_on_mode() -> None:
    cfg = parse_main_config({})
    assert cfg.stabilization_for("metrics") == 0.0
    assert cfg.stabilization_for("patch") == 300.0
    assert cfg.stabilization_for("shadow") == 300.0
    # A variant planned ahead of the load (attainment class): the forecast's hysteresis holds its plans.
    assert cfg.stabilization_for("patch", ahead=True) == 60.0
    assert cfg.stabilization_for("metrics", ahead=True) == 0.0  # the HPA's own window applies
    for off in ({"FORECAST_QUANTILE": "0"}, {"FORECAST_SCALE_DOWN_QUANTILE": "0"}):
        assert parse_main_config(off).stabilization_for("patch", ahead=True) == 300.0, off
    told = parse_main_config({"SCALE_DOWN_STABILIZATION_WINDOW": "2m"})
    assert told.stabilization_for("patch", ahead=True) == 120.0


def test_the_forecast_scales_up_for_one_quantile_and_down_below_another() -> None:
    cfg = parse_main_config({})
    assert (cfg.forecast_quantile, cfg.forecast_down_quantile, cfg.forecast_holds) == (0.5, 0.9, True)
    # A scale-up quantile above the default scale-down one raises it along (no ConfigError).
    assert parse_main_config({"FORECAST_QUANTILE": "0.95"}).forecast_down_quantile == 0.95
    assert parse_main_config({"FORECAST_SCALE_DOWN_QUANTILE": "0.8"}).forecast_down_quantile == 0.8
    none = parse_main_config({"FORECAST_SCALE_DOWN_QUANTILE": "0"})
    assert none.forecast_down_quantile is None and not none.forecast_holds
    for bad in ("0.4", "1", "often"):
        with pytest.raises(ConfigError, match="FORECAST_SCALE_DOWN_QUANTILE"):
            parse_main_config({"FORECAST_SCALE_DOWN_QUANTILE": bad})


def test_the_forecasts_trend_damping_is_holts_by_default_and_reaches_the_forecaster() -> None:
    cfg = parse_main_config({})
    assert cfg.forecast_trend_damping == 1.0
    assert cfg.forecast_config(interval_s=60.0, horizon_s=240.0).damping == 1.0
    damped = parse_main_config({"FORECAST_TREND_DAMPING": "0.9"})
    assert damped.forecast_config(interval_s=60.0, horizon_s=240.0).damping == 0.9
    for bad in ("0", "1.2", "-0.5", "some"):
        with pytest.raises(ConfigError, match="FORECAST_TREND_DAMPING"):
            parse_main_config({"FORECAST_TREND_DAMPING": bad})


def test_the_forecasts_level_shift_is_four_deviations_by_default_zero_is_off() -> None:
    assert parse_main_config({}).forecast_config(interval_s=60.0, horizon_s=240.0).shift_sigmas == 4.0
    for raw, sigmas in (("6", 6.0), ("0", 0.0), (" 2.5 ", 2.5)):
        cfg = parse_main_config({"FORECAST_LEVEL_SHIFT": raw})
        assert cfg.forecast_level_shift == sigmas
        assert cfg.forecast_config(interval_s=60.0, horizon_s=240.0).shift_sigmas == sigmas
    for bad in ("-1", "inf", "nan", "many"):
        with pytest.raises(ConfigError, match="FORECAST_LEVEL_SHIFT"):
            parse_main_config({"FORECAST_LEVEL_SHIFT": bad})


def test_the_servers_token_budget_is_vllms_default_unless_told() -> None:
    assert parse_main_config({}).prefill_budget == 2048
    assert parse_main_config({"MAX_NUM_BATCHED_TOKENS": " 8192 "}).prefill_budget == 8192
    for bad in ("0", "-5", "lots", "2048.5"):
        with pytest.raises(ConfigError, match="MAX_NUM_BATCHED_TOKENS"):
            parse_main_config({"MAX_NUM_BATCHED_TOKENS": bad})


def test_the_forecasts_history_is_four_hours_by_default_and_zero_turns_it_off() -> None:
    assert parse_main_config({}).forecast_history_seconds == 4 * 3600.0
    assert parse_main_config({"FORECAST_HISTORY": "90m"}).forecast_history_seconds == 5400.0
    assert parse_main_config({"FORECAST_HISTORY": "0"}).forecast_history_seconds == 0.0
    for bad in ("-1h", "long"):
        with pytest.raises(ConfigError, match="FORECAST_HISTORY"):
            parse_main_config({"FORECAST_HISTORY": bad})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("GLOBAL_OPT_INTERVAL", "soon"),
        ("GLOBAL_OPT_INTERVAL", "0s"),
        ("OPTIMIZER_MODE", "greedy"),
        ("DEFAULT_ACTUATION_MODE", "scale"),
        ("BATCH_STABLE_CYCLES", "0"),
        ("BATCH_STABLE_CYCLES", "three"),
        ("STATUS_REFRESH_INTERVAL", "often"),
        ("PROMETHEUS_BASE_URL", "prometheus:9090"),
        ("PROMETHEUS_CLIENT_CERT_PATH", "/only-the-cert.pem"),
        ("ARRIVAL_COUNTER", "rate(requests[1m])"),
        ("BURSTINESS_COUNTER", "requests total"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=key.split("_", maxsplit=1)[0]):
        parse_main_config({key: value})


def test_env_prometheus_url_takes_every_prometheus_key_from_env() -> None:
    cm = {"PROMETHEUS_BASE_URL": "https://cm:9090", "PROMETHEUS_CA_CERT_PATH": "/cm-ca.crt"}
    env = {"PROMETHEUS_BASE_URL": "https://env:9090", "PROMETHEUS_TOKEN_PATH": "/token"}
    cfg = parse_main_config(cm, env=env)
    assert cfg.prometheus == PrometheusConfig(base_url="https://env:9090", token_path="/token")
    # Without the env URL, the ConfigMap wins entirely.
    assert (
        parse_main_config(cm, env={"PROMETHEUS_TOKEN_PATH": "/token"}).prometheus.ca_cert_path == "/cm-ca.crt"
    )


def test_scale_to_zero_configmap_wins_over_env() -> None:
    assert parse_main_config({}, env={"WVA_SCALE_TO_ZERO": "true"}).scale_to_zero is True
    assert (
        parse_main_config({"WVA_SCALE_TO_ZERO": "false"}, env={"WVA_SCALE_TO_ZERO": "true"}).scale_to_zero
        is False
    )


def test_the_guards_rise_window_is_half_the_rate_window_unless_set() -> None:
    assert parse_main_config({}).guard_rise_window_seconds == 30.0
    assert parse_main_config({"METRICS_WINDOW": "2m"}).guard_rise_window_seconds == 60.0
    assert parse_main_config({"BURST_GUARD_RISE_WINDOW": "20s"}).guard_rise_window_seconds == 20.0
    assert parse_main_config({"BURST_GUARD_RISE_WINDOW": "0"}).guard_rise_window_seconds == 0.0
    for bad in ("1m", "90s", "soon"):
        with pytest.raises(ConfigError, match="BURST_GUARD_RISE_WINDOW"):
            parse_main_config({"BURST_GUARD_RISE_WINDOW": bad})
