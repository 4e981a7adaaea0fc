"""``variant-autoscaler plan -f FILE [-o json|table]``: offline planning from a YAML or JSON file.

The file holds what the operator reads from the cluster (see docs/optimizer.md)::

    optimizer: {unlimited: false, saturationPolicy: PriorityRoundRobin}
    accelerators:            # the data of the accelerator-unit-costs ConfigMap
      A100: {device: NVIDIA-A100-PCIE-80GB, cost: "40.00"}
    serviceClasses:          # the documents of the service-classes-config ConfigMap
      - {name: Premium, priority: 1, data: [{model: default/default, slo-tpot: 24, slo-ttft: 500}]}
    capacity: {NVIDIA-A100-PCIE-80GB: 8}
    namespaceCapacity:       # optional, limited mode: GPUs a namespace's variants may hold together
      llm-d-sim: {NVIDIA-A100-PCIE-80GB: 4}
    queueingModel:           # optional: the data of wva-queueing-model-config (SLOs of classless models)
      default: "sloMultiplier: 3"
    variants:
      - name: vllme-deployment
        namespace: llm-d-sim
        modelID: default/default
        accelerator: A100
        currentReplicas: 1
        modelProfile: {accelerators: [...]}
        load: {arrivalRate: 40, avgInputTokens: 128, avgOutputTokens: 128}

A file that cannot be used fails with an error naming the field; a bad variant is reported with its
reason and does not stop the others.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from variant_autoscaler.api.configmaps import (
    AcceleratorCosts,
    ServiceClasses,
    parse_accelerator_costs,
    parse_service_classes,
)
from variant_autoscaler.api.documents import load_document
from variant_autoscaler.api.queueing_config import parse_queueing_config
from variant_autoscaler.api.v1alpha1 import ModelProfile
from variant_autoscaler.core.model import OptimizerConfig, Plan, SaturationPolicy
from variant_autoscaler.core.workload import DEFAULT_PREFILL_BUDGET
from variant_autoscaler.errors import ConfigError
from variant_autoscaler.planner import (
    NamespaceCap,
    ObservedLoad,
    OptimizerPlanner,
    PlannedVariant,
    PlanOutcome,
    PlanRequest,
    SloClassRef,
    profiles_of,
)

__all__ = ["PlanInputs", "build_inputs", "load_plan_file", "register", "render_json", "render_table", "run"]


class _Strict(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)


class OptimizerSection(_Strict):
    unlimited: bool = True
    saturation_policy: str = Field(default="None", alias="saturationPolicy")
    delayed_best_effort: bool = Field(default=False, alias="delayedBestEffort")
    batch_sizes: int = Field(default=4, alias="batchSizes", ge=1, le=16)
    mip_rel_gap: float = Field(default=1e-4, alias="mipRelGap", ge=0.0, lt=1.0)
    time_limit: float = Field(default=10.0, alias="timeLimit", gt=0.0)
    # How the servers prefill, for attainment classes (the operator's CHUNKED_PREFILL and
    # MAX_NUM_BATCHED_TOKENS).
    chunked_prefill: bool = Field(default=True, alias="chunkedPrefill")
    max_num_batched_tokens: int = Field(default=DEFAULT_PREFILL_BUDGET, alias="maxNumBatchedTokens", ge=1)


class LoadSection(_Strict):
    arrival_rate: float = Field(alias="arrivalRate", ge=0.0, allow_inf_nan=False)
    avg_input_tokens: float = Field(alias="avgInputTokens", ge=0.0, allow_inf_nan=False)
    avg_output_tokens: float = Field(alias="avgOutputTokens", ge=0.0, allow_inf_nan=False)


class VariantSection(_Strict):
    name: str = Field(min_length=1)
    namespace: str = Field(default="default", min_length=1)
    model_id: str = Field(alias="modelID", min_length=1)
    service_class: str | None = Field(default=None, alias="serviceClass")
    accelerator: str | None = None
    current_replicas: int = Field(default=0, alias="currentReplicas", ge=0)
    kept_replicas: int = Field(default=0, alias="keptReplicas", ge=0)
    min_replicas: int = Field(default=1, alias="minReplicas", ge=0)
    max_replicas: int | None = Field(default=None, alias="maxReplicas", ge=1)
    keep_accelerator: bool = Field(default=False, alias="keepAccelerator")
    max_batch_size: int | None = Field(default=None, alias="maxBatchSize", ge=1)
    share_load: bool = Field(default=False, alias="shareModelLoad")
    model_profile: ModelProfile = Field(alias="modelProfile")
    load: LoadSection | None = None


class PlanFileSection(_Strict):
    optimizer: OptimizerSection = OptimizerSection()
    accelerators: dict[str, Any] = Field(min_length=1)
    service_classes: list[Any] | dict[str, Any] = Field(alias="serviceClasses")
    capacity: dict[str, int] = Field(default_factory=dict)
    namespace_capacity: dict[str, dict[str, int]] = Field(default_factory=dict, alias="namespaceCapacity")
    queueing_model: dict[str, Any] | None = Field(default=None, alias="queueingModel")
    variants: list[Any] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """The planning request, plus the variants that could not be read (key → reason)."""

    request: PlanRequest
    accelerators: AcceleratorCosts
    classes: ServiceClasses
    invalid: Mapping[str, str]


def _errors(exc: ValidationError, prefix: str = "") -> str:
    parts = []
    for error in exc.errors():
        location = ".".join(str(p) for p in (*((prefix,) if prefix else ()), *error["loc"]))
        parts.append(f"field '{location}': {error['msg']}" if location else error["msg"])
    return "; ".join(parts)


def _variant(raw: object, index: int, classes: ServiceClasses) -> tuple[str, PlannedVariant | str]:
    label = f"variants[{index}]"
    if isinstance(raw, Mapping) and isinstance(raw.get("name"), str):
        namespace = raw.get("namespace") if isinstance(raw.get("namespace"), str) else "default"
        label = f"{namespace}/{raw['name']}"
    try:
        section = VariantSection.model_validate(raw)
    except ValidationError as exc:
        return label, f"invalid: {_errors(exc)}"
    key = f"{section.namespace}/{section.name}"
    if section.kept_replicas > section.current_replicas:
        return key, (
            f"invalid: field 'keptReplicas': {section.kept_replicas} is more than currentReplicas "
            f"({section.current_replicas})"
        )
    try:
        profiles = profiles_of(section.model_profile)
    except ConfigError as exc:
        return key, f"invalid: field 'modelProfile': {exc}"
    ref = None
    if section.service_class is not None:
        cls = classes.named(section.service_class)
        if cls is None:
            return key, f"invalid: field 'serviceClass': no service class named {section.service_class!r}"
        if cls.target(section.model_id) is None:
            return key, f"invalid: service class {cls.name!r} has no entry for model {section.model_id!r}"
        ref = SloClassRef(cls.name)
    load = (
        None
        if section.load is None
        else ObservedLoad(
            section.load.arrival_rate, section.load.avg_input_tokens, section.load.avg_output_tokens
        )
    )
    return key, PlannedVariant(
        key=(section.namespace, section.name),
        model_id=section.model_id,
        profiles=profiles,
        accelerator=section.accelerator,
        current_replicas=section.current_replicas,
        kept_replicas=section.kept_replicas,
        load=load,
        min_replicas=section.min_replicas,
        max_replicas=section.max_replicas,
        slo_class_ref=ref,
        keep_accelerator=section.keep_accelerator,
        max_batch=section.max_batch_size,
        # The file states each member's own load: the group is the model (the optimizer pools by model).
        share_group=section.model_id if section.share_load else None,
    )


def build_inputs(document: object) -> PlanInputs:
    """Validate a plan document (already decoded from YAML/JSON)."""
    if not isinstance(document, Mapping):
        raise ConfigError("the plan file must be a mapping with accelerators, serviceClasses and variants")
    try:
        section = PlanFileSection.model_validate(document)
    except ValidationError as exc:
        raise ConfigError(f"plan file: {_errors(exc)}") from None
    try:
        policy = SaturationPolicy.parse(section.optimizer.saturation_policy)
    except ConfigError as exc:
        raise ConfigError(f"plan file: field 'optimizer.saturationPolicy': {exc}") from None
    config = OptimizerConfig(
        unlimited=section.optimizer.unlimited,
        saturation_policy=policy,
        delayed_best_effort=section.optimizer.delayed_best_effort,
        batch_sizes=section.optimizer.batch_sizes,
        mip_rel_gap=section.optimizer.mip_rel_gap,
        time_limit_s=section.optimizer.time_limit,
    )
    accelerators = parse_accelerator_costs(section.accelerators)
    if accelerators.problems:
        raise ConfigError(f"plan file: field 'accelerators': {'; '.join(accelerators.problems)}")
    classes = parse_service_classes(section.service_classes)
    if classes.problems:
        raise ConfigError(f"plan file: field 'serviceClasses': {'; '.join(classes.problems)}")
    for device, count in section.capacity.items():
        if count < 0:
            raise ConfigError(f"plan file: field 'capacity.{device}': must be >= 0, got {count}")
    for namespace, devices in section.namespace_capacity.items():
        for device, count in devices.items():
            if count < 0:
                raise ConfigError(
                    f"plan file: field 'namespaceCapacity.{namespace}.{device}': must be >= 0, got {count}"
                )
    queueing = parse_queueing_config(section.queueing_model, name="queueingModel")
    if queueing.problems:
        raise ConfigError(f"plan file: field 'queueingModel': {'; '.join(queueing.problems)}")
    variants: dict[str, PlannedVariant] = {}
    invalid: dict[str, str] = {}
    for index, raw in enumerate(section.variants):
        key, parsed = _variant(raw, index, classes)
        if key in variants or key in invalid:
            invalid[f"{key} (variants[{index}])"] = f"invalid: variant {key} is listed twice"
            continue
        if isinstance(parsed, str):
            invalid[key] = parsed
        else:
            # As the operator: the ConfigMap's SLOs for a model no class names, else its sloMultiplier.
            namespace = parsed.key[0]
            variants[key] = replace(
                parsed,
                default_slo=queueing.slo_for(parsed.model_id, namespace),
                slo_multiplier=queueing.multiplier_for(parsed.model_id, namespace),
            )
    request = PlanRequest(
        variants=tuple(variants.values()),
        accelerators=accelerators.accelerators,
        classes=classes,
        optimizer=config,
        capacity=dict(section.capacity),
        group_load_is_total=False,
        chunked_prefill=section.optimizer.chunked_prefill,
        prefill_budget=section.optimizer.max_num_batched_tokens,
        namespace_caps={
            ns: NamespaceCap(dict(devices), "the plan file's namespaceCapacity")
            for ns, devices in section.namespace_capacity.items()
        },
    )
    return PlanInputs(request=request, accelerators=accelerators, classes=classes, invalid=invalid)


def load_plan_file(path: Path) -> PlanInputs:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text") from None
    return build_inputs(load_document(text, source=str(path)))


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """HiGHS may print diagnostics on the process's stdout; keep them off the plan's output."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def make_plan(inputs: PlanInputs) -> tuple[Plan, dict[str, str]]:
    """The plan, and every variant without a decision in it (unreadable, or refused by the planner)."""
    with _stdout_to_stderr():
        outcome: PlanOutcome = OptimizerPlanner().plan(inputs.request)
    assert outcome.plan is not None
    # As in the operator's status, each reason ends with where the variant's SLOs came from.
    sources = {f"{namespace}/{name}": how for (namespace, name), how in outcome.slo_sources.items()}
    decisions = {
        key: replace(d, reason=f"{d.reason} [{sources[key]}]") if key in sources else d
        for key, d in outcome.plan.decisions.items()
    }
    plan = replace(outcome.plan, decisions=decisions)
    invalid = dict(inputs.invalid)
    for (namespace, name), reason in outcome.failures.items():
        key = f"{namespace}/{name}"
        if key not in plan.decisions:
            invalid[key] = f"invalid: {reason}"
    return plan, invalid


