"""The burst guard (core/guard.py): scale-up only, on queue or KV pressure, starting replicas as supply."""

from __future__ import annotations

from dataclasses import replace

import pytest

from variant_autoscaler.core.guard import (
    RISE_CAP,
    RISE_MIN,
    GuardInput,
    GuardParams,
    GuardVariant,
    backlog_at_ready,
    guard,
    rising_arrivals,
    take_room,
)
from variant_autoscaler.errors import ModelError


def _input(
    *variants: GuardVariant,
    waiting: float = 0.0,
    growth: float = 0.0,
    completions: float = 6.0,
    kv: float = 0.2,
) -> GuardInput:
    return GuardInput(
        now=1000.0,
        completion_rate=completions,
        waiting=waiting,
        waiting_growth=growth,
        window_s=60.0,
        kv_usage=kv,
        drain_s=180.0,
        variants=variants or (GuardVariant("ns/a", desired=4, ready=4, rate_per_replica=1.5, planned=4),),
    )


def test_no_pressure_no_action() -> None:
    decision = guard(_input())
    assert decision.replicas == {} and "no queue" in decision.reason


def test_a_queue_that_outruns_the_replicas_scales_up_by_the_missing_capacity() -> None:
    # 60 waiting, growing by 60 a minute: when replicas asked for now are ready (180 s), 60 + 180 wait;
    # demand 6 + 1 + 240/180 = 8.33 req/s; 4 × 1.5 = 6 sustained.
    decision = guard(_input(waiting=60.0, growth=60.0))
    assert decision.replicas == {"ns/a": 4 + 2}  # ceil((8.33 - 6) / 1.5) = 2
    assert "burst guard" in decision.reason and "60 requests waiting" in decision.reason
    assert "a backlog of 240 to drain" in decision.reason


def test_the_backlog_counts_what_starting_replicas_serve_before_new_ones_are_ready() -> None:
    # 100 waiting, growing by 2/s; 4 ready at 1.5 req/s each, 2 more starting.
    def look(*ready_at: float) -> GuardInput:
        v = GuardVariant(
            "ns/a", desired=6, ready=4, rate_per_replica=1.5, planned=6, starting_ready_at=ready_at
        )
        return _input(v, waiting=100.0, growth=120.0, completions=6.0)

    # Ready in 10 and 20 s: they serve 1.5 × (170 + 160) = 495 requests before replicas asked for now
    # could: 100 + 2 × 180 - 495 < 0, nothing to drain; demand 6 + 2 = 8 < 6 × 1.5 = 9.
    soon = look(1010.0, 1020.0)
    assert backlog_at_ready(soon) == 0.0 and guard(soon).replicas == {}
    # Ready only in 170 s: they serve 1.5 × 10 × 2 = 30 of the 460; demand 6 + 2 + 430/180 = 10.39 > 9.
    late = look(1170.0, 1170.0)
    assert backlog_at_ready(late) == pytest.approx(430.0)
    assert guard(late).replicas == {"ns/a": 7}
    # Overdue (expected ready already): they count from now. A shrinking queue adds no growth.
    assert backlog_at_ready(look(900.0, 990.0)) == 0.0
    shrinking = _input(waiting=50.0, growth=-30.0)
    assert backlog_at_ready(shrinking) == 50.0


def test_a_full_kv_cache_triggers_too_and_a_covered_demand_does_not() -> None:
    assert guard(_input(kv=0.95, completions=9.0)).replicas == {"ns/a": 6}
    covered = guard(_input(waiting=8.0, completions=3.0))  # 3 + 8/180 < 6
    assert covered.replicas == {} and "cover it" not in covered.reason and "sustain" in covered.reason


def test_replicas_still_starting_count_as_supply() -> None:
    starting = GuardVariant(
        "ns/a", desired=8, ready=4, rate_per_replica=1.5, planned=8, starting_ready_at=(1030.0, 1150.0)
    )
    decision = guard(_input(starting, waiting=40.0, growth=40.0, completions=6.0))
    assert decision.replicas == {}  # demand 7 < 8 × 1.5
    assert "4 ready + 2 starting (ready in 30–150 s) + 2 pending" in decision.reason


