"""One variant's profile learning in one cycle, pure: from the stored state and this cycle's pod windows to
the new state, the profile that sizes the variant, the ``status.learnedProfile`` object and the Events.

The engine collects the pod windows (:mod:`variant_autoscaler.adapters.profile_metrics`), finds each
variant's stored state (its VariantAutoscaling's ``status.learnedProfile``, or the operator's ConfigMap
for an annotated HPA or ScaledObject) and calls :func:`learn`. It runs the estimator
(:mod:`variant_autoscaler.core.estimator`) with the hand profile as prior, chooses the profile
(:mod:`variant_autoscaler.core.profile_choice`) and builds the status view:

* the estimator's state as compact JSON (``state``; bounded, :data:`STATE_MAX`), so that a restarted
  operator continues: a state that cannot be read, or that was learned on another accelerator, starts
  over and says so (``note``, and a Warning Event for the unreadable one);
* the published α β γ δ as decimal strings (copyable into ``spec.modelProfile``), each with its
  source, confidence, relative error and note; the weakest confidence as the profile's;
* the source in use (``spec``, ``learned`` or ``saturation``) and why; a change of source is an Event.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from variant_autoscaler.core.decision import EventSpec
from variant_autoscaler.core.estimator import (
    EstimatorState,
    LearnedProfile,
    ParamEstimate,
    PodWindow,
    learned_profile,
    update,
)
from variant_autoscaler.core.profile_choice import (
    ProfileChoice,
    ProfileMode,
    ProfileSource,
    choose_profile,
)
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.core.slow_replicas import SlowReplicas, from_status, slow_replicas, to_status
from variant_autoscaler.core.status import format_time
from variant_autoscaler.errors import ModelError

#: WVA's accelerator label (api/v1alpha1.py; core does not import the API models).
ACCELERATOR_LABEL = "inference.optimization/acceleratorName"

__all__ = [
    "ACCELERATOR_LABEL",
    "NOTE_MAX",
    "REASON_MAX",
    "REASON_SLOW_REPLICA",
    "REASON_SLOW_REPLICA_GONE",
    "REASON_SOURCE_CHANGED",
    "REASON_STATE_RESET",
    "STATE_MAX",
    "LearningInputs",
    "LearningResult",
    "format_parm",
    "learn",
    "stored_source",
]

#: Bounds of the status object (the CRD's maxLength): the state JSON is about 1.2 KB at most.
STATE_MAX = 4096
REASON_MAX = 1024
NOTE_MAX = 256
_FIGURE_CAP = 1e15

REASON_SOURCE_CHANGED = "ProfileSourceChanged"
REASON_STATE_RESET = "LearnedProfileReset"
REASON_SLOW_REPLICA = "SlowReplica"
REASON_SLOW_REPLICA_GONE = "SlowReplicaRecovered"
#: A pod listed slow that has not been judged since (idle, or gone) is dropped from the list after this.
SLOW_KEPT_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class LearningInputs:
    """One variant's learning inputs for one cycle.

    * ``now``: the cycle's time; ``accelerator``: what the variant runs on (its state is per model and
      accelerator; None when not known);
    * ``mode``: the VA's ``profileSource``; ``hand``: its ``modelProfile`` entry for the accelerator;
    * ``windows``: its pods' windows this cycle; ``collected``: False when the windows could not be
      collected (nothing is learned this cycle: the state is kept as it is);
    * ``max_batch``: the server's maximum batch (``--max-num-seqs``, else the profile's);
    * ``last_scale``: the last change of its replicas (unix time), if known;
    * ``stored``: the ``learnedProfile`` object as last written (None: never);
    * ``mode_reason``: why ``mode`` is what it is when the VA did not choose it (WVA's ``tuningEnabled:
      false``, say), for the reasons shown.
    """

    now: datetime
    accelerator: str | None
    mode: ProfileMode
    hand: ServiceParms | None
    windows: Sequence[PodWindow]
    collected: bool
    max_batch: int | None
    last_scale: float | None
    stored: Mapping[str, Any] | None
    mode_reason: str | None = None


@dataclass(frozen=True, slots=True)
class LearningResult:
    state: EstimatorState
    learned: LearnedProfile
    choice: ProfileChoice
    status: dict[str, Any]
    events: tuple[EventSpec, ...]
    previous: ProfileSource | None


def stored_source(stored: Mapping[str, Any] | None) -> ProfileSource | None:
    """The source the stored status says was in use, if it names one."""
    value = (stored or {}).get("source")
    for source in ProfileSource:
        if source.value == value:
            return source
    return None


def _restore(inp: LearningInputs) -> tuple[EstimatorState, str | None, bool]:
    """The stored state, or a fresh one and why (True when the stored state was unreadable)."""
    stored = inp.stored
    if not stored or stored.get("state") is None:
        return EstimatorState(), None, False
    learned_on = stored.get("accelerator")
    if (learned_on or None) != (inp.accelerator or None):
        return (
            EstimatorState(),
            f"learned on {learned_on or 'an unknown accelerator'}, now on "
            f"{inp.accelerator or 'an unknown accelerator'}: started over",
            False,
        )
    raw = stored.get("state")
    try:
        if not isinstance(raw, str):
            raise ModelError(f"learned-profile state is not a JSON string: {type(raw).__name__}")
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise ModelError(f"learned-profile state is not JSON: {exc}") from exc
        if not isinstance(data, Mapping):
            raise ModelError("learned-profile state is not a JSON object")
        return EstimatorState.from_dict(data), None, False
    except ModelError as exc:
        return EstimatorState(), f"{exc}; started over", True


def learn(inp: LearningInputs) -> LearningResult:
    """Fold this cycle's windows into the variant's state and choose the profile that sizes it."""
    state, note, unreadable = _restore(inp)
    now = inp.now.timestamp()
    if inp.collected:
        state = update(
            state,
            inp.windows,
            now=now,
            prior=inp.hand,
            max_batch=inp.max_batch,
            last_scale=inp.last_scale,
        ).state
    learned = learned_profile(state, inp.hand)
    previous = stored_source(inp.stored)
    choice = choose_profile(inp.mode, inp.hand, learned, previous=previous, mode_reason=inp.mode_reason)
    if choice.source is ProfileSource.LEARNED and inp.accelerator is None:
        # The model sizes a variant on an accelerator, by name (its cost, its GPUs).
        choice = ProfileChoice(
            ProfileSource.SATURATION,
            None,
            "the learned profile is ready, but the accelerator is unknown: set the label "
            f"{ACCELERATOR_LABEL} to size it by the model",
        )
    if note is not None:
        note = f"{format_time(inp.now)}: {note}"
    elif inp.stored:
        note = _str(inp.stored.get("note"), NOTE_MAX) or None  # the last start-over stays on record
    status = learned_status(inp.accelerator, state, learned, choice, inp.now, note=note)
    events: list[EventSpec] = []
    _slow_pods(inp, status, events, now)
    if unreadable and note is not None:
        events.append(EventSpec(REASON_STATE_RESET, f"learned profile {note}", "Warning", f"reset|{now}"))
    if previous is not None and previous is not choice.source:
        events.append(
            EventSpec(
                REASON_SOURCE_CHANGED,
                f"profile {previous.value} -> {choice.source.value}: {choice.reason}"[:REASON_MAX],
                "Normal",
                f"source|{previous.value}|{choice.source.value}|{now}",
            )
        )
    return LearningResult(state, learned, choice, status, tuple(events), previous)


def _slow_pods(inp: LearningInputs, status: dict[str, Any], events: list[EventSpec], now: float) -> None:
    """The pods slower than their peers (core/slow_replicas.py): listed in the status, an Event when a
    pod is first found slow and when one judged again is back in line. A listed pod that cannot be
    judged this cycle (no window: idle, or windows not collected) stays listed for
    :data:`SLOW_KEPT_SECONDS` after it was last judged."""
    stored = from_status(inp.stored)
    was = {str(e["pod"]) for e in stored}
    verdict = slow_replicas(inp.windows) if inp.collected else SlowReplicas()
    keep_after = format_time(datetime.fromtimestamp(now - SLOW_KEPT_SECONDS, UTC))
    status["slowReplicas"] = to_status(verdict, stored, format_time(inp.now), keep_after)
    for s in verdict.slow:
        if s.pod not in was:
            message = s.describe()[:REASON_MAX]
            events.append(EventSpec(REASON_SLOW_REPLICA, message, "Warning", f"slow|{s.pod}|{now}"))
    for pod in sorted(p for p in was if verdict.recovered(p)):
        message = f"pod {pod} serves its requests as fast as its peers again"
        events.append(EventSpec(REASON_SLOW_REPLICA_GONE, message, "Normal", f"slow-gone|{pod}|{now}"))


# --- the status object ----------------------------------------------------------------------------------


def format_parm(value: float | None) -> str:
    """A parameter as a plain decimal string with six significant digits (no exponent: the spec's
    ``perfParms`` take it as is)."""
    if value is None or not math.isfinite(value) or value <= 0:
        return "0"
    value = min(value, _FIGURE_CAP)
    digits = max(0, min(12, 5 - math.floor(math.log10(value))))
    text = f"{value:.{digits}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text or "0"


def _ratio(value: float | None) -> str | None:
    if value is None or not math.isfinite(value) or value < 0:
        return None
    return f"{min(value, 999.0):.3f}"


def _str(value: object, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _param(p: ParamEstimate) -> dict[str, Any]:
    return {
        "value": format_parm(p.value) if p.value is not None else None,
        "source": p.source,
        "confidence": p.confidence.value,
        "relativeError": _ratio(p.rse),
        "impact": _ratio(p.impact),
        "note": p.note[:NOTE_MAX] or None,
    }


def _time(value: float | None) -> str | None:
    if value is None or not math.isfinite(value):
        return None
    try:
        return format_time(datetime.fromtimestamp(value, UTC))
    except (OverflowError, OSError, ValueError):
        return None


def _windows(value: float) -> str:
    return f"{min(max(value, 0.0), _FIGURE_CAP):.1f}" if math.isfinite(value) else "0.0"


def learned_status(
    accelerator: str | None,
    state: EstimatorState,
    learned: LearnedProfile,
    choice: ProfileChoice,
    now: datetime,
    *,
    note: str | None = None,
) -> dict[str, Any]:
    """The ``status.learnedProfile`` object (``None`` values: keys to clear in a merge patch)."""
    encoded: str | None
    try:
        encoded = json.dumps(state.to_dict(), separators=(",", ":"), allow_nan=False)
    except ValueError:  # a non-finite figure: never seen, but the status must stay valid JSON
        encoded, note = None, "the estimator's state held a non-finite number and was not stored"
    if encoded is not None and len(encoded) > STATE_MAX:  # never seen: the state is ~1.2 KB at most
        encoded, note = None, "the estimator's state exceeded its bound and was not stored"
    return {
        "accelerator": accelerator[:63] if accelerator else None,
        "source": choice.source.value,
        "reason": choice.reason[:REASON_MAX],
        "confidence": learned.confidence.value,
        "alpha": _param(learned.alpha),
        "beta": _param(learned.beta),
        "gamma": _param(learned.gamma),
        "delta": _param(learned.delta),
        "decodeWindows": _windows(learned.decode_windows),
        "prefillWindows": _windows(learned.prefill_windows),
        "lastLearnedTime": _time(learned.updated_at),
        "heldUntil": _time(learned.held_until),
        "driftTime": _time(learned.drift_at),
        "lastRunTime": format_time(now),
        "note": note[:NOTE_MAX] if note else None,
        "state": encoded,
    }
