"""The operator ahead of the load (engine/ahead.py): the tail model's inputs read only when a class
states attainment targets, the demand forecast kept in the VAs' status and resumed by a restarted
operator, starting replicas counted as supply, and the burst guard with its one query."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from variant_autoscaler.adapters.guard_signals import build_guard_query, read_guard_signals
from variant_autoscaler.adapters.profile_metrics import QUERIES_PER_CYCLE as PROFILE_QUERIES
from variant_autoscaler.adapters.prometheus import QUERIES_PER_CYCLE, Sample
from variant_autoscaler.api.config import parse_main_config
from variant_autoscaler.api.v1alpha1 import VariantAutoscaling
from variant_autoscaler.engine.ahead import HISTORY_QUERIES, ForecastBook
from variant_autoscaler.planner import PlanOutcome, PlanRequest, VariantPlan
from vatesting.fakes import NS, OPERATOR_NS, VA, Harness, load_yaml

pytestmark = pytest.mark.unit

PREMIUM = (
    "name: Premium\npriority: 1\ndata:\n"
    "  - {model: default/default, slo-tpot: 24, slo-ttft: 500, slo-attainment: 99}\n"
)


def _attainment(h: Harness) -> None:
    classes = h.kube.get("configmaps", OPERATOR_NS, "service-classes-config")
    classes["data"] = {"premium.yaml": PREMIUM}


def _harness(**config: str) -> Harness:
    h = Harness(DEFAULT_ACTUATION_MODE="patch", **config)
    _attainment(h)
    h.add_va(replicas=1)
    return h


async def test_the_tail_inputs_are_read_only_when_a_class_states_attainment() -> None:
    plain = Harness()
    plain.add_va()
    plain.load(600.0)
    # Mean classes only: no tail inputs, and no forecast history to read (they are not planned ahead).
    assert (await plain.engine.run_cycle()).promql_queries == QUERIES_PER_CYCLE + PROFILE_QUERIES
    assert plain.prom.range_queries == []
    h = _harness()
    h.load(600.0)
    report = await h.engine.run_cycle()
    # A fixed set more (burstiness windows, rate, two histograms): the fake answers none of them, which
    # only leaves the tail model on its defaults.
    assert report.promql_queries == QUERIES_PER_CYCLE + PROFILE_QUERIES + 10 + HISTORY_QUERIES
    assert "planned for the forecast" in h.status()["desiredOptimizedAlloc"]["reason"]


async def test_attainment_in_the_queueing_model_configmap_reads_the_tail_inputs_too() -> None:
    """A VA without a service class whose SLOs come from wva-queueing-model-config with ``attainment``
    is planned ahead of the load as a class's would be."""
    h = Harness(DEFAULT_ACTUATION_MODE="patch")
    del h.kube.objects[("configmaps", OPERATOR_NS, "service-classes-config")]
    entry = "model_id: default/default\ntargetTTFT: 500\ntargetITL: 24\nattainment: 99\n"
    h.kube.put(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "wva-queueing-model-config", "namespace": OPERATOR_NS},
            "data": {"default": "sloMultiplier: 3", "slo": entry},
        }
    )
    h.add_va(replicas=1)
    h.load(600.0)
    report = await h.engine.run_cycle()
    assert report.promql_queries == QUERIES_PER_CYCLE + PROFILE_QUERIES + 10 + HISTORY_QUERIES
    reason = h.status()["desiredOptimizedAlloc"]["reason"]
    assert "wva-queueing-model-config" in reason and "planned for the forecast" in reason


