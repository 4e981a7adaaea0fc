"""One CRD for every WVA generation: each generation's manifests (tests/data/wva-generations) pass the
CRD's schema and the pydantic model unchanged; what a left-out field means follows the generation the VA
is written for; names cannot become paths; everything is bounded, and the status the operator writes for
any spec the CRD accepts is accepted too (issue 22)."""

from __future__ import annotations

import copy
from typing import Any

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings

from variant_autoscaler.api import v1alpha1
from variant_autoscaler.api.annotated import parse_annotated
from variant_autoscaler.core import status as st
from vatesting.wva import (
    GENERATION_NAMES,
    crd_errors,
    crd_schema,
    generation_objects,
    generation_vas,
    vas_with_status,
)


@pytest.mark.parametrize("generation", GENERATION_NAMES)
def test_every_generation_has_manifests(generation: str) -> None:
    assert generation_objects(generation)


@pytest.mark.parametrize(
    ("generation", "index"),
    [(g, i) for g in GENERATION_NAMES for i in range(len(generation_vas(g)))],
)
def test_each_generations_vas_pass_the_crd_and_the_model_unchanged(generation: str, index: int) -> None:
    body = generation_vas(generation)[index]
    assert crd_errors(body) == []
    va = v1alpha1.VariantAutoscaling.model_validate(body)
    # Nothing added, nothing lost: the parsed spec dumps back to the manifest's spec.
    assert va.spec.model_dump(by_alias=True, exclude_none=True) == body["spec"]


def test_a_2025_10_va_reads_as_it_always_did() -> None:
    (body,) = generation_vas("2025-10")
    va = v1alpha1.VariantAutoscaling.model_validate(body)
    assert va.spec.has_model_profile and va.spec.has_slo_class_ref and not va.spec.later_shape
    assert [p.acc for p in va.spec.model_profile.accelerators] == ["A100", "L40S"]
    assert (va.spec.slo_class_ref.name, va.spec.slo_class_ref.key) == (
        "service-classes-config",
        "premium.yaml",
    )
    assert va.target == v1alpha1.ScaleTargetRef(
        apiVersion="apps/v1", kind="Deployment", name="granite-8b-a100"
    )
    assert va.spec.effective_max_replicas() is None  # unbounded, as in WVA 2025-10
    assert (va.spec.effective_min_replicas(False), va.spec.effective_min_replicas(True)) == (1, 0)
    assert va.spec.replica_cost(40.0, 1) == 40.0  # the accelerator's unit cost, no variantCost
    assert va.metrics_variant_name == "granite-8b-a100"


def test_v04_profile_less_and_profiled_variants() -> None:
    cheap, dear = (v1alpha1.VariantAutoscaling.model_validate(b) for b in generation_vas("v0.4"))
    assert not cheap.spec.has_model_profile and cheap.spec.model_profile.accelerators == []
    assert cheap.spec.profile_for("L4") is None
    assert cheap.spec.slo_class_ref.name == ""  # matches no class: the class is found by modelID
    assert cheap.spec.replica_cost(99.0) == 5.0 and dear.spec.replica_cost(99.0) == 20.0
    assert cheap.spec.effective_max_replicas() is None  # no scaleTargetRef: not the final CRD's shape


def test_later_shape_takes_the_final_crds_defaults() -> None:
    h100, lws, a100 = (v1alpha1.VariantAutoscaling.model_validate(b) for b in generation_vas("v0.6-v0.8"))
    assert h100.spec.effective_min_replicas(False) == 0 and h100.spec.effective_max_replicas() == 8
    assert a100.spec.later_shape and a100.spec.effective_max_replicas() == 2  # the final CRD's default
    assert a100.spec.effective_min_replicas(True) == 1  # its default 1, whatever WVA_SCALE_TO_ZERO says
    assert lws.target.api_version == "leaderworkerset.x-k8s.io/v1" and lws.target.kind == "LeaderWorkerSet"
    assert lws.spec.replica_cost(None) == v1alpha1.DEFAULT_VARIANT_COST
    raised = v1alpha1.VariantAutoscalingSpec.model_validate(
        {"modelID": "m", "scaleTargetRef": {"name": "d"}, "minReplicas": 5}
    )
    assert raised.effective_max_replicas() == 5


def test_controller_instance_rule() -> None:
    h100, lws, _ = (v1alpha1.VariantAutoscaling.model_validate(b) for b in generation_vas("v0.6-v0.8"))
    assert h100.managed_by("team-a") and not h100.managed_by("team-b") and h100.managed_by(None)
    assert not lws.managed_by("team-a") and lws.managed_by(None)


