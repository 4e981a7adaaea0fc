"""One planner: the operator, the simulator and ``variant-autoscaler plan`` give the same plan for the
same inputs (the VAs, ConfigMaps, loads and inventory of a bundled scenario)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from variant_autoscaler.adapters.inventory import node_gpus
from variant_autoscaler.api.config import MainConfig
from variant_autoscaler.cli import main
from variant_autoscaler.core.forecast import ForecastConfig, ForecastState, forecast, update
from variant_autoscaler.planner import OptimizerPlanner, PlanOutcome, PlanRequest
from variant_autoscaler.sim.loads import ModelLoad
from variant_autoscaler.sim.optimizing import NAMESPACE, ours_policy
from variant_autoscaler.sim.scenarios import load_bundled
from vatesting.fakes import Harness

pytestmark = pytest.mark.unit

SATURATION = "PriorityExhaustive"


class Recording:
    """The real planner, keeping what it decided."""

    def __init__(self) -> None:
        self.outcome: PlanOutcome | None = None
        self.request: PlanRequest | None = None

    def plan(self, request: PlanRequest) -> PlanOutcome:
        self.request = request
        self.outcome = OptimizerPlanner().plan(request)
        return self.outcome


Decision = tuple[str | None, int, int | None]


def _decision(accelerator: str | None, replicas: int, max_batch: int | None) -> Decision:
    # A variant given no replicas has no accelerator in the plan (the operator keeps showing its own).
    return (accelerator if replicas > 0 else None, replicas, max_batch)


def _decisions(outcome: PlanOutcome) -> dict[str, Decision]:
    return {key[1]: _decision(p.accelerator, p.replicas, p.max_batch) for key, p in outcome.decisions.items()}


def _operator(
    policy: Any,
    loads: dict[str, ModelLoad],
    current: dict[str, int],
    capacity: dict[str, int],
    *,
    forecast: bool = False,
    recording: Recording | None = None,
    settings: dict[str, str] | None = None,
) -> dict[str, Decision]:
    inputs = policy.inputs
    recording = recording or Recording()
    h = Harness(
        planner=recording,
        OPTIMIZER_MODE="limited",
        SATURATION_POLICY=SATURATION,
        WVA_SCALE_TO_ZERO="false",
        **{"DEFAULT_ACTUATION_MODE": "patch", **(settings or {})},
        # The demand forecast is an input only the operator and the simulator have (a plan file states
        # the load it wants planned); with it, see the test below.
        FORECAST_QUANTILE="0.9" if forecast else "0",
    )
    h.kube.get("configmaps", "workload-variant-autoscaler-system", "accelerator-unit-costs")["data"] = dict(
        inputs.accelerator_costs
    )
    h.kube.get("configmaps", "workload-variant-autoscaler-system", "service-classes-config")["data"] = dict(
        inputs.service_classes
    )
    for name, va in inputs.vas.items():
        body = va.model_dump(by_alias=True, exclude_none=True, mode="json")
        body.update(apiVersion="llmd.ai/v1alpha1", kind="VariantAutoscaling")
        body["metadata"]["namespace"] = NAMESPACE
        h.add_va(body, replicas=current[name])
    for model, load in loads.items():
        h.load(
            load.rpm, model=model, namespace=NAMESPACE, inp=load.avg_input_tokens, out=load.avg_output_tokens
        )
    devices = {a.name: a.device for a in policy.scenario.accelerators}
    nodes = [
        {
            "metadata": {"name": f"node-{acc}", "labels": {"nvidia.com/gpu.product": devices[acc]}},
            "status": {
                "allocatable": {"nvidia.com/gpu": str(count)},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for acc, count in capacity.items()
    ]
    h.engine._nodes = lambda: [node_gpus(n) for n in nodes]
    asyncio.run(h.engine.run_cycle())
    assert recording.outcome is not None
    return _decisions(recording.outcome)


def _plan_command(
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    policy: Any,
    loads: dict[str, ModelLoad],
    current: dict[str, int],
    capacity: dict[str, int],
) -> dict[str, Decision]:
    inputs = policy.inputs
    scenario = policy.scenario
    devices = {a.name: a.device for a in scenario.accelerators}
    by_capacity: dict[str, int] = {}
    for acc, count in capacity.items():
        by_capacity[devices[acc]] = by_capacity.get(devices[acc], 0) + count
    sharing: dict[str, int] = {}
    for va in inputs.vas.values():
        if va.spec.share_model_load:
            sharing[va.spec.model_id] = sharing.get(va.spec.model_id, 0) + 1
    variants = []
    for name, va in inputs.vas.items():
        load = loads[va.spec.model_id]
        share = sharing.get(va.spec.model_id, 1) if va.spec.share_model_load else 1
        cls = yaml.safe_load(inputs.service_classes[va.spec.slo_class_ref.key])["name"]
        variants.append(
            {
                "name": name,
                "namespace": NAMESPACE,
                "modelID": va.spec.model_id,
                "serviceClass": cls,
                "accelerator": va.accelerator_label,
                "currentReplicas": current[name],
                # The replica policy stabilises scale-down: the replicas running now outlive the plan.
                "keptReplicas": current[name],
                "minReplicas": va.spec.min_replicas,
                **({"maxReplicas": va.spec.max_replicas} if va.spec.max_replicas is not None else {}),
                "keepAccelerator": True,
                "shareModelLoad": bool(va.spec.share_model_load),
                "modelProfile": va.spec.model_profile.model_dump(by_alias=True, mode="json"),
                # The file states each variant's own part of its model's load.
                "load": {
                    "arrivalRate": load.rpm / share,
                    "avgInputTokens": load.avg_input_tokens,
                    "avgOutputTokens": load.avg_output_tokens,
                },
            }
        )
    document = {
        "optimizer": {"unlimited": False, "saturationPolicy": SATURATION, "batchSizes": 1, "timeLimit": 10},
        "accelerators": dict(inputs.accelerator_costs),
        "serviceClasses": dict(inputs.service_classes),
        "capacity": by_capacity,
        "variants": variants,
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    assert main(["plan", "-f", str(path), "-o", "json"]) == 0
    out, _ = capfd.readouterr()
    plan = json.loads(out)["variants"]
    return {
        key.split("/", 1)[1]: _decision(d["accelerator"], d["replicas"], d["maxBatch"] or None)
        for key, d in plan.items()
        if d["outcome"] not in ("infeasible", "held", "invalid")
    }


@pytest.mark.parametrize(
    ("scenario", "scale"),
    [("scarce", 1.0), ("scarce", 3.0), ("node-failure", 1.0), ("node-failure", 0.3), ("diurnal", 2.0)],
)
def test_the_operator_the_simulator_and_plan_decide_alike(
    scenario: str, scale: float, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    sc = load_bundled(scenario)
    policy = ours_policy(sc)
    loads = {
        m.model_id: ModelLoad(rpm=600.0 * scale * (i + 1), avg_input_tokens=512.0, avg_output_tokens=200.0)
        for i, m in enumerate(sc.models)
    }
    current = {v.name: v.initial_replicas for v in sc.variants}
    capacity = sc.capacity()

    simulated = _decisions(policy.plan(loads, current, capacity))
    assert simulated, "the scenario must produce decisions to compare"
    assert _operator(policy, loads, current, capacity) == simulated
    assert _plan_command(tmp_path, capfd, policy, loads, current, capacity) == simulated


@pytest.mark.parametrize(("scenario", "scale"), [("diurnal", 1.0), ("node-failure", 2.0), ("scarce", 2.0)])
def test_with_the_forecast_the_operator_and_the_simulator_still_decide_alike(
    scenario: str, scale: float
) -> None:
    sc = load_bundled(scenario)
    policy = ours_policy(sc)
    loads = {
        m.model_id: ModelLoad(rpm=600.0 * scale * (i + 1), avg_input_tokens=512.0, avg_output_tokens=200.0)
        for i, m in enumerate(sc.models)
    }
    current = {v.name: v.initial_replicas for v in sc.variants}
    capacity = sc.capacity()
    # What the operator's first cycle forecasts: the observed demand and the default margin (no history).
    cfg = MainConfig()
    fcfg = ForecastConfig(interval_s=60.0, horizon_s=cfg.forecast_horizon_seconds, quantile=0.9)
    ahead = {
        m: 60.0 * forecast(update(ForecastState(), load.rpm / 60.0, fcfg), fcfg).upper
        for m, load in loads.items()
    }
    assert all(ahead[m] > loads[m].rpm for m in loads)
    simulated = _decisions(policy.plan(loads, current, capacity, ahead=ahead))
    plain = _decisions(policy.plan(loads, current, capacity))
    assert simulated != plain, "the forecast must change the plan for the comparison to mean something"
    assert _operator(policy, loads, current, capacity, forecast=True) == simulated


@pytest.mark.parametrize(
    ("settings", "kept"),
    [
        ({}, True),  # patch mode: the replica policy's 5-minute scale-down window
        ({"SCALE_DOWN_STABILIZATION_WINDOW": "0s"}, False),
        ({"DEFAULT_ACTUATION_MODE": "metrics"}, False),  # the HPA decides; the operator has no window
    ],
)
def test_the_operator_tells_the_plan_which_replicas_its_scale_down_window_keeps(
    settings: dict[str, str], kept: bool
) -> None:
    sc = load_bundled("node-failure")
    policy = ours_policy(sc)
    loads = {
        m.model_id: ModelLoad(rpm=1600.0, avg_input_tokens=512.0, avg_output_tokens=256.0) for m in sc.models
    }
    current = {"llama-8b-a100": 8, "llama-8b-h100": 0}
    recording = Recording()
    _operator(policy, loads, current, sc.capacity(), recording=recording, settings=settings)
    assert recording.request is not None
    got = {v.key[1]: v.kept_replicas for v in recording.request.variants}
    assert got == (
        {"llama-8b-a100": 8, "llama-8b-h100": 0} if kept else {"llama-8b-a100": 0, "llama-8b-h100": 0}
    )