def _round(value: float) -> float:
    return round(value, 4)


def render_json(plan: Plan, invalid: Mapping[str, str]) -> str:
    variants: dict[str, dict[str, Any]] = {}
    for key, decision in plan.decisions.items():
        variants[key] = {
            "accelerator": decision.accelerator,
            "replicas": decision.replicas,
            "maxBatch": decision.max_batch,
            "cost": _round(decision.cost),
            "itl": _round(decision.itl),
            "ttft": _round(decision.ttft),
            "reason": decision.reason,
            "outcome": decision.outcome.value,
            "served": _round(decision.served_fraction),
        }
    for key, reason in invalid.items():
        variants[key] = {
            "accelerator": None,
            "replicas": 0,
            "maxBatch": 0,
            "cost": 0.0,
            "itl": 0.0,
            "ttft": 0.0,
            "reason": reason,
            "outcome": "invalid",
            "served": 0.0,
        }
    document = {
        "variants": dict(sorted(variants.items())),
        "totalCost": _round(plan.total_cost),
        "binding": [
            {"device": b.device, "capacity": b.capacity, "used": b.used, "variants": list(b.variants)}
            for b in plan.binding
        ],
        "mode": plan.mode,
        "solver": {
            "status": plan.status,
            "mipGap": plan.mip_gap,
            "solves": plan.solves,
            "sizings": plan.sizings,
            "analyzerSeconds": plan.analyzer_seconds,
            "solveSeconds": plan.solve_seconds,
        },
    }
    return json.dumps(document, indent=2, ensure_ascii=False)


