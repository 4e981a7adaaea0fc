"""WVA's manifests and ours pass both the pydantic models and the CRD schema; bad ones fail both."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pydantic
import pytest
import yaml

from variant_autoscaler.api import v1alpha1
from variant_autoscaler.core import status as st
from variant_autoscaler.core.policy import Recommendation

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "deploy" / "samples"


def _schema() -> dict[str, Any]:
    crd = yaml.safe_load((ROOT / "crds" / "llmd.ai_variantautoscalings.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _crd_errors(obj: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(_schema())
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


def _wva_sample() -> dict[str, Any]:
    return yaml.safe_load((SAMPLES / "variantautoscaling.yaml").read_text())


@pytest.mark.parametrize("name", ["variantautoscaling.yaml", "variantautoscaling-patch.yaml"])
def test_samples_are_valid(name: str) -> None:
    body = yaml.safe_load((SAMPLES / name).read_text())
    assert _crd_errors(body) == []
    va = v1alpha1.VariantAutoscaling.model_validate(body)
    assert va.spec.model_profile.accelerators


def test_wva_sample_reads_as_wva_does() -> None:
    va = v1alpha1.VariantAutoscaling.model_validate(_wva_sample())
    assert va.spec.model_id == "default/default"
    assert va.accelerator_label == "A100"
    assert va.target.kind == "Deployment" and va.target.name == "vllme-deployment"
    assert va.target.api_version == "apps/v1"
    a100 = va.spec.profile_for("A100")
    assert a100 is not None and a100.max_batch_size == 4
    assert a100.perf_parms.alpha == pytest.approx(20.58)
    assert a100.perf_parms.delta == pytest.approx(0.041)
    assert va.spec.actuation is None and va.spec.min_replicas is None


def _broken(path: list[str | int], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(_wva_sample())
    node: Any = body
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return body


_DELETE = object()
_ACC0 = ["spec", "modelProfile", "accelerators", 0]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (["spec", "modelID"], _DELETE),
        (["spec", "modelID"], ""),
        (["spec", "sloClassRef", "key"], _DELETE),
        (["spec", "modelProfile", "accelerators"], []),
        ([*_ACC0, "accCount"], 0),
        ([*_ACC0, "maxBatchSize"], 0),
        ([*_ACC0, "perfParms", "decodeParms"], {}),
        ([*_ACC0, "acc"], ""),
        (["spec", "actuation"], {"mode": "yolo"}),
        (["spec", "minReplicas"], -1),
        (["spec", "maxReplicas"], 0),
        (["spec", "scaleDown"], {"stabilizationWindowSeconds": 7200}),
        (["spec", "scaleTargetRef"], {"kind": "Deployment"}),
    ],
)
def test_invalid_specs_fail_both(path: list[str | int], value: Any) -> None:
    body = _broken(path, value)
    assert _crd_errors(body), "the CRD schema accepted it"
    with pytest.raises(pydantic.ValidationError):
        v1alpha1.VariantAutoscaling.model_validate(body)


def test_min_above_max_is_rejected_by_the_model() -> None:
    # The CRD carries the same rule as a CEL validation (checked by the API server, see integration tests).
    body = _wva_sample()
    body["spec"].update(minReplicas=5, maxReplicas=2)
    rules = _schema()["properties"]["spec"]["x-kubernetes-validations"]
    assert any("minReplicas <= self.maxReplicas" in r["rule"] for r in rules)
    with pytest.raises(pydantic.ValidationError, match="minReplicas must not exceed maxReplicas"):
        v1alpha1.VariantAutoscaling.model_validate(body)


def test_non_numeric_perf_parm_is_reported_by_name() -> None:
    body = _broken([*_ACC0, "perfParms", "decodeParms"], {"alpha": "fast", "beta": "1"})
    va = v1alpha1.VariantAutoscaling.model_validate(body)  # strings per the schema ...
    with pytest.raises(ValueError, match=r"decodeParms\.alpha = 'fast' is not a number"):
        va.spec.model_profile.accelerators[0].perf_parms.validate_numbers()  # ... checked when used


def _built_status(replicas: int, accelerator: str) -> dict[str, Any]:
    now = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
    return st.build_status(
        st.StatusInputs(
            now=now,
            generation=3,
            previous_conditions=(),
            condition_updates=(
                st.Condition(st.METRICS_AVAILABLE, "True", st.REASON_METRICS_FOUND, "ok"),
                st.Condition(st.OPTIMIZATION_READY, "True", st.REASON_OPTIMIZATION_SUCCEEDED, "done"),
                st.Condition(st.ACTUATED, "True", st.REASON_METRICS_EMITTED, "gauges"),
            ),
            current=st.CurrentView(accelerator, 2, 4, 80.0, 21.5, 120.25, 30.0, 100.0, 200.0),
            desired=st.DesiredView(
                accelerator, replicas, now, max_batch=4, reason="r", ttft_ms=90.0, itl_ms=22.0
            ),
            actuation=st.ActuationView(applied=True, mode="metrics"),
            recommendations=(Recommendation(now, replicas),),
            last_metrics_time=now,
        )
    )


@pytest.mark.parametrize("replicas", [0, 3])
def test_built_status_is_valid_for_crd_and_model(replicas: int) -> None:
    status = st.strip_nulls(_built_status(replicas, "A100"))
    body = {**_wva_sample(), "status": status}
    assert _crd_errors(body) == []
    parsed = v1alpha1.VariantAutoscaling.model_validate(body)
    assert parsed.status is not None and parsed.status.desired_optimized_alloc is not None
    assert parsed.status.desired_optimized_alloc.num_replicas == replicas
    assert parsed.status.desired_optimized_alloc.accelerator == "A100"  # scale-to-zero keeps a valid name


def test_wva_scale_to_zero_status_would_be_invalid() -> None:
    # WVA writes accelerator "" when it scales to zero; the schema (minLength 1) rejects that, and our
    # builders leave the field out instead.
    status = st.strip_nulls(_built_status(0, "A100"))
    status["desiredOptimizedAlloc"]["accelerator"] = ""
    assert any("desiredOptimizedAlloc" in e for e in _crd_errors({**_wva_sample(), "status": status}))
