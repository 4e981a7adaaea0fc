"""WVA's later ConfigMaps and annotated objects, read by the pure parsers in api/: every generation's
ConfigMaps as shipped in tests/data/wva-generations, the keys and defaults, overrides, lenient reading
(bad entries skipped and reported, unknown keys reported once), and the main config's precedence."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from variant_autoscaler.api import config as main
from variant_autoscaler.api.annotated import AnnotationError, parse_annotated
from variant_autoscaler.api.main_config_sources import (
    MAIN_CONFIG_MAP_NAMES,
    flatten_config_data,
    merge_main_config,
    read_config_file,
)
from variant_autoscaler.api.queueing_config import parse_queueing_config
from variant_autoscaler.api.saturation_config import Limiter, parse_saturation_config
from variant_autoscaler.api.scale_to_zero_config import parse_scale_to_zero_config
from variant_autoscaler.api.wva_entries import OnceLog
from variant_autoscaler.core.saturation import V1, V2, V1Params, V2Params
from variant_autoscaler.errors import ConfigError
from variant_autoscaler.settings import Settings
from vatesting.wva import generation_objects


def _configmap(generation: str, name: str) -> dict[str, Any]:
    return next(
        o["data"]
        for o in generation_objects(generation)
        if o.get("kind") == "ConfigMap" and o["metadata"]["name"] == name
    )


# --- the main config ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("generation", "name"),
    [
        ("2025-10", "workload-variant-autoscaler-variantautoscaling-config"),
        ("v0.5", "wva-variantautoscaling-config"),
        ("v0.6-v0.8", "wva-manager-config"),
        ("v0.9", "wva-manager-config"),
    ],
)
def test_every_generations_main_configmap_parses(generation: str, name: str) -> None:
    assert name in MAIN_CONFIG_MAP_NAMES
    merged = merge_main_config([(name, _configmap(generation, name))])
    assert merged.problems == ()
    cfg = main.parse_main_config(merged.data)
    assert cfg.prometheus.base_url.startswith("https://")


def test_config_yaml_is_unpacked_and_keys_beside_it_win() -> None:
    cm = _configmap("v0.6-v0.8", "wva-manager-config")
    flat, problems = flatten_config_data("cm", {**cm, "GLOBAL_OPT_INTERVAL": "45s"})
    assert problems == []
    cfg = main.parse_main_config(flat)
    assert cfg.interval_seconds == 45.0 and cfg.scale_to_zero is True  # YAML true -> "true"
    assert "PROMETHEUS_METRICS_CACHE_ENABLED" in flat  # WVA's, accepted and unused


def test_unknown_keys_and_unreadable_values_are_reported_never_fatal_and_logged_once() -> None:
    flat, problems = flatten_config_data(
        "ConfigMap x", {"config.yaml": "GLOBAL_OPT_INTERVAL: 20s\nnested: {a: 1}\n", "FANCY_KNOB": "1"}
    )
    assert flat == {"GLOBAL_OPT_INTERVAL": "20s"}
    assert any("nested must be a single value" in p for p in problems)
    assert any("unknown key 'FANCY_KNOB'" in p for p in problems)
    _, bad = flatten_config_data("ConfigMap y", {"config.yaml": "[1, 2"})
    assert bad and "not YAML" in bad[0]
    log = OnceLog()
    assert log.new(problems) == problems
    assert log.new(problems) == []  # the next cycle reads them again: nothing new to log


def test_every_key_parse_main_config_reads_is_a_known_key() -> None:
    source = inspect.getsource(main.parse_main_config)
    read = set(re.findall(r'\(cm, "([A-Z_]+)"', source)) | set(re.findall(r'cm\.get\("([A-Z_]+)"', source))
    assert read and read <= set(main.MAIN_CONFIG_KEYS)


def test_precedence_env_over_file_over_configmaps_later_names_win() -> None:
    old = (
        "workload-variant-autoscaler-variantautoscaling-config",
        {"GLOBAL_OPT_INTERVAL": "60s", "METRICS_WINDOW": "2m"},
    )
    new = ("wva-manager-config", {"config.yaml": "GLOBAL_OPT_INTERVAL: 30s\n"})
    merged = merge_main_config([old, ("wva-variantautoscaling-config", None), new])
    assert merged.data["GLOBAL_OPT_INTERVAL"] == "30s" and merged.data["METRICS_WINDOW"] == "2m"
    assert merged.origin["METRICS_WINDOW"] == f"ConfigMap {old[0]}"
    file_data, problems = read_config_file("/etc/wva/config.yaml", "GLOBAL_OPT_INTERVAL: 10s\n")
    assert problems == []
    merged = merge_main_config([old, new], ("/etc/wva/config.yaml", file_data))
    assert merged.data["GLOBAL_OPT_INTERVAL"] == "10s"
    assert merged.sources == (f"ConfigMap {old[0]}", "file /etc/wva/config.yaml")
    # the environment comes last, in parse_main_config (PROMETHEUS_* all together, WVA's rule)
    env = {"PROMETHEUS_BASE_URL": "https://from-env:9090"}
    cfg = main.parse_main_config({**merged.data, "PROMETHEUS_BASE_URL": "https://from-cm"}, env=env)
    assert cfg.prometheus.base_url == "https://from-env:9090"


def test_a_config_file_may_be_a_configmap_manifest() -> None:
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: wva-manager-config}\n"
        "data:\n  GLOBAL_OPT_INTERVAL: 5s\n"
    )
    data, problems = read_config_file("cm.yaml", text)
    assert problems == [] and data == {"GLOBAL_OPT_INTERVAL": "5s"}


def test_saturation_floor_key() -> None:
    assert main.parse_main_config({}).saturation_floor is True
    assert main.parse_main_config({"SATURATION_FLOOR": "false"}).saturation_floor is False
    with pytest.raises(ConfigError):
        main.parse_main_config({"SATURATION_FLOOR": "maybe"})


def test_settings_config_map_name_and_the_names_read() -> None:
    assert Settings().main_config_map_names == MAIN_CONFIG_MAP_NAMES
    named = Settings(config_map_name="my-config")
    assert named.main_config_map_names == ("my-config",)
    every = Settings().wva_config_map_names
    for name in ("wva-manager-config", "wva-saturation-scaling-config", "wva-model-scale-to-zero-config"):
        assert name in every


def test_settings_read_wvas_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFIG_MAP_NAME", "custom-config")
    monkeypatch.setenv("SATURATION_CONFIG_MAP_NAME", "r-wva-saturation-scaling-config")
    monkeypatch.setenv("QUEUEING_MODEL_CONFIG_MAP_NAME", "r-wva-queueing-model-config")
    monkeypatch.setenv("CONTROLLER_INSTANCE", "team-a")
    monkeypatch.setenv("WATCH_NAMESPACE", "llm-d")
    s = Settings()
    assert s.main_config_map_names == ("custom-config",)
    assert s.saturation_config_map_names == ("r-wva-saturation-scaling-config",)
    assert s.queueing_config_map_names == ("r-wva-queueing-model-config",)
    assert s.local_config_map_names == ("r-wva-saturation-scaling-config", "wva-model-scale-to-zero-config")
    assert {"r-wva-saturation-scaling-config", "r-wva-queueing-model-config"} <= set(s.wva_config_map_names)
    assert "wva-saturation-scaling-config" not in s.wva_config_map_names
    assert s.controller_instance == "team-a"
    assert s.namespaces == ["llm-d"] and not s.clusterwide
    monkeypatch.setenv("CONTROLLER_INSTANCE", "")
    assert Settings().controller_instance is None  # WVA: empty means unset


# --- saturation -----------------------------------------------------------------------------------------


def test_no_configmap_gives_wvas_defaults_v1_for_vas_and_v2_for_annotated_variants() -> None:
    cfg = parse_saturation_config(None)
    va = cfg.for_model("m", "ns")
    assert [a.kind for a in va.analyzers] == [V1] and va.analyzers[0].v1 == V1Params()
    assert [a.kind for a in cfg.for_model("m", "ns", annotated=True).analyzers] == [V2]
    assert V1Params() == V1Params(0.80, 5, 0.10, 3) and V2Params() == V2Params(0.85, 0.70)
    assert not va.enable_limiter and not va.limited_mode


def test_the_last_generations_saturation_configmap() -> None:
    cfg = parse_saturation_config(_configmap("v0.9", "wva-saturation-scaling-config"))
    assert cfg.problems == ()
    chat = cfg.for_model("meta/llama-3.1-8b", "team-a")
    assert [a.kind for a in chat.analyzers] == [V2] and chat.analyzers[0].v2 == V2Params(0.85, 0.70)
    assert chat.limited_mode and chat.gpu_quotas() == {"H100": 32}
    assert chat.priority == 2.0 and chat.inline_scale_to_zero() == (True, 900.0)
    team_a = chat.namespace_quota("team-a")
    assert team_a is not None and team_a.caps == {"H100": 8} and team_a.limiters == ("tenants",)
    other = chat.namespace_quota("team-b")
    assert other is not None and other.caps == {"A100": 4, "H100": 2}
    assert chat.namespace_quota("ml-platform") is None
    assert cfg.for_model("other/model", "team-a").priority == 1.0


def test_v04_thresholds_with_a_per_model_override() -> None:
    cfg = parse_saturation_config(
        _configmap("v0.4", "saturation-scaling-config"), name="saturation-scaling-config"
    )
    assert cfg.problems == ()
    prod = cfg.for_model("meta/llama-3.1-8b", "production").analyzers[0].v1
    assert prod == V1Params(0.85, 5, 0.15, 3)  # overridden fields, the rest from default
    other = cfg.for_model("meta/llama-3.1-8b", "staging").analyzers[0].v1
    assert other == V1Params()


def test_final_crd_config_v2_analyzers_and_limiters() -> None:
    cfg = parse_saturation_config(_configmap("v0.6-v0.8", "wva-saturation-scaling-config"))
    assert cfg.problems == ()
    base = cfg.for_model("other/model", "llm-d")
    assert [a.kind for a in base.analyzers] == [V2]  # analyzerName: saturation
    assert base.limited_mode and base.gpu_quotas() == {"H100": 32}
    assert base.limiters == (Limiter("gpu-inventory"), Limiter("quota", "cluster", {"H100": 32}))
    llama = cfg.for_model("meta/llama-3.1-70b", "llm-d")
    assert llama.analyzers[0].v2 == V2Params(0.90, 0.75)
    assert llama.sources == ("default", "llama-70b-llm-d")


def test_enable_limiter_alone_means_the_gpu_inventory() -> None:
    cfg = parse_saturation_config({"default": "enableLimiter: true\n"})
    assert cfg.for_model("m", "n").limited_mode


def test_priority_and_the_inline_scale_to_zero_of_a_saturation_entry() -> None:
    cfg = parse_saturation_config(
        {
            "default": "priority: 0\nscaleToZero: {enabled: true}",  # 0 is WVA's unset: 1
            "m": "model_id: m\nnamespace: n\npriority: 2.5\nscaleToZero: {retention_period: 90s}",
            "bad": "model_id: x\nscaleToZero: {enabled: maybe}",
            "never": "model_id: y\nscaleToZero: {retention_period: 0s}",
        }
    )
    assert cfg.for_model("other", "n").priority == 1.0
    assert cfg.for_model("other", "n").inline_scale_to_zero() == (True, None)
    assert cfg.for_model("m", "n").priority == 2.5
    # The stronger entry's scaleToZero replaces the default's whole (as WVA merges it).
    assert cfg.for_model("m", "n").inline_scale_to_zero() == (None, 90.0)
    assert any("bad" in p and "scaleToZero.enabled" in p for p in cfg.problems)
    assert any("never" in p and "longer than zero" in p for p in cfg.problems)


def test_quota_limiters_of_wvas_last_generation() -> None:
    cfg = parse_saturation_config(
        {
            "default": """enableLimiter: true