async def test_the_status_shows_the_burstiness_the_tail_model_sized_with() -> None:
    """status.workload: the index of dispersion per window and the rate it was read at, as Prometheus
    answered; burstier arrivals, more replicas for the same rate. Nothing read: no workload shown."""
    plain = _harness()
    plain.load(600.0)
    await plain.engine.run_cycle()
    assert "workload" not in plain.status()
    h = _harness()
    h.load(600.0)
    h.prom.set_tail("default/default", NS, {"idc:30s": 8.0, "idc:1m": 12.0, "idc:2m": 15.0, "rate": 10.0})
    await h.engine.run_cycle()
    workload = h.status()["workload"]
    assert workload["burstiness"] == [
        {"windowSeconds": "30.00", "indexOfDispersion": "8.00"},
        {"windowSeconds": "60.00", "indexOfDispersion": "12.00"},
        {"windowSeconds": "120.00", "indexOfDispersion": "15.00"},
    ]
    assert workload["measuredRate"] == "600.00"
    assert "promptTokens" not in workload  # the histograms were not answered: exponential lengths
    VariantAutoscaling.model_validate(h.kube.get("variantautoscalings", NS, VA))  # the schema holds it
    assert (
        h.status()["desiredOptimizedAlloc"]["numReplicas"]
        > plain.status()["desiredOptimizedAlloc"]["numReplicas"]
    )


async def test_the_forecast_lives_in_the_status_and_a_restarted_operator_resumes_it() -> None:
    h = _harness()
    h.load(600.0)
    await h.engine.run_cycle()
    first = h.status()["forecast"]
    assert first["model"] == "default/default" and first["step"] == 1 and float(first["upperRate"]) > 600.0
    VariantAutoscaling.model_validate(h.kube.get("variantautoscalings", NS, VA))  # the schema holds it
    # A cycle sooner than an interval (a VA changed) learns nothing new.
    h.advance(10)
    await h.engine.run_cycle()
    assert h.status()["forecast"]["step"] == 1
    # A brand-new engine takes the state up from the status and goes on from it.
    h.engine = h.new_engine()
    h.advance(60)
    await h.engine.run_cycle()
    assert h.status()["forecast"]["step"] == 2
    # Off: no forecast, and WVA's plan for the load as measured.
    off = _harness(FORECAST_QUANTILE="0")
    off.load(600.0)
    await off.engine.run_cycle()
    assert "forecast" not in off.status() and off.replicas() < h.replicas()


async def test_after_a_fall_the_plan_holds_to_the_scale_down_quantile_with_a_one_minute_window() -> None:
    """The rate planned for rises with the scale-up quantile and falls only as far as the scale-down
    quantile allows (status.forecast.plannedRate, held); with that hysteresis an attainment class's
    default scale-down window in patch mode is one minute, not five."""
    h = _harness()
    # Past the forecast's warm-up (20 horizons' errors: until then both quantiles are one fixed margin).
    for rpm in (600.0, 900.0, 500.0, 1200.0, 700.0, 600.0) * 5:
        h.load(rpm)
        await h.engine.run_cycle()
        h.advance(60)
    high = h.replicas()
    h.load(60.0)
    await h.engine.run_cycle()
    forecast = h.status()["forecast"]
    assert "held" in forecast
    assert float(forecast["plannedRate"]) > float(forecast["upperRate"])  # held above the median
    VariantAutoscaling.model_validate(h.kube.get("variantautoscalings", NS, VA))
    # Each step down waits out a one-minute window, never five.
    reasons = []
    for _ in range(12):
        h.advance(60)
        await h.engine.run_cycle()
        reasons.append(h.status()["desiredOptimizedAlloc"]["reason"])
    assert h.replicas() < high
    assert any("60s stabilization" in r for r in reasons), reasons
    assert not any("300s stabilization" in r for r in reasons), reasons
    # Without the hysteresis, or before the forecast has learnt enough for it (a new model, its initial
    # replicas), the five-minute window.
    for plain in (_harness(FORECAST_SCALE_DOWN_QUANTILE="0"), _harness()):
        for rpm in (600.0, 1200.0):
            plain.load(rpm)
            await plain.engine.run_cycle()
            plain.advance(60)
        plain.load(60.0)
        await plain.engine.run_cycle()
        assert "plannedRate" in plain.status()["forecast"]
        assert "300s stabilization" in plain.status()["desiredOptimizedAlloc"]["reason"]