def test_v09_annotated_objects_parse_as_variants() -> None:
    objs = generation_objects("v0.9")
    hpa = next(o for o in objs if o["kind"] == "HorizontalPodAutoscaler")
    so = next(o for o in objs if o["kind"] == "ScaledObject")
    v = parse_annotated({**hpa, "metadata": {**hpa["metadata"], "namespace": "llm-d"}})
    assert v is not None
    assert (v.model_id, v.variant_cost, v.min_replicas, v.max_replicas) == (
        "mistralai/Mistral-7B-Instruct-v0.3",
        8.0,
        1,
        12,
    )
    assert v.metrics_variant_name == "mistral-7b-decode"
    w = parse_annotated(so)
    assert w is not None and (w.variant_cost, w.min_replicas, w.max_replicas) == (10.0, 0, 6)
    assert w.target_kind == "Deployment" and w.metrics_variant_name == "mistral-7b-l4"


# --- names and bounds (issue 22) -------------------------------------------------------------------------


def _va(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "llmd.ai/v1alpha1",
        "kind": "VariantAutoscaling",
        "metadata": {"name": "v", "namespace": "a"},
        "spec": {"modelID": "m", **spec},
    }


def _refused_by_both(body: dict[str, Any]) -> None:
    assert crd_errors(body), "the CRD schema accepted it"
    with pytest.raises(pydantic.ValidationError):
        v1alpha1.VariantAutoscaling.model_validate(body)


@pytest.mark.parametrize(
    "name",
    [
        "../../victim-ns/statefulsets/victim",
        "victim-ns/victim",
        "..",
        "a..b",
        "UPPER",
        "-lead",
        "x" * 254,
        "",
    ],
)
def test_a_target_name_can_never_be_a_path(name: str) -> None:
    _refused_by_both(_va(scaleTargetRef={"kind": "StatefulSet", "name": name}))


@pytest.mark.parametrize(
    "ref",
    [
        {"kind": "Deployment/../x", "name": "d"},
        {"apiVersion": "../v1", "name": "d"},
        {"kind": "InferencePool", "name": "d"},  # an unknown kind needs its apiVersion (a CEL rule too)
    ],
)
def test_target_kind_and_api_version_are_checked(ref: dict[str, str]) -> None:
    body = _va(scaleTargetRef=ref)
    if "apiVersion" in ref or "/" in ref["kind"]:
        _refused_by_both(body)
    else:
        rule = crd_schema()["properties"]["spec"]["properties"]["scaleTargetRef"]["x-kubernetes-validations"]
        assert "self.kind in" in rule[0]["rule"]  # checked by the API server (integration test)
        with pytest.raises(pydantic.ValidationError, match="apiVersion is required"):
            v1alpha1.VariantAutoscaling.model_validate(body)


@pytest.mark.parametrize(
    "spec",
    [
        {"minReplicas": 1_000_000_000},
        {"maxReplicas": 3_000_000_000},
        {"modelID": "m" * 257},
        {"variantCost": "1" * 33},
        {"variantCost": "-1"},
        {"sloClassRef": {"name": "n" * 254, "key": "k"}},
    ],
)
def test_out_of_bounds_specs_are_refused_by_both(spec: dict[str, Any]) -> None:
    _refused_by_both(_va(**spec))


def test_a_one_character_accelerator_is_valid_in_spec_and_status() -> None:
    profile = {
        "accelerators": [
            {
                "acc": "X",
                "accCount": 1,
                "maxBatchSize": 1,
                "perfParms": {"decodeParms": {"alpha": "1"}, "prefillParms": {"gamma": "1"}},
            }
        ]
    }
    now = st.parse_time("2026-01-01T00:00:00Z")
    assert now is not None
    status = st.build_status(
        st.StatusInputs(
            now=now,
            generation=1,
            previous_conditions=(),
            condition_updates=(),
            current=st.CurrentView("X", 1, 1, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0),
            desired=st.DesiredView("X", 1, now),
        )
    )
    body = {**_va(modelProfile=profile), "status": st.strip_nulls(status)}
    assert crd_errors(body) == []
    v1alpha1.VariantAutoscaling.model_validate(body)


def _walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for name, sub in (node.get("properties") or {}).items():
        out += _walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        out += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out += _walk(node["additionalProperties"], f"{path}{{}}")
    return out


def test_every_string_list_map_and_number_of_spec_and_status_is_bounded() -> None:
    unbounded = []
    for part in ("spec", "status"):
        for path, node in _walk(crd_schema()["properties"][part], part):
            t = node.get("type")
            if (
                (
                    t == "string"
                    and "maxLength" not in node
                    and "enum" not in node
                    and node.get("format") != "date-time"
                )
                or (t == "array" and "maxItems" not in node)
                or (t == "object" and "additionalProperties" in node and "maxProperties" not in node)
                or (
                    t == "integer"
                    and node.get("maximum", 2**31) > 2**31 - 1
                    and node.get("format") != "int64"
                )
            ):
                unbounded.append(path)
    assert unbounded == []


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(vas_with_status())
def test_the_status_written_for_any_accepted_spec_is_accepted(body: dict[str, Any]) -> None:
    spec_only = {k: v for k, v in body.items() if k != "status"}
    assert crd_errors(spec_only) == []  # the strategy makes CRD-valid specs ...
    errors = crd_errors(body)
    assert errors == [], errors  # ... and the builders' status for them is valid too
    v1alpha1.VariantAutoscaling.model_validate(copy.deepcopy(body))
