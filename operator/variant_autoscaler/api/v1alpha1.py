"""Pydantic models of the ``VariantAutoscaling`` custom resource (``llmd.ai/v1alpha1``).

These mirror ``crds/llmd.ai_variantautoscalings.yaml`` (a test keeps the two in sync). Every field of
llm-d's workload-variant-autoscaler keeps its name, type and meaning; our additions are optional.

One model accepts every WVA generation (docs/migrating-from-wva.md): ``modelProfile`` and ``sloClassRef``
(required in 2025-10) are optional, ``scaleTargetRef``, ``minReplicas``, ``maxReplicas`` and
``variantCost`` (later generations) are accepted. Where the generations disagree, the ``effective_*``
methods of :class:`VariantAutoscalingSpec` and :class:`VariantAutoscaling` say what a field left out means.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from variant_autoscaler.api import names

GROUP = "llmd.ai"
VERSION = "v1alpha1"
KIND = "VariantAutoscaling"
PLURAL = "variantautoscalings"
SINGULAR = "variantautoscaling"
SHORT_NAME = "va"
ACCELERATOR_LABEL = "inference.optimization/acceleratorName"
#: Only the controller started with ``CONTROLLER_INSTANCE`` equal to this label's value manages the VA.
CONTROLLER_INSTANCE_LABEL = "wva.llmd.ai/controller-instance"
#: A namespace annotated with this set to ``"true"`` is left alone by a cluster-wide operator: its
#: variants are neither planned nor acted on, its namespace-local ConfigMaps not read (WVA's rule; a
#: namespaced install serves the namespaces it is given whatever their annotations, as WVA's
#: ``--watch-namespace`` does).
NAMESPACE_EXCLUDE_ANNOTATION = "wva.llmd.ai/exclude"

# Bounds (issue 22): every number fits an int32, with room to add a few of them; every string and list is
# bounded. Replicas: far above any cluster, far below 2**31 / 3 (three variants' sum stays an int32).
MAX_REPLICAS = 100_000
INT32_MAX = 2**31 - 1
ACCELERATOR_NAME_MAX = 63  # a label value holds it (inference.optimization/acceleratorName)
MODEL_ID_MAX = 256
DECIMAL_MAX = 32
REASON_MAX = 4096
#: The final WVA CRD's default maxReplicas, applied to VAs in its shape (see effective_max_replicas).
FINAL_CRD_DEFAULT_MAX_REPLICAS = 2
#: WVA's variantCost default (v0.4+), used when no accelerator unit cost is known either.
DEFAULT_VARIANT_COST = 10.0


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


_ParmValue = Annotated[str, Field(max_length=64)]


class PerfParms(_Model):
    """Decode and prefill parameters, as strings of milliseconds (WVA's format)."""

    decode_parms: dict[str, _ParmValue] = Field(alias="decodeParms", min_length=1, max_length=16)
    prefill_parms: dict[str, _ParmValue] = Field(alias="prefillParms", min_length=1, max_length=16)

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

    acc: str = Field(min_length=1, max_length=ACCELERATOR_NAME_MAX)
    acc_count: int = Field(alias="accCount", ge=1, le=4096)
    max_batch_size: int = Field(alias="maxBatchSize", ge=1, le=1_048_576)
    perf_parms: PerfParms = Field(alias="perfParms")


class ModelProfile(_Model):
    accelerators: list[AcceleratorProfile] = Field(min_length=1, max_length=64)

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
    # Free text, as WVA never read it: compared with class and ConfigMap names, never used in a request.
    name: str = Field(min_length=1, max_length=253)
    key: str = Field(min_length=1, max_length=253)


#: What an absent sloClassRef reads as (matches no ConfigMap and no class: the class is found by modelID).
NO_SLO_CLASS_REF = ConfigMapKeyRef.model_construct(name="", key="")
#: What an absent modelProfile reads as through :attr:`VariantAutoscalingSpec.model_profile`.
NO_MODEL_PROFILE = ModelProfile.model_construct(accelerators=[])


# --- our optional spec additions --------------------------------------------------------------------

ActuationMode = Literal["metrics", "patch", "shadow"]
ACTUATION_MODES: tuple[ActuationMode, ...] = ("metrics", "patch", "shadow")
ConditionStatus = Literal["True", "False", "Unknown"]

DECIMAL_PATTERN = r"^\d+(\.\d+)?$"


#: Kinds whose apiVersion may be left out (the default for each).
DEFAULT_API_VERSIONS: dict[str, str] = {
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "ReplicaSet": "apps/v1",
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1",
}


class ScaleTargetRef(_Model):
    """The workload whose replicas a variant decides (WVA from v0.5; before, the same-named Deployment).

    The name is a Kubernetes object name (a DNS-1123 subdomain, the rule of every kind with a scale
    subresource, built in or custom), so it can never carry a path such as ``../../victim-ns/...``.
    """

    api_version: str | None = Field(
        default=None, alias="apiVersion", min_length=1, max_length=317, pattern=names.API_VERSION_PATTERN
    )
    kind: str | None = Field(default=None, min_length=1, max_length=63, pattern=names.KIND_PATTERN)
    name: str = Field(min_length=1, max_length=253, pattern=names.DNS1123_SUBDOMAIN_PATTERN)

    @model_validator(mode="after")
    def _api_version_known(self) -> ScaleTargetRef:
        # Mirrors the CRD's x-kubernetes-validations rule on scaleTargetRef.
        if self.api_version is None and self.kind is not None and self.kind not in DEFAULT_API_VERSIONS:
            raise ValueError(
                "apiVersion is required for a kind other than Deployment, StatefulSet, ReplicaSet or "
                "LeaderWorkerSet"
            )
        return self


class ActuationSpec(_Model):
    mode: ActuationMode | None = None
    apply_max_batch: bool | None = Field(default=None, alias="applyMaxBatch")


class ScaleDownSpec(_Model):
    stabilization_window_seconds: int | None = Field(
        default=None, alias="stabilizationWindowSeconds", ge=0, le=3600
    )


#: Which profile sizes the variant (``spec.profileSource``): docs/profiles.md.
ProfileSourceChoice = Literal["auto", "spec", "learned"]
PROFILE_SOURCE_CHOICES: tuple[ProfileSourceChoice, ...] = ("auto", "spec", "learned")


class VariantAutoscalingSpec(_Model):
    model_id: str = Field(alias="modelID", min_length=1, max_length=MODEL_ID_MAX)
    # Optional since WVA v0.4; read them through slo_class_ref / model_profile (never None) or test
    # has_slo_class_ref / has_model_profile.
    slo_class: ConfigMapKeyRef | None = Field(default=None, alias="sloClassRef")
    profile: ModelProfile | None = Field(default=None, alias="modelProfile")
    scale_target_ref: ScaleTargetRef | None = Field(default=None, alias="scaleTargetRef")
    min_replicas: int | None = Field(default=None, alias="minReplicas", ge=0, le=MAX_REPLICAS)
    max_replicas: int | None = Field(default=None, alias="maxReplicas", ge=1, le=MAX_REPLICAS)
    variant_cost: str | None = Field(
        default=None, alias="variantCost", max_length=DECIMAL_MAX, pattern=DECIMAL_PATTERN
    )
    actuation: ActuationSpec | None = None
    share_model_load: bool | None = Field(default=None, alias="shareModelLoad")
    scale_down: ScaleDownSpec | None = Field(default=None, alias="scaleDown")
    profile_source: ProfileSourceChoice | None = Field(default=None, alias="profileSource")

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

    @property
    def has_model_profile(self) -> bool:
        return self.profile is not None

    @property
    def has_slo_class_ref(self) -> bool:
        return self.slo_class is not None

    @property
    def model_profile(self) -> ModelProfile:
        """The profile; without one (WVA v0.4+), a profile listing no accelerator."""
        return self.profile if self.profile is not None else NO_MODEL_PROFILE

    @property
    def slo_class_ref(self) -> ConfigMapKeyRef:
        """The class reference; without one (WVA v0.4+), a reference that matches nothing."""
        return self.slo_class if self.slo_class is not None else NO_SLO_CLASS_REF

    @property
    def later_shape(self) -> bool:
        """Written for WVA's later CRDs (v0.5+): a scaleTargetRef, and neither modelProfile nor
        sloClassRef. Decides the meaning of a left-out maxReplicas/minReplicas."""
        return self.scale_target_ref is not None and self.profile is None and self.slo_class is None

    def effective_min_replicas(self, scale_to_zero: bool) -> int:
        """minReplicas, or what its absence meant in the generation the VA is written for: the final
        CRD's default 1 for a VA in the later shape; WVA 2025-10's rule otherwise (0 when
        ``WVA_SCALE_TO_ZERO`` is true, else 1)."""
        if self.min_replicas is not None:
            return self.min_replicas
        if self.later_shape:
            return 1
        return 0 if scale_to_zero else 1

    def effective_max_replicas(self) -> int | None:
        """maxReplicas, or what its absence meant: unbounded (None) in WVA 2025-10 and v0.4, whose VAs
        carry a modelProfile or an sloClassRef; the final CRD's default 2 for a VA in the later shape
        (raised to minReplicas when that is higher, where the final CRD would have refused the VA)."""
        if self.max_replicas is not None:
            return self.max_replicas
        if self.later_shape:
            return max(FINAL_CRD_DEFAULT_MAX_REPLICAS, self.min_replicas or 0)
        return None

    def replica_cost(self, accelerator_unit_cost: float | None, acc_count: int = 1) -> float:
        """Cost of one replica: ``variantCost`` when given (WVA v0.4+); else the accelerator's unit
        cost times its count per replica (WVA 2025-10); else WVA's default 10.0."""
        if self.variant_cost is not None:
            return float(self.variant_cost)
        if accelerator_unit_cost is not None:
            return accelerator_unit_cost * acc_count
        return DEFAULT_VARIANT_COST

    def profile_for(self, accelerator: str) -> AcceleratorProfile | None:
        for profile in self.model_profile.accelerators:
            if profile.acc == accelerator:
                return profile
        return None


# --- status ------------------------------------------------------------------------------------------


_Decimal = Annotated[str, Field(max_length=DECIMAL_MAX, pattern=DECIMAL_PATTERN)]
_Figure = Annotated[str, Field(max_length=DECIMAL_MAX)]
_Count = Annotated[int, Field(ge=0, le=INT32_MAX)]


class LoadProfile(_Model):
    """Observed load, as WVA writes it: decimal strings, arrival rate in requests per minute."""

    arrival_rate: _Figure = Field(alias="arrivalRate")
    avg_input_tokens: _Figure = Field(alias="avgInputTokens")
    avg_output_tokens: _Figure = Field(alias="avgOutputTokens")
    # (ours) Requests preempted per minute over its pods; absent when not reported.
    preemption_rate: _Decimal | None = Field(default=None, alias="preemptionRate")


class Allocation(_Model):
    """``status.currentAlloc``: what runs now, with its observed load and latencies (ms)."""

    accelerator: str | None = Field(default=None, min_length=1, max_length=ACCELERATOR_NAME_MAX)
    num_replicas: _Count = Field(alias="numReplicas")
    max_batch: _Count = Field(alias="maxBatch")
    variant_cost: _Decimal = Field(alias="variantCost")
    itl_average: _Decimal = Field(alias="itlAverage")
    ttft_average: _Decimal = Field(alias="ttftAverage")
    load: LoadProfile


class OptimizedAlloc(_Model):
    """``status.desiredOptimizedAlloc``: the decision (WVA's fields, plus batch, reason and predictions).

    The accelerator's bounds are the spec's (1 to 63 characters): WVA 2025-10 required 2 here while its
    spec allowed 1, so it could write a status its own CRD refused.
    """

    last_run_time: datetime | None = Field(default=None, alias="lastRunTime")
    accelerator: str | None = Field(default=None, min_length=1, max_length=ACCELERATOR_NAME_MAX)
    num_replicas: _Count = Field(alias="numReplicas")
    max_batch: _Count | None = Field(default=None, alias="maxBatch")
    reason: str | None = Field(default=None, max_length=REASON_MAX)
    ttft_average: _Decimal | None = Field(default=None, alias="ttftAverage")
    itl_average: _Decimal | None = Field(default=None, alias="itlAverage")
    variant_cost: _Decimal | None = Field(default=None, alias="variantCost")


class ActuationStatus(_Model):
    applied: bool
    mode: ActuationMode | None = None
    last_scale_time: datetime | None = Field(default=None, alias="lastScaleTime")
    max_batch_stable_cycles: _Count | None = Field(default=None, alias="maxBatchStableCycles")


class Recommendation(_Model):
    time: datetime
    num_replicas: _Count = Field(alias="numReplicas")


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


Confidence = Literal["high", "medium", "low", "none"]
LEARNED_NOTE_MAX = 256
LEARNED_REASON_MAX = 1024
LEARNED_STATE_MAX = 4096


class LearnedParameter(_Model):
    """One learned parameter: its value (ms, or ms per unit of its regressor), where it comes from
    (``learned``, ``prior``: the hand profile's, kept; ``none``), how sure the estimator is, and why."""

    value: _Decimal | None = None
    source: Literal["learned", "prior", "none"]
    confidence: Confidence
    relative_error: _Decimal | None = Field(default=None, alias="relativeError")
    impact: _Decimal | None = None
    note: str | None = Field(default=None, max_length=LEARNED_NOTE_MAX)


class SlowReplicaStatus(_Model):
    """A pod of the variant slower than its peers (core/slow_replicas.py)."""

    pod: str = Field(min_length=1, max_length=253)
    ratio: _Decimal | None = None
    service_seconds: _Decimal | None = Field(default=None, alias="serviceSeconds")
    judged_time: datetime | None = Field(default=None, alias="judgedTime")


class LearnedProfileStatus(_Model):
    """``status.learnedProfile``: the profile learned online, the source that sized the variant, and the
    estimator's state (compact JSON) that a restarted operator continues from (docs/profiles.md)."""

    accelerator: str | None = Field(default=None, min_length=1, max_length=ACCELERATOR_NAME_MAX)
    source: Literal["spec", "learned", "saturation"]
    reason: str | None = Field(default=None, max_length=LEARNED_REASON_MAX)
    confidence: Confidence
    alpha: LearnedParameter | None = None
    beta: LearnedParameter | None = None
    gamma: LearnedParameter | None = None
    delta: LearnedParameter | None = None
    decode_windows: _Decimal | None = Field(default=None, alias="decodeWindows")
    prefill_windows: _Decimal | None = Field(default=None, alias="prefillWindows")
    last_learned_time: datetime | None = Field(default=None, alias="lastLearnedTime")
    held_until: datetime | None = Field(default=None, alias="heldUntil")
    drift_time: datetime | None = Field(default=None, alias="driftTime")
    last_run_time: datetime | None = Field(default=None, alias="lastRunTime")
    note: str | None = Field(default=None, max_length=LEARNED_NOTE_MAX)
    state: str | None = Field(default=None, max_length=LEARNED_STATE_MAX)
    slow_replicas: list[SlowReplicaStatus] | None = Field(default=None, alias="slowReplicas", max_length=10)


class ForecastStatus(_Model):
    """(ours) The demand forecast of the variant's model, kept across restarts (docs/operator.md)."""

    model: str | None = Field(default=None, max_length=256)
    updated: datetime | None = None
    level: float | None = None
    trend: float | None = None
    step: int = Field(ge=0, le=2147483647)
    pending: list[float] | None = Field(default=None, max_length=64)
    recent: list[float] | None = Field(default=None, max_length=64)
    errors: list[float] | None = Field(default=None, max_length=240)
    held: float | None = None
    shifted: int | None = Field(default=None, ge=0, le=2147483647)
    upper_rate: str | None = Field(default=None, alias="upperRate", max_length=32)
    point_rate: str | None = Field(default=None, alias="pointRate", max_length=32)
    planned_rate: str | None = Field(default=None, alias="plannedRate", max_length=32)


class IdcStatus(_Model):
    """(ours) The index of dispersion of the model's request counts over one window (1: Poisson)."""

    window_seconds: str = Field(alias="windowSeconds", max_length=32)
    index_of_dispersion: str = Field(alias="indexOfDispersion", max_length=32)


class LengthStatus(_Model):
    """(ours) A request-length distribution read from vLLM's histograms: mean and quantiles (tokens)."""

    mean: str | None = Field(default=None, max_length=32)
    p50: str | None = Field(default=None, max_length=32)
    p90: str | None = Field(default=None, max_length=32)
    p99: str | None = Field(default=None, max_length=32)


class WorkloadStatus(_Model):
    """(ours) What the tail model sized the variant's model with (docs/tail-slo.md)."""

    burstiness: list[IdcStatus] | None = Field(default=None, max_length=16)
    measured_rate: str | None = Field(default=None, alias="measuredRate", max_length=32)
    prompt_tokens: LengthStatus | None = Field(default=None, alias="promptTokens")
    output_tokens: LengthStatus | None = Field(default=None, alias="outputTokens")


class VariantAutoscalingStatus(_Model):
    current_alloc: Allocation | None = Field(default=None, alias="currentAlloc")
    desired_optimized_alloc: OptimizedAlloc | None = Field(default=None, alias="desiredOptimizedAlloc")
    actuation: ActuationStatus | None = None
    recommendations: list[Recommendation] | None = Field(default=None, max_length=64)
    last_metrics_time: datetime | None = Field(default=None, alias="lastMetricsTime")
    forecast: ForecastStatus | None = None
    workload: WorkloadStatus | None = None
    observed_generation: int | None = Field(default=None, alias="observedGeneration", ge=0)
    conditions: list[Condition] | None = Field(default=None, max_length=32)
    learned_profile: LearnedProfileStatus | None = Field(default=None, alias="learnedProfile")

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
        return accelerator_of(self.metadata.labels)

    @property
    def target(self) -> ScaleTargetRef:
        """The scale target with defaults filled in (WVA before v0.5: the Deployment named like the VA;
        a LeaderWorkerSet without apiVersion is in leaderworkerset.x-k8s.io/v1)."""
        ref = self.spec.scale_target_ref
        if ref is None:
            # The VA's own name, which the API server has validated as an object name.
            return ScaleTargetRef.model_construct(
                api_version="apps/v1", kind="Deployment", name=self.metadata.name
            )
        kind = ref.kind or "Deployment"
        return ScaleTargetRef.model_construct(
            api_version=ref.api_version or DEFAULT_API_VERSIONS.get(kind, "apps/v1"), kind=kind, name=ref.name
        )

    @property
    def metrics_variant_name(self) -> str:
        """The ``variant_name`` label of the variant's ``inferno_*`` and ``wva_*`` series: the VA's name, as
        WVA wrote it for every VA generation (an HPA selects on it). Annotated HPAs and ScaledObjects (v0.9)
        have no VA: theirs is the target's name (:mod:`variant_autoscaler.api.annotated`)."""
        return self.metadata.name

    def managed_by(self, controller_instance: str | None) -> bool:
        """Whether the controller started with ``CONTROLLER_INSTANCE=controller_instance`` manages this VA:
        without an instance, every VA (WVA's rule, backwards compatible); with one, only the VAs labelled
        ``wva.llmd.ai/controller-instance`` with that value."""
        return labels_select_instance(self.metadata.labels, controller_instance)


def accelerator_of(labels: Mapping[str, Any] | None) -> str | None:
    """WVA's accelerator label (``inference.optimization/acceleratorName``) among an object's labels, if
    set and non-empty (a VariantAutoscaling's, or an annotated HPA's or ScaledObject's)."""
    value = str((labels or {}).get(ACCELERATOR_LABEL) or "").strip()
    return value or None


def namespace_excluded(namespace: Mapping[str, Any]) -> bool:
    """Whether a Namespace object carries ``wva.llmd.ai/exclude: "true"`` (exactly, as WVA compares)."""
    annotations = (namespace.get("metadata") or {}).get("annotations") or {}
    return annotations.get(NAMESPACE_EXCLUDE_ANNOTATION) == "true"


def labels_select_instance(labels: Mapping[str, str] | None, controller_instance: str | None) -> bool:
    """WVA's controller-instance rule on an object's labels (VAs, annotated HPAs and ScaledObjects)."""
    if not controller_instance:
        return True
    return (labels or {}).get(CONTROLLER_INSTANCE_LABEL) == controller_instance
