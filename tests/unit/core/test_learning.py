"""One variant's learning step (core/learning.py): the stored state continued or started over (and why),
the status object's bounds and formats, the Events, and a learned profile without an accelerator."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from variant_autoscaler.adapters.profile_metrics import windows_from_values
from variant_autoscaler.api.v1alpha1 import DECIMAL_PATTERN
from variant_autoscaler.core.estimator import PodWindow
from variant_autoscaler.core.learning import (
    REASON_SOURCE_CHANGED,
    REASON_STATE_RESET,
    LearningInputs,
    LearningResult,
    format_parm,
    learn,
)
from variant_autoscaler.core.profile_choice import ProfileMode
from variant_autoscaler.core.queueing import ServiceParms
from vatesting.profiles import parms, profile_window

TRUTH = parms(alpha=10.0, beta=0.5, gamma=30.0, delta=0.02)
START = datetime(2026, 1, 1, tzinfo=UTC)


def _windows(cycle: int, now: datetime) -> list[PodWindow]:
    values: dict[str, dict[tuple[str, str, str], float]] = {}
    for i in range(2):
        running = (3.0, 11.0, 5.0, 9.0, 2.0, 13.0)[(cycle + 3 * i) % 6]
        window = profile_window(TRUTH, running, prompt_tokens=150.0 + 50.0 * ((cycle + i) % 3), max_batch=16)
        for name, value in window.items():
            values.setdefault(name, {})[("ns", f"d-abc12-{i:05d}", "m")] = value
    return windows_from_values(values, now=now.timestamp(), window_seconds=60.0)


def _run(
    cycles: int,
    *,
    stored: dict[str, Any] | None = None,
    hand: ServiceParms | None = None,
    accelerator: str | None = "A100",
    mode: ProfileMode = ProfileMode.AUTO,
    start: int = 0,
) -> list[LearningResult]:
    out = []
    for cycle in range(start, start + cycles):
        now = START + timedelta(minutes=cycle)
        result = learn(
            LearningInputs(
                now=now,
                accelerator=accelerator,
                mode=mode,
                hand=hand,
                windows=_windows(cycle, now),
                collected=True,
                max_batch=16,
                last_scale=None,
                stored=stored,
            )
        )
        stored = result.status
        out.append(result)
    return out


@pytest.mark.parametrize(
    ("value", "text"),
    [(20.58, "20.58"), (0.041, "0.041"), (0.0000412345678, "0.0000412346"), (123456.7, "123457"),
     (None, "0"), (-1.0, "0"), (float("nan"), "0"), (1e300, "1000000000000000")],
)  # fmt: skip
def test_parameters_are_plain_decimals_with_six_significant_digits(value: float | None, text: str) -> None:
    assert format_parm(value) == text
    assert re.fullmatch(DECIMAL_PATTERN, text)


def test_the_state_is_continued_from_the_stored_status_and_stays_small() -> None:
    results = _run(5)
    status = results[-1].status
    assert len(status["state"]) < 1200 and json.loads(status["state"])["version"] == 1
    # Continued: the windows behind the fit grow cycle after cycle (two pods each).
    counts = [float(r.status["decodeWindows"]) for r in results]
    assert counts == sorted(counts) and counts[-1] > 8
    assert results[-1].learned.confident()
    assert all(r.events == () for r in results[:2])  # no Event on the first choice


def test_a_change_of_source_is_one_event_and_none_while_it_holds() -> None:
    results = _run(6)
    changes = [(i, e) for i, r in enumerate(results) for e in r.events if e.reason == REASON_SOURCE_CHANGED]
    assert len(changes) == 1
    _, event = changes[0]
    assert event.type == "Normal" and event.message.startswith("profile saturation -> learned: ")


def test_not_collected_keeps_the_state() -> None:
    first = _run(2)[-1]
    again = learn(
        LearningInputs(
            START + timedelta(minutes=5), "A100", ProfileMode.AUTO, None, (), False, 16, None, first.status
        )
    )
    assert again.status["state"] == first.status["state"]


def test_another_accelerator_starts_over_and_says_so() -> None:
    on_a100 = _run(3)[-1]
    moved = _run(1, stored=on_a100.status, accelerator="H100", start=3)[-1]
    assert "learned on A100, now on H100: started over" in moved.status["note"]
    assert float(moved.status["decodeWindows"]) <= 2.0
    # Not an error (the variant moved): no Warning, but back to saturation until it learns again.
    assert [e.reason for e in moved.events] == [REASON_SOURCE_CHANGED]


@pytest.mark.parametrize("state", ["not json", "[1, 2]", '{"version": 99}', 42])
def test_an_unreadable_state_starts_over_with_a_warning(state: object) -> None:
    stored = {**_run(2)[-1].status, "state": state}
    result = _run(1, stored=stored, start=2)[-1]
    assert "started over" in result.status["note"]
    (warning,) = [e for e in result.events if e.reason == REASON_STATE_RESET]
    assert warning.type == "Warning"
    # The note stays on record in the next cycles.
    later = _run(1, stored=result.status, start=3)[-1]
    assert later.status["note"] == result.status["note"] and later.events == ()


def test_a_confident_profile_without_an_accelerator_leaves_saturation_in_charge() -> None:
    last = _run(6, accelerator=None)[-1]
    assert last.learned.confident()
    assert last.choice.source.value == "saturation" and "accelerator is unknown" in last.choice.reason
    assert last.status["accelerator"] is None


def test_spec_mode_with_a_hand_profile_never_changes_source() -> None:
    results = _run(6, hand=parms(), mode=ProfileMode.SPEC)
    assert {r.status["source"] for r in results} == {"spec"}
    assert all(r.events == () for r in results)
