"""WVA's saturation analyzers V1 and V2 and their combination (core/saturation.py), on hand-computed cases."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from variant_autoscaler.core import saturation as sat
from variant_autoscaler.core.saturation import ReplicaMetrics as M
from variant_autoscaler.core.saturation import VariantState
from variant_autoscaler.core.sizing import ScaleUp, limit_scale_ups


def _v(
    key: str,
    cost: float,
    loads: list[tuple[float, float]],
    *,
    ready: int | None = None,
    replicas: int | None = None,
    **kw: object,
) -> VariantState:
    n = len(loads) if replicas is None else replicas
    return VariantState(
        key=key,
        cost=cost,
        replicas=n,
        ready=n if ready is None else ready,
        metrics=tuple(M(kv, q) for kv, q in loads),
        **kw,  # type: ignore[arg-type]
    )


# --- V1 -------------------------------------------------------------------------------------------------


def test_v1_spare_above_triggers_holds() -> None:
    # spare kv 0.8 - 0.5 = 0.3 >= 0.1, spare queue 5 - 1 = 4 >= 3; one fewer: kv 1.0/1 > 0.8 -> unsafe
    v = sat.analyze_v1([_v("a", 10, [(0.5, 1), (0.5, 1)])])
    assert v.fresh and v.targets == {"a": 2}
    assert "one replica fewer would leave spare KV -0.200" in v.reason


def test_v1_low_kv_spare_adds_one_to_the_cheapest_variant() -> None:
    # the documented example: 65 % and 75 % -> spare (0.15 + 0.05) / 2 = 0.10 ... 0.75 gives 0.10, not < 0.10
    held = sat.analyze_v1([_v("a", 10, [(0.65, 0), (0.75, 0)])])
    assert held.targets == {"a": 2}
    up = sat.analyze_v1([_v("cheap", 5, [(0.65, 0)]), _v("dear", 20, [(0.76, 0)])])
    assert up.targets == {"cheap": 2, "dear": 1}
    assert "spare KV cache 0.095 < 0.1" in up.reason and "cheapest variant cheap (cost 5)" in up.reason


def test_v1_queue_trigger_and_all_saturated() -> None:
    assert sat.analyze_v1([_v("a", 10, [(0.1, 2.5)])]).targets == {"a": 2}  # spare queue 2.5 < 3
    all_sat = sat.analyze_v1([_v("a", 10, [(0.9, 0), (0.2, 7)])])
    assert all_sat.targets == {"a": 3} and "all 2 replicas saturated" in all_sat.reason


def test_v1_ties_break_by_key_first_up_last_down() -> None:
    up = sat.analyze_v1([_v("b", 10, [(0.79, 0)]), _v("a", 10, [(0.79, 0)])])
    assert up.targets == {"a": 2, "b": 1}
    idle = [(0.0, 0.0)] * 2
    down = sat.analyze_v1([_v("a", 10, idle), _v("b", 10, idle)])
    assert down.targets == {"a": 2, "b": 1}


def test_v1_scale_down_on_the_most_expensive_when_the_worst_case_stays_unsaturated() -> None:
    # 4 replicas at kv 0.1, queue 0: one fewer -> kv 0.4/3 = 0.133, spare 0.667 >= 0.1; queue spare 5 >= 3
    v = sat.analyze_v1([_v("cheap", 5, [(0.1, 0)] * 2), _v("dear", 20, [(0.1, 0)] * 2)])
    assert v.targets == {"cheap": 2, "dear": 1}
    assert "most expensive variant dear (cost 20)" in v.reason


def test_v1_no_scale_down_below_the_floor_or_with_one_replica() -> None:
    assert sat.analyze_v1([_v("a", 10, [(0.0, 0)])]).targets == {"a": 1}
    at_min = sat.analyze_v1([_v("a", 10, [(0.0, 0)] * 3, min_replicas=3)])
    assert at_min.targets == {"a": 3} and "at its minimum" in at_min.reason


def test_v1_no_scale_down_while_any_replica_is_saturated() -> None:
    v = sat.analyze_v1([_v("a", 10, [(0.85, 0), (0.0, 0), (0.0, 0), (0.0, 0)])])
    # spare over the three unsaturated: 0.8 >= 0.1; one saturated -> hold
    assert v.targets == {"a": 4} and "1 replicas saturated" in v.reason


def test_v1_respects_max_replicas() -> None:
    v = sat.analyze_v1([_v("cheap", 5, [(0.9, 0)], max_replicas=1), _v("dear", 20, [(0.9, 0)])])
    assert v.targets == {"cheap": 1, "dear": 2}
    full = sat.analyze_v1([_v("a", 5, [(0.9, 0)], max_replicas=1)])
    assert full.targets == {"a": 1} and "maxReplicas" in full.reason


@pytest.mark.parametrize(
    "starting",
    [
        {"ready": 1, "replicas": 2},  # a replica not ready
        {"replicas": 2},  # ready but one not reporting
        {"previous_desired": 3},  # the last decision not applied yet
    ],
)
def test_v1_nothing_moves_while_a_variant_of_the_model_is_starting(starting: dict[str, int]) -> None:
    loads = [(0.95, 9.0)]
    v = sat.analyze_v1([_v("cheap", 5, loads * 2), _v("dear", 20, loads, **starting)])
    assert v.fresh and v.targets == {"cheap": 2, "dear": starting.get("replicas", 1)}
    assert "nothing moves while a variant of the model is starting: dear" in v.reason


def test_v1_without_metrics_is_not_fresh() -> None:
    v = sat.analyze_v1([_v("a", 10, [], replicas=2)])
    assert not v.fresh and v.targets == {"a": 2}


# --- V2 -------------------------------------------------------------------------------------------------

CAP = 10_000.0


def test_v2_required_capacity_goes_to_the_cheapest_variant() -> None:
    # demand = 2 x 0.9 x 10000 = 18000 (+ no queue); supply 20000; required = 18000/0.85 - 20000 = 1176.5
    v = sat.analyze_v2(
        [
            _v("dear", 20, [(0.9, 0)], kv_tokens_per_replica=CAP),
            _v("cheap", 5, [(0.9, 0)], kv_tokens_per_replica=CAP),
        ]
    )
    assert v.fresh and v.targets == {"dear": 1, "cheap": 2}
    assert "+1 on cheap (cost 5)" in v.reason


def test_v2_queue_demand_counts_waiting_prompts() -> None:
    # kv 0.5 x 10000 = 5000 plus 10 waiting x 500 tokens = 10000; required = 10000/0.85 - 10000 = 1764.7
    v = sat.analyze_v2([_v("a", 10, [(0.5, 10)], kv_tokens_per_replica=CAP)], avg_input_tokens=500)
    assert v.targets == {"a": 2}


def test_v2_starting_replicas_count_as_supply() -> None:
    # one replica at 90 %: demand 9000, supply 10000 -> required 9000/0.85 - 10000 = 588 -> +1
    alone = sat.analyze_v2([_v("a", 10, [(0.9, 0)], kv_tokens_per_replica=CAP)])
    assert alone.targets == {"a": 2}
    # the same with that second replica still starting: supply 20000 -> no second scale-up; spare
    # 20000 - 9000/0.7 = 7143 < one replica -> no scale-down either
    starting = sat.analyze_v2([_v("a", 10, [(0.9, 0)], replicas=2, ready=1, kv_tokens_per_replica=CAP)])
    assert starting.targets == {"a": 2} and "within" in starting.reason


def test_v2_spills_to_the_next_variant_at_max_replicas() -> None:
    v = sat.analyze_v2(
        [
            _v("cheap", 5, [(1.0, 0)], kv_tokens_per_replica=CAP, max_replicas=2),
            _v("dear", 20, [(1.0, 0)] * 3, kv_tokens_per_replica=CAP),
        ]
    )
    # demand 40000 -> 40000/0.85 = 47058.8 - 40000 = 7058.8 -> cheap +1 (room 1) covers it
    assert v.targets == {"cheap": 2, "dear": 3}
    big = sat.analyze_v2(
        [
            _v("cheap", 5, [(1.0, 5)], kv_tokens_per_replica=CAP, max_replicas=2),
            _v("dear", 20, [(1.0, 5)], kv_tokens_per_replica=CAP),
        ],
        avg_input_tokens=4000,
    )
    # demand 2 x (10000 + 20000) = 60000 -> required 70588 - 20000 = 50588: cheap +1, dear +5 (40588/10000)
    assert big.targets == {"cheap": 2, "dear": 6}


def test_v2_spare_capacity_leaves_the_most_expensive_first() -> None:
    # demand 4 x 0.1 x 10000 = 4000; supply 40000; spare = 40000 - 4000/0.7 = 34285 -> 3 whole replicas,
    # but each variant keeps its floor of 1: dear 2 -> 1, cheap 2 -> 1
    v = sat.analyze_v2(
        [
            _v("cheap", 5, [(0.1, 0)] * 2, kv_tokens_per_replica=CAP),
            _v("dear", 20, [(0.1, 0)] * 2, kv_tokens_per_replica=CAP),
        ]
    )
    assert v.targets == {"cheap": 1, "dear": 1}
    assert v.reason.index("dear") < v.reason.index("cheap")


def test_v2_within_the_band_holds() -> None:
    v = sat.analyze_v2([_v("a", 10, [(0.8, 0)] * 2, kv_tokens_per_replica=CAP)])
    assert v.targets == {"a": 2} and "within [0.7, 0.85]" in v.reason


def test_v2_never_scales_down_on_partial_metrics() -> None:
    v = sat.analyze_v2([_v("a", 10, [(0.0, 0)], replicas=3, kv_tokens_per_replica=CAP)])
    assert v.targets == {"a": 3} and "do not report" in v.reason


def test_v2_needs_the_cache_capacity() -> None:
    v = sat.analyze_v2([_v("a", 10, [(0.9, 0)])])
    assert not v.fresh and "vllm:cache_config_info" in v.reason


# --- combining -----------------------------------------------------------------------------------------


def _verdict(name: str, fresh: bool, **targets: int) -> sat.AnalyzerVerdict:
    return sat.AnalyzerVerdict(name, fresh, targets, f"{name} says so")


def test_several_analyzers_up_if_any_asks() -> None:
    d = sat.combine_analyzers([_verdict("A", True, a=5), _verdict("B", True, a=2)], {"a": 3})["a"]
    assert (d.replicas, d.direction, d.decided_by) == (5, "up", "A")


def test_several_analyzers_down_only_if_all_fresh_ones_agree() -> None:
    both = sat.combine_analyzers([_verdict("A", True, a=1), _verdict("B", True, a=2)], {"a": 3})["a"]
    assert (both.replicas, both.direction, both.decided_by) == (2, "down", "A+B")
    veto = sat.combine_analyzers([_verdict("A", True, a=1), _verdict("B", True, a=3)], {"a": 3})["a"]
    assert (veto.replicas, veto.direction) == (3, "hold")
    stale = sat.combine_analyzers([_verdict("A", True, a=1), _verdict("B", False, a=3)], {"a": 3})["a"]
    assert (stale.replicas, stale.direction, stale.decided_by) == (1, "down", "A")


def test_no_fresh_analyzer_holds_with_decided_by_none() -> None:
    d = sat.combine_analyzers([_verdict("A", False, a=1)], {"a": 3})["a"]
    assert (d.replicas, d.direction, d.decided_by) == (3, "hold", "none")


def _sat(replicas: int, current: int) -> sat.Decision:
    direction = "up" if replicas > current else "down" if replicas < current else "hold"
    return sat.Decision(replicas, direction, sat.V1, "v1 says so", (sat.V1,))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("model", "floor", "expected", "by"),
    [
        (5, 3, 5, "model"),  # model up, saturation holds
        (3, 5, 5, sat.V1),  # saturation up above the model's hold
        (4, 6, 6, sat.V1),  # both up: the larger
        (5, 5, 5, "model+saturation-v1"),
        (2, 3, 3, sat.V1),  # the model alone asks down: the floor holds
        (3, 2, 3, "model"),  # saturation alone asks down: the model holds
        (1, 2, 2, "model+saturation-v1"),  # both down: the smaller reduction
    ],
)
def test_saturation_is_a_floor_under_the_model(model: int, floor: int, expected: int, by: str) -> None:
    d = sat.with_model(model, "model says so", _sat(floor, 3), 3)
    assert (d.replicas, d.decided_by) == (expected, by)


def test_without_a_model_saturation_decides_and_without_metrics_the_model_does() -> None:
    s = _sat(4, 3)
    assert sat.with_model(None, "", s, 3) is s
    none = sat.Decision(3, "hold", "none", "no metrics")
    d = sat.with_model(1, "model says so", none, 3)
    assert (d.replicas, d.decided_by) == (1, "model")


@given(
    hs.lists(
        hs.tuples(hs.floats(0, 1), hs.floats(0, 50), hs.floats(0.5, 50), hs.integers(1, 6)),
        min_size=1,
        max_size=4,
    ),
    hs.sampled_from(["v1", "v2"]),
)
def test_an_analyzer_moves_at_most_the_cheapest_up_or_dearest_down_and_respects_bounds(
    rows: list[tuple[float, float, float, int]], which: str
) -> None:
    variants = [
        VariantState(
            key=f"v{i}",
            cost=cost,
            replicas=n,
            ready=n,
            metrics=tuple(M(kv, q) for _ in range(n)),
            max_replicas=8,
            kv_tokens_per_replica=CAP,
        )
        for i, (kv, q, cost, n) in enumerate(rows)
    ]
    verdict = sat.analyze_v1(variants) if which == "v1" else sat.analyze_v2(variants, avg_input_tokens=100)
    ups = [v for v in variants if verdict.targets[v.key] > v.replicas]
    downs = [v for v in variants if verdict.targets[v.key] < v.replicas]
    assert not (ups and downs)
    for v in variants:
        assert v.floor <= verdict.targets[v.key] or verdict.targets[v.key] == v.replicas
        assert verdict.targets[v.key] <= 8 or verdict.targets[v.key] == v.replicas
    if which == "v1":
        assert len(ups) + len(downs) <= 1
        assert all(abs(verdict.targets[v.key] - v.replicas) <= 1 for v in variants)


def test_the_limiter_grants_scale_ups_the_most_saturated_first_and_partially() -> None:
    asks = [
        ScaleUp("calm", "H100", 2, current=1, target=4, spare=0.15),
        ScaleUp("hot", "H100", 2, current=2, target=4, spare=0.02),
        ScaleUp("other", "A100", 1, current=1, target=3, spare=0.5),
        ScaleUp("down", "H100", 1, current=3, target=2, spare=0.9),  # not a scale-up: never limited
    ]
    # H100: 7 free: "hot" takes 4 (two replicas), "calm" gets one replica of the 3 left; A100: plenty.
    assert limit_scale_ups(asks, {"H100": 7, "A100": 5}) == {"calm": 2}
    # Nothing of a type free (or the type unknown): no scale-up of it, nothing taken from running ones.
    assert limit_scale_ups(asks, {"A100": 1}) == {"calm": 1, "hot": 2, "other": 2}
    assert limit_scale_ups(asks, {"H100": -3, "A100": 9}) == {"calm": 1, "hot": 2}


def test_the_limiter_weighs_saturation_by_the_models_priority() -> None:
    # "calm" is less saturated (85 % used against 98 %) but its model's priority 2 makes it the more
    # urgent (1.70 against 0.98): it is served first; at priority 1 each, "hot" is.
    calm = ScaleUp("calm", "H100", 2, current=1, target=3, spare=0.15, priority=2.0)
    hot = ScaleUp("hot", "H100", 2, current=2, target=4, spare=0.02)
    assert calm.urgency == pytest.approx(1.7) and hot.urgency == pytest.approx(0.98)
    assert limit_scale_ups([hot, calm], {"H100": 4}) == {"hot": 2}
    assert limit_scale_ups([hot, replace(calm, priority=1.0)], {"H100": 4}) == {"calm": 1}
    # Equal urgency (1.0 each): the more saturated first.
    half = replace(calm, spare=0.5, priority=2.0)
    full = replace(hot, spare=0.0)
    assert half.urgency == full.urgency == 1.0
    assert limit_scale_ups([half, full], {"H100": 4}) == {"calm": 1}