def render_table(plan: Plan, invalid: Mapping[str, str]) -> str:
    header = (
        "VARIANT",
        "ACCELERATOR",
        "REPLICAS",
        "BATCH",
        "COST",
        "ITL(ms)",
        "TTFT(ms)",
        "OUTCOME",
        "REASON",
    )
    rows: list[tuple[str, ...]] = []
    for key, decision in plan.decisions.items():
        rows.append(
            (
                key,
                decision.accelerator or "-",
                str(decision.replicas),
                str(decision.max_batch),
                f"{decision.cost:.2f}",
                f"{decision.itl:.1f}",
                f"{decision.ttft:.1f}",
                decision.outcome.value,
                decision.reason,
            )
        )
    for key, reason in invalid.items():
        rows.append((key, "-", "0", "0", "0.00", "0.0", "0.0", "invalid", reason))
    rows.sort(key=lambda r: r[0])
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i]) for i in range(8)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header[:8], widths, strict=True)) + "  " + header[8]]
    lines.extend(
        "  ".join(c.ljust(w) for c, w in zip(r[:8], widths, strict=True)) + "  " + r[8] for r in rows
    )
    lines.append("")
    lines.append(f"total cost: {plan.total_cost:.2f}   mode: {plan.mode}   solver: {plan.status}")
    if plan.mip_gap is not None:
        lines[-1] += f" (gap {plan.mip_gap:.2g})"
    for device in sorted(set(plan.capacity) | set(plan.usage)):
        if plan.capacity:
            lines.append(f"  {device}: {plan.usage.get(device, 0)} of {plan.capacity.get(device, 0)} used")
    if plan.binding:
        lines.append("binding capacity:")
        lines.extend(f"  {b.describe()}" for b in plan.binding)
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    plan, invalid = make_plan(load_plan_file(Path(args.file)))
    output = render_json(plan, invalid) if args.output == "json" else render_table(plan, invalid)
    print(output)
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="plan replicas, accelerators and batch sizes offline from a YAML/JSON file",
        description=(
            "Plan every variant in FILE at once, as the operator does each cycle. See docs/optimizer.md "
            "for the file format."
        ),
    )
    parser.add_argument("-f", "--file", required=True, help="plan file (YAML or JSON)")
    parser.add_argument("-o", "--output", choices=("json", "table"), default="table", help="output format")
    parser.set_defaults(func=run)
