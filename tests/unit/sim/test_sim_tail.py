"""Attainment targets in the simulator: scenario files, the look-back a policy reads, ours ahead of the
load (forecast, guard, starting replicas as supply), upstream WVA's later baselines, the checked oracle
and the policy names."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.planner import OptimizerPlanner, PlanOutcome, PlanRequest, VariantPlan
from variant_autoscaler.sim.config import parse_scenario
from variant_autoscaler.sim.loads import future_loads, future_workloads
from variant_autoscaler.sim.observe import ModelView, Observation, VariantView, token_buckets
from variant_autoscaler.sim.optimizing import ours_policy, plan_inputs
from variant_autoscaler.sim.policies import SaturationPolicy, StaticPolicy
from variant_autoscaler.sim.runner import checked_oracle, make_policy, make_policy_known, run_policies
from variant_autoscaler.sim.scenario import ModelSpec, ServerSpec
from variant_autoscaler.sim.scenarios import load_bundled
from variant_autoscaler.sim.simulator import scenario_arrivals
from variant_autoscaler.sim.traffic import Arrivals
from vatesting.sim import fake_factory

pytestmark = pytest.mark.unit


def _attainment(scenario: object, value: float = 99.0) -> object:
    assert hasattr(scenario, "models")
    models = tuple(replace(m, slo_attainment=value) for m in scenario.models)  # type: ignore[attr-defined]
    return replace(scenario, models=models)  # type: ignore[type-var]


def test_scenario_files_state_attainment_as_users_do() -> None:
    sc = load_bundled("flash-crowd")
    (model,) = sc.models
    assert model.slo_attainment == 99.0 and model.tail_slo
    doc = {
        "name": "x",
        "duration": "10m",
        "accelerators": {"A100": {"device": "NVIDIA-A100", "cost": 40}},
        "nodes": [{"name": "p", "accelerator": "A100", "count": 1, "gpus": 8}],
        "serviceClasses": [
            {
                "name": "Premium",
                "priority": 1,
                "data": [
                    {"model": "m", "slo-tpot": 50, "slo-ttft": 1000, "slo-attainment": "99.5%"},
                ],
            }
        ],
        "models": [
            {
                "modelID": "m",
                "modelProfile": {
                    "accelerators": [
                        {
                            "acc": "A100",
                            "accCount": 1,
                            "maxBatchSize": 8,
                            "perfParms": {
                                "decodeParms": {"alpha": "10", "beta": "0.1"},
                                "prefillParms": {"gamma": "10", "delta": "0.01"},
                            },
                        }
                    ]
                },
                "traffic": {
                    "rate": {"constant": 1},
                    "inputTokens": {"fixed": 100},
                    "outputTokens": {"fixed": 10},
                },
                "variants": [{"name": "v", "accelerator": "A100"}],
            }
        ],
    }
    parsed = parse_scenario(doc)
    assert parsed.models[0].slo_attainment == 99.5
    doc["serviceClasses"][0]["data"][0]["slo-attainment"] = 100  # type: ignore[index]
    with pytest.raises(ConfigError, match="slo-attainment"):
        parse_scenario(doc)
    with pytest.raises(ConfigError, match="slo_attainment"):
        replace(parsed.models[0], slo_attainment=120.0)
    # Our planner gets the attainment; WVA and the mean arm of the ablation do not.
    ours = plan_inputs(sc, mode="limited", share_load=True, wva_bounds=False)
    assert "slo-attainment: 99.0" in ours.service_classes["Premium.yaml"]
    mean = plan_inputs(sc, mode="limited", share_load=True, wva_bounds=False, sizing="mean")
    assert "attainment" not in mean.service_classes["Premium.yaml"]
    wva = plan_inputs(sc, mode="unlimited", share_load=False, wva_bounds=True)
    assert "attainment" not in wva.service_classes["Premium.yaml"]


def test_a_policy_reads_only_the_past_look_back_as_prometheus_would() -> None:
    rng = np.random.default_rng(2)
    times = np.cumsum(rng.exponential(0.1, 20_000))  # 10 req/s, about 2,000 s
    ins = rng.integers(100, 3000, len(times))
    arrivals = Arrivals(times, ins, np.full(len(times), 50))
    scrapes = list(np.arange(0.0, 1500.0, 15.0))
    view = ModelView.of("m", arrivals, 1500.0, scrapes)
    assert view.times.max() <= 1500.0 and view.times.min() >= 1500.0 - 600.0 - 120.0
    work = view.workload()
    assert work.burstiness is not None and work.burstiness.windows_s == (30.0, 60.0, 120.0)
    assert work.burstiness.rate == pytest.approx(10.0, rel=0.1)
    assert work.lengths is not None
    recent = ins[(times >= 900.0) & (times <= 1500.0)]
    assert work.lengths.input.mean == pytest.approx(float(recent.mean()), rel=0.02)
    assert work.lengths.output.mean == pytest.approx(50.0, rel=0.02)
    assert token_buckets(1000) == (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
    empty = ModelView.of("m", arrivals, 0.0, [])
    assert empty.workload().burstiness is None and empty.workload().lengths is None


class Recording:
    """The real planner, keeping every request it answered."""

    def __init__(self) -> None:
        self.inner = OptimizerPlanner()
        self.requests: list[PlanRequest] = []

    def plan(self, request: PlanRequest) -> PlanOutcome:
        self.requests.append(request)
        return self.inner.plan(request)


def _view(name: str, **kw: object) -> VariantView:
    base = VariantView(
        name=name,
        model="meta/llama-3.1-8b",
        accelerator="A100",
        desired=2,
        ready=2,
        starting=0,
        pending=0,
        max_batch=64,
        success_rpm=300.0,
        arrival_rpm=300.0,
        avg_input_tokens=512.0,
        avg_output_tokens=256.0,
        avg_ttft_ms=200.0,
        avg_itl_ms=30.0,
        waiting=0.0,
        waiting_growth=0.0,
        running=20.0,
        kv_usage=0.2,
        metrics_ok=True,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_ours_plans_attainment_classes_ahead_and_the_guard_acts_between_plans() -> None:
    sc = load_bundled("flash-crowd")
    planner = Recording()
    policy = ours_policy(sc, planner=planner)
    assert policy.interval_s == sc.settings.scrape_interval_s  # the guard ticks every scrape
    name = sc.variants[0].name
    obs = Observation(60.0, {name: _view(name, success_rpm=1200.0)}, capacity={"A100": 24}, allocated={})
    first = policy.decide(obs)
    (request,) = planner.requests
    assert request.chunked_prefill  # the scenario's replicas run the V1 engine
    assert request.prefill_budget == 2048  # ... with vLLM's token budget per step
    (variant,) = request.variants
    assert variant.ahead_rpm is not None and variant.ahead_rpm > 1200.0  # the forecast's upper quantile
    assert variant.max_batch == 64  # the batch the server runs
    assert name in first and first[name].replicas >= 3
    # 15 s later: no plan, only the guard; a queue that outruns the replicas asked for scales up at once.
    desired = first[name].replicas
    burst = _view(name, desired=desired, ready=2, waiting=900.0, waiting_growth=900.0, success_rpm=1800.0)
    obs = Observation(75.0, {name: burst}, capacity={"A100": 24}, allocated={"A100": desired})
    actions = policy.decide(obs)
    assert len(planner.requests) == 1 and actions[name].replicas > desired and policy.guard_actions == 1
    # The guard's count is a recommendation: the next plan cannot take it away within the window.
    calm = _view(name, desired=actions[name].replicas, ready=actions[name].replicas)
    obs = Observation(120.0, {name: calm}, capacity={"A100": 24}, allocated={"A100": 2})
    assert policy.decide(obs).get(name) is None


def test_starting_replicas_count_as_supply_for_attainment_classes_only() -> None:
    sc = load_bundled("flash-crowd")
    policy = ours_policy(sc, planner=Recording(), forecast="none", guard=False)
    name = sc.variants[0].name
    obs = Observation(60.0, {name: _view(name, success_rpm=900.0)}, capacity={"A100": 24}, allocated={})
    up = policy.decide(obs)[name].replicas
    # Load doubles while the new replicas start: a larger plan is applied at once.
    rising = _view(name, desired=up, ready=2, success_rpm=1800.0)
    obs = Observation(120.0, {name: rising}, capacity={"A100": 24}, allocated={"A100": up})
    assert policy.decide(obs)[name].replicas > up
    # A class that states means keeps the rule of waiting for them.
    means = replace(sc, models=tuple(replace(m, slo_attainment=0.0) for m in sc.models))
    wait = ours_policy(means, planner=Recording())
    first = wait.decide(
        Observation(60.0, {name: _view(name, success_rpm=600.0)}, capacity={"A100": 24}, allocated={})
    )
    up = first[name].replicas
    assert up > 2
    obs = Observation(120.0, {name: replace(rising, desired=up)}, capacity={"A100": 24}, allocated={})
    assert wait.decide(obs) == {}  # 2 of them are still starting


def test_ours_shortens_the_scale_down_window_only_where_the_forecast_holds_the_plans() -> None:
    """As the operator: an attainment class planned with the quantile forecast gets the one-minute
    window once the forecast's hysteresis holds its plans (past its warm-up: until then its first plans
    and its initial replicas keep five minutes); the ablation without that forecast, or a class stating
    means, keeps five throughout."""
    sc = load_bundled("flash-crowd")
    model, name = sc.models[0].model_id, sc.variants[0].name
    means = replace(sc, models=tuple(replace(m, slo_attainment=0.0) for m in sc.models))
    policies = {
        "ours": ours_policy(sc, planner=Recording()),
        "none": ours_policy(sc, planner=Recording(), forecast="none"),
        "point": ours_policy(sc, planner=Recording(), forecast="point"),
        "means": ours_policy(means, planner=Recording()),
    }
    windows: dict[str, list[float]] = {k: [] for k in policies}
    for k in range(1, 31):
        view = _view(name, success_rpm=900.0 + 300.0 * (k % 3))
        for label, policy in policies.items():
            policy.decide(Observation(60.0 * k, {name: view}, capacity={"A100": 24}, allocated={}))
            windows[label].append(policy.stabilization_s(model))
    assert windows["ours"][0] == 300.0 and windows["ours"][-1] == 60.0
    assert all(w == 300.0 for label in ("none", "point", "means") for w in windows[label])


def test_upstream_saturation_baselines_scale_on_kv_and_queue() -> None:
    sc = load_bundled("flash-crowd")
    name = sc.variants[0].name
    v1 = SaturationPolicy(sc, version="v1")
    v2 = SaturationPolicy(sc, version="v2")
    assert (v1.interval_s, v2.interval_s, v1.name, v2.name) == (
        60.0,
        15.0,
        "wva-saturation-v1",
        "wva-saturation-v2",
    )
    hot = _view(name, kv_usage=0.85, waiting=20.0)
    obs = Observation(60.0, {name: hot}, capacity={"A100": 24}, allocated={})
    assert v1.decide(obs)[name].replicas == 3  # +1 on the cheapest variant
    assert v2.decide(obs)[name].replicas > 2
    cool = _view(name, desired=3, ready=3, kv_usage=0.05, waiting=0.0)
    obs = Observation(120.0, {name: cool}, capacity={"A100": 24}, allocated={})
    assert v1.decide(obs)[name].replicas == 2  # -1 when one fewer still leaves spare capacity


def test_policy_names_aliases_ablation_and_tuned_baselines() -> None:
    sc = load_bundled("flash-crowd")
    assert make_policy("wva", sc, {}).name == "wva"  # the old name still works
    assert make_policy("wva-2025", sc, {}).name == "wva-2025"
    arm = make_policy("ours:mean/point/noguard", sc, {})
    assert arm.name == "ours:mean/point/noguard" and arm.interval_s == 60.0
    assert make_policy("hpa-kv@0.2", sc, {}).name == "hpa-kv@0.2"
    assert isinstance(make_policy("wva-saturation-v2@0.4", sc, {}), SaturationPolicy)
    assert make_policy_known("oracle-cheapest") and make_policy_known("wva-2025@0.5")
    arrivals = scenario_arrivals(sc)
    plain, more = make_policy("static", sc, arrivals), make_policy("static@2", sc, arrivals)
    assert isinstance(plain, StaticPolicy) and isinstance(more, StaticPolicy) and more.name == "static@2"
    assert sum(more.replicas.values()) > sum(plain.replicas.values())  # headroom over the peak
    for bad in ("ours:tail/x/guard", "hpa-kv@2", "wva-2025@x", "static@0", "static@inf"):
        with pytest.raises(ConfigError):
            make_policy(bad, sc, {})
    with pytest.raises(ConfigError, match="wva-saturation-v1"):
        run_policies(sc, ["nope"])


def test_the_oracle_plans_with_the_future_workload_and_is_checked_by_simulation() -> None:
    sc = load_bundled("flash-crowd")
    sc = replace(sc, duration_s=900.0)
    arrivals = {m.model_id: m.traffic.arrivals(np.random.default_rng(0), sc.duration_s) for m in sc.models}
    loads = future_loads(arrivals, 60.0, 120.0, peak_s=30.0)
    mean = future_loads(arrivals, 60.0, 120.0)
    (model,) = loads
    assert loads[model].rpm >= mean[model].rpm
    work = future_workloads(arrivals, 60.0, 120.0, loads)[model]
    assert work.lengths is not None and work.burstiness is not None
    assert work.burstiness.rate == pytest.approx(loads[model].rpm / 60.0)
    # Replicas that answer at once: the oracle's first plan meets the target, so it stands; loosened, it
    # is the cheapest level that still does.
    fast = fake_factory(slots=64, ttft=0.05, itl=0.01)
    result = checked_oracle(sc, arrivals, server_factory=fast)
    notes = result.series["notes"]
    assert result.policy == "oracle" and notes["planning_attainment"] == 99.0
    cheapest = checked_oracle(sc, arrivals, loosen=True, server_factory=fast)
    assert cheapest.policy == "oracle-cheapest"
    assert sum(cheapest.cost.values()) <= sum(result.cost.values())
    assert cheapest.series["notes"]["planning_attainment"] <= 99.0
    assert len(cheapest.series["notes"]["tried"]) >= 2


def test_mean_classes_keep_wva_meaning_in_the_simulated_ours() -> None:
    sc = load_bundled("diurnal")
    means: object = replace(sc, models=tuple(replace(m, slo_attainment=0.0) for m in sc.models))
    policy = ours_policy(means)  # type: ignore[arg-type]
    assert policy.guarded == frozenset() and set(policy.forecast_mode.values()) == {"none"}
    assert policy.interval_s == 60.0
    assert all(isinstance(m, ModelSpec) and not m.tail_slo for m in means.models)  # type: ignore[attr-defined]
    assert math.isfinite(policy.plan_interval_s)


def test_a_plan_outcome_without_an_optimizer_plan_leaves_the_guard_idle() -> None:
    class StandIn:
        def plan(self, request: PlanRequest) -> PlanOutcome:
            return PlanOutcome(
                status="ok",
                solve_seconds=0.0,
                decisions={
                    v.key: VariantPlan(v.accelerator or "", 3, None, None, None, None, "stand-in")
                    for v in request.variants
                },
            )

    sc = load_bundled("flash-crowd")
    policy = ours_policy(sc, planner=StandIn())
    name = sc.variants[0].name
    policy.decide(Observation(60.0, {name: _view(name)}, capacity={"A100": 24}, allocated={}))
    burst = _view(name, desired=3, waiting=400.0, waiting_growth=400.0)
    assert policy.decide(Observation(75.0, {name: burst}, capacity={"A100": 24}, allocated={})) == {}


def test_ours_plans_with_the_token_budget_its_replicas_run() -> None:
    """A long prompt takes more steps on a server with a small budget (test_tail.py): ours is told the
    budget its replicas run (the smallest, where profiles differ)."""
    sc = load_bundled("flash-crowd")
    small = replace(
        sc,
        models=tuple(
            replace(
                m,
                profiles=tuple(
                    replace(p, server=replace(p.server or ServerSpec(), max_num_batched_tokens=256))
                    for p in m.profiles
                ),
            )
            for m in sc.models
        ),
    )
    inputs = plan_inputs(small, mode="unlimited", share_load=False, wva_bounds=False)
    assert inputs.config.chunked_prefill and inputs.config.prefill_budget == 256
    assert plan_inputs(sc, mode="unlimited", share_load=False, wva_bounds=False).config.prefill_budget == 2048
