"""Scenario files and the bundled scenarios."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.config import load_scenario, parse_duration, parse_scenario
from variant_autoscaler.sim.scenarios import BUNDLED, bundled_text, load_bundled
from variant_autoscaler.sim.traffic import (
    Diurnal,
    FlashCrowd,
    GeneratedTraffic,
    LogNormalLength,
    TraceTraffic,
)


def minimal() -> dict[str, Any]:
    return {
        "name": "mini",
        "duration": "10m",
        "seed": 3,
        "accelerators": {"A100": {"device": "NVIDIA-A100-PCIE-80GB", "cost": "40.00"}},
        "nodes": [{"name": "p", "accelerator": "A100", "count": 1, "gpus": 8}],
        "serviceClasses": [
            {"name": "Premium", "priority": 1, "data": [{"model": "m1", "slo-tpot": 24, "slo-ttft": 500}]}
        ],
        "models": [
            {
                "modelID": "m1",
                "startup": "2m",
                "modelProfile": {
                    "accelerators": [
                        {
                            "acc": "A100",
                            "accCount": 1,
                            "maxBatchSize": 4,
                            "perfParms": {
                                "decodeParms": {"alpha": "20.58", "beta": "0.41"},
                                "prefillParms": {"gamma": "20.58", "delta": "0.041"},
                            },
                        }
                    ]
                },
                "traffic": {
                    "rate": {"constant": 1.5},
                    "inputTokens": {"fixed": 128},
                    "outputTokens": {"uniform": [10, 20]},
                },
                "variants": [{"name": "v1", "accelerator": "A100", "replicas": 2}],
            }
        ],
    }


def test_parse_minimal() -> None:
    sc = parse_scenario(minimal())
    assert sc.duration_s == 600.0 and sc.seed == 3
    model = sc.models[0]
    assert model.slo_ttft_ms == 500 and model.slo_itl_ms == 24 and model.service_class == "Premium"
    assert model.startup_s == 120.0
    prof = model.profiles[0]
    assert (prof.alpha, prof.beta, prof.gamma, prof.delta, prof.max_batch_size) == (
        20.58,
        0.41,
        20.58,
        0.041,
        4,
    )
    assert sc.variants[0].initial_replicas == 2 and sc.variants[0].min_replicas == 1
    assert sc.capacity() == {"A100": 8}
    assert sc.accelerators[0].unit_cost == 40.0


def test_durations() -> None:
    assert parse_duration(90) == 90.0
    assert parse_duration("1.5h") == 5400.0
    assert parse_duration("250ms") == 0.25
    assert parse_duration("7") == 7.0
    with pytest.raises(ValueError):
        parse_duration("soon")
    with pytest.raises(ValueError):
        parse_duration(-1)


def test_rates_and_lengths() -> None:
    doc = minimal()
    doc["models"][0]["traffic"] = {
        "rate": {
            "sum": [
                {"diurnal": {"low": 1, "high": 5, "period": "2h", "phase": "10m"}},
                {"flash": {"base": 0, "extra": 3, "start": "5m"}},
            ]
        },
        "inputTokens": {"lognormal": {"mean": 300, "cv": 0.5, "max": 2000}},
        "outputTokens": {"values": [5, 6, 7]},
        "burstiness": 2,
    }
    traffic = parse_scenario(doc).models[0].traffic
    assert isinstance(traffic, GeneratedTraffic)
    parts = traffic.rate.parts  # type: ignore[attr-defined]
    assert isinstance(parts[0], Diurnal) and parts[0].period_s == 7200.0 and parts[0].phase_s == 600.0
    assert isinstance(parts[1], FlashCrowd) and parts[1].start_s == 300.0
    assert isinstance(traffic.input_tokens, LogNormalLength) and traffic.input_tokens.high == 2000
    assert traffic.burstiness == 2.0


def test_trace_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "trace.csv").write_text("timestamp,input_tokens,output_tokens\n0,10,5\n2,20,6\n")
    doc = minimal()
    doc["models"][0]["traffic"] = {"trace": {"path": "trace.csv", "speedup": 2}}
    path = tmp_path / "sc.yaml"
    path.write_text(yaml.safe_dump(doc))
    traffic = load_scenario(path).models[0].traffic
    assert isinstance(traffic, TraceTraffic) and traffic.speedup == 2.0
    assert len(traffic.arrivals_in_trace) == 2


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("duration"), "duration"),
        (lambda d: d["models"][0].pop("variants"), "variants"),
        (lambda d: d["models"][0]["traffic"].pop("rate"), "rate, inputTokens and outputTokens"),
        (
            lambda d: d["models"][0]["traffic"]["rate"].update({"constant": 1, "step": [[0, 1]]}),
            "exactly one",
        ),
        (lambda d: d["models"][0]["variants"][0].update({"accelerator": "H100"}), "no profile"),
        (lambda d: d["nodes"][0].update({"accelerator": "TPU"}), "unknown accelerator"),
        (lambda d: d["serviceClasses"][0]["data"][0].update({"model": "other"}), "no service-class entry"),
        (lambda d: d.update({"surprise": 1}), "surprise"),
        (lambda d: d["models"][0].update({"kvCacheTokens": {"H100": 10}}), "kvCacheTokens"),
        (
            lambda d: d["models"][0]["traffic"]["rate"].update({"constant": None, "flash": {"base": 1}}),
            "flash needs",
        ),
        (lambda d: d.update({"failures": [{"at": "1m", "pool": "nope"}]}), "unknown node pool"),
        (lambda d: d["models"][0].update({"startup": "later"}), "startup"),
        (lambda d: d.update({"failures": [{"at": "1m", "pool": "p", "slowdown": 1}]}), "slowdown"),
        (lambda d: d.update({"failures": [{"at": "1m", "pool": "p", "slowdown": "inf"}]}), "slowdown"),
    ],
)
def test_errors_name_the_field(mutate: Any, message: str) -> None:
    doc = minimal()
    mutate(doc)
    with pytest.raises(ConfigError, match=message):
        parse_scenario(doc)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_scenario(bad)


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_scenarios_parse(name: str) -> None:
    sc = load_bundled(name)
    assert sc.name == name
    assert sc.description
    assert "name:" in bundled_text(name)
    # Every bundled model is served by a variant that fits the inventory.
    capacity = sc.capacity()
    assert all(capacity[v.accelerator] >= 1 for v in sc.variants)


def test_unknown_bundled_scenario() -> None:
    with pytest.raises(ConfigError, match="no bundled scenario"):
        bundled_text("nope")


def test_a_class_entry_may_set_a_ttft_percentile() -> None:
    doc = minimal()
    assert parse_scenario(doc).models[0].slo_ttft_percentile == 0.0  # WVA's: the mean
    doc["serviceClasses"][0]["data"][0]["slo-ttft-percentile"] = 99
    assert parse_scenario(doc).models[0].slo_ttft_percentile == 99.0
    doc["serviceClasses"][0]["data"][0]["slo-ttft-percentile"] = 100
    with pytest.raises(ConfigError, match="slo-ttft-percentile"):
        parse_scenario(doc)


def test_trace_rate_scale_time_unit_and_max_model_len(tmp_path: Path) -> None:
    (tmp_path / "mc.jsonl").write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
        '{"timestamp": 1500, "input_length": 20, "output_length": 6}\n'
    )
    doc = minimal()
    doc["models"][0]["traffic"] = {"trace": {"path": "mc.jsonl", "rateScale": 3, "scaleWindow": "2m"}}
    doc["models"][0]["maxModelLen"] = 4096
    path = tmp_path / "sc.yaml"
    path.write_text(yaml.safe_dump(doc))
    model = load_scenario(path).models[0]
    traffic = model.traffic
    assert isinstance(traffic, TraceTraffic)
    assert traffic.rate_scale == 3.0 and traffic.scale_window_s == 120.0
    assert traffic.arrivals_in_trace.times.tolist() == [0.0, 1.5]  # JSON lines count milliseconds
    assert all(p.max_model_len == 4096 for p in model.profiles)
    doc["models"][0]["maxModelLen"] = 1
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="maxModelLen"):
        load_scenario(path)


def test_a_failure_may_slow_its_nodes_down_instead_of_losing_them() -> None:
    doc = minimal()
    doc["failures"] = [
        {"at": "2m", "pool": "p", "slowdown": 2.5, "recover": "4m"},
        {"at": "5m", "pool": "p"},
    ]
    slowed, lost = parse_scenario(doc).failures
    assert (slowed.at_s, slowed.slowdown, slowed.recover_s) == (120.0, 2.5, 240.0)
    assert lost.slowdown is None