limiters:
  - type: inventory
  - name: cluster-cap
    type: quota
    scope: cluster
    quotas: {H100: 32, A100: -1}
  - name: tenants
    type: quota
    scope: namespace
    namespaceQuotas:
      team-a: {H100: 8, A100: -1}
      default: {H100: 2}
    exclude: [ml-platform]
  - name: tighter
    type: quota
    scope: namespace
    namespaceQuotas: {team-a: {H100: 4, L40S: 1}}
  - type: namespace-inventory
"""
        }
    )
    settings = cfg.for_model("m", "team-a")
    assert settings.limited_mode  # "inventory" is gpu-inventory
    assert settings.gpu_quotas() == {"H100": 32}  # -1: no cap; namespace-scoped ones are not cluster caps
    team_a = settings.namespace_quota("team-a")
    assert team_a is not None and team_a.limiters == ("tenants", "tighter")
    # the smaller of the two; A100 uncapped by "tenants" but not named by "tighter": none (WVA's rule)
    assert team_a.caps == {"A100": 0, "H100": 4, "L40S": 0}
    other = settings.namespace_quota("team-b")  # "default" of "tenants"; "tighter" names no default: none
    assert other is not None and other.caps == {"H100": 0}
    assert settings.namespace_quota("ml-platform") is not None  # excluded from "tenants" only
    assert any("namespace-inventory limiter is not supported" in p for p in cfg.problems)
    # without enableLimiter no limiter applies
    off = parse_saturation_config(
        {"default": "limiters: [{type: quota, scope: namespace, namespaceQuotas: {}}]"}
    )
    assert off.for_model("m", "x").namespace_quota("x") is None


@pytest.mark.parametrize(
    ("limiter", "error"),
    [
        ("{type: quota, scope: region}", "scope must be"),
        ("{type: quota, scope: namespace, quotas: {H100: 2}}", "quotas is for cluster scope"),
        ("{type: quota, namespaceQuotas: {a: {H100: 2}}}", "need scope: namespace"),
        ("{type: quota, quotas: {H100: -2}}", "must be between"),
        ("{type: quota, quotas: {H100: 1.5}}", "whole number"),
        ("{type: quota, scope: namespace, exclude: [1]}", "exclude must be a list"),
        ("{type: reservation}", "type must be one of"),
    ],
)
def test_a_bad_quota_limiter_skips_its_entry_and_says_why(limiter: str, error: str) -> None:
    cfg = parse_saturation_config({"default": f"enableLimiter: true\nlimiters: [{limiter}]"})
    assert not cfg.entries and any(error in p for p in cfg.problems), cfg.problems


def test_several_analyzers_with_their_own_thresholds() -> None:
    cfg = parse_saturation_config(
        {
            "default": "analyzers:\n"
            "  - name: saturation\n    score: 2\n    scaleUpThreshold: 0.9\n"
            "  - name: saturation-v1\n"
            "  - name: saturation\n    enabled: false\n"
        }
    )
    kinds = [(a.kind, a.score, a.v2.scale_up_threshold) for a in cfg.for_model("m", "n").analyzers]
    assert kinds == [(V2, 2.0, 0.9), (V1, 1.0, 0.85)]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("kvCacheThreshold: 1.5", "between 0 and 1"),
        ("queueLengthThreshold: -1", "between 0"),
        ("kvCacheThreshold: 0.2\nkvSpareTrigger: 0.3", "kvSpareTrigger must not exceed"),
        ("scaleUpThreshold: 0.6\nscaleDownBoundary: 0.7", "below scaleUpThreshold"),
        ("analyzers:\n  - name: throughput", "not supported"),
        ("limiters:\n  - type: magic", "type must be one of"),
        ("analyzerName: turbo", "analyzerName"),
        ("[not, a, mapping]", "mapping"),
    ],
)
def test_a_bad_entry_is_skipped_and_reported(entry: str, message: str) -> None:
    cfg = parse_saturation_config({"default": entry, "ok": "model_id: m\nkvCacheThreshold: 0.9\n"})
    assert any(message in p for p in cfg.problems), cfg.problems
    assert cfg.for_model("m", "n").analyzers[0].v1.kv_cache_threshold == 0.9  # the rest still read
    assert cfg.for_model("x", "n").analyzers[0].v1 == V1Params()  # the bad default: built-in defaults


def test_overrides_need_a_model_and_unknown_keys_are_reported() -> None:
    cfg = parse_saturation_config({"loose": "kvCacheThreshold: 0.9\n", "default": "fancy: 1\n"})
    assert any("needs model_id" in p for p in cfg.problems)
    assert any("unknown key 'fancy'" in p for p in cfg.problems)


def test_model_hash_namespace_keys_are_read_where_they_can_be_written() -> None:
    # The API server refuses '#' and '/' in ConfigMap keys; a file or a test map may still use the form.
    cfg = parse_saturation_config({"m1#ns1": "kvCacheThreshold: 0.9\n"})
    assert cfg.for_model("m1", "ns1").analyzers[0].v1.kv_cache_threshold == 0.9
    assert cfg.for_model("m1", "ns2").analyzers[0].v1.kv_cache_threshold == 0.8


# --- scale to zero, queueing model ----------------------------------------------------------------------


def test_scale_to_zero_default_overrides_and_env_fallback() -> None:
    cfg = parse_scale_to_zero_config(_configmap("v0.6-v0.8", "wva-model-scale-to-zero-config"))
    assert cfg.problems == ()
    other = cfg.for_model("other", "ns")
    assert other.enabled and other.retention_seconds == 600.0
    llama = cfg.for_model("meta/llama-3.1-70b", "any-namespace")  # model_id only: every namespace
    assert not llama.enabled and llama.source == "llama-70b"
    none = parse_scale_to_zero_config(None)
    assert none.for_model("m", "n", env_default="true").enabled
    assert not none.for_model("m", "n", env_default="false").enabled
    assert not none.for_model("m", "n").enabled
    bad = parse_scale_to_zero_config({"default": "retention_period: soon\n"})
    assert bad.problems and "retention_period" in bad.problems[0]


def test_queueing_model_config_and_slos_for_vas_without_a_class() -> None:
    cfg = parse_queueing_config(_configmap("v0.6-v0.8", "wva-queueing-model-config"))
    assert cfg.present and cfg.problems == ()
    s = cfg.for_model("meta/llama-3.1-70b", "llm-d")
    assert (s.slo_multiplier, s.tuning_enabled, s.target_ttft_ms, s.target_itl_ms) == (
        3.0,
        True,
        500.0,
        100.0,
    )
    slo = cfg.slo_for("meta/llama-3.1-70b", "llm-d")
    assert slo is not None and (slo.ttft, slo.itl) == (500.0, 100.0)
    assert cfg.slo_for("meta/llama-3.1-70b", "elsewhere") is None
    assert not parse_queueing_config(None).present
    assert cfg.tuning_off("meta/llama-3.1-70b", "llm-d") is None  # tuning is on unless turned off


def test_queueing_model_tuning_off_names_the_entry_that_turned_it_off() -> None:
    cfg = parse_queueing_config(
        {"default": "tuningEnabled: false", "on": "model_id: m\ntuningEnabled: true"},
        name="queueing-model-config",
    )
    assert cfg.tuning_off("other", "ns") == "tuningEnabled is false in queueing-model-config[default]"
    assert cfg.tuning_off("m", "ns") is None
    assert parse_queueing_config(None).tuning_off("m", "ns") is None


def test_queueing_model_infers_slos_where_an_entry_covers_the_model_without_targets() -> None:
    cfg = parse_queueing_config(_configmap("v0.6-v0.8", "wva-queueing-model-config"))
    # The default entry covers every model; the one with explicit targets is not inferred.
    assert cfg.multiplier_for("other/model", "ns") == (3.0, "wva-queueing-model-config[default]")
    assert cfg.multiplier_for("meta/llama-3.1-70b", "llm-d") is None
    assert cfg.multiplier_for("meta/llama-3.1-70b", "elsewhere") == (
        3.0,
        "wva-queueing-model-config[default]",
    )
    override = parse_queueing_config({"default": "tuningEnabled: true", "m": "model_id: m\nsloMultiplier: 5"})
    assert override.multiplier_for("m", "ns") == (5.0, "wva-queueing-model-config[m]")
    assert override.multiplier_for("n", "ns") == (3.0, "wva-queueing-model-config[default]")  # WVA's k
    # Without the ConfigMap, or with entries for other models only, nothing is inferred.
    assert parse_queueing_config(None).multiplier_for("m", "ns") is None
    assert parse_queueing_config({"x": "model_id: x\nsloMultiplier: 2"}).multiplier_for("m", "ns") is None


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("sloMultiplier: 1", "greater than 1"),
        ("model_id: m\ntargetTTFT: 500", "both or neither"),
        ("model_id: m\ntargetTTFT: 0\ntargetITL: 10", "greater than 0"),
    ],
)
def test_queueing_model_rules(entry: str, message: str) -> None:
    cfg = parse_queueing_config({"default" if "model_id" not in entry else "x": entry})
    assert any(message in p for p in cfg.problems)


# --- annotated HPAs and ScaledObjects -------------------------------------------------------------------


def _hpa(**annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "h", "namespace": "ns", "annotations": annotations},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
            "maxReplicas": 4,
        },
    }


def test_unmanaged_or_other_instances_objects_are_not_variants() -> None:
    assert parse_annotated(_hpa()) is None
    assert parse_annotated(_hpa(**{"llm-d.ai/managed": "false", "llm-d.ai/model-id": "m"})) is None
    managed = _hpa(**{"llm-d.ai/managed": "true", "llm-d.ai/model-id": "m"})
    assert parse_annotated(managed) is not None
    managed["metadata"]["labels"] = {"wva.llmd.ai/controller-instance": "b"}
    assert parse_annotated(managed, controller_instance="a") is None
    assert parse_annotated({**managed, "apiVersion": "autoscaling/v1"}) is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda o: o["metadata"]["annotations"].pop("llm-d.ai/model-id"), "model-id"),
        (lambda o: o["metadata"]["annotations"].update({"llm-d.ai/variant-cost": "cheap"}), "variant-cost"),
        (
            lambda o: o["spec"]["scaleTargetRef"].update(name="../../victim-ns/x"),
            "not a Kubernetes object name",
        ),
        (lambda o: o["spec"].update(minReplicas=5), "exceeds the maximum"),
        (lambda o: o["spec"].update(maxReplicas=1_000_000_000), "between 1 and"),
    ],
)
def test_managed_but_unusable_objects_say_why(change: Any, message: str) -> None:
    obj = _hpa(**{"llm-d.ai/managed": "true", "llm-d.ai/model-id": "m"})
    change(obj)
    with pytest.raises(AnnotationError, match=message):
        parse_annotated(obj)
