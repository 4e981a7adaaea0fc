"""Which profile sizes a variant: auto / spec / learned, with and without a hand profile."""

from __future__ import annotations

import pytest

from variant_autoscaler.core.estimator import LearnedProfile, ParamEstimate
from variant_autoscaler.core.linefit import Confidence
from variant_autoscaler.core.profile_choice import (
    ProfileMode,
    ProfileSource,
    choose_profile,
    disagreement,
)
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.errors import ConfigError

TRUE = ServiceParms(alpha=20.0, beta=0.4, gamma=20.0, delta=0.04)
DOUBLE = ServiceParms(alpha=40.0, beta=0.8, gamma=40.0, delta=0.08)
CLOSE = ServiceParms(alpha=21.0, beta=0.41, gamma=21.0, delta=0.041)


def learned(
    parms: ServiceParms = TRUE,
    level: Confidence = Confidence.HIGH,
    *,
    source: str = "learned",
    weak: str | None = None,
) -> LearnedProfile:
    def one(name: str) -> ParamEstimate:
        value = getattr(parms, name)
        if name == weak:
            return ParamEstimate(name, value, "learned", Confidence.LOW, se=value, impact=0.2)
        return ParamEstimate(name, value, source, level if source == "learned" else Confidence.NONE)

    return LearnedProfile(
        alpha=one("alpha"),
        beta=one("beta"),
        gamma=one("gamma"),
        delta=one("delta"),
        decode_windows=20.0,
        prefill_windows=20.0,
        batch_range=(4.0, 30.0),
        prefill_range=(2000.0, 15000.0),
        updated_at=600.0,
        held_until=None,
        drift_at=None,
    )


def test_mode_parsing() -> None:
    assert ProfileMode.parse(None) is ProfileMode.AUTO
    assert ProfileMode.parse("") is ProfileMode.AUTO
    assert ProfileMode.parse("learned") is ProfileMode.LEARNED
    with pytest.raises(ConfigError, match="auto, spec or learned"):
        ProfileMode.parse("Learned")


def test_disagreement_is_measured_where_the_variant_ran() -> None:
    worst, where = disagreement(DOUBLE, learned())
    assert worst == pytest.approx(1.0)
    assert "spec" in where and "learned" in where
    close, _ = disagreement(CLOSE, learned())
    assert close < 0.06


# ---- auto ---------------------------------------------------------------------------------------------


def test_auto_keeps_the_hand_profile_while_the_learned_one_is_not_confident() -> None:
    choice = choose_profile(ProfileMode.AUTO, DOUBLE, learned(weak="beta"))
    assert choice.source is ProfileSource.SPEC and choice.parms == DOUBLE
    assert "not confident" in choice.reason and "beta low" in choice.reason


def test_auto_switches_when_confident_and_far_from_the_hand_profile() -> None:
    choice = choose_profile(ProfileMode.AUTO, DOUBLE, learned())
    assert choice.source is ProfileSource.LEARNED and choice.parms == TRUE
    assert choice.disagreement == pytest.approx(1.0)
    assert "differs from spec by 100%" in choice.reason


def test_auto_keeps_a_hand_profile_the_learned_one_agrees_with() -> None:
    choice = choose_profile(ProfileMode.AUTO, CLOSE, learned())
    assert choice.source is ProfileSource.SPEC and choice.parms == CLOSE
    assert "agrees with spec" in choice.reason


def test_auto_stays_on_the_learned_profile_once_chosen() -> None:
    # even if it now agrees with the hand profile, or is only of low confidence: no flapping
    assert choose_profile(ProfileMode.AUTO, CLOSE, learned(), previous=ProfileSource.LEARNED).source is (
        ProfileSource.LEARNED
    )
    weak = learned(weak="delta")
    assert choose_profile(ProfileMode.AUTO, DOUBLE, weak, previous=ProfileSource.LEARNED).source is (
        ProfileSource.LEARNED
    )
    # but not when a parameter is no longer learned at all
    lost = learned(source="prior")
    assert choose_profile(ProfileMode.AUTO, DOUBLE, lost, previous=ProfileSource.LEARNED).source is (
        ProfileSource.SPEC
    )


def test_auto_without_a_hand_profile_uses_saturation_until_confident() -> None:
    choice = choose_profile(ProfileMode.AUTO, None, None)
    assert choice.source is ProfileSource.SATURATION and choice.parms is None
    assert "nothing learned yet" in choice.reason
    choice = choose_profile(ProfileMode.AUTO, None, learned(weak="gamma"))
    assert choice.source is ProfileSource.SATURATION and "gamma low" in choice.reason
    choice = choose_profile(ProfileMode.AUTO, None, learned(level=Confidence.MEDIUM))
    assert choice.source is ProfileSource.LEARNED


def test_the_confidence_level_asked_for_can_be_raised() -> None:
    medium = learned(level=Confidence.MEDIUM)
    assert choose_profile(ProfileMode.AUTO, None, medium, level=Confidence.HIGH).source is (
        ProfileSource.SATURATION
    )


# ---- explicit choices ----------------------------------------------------------------------------------


def test_spec_means_the_hand_profile_or_saturation() -> None:
    assert choose_profile(ProfileMode.SPEC, DOUBLE, learned()).source is ProfileSource.SPEC
    choice = choose_profile(ProfileMode.SPEC, None, learned())
    assert choice.source is ProfileSource.SATURATION and "no modelProfile" in choice.reason


def test_learned_means_the_learned_profile_as_soon_as_every_parameter_is_learned() -> None:
    choice = choose_profile(ProfileMode.LEARNED, DOUBLE, learned(weak="beta"))
    assert choice.source is ProfileSource.LEARNED  # whatever its confidence
    choice = choose_profile(ProfileMode.LEARNED, DOUBLE, learned(source="prior"))
    assert choice.source is ProfileSource.SPEC and "not ready" in choice.reason
    choice = choose_profile(ProfileMode.LEARNED, None, None)
    assert choice.source is ProfileSource.SATURATION and "not ready" in choice.reason
