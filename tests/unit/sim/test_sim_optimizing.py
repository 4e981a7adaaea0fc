"""The optimizer-backed policies (WVA, ours, oracle, static peak) with a stand-in planner."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import pytest

from variant_autoscaler.core.analyzer import SLO, Load, size_allocation
from variant_autoscaler.core.forecast import forecast
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.errors import ConfigError
from variant_autoscaler.planner import PlanOutcome, PlanRequest, VariantPlan
from variant_autoscaler.sim.loads import ModelLoad, future_loads, observed_loads
from variant_autoscaler.sim.observe import (
    GATEWAY_ARRIVAL_COUNTER,
    ModelView,
    Observation,
    PolicyContext,
    VariantView,
)
from variant_autoscaler.sim.optimizing import (
    NAMESPACE,
    OptimizerPlanner,
    OptimizerPolicy,
    OraclePolicy,
    ours_policy,
    peak_allocation,
    plan_inputs,
    wva_policy,
)
from variant_autoscaler.sim.runner import make_policy
from variant_autoscaler.sim.scenario import (
    Accelerator,
    ModelSpec,
    NodePool,
    Scenario,
    ServiceClass,
    SimSettings,
    Variant,
)
from variant_autoscaler.sim.scenarios import load_bundled
from variant_autoscaler.sim.simulator import simulate
from variant_autoscaler.sim.traffic import Arrivals, TraceTraffic
from vatesting.profiles import parms, sim_profile
from vatesting.sim import fake_factory


class OnePerRps:
    """A stand-in planner: one replica per request/s of load (at least the minimum); a share group's
    load all goes to its first variant by name."""

    def __init__(self) -> None:
        self.requests: list[PlanRequest] = []

    def plan(self, request: PlanRequest) -> PlanOutcome:
        self.requests.append(request)
        decisions = {}
        first_of_group: dict[str, str] = {}
        for v in sorted(request.variants, key=lambda v: v.key):
            if v.share_group is not None:
                first_of_group.setdefault(v.share_group, v.key[1])
        for v in request.variants:
            if v.load is None:  # held, as the real planner: no decision
                continue
            takes = v.share_group is None or first_of_group[v.share_group] == v.key[1]
            need = math.ceil(v.load.arrival_rate_rpm / 60.0 - 1e-9) if takes else 0
            decisions[v.key] = VariantPlan(
                accelerator=v.accelerator,
                replicas=max(v.min_replicas, need),
                max_batch=None,
                cost=None,
                ttft_ms=None,
                itl_ms=None,
                reason="stand-in",
            )
        return PlanOutcome(status="ok", solve_seconds=0.0, decisions=decisions)


PROF_A = sim_profile("A100", batch=8, parms=parms(10.0, 0.1, 10.0, 0.01))
PROF_H = sim_profile("H100", batch=8, parms=parms(5.0, 0.05, 5.0, 0.005))


def two_variants(times: list[float], duration: float = 100.0) -> Scenario:
    n = len(times)
    arr = Arrivals(np.asarray(times, dtype=np.float64), np.full(n, 100, np.int64), np.full(n, 11, np.int64))
    return Scenario(
        name="two",
        duration_s=duration,
        seed=1,
        accelerators=(Accelerator("A100", "NVIDIA-A100", 40.0), Accelerator("H100", "NVIDIA-H100", 100.0)),
        pools=(NodePool("a", "A100", 1, 4), NodePool("h", "H100", 1, 4)),
        classes=(ServiceClass("Premium", 1),),
        models=(
            ModelSpec(
                "m",
                "Premium",
                500.0,
                50.0,
                (PROF_A, PROF_H),
                TraceTraffic(arr, offset_s=times[0] if n else 0),
            ),
        ),
        variants=(Variant("va", "m", "A100", 1), Variant("vh", "m", "H100", 0, min_replicas=0)),
        settings=SimSettings(scrape_interval_s=5.0, rate_window_s=20.0),
    )


def view(name: str, **kw: object) -> VariantView:
    base = VariantView(
        name=name,
        model="m",
        accelerator="A100" if name == "va" else "H100",
        desired=1,
        ready=1,
        starting=0,
        pending=0,
        max_batch=8,
        success_rpm=0.0,
        arrival_rpm=0.0,
        avg_input_tokens=None,
        avg_output_tokens=None,
        avg_ttft_ms=None,
        avg_itl_ms=None,
        waiting=0.0,
        waiting_growth=0.0,
        running=0.0,
        kv_usage=0.0,
        metrics_ok=True,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def observation(now: float, views: Mapping[str, VariantView]) -> Observation:
    return Observation(now=now, variants=views, capacity={"A100": 4, "H100": 4}, allocated={})


def test_plan_inputs_are_wva_shaped() -> None:
    sc = two_variants([1.0])
    inputs = plan_inputs(sc, mode="limited", share_load=True, wva_bounds=False)
    va = inputs.vas["vh"]
    assert va.spec.model_id == "m"
    assert [p.acc for p in va.spec.model_profile.accelerators] == ["H100"]  # keeps its accelerator
    assert va.accelerator_label == "H100"
    assert va.spec.min_replicas == 0 and va.spec.share_model_load is True
    assert '"cost": "100.00"' in inputs.accelerator_costs["H100"]
    assert "slo-ttft: 500" in inputs.service_classes["Premium.yaml"]
    assert inputs.config.optimizer_mode == "limited"
    wva = plan_inputs(sc, mode="unlimited", share_load=False, wva_bounds=True)
    assert wva.vas["vh"].spec.min_replicas is None and wva.vas["vh"].spec.share_model_load is None
    assert wva.config.min_replicas_default == 1


def test_ours_forecast_learns_the_gateways_arrivals_wva_knows_no_such_counter() -> None:
    """The simulated cluster's gateway counts every arrival; ours is configured with that counter
    (ARRIVAL_COUNTER) and its forecast learns the arrivals, not the completions vLLM reports."""
    sc = two_variants([1.0])
    assert plan_inputs(sc, mode="limited", share_load=True, wva_bounds=False).config.arrival_counter == (
        GATEWAY_ARRIVAL_COUNTER
    )
    assert plan_inputs(sc, mode="unlimited", share_load=False, wva_bounds=True).config.arrival_counter is None
    # 3 req/s arrive over the last 20 s (the rate window); 1 req/s finishes
    times = np.arange(40.0, 60.0, 1.0 / 3.0)
    arrivals = Arrivals(times, np.full(len(times), 100, np.int64), np.full(len(times), 11, np.int64))
    scrapes = tuple(np.arange(5.0, 60.0 + 1e-9, 5.0))
    model = ModelView.of("m", arrivals, 60.0, scrapes)
    assert model.arrival_rpm(20.0) == pytest.approx(180.0, rel=0.05)
    views = {
        "va": view("va", success_rpm=60.0, avg_input_tokens=100.0, avg_output_tokens=11.0),
        "vh": view("vh"),
    }
    obs = replace(observation(60.0, views), models={"m": model})
    policy = ours_policy(sc, planner=OnePerRps())
    policy.decide(obs)
    learnt = forecast(policy._forecasts["m"], policy._forecast_cfg["m"])
    assert learnt.level * 60.0 == pytest.approx(180.0, rel=0.05)
    assert ModelView.of("m", arrivals, 60.0, scrapes[:1]).arrival_rpm(20.0) is None  # one scrape: no rate


class Yielding:
    """A stand-in planner: ``va`` down to 1 replica, 2 of them given up to a higher priority."""

    def plan(self, request: PlanRequest) -> PlanOutcome:
        decisions = {
            v.key: VariantPlan(
                accelerator=v.accelerator,
                replicas=1 if v.key[1] == "va" else v.current_replicas,
                max_batch=None,
                cost=None,
                ttft_ms=None,
                itl_ms=None,
                reason="stand-in",
            )
            for v in request.variants
        }
        return PlanOutcome(status="ok", solve_seconds=0.0, decisions=decisions, yields={(NAMESPACE, "va"): 2})


def test_replicas_yielded_to_a_higher_priority_go_at_once_in_the_simulator_too() -> None:
    """The plan's ``yields`` reach the replica policy as the operator's do: a variant seen for the first
    time keeps its replicas one window (as the HPA), except those the plan gives a higher priority."""
    sc = two_variants([1.0])
    served = view("va", desired=4, ready=4, success_rpm=60.0, avg_input_tokens=100.0, avg_output_tokens=11.0)
    policy = ours_policy(sc, planner=Yielding())
    actions = policy.decide(observation(60.0, {"va": served, "vh": view("vh", desired=0, ready=0)}))
    assert actions["va"].replicas == 2
    held = ours_policy(sc, planner=OnePerRps())  # no yields: the window keeps all four
    assert "va" not in held.decide(observation(60.0, {"va": served, "vh": view("vh", desired=0, ready=0)}))


def test_ours_plans_knowing_the_stabilisation_keeps_its_replicas_the_oracle_does_not() -> None:
    """On node-failure's inventory at 1,600 req/min with eight A100 replicas running: ours' replica
    policy keeps them through the scale-down window, so its plan adds nothing beside them (eight A100
    serve it); the oracle, which starts and stops at once, takes the cheapest mix (five A100 and one
    H100). Without it, ours ran the union of both for a window each time the mix changed."""
    sc = load_bundled("node-failure")
    loads = {"meta/llama-3.1-8b": ModelLoad(1600.0, 512.0, 256.0)}
    current = {"llama-8b-a100": 8, "llama-8b-h100": 0}

    def plan(policy: OptimizerPolicy) -> dict[str, int]:
        outcome = policy.plan(loads, current, sc.capacity())
        return {name: d.replicas for (_, name), d in outcome.decisions.items()}

    assert plan(ours_policy(sc)) == {"llama-8b-a100": 8, "llama-8b-h100": 0}
    oracle = OraclePolicy(sc)
    assert plan(oracle._inner) == {"llama-8b-a100": 5, "llama-8b-h100": 1}


def test_wva_load_is_the_models_completion_rate() -> None:
    views = {
        "va": view("va", success_rpm=120.0, avg_input_tokens=100.0, avg_output_tokens=10.0, waiting=50.0),
        "vh": view("vh", success_rpm=60.0, avg_input_tokens=400.0, avg_output_tokens=40.0),
    }
    sc = two_variants([1.0])
    loads = observed_loads(observation(60.0, views), sc, "wva", 300.0)
    assert loads["m"].rpm == pytest.approx(180.0)
    assert loads["m"].avg_input_tokens == pytest.approx(200.0)  # completion-weighted
    assert loads["m"].avg_output_tokens == pytest.approx(20.0)
    ours = observed_loads(observation(60.0, views), sc, "ours", 300.0)
    # Plus the queue: growth 0 over the window, backlog 50 over 300 s = 1/6 req/s = 10 per minute.
    assert ours["m"].rpm == pytest.approx(190.0)
    grown = {**views, "va": replace(views["va"], waiting_growth=20.0)}
    assert observed_loads(observation(60.0, grown), sc, "ours", 300.0)["m"].rpm == pytest.approx(
        190.0 + 20.0 / 20.0 * 60.0
    )


def test_wva_sizes_every_variant_for_the_whole_model() -> None:
    planner = OnePerRps()
    policy = wva_policy(two_variants([1.0]), planner=planner)
    views = {"va": view("va", success_rpm=180.0), "vh": view("vh", success_rpm=0.0, desired=1, ready=1)}
    actions = policy.decide(observation(60.0, views))
    # Both VAs see the model's 3 req/s: 3 replicas each (WVA's double provisioning of one model).
    assert actions["va"].replicas == 3 and actions["vh"].replicas == 3
    request = planner.requests[-1]
    assert request.capacity is None and request.optimizer.unlimited
    assert all(v.share_group is None and v.min_replicas == 1 for v in request.variants)


def test_wva_skips_a_model_without_series() -> None:
    policy = wva_policy(two_variants([1.0]), planner=OnePerRps())
    views = {"va": view("va", ready=0, success_rpm=0.0), "vh": view("vh", ready=0)}
    assert policy.decide(observation(60.0, views)) == {}


def test_ours_shares_the_model_and_stabilises_scale_down() -> None:
    planner = OnePerRps()
    policy = ours_policy(two_variants([1.0]), planner=planner)
    views = {"va": view("va", success_rpm=240.0, desired=1, ready=1), "vh": view("vh", desired=0, ready=0)}
    # The group's load goes to va: 4 replicas; vh may go to 0.
    actions = policy.decide(observation(60.0, views))
    assert actions == {"va": actions["va"]} and actions["va"].replicas == 4
    request = planner.requests[-1]
    assert not request.optimizer.unlimited
    assert request.capacity == {"NVIDIA-A100": 4, "NVIDIA-H100": 4}  # by device type
    assert {v.share_group for v in request.variants} == {f"{NAMESPACE}/m"}
    # Load drops: the 300 s scale-down window keeps 4 for now.
    views = {"va": view("va", success_rpm=60.0, desired=4, ready=4), "vh": view("vh", desired=0, ready=0)}
    assert policy.decide(observation(120.0, views)) == {}
    # After the window the recommendation of 4 has aged out.
    assert policy.decide(observation(421.0, views))["va"].replicas == 1


def test_ours_waits_for_starting_replicas_before_adding_more() -> None:
    policy = ours_policy(two_variants([1.0]), planner=OnePerRps())
    views = {"va": view("va", success_rpm=240.0, desired=1, ready=1), "vh": view("vh", desired=0, ready=0)}
    assert policy.decide(observation(60.0, views))["va"].replicas == 4
    views = {"va": view("va", success_rpm=600.0, desired=4, ready=2), "vh": view("vh", desired=0, ready=0)}
    assert policy.decide(observation(120.0, views)) == {}  # 2 of 4 still starting: no scale-up yet
    # Replicas that were starting before the policy ever scaled (none seen) do not hold it back.
    fresh = ours_policy(two_variants([1.0]), planner=OnePerRps())
    assert fresh.decide(observation(60.0, views))["va"].replicas == 10


def test_ours_holds_without_metrics() -> None:
    policy = ours_policy(two_variants([1.0]), planner=OnePerRps())
    views = {"va": view("va", ready=0, desired=3), "vh": view("vh", desired=0, ready=0)}
    assert policy.decide(observation(60.0, views)) == {}  # never scale down on missing metrics


def test_future_loads_and_the_oracle() -> None:
    times = [float(t) for t in range(0, 120, 2)] + [120.0 + k * 0.25 for k in range(240)]
    sc = two_variants(times, duration=180.0)
    arrivals = {"m": sc.models[0].traffic.arrivals(np.random.default_rng(0), sc.duration_s)}
    loads = future_loads(arrivals, 0.0, 60.0)
    assert loads["m"].rpm == pytest.approx(30.0)  # 30 requests in the first minute
    assert future_loads(arrivals, 120.0, 180.0)["m"].rpm == pytest.approx(240.0)
    planner = OnePerRps()
    oracle = OraclePolicy(sc, interval_s=60.0, planner=planner)
    assert oracle.ignores_startup
    start = oracle.start(PolicyContext(scenario=sc, arrivals=arrivals))
    assert start == {"va": 1, "vh": 0}
    views = {"va": view("va", desired=1), "vh": view("vh", desired=0, ready=0)}
    assert oracle.decide(observation(120.0, views))["va"].replicas == 4  # 4 req/s ahead


def test_static_peak_allocation() -> None:
    times = [float(t) for t in range(0, 600)] + [600.0 + k * 0.2 for k in range(1500)]
    sc = two_variants(times, duration=900.0)
    arrivals = {"m": sc.models[0].traffic.arrivals(np.random.default_rng(0), sc.duration_s)}
    # The busiest 5 minutes carry 5 req/s.
    assert peak_allocation(sc, arrivals, planner=OnePerRps()) == {"va": 5, "vh": 0}
    # static@1.5: the admin's headroom over the peak's rate.
    assert peak_allocation(sc, arrivals, planner=OnePerRps(), headroom=1.5) == {"va": 8, "vh": 0}


def test_ours_end_to_end_with_the_stand_in_planner() -> None:
    # 2 req/s for 100 s on fake replicas: ours scales va from 1 to 2 after its first decision.
    times = [0.25 + 0.5 * k for k in range(200)]
    sc = two_variants(times, duration=100.0)
    policy = ours_policy(sc, interval_s=30.0, planner=OnePerRps())
    r = simulate(sc, policy, server_factory=fake_factory(slots=8))
    assert r.scale_ups["va"] >= 1 and r.scale_ups["vh"] == 0
    assert (r.dropped == 0).all()


def test_optimizer_planner_splits_a_share_group_and_keeps_accelerators() -> None:
    sc = two_variants([1.0])
    policy = OptimizerPolicy(
        sc,
        name="t",
        interval_s=60.0,
        mode="limited",
        load_source="ours",
        share_load=True,
        replica_policy=False,
        wva_bounds=False,
        planner=OptimizerPlanner(),
    )
    # Each VA carries the model's 600 req/min (as the model-grouped collector gives it); the plan must
    # serve 600 in total, not 1200: the same as one variant planned alone for 600.
    loads = {"m": ModelLoad(600.0, 100.0, 11.0)}
    shared = policy.plan(loads, {"va": 1, "vh": 0}, {"A100": 4, "H100": 4})
    alone = OptimizerPolicy(
        replace(sc, variants=(sc.variants[0],)),
        name="t",
        interval_s=60.0,
        mode="limited",
        load_source="ours",
        share_load=True,
        replica_policy=False,
        wva_bounds=False,
        planner=OptimizerPlanner(),
    ).plan(loads, {"va": 1}, {"A100": 4, "H100": 4})
    single = alone.decisions[(NAMESPACE, "va")]
    total_cost = sum(d.cost or 0.0 for d in shared.decisions.values())
    assert total_cost <= (single.cost or 0.0) + 1e-9
    assert shared.decisions[(NAMESPACE, "va")].accelerator == "A100"
    assert shared.decisions[(NAMESPACE, "vh")].accelerator == "H100"


def test_optimizer_planner_reproduces_wva_sizing() -> None:
    sc = two_variants([1.0])
    policy = wva_policy(sc, planner=OptimizerPlanner())
    out = policy.plan({"m": ModelLoad(900.0, 100.0, 11.0)}, {"va": 1, "vh": 1}, {"A100": 4, "H100": 4})
    for var, prof, cost in (("va", PROF_A, 40.0), ("vh", PROF_H, 100.0)):
        expected = size_allocation(
            accelerator=prof.accelerator,
            unit_cost=cost,
            acc_count=1,
            parms=ServiceParms(prof.alpha, prof.beta, prof.gamma, prof.delta),
            max_batch_size=prof.max_batch_size,
            load=Load(900.0, 100.0, 11.0),
            slo=SLO(ttft=500.0, itl=50.0),
            min_replicas=1,
        )
        assert out.decisions[(NAMESPACE, var)].replicas == expected.replicas


def test_forecast_adds_the_rise_only() -> None:
    policy = ours_policy(two_variants([1.0]), planner=OnePerRps(), forecast_s=240.0, name="ours+trend")
    views = {"va": view("va", success_rpm=60.0), "vh": view("vh", desired=0, ready=0)}
    policy.decide(observation(60.0, views))
    # Demand rose from 60 to 180 per minute in 120 s: +1/s per s, projected 240 s ahead: +240/min.
    rising = {"va": view("va", success_rpm=180.0), "vh": view("vh", desired=0, ready=0)}
    actions = policy.decide(observation(180.0, rising))
    assert actions["va"].replicas == math.ceil((180.0 + 240.0) / 60.0)
    falling = {"va": view("va", success_rpm=60.0, desired=7, ready=7), "vh": view("vh", desired=0, ready=0)}
    planner = policy.planner
    assert isinstance(planner, OnePerRps)
    policy.decide(observation(240.0, falling))
    assert planner.requests[-1].variants[0].load.arrival_rate_rpm == pytest.approx(60.0)


def test_experiment_names() -> None:
    sc = two_variants([1.0])
    assert make_policy("ours@0.5", sc, {}).name == "ours@0.5"
    assert make_policy("ours+trend", sc, {}).name == "ours+trend"
    for bad in ("ours@2", "ours@x", "nope"):
        with pytest.raises(ConfigError):
            make_policy(bad, sc, {})


def test_a_ttft_percentile_reaches_our_planner_but_not_wvas() -> None:
    sc = two_variants([1.0])
    sc = replace(sc, models=tuple(replace(m, slo_ttft_percentile=99.0) for m in sc.models))
    ours = plan_inputs(sc, mode="limited", share_load=True, wva_bounds=False)
    assert "slo-ttft-percentile: 99.0" in ours.service_classes["Premium.yaml"]
    wva = plan_inputs(sc, mode="unlimited", share_load=False, wva_bounds=True)
    assert "percentile" not in wva.service_classes["Premium.yaml"]