def test_pending_replicas_without_gpus_are_not_supply() -> None:
    # A node was lost: 6 A100 replicas asked for, 2 ready and 2 restarting on the 4 A100s left; the
    # plan gave the A100 variant those 4 and left no room, so its 2 other pods wait for GPUs that are
    # not there. Only the 4 count, and the missing capacity goes to the H100 variant, which has room.
    a100 = GuardVariant(
        "ns/a", desired=6, ready=2, rate_per_replica=1.5, planned=4, starting_ready_at=(1090.0, 1120.0),
        room=0,
    )  # fmt: skip
    h100 = GuardVariant("ns/h", desired=1, ready=0, rate_per_replica=3.0, planned=1, room=3)
    decision = guard(_input(a100, h100, waiting=120.0, growth=60.0, completions=3.0))
    # The 2 restarting serve 1.5 × (90 + 60) = 225 before new replicas could: a backlog of
    # 120 + 1 × 180 - 225 = 75; demand 3 + 1 + 75/180 = 4.42 req/s, within 4 × 1.5 + 1 × 3 = 9.
    assert decision.replicas == {}
    short = guard(_input(a100, h100, waiting=600.0, growth=600.0, completions=3.0))
    # A backlog of 600 + 10 × 180 - 225 = 2175: demand 3 + 10 + 12.08 = 25.08 req/s, 9 sustained; the
    # H100 variant grows by at most 4 per step and by the room it has, 3.
    assert short.replicas == {"ns/h": 4}
    assert "2 ready + 2 starting (ready in 90–120 s) + 1 pending (+ 2 pending without GPUs" in short.reason
    # Without a limit (unlimited mode) every replica asked for counts: 6 × 1.5 + 3 = 12 sustained.
    unlimited = (
        GuardVariant("ns/a", desired=6, ready=2, rate_per_replica=1.5, planned=4),
        GuardVariant("ns/h", desired=1, ready=0, rate_per_replica=3.0, planned=1),
    )
    wide = guard(_input(*unlimited, waiting=300.0, growth=0.0, completions=3.0))
    # demand 3 + 300/180 = 4.67 < 12: nothing (had the 2 pending A100s not counted, still nothing: 9)
    assert wide.replicas == {}
    assert "(+ " not in wide.reason and "+ 5 pending" in wide.reason


def test_the_guards_own_replicas_keep_counting_after_it_takes_the_room() -> None:
    # The guard took 2 of the H100 variant's 3 free replicas: planned + room (what fits) stays 4, so
    # at the next look its own new replicas, still pending, count as supply.
    planned, room = take_room(1, 3, 2)
    assert (planned, room) == (3, 1)
    assert take_room(1, 1, 3) == (2, 0)  # no more than the room
    h100 = GuardVariant("ns/h", desired=3, ready=0, rate_per_replica=3.0, planned=planned, room=room)
    a100 = GuardVariant("ns/a", desired=2, ready=2, rate_per_replica=1.5, planned=2, room=0)
    decision = guard(_input(a100, h100, waiting=1350.0, completions=3.0))
    # demand 3 + 1350/180 = 10.5 req/s: within 2 × 1.5 + 3 × 3 = 12; had only planned + room's old
    # 2 H100s counted (9), the guard would add one more.
    assert decision.replicas == {}, decision.reason


def test_steps_are_capped_and_bounded_by_max_replicas_and_room() -> None:
    big = _input(waiting=4000.0, growth=4000.0, completions=6.0)
    assert guard(big).replicas == {"ns/a": 8}  # at most doubling (or +4) per step
    capped = GuardVariant("ns/a", desired=4, ready=4, rate_per_replica=1.5, planned=4, max_replicas=5)
    assert guard(_input(capped, waiting=4000.0, growth=4000.0)).replicas == {"ns/a": 5}
    roomy = GuardVariant("ns/a", desired=4, ready=4, rate_per_replica=1.5, planned=4, room=1)
    assert guard(_input(roomy, waiting=4000.0, growth=4000.0)).replicas == {"ns/a": 5}
    full = GuardVariant("ns/a", desired=4, ready=4, rate_per_replica=1.5, planned=4, room=0)
    assert guard(_input(full, waiting=4000.0, growth=4000.0)).replicas == {}


