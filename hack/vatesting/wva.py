"""Shared by the unit and integration tests of the CRD: the generation manifests, the CRD's schema as a
JSON-schema validator, and hypothesis strategies for VariantAutoscalings across every WVA generation's
shape, with the status the operator's pure builders (core/status.py) would write for them."""

from __future__ import annotations

import functools
import math
import string
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from hypothesis import strategies as hs

from variant_autoscaler.api import v1alpha1
from variant_autoscaler.core import status as st
from variant_autoscaler.core.estimator import EstimatorState, LineState, learned_profile
from variant_autoscaler.core.learning import learned_status
from variant_autoscaler.core.linefit import Sums
from variant_autoscaler.core.policy import Recommendation
from variant_autoscaler.core.profile_choice import ProfileMode, choose_profile
from variant_autoscaler.core.queueing import ServiceParms

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "llmd.ai_variantautoscalings.yaml"
GENERATIONS = ROOT / "tests" / "data" / "wva-generations"
GENERATION_NAMES = ("2025-10", "v0.4", "v0.5", "v0.6-v0.8", "v0.9")
KEDA_CRD = ROOT / "tests" / "data" / "keda" / "keda.sh_scaledobjects.yaml"


@functools.cache
def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD_PATH.read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def crd_errors(obj: dict[str, Any]) -> list[str]:
    """What the CRD's OpenAPI schema refuses in ``obj`` (formats included; not the CEL rules)."""
    validator = jsonschema.Draft7Validator(crd_schema(), format_checker=jsonschema.FormatChecker())
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


def generation_objects(generation: str) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for path in sorted((GENERATIONS / generation).glob("*.yaml")):
        objects.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return objects


def generation_vas(generation: str) -> list[dict[str, Any]]:
    return [o for o in generation_objects(generation) if o.get("kind") == "VariantAutoscaling"]


# --- strategies ------------------------------------------------------------------------------------------

_LABEL_CHARS = string.ascii_lowercase + string.digits


@hs.composite
def dns_label(draw: hs.DrawFn, max_size: int = 63) -> str:
    body = draw(hs.text(_LABEL_CHARS + "-", min_size=0, max_size=max_size - 2))
    ends = (
        draw(hs.text(_LABEL_CHARS, min_size=1, max_size=1)),
        draw(hs.text(_LABEL_CHARS, min_size=1, max_size=1)),
    )
    return (ends[0] + body + ends[1])[:max_size].rstrip("-") or "a"


@hs.composite
def object_name(draw: hs.DrawFn) -> str:
    parts = draw(hs.lists(dns_label(max_size=20), min_size=1, max_size=4))
    return ".".join(parts)[:253].strip(".-") or "a"


_ACC_CHARS = string.ascii_letters + string.digits + "-_."
accelerator_names = hs.text(string.ascii_letters + string.digits, min_size=1, max_size=1) | hs.text(
    _ACC_CHARS, min_size=1, max_size=63
)
decimals = hs.builds(
    lambda whole, frac: f"{whole}" if frac is None else f"{whole}.{frac}",
    hs.integers(0, 10**12),
    hs.none() | hs.integers(0, 10**6),
)


@hs.composite
def profiles(draw: hs.DrawFn) -> dict[str, Any]:
    accs = draw(hs.lists(accelerator_names, min_size=1, max_size=4, unique=True))
    numbers = hs.floats(0, 1e4, allow_nan=False).map(lambda x: f"{x:.3f}")
    return {
        "accelerators": [
            {
                "acc": acc,
                "accCount": draw(hs.integers(1, 4096)),
                "maxBatchSize": draw(hs.integers(1, 1_048_576)),
                "perfParms": {
                    "decodeParms": {"alpha": draw(numbers), "beta": draw(numbers)},
                    "prefillParms": {"gamma": draw(numbers), "delta": draw(numbers)},
                },
            }
            for acc in accs
        ]
    }


