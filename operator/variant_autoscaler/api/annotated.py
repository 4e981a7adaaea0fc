"""WVA v0.9's variants without a CRD: an annotated HPA or KEDA ScaledObject (pure parser).

An ``autoscaling/v2`` HorizontalPodAutoscaler or a ``keda.sh/v1alpha1`` ScaledObject is a managed variant
when annotated ``llm-d.ai/managed: "true"`` and ``llm-d.ai/model-id: <model>``
(``llm-d.ai/variant-cost: "<number>"`` optional, default 10.0). Its ``scaleTargetRef`` is the variant's
workload, its min/max replicas the variant's bounds. Its decision is exported as ``wva_desired_replicas``
with ``variant_name`` = the *target's* name (what v0.9's HPA and ScaledObject samples select on), in the
object's namespace; there is no VA status, so it is explained in Events on the object.

:func:`parse_annotated` returns None for an object that is not managed, a :class:`AnnotatedVariant` for
one that is, and raises :class:`AnnotationError` (one line, for an Event) for one that is managed but
unusable. The target's name must be a Kubernetes object name: a ScaledObject's schema does not check it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from variant_autoscaler.api import names
from variant_autoscaler.api.v1alpha1 import (
    DECIMAL_MAX,
    DEFAULT_API_VERSIONS,
    DEFAULT_VARIANT_COST,
    MAX_REPLICAS,
    MODEL_ID_MAX,
    labels_select_instance,
)

__all__ = [
    "ANNOTATION_MANAGED",
    "ANNOTATION_MODEL_ID",
    "ANNOTATION_VARIANT_COST",
    "AnnotatedVariant",
    "AnnotationError",
    "parse_annotated",
]

ANNOTATION_MANAGED = "llm-d.ai/managed"
ANNOTATION_MODEL_ID = "llm-d.ai/model-id"
ANNOTATION_VARIANT_COST = "llm-d.ai/variant-cost"

SourceKind = Literal["HorizontalPodAutoscaler", "ScaledObject"]
_SOURCES: dict[str, SourceKind] = {
    "autoscaling/v2": "HorizontalPodAutoscaler",
    "keda.sh/v1alpha1": "ScaledObject",
}
# KEDA's defaults when a ScaledObject leaves them out.
_KEDA_MIN, _KEDA_MAX = 0, 100


class AnnotationError(ValueError):
    """A managed object that cannot be planned; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class AnnotatedVariant:
    """One annotated HPA or ScaledObject, read as a variant."""

    source_kind: SourceKind
    namespace: str
    name: str
    target_api_version: str
    target_kind: str
    target_name: str
    model_id: str
    variant_cost: float
    min_replicas: int
    max_replicas: int
    uid: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def metrics_variant_name(self) -> str:
        """``variant_name`` of its ``wva_*`` series: the target's name (v0.9's selector)."""
        return self.target_name


def _int(where: str, value: object, default: int, low: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise AnnotationError(f"{where} must be an integer, got {value!r}")
    if not low <= value <= MAX_REPLICAS:
        raise AnnotationError(f"{where} must be between {low} and {MAX_REPLICAS}, got {value}")
    return value


def parse_annotated(
    obj: Mapping[str, Any], *, controller_instance: str | None = None
) -> AnnotatedVariant | None:
    """Read ``obj`` (an HPA or ScaledObject as the API returns it) as a variant; None when it is not one
    (not annotated as managed, another kind, or labelled for another controller instance)."""
    source = _SOURCES.get(str(obj.get("apiVersion")))
    if source is None or obj.get("kind") != source:
        return None
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if str(annotations.get(ANNOTATION_MANAGED, "")).strip().lower() != "true":
        return None
    if not labels_select_instance(meta.get("labels"), controller_instance):
        return None
    where = f"{source} {meta.get('namespace')}/{meta.get('name')}"
    model_id = str(annotations.get(ANNOTATION_MODEL_ID, "")).strip()
    if not model_id or len(model_id) > MODEL_ID_MAX:
        raise AnnotationError(
            f"{where}: annotation {ANNOTATION_MODEL_ID} must name the model (1 to {MODEL_ID_MAX} characters)"
        )
    cost_raw = annotations.get(ANNOTATION_VARIANT_COST)
    cost = DEFAULT_VARIANT_COST
    if cost_raw is not None:
        text = str(cost_raw).strip()
        try:
            cost = float(text)
        except ValueError:
            cost = -1.0
        if len(text) > DECIMAL_MAX or not text.replace(".", "", 1).isdigit() or cost < 0:
            raise AnnotationError(
                f"{where}: annotation {ANNOTATION_VARIANT_COST} must be a decimal, got {text!r}"
            )
    spec = obj.get("spec") or {}
    ref = spec.get("scaleTargetRef") or {}
    target_name = ref.get("name")
    if not names.is_dns1123_subdomain(target_name):
        raise AnnotationError(f"{where}: scaleTargetRef.name {target_name!r} is not a Kubernetes object name")
    kind = ref.get("kind") or "Deployment"
    api_version = ref.get("apiVersion") or DEFAULT_API_VERSIONS.get(str(kind))
    if not names.is_kind(kind) or not names.is_api_version(api_version):
        raise AnnotationError(f"{where}: scaleTargetRef needs a valid kind and apiVersion")
    if source == "HorizontalPodAutoscaler":
        low = _int(f"{where}: spec.minReplicas", spec.get("minReplicas"), 1, 0)
        high = _int(f"{where}: spec.maxReplicas", spec.get("maxReplicas"), MAX_REPLICAS, 1)
    else:
        low = _int(f"{where}: spec.minReplicaCount", spec.get("minReplicaCount"), _KEDA_MIN, 0)
        high = _int(f"{where}: spec.maxReplicaCount", spec.get("maxReplicaCount"), _KEDA_MAX, 1)
    if low > high:
        raise AnnotationError(f"{where}: the minimum ({low}) exceeds the maximum ({high})")
    return AnnotatedVariant(
        source_kind=source,
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        target_api_version=str(api_version),
        target_kind=str(kind),
        target_name=str(target_name),
        model_id=model_id,
        variant_cost=cost,
        min_replicas=low,
        max_replicas=high,
        uid=meta.get("uid"),
    )