async def test_with_an_arrival_counter_the_forecast_learns_the_arrivals() -> None:
    """ARRIVAL_COUNTER (e.g. the inference gateway's): one query more, and the forecast learns what
    arrives, time-outs included, instead of what vLLM finished; a model the counter has no series for
    keeps the demand."""
    h = _harness(ARRIVAL_COUNTER="inference_objective_request_total")
    h.load(600.0, arrivals=15.0)  # 10 req/s finished, 15 arriving: clients give up in the queue
    report = await h.engine.run_cycle()
    assert report.promql_queries == QUERIES_PER_CYCLE + PROFILE_QUERIES + 10 + 1 + HISTORY_QUERIES
    assert float(h.status()["forecast"]["pointRate"]) == pytest.approx(900.0, rel=1e-3)
    absent = _harness(ARRIVAL_COUNTER="inference_objective_request_total")
    absent.load(600.0)
    await absent.engine.run_cycle()
    assert float(absent.status()["forecast"]["pointRate"]) == pytest.approx(600.0, rel=1e-3)


def test_a_broken_state_in_the_status_is_left_and_the_newest_wins() -> None:
    book = ForecastBook()
    key = ("m", "ns")
    book.restore(
        [
            (key, {"forecast": {"step": "x"}}),
            (key, {"forecast": {"step": 3, "level": 1.0, "updated": "2026-01-01T00:00:00Z"}}),
            (key, {"forecast": {"step": 5, "level": 2.0}}),
            (("other", "ns"), {}),
        ]
    )
    status = book.status(key)
    assert status is not None and status["step"] == 5 and book.status(("other", "ns")) is None


def test_a_level_shift_is_logged_and_kept_in_the_status(caplog: pytest.LogCaptureFixture) -> None:
    """Past the warm-up, a step in the rate is a level shift: the operator logs it and status.forecast
    says at which step (it survives a restart with the rest of the state)."""
    book, key, cfg = ForecastBook(), ("m", "ns"), parse_main_config({})
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for k in range(40):
        book.update(key, 5.0 + 0.05 * (k % 3), start + timedelta(minutes=k), cfg)
    assert "shifted" not in (book.status(key) or {})
    with caplog.at_level(logging.INFO, logger="variant_autoscaler.engine.ahead"):
        book.update(key, 20.0, start + timedelta(minutes=40), cfg)
    status = book.status(key)
    assert status is not None and status["shifted"] == status["step"] == 41
    assert "level shift to 1200 req/min" in caplog.text
    again = ForecastBook()
    again.restore([(key, {"forecast": status})])
    assert (again.status(key) or {})["shifted"] == 41


async def test_a_level_shift_is_an_event_on_the_variant() -> None:
    h = _harness()
    for k in range(30):  # past the forecast's warm-up
        h.load(600.0 + 10.0 * (k % 3))
        await h.engine.run_cycle()
        h.advance(60)
    assert not [e for e in h.kube.events() if e["reason"] == "DemandLevelShift"]
    h.load(3000.0)
    await h.engine.run_cycle()
    await h.engine.run_cycle()  # a second cycle in the same interval: the same Event, not another
    shifts = [e for e in h.kube.events() if e["reason"] == "DemandLevelShift"]
    assert len(shifts) == 1 and "level shift to 3000 req/min" in shifts[0]["message"], shifts
    assert h.status()["forecast"]["shifted"] == h.status()["forecast"]["step"]
    h.advance(60)
    await h.engine.run_cycle()
    assert len([e for e in h.kube.events() if e["reason"] == "DemandLevelShift"]) == 1


async def test_a_model_without_variants_leaves_the_book() -> None:
    h = _harness()
    h.load(600.0)
    await h.engine.run_cycle()
    assert h.engine.forecasts.status(("default/default", NS)) is not None
    del h.kube.objects[("variantautoscalings", NS, VA)]
    h.advance(60)
    await h.engine.run_cycle()
    assert h.engine.forecasts.status(("default/default", NS)) is None


async def test_replicas_still_starting_do_not_hold_back_a_larger_plan() -> None:
    h = _harness(FORECAST_QUANTILE="0")
    h.load(600.0)
    await h.engine.run_cycle()
    scaled = h.replicas()
    dep = h.kube.get("deployments", NS, VA)
    dep["status"]["readyReplicas"] = 1  # the new replicas are still starting
    h.load(2400.0)
    h.advance(60)
    await h.engine.run_cycle()
    assert h.replicas() > scaled  # a mean class would wait (test_engine_cycle)


def _deployment(h: Harness) -> dict[str, Any]:
    return h.kube.get("deployments", NS, VA)