@hs.composite
def va_specs(draw: hs.DrawFn) -> dict[str, Any]:
    """A spec in any generation's shape that the CRD accepts (its CEL rules included)."""
    spec: dict[str, Any] = {"modelID": draw(hs.text(min_size=1, max_size=256).filter(str.strip))}
    if draw(hs.booleans()):
        spec["sloClassRef"] = {
            "name": draw(hs.text(min_size=1, max_size=253)),
            "key": draw(hs.text(min_size=1, max_size=253)),
        }
    if draw(hs.booleans()):
        spec["modelProfile"] = draw(profiles())
    if draw(hs.booleans()):
        kind = draw(
            hs.sampled_from(["Deployment", "StatefulSet", "LeaderWorkerSet", "ReplicaSet", "InferencePool"])
        )
        ref: dict[str, Any] = {"name": draw(object_name())}
        if draw(hs.booleans()) or kind == "InferencePool":
            ref["kind"] = kind
            if kind == "InferencePool" or draw(hs.booleans()):
                ref["apiVersion"] = v1alpha1.DEFAULT_API_VERSIONS.get(
                    kind, "inference.networking.x-k8s.io/v1"
                )
        spec["scaleTargetRef"] = ref
    low = draw(hs.none() | hs.integers(0, v1alpha1.MAX_REPLICAS))
    high = draw(hs.none() | hs.integers(max(low or 1, 1), v1alpha1.MAX_REPLICAS))
    if low is not None:
        spec["minReplicas"] = low
    if high is not None:
        spec["maxReplicas"] = high
    if draw(hs.booleans()):
        spec["variantCost"] = draw(decimals.filter(lambda s: len(s) <= 32))
    if draw(hs.booleans()):
        spec["actuation"] = {"mode": draw(hs.sampled_from(v1alpha1.ACTUATION_MODES))}
    if draw(hs.booleans()):
        spec["profileSource"] = draw(hs.sampled_from(v1alpha1.PROFILE_SOURCE_CHOICES))
    return spec


_FIGURES = (
    hs.floats(allow_nan=True, allow_infinity=True) | hs.floats(-1e3, 1e6) | hs.sampled_from([-0.0, 1e300])
)


def _texts(longest: int) -> hs.SearchStrategy[str]:
    """Short arbitrary text, or long text up to ``longest`` (around the schema's bound)."""
    return hs.text(max_size=60) | hs.builds(
        lambda n, c: c * n, hs.integers(0, longest), hs.sampled_from("xé✓")
    )


_CONDITION_TYPES = (st.METRICS_AVAILABLE, st.OPTIMIZATION_READY, st.TARGET_RESOLVED, st.ACTUATED)
_REASONS = (
    st.REASON_METRICS_FOUND,
    st.REASON_TARGET_FOUND,
    st.REASON_TARGET_NOT_FOUND,
    st.REASON_OPTIMIZATION_SUCCEEDED,
    st.REASON_INVALID_CONFIGURATION,
    st.REASON_SCALED,
)


_WINDOW_FIGURES = hs.floats(0.0, 1e6) | hs.sampled_from([0.0, 1e300, -1.0, float("nan"), float("inf")])


@hs.composite
def learned_statuses(draw: hs.DrawFn, accelerator: str | None, now: datetime) -> dict[str, Any]:
    """A ``status.learnedProfile`` as core/learning.py builds it, from states an estimator may reach
    (any sums and published values, drift and hold times, counts) and choices with long reasons."""
    line = hs.builds(
        LineState,
        sums=hs.builds(
            Sums.from_list, hs.lists(_WINDOW_FIGURES.filter(math.isfinite), min_size=10, max_size=10)
        ),
        intercept=hs.none() | hs.floats(0.0, 1e12),
        slope=hs.none() | hs.floats(0.0, 1e12),
        drift_run=hs.integers(-10, 10),
        updated_at=hs.none() | hs.floats(0, 4e9),
        drift_at=hs.none() | hs.floats(0, 4e9),
        outliers=hs.integers(0, 10**9),
        windows=hs.integers(0, 10**9),
    )
    state = draw(
        hs.builds(EstimatorState, decode=line, prefill=line, updated_at=hs.none() | hs.floats(0, 4e9))
    )
    mode = draw(hs.sampled_from(list(ProfileMode)))
    hand = draw(hs.none() | hs.builds(ServiceParms, *(hs.floats(0.001, 1e4) for _ in range(4))))
    learned = learned_profile(state, hand)
    choice = choose_profile(mode, hand, learned)
    note = draw(hs.none() | _texts(600))
    return learned_status(accelerator, state, learned, choice, now, note=note)


