"""The one settings object: environment names, WVA-compatible overrides, CLI-style overrides."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from variant_autoscaler.adapters.prometheus import DEFAULT_MAX_RESPONSE_BYTES
from variant_autoscaler.settings import WVA_CONFIG_MAP, WVA_NAMESPACE, Settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith(("WVA_", "PROMETHEUS_")) or key in ("POD_NAMESPACE", "LOG_LEVEL"):
            monkeypatch.delenv(key)


def test_defaults_match_wva_names() -> None:
    s = Settings()
    assert s.operator_namespace == WVA_NAMESPACE
    assert s.config_map_names == (WVA_CONFIG_MAP, "accelerator-unit-costs", "service-classes-config")
    assert s.clusterwide and s.leader_election
    assert s.config_env() == {}
    assert s.renew_deadline_seconds < s.lease_duration_seconds


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WVA_NAMESPACES", "team-a, team-b,")
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    monkeypatch.setenv("WVA_METRICS_PORT", "9100")
    monkeypatch.setenv("LOG_LEVEL", "debug")
    monkeypatch.setenv("PROMETHEUS_BASE_URL", "https://prom:9090")
    monkeypatch.setenv("PROMETHEUS_TOKEN_PATH", "/var/run/token")
    monkeypatch.setenv("WVA_SCALE_TO_ZERO", "true")
    s = Settings()
    assert s.namespaces == ["team-a", "team-b"] and not s.clusterwide
    assert s.operator_namespace == "ops"
    assert s.metrics_port == 9100
    assert s.log_level == "debug"
    assert s.config_env() == {
        "PROMETHEUS_BASE_URL": "https://prom:9090",
        "PROMETHEUS_TOKEN_PATH": "/var/run/token",
        "WVA_SCALE_TO_ZERO": "true",
    }


def test_nothing_is_read_before_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    before = Settings()
    monkeypatch.setenv("WVA_OPERATOR_NAMESPACE", "later")
    assert before.operator_namespace == WVA_NAMESPACE
    assert Settings().operator_namespace == "later"


def test_constructor_overrides_and_validation() -> None:
    s = Settings(namespaces=["x"], metrics_port=0, leader_election=False)
    assert s.namespaces == ["x"] and s.metrics_port == 0 and not s.leader_election
    with pytest.raises(ValueError):
        Settings(kube_concurrency=0)
    with pytest.raises(ValueError):
        Settings(log_format="xml")


def test_prometheus_response_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # The operator's default is the client's own (adapters/prometheus.py): the two cannot drift apart.
    assert Settings().prometheus_max_response_bytes == DEFAULT_MAX_RESPONSE_BYTES == 16 * 1024 * 1024
    monkeypatch.setenv("WVA_PROMETHEUS_MAX_RESPONSE_BYTES", "1048576")
    assert Settings().prometheus_max_response_bytes == 1 << 20
    monkeypatch.setenv("WVA_PROMETHEUS_MAX_RESPONSE_BYTES", "1000")  # not even one series list
    with pytest.raises(ValueError, match="65536"):
        Settings()


def test_liveness_age() -> None:
    assert Settings().max_cycle_age(60.0) == 240.0
    assert Settings(liveness_max_cycle_age_seconds=30).max_cycle_age(60.0) == 30.0


def _environment_names() -> set[str]:
    names = set()
    for name, info in Settings.model_fields.items():
        alias = info.validation_alias
        choices = getattr(alias, "choices", None) or ([alias] if alias else [f"WVA_{name.upper()}"])
        names.update(str(c) for c in choices)
    return names


def test_every_environment_variable_is_documented_and_every_documented_one_is_read() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    documented = set(re.findall(r"`(WVA_[A-Z_]+)`", text))
    read = _environment_names()
    assert {n for n in read if n.startswith("WVA_")} <= documented
    assert not documented - read, "documented but not read"


def test_every_field_can_be_set_by_name_despite_an_environment_alias() -> None:
    # Flags of `variant-autoscaler run` are passed by field name; extra="ignore" would drop them silently.
    aliased = {n: i for n, i in Settings.model_fields.items() if i.validation_alias is not None}
    assert {"operator_namespace", "conflict_retries", "log_level"} <= set(aliased)
    s = Settings(
        operator_namespace="ops", conflict_retries=2, log_level="error", prometheus_base_url="http://p"
    )
    assert (s.operator_namespace, s.conflict_retries, s.log_level) == ("ops", 2, "error")
    assert s.prometheus_base_url == "http://p"