async def test_the_burst_guard_scales_up_between_cycles_with_one_query() -> None:
    h = _harness(FORECAST_QUANTILE="0")
    h.load(600.0)
    await h.engine.run_cycle()
    planned = h.replicas()
    _deployment(h)["status"]["readyReplicas"] = planned
    # No pressure: nothing moves.
    before = h.prom.queries
    assert await h.engine.guard.tick() == {}
    assert h.prom.queries - before == 1
    # A burst: 300 requests waiting, growing; the guard adds what the demand needs.
    h.load(600.0, waiting=300.0, waiting_growth=300.0)
    scaled = await h.engine.guard.tick()
    assert scaled and h.replicas() > planned
    guarded = h.replicas()
    # The next cycle keeps the guard's count as a recommendation: no scale-down within the window.
    h.load(600.0)
    h.advance(60)
    await h.engine.run_cycle()
    assert h.replicas() == guarded
    assert any(r["numReplicas"] == guarded for r in h.status()["recommendations"])


async def test_the_guard_projects_arrivals_that_rise_over_its_short_window() -> None:
    """A crowd: arrivals over the last 30 s well above the last minute's. The guard reads both in its
    one query and asks for more than the arrivals of now need; without the short window's reading (a
    Prometheus that returned no such series) it sizes on the minute's."""

    async def burst(**short: float) -> tuple[int, str]:
        h = _harness(FORECAST_QUANTILE="0")
        h.load(120.0)
        await h.engine.run_cycle()
        _deployment(h)["status"]["readyReplicas"] = h.replicas()
        h.load(120.0, waiting=20.0, waiting_growth=20.0, **short)
        await h.engine.guard.tick()
        action = h.engine.guard.actions()[(NS, VA)]
        return h.replicas(), action.reason

    # Over the minute 2 + 20/60 = 2.33 arriving per second; over the last 30 s 2 + 30/30 = 3.
    rising, why = await burst(completion_rate_short=2.0, waiting_growth_short=30.0)
    level, plain = await burst()
    assert rising > level
    assert "arrivals rising, 3.00 req/s over the last 30 s" in why and "arrivals rising" not in plain


async def test_the_guard_expects_the_replicas_a_cycle_asked_for_one_start_up_later() -> None:
    h = _harness(FORECAST_QUANTILE="0")
    h.load(600.0)
    await h.engine.run_cycle()
    _deployment(h)["status"]["readyReplicas"] = 1
    h.advance(60)
    h.load(600.0)
    await h.engine.run_cycle()  # the plan holds: the replicas asked for a minute ago still start
    planned = h.replicas()
    assert planned > 1
    h.advance(30)
    # A burst 90 s after the scale-up: the replicas still starting are due 90 s from now (STARTUP_TIME
    # 180 s after they were asked for), and the guard says so.
    h.load(600.0, waiting=300.0, waiting_growth=300.0)
    await h.engine.guard.tick()
    action = h.engine.guard.actions()[(NS, VA)]
    assert f"1 ready + {planned - 1} starting (ready in 90–90 s)" in action.reason
    assert "a backlog of" in action.reason


async def test_the_guard_leaves_mean_classes_and_other_modes_alone() -> None:
    h = Harness(DEFAULT_ACTUATION_MODE="patch", FORECAST_QUANTILE="0")
    h.add_va(replicas=1)
    h.load(600.0)
    await h.engine.run_cycle()
    h.load(600.0, waiting=300.0, waiting_growth=300.0)
    assert await h.engine.guard.tick() == {}
    metrics = Harness(FORECAST_QUANTILE="0")  # metrics mode: the HPA scales
    _attainment(metrics)
    metrics.add_va(replicas=1)
    metrics.load(600.0)
    await metrics.engine.run_cycle()
    metrics.load(600.0, waiting=300.0, waiting_growth=300.0)
    assert await metrics.engine.guard.tick() == {}


