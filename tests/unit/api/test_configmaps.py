"""Parsers of the accelerator-unit-costs and service-classes-config ConfigMaps (WVA's formats)."""

from __future__ import annotations

import pytest

from variant_autoscaler.api.configmaps import parse_accelerator_costs, parse_service_classes
from variant_autoscaler.api.queueing_config import parse_queueing_config
from variant_autoscaler.core.model import AcceleratorType, ModelTarget, ServiceClass, find_service_class
from variant_autoscaler.errors import ConfigError

# deploy/configmap-accelerator-unitcost.yaml and the chart's extra entries, verbatim
WVA_COSTS = {
    "A100": '{"device": "NVIDIA-A100-PCIE-80GB", "cost": "40.00"}\n',
    "MI300X": '{"device": "AMD-MI300X-192GB", "cost": "65.00"}\n',
    "G2": '{"device": "Intel-Gaudi-2-96GB", "cost": "23.00"}\n',
    "H100": '{"device": "NVIDIA-H100-80GB-HBM3", "cost": "100.0"}\n',
}
# deploy/configmap-serviceclass.yaml, verbatim
WVA_CLASSES = {
    "premium.yaml": (
        "name: Premium\npriority: 1\ndata:\n"
        "  - model: default/default\n    slo-tpot: 24\n    slo-ttft: 500\n"
        "  - model: meta/llama0-70b\n    slo-tpot: 80\n    slo-ttft: 500\n"
    ),
    "freemium.yaml": (
        "name: Freemium\npriority: 10\ndata:\n"
        "  - model: ibm/granite-13b\n    slo-tpot: 200\n    slo-ttft: 2000\n"
        "  - model: meta/llama0-7b\n    slo-tpot: 150\n    slo-ttft: 1500\n"
    ),
}


def test_wva_accelerator_costs_parse() -> None:
    parsed = parse_accelerator_costs(WVA_COSTS)
    assert parsed.problems == ()
    assert parsed.accelerators["A100"] == AcceleratorType("A100", "NVIDIA-A100-PCIE-80GB", 40.0)
    assert parsed.accelerators["H100"].cost == 100.0
    assert list(parsed.accelerators) == ["A100", "G2", "H100", "MI300X"]


def test_costs_accept_decoded_mappings_and_numbers() -> None:
    parsed = parse_accelerator_costs(
        {"A100": {"device": "d", "cost": 40}, "G2": {"device": "g", "cost": "23"}}
    )
    assert parsed.accelerators["A100"].cost == 40.0 and parsed.accelerators["G2"].cost == 23.0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"device": "d", "cost": "forty"}', "accelerator-unit-costs[X].cost = 'forty' is not a number"),
        ('{"device": "d"}', "accelerator-unit-costs[X]: field 'cost' is missing"),
        ('{"cost": "1"}', "accelerator-unit-costs[X]: field 'device' must be a non-empty string"),
        ("{not json", "accelerator-unit-costs[X] is not JSON"),
        ('["d", "1"]', "accelerator-unit-costs[X] must be a JSON object"),
        (
            '{"device": "d", "cost": "-1"}',
            "accelerator-unit-costs[X].cost = '-1' must be a finite number >= 0",
        ),
        ('{"device": "d", "cost": "nan"}', "must be a finite number >= 0"),
    ],
)
def test_bad_cost_entries_are_dropped_and_named(value: str, message: str) -> None:
    parsed = parse_accelerator_costs({"X": value, "A100": WVA_COSTS["A100"]})
    assert list(parsed.accelerators) == ["A100"]
    (problem,) = parsed.problems
    assert message in problem
    with pytest.raises(ConfigError, match=r"accelerator-unit-costs\[X\]"):
        parse_accelerator_costs({"X": value}, strict=True)


def test_wva_service_classes_parse() -> None:
    parsed = parse_service_classes(WVA_CLASSES)
    assert parsed.problems == ()
    assert [c.name for c in parsed.classes] == ["Freemium", "Premium"]  # key order
    premium = parsed.named("Premium")
    assert premium is not None and premium.priority == 1
    assert premium.target("default/default") == ModelTarget("default/default", itl=24.0, ttft=500.0)
    found = find_service_class(parsed.classes, "meta/llama0-7b")
    assert found is not None and found[0].name == "Freemium" and found[1].itl == 150.0


def test_service_classes_as_a_list_of_documents() -> None:
    parsed = parse_service_classes(
        [{"name": "Premium", "priority": 1, "data": [{"model": "m", "slo-tpot": 24.5, "slo-ttft": 500}]}]
    )
    (cls,) = parsed.classes
    assert cls.target("m") == ModelTarget("m", itl=24.5, ttft=500.0)