def test_the_variant_the_plan_favoured_grows_and_unknown_rates_hold() -> None:
    a = GuardVariant("ns/a", desired=1, ready=1, rate_per_replica=1.0, planned=1)
    h = GuardVariant("ns/h", desired=3, ready=3, rate_per_replica=3.0, planned=3)
    decision = guard(_input(a, h, waiting=300.0, growth=300.0, completions=10.0))
    assert list(decision.replicas) == ["ns/h"]
    unknown = GuardVariant("ns/a", desired=2, ready=2, rate_per_replica=None)
    assert guard(_input(unknown, waiting=300.0)).replicas == {}
    idle = GuardVariant("ns/a", desired=2, ready=0, rate_per_replica=1.0)
    assert "no ready replica" in guard(_input(idle, waiting=300.0)).reason


def test_bad_parameters() -> None:
    with pytest.raises(ModelError):
        GuardParams(waiting_per_replica=0)
    with pytest.raises(ModelError):
        GuardParams(kv_threshold=1.5)
    with pytest.raises(ModelError):
        guard(_input(GuardVariant("ns/a", desired=-1, ready=0, rate_per_replica=1.0)))


# ---- a rise of the arrivals -------------------------------------------------------------------------


def _rising(short_completions: float, short_growth: float, **kwargs: float) -> GuardInput:
    """Two replicas at 3.5 req/s each, saturated; the long window (60 s) and the short one (30 s)."""
    v = GuardVariant("ns/a", desired=2, ready=2, rate_per_replica=3.5, planned=2)
    inp = _input(v, **kwargs)
    return replace(
        inp,
        completion_rate_short=short_completions,
        waiting_growth_short=short_growth,
        short_window_s=30.0,
        variants=(replace(v, max_replicas=40),),
    )


def test_arrivals_that_come_faster_over_the_short_window_are_projected_over_the_start_up() -> None:
    # A crowd: over 60 s, 7 completed/s and the queue grew by 60 (8 arriving/s); over the last 30 s, 7
    # completed/s and the queue grew by 120 (11/s). The slope: 3 req/s over 15 s; over the 180 s start-up
    # the rise would reach 47, capped at 1.5 x 11 = 16.5.
    inp = _rising(7.0, 120.0, completions=7.0, growth=60.0, waiting=90.0)
    assert rising_arrivals(inp) == pytest.approx((11.0, RISE_CAP * 11.0))
    decision = guard(inp)
    # Demand: 16.5 when ready, plus a backlog of 90 + ((11 + 16.5)/2 - 7) x 180 = 1305 over 180 s: 23.75.
    assert "arrivals rising, 11.00 req/s over the last 30 s: 16.50 projected" in decision.reason
    assert "demand 23.75 req/s" in decision.reason
    without = guard(replace(inp, completion_rate_short=None, waiting_growth_short=None))
    assert decision.replicas["ns/a"] > without.replicas["ns/a"] > 2


def test_a_lost_replica_is_not_a_rise() -> None:
    # Capacity lost: completions fall as much as the queue grows; what arrives (their sum) is flat.
    inp = _rising(4.0, 60.0, completions=5.5, growth=60.0, waiting=60.0)
    assert rising_arrivals(inp) is None
    # Nor a rise below RISE_MIN, nor one read without the short window, nor a shrinking queue.
    slight = (1.0 + RISE_MIN / 2.0) * 8.0
    assert rising_arrivals(_rising(7.0, (slight - 7.0) * 30.0, completions=7.0, growth=60.0)) is None
    assert (
        rising_arrivals(replace(_rising(7.0, 90.0, completions=7.0, growth=60.0), short_window_s=0.0)) is None
    )
    assert rising_arrivals(_rising(12.0, -30.0, completions=7.0, growth=60.0)) is None
