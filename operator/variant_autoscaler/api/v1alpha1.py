"""Pydantic models of the ``VariantAutoscaling`` custom resource (``llmd.ai/v1alpha1``).

These mirror ``crds/llmd.ai_variantautoscalings.yaml`` (a test keeps the two in sync). Every field of
llm-d's workload-variant-autoscaler keeps its name, type and meaning; our additions are optional.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

GROUP = "llmd.ai"
VERSION = "v1alpha1"
KIND = "VariantAutoscaling"
PLURAL = "variantautoscalings"
SINGULAR = "variantautoscaling"
SHORT_NAME = "va"
ACCELERATOR_LABEL = "inference.optimization/acceleratorName"


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)


def _parse_parm(name: str, raw: dict[str, str], key: str) -> float:
    if key not in raw:
        raise ValueError(f"{name} is missing key {key!r}")
    try:
        value = float(raw[key])
    except (TypeError, ValueError):
        raise ValueError(f"{name}.{key} = {raw[key]!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}.{key} = {raw[key]!r} must be a finite number >= 0")
    return value


class PerfParms(_Model):
    """Decode and prefill parameters, as strings of milliseconds (WVA's format)."""

    decode_parms: dict[str, str] = Field(alias="decodeParms", min_length=1)
    prefill_parms: dict[str, str] = Field(alias="prefillParms", min_length=1)

    @property
    def alpha(self) -> float:
        return _parse_parm("decodeParms", self.decode_parms, "alpha")

    @property
    def beta(self) -> float:
        return _parse_parm("decodeParms", self.decode_parms, "beta")

    @property
    def gamma(self) -> float:
        return _parse_parm("prefillParms", self.prefill_parms, "gamma")

    @property
    def delta(self) -> float:
        return _parse_parm("prefillParms", self.prefill_parms, "delta")

    def validate_numbers(self) -> None:
        """Raise ``ValueError`` naming the first missing or non-numeric parameter."""
        for prop in ("alpha", "beta", "gamma", "delta"):
            getattr(self, prop)


class AcceleratorProfile(_Model):
    """Performance profile of the model on one accelerator type."""

    acc: str = Field(min_length=1)
    acc_count: int = Field(alias="accCount", ge=1)
    max_batch_size: int = Field(alias="maxBatchSize", ge=1)
    perf_parms: PerfParms = Field(alias="perfParms")


class ModelProfile(_Model):
    accelerators: list[AcceleratorProfile] = Field(min_length=1)

    @field_validator("accelerators")
    @classmethod
    def _unique_acc(cls, value: list[AcceleratorProfile]) -> list[AcceleratorProfile]:
        seen: set[str] = set()
        for profile in value:
            if profile.acc in seen:
                raise ValueError(f"accelerator {profile.acc!r} is listed twice")
            seen.add(profile.acc)
        return value


class ConfigMapKeyRef(_Model):
    name: str = Field(min_length=1)
    key: str = Field(min_length=1)


# --- our optional spec additions --------------------------------------------------------------------

ActuationMode = Literal["metrics", "patch", "shadow"]
ACTUATION_MODES: tuple[ActuationMode, ...] = ("metrics", "patch", "shadow")
ConditionStatus = Literal["True", "False", "Unknown"]

DECIMAL_PATTERN = r"^\d+(\.\d+)?$"


class ScaleTargetRef(_Model):
    """The workload whose replicas a variant decides (ours; WVA always uses the same-named Deployment)."""

    api_version: str | None = Field(default=None, alias="apiVersion", min_length=1)
    kind: str | None = Field(default=None, min_length=1)
    name: str = Field(min_length=1)


class ActuationSpec(_Model):
    mode: ActuationMode | None = None
    apply_max_batch: bool | None = Field(default=None, alias="applyMaxBatch")


class ScaleDownSpec(_Model):
    stabilization_window_seconds: int | None = Field(
        default=None, alias="stabilizationWindowSeconds", ge=0, le=3600
    )


class VariantAutoscalingSpec(_Model):
    model_id: str = Field(alias="modelID", min_length=1)
    slo_class_ref: ConfigMapKeyRef = Field(alias="sloClassRef")
    model_profile: ModelProfile = Field(alias="modelProfile")
    scale_target_ref: ScaleTargetRef | None = Field(default=None, alias="scaleTargetRef")
    min_replicas: int | None = Field(default=None, alias="minReplicas", ge=0)
    max_replicas: int | None = Field(default=None, alias="maxReplicas", ge=1)
    actuation: ActuationSpec | None = None
    share_model_load: bool | None = Field(default=None, alias="shareModelLoad")
    scale_down: ScaleDownSpec | None = Field(default=None, alias="scaleDown")

    @model_validator(mode="after")
    def _min_le_max(self) -> VariantAutoscalingSpec:
        # Mirrors the CRD's x-kubernetes-validations rule.
        if (
            self.min_replicas is not None
            and self.max_replicas is not None
            and self.min_replicas > self.max_replicas
        ):
            raise ValueError("minReplicas must not exceed maxReplicas")
        return self

    def profile_for(self, accelerator: str) -> AcceleratorProfile | None:
        for profile in self.model_profile.accelerators:
            if profile.acc == accelerator:
                return profile
        return None


# --- status ------------------------------------------------------------------------------------------


class LoadProfile(_Model):
    """Observed load, as WVA writes it: decimal strings, arrival rate in requests per minute."""

    arrival_rate: str = Field(alias="arrivalRate")
    avg_input_tokens: str = Field(alias="avgInputTokens")
    avg_output_tokens: str = Field(alias="avgOutputTokens")


class Allocation(_Model):
    """``status.currentAlloc``: what runs now, with its observed load and latencies (ms)."""

    accelerator: str = Field(min_length=1)
    num_replicas: int = Field(alias="numReplicas", ge=0)
    max_batch: int = Field(alias="maxBatch", ge=0)
    variant_cost: str = Field(alias="variantCost", pattern=DECIMAL_PATTERN)
    itl_average: str = Field(alias="itlAverage", pattern=DECIMAL_PATTERN)
    ttft_average: str = Field(alias="ttftAverage", pattern=DECIMAL_PATTERN)
    load: LoadProfile


class OptimizedAlloc(_Model):
    """``status.desiredOptimizedAlloc``: the decision (WVA's fields, plus batch, reason and predictions)."""

    last_run_time: datetime | None = Field(default=None, alias="lastRunTime")
    accelerator: str = Field(min_length=2)
    num_replicas: int = Field(alias="numReplicas", ge=0)
    max_batch: int | None = Field(default=None, alias="maxBatch", ge=0)
    reason: str | None = None
    ttft_average: str | None = Field(default=None, alias="ttftAverage", pattern=DECIMAL_PATTERN)
    itl_average: str | None = Field(default=None, alias="itlAverage", pattern=DECIMAL_PATTERN)
    variant_cost: str | None = Field(default=None, alias="variantCost", pattern=DECIMAL_PATTERN)


class ActuationStatus(_Model):
    applied: bool
    mode: ActuationMode | None = None
    last_scale_time: datetime | None = Field(default=None, alias="lastScaleTime")
    max_batch_stable_cycles: int | None = Field(default=None, alias="maxBatchStableCycles", ge=0)


class Recommendation(_Model):
    time: datetime
    num_replicas: int = Field(alias="numReplicas", ge=0)


CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Condition(_Model):
    """A ``metav1.Condition``."""

    type: str = Field(max_length=316, pattern=CONDITION_TYPE_PATTERN)
    status: ConditionStatus
    observed_generation: int | None = Field(default=None, alias="observedGeneration", ge=0)
    last_transition_time: datetime = Field(alias="lastTransitionTime")
    reason: str = Field(min_length=1, max_length=1024, pattern=CONDITION_REASON_PATTERN)
    message: str = Field(max_length=32768)


class VariantAutoscalingStatus(_Model):
    current_alloc: Allocation | None = Field(default=None, alias="currentAlloc")
    desired_optimized_alloc: OptimizedAlloc | None = Field(default=None, alias="desiredOptimizedAlloc")
    actuation: ActuationStatus | None = None
    recommendations: list[Recommendation] | None = Field(default=None, max_length=64)
    last_metrics_time: datetime | None = Field(default=None, alias="lastMetricsTime")
    observed_generation: int | None = Field(default=None, alias="observedGeneration", ge=0)
    conditions: list[Condition] | None = None

    def condition(self, type_: str) -> Condition | None:
        for cond in self.conditions or ():
            if cond.type == type_:
                return cond
        return None


# --- the object --------------------------------------------------------------------------------------


class ObjectMeta(_Model):
    """The parts of ``metadata`` the operator reads."""

    name: str
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = Field(default=None, alias="resourceVersion")
    labels: dict[str, str] = Field(default_factory=dict)
    deletion_timestamp: datetime | None = Field(default=None, alias="deletionTimestamp")


class VariantAutoscaling(_Model):
    api_version: str = Field(default=f"{GROUP}/{VERSION}", alias="apiVersion")
    kind: str = KIND
    metadata: ObjectMeta
    spec: VariantAutoscalingSpec
    status: VariantAutoscalingStatus | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.metadata.namespace, self.metadata.name)

    @property
    def accelerator_label(self) -> str | None:
        """WVA's accelerator label (``inference.optimization/acceleratorName``), if set and non-empty."""
        value = self.metadata.labels.get(ACCELERATOR_LABEL, "").strip()
        return value or None

    @property
    def target(self) -> ScaleTargetRef:
        """The scale target with defaults filled in (WVA: the Deployment named like the VA)."""
        ref = self.spec.scale_target_ref
        if ref is None:
            return ScaleTargetRef(apiVersion="apps/v1", kind="Deployment", name=self.metadata.name)
        return ScaleTargetRef(
            apiVersion=ref.api_version or "apps/v1", kind=ref.kind or "Deployment", name=ref.name
        )
