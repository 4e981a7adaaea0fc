"""Replica policy: hold on missing data, bounds, scale-down stabilisation, pending replicas."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from variant_autoscaler.core.policy import (
    MAX_HISTORY,
    PolicyInput,
    Recommendation,
    apply_policy,
    batch_stable_cycles,
    priority_yields,
    should_apply_batch,
    siblings_starting,
)
from variant_autoscaler.errors import ModelError

T0 = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)


def _inp(**kw: object) -> PolicyInput:
    base = PolicyInput(
        now=T0,
        optimized_replicas=3,
        optimized_reason="optimal",
        metrics_ok=True,
        metrics_reason="",
        current_replicas=3,
        ready_replicas=3,
        last_desired=3,
        min_replicas=1,
        max_replicas=None,
        stabilization_seconds=0.0,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_passes_the_optimizer_through() -> None:
    d = apply_policy(_inp(optimized_replicas=5))
    assert (d.replicas, d.held, d.limited_by) == (5, False, ())
    assert d.reason == "optimal"


@pytest.mark.parametrize(
    ("last", "current", "expected"),
    [(2, 4, 4), (6, 4, 6), (None, 4, 4), (None, None, 1), (0, 0, 1)],
)
def test_missing_metrics_hold_and_never_scale_down(
    last: int | None, current: int | None, expected: int
) -> None:
    d = apply_policy(
        _inp(
            metrics_ok=False,
            metrics_reason="Prometheus unreachable",
            optimized_replicas=0,
            last_desired=last,
            current_replicas=current,
        )
    )
    assert d.held and d.replicas == expected
    assert "no scale-down" in d.reason and "Prometheus unreachable" in d.reason


def test_no_optimizer_output_holds_with_its_reason() -> None:
    d = apply_policy(_inp(optimized_replicas=None, optimized_reason="infeasible: ITL target", last_desired=2))
    assert d.held and d.replicas == 3  # current 3 > last 2
    assert "infeasible: ITL target" in d.reason


def test_hold_still_respects_max() -> None:
    d = apply_policy(_inp(metrics_ok=False, metrics_reason="stale", current_replicas=9, max_replicas=4))
    assert d.replicas == 4 and "max" in d.limited_by


@pytest.mark.parametrize(("optimized", "expected", "bound"), [(0, 2, "min"), (12, 8, "max"), (5, 5, None)])
def test_bounds(optimized: int, expected: int, bound: str | None) -> None:
    d = apply_policy(
        _inp(
            optimized_replicas=optimized, min_replicas=2, max_replicas=8, current_replicas=5, ready_replicas=5
        )
    )
    assert d.replicas == expected
    assert (bound in d.limited_by) if bound else d.limited_by == ()


def test_scale_to_zero_when_min_is_zero() -> None:
    d = apply_policy(_inp(optimized_replicas=0, min_replicas=0, current_replicas=1))
    assert d.replicas == 0


def test_stabilization_defers_scale_down_to_the_window_max() -> None:
    history = (Recommendation(T0 - timedelta(seconds=200), 6), Recommendation(T0 - timedelta(seconds=100), 4))
    d = apply_policy(
        _inp(optimized_replicas=2, current_replicas=5, stabilization_seconds=300, history=history)
    )
    # Highest recent recommendation is 6, but stabilisation never scales up: stays at current 5.
    assert d.replicas == 5 and "stabilization" in d.limited_by
    assert [r.replicas for r in d.history] == [6, 4, 2]
    # The history holds change points: 6 stood from T0-200 until T0-100, 4 until T0, then 2.
    again = apply_policy(_inp(optimized_replicas=2, stabilization_seconds=300, history=d.history))
    assert again.history == d.history  # an unchanged recommendation adds nothing
    held = apply_policy(
        _inp(
            optimized_replicas=2,
            current_replicas=5,
            last_desired=d.replicas,
            stabilization_seconds=300,
            history=d.history,
            now=T0 + timedelta(seconds=150),
        )
    )
    assert held.replicas == 5  # the window starts at T0-150, when 6 was still in effect
    later = apply_policy(
        _inp(
            optimized_replicas=2,
            current_replicas=5,
            last_desired=held.replicas,
            stabilization_seconds=300,
            history=held.history,
            now=T0 + timedelta(seconds=250),
        )
    )
    assert later.replicas == 4  # from T0-50 on: 4, then 2
    final = apply_policy(
        _inp(
            optimized_replicas=2,
            current_replicas=4,
            last_desired=later.replicas,
            stabilization_seconds=300,
            history=later.history,
            now=T0 + timedelta(seconds=301),
        )
    )
    assert final.replicas == 2 and "stabilization" not in final.limited_by
    assert [r.replicas for r in final.history] == [2]


def test_per_cycle_histories_collapse_to_change_points() -> None:
    # As statuses written before change points stored it: one entry per cycle.
    history = tuple(
        Recommendation(T0 - timedelta(seconds=60 * k), 5 if k > 3 else 3) for k in range(8, 0, -1)
    )
    d = apply_policy(
        _inp(optimized_replicas=3, current_replicas=5, stabilization_seconds=300, history=history)
    )
    assert [(r.replicas, (T0 - r.time).total_seconds()) for r in d.history] == [(5, 480), (3, 180)]
    assert d.replicas == 5  # 5 was in effect at T0-300


def test_stabilization_does_not_delay_scale_up_and_zero_window_keeps_no_history() -> None:
    history = (Recommendation(T0 - timedelta(seconds=10), 1),)
    up = apply_policy(
        _inp(optimized_replicas=7, current_replicas=3, stabilization_seconds=300, history=history)
    )
    assert up.replicas == 7
    off = apply_policy(
        _inp(optimized_replicas=1, current_replicas=3, stabilization_seconds=0, history=history)
    )
    assert off.replicas == 1 and off.history == ()


def test_history_is_bounded() -> None:
    history = tuple(Recommendation(T0 - timedelta(seconds=i), 3 + i % 2) for i in range(200, 0, -1))
    d = apply_policy(_inp(stabilization_seconds=3600, history=history))
    assert len(d.history) == MAX_HISTORY and d.history[-1].time == T0


def test_pending_replicas_block_scale_up_until_timeout() -> None:
    kw = dict(optimized_replicas=6, current_replicas=4, ready_replicas=2, pending_timeout_seconds=600)
    waiting = apply_policy(_inp(**kw, last_scale_time=T0 - timedelta(seconds=60)))
    assert waiting.replicas == 4 and "pending" in waiting.limited_by
    assert "2 of 4 replicas are still starting" in waiting.reason
    timed_out = apply_policy(_inp(**kw, last_scale_time=T0 - timedelta(seconds=601)))
    assert timed_out.replicas == 6
    # No scale seen (e.g. a replica crash-looping since before the operator watched): no wait at all.
    unknown = apply_policy(_inp(**kw, last_scale_time=None))
    assert unknown.replicas == 6 and "pending" not in unknown.limited_by
    # Scale-down is never blocked by pending replicas.
    down = apply_policy(_inp(optimized_replicas=2, current_replicas=4, ready_replicas=1))
    assert down.replicas == 2


def test_bad_inputs_are_errors() -> None:
    with pytest.raises(ModelError):
        apply_policy(_inp(min_replicas=-1))
    with pytest.raises(ModelError):
        apply_policy(_inp(min_replicas=4, max_replicas=2))
    with pytest.raises(ModelError):
        apply_policy(_inp(optimized_replicas=-2))


def test_batch_stability() -> None:
    assert batch_stable_cycles(None, 0, 16) == 1
    assert batch_stable_cycles(16, 1, 16) == 2
    assert batch_stable_cycles(16, 5, 32) == 1
    assert batch_stable_cycles(16, 5, None) == 0
    kw = dict(enabled=True, current_batch=8, batch=16, required_cycles=3)
    assert should_apply_batch(**kw, stable_cycles=3)  # type: ignore[arg-type]
    assert not should_apply_batch(**kw, stable_cycles=2)  # type: ignore[arg-type]
    assert not should_apply_batch(**{**kw, "enabled": False}, stable_cycles=9)  # type: ignore[arg-type]
    assert not should_apply_batch(**{**kw, "current_batch": 16}, stable_cycles=9)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("optimized", "last", "current", "max_replicas", "expected"),
    [
        (1, 3, 3, None, 3),  # a scale-down waits for the window to refill
        (1, 4, 3, None, 4),  # no lower than the previous decision either
        (1, None, 2, None, 2),  # no previous decision: the current replicas
        (5, 3, 3, None, 5),  # scale-ups pass: the under-read only biases low
        (1, 6, 3, 4, 4),  # within the bounds
    ],
)
def test_a_metrics_recovery_holds_scale_down_only(
    optimized: int, last: int | None, current: int, max_replicas: int | None, expected: int
) -> None:
    d = apply_policy(
        _inp(
            optimized_replicas=optimized,
            last_desired=last,
            current_replicas=current,
            max_replicas=max_replicas,
            scale_down_hold="metrics are back since 12:00",
        )
    )
    assert (d.replicas, d.held) == (expected, False)
    if expected > optimized:
        assert "recovering" in d.limited_by
        assert f"scale-down to {optimized} held at {expected}: metrics are back since 12:00" in d.reason
    else:
        assert "recovering" not in d.limited_by


def test_kv_pressure_holds_a_scale_down_at_the_current_replicas() -> None:
    why = "its pods preempt 12 requests/min (KV cache full)"
    d = apply_policy(_inp(optimized_replicas=1, current_replicas=4, last_desired=4, pressure_hold=why))
    assert (d.replicas, d.held, d.limited_by) == (4, False, ("kv-pressure",))
    assert f"scale-down to 1 held at 4: {why}" in d.reason
    # Scale-ups pass; and without pressure the scale-down goes through.
    assert apply_policy(_inp(optimized_replicas=6, current_replicas=4, pressure_hold=why)).replicas == 6
    assert apply_policy(_inp(optimized_replicas=1, current_replicas=4)).replicas == 1
    # The bounds still come first.
    bounded = apply_policy(_inp(optimized_replicas=1, current_replicas=4, max_replicas=3, pressure_hold=why))
    assert bounded.replicas == 3


def test_a_variant_seen_first_is_not_scaled_down_before_one_window() -> None:
    """No history yet (a new VariantAutoscaling): its current replicas count as the first
    recommendation, as the HorizontalPodAutoscaler seeds its own, so one cycle's reading cannot scale
    it down; once the window has passed, the scale-down goes through."""
    first = apply_policy(_inp(optimized_replicas=2, current_replicas=8, stabilization_seconds=300.0))
    assert first.replicas == 8 and "stabilization" in first.limited_by
    assert [r.replicas for r in first.history] == [8, 2]
    later = apply_policy(
        _inp(
            now=T0 + timedelta(seconds=301),
            optimized_replicas=2,
            current_replicas=8,
            last_desired=first.replicas,
            stabilization_seconds=300.0,
            history=first.history,
        )
    )
    assert later.replicas == 2
    # Without a window nothing is remembered, and a scale-up is never held back.
    assert apply_policy(_inp(optimized_replicas=2, current_replicas=8)).replicas == 2
    up = apply_policy(_inp(optimized_replicas=9, current_replicas=8, stabilization_seconds=300.0))
    assert up.replicas == 9


def test_a_scale_up_whose_record_was_lost_is_not_undone_before_one_window() -> None:
    """The process that scaled the target from 1 to 2 was killed before its status write (or its burst
    guard scaled just before a restart): the history and the last decision on record say 1. The replicas
    running count as a recommendation from now on, so the next cycle's lower reading does not take the
    scale-up back at once; after the window it may."""
    on_record = (Recommendation(time=T0 - timedelta(seconds=120), replicas=1),)
    lost = apply_policy(
        _inp(
            optimized_replicas=1,
            current_replicas=2,
            last_desired=1,
            stabilization_seconds=30.0,
            history=on_record,
        )
    )
    assert lost.replicas == 2 and "stabilization" in lost.limited_by
    later = apply_policy(
        _inp(
            now=T0 + timedelta(seconds=31),
            optimized_replicas=1,
            current_replicas=2,
            last_desired=2,
            stabilization_seconds=30.0,
            history=lost.history,
        )
    )
    assert later.replicas == 1
    # A scale-up on record is what the window already keeps; nothing is added for it.
    kept = apply_policy(
        _inp(
            optimized_replicas=1,
            current_replicas=2,
            last_desired=2,
            stabilization_seconds=30.0,
            history=on_record,
        )
    )
    assert kept.replicas == 1
    # Without a window nothing is remembered.
    assert (
        apply_policy(
            _inp(optimized_replicas=1, current_replicas=2, last_desired=1, history=on_record)
        ).replicas
        == 1
    )


def test_make_before_break_waits_for_the_other_variants_replicas() -> None:
    """A plan that moves the model's load to another variant scales this one down only once the other
    variant's new replicas are ready; scale-ups and unmoved counts are not affected."""
    held = apply_policy(_inp(optimized_replicas=4, current_replicas=6, ready_replicas=6, siblings_starting=1))
    assert held.replicas == 6 and held.limited_by == ("replacing",)
    assert "1 replicas of the model's other variants are still starting" in held.reason
    assert apply_policy(_inp(optimized_replicas=4, current_replicas=6, ready_replicas=6)).replicas == 4
    up = apply_policy(_inp(optimized_replicas=8, current_replicas=6, ready_replicas=6, siblings_starting=3))
    assert up.replicas == 8 and "replacing" not in up.limited_by


