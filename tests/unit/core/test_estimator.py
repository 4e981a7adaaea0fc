"""The online profile estimator: identifiability, guards, drift, outliers, restart round-trip.

Windows are synthesised from the model the estimator assumes (decode ``α + β·b_token``, prefill
``γ + δ·L·b_join`` with the batches of :func:`decode_batch` / :func:`admission_batch`), with
multiplicative noise; the benchmark (bench/profile_learning.py) and the integration tests check the
same estimator against the emulator's engine and a real Prometheus.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import replace

import pytest

from variant_autoscaler.core.estimator import (
    EstimatorConfig,
    EstimatorState,
    PodWindow,
    admission_batch,
    decode_batch,
    learned_profile,
    update,
)
from variant_autoscaler.core.linefit import Confidence
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.errors import ModelError

TRUE = ServiceParms(alpha=20.58, beta=0.41, gamma=20.58, delta=0.041)
N = 64
CYCLE = 60.0


def window(
    parms: ServiceParms,
    m: float,
    prompt: float,
    *,
    end: float,
    pod: str = "p0",
    rng: random.Random | None = None,
    noise: float = 0.01,
) -> PodWindow:
    xd = decode_batch(m, N, parms.alpha, parms.beta)
    xp = prompt * admission_batch(m, N, parms.alpha, parms.beta)

    def jitter() -> float:
        return rng.lognormvariate(0.0, noise) if rng is not None else 1.0

    return PodWindow(
        namespace="ns",
        pod=pod,
        model="m",
        end=end,
        seconds=CYCLE,
        itl_ms=(parms.alpha + parms.beta * xd) * jitter(),
        decode_tokens=5000.0,
        prefill_ms=(parms.gamma + parms.delta * xp) * jitter(),
        requests=100.0,
        prompt_tokens=prompt,
        running=m,
        gauge_mean=m,
        gauge_var=m,
    )


def run_cycles(
    state: EstimatorState,
    cycles: int,
    parms: ServiceParms,
    *,
    start: float = 0.0,
    batches: Sequence[float] = (4.0, 12.0, 30.0),
    prompts: Sequence[float] = (128.0, 512.0),
    prior: ServiceParms | None = None,
    seed: int = 1,
) -> EstimatorState:
    """``cycles`` cycles of three pods at varied batches and prompt lengths."""
    rng = random.Random(seed)
    for i in range(1, cycles + 1):
        now = start + i * CYCLE
        windows = [
            window(parms, rng.choice(batches), rng.choice(prompts), end=now, pod=f"p{k}", rng=rng)
            for k in range(3)
        ]
        state = update(state, windows, now=now, prior=prior, max_batch=N).state
    return state


def rel(value: float | None, true: float) -> float:
    assert value is not None
    return abs(value - true) / true


# ---- regressors -------------------------------------------------------------------------------------


def test_batch_regressors_cover_light_load_and_saturation() -> None:
    # lightly loaded: a joining request counts itself on top of the average
    assert admission_batch(0.0, 64) == 1.0
    assert admission_batch(10.0, None) == pytest.approx(11.0)
    # saturated: the batch is pinned at its maximum, for tokens and for joining requests alike
    assert decode_batch(64.0, 64, 20.0, 0.4) == pytest.approx(64.0)
    assert admission_batch(80.0, 64, 20.0, 0.4) == pytest.approx(64.0)
    # a token sees a larger batch than the time-average, more so when the load moved (dispersion)
    steady = decode_batch(10.0, 64, 20.0, 0.4)
    moved = decode_batch(10.0, 64, 20.0, 0.4, dispersion=3.0)
    assert 10.0 < steady < moved < 14.0
    assert decode_batch(10.0, 64, 20.0, 0.4) <= admission_batch(10.0, 64, 20.0, 0.4)


def test_window_dispersion_is_at_least_one_and_bounded() -> None:
    w = window(TRUE, 10.0, 128.0, end=60.0)
    assert w.dispersion == 1.0  # variance = mean: a steady Poisson load
    moved = PodWindow("ns", "p", "m", 60.0, 60.0, gauge_mean=10.0, gauge_var=50.0)
    assert moved.dispersion == pytest.approx(5.0)
    assert PodWindow("ns", "p", "m", 60.0, 60.0, gauge_mean=1.0, gauge_var=1e6).dispersion == 10.0
    assert PodWindow("ns", "p", "m", 60.0, 60.0).dispersion == 1.0


# ---- learning and identifiability -------------------------------------------------------------------


def test_varied_load_and_prompts_identify_all_four_parameters() -> None:
    state = run_cycles(EstimatorState(), 12, TRUE)
    learned = learned_profile(state)
    for name in ("alpha", "beta", "gamma", "delta"):
        assert rel(getattr(learned, name).value, getattr(TRUE, name)) < 0.03, learned.summary()
    assert learned.learned_all
    assert learned.confident(Confidence.HIGH), learned.summary()
    parms = learned.parms
    assert parms is not None and parms.alpha == learned.alpha.value
    lo, hi = learned.batch_range
    assert 0 < lo < hi


def test_a_known_joined_batch_is_used_instead_of_the_inferred_one() -> None:
    """A window that carries the batch its requests joined (a benchmark's engine knows it; vLLM does not
    export it) is fitted on that batch, not on the one inferred from the running average."""
    rng = random.Random(3)
    state = EstimatorState()
    for i in range(1, 13):
        now = i * CYCLE
        windows = []
        for k in range(3):
            joined, prompt = rng.choice((3.0, 9.0, 25.0)), rng.choice((128.0, 512.0))
            w = window(TRUE, 10.0, prompt, end=now, pod=f"p{k}")  # running says 10 whatever the batch
            prefill = TRUE.gamma + TRUE.delta * prompt * joined
            windows.append(replace(w, prefill_ms=prefill, joined_batch=joined))
        state = update(state, windows, now=now, max_batch=N).state
    learned = learned_profile(state)
    assert rel(learned.gamma.value, TRUE.gamma) < 0.01, learned.summary()
    assert rel(learned.delta.value, TRUE.delta) < 0.01, learned.summary()
    # without it, the same prefill times against a batch that never varied identify nothing
    blind = EstimatorState()
    for i in range(1, 13):
        windows = [replace(w, joined_batch=None) for w in windows]
        blind = update(blind, [replace(w, end=i * CYCLE) for w in windows], now=i * CYCLE, max_batch=N).state
    assert learned_profile(blind).gamma.value != pytest.approx(TRUE.gamma, rel=0.01)


def test_a_batch_that_never_varies_keeps_the_slope_prior_and_says_so() -> None:
    prior = ServiceParms(alpha=15.0, beta=0.6, gamma=30.0, delta=0.06)
    state = run_cycles(EstimatorState(), 10, TRUE, batches=(12.0,), prompts=(256.0,), prior=prior)
    learned = learned_profile(state, prior)
    assert learned.beta.source == "prior" and learned.beta.value == 0.6
    assert learned.beta.confidence is Confidence.NONE
    assert "has not varied" in learned.beta.note
    assert learned.delta.source == "prior" and learned.delta.value == 0.06
    # the intercepts are fitted through the data under the prior slopes: right where the variant runs
    xd = decode_batch(12.0, N, TRUE.alpha, TRUE.beta)
    assert learned.alpha.source == "learned"
    assert learned.alpha.value == pytest.approx(TRUE.alpha + TRUE.beta * xd - 0.6 * xd, rel=0.02)
    assert learned.alpha.confidence is Confidence.LOW  # it leans on an unchecked slope
    assert not learned.learned_all and not learned.confident(Confidence.LOW)


def test_without_a_prior_nothing_unidentifiable_is_made_up() -> None:
    state = run_cycles(EstimatorState(), 6, TRUE, batches=(12.0,), prompts=(256.0,))
    learned = learned_profile(state)
    assert learned.beta.value is None and learned.beta.source == "none"
    assert learned.parms is None


def test_prompt_length_alone_identifies_delta_at_a_fixed_batch() -> None:
    state = run_cycles(EstimatorState(), 10, TRUE, batches=(12.0,), prompts=(64.0, 256.0, 1024.0))
    learned = learned_profile(state)
    assert learned.delta.source == "learned" and learned.gamma.source == "learned"
    assert rel(learned.delta.value, TRUE.delta) < 0.03
    assert learned.beta.source == "none"  # decode still only saw one batch size


def test_windows_without_enough_traffic_are_not_used() -> None:
    quiet = PodWindow("ns", "p", "m", 60.0, 60.0, itl_ms=25.0, decode_tokens=5.0, prefill_ms=40.0,
                      requests=1.0, prompt_tokens=100.0, running=0.2)  # fmt: skip
    result = update(EstimatorState(), [quiet], now=60.0, max_batch=N)
    assert result.decode_windows == 0 and result.prefill_windows == 0
    assert result.state.decode.sums.n == 0


# ---- guards -----------------------------------------------------------------------------------------


def test_parameters_stay_non_negative() -> None:
    # prefill that an unconstrained fit would give a negative γ
    rng = random.Random(2)
    state = EstimatorState()
    for i in range(1, 11):
        windows = []
        for k in range(3):
            m = rng.choice((4.0, 12.0, 30.0))
            w = window(TRUE, m, 512.0, end=i * CYCLE, pod=f"p{k}", rng=rng)
            xp = 512.0 * admission_batch(m, N, TRUE.alpha, TRUE.beta)
            windows.append(replace(w, prefill_ms=max(0.05 * xp - 40.0, 1.0)))
        state = update(state, windows, now=i * CYCLE, max_batch=N).state
    learned = learned_profile(state)
    assert learned.gamma.value == 0.0
    assert "held at 0" in learned.gamma.note
    assert learned.delta.value is not None and learned.delta.value > 0


def test_steps_are_bounded_when_the_prior_is_far_off() -> None:
    prior = ServiceParms(alpha=2 * TRUE.alpha, beta=2 * TRUE.beta, gamma=2 * TRUE.gamma, delta=2 * TRUE.delta)
    state = EstimatorState()
    previous = {n: getattr(prior, n) for n in ("alpha", "beta", "gamma", "delta")}
    for i in range(1, 9):
        state = run_cycles(state, 1, TRUE, start=(i - 1) * CYCLE, prior=prior, seed=i)
        learned = learned_profile(state, prior)
        for p in learned.params:
            assert p.value is not None
            assert abs(p.value - previous[p.name]) <= 0.25 * previous[p.name] + 1e-9, (i, p.name)
            previous[p.name] = p.value
    for p in learned_profile(state, prior).params:
        assert rel(p.value, getattr(TRUE, p.name)) < 0.05, p


def test_a_value_still_walking_towards_the_fit_is_not_confident() -> None:
    prior = ServiceParms(alpha=10 * TRUE.alpha, beta=TRUE.beta, gamma=TRUE.gamma, delta=TRUE.delta)
    state = run_cycles(EstimatorState(), 5, TRUE, prior=prior)
    learned = learned_profile(state, prior)
    assert learned.alpha.value is not None and learned.alpha.value > 1.2 * TRUE.alpha
    assert learned.alpha.confidence is Confidence.LOW
    assert "converging" in learned.alpha.note


def test_windows_overlapping_a_scale_event_are_held() -> None:
    state = run_cycles(EstimatorState(), 6, TRUE)
    before = state.decode.sums.n
    now = 7 * CYCLE
    windows = [window(TRUE, 10.0, 256.0, end=now, pod=f"p{k}") for k in range(3)]
    held = update(state, windows, now=now, max_batch=N, last_scale=now - 30.0)
    assert held.held and held.decode_windows == 0
    assert held.state.decode.sums.n == before
    assert held.state.held_until == now - 30.0 + EstimatorConfig().settle_s + CYCLE
    assert learned_profile(held.state).held_until == held.state.held_until
    # once a window starts after the settling time, it counts again
    later = now + 2 * CYCLE
    windows = [window(TRUE, 10.0, 256.0, end=later, pod=f"p{k}") for k in range(3)]
    resumed = update(held.state, windows, now=later, max_batch=N, last_scale=now - 30.0)
    assert not resumed.held and resumed.decode_windows == 3
    assert resumed.state.held_until is None


def test_idle_cycles_forget_nothing() -> None:
    state = run_cycles(EstimatorState(), 6, TRUE)
    idle = update(state, [], now=10_000.0, max_batch=N).state
    assert idle.decode == state.decode and idle.prefill == state.prefill


# ---- drift and outliers -----------------------------------------------------------------------------


def test_a_change_of_parameters_is_followed() -> None:
    state = run_cycles(EstimatorState(), 15, TRUE)
    slower = ServiceParms(
        alpha=1.5 * TRUE.alpha, beta=1.4 * TRUE.beta, gamma=TRUE.gamma, delta=1.5 * TRUE.delta
    )
    rng = random.Random(9)
    drifted: list[str] = []
    for i in range(16, 28):
        now = i * CYCLE
        windows = [
            window(
                slower,
                rng.choice((4.0, 12.0, 30.0)),
                rng.choice((128.0, 512.0)),
                end=now,
                pod=f"p{k}",
                rng=rng,
            )
            for k in range(3)
        ]
        result = update(state, windows, now=now, max_batch=N)
        state = result.state
        drifted.extend(result.drift)
    assert "decode" in drifted and "prefill" in drifted
    learned = learned_profile(state)
    assert learned.drift_at is not None
    assert rel(learned.alpha.value, slower.alpha) < 0.05, learned.summary()
    assert rel(learned.beta.value, slower.beta) < 0.10, learned.summary()
    assert rel(learned.delta.value, slower.delta) < 0.05, learned.summary()


def test_a_gross_outlier_window_is_dropped_and_counted() -> None:
    state = run_cycles(EstimatorState(), 12, TRUE)
    before = learned_profile(state)
    now = 13 * CYCLE
    bad = window(TRUE, 12.0, 256.0, end=now, pod="p0")
    bad = replace(bad, itl_ms=3 * (bad.itl_ms or 0.0))
    good = [window(TRUE, 12.0, 256.0, end=now, pod=f"p{k}") for k in (1, 2)]
    result = update(state, [bad, *good], now=now, max_batch=N)
    assert result.outliers == 1 and result.drift == ()
    after = learned_profile(result.state)
    assert rel(after.alpha.value, before.alpha.value or 0.0) < 0.01
    assert result.state.decode.outliers == 1


def test_a_single_bad_cycle_is_not_a_drift() -> None:
    state = run_cycles(EstimatorState(), 12, TRUE)
    now = 13 * CYCLE
    slow = [
        window(ServiceParms(30.0, 0.6, 20.58, 0.041), 12.0, 256.0, end=now, pod=f"p{k}") for k in range(3)
    ]
    state = update(state, slow, now=now, max_batch=N).state
    state = run_cycles(state, 4, TRUE, start=now, seed=5)
    assert state.decode.drift_at is None
    assert rel(learned_profile(state).alpha.value, TRUE.alpha) < 0.03


# ---- restart ----------------------------------------------------------------------------------------


def test_the_state_survives_a_restart_through_json() -> None:
    prior = ServiceParms(alpha=25.0, beta=0.5, gamma=25.0, delta=0.05)
    state = run_cycles(EstimatorState(), 8, TRUE, prior=prior)
    text = json.dumps(state.to_dict())
    assert len(text) < 1200  # small enough for a status field
    restored = EstimatorState.from_dict(json.loads(text))
    assert restored.to_dict() == state.to_dict()
    a, b = learned_profile(state, prior), learned_profile(restored, prior)
    for pa, pb in zip(a.params, b.params, strict=True):
        assert pa.value == pytest.approx(pb.value, rel=1e-8)
        assert pa.confidence is pb.confidence
    # and learning goes on from where it was, exactly as without the restart
    go_on = run_cycles(state, 3, TRUE, start=8 * CYCLE, prior=prior, seed=4)
    after_restart = run_cycles(restored, 3, TRUE, start=8 * CYCLE, prior=prior, seed=4)
    for pa, pb in zip(learned_profile(go_on).params, learned_profile(after_restart).params, strict=True):
        assert pa.value == pytest.approx(pb.value, rel=1e-6)


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"version": 99, "decode": {}, "prefill": {}},
        {"version": 1, "decode": {"sums": [1, 2]}, "prefill": {}},
        {"version": 1, "decode": {"value": [1.0]}, "prefill": {}},
        {"version": 1, "decode": {"scale": "x"}, "prefill": {}},
        {"version": 1, "decode": [], "prefill": {}},
    ],
)
def test_an_unreadable_state_is_a_model_error(data: dict[str, object]) -> None:
    with pytest.raises(ModelError, match="not readable"):
        EstimatorState.from_dict(data)


def test_status_view_and_summary() -> None:
    state = run_cycles(EstimatorState(), 10, TRUE)
    learned = learned_profile(state)
    status = learned.to_status()
    assert set(status) >= {"alpha", "beta", "gamma", "delta", "confidence"}
    assert status["alpha"]["source"] == "learned"
    assert float(status["alpha"]["value"]) == pytest.approx(TRUE.alpha, rel=0.03)
    assert status["confidence"] in {"high", "medium", "low"}
    json.dumps(status)
    assert "alpha" in learned.summary() and "%" in learned.summary()
    empty = learned_profile(EstimatorState())
    assert empty.alpha.source == "none" and empty.confidence is Confidence.NONE
    assert "unknown" in empty.summary()


def test_config_is_validated() -> None:
    with pytest.raises(ModelError):
        EstimatorConfig(max_step=0)
    with pytest.raises(ModelError):
        EstimatorConfig(half_life_s=0)
    with pytest.raises(ModelError):
        EstimatorConfig(drift_keep=0)