@hs.composite
def vas_with_status(draw: hs.DrawFn) -> dict[str, Any]:
    """A VA the CRD accepts, with the status core/status.build_status writes for it: figures drawn from
    the spec's bounds (the accelerator from its label or profile, replicas within its bounds), anything
    else drawn as an engine could hand it (NaN, negative or huge figures, long reasons, many entries)."""
    spec = draw(va_specs())
    meta: dict[str, Any] = {"name": draw(object_name()), "namespace": "default"}
    accs = [p["acc"] for p in spec.get("modelProfile", {}).get("accelerators", [])]
    label = draw(hs.none() | accelerator_names.filter(lambda a: a[0].isalnum() and a[-1].isalnum()))
    if label is not None:
        meta["labels"] = {v1alpha1.ACCELERATOR_LABEL: label}
    body: dict[str, Any] = {"apiVersion": "llmd.ai/v1alpha1", "kind": "VariantAutoscaling", "metadata": meta}
    body["spec"] = spec
    parsed = v1alpha1.VariantAutoscalingSpec.model_validate(spec)
    accelerator = label or (draw(hs.sampled_from(accs)) if accs else draw(hs.sampled_from(["", "H100"])))
    low = parsed.effective_min_replicas(draw(hs.booleans()))
    high = parsed.effective_max_replicas() or 2**31 - 1
    now = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=draw(hs.integers(0, 10**8)))
    desired = st.DesiredView(
        accelerator=accelerator,
        replicas=draw(hs.integers(low, high)),
        last_run_time=now,
        max_batch=draw(hs.none() | hs.integers(-5, 2**40)),
        reason=draw(hs.none() | _texts(6000)),
        ttft_ms=draw(hs.none() | _FIGURES),
        itl_ms=draw(hs.none() | _FIGURES),
        cost=draw(hs.none() | _FIGURES),
    )
    current = draw(
        hs.none()
        | hs.builds(
            st.CurrentView,
            hs.just(accelerator),
            hs.integers(0, 2**31 - 1),
            hs.integers(-5, 2**40),
            _FIGURES,
            _FIGURES,
            _FIGURES,
            _FIGURES,
            _FIGURES,
            _FIGURES,
        )
    )
    updates = tuple(
        st.Condition(
            t, draw(hs.sampled_from(["True", "False", "Unknown"])), draw(hs.sampled_from(_REASONS)), m
        )
        for t, m in draw(
            hs.lists(
                hs.tuples(hs.sampled_from(_CONDITION_TYPES), _texts(40000)),
                max_size=4,
                unique_by=lambda x: x[0],
            )
        )
    )
    recs = tuple(
        Recommendation(now - timedelta(seconds=i), r)
        for i, r in enumerate(draw(hs.lists(hs.integers(0, 2**31 - 1), max_size=80)))
    )
    status = st.build_status(
        st.StatusInputs(
            now=now,
            generation=draw(hs.none() | hs.integers(0, 2**40)),
            previous_conditions=(),
            condition_updates=updates,
            current=current,
            desired=desired,
            actuation=draw(
                hs.none()
                | hs.builds(
                    st.ActuationView,
                    hs.booleans(),
                    hs.sampled_from(v1alpha1.ACTUATION_MODES),
                    hs.none() | hs.just(now),
                    hs.none() | hs.integers(0, 2**40),
                )
            ),
            recommendations=recs,
            last_metrics_time=draw(hs.none() | hs.just(now)),
            learned_profile=draw(hs.none() | learned_statuses(accelerator or None, now)),
        )
    )
    body["status"] = st.strip_nulls(status)
    return body
