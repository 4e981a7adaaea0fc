"""The pydantic models in ``api/v1alpha1.py`` and the CRD in ``crds/`` describe the same schema.

Both are reduced to a canonical form (types, properties, required sets, enums and the validation
keywords a structural schema can carry) and compared node by node, so a field added, renamed, retyped
or re-validated on one side only fails here with the path of the difference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from variant_autoscaler.api import v1alpha1

ROOT = Path(__file__).resolve().parents[3]
CRD_PATH = ROOT / "crds" / "llmd.ai_variantautoscalings.yaml"

_KEYWORDS = (
    "type",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
)


def _crd() -> dict[str, Any]:
    return yaml.safe_load(CRD_PATH.read_text())


def _crd_version(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == v1alpha1.VERSION]
    return version


def _canon_crd(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: node[k] for k in _KEYWORDS if k in node}
    if node.get("format") == "date-time":
        out["format"] = "date-time"
    if "properties" in node:
        out["properties"] = {name: _canon_crd(sub) for name, sub in node["properties"].items()}
        out["required"] = sorted(node.get("required", []))
    if "items" in node:
        out["items"] = _canon_crd(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _canon_crd(node["additionalProperties"])
    return out


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        return _resolve(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    if "anyOf" in node:  # Optional[X] -> X (optionality is carried by `required`)
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        assert len(options) == 1, f"unsupported union in the model: {node}"
        merged = {k: v for k, v in node.items() if k != "anyOf"}
        merged.update(_resolve(options[0], defs))
        return merged
    return node


def _canon_model(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    node = _resolve(node, defs)
    out: dict[str, Any] = {k: node[k] for k in _KEYWORDS if k in node}
    if node.get("format") == "date-time":
        out["format"] = "date-time"
    if "const" in node:  # a single-value Literal
        out["enum"] = [node["const"]]
    if "properties" in node:
        out["properties"] = {name: _canon_model(sub, defs) for name, sub in node["properties"].items()}
        out["required"] = sorted(node.get("required", []))
    if "items" in node:
        out["items"] = _canon_model(node["items"], defs)
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _canon_model(node["additionalProperties"], defs)
    return out


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        problems: list[str] = []
        for key in sorted(set(a) | set(b)):
            if key not in a:
                problems.append(f"{path}/{key}: only in the pydantic model ({b[key]!r})")
            elif key not in b:
                problems.append(f"{path}/{key}: only in the CRD ({a[key]!r})")
            else:
                problems.extend(_diff(a[key], b[key], f"{path}/{key}"))
        return problems
    return [] if a == b else [f"{path}: CRD {a!r} != model {b!r}"]


@pytest.mark.parametrize("part", ["spec", "status"])
def test_model_and_crd_agree(part: str) -> None:
    crd_schema = _crd_version(_crd())["schema"]["openAPIV3Schema"]
    model_schema = v1alpha1.VariantAutoscaling.model_json_schema(by_alias=True, mode="validation")
    defs = model_schema.get("$defs", {})
    crd_node = _canon_crd(crd_schema["properties"][part])
    model_node = _canon_model(model_schema["properties"][part], defs)
    assert _diff(crd_node, model_node, part) == []


def test_top_level_properties_agree() -> None:
    crd_schema = _crd_version(_crd())["schema"]["openAPIV3Schema"]
    model_schema = v1alpha1.VariantAutoscaling.model_json_schema(by_alias=True)
    assert set(crd_schema["properties"]) == set(model_schema["properties"])
    assert crd_schema["type"] == "object"
    assert sorted(model_schema.get("required", [])) == ["metadata", "spec"]


def test_names_and_scope_match_the_module_constants() -> None:
    crd = _crd()
    names = crd["spec"]["names"]
    assert crd["metadata"]["name"] == f"{v1alpha1.PLURAL}.{v1alpha1.GROUP}"
    assert crd["spec"]["group"] == v1alpha1.GROUP
    assert names["kind"] == v1alpha1.KIND
    assert names["plural"] == v1alpha1.PLURAL
    assert names["singular"] == v1alpha1.SINGULAR
    assert names["shortNames"] == [v1alpha1.SHORT_NAME]
    assert crd["spec"]["scope"] == "Namespaced"
    version = _crd_version(crd)
    assert version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}


def test_wva_printer_columns_are_kept_exactly() -> None:
    columns = {
        c["name"]: (c["type"], c["jsonPath"]) for c in _crd_version(_crd())["additionalPrinterColumns"]
    }
    assert columns["Model"] == ("string", ".spec.modelID")
    assert columns["Accelerator"] == ("string", ".status.currentAlloc.accelerator")
    assert columns["CurrentReplicas"] == ("integer", ".status.currentAlloc.numReplicas")
    assert columns["Optimized"] == ("string", ".status.desiredOptimizedAlloc.numReplicas")
    assert columns["MetricsReady"] == (
        "string",
        ".status.conditions[?(@.type=='MetricsAvailable')].status",
    )
    assert columns["Age"] == ("date", ".metadata.creationTimestamp")


def test_the_diff_notices_a_difference() -> None:
    crd_node = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 1}}, "required": ["a"]}
    model_node = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}, "required": []}
    problems = _diff(crd_node, model_node)
    assert "/properties/a/minimum: CRD 1 != model 0" in problems
    assert any(p.startswith("/required") for p in problems)


def test_the_crds_cel_rules_are_mirrored_by_the_model() -> None:
    # jsonschema does not run CEL; the API server does (tests/integration/test_wva_generations.py).

    spec = _crd_version(_crd())["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    rules += [r["rule"] for r in spec["properties"]["scaleTargetRef"]["x-kubernetes-validations"]]
    assert len(rules) == 2
    with pytest.raises(pydantic.ValidationError, match="minReplicas must not exceed maxReplicas"):
        v1alpha1.VariantAutoscalingSpec.model_validate({"modelID": "m", "minReplicas": 3, "maxReplicas": 2})
    with pytest.raises(pydantic.ValidationError, match="apiVersion is required"):
        v1alpha1.ScaleTargetRef.model_validate({"kind": "InferencePool", "name": "p"})
    for kind in v1alpha1.DEFAULT_API_VERSIONS:
        assert f"'{kind}'" in rules[1]


def test_the_final_crds_printer_columns_are_there_too() -> None:
    columns = {
        c["name"]: (c["type"], c["jsonPath"]) for c in _crd_version(_crd())["additionalPrinterColumns"]
    }
    assert columns["Target"] == ("string", ".spec.scaleTargetRef.name")
    assert columns["Min"] == ("integer", ".spec.minReplicas")
    assert columns["Max"] == ("integer", ".spec.maxReplicas")