def test_the_guard_query_is_one_query_of_four_signals() -> None:
    query = build_guard_query(60.0)
    assert query.count(" or ") == 3 and "[1m]" in query
    samples = [
        Sample({"model_name": "m", "namespace": "ns", "signal": "waiting"}, 12.0, 0.0),
        Sample({"model_name": "m", "namespace": "ns", "signal": "kv"}, float("nan"), 0.0),
        Sample({"model_name": "m", "signal": "completions"}, 3.0, 0.0),
        Sample({"model_name": "m", "namespace": "ns", "signal": "other"}, 1.0, 0.0),
        Sample({"signal": "waiting"}, 1.0, 0.0),
    ]
    read = read_guard_signals(samples)
    assert read[("m", "ns")].waiting == 12.0 and read[("m", "ns")].kv == 0.0
    assert read[("m", "")].completions == 3.0


def test_the_guard_query_reads_the_rise_window_too_where_there_is_one() -> None:
    query = build_guard_query(60.0, 30.0)
    assert query.count(" or ") == 5 and "[1m]" in query and "[30s]" in query
    samples = [
        Sample({"model_name": "m", "namespace": "ns", "signal": "growth_short"}, 40.0, 0.0),
        Sample({"model_name": "m", "namespace": "ns", "signal": "completions_short"}, 7.5, 0.0),
        Sample({"model_name": "m", "namespace": "ns", "signal": "waiting"}, 12.0, 0.0),
        Sample({"model_name": "n", "namespace": "ns", "signal": "waiting"}, 1.0, 0.0),
    ]
    read = read_guard_signals(samples)
    assert read[("m", "ns")].growth_short == 40.0 and read[("m", "ns")].completions_short == 7.5
    assert read[("n", "ns")].growth_short is None  # not read: no rise is projected for it


async def test_a_plan_that_moves_the_load_scales_down_only_once_the_new_replicas_serve() -> None:
    """Make before break: the plan moves the model from one variant to another; the first keeps its
    replicas while the other's are starting, and gives them up once they are ready."""

    class Moving:
        def plan(self, request: PlanRequest) -> PlanOutcome:
            counts = {VA: 1, "other": 2}
            return PlanOutcome(
                "optimal",
                0.0,
                {
                    v.key: VariantPlan("A100", counts[v.key[1]], 64, 40.0, 100.0, 20.0, "test plan")
                    for v in request.variants
                },
                ahead=frozenset(v.key for v in request.variants),
            )

    h = Harness(planner=Moving(), DEFAULT_ACTUATION_MODE="patch", SCALE_DOWN_STABILIZATION_WINDOW="0s")
    _attainment(h)
    h.add_va(replicas=3)
    other = load_yaml("deploy/samples/variantautoscaling.yaml")
    other["metadata"]["name"] = "other"
    h.add_va(other, replicas=0)  # its Deployment is named as the VA
    h.load(600.0)
    await h.engine.run_cycle()
    assert (h.replicas(VA), h.replicas("other")) == (3, 2)
    assert "still starting" in h.status()["desiredOptimizedAlloc"]["reason"]
    h.kube.get("deployments", NS, "other")["status"].update(replicas=2, readyReplicas=2)
    h.advance(60)
    await h.engine.run_cycle()
    assert (h.replicas(VA), h.replicas("other")) == (1, 2)


# --- a new forecaster warmed from the model's history in Prometheus ---------------------------------------


def _history(h: Harness, minutes: int, rpm: float = 600.0, *, gap_at: int | None = None) -> None:
    """``minutes`` of the model's past rate, one point a minute up to a minute ago (``gap_at``: that
    many minutes ago, no point)."""
    now = h.clock.now.timestamp()
    h.prom.history[("default/default", NS)] = [
        (now - 60.0 * k, rpm / 60.0 * (1.0 + 0.1 * ((k % 3) - 1)))
        for k in range(minutes, 0, -1)
        if k != gap_at
    ]


