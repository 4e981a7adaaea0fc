"""Pydantic models of the ``VariantAutoscaling`` custom resource (``llmd.ai/v1alpha1``).

These mirror ``crds/llmd.ai_variantautoscalings.yaml`` (a test keeps the two in sync). Every field of
llm-d's workload-variant-autoscaler keeps its name, type and meaning; our additions are optional.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, field_validator

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