def test_siblings_starting_counts_the_other_variants_of_the_model() -> None:
    rows = [
        ("a100", "llama", 6, 6),  # asked 6, all ready
        ("h100", "llama", 2, 0),  # two starting (or just asked for by the plan)
        ("l40", "llama", 3, 1),  # two starting
        ("other", "granite", 5, 2),  # another model: never counted for llama
    ]
    assert siblings_starting(rows) == {"a100": 4, "h100": 2, "l40": 2, "other": 0}
    assert siblings_starting([("solo", "m", 0, 3)]) == {"solo": 0}  # more ready than asked: nothing


def test_replicas_yielded_to_a_higher_priority_skip_the_window_and_the_kv_hold() -> None:
    """Rule 3e: the GPUs the plan gives a higher-priority class are released now, not after the
    stabilisation window; only as many replicas as were yielded, and never below the plan."""
    window = {"stabilization_seconds": 300.0, "history": (Recommendation(T0 - timedelta(seconds=60), 6),)}
    kept = apply_policy(_inp(optimized_replicas=1, current_replicas=6, **window))
    assert kept.replicas == 6 and "stabilization" in kept.limited_by
    given = apply_policy(_inp(optimized_replicas=1, current_replicas=6, yield_replicas=3, **window))
    assert given.replicas == 3 and "stabilization" in given.limited_by  # 3 go now, the rest wait
    assert "3 replicas given up at once to higher-priority variants" in given.reason
    everything = apply_policy(_inp(optimized_replicas=1, current_replicas=6, yield_replicas=9, **window))
    assert everything.replicas == 1 and "stabilization" not in everything.limited_by  # never below the plan
    why = "its pods preempt 12 requests/min (KV cache full)"
    pressed = apply_policy(
        _inp(optimized_replicas=1, current_replicas=4, pressure_hold=why, yield_replicas=2)
    )
    assert pressed.replicas == 2 and pressed.limited_by == ("kv-pressure",)
    # Nothing to give up when the plan does not scale the variant down.
    assert apply_policy(_inp(optimized_replicas=5, current_replicas=4, yield_replicas=2)).replicas == 5