@pytest.mark.parametrize(
    ("priority", "expected"), [(0, 100), (101, 100), (-3, 100), (1, 1), (100, 100), (None, 100)]
)
def test_priority_outside_1_to_100_becomes_100(priority: int | None, expected: int) -> None:
    doc: dict[str, object] = {"name": "C", "data": []}
    if priority is not None:
        doc["priority"] = priority
    (cls,) = parse_service_classes([doc]).classes
    assert cls.priority == expected


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("name: [unclosed", "service-classes-config[k] is not YAML"),
        ("- a\n- b\n", "must be a mapping"),
        ("priority: 1\n", "field 'name' must be a non-empty string"),
        ("name: C\npriority: high\n", "field 'priority' must be an integer"),
        ("name: C\ndata: {model: m}\n", "field 'data' must be a list"),
        ("name: C\ndata:\n  - slo-tpot: 3\n", "data[0]: field 'model' must be a non-empty string"),
        ("name: C\ndata:\n  - {model: m, slo-ttft: soon}\n", "data[0].slo-ttft = 'soon' is not a number"),
    ],
)
def test_bad_service_classes_are_dropped_and_named(doc: str, message: str) -> None:
    parsed = parse_service_classes({"k": doc, "premium.yaml": WVA_CLASSES["premium.yaml"]})
    assert [c.name for c in parsed.classes] == ["Premium"]
    (problem,) = parsed.problems
    assert message in problem
    with pytest.raises(ConfigError, match=r"service-classes-config\[k\]"):
        parse_service_classes({"k": doc}, strict=True)


def test_duplicate_class_names_keep_the_first() -> None:
    parsed = parse_service_classes({"a.yaml": "name: C\npriority: 1\n", "b.yaml": "name: C\npriority: 5\n"})
    assert parsed.classes == (ServiceClass("C", 1, ()),)
    assert "already defined" in parsed.problems[0]


def test_model_lookup_prefers_the_highest_priority_class() -> None:
    classes = (
        ServiceClass("Low", 50, (ModelTarget("m", 100.0, 1000.0),)),
        ServiceClass("High", 2, (ModelTarget("m", 20.0, 200.0),)),
    )
    found = find_service_class(classes, "m")
    assert found is not None and found[0].name == "High"
    assert find_service_class(classes, "other") is None


def test_attainment_targets_in_a_service_class() -> None:
    doc = """
name: Premium
priority: 1
data:
  - {model: a, slo-tpot: 24, slo-ttft: 500}
  - {model: b, slo-tpot: 24, slo-ttft: 500, slo-attainment: 99}
  - {model: c, slo-tpot: 24, slo-ttft: 500, slo-ttft-percentile: "95%", slo-tpot-percentile: 99.5}
"""
    parsed = parse_service_classes({"premium.yaml": doc}, strict=True)
    a, b, c = (parsed.classes[0].target(m) for m in "abc")
    assert a is not None and b is not None and c is not None
    assert not a.slo.is_tail  # says nothing: WVA's mean meaning
    assert b.slo.attainment == 99.0 and b.slo.is_tail
    assert (c.slo.ttft_percentile, c.slo.itl_percentile, c.slo.attainment) == (95.0, 99.5, 0.0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("slo-attainment", "100", "slo-attainment must be between 0 and 100"),
        ("slo-tpot-percentile", "-5", "slo-tpot-percentile"),
        ("slo-attainment", "most", "is not a number"),
    ],
)
def test_bad_attainment_targets_are_named(field: str, value: str, message: str) -> None:
    doc = f"name: X\npriority: 1\ndata:\n  - {{model: m, slo-tpot: 24, slo-ttft: 500, {field}: {value!r}}}\n"
    parsed = parse_service_classes({"x.yaml": doc})
    assert parsed.classes == () and message in parsed.problems[0]


def test_queueing_model_entries_with_shares() -> None:
    cfg = parse_queueing_config(
        {
            "default": "sloMultiplier: 3\n",
            "m": "model_id: m\nnamespace: ns\ntargetTTFT: 1000\ntargetITL: 50\nattainment: 99\n",
            "p": "model_id: p\nnamespace: ns\ntargetTTFT: 800\ntargetITL: 40\ntargetTTFTPercentile: 95\n",
            "bad": "model_id: b\nnamespace: ns\ntargetTTFT: 1\ntargetITL: 1\ntargetITLPercentile: 100\n",
        }
    )
    m = cfg.slo_for("m", "ns")
    assert m is not None and (m.ttft, m.itl, m.attainment, m.ttft_percentile) == (1000.0, 50.0, 99.0, 0.0)
    assert m.slo.is_tail
    p = cfg.slo_for("p", "ns")
    assert p is not None and p.slo.ttft_percentile == 95.0
    assert any("targetITLPercentile" in problem for problem in cfg.problems)
    assert cfg.slo_for("b", "ns") is None  # the entry was skipped
