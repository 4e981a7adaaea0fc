"""Which profile sizes a variant: the hand-written one, the learned one, or none (saturation).

:func:`choose_profile` is a pure function of the VA's choice (``auto``, ``spec`` or ``learned``), the
hand profile (``spec.modelProfile`` for the variant's accelerator, if any), what the estimator has
learned, and the source chosen last cycle. It returns the source and a reason in words; the engine
turns a change of source into an Event.

``auto`` (the default):

* with a hand profile: the hand profile, until the learned one is confident (every parameter learned
  with at least medium confidence) *and* its predictions differ from the hand profile's by more than
  ``threshold`` somewhere in the operating range the variant has visited;
* without one: saturation sizing until the learned profile is confident;
* once the learned profile is in use it stays while every parameter is still learned, so that a
  learned profile close to the hand one does not make the choice flap.

``spec``: the hand profile (saturation if there is none). ``learned``: the learned profile as soon as
every parameter has been learned, whatever its confidence; the hand profile (or saturation) until then.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from variant_autoscaler.core.estimator import LearnedProfile
from variant_autoscaler.core.linefit import Confidence
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.errors import ConfigError

__all__ = [
    "DEFAULT_THRESHOLD",
    "ProfileChoice",
    "ProfileMode",
    "ProfileSource",
    "choose_profile",
    "disagreement",
]

DEFAULT_THRESHOLD = 0.2
"""Relative difference of predicted times beyond which a confident learned profile replaces the hand one."""


class ProfileMode(enum.StrEnum):
    """The VA's choice of profile."""

    AUTO = "auto"
    SPEC = "spec"
    LEARNED = "learned"

    @classmethod
    def parse(cls, value: str | None) -> ProfileMode:
        if value is None or value == "":
            return cls.AUTO
        for mode in cls:
            if mode.value == value:
                return mode
        raise ConfigError(f"unknown profile choice {value!r}; expected auto, spec or learned")


class ProfileSource(enum.StrEnum):
    """What sizes the variant."""

    SPEC = "spec"
    LEARNED = "learned"
    SATURATION = "saturation"


@dataclass(frozen=True, slots=True)
class ProfileChoice:
    """The chosen source, its parameters (None for saturation), why, and the disagreement measured."""

    source: ProfileSource
    parms: ServiceParms | None
    reason: str
    disagreement: float | None = None


def disagreement(hand: ServiceParms, learned: LearnedProfile) -> tuple[float, str]:
    """Largest relative difference between the two profiles' predicted times, and where it is.

    Compared where the variant has been: decode step time at the low and high ends of the batch sizes
    visited, prefill time at the ends of prompt tokens × batch visited (relative to the learned value).
    """
    parms = learned.parms
    if parms is None:
        return 0.0, "nothing learned to compare"
    lo_b, hi_b = learned.batch_range
    lo_x, hi_x = learned.prefill_range
    worst, where = 0.0, ""
    for b in sorted({max(lo_b, 1.0), max(hi_b, 1.0)}):
        mine = parms.alpha + parms.beta * b
        theirs = hand.alpha + hand.beta * b
        diff = abs(theirs - mine) / mine if mine > 0 else 0.0
        if diff > worst:
            worst, where = diff, f"decode step at batch {b:.3g}: {theirs:.3g} ms in spec, {mine:.3g} learned"
    for x in sorted({max(lo_x, 1.0), max(hi_x, 1.0)}) if hi_x > 0 else ():
        mine = parms.gamma + parms.delta * x
        theirs = hand.gamma + hand.delta * x
        diff = abs(theirs - mine) / mine if mine > 0 else 0.0
        if diff > worst:
            worst, where = (
                diff,
                f"prefill at {x:.3g} prompt tokens × batch: {theirs:.3g} ms in spec, {mine:.3g} learned",
            )
    return worst, where


def _not_ready(learned: LearnedProfile | None, level: Confidence) -> str:
    if learned is None:
        return "nothing learned yet"
    weak = [p for p in learned.params if p.source != "learned" or not p.confidence.at_least(level)]
    parts = []
    for p in weak:
        if p.source != "learned":
            parts.append(f"{p.name} not learned" + (f" ({p.note})" if p.note else ""))
        else:
            parts.append(f"{p.name} {p.confidence.value}")
    return "; ".join(parts) if parts else "not ready"


def choose_profile(
    mode: ProfileMode,
    hand: ServiceParms | None,
    learned: LearnedProfile | None,
    *,
    previous: ProfileSource | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    level: Confidence = Confidence.MEDIUM,
    mode_reason: str | None = None,
) -> ProfileChoice:
    """The profile that sizes the variant this cycle (see the module doc for the rules).
    ``mode_reason``: why the mode is what it is, when the VA did not choose it (its reasons say so)."""
    parms = learned.parms if learned is not None else None
    usable = learned is not None and parms is not None and learned.learned_all
    confident = usable and learned is not None and learned.confident(level)
    summary = learned.summary() if learned is not None else ""

    if mode is ProfileMode.SPEC:
        said = mode_reason or "profile choice is spec"
        if hand is not None:
            return ProfileChoice(ProfileSource.SPEC, hand, said)
        return ProfileChoice(ProfileSource.SATURATION, None, f"{said}, but there is no modelProfile for it")
    if mode is ProfileMode.LEARNED:
        if usable:
            return ProfileChoice(ProfileSource.LEARNED, parms, f"profile choice is learned: {summary}")
        why = _not_ready(learned, Confidence.LOW)
        if hand is not None:
            return ProfileChoice(ProfileSource.SPEC, hand, f"learned profile not ready ({why}); using spec")
        return ProfileChoice(ProfileSource.SATURATION, None, f"learned profile not ready ({why})")

    # auto
    if previous is ProfileSource.LEARNED and usable:
        return ProfileChoice(ProfileSource.LEARNED, parms, f"learned profile in use: {summary}")
    if hand is None:
        if confident:
            return ProfileChoice(ProfileSource.LEARNED, parms, f"learned profile confident: {summary}")
        return ProfileChoice(
            ProfileSource.SATURATION,
            None,
            f"no modelProfile; sized by saturation until the learned profile is confident "
            f"({_not_ready(learned, level)})",
        )
    if not confident:
        return ProfileChoice(
            ProfileSource.SPEC, hand, f"learned profile not confident yet ({_not_ready(learned, level)})"
        )
    assert learned is not None and parms is not None
    worst, where = disagreement(hand, learned)
    if worst > threshold:
        return ProfileChoice(
            ProfileSource.LEARNED,
            parms,
            f"learned profile is confident and differs from spec by {100 * worst:.0f}% "
            f"(over {100 * threshold:.0f}%; {where})",
            worst,
        )
    return ProfileChoice(
        ProfileSource.SPEC,
        hand,
        f"learned profile agrees with spec within {100 * threshold:.0f}% (largest difference "
        f"{100 * worst:.0f}%)",
        worst,
    )
