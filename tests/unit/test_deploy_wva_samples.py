"""deploy/'s samples for every WVA generation: VariantAutoscalings valid for the CRD and the model, HPAs
and ScaledObjects on both gauge families (ScaledObjects valid for KEDA's own CRD), annotated ones read as
variants, and prometheus-adapter rules for both families."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from variant_autoscaler.api import v1alpha1
from variant_autoscaler.api.annotated import parse_annotated
from vatesting.wva import KEDA_CRD, crd_errors

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.mark.parametrize(
    "path", sorted((DEPLOY / "samples").glob("variantautoscaling*.yaml")), ids=lambda p: p.name
)
def test_every_sample_va_is_valid(path: Path) -> None:
    for body in _docs(path):
        assert crd_errors(body) == []
        v1alpha1.VariantAutoscaling.model_validate(body)


def _keda_schema() -> dict[str, Any]:
    crd = yaml.safe_load(KEDA_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return version["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("path", sorted((DEPLOY / "keda").glob("scaledobject*.yaml")), ids=lambda p: p.name)
def test_scaledobjects_follow_wva_desired_replicas_and_pass_kedas_schema(path: Path) -> None:
    (so,) = _docs(path)
    errors = [e.message for e in jsonschema.Draft7Validator(_keda_schema()).iter_errors(so)]
    assert errors == []
    (trigger,) = so["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "Value"
    assert trigger["metadata"]["query"].startswith("wva_desired_replicas{")
    assert trigger["metadata"]["threshold"] == "1"


@pytest.mark.parametrize(
    ("path", "metric"),
    [
        ("hpa.yaml", "inferno_desired_replicas"),
        ("hpa-wva.yaml", "wva_desired_replicas"),
        ("hpa-annotated.yaml", "wva_desired_replicas"),
    ],
)
def test_hpas_follow_their_generations_gauge(path: str, metric: str) -> None:
    (hpa,) = _docs(DEPLOY / "hpa" / path)
    (m,) = hpa["spec"]["metrics"]
    assert m["external"]["metric"]["name"] == metric
    assert m["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}
    assert (
        m["external"]["metric"]["selector"]["matchLabels"]["variant_name"]
        == hpa["spec"]["scaleTargetRef"]["name"]
    )


@pytest.mark.parametrize("path", ["hpa/hpa-annotated.yaml", "keda/scaledobject-annotated.yaml"])
def test_annotated_samples_are_variants(path: str) -> None:
    (obj,) = _docs(DEPLOY / path)
    v = parse_annotated(obj)
    assert v is not None and v.model_id == "default/default" and v.metrics_variant_name == "vllme-deployment"
    assert (v.min_replicas, v.max_replicas, v.variant_cost) == (1, 10, 10.0)


def test_prometheus_adapter_rules_for_both_families() -> None:
    values = yaml.safe_load((DEPLOY / "prometheus" / "prometheus-adapter-values.yaml").read_text())
    rules = {r["name"]["as"]: r for r in values["rules"]["external"]}
    for family in ("inferno", "wva"):
        rule = rules[f"{family}_desired_replicas"]
        assert rule["seriesQuery"].startswith(f"{family}_desired_replicas{{")
        assert rule["metricsQuery"] == f"{family}_desired_replicas{{<<.LabelMatchers>>}}"
        assert rule["resources"]["overrides"] == {
            "exported_namespace": {"resource": "namespace"},
            "variant_name": {"resource": "deployment"},
        }