def test_priority_yields_release_what_a_higher_priority_is_planned_beyond_the_free_units() -> None:
    capacity = {"a100": 8}
    # (key, device, priority, units per replica, current, planned): premium grows 6 -> 8 on a full device
    rows = [("premium", "a100", 1, 1, 6, 8), ("freemium", "a100", 10, 1, 2, 0)]
    assert priority_yields(rows, capacity) == {"freemium": 2}
    # with a free unit, one replica is enough; with room for both, none
    assert priority_yields(rows, {"a100": 9}) == {"freemium": 1}
    assert priority_yields(rows, {"a100": 10}) == {}
    # pods already waiting for units (current above capacity) count as needed too
    assert priority_yields([("p", "a100", 1, 1, 5, 6), ("f", "a100", 2, 1, 4, 1)], {"a100": 8}) == {"f": 2}
    # the lowest priority gives up first, a middle one only what that leaves; units per replica count
    three = [
        ("gold", "h100", 1, 2, 1, 3),  # wants 4 more units
        ("silver", "h100", 5, 1, 2, 0),
        ("bronze", "h100", 9, 1, 1, 0),
    ]
    assert priority_yields(three, {"h100": 6}) == {"bronze": 1, "silver": 2}
    # a lower priority growing takes nothing from a higher one; another device, or no capacity (unlimited
    # mode), is not involved
    assert priority_yields([("p", "a100", 1, 1, 4, 2), ("f", "a100", 5, 1, 4, 6)], capacity) == {}
    assert priority_yields([*rows, ("other", "h100", 10, 1, 3, 0)], capacity) == {"freemium": 2}
    assert priority_yields(rows, {}) == {}
