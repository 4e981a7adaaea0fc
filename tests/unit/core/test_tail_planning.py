"""Tail sizing in the one planner: the workload's planning form, the candidate builder's routing, the
memo, the forecast and the room the planner hands on."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from variant_autoscaler.api.configmaps import parse_service_classes
from variant_autoscaler.core.analyzer import SLO, Load, SizingOutcome
from variant_autoscaler.core.candidates import build_candidate_sets
from variant_autoscaler.core.model import (
    AcceleratorType,
    OptimizerConfig,
    ServiceParms,
    ServiceTarget,
    VariantInput,
)
from variant_autoscaler.core.tail import (
    TailModel,
    TailSizingRequest,
    TailTargets,
    clear_tail_memo,
    size_tail_allocation,
    size_tail_allocations,
)
from variant_autoscaler.core.workload import (
    ROUND_LEVELS,
    Burstiness,
    RequestLengths,
    TokenLengths,
    Workload,
    burstiness_from_counter,
    burstiness_from_times,
)
from variant_autoscaler.planner import (
    ObservedLoad,
    OptimizerPlanner,
    PlannedVariant,
    PlanRequest,
    SloClassRef,
)
from vatesting.profiles import profile

A100 = ServiceParms(20.58, 0.41, 20.58, 0.041)
ACCS = {"A100": AcceleratorType("A100", "NVIDIA-A100-PCIE-80GB", 40.0)}
LOGNORMAL = RequestLengths(TokenLengths.lognormal(512, 0.6, high=4096), TokenLengths.lognormal(256, 0.6))


def test_rounded_workloads_stay_close_and_repeat_exactly() -> None:
    rng = np.random.default_rng(3)
    sample = rng.lognormal(6.0, 0.6, 20_000)
    a = TokenLengths.from_samples(sample).rounded()
    assert a.rounded() == a and a.levels == ROUND_LEVELS  # on the grid: a fixed point
    b = TokenLengths.from_samples(sample * 1.004).rounded()  # a cycle later, 0.4 % longer
    same = sum(x == y for x, y in zip(a.values, b.values, strict=True))
    assert same >= 0.6 * len(a.values)  # most knots land on the same grid point
    exact = TokenLengths.from_samples(sample)
    for level in (0.5, 0.9, 0.99):
        assert a.quantile(level) == pytest.approx(exact.quantile(level), rel=0.03)
    bursts = Burstiness((30.0, 60.0), (1.0, 2.03), 5.02).rounded()
    assert bursts.idc[0] == 1.0 and bursts.idc[1] == pytest.approx(2.03, rel=0.05)
    assert Burstiness().rounded() == Burstiness()
    assert Workload().rounded() == Workload()
    assert Workload(LOGNORMAL, bursts).to_json()["burstiness"]["rate"] == pytest.approx(5.02, rel=0.03)


def test_smoothed_histograms_read_the_upper_percentiles_closer() -> None:
    rng = np.random.default_rng(5)
    tokens = np.minimum(rng.lognormal(math.log(512) - 0.16, 0.56, 50_000), 4096)
    bounds = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, math.inf]
    cumulative = [float(np.sum(tokens <= b)) for b in bounds]
    mean = float(tokens.mean())
    uniform = TokenLengths.from_histogram(bounds, cumulative, mean=mean)
    smooth = TokenLengths.from_histogram(bounds, cumulative, mean=mean, smooth=True)
    truth = float(np.quantile(tokens, 0.99))
    assert abs(smooth.quantile(0.99) - truth) < abs(uniform.quantile(0.99) - truth)
    assert smooth.quantile(0.99) == pytest.approx(truth, rel=0.1)
    assert smooth.mean == pytest.approx(mean, rel=0.05)


def test_burstiness_from_a_sampled_counter_reads_a_poisson_stream_as_poisson() -> None:
    rng = np.random.default_rng(11)
    times = np.cumsum(rng.exponential(1 / 20.0, 20 * 3600))
    scrapes = np.arange(15.0, times[-1], 15.0)
    counter = np.searchsorted(times, scrapes, side="right").astype(float)
    read = burstiness_from_counter(scrapes, counter, (30.0, 60.0, 120.0), lookback_s=3000.0)
    assert read.windows_s == (30.0, 60.0, 120.0)
    assert all(v == pytest.approx(1.0, abs=0.4) for v in read.idc)
    assert read.rate == pytest.approx(20.0, rel=0.05)
    # Windows shorter than two scrapes or longer than a quarter of the look-back are left out.
    assert burstiness_from_counter(scrapes, counter, (10.0, 900.0), lookback_s=600.0).windows_s == ()
    bursty = burstiness_from_times(np.sort(rng.uniform(0, 3600, 5000)) ** 1.0)
    assert bursty.rate > 0


def _variant(slo: SLO, workload: Workload | None = None) -> VariantInput:
    return VariantInput(
        "v",
        "ns",
        "m",
        service=ServiceTarget("Premium", 1, slo),
        profiles=(profile("A100", batch=64, parms=A100),),
        load=Load(600.0, 512.0, 256.0),
        workload=workload,
    )


def test_attainment_classes_go_to_the_tail_model_and_mean_classes_to_the_analyzer() -> None:
    seen: list[TailSizingRequest] = []

    def tail(requests: Sequence[TailSizingRequest]) -> list[SizingOutcome]:
        seen.extend(requests)
        return size_tail_allocations(requests)

    bursts = Burstiness((30.0,), (3.0,), 10.0)
    tail_slo = SLO(ttft=1000.0, itl=50.0, attainment=99.0)
    mean_slo = SLO(ttft=1000.0, itl=50.0)
    sets = build_candidate_sets(
        [(_variant(tail_slo, Workload(LOGNORMAL, bursts)), None), (_variant(mean_slo), None)],
        ACCS,
        batch_count=1,
        tail_sizer=tail,
    )
    assert len(seen) == 1 and seen[0].burstiness == bursts and seen[0].lengths == LOGNORMAL
    tail_rate = sets[0].candidates[0].rate_per_replica
    mean_rate = sets[1].candidates[0].rate_per_replica
    model = TailModel(A100, 64, LOGNORMAL, bursts)
    assert tail_rate == pytest.approx(model.max_rate(TailTargets.from_slo(tail_slo)).max_rate)
    assert sets[0].candidates[0].replicas == math.ceil(10.0 / tail_rate)
    assert tail_rate != pytest.approx(mean_rate, rel=0.01)
    # Unmeasured: exponential lengths with the load's means, on the planning grid.
    unmeasured = build_candidate_sets([(_variant(tail_slo), None)], ACCS, batch_count=1, tail_sizer=tail)
    assert seen[-1].lengths == RequestLengths.from_means(512.0, 256.0).rounded()
    assert unmeasured[0].candidates[0].replicas >= 1


def test_the_memo_answers_a_repeated_sizing_with_the_same_numbers() -> None:
    clear_tail_memo()
    kwargs = {
        "accelerator": "A100",
        "unit_cost": 40.0,
        "acc_count": 1,
        "parms": A100,
        "max_batch_size": 64,
        "slo": SLO(ttft=1000.0, itl=50.0, attainment=99.0),
        "lengths": LOGNORMAL,
    }
    first = size_tail_allocation(load=Load(600.0, 512.0, 256.0), **kwargs)  # type: ignore[arg-type]
    again = size_tail_allocation(load=Load(1200.0, 512.0, 256.0), **kwargs)  # type: ignore[arg-type]
    assert again.max_rate_per_replica == first.max_rate_per_replica
    assert again.replicas == math.ceil(20.0 / first.max_rate_per_replica)
    clear_tail_memo()
    fresh = size_tail_allocation(load=Load(600.0, 512.0, 256.0), **kwargs)  # type: ignore[arg-type]
    assert fresh == first


def _request(classes: str, *, ahead: float | None, capacity: dict[str, int] | None) -> PlanRequest:
    v = PlannedVariant(
        key=("ns", "v"),
        model_id="m",
        profiles=(profile("A100", batch=64, parms=A100),),
        accelerator="A100",
        current_replicas=1,
        load=ObservedLoad(600.0, 512.0, 256.0),
        min_replicas=1,
        max_replicas=None,
        slo_class_ref=SloClassRef("premium"),
        ahead_rpm=ahead,
    )
    return PlanRequest(
        variants=(v,),
        accelerators=ACCS,
        classes=parse_service_classes({"premium.yaml": classes}),
        optimizer=OptimizerConfig(unlimited=capacity is None, batch_sizes=1),
        capacity=capacity,
    )


def test_the_forecast_is_planned_for_only_where_the_class_states_attainment() -> None:
    head = "name: Premium\npriority: 1\ndata:\n  - {model: m, slo-tpot: 50, slo-ttft: 1000"
    tail, mean = head + ", slo-attainment: 99}\n", head + "}\n"
    planner = OptimizerPlanner()
    now = planner.plan(_request(tail, ahead=None, capacity=None))
    ahead = planner.plan(_request(tail, ahead=1800.0, capacity=None))
    assert ahead.decisions[("ns", "v")].replicas > now.decisions[("ns", "v")].replicas
    assert "planned for the forecast 1800 req/min" in ahead.decisions[("ns", "v")].reason
    assert ahead.ahead == frozenset({("ns", "v")})
    wva = planner.plan(_request(mean, ahead=1800.0, capacity=None))
    same = planner.plan(_request(mean, ahead=None, capacity=None))
    assert wva.decisions == same.decisions and wva.ahead == frozenset()
    # Limited mode: the room left on the device beside the plan.
    limited = planner.plan(_request(tail, ahead=None, capacity={"NVIDIA-A100-PCIE-80GB": 16}))
    planned = limited.decisions[("ns", "v")].replicas
    assert limited.room == {("ns", "v"): 16 - planned}
    assert now.room == {}


def test_a_forecast_after_a_silent_window_is_planned_with_the_lengths_measured_before() -> None:
    # No request finished in the window (a silent minute between bursts): the window's token means are
    # 0. The forecast says requests are coming: they are planned at the lengths of the look-back, not
    # as an empty load (which sized the variant to its minimum and cancelled replicas still starting).
    head = "name: Premium\npriority: 1\ndata:\n  - {model: m, slo-tpot: 50, slo-ttft: 1000"
    classes = parse_service_classes({"premium.yaml": head + ", slo-attainment: 99}\n"})
    base = _request(head + ", slo-attainment: 99}\n", ahead=1800.0, capacity=None).variants[0]
    measured = Workload(LOGNORMAL)
    silent = replace(base, load=ObservedLoad(0.0, 0.0, 0.0), workload=measured)
    busy = replace(
        base, load=ObservedLoad(0.0, LOGNORMAL.input.mean, LOGNORMAL.output.mean), workload=measured
    )
    planner = OptimizerPlanner()

    def plan(v: PlannedVariant) -> int:
        request = PlanRequest(
            variants=(v,),
            accelerators=ACCS,
            classes=classes,
            optimizer=OptimizerConfig(unlimited=True, batch_sizes=1),
            capacity=None,
        )
        return planner.plan(request).decisions[("ns", "v")].replicas

    assert plan(silent) == plan(busy) > 1
    # Without a measured workload nothing says how long the coming requests are: as before.
    assert plan(replace(silent, workload=None)) == 1


def test_the_reason_says_when_bursty_arrivals_were_sized_for() -> None:
    head = "name: Premium\npriority: 1\ndata:\n  - {model: m, slo-tpot: 50, slo-ttft: 1000"
    base = _request(head + ", slo-attainment: 99}\n", ahead=None, capacity=None)
    planner = OptimizerPlanner()

    def planned(bursts: Burstiness) -> tuple[int, str]:
        v = replace(base.variants[0], workload=Workload(LOGNORMAL, bursts))
        decision = planner.plan(replace(base, variants=(v,))).decisions[("ns", "v")]
        return decision.replicas, decision.reason

    calm, calm_why = planned(Burstiness((30.0, 60.0), (1.2, 1.4), 10.0))
    bursty, why = planned(Burstiness((30.0, 60.0), (8.0, 26.0), 10.0))
    assert "bursty" not in calm_why  # near Poisson: nothing to explain
    assert "sized for bursty arrivals (index of dispersion 26 over 60 s)" in why and bursty >= calm