async def test_a_new_models_forecast_learns_its_history_and_holds_from_its_first_cycle() -> None:
    """No state to resume (a first install, a migration from WVA): one range query reads the model's
    rate over FORECAST_HISTORY, up to a minute ago, at the forecaster's step; the forecaster learns it,
    so its hysteresis holds the plans at once and its initial replicas keep the one-minute window, not
    the five minutes of a warm-up."""
    h = _harness()
    _history(h, 40)
    h.load(600.0)
    report = await h.engine.run_cycle()
    assert report.promql_queries == QUERIES_PER_CYCLE + PROFILE_QUERIES + 10 + HISTORY_QUERIES
    (asked,) = h.prom.range_queries
    now = h.clock.now.timestamp()
    assert float(asked["end"]) == pytest.approx(now - 60.0) and float(asked["step"]) == 60.0
    assert float(asked["start"]) == pytest.approx(now - 60.0 - 4 * 3600.0)  # FORECAST_HISTORY, 4h
    assert asked["query"] == (  # the new models only
        'sum by (model_name, namespace) (rate(vllm:request_success_total{model_name=~"default/default"}[1m]))'
    )
    assert h.status()["forecast"]["step"] == 41  # forty minutes of history, then this cycle's rate
    assert h.engine.forecasts.holds(("default/default", NS))
    # The next cycle goes on from there; the history is not read again.
    h.advance(60)
    h.load(60.0)
    await h.engine.run_cycle()
    assert h.status()["forecast"]["step"] == 42 and len(h.prom.range_queries) == 1
    assert "60s stabilization" in h.status()["desiredOptimizedAlloc"]["reason"]
    # Without it (FORECAST_HISTORY=0), the same first cycles warm up: step 1, five minutes.
    off = _harness(FORECAST_HISTORY="0")
    _history(off, 40)
    off.load(600.0)
    await off.engine.run_cycle()
    off.advance(60)
    off.load(60.0)
    await off.engine.run_cycle()
    assert off.status()["forecast"]["step"] == 2 and off.prom.range_queries == []
    assert "300s stabilization" in off.status()["desiredOptimizedAlloc"]["reason"]


async def test_the_history_is_read_only_where_there_is_no_state_and_only_its_last_run_counts() -> None:
    # A restarted operator resumes the status' state: no history query.
    h = _harness()
    h.load(600.0)
    await h.engine.run_cycle()
    h.engine = h.new_engine()
    h.prom.range_queries.clear()
    h.advance(60)
    await h.engine.run_cycle()
    assert h.prom.range_queries == [] and h.status()["forecast"]["step"] == 2
    # A gap in the history (no series for a while): the run after it only, up to a minute ago.
    gap = _harness()
    _history(gap, 40, gap_at=10)
    gap.load(600.0)
    await gap.engine.run_cycle()
    assert gap.status()["forecast"]["step"] == 10  # nine minutes after the gap, then this cycle
    # With the arrival counter configured, its history is read instead of the completions'.
    arrivals = _harness(ARRIVAL_COUNTER="inference_objective_request_total")
    arrivals.load(600.0)
    await arrivals.engine.run_cycle()
    (asked,) = arrivals.prom.range_queries
    assert 'rate(inference_objective_request_total{model_name=~"default/default"}[1m])' in asked["query"]


async def test_a_failed_history_query_starts_the_forecast_afresh_and_is_not_repeated(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = _harness()
    h.prom.history_error = True
    h.load(600.0)
    await h.engine.run_cycle()
    assert h.status()["forecast"]["step"] == 1
    assert any("forecast history of 1 model(s) not read" in r.getMessage() for r in caplog.records)
    h.advance(60)
    await h.engine.run_cycle()
    assert len(h.prom.range_queries) == 1 and h.status()["forecast"]["step"] == 2


async def test_a_stale_state_in_the_status_is_relearnt_from_the_history() -> None:
    """An operator down for longer than the horizon finds a state whose pending forecasts can no longer
    be scored: where the history covers the gap it relearns from it; where it does not, it goes on from
    the state."""
    h = _harness()
    h.load(600.0)
    for _ in range(3):
        await h.engine.run_cycle()
        h.advance(60)
    assert h.status()["forecast"]["step"] == 3
    h.advance(2 * 3600)  # two hours later, a new process
    h.engine = h.new_engine()
    _history(h, 30)
    h.prom.range_queries.clear()
    await h.engine.run_cycle()
    assert len(h.prom.range_queries) == 1 and h.status()["forecast"]["step"] == 31
    # Without history for it, the stale state goes on.
    h.advance(2 * 3600)
    h.engine = h.new_engine()
    h.prom.history.clear()
    await h.engine.run_cycle()
    assert h.status()["forecast"]["step"] == 32
