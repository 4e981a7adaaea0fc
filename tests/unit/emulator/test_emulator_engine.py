"""The emulator's discrete-event engine: timing, batching, FIFO, KV cache, preemption, determinism."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_emulator.engine import Engine, EngineConfig, EngineOutput, Profile, SeqState, Sequence
from vllm_emulator.errors import ConfigError, EngineError

ALPHA, BETA, GAMMA, DELTA = 20.0, 1.0, 10.0, 0.1
PROFILE = Profile(alpha=ALPHA, beta=BETA, gamma=GAMMA, delta=DELTA)


def decode_s(b: int) -> float:
    return (ALPHA + BETA * b) / 1000


def prefill_s(tokens: int, b: int) -> float:
    return (GAMMA + DELTA * tokens * b) / 1000


def make(**kw: object) -> Engine:
    cfg: dict[str, object] = {"profile": PROFILE, "max_num_seqs": 4}
    cfg.update(kw)
    return Engine(EngineConfig(**cfg))  # type: ignore[arg-type]


def run_events(engine: Engine) -> list[EngineOutput]:
    """Advance event by event until idle, checking the invariants at every event."""
    outs = []
    cap = engine.config.kv_cache_tokens
    while (t := engine.next_event_time()) is not None:
        outs.append(engine.advance(t))
        assert engine.num_running <= engine.config.max_num_seqs
        assert 0 <= engine.kv_cache_usage * cap <= cap
    return outs


def merged(outs: list[EngineOutput]) -> EngineOutput:
    total = EngineOutput()
    for out in outs:
        total.first_tokens += out.first_tokens
        total.finished += out.finished
        total.itl += out.itl
        total.generation_tokens += out.generation_tokens
        total.preemptions += out.preemptions
        total.steps += out.steps
    return total


# ---------------------------------------------------------------------------- profile and config


def test_profile_formulas() -> None:
    assert PROFILE.decode_ms(4) == pytest.approx(24.0)
    assert PROFILE.prefill_ms(100, 3) == pytest.approx(10 + 0.1 * 100 * 3)
    assert PROFILE.prefill_ms(0, 3) == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"alpha": -1.0, "beta": 0.0, "gamma": 0.0, "delta": 0.0},
        {"alpha": 0.0, "beta": 0.0, "gamma": 1.0, "delta": 1.0},
        {"alpha": math.nan, "beta": 1.0, "gamma": 1.0, "delta": 1.0},
    ],
)
def test_profile_rejects_bad_parameters(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        Profile(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_num_seqs": 0},
        {"kv_cache_tokens": 100, "max_model_len": 200},
        {"max_model_len": 1},
        {"noise": -0.1},
        {"time_scale": 0.0},
    ],
)
def test_engine_config_rejects_bad_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        EngineConfig(profile=PROFILE, **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- timing of one request


def test_single_request_timeline_is_exact() -> None:
    engine = make()
    seq = engine.submit("a", prompt_tokens=100, output_tokens=5, now=0.0)
    assert seq.scheduled_time == 0.0  # admitted at once: the engine was idle
    outs = run_events(engine)
    first = prefill_s(100, 1)
    assert seq.first_token_time == pytest.approx(first)
    assert seq.finish_time == pytest.approx(first + 4 * decode_s(1))
    assert seq.finish_reason == "length"
    assert seq.state is SeqState.FINISHED
    total = merged(outs)
    assert total.generation_tokens == 5
    assert [s.request_id for s in total.first_tokens] == ["a"]
    assert [s.request_id for s in total.finished] == ["a"]
    assert sum(c for _, c in total.itl) == 4
    assert all(g == pytest.approx(decode_s(1)) for g, _ in total.itl)


def test_one_token_request_finishes_at_prefill() -> None:
    engine = make()
    seq = engine.submit("a", prompt_tokens=50, output_tokens=1, now=1.0)
    out = merged(run_events(engine))
    assert seq.finish_time == pytest.approx(1.0 + prefill_s(50, 1))
    assert out.itl == [] and out.generation_tokens == 1
    assert engine.num_running == 0


def test_time_scale_divides_every_duration() -> None:
    slow, fast = make(), make(time_scale=10.0)
    a = slow.submit("a", 64, 8, now=0.0)
    b = fast.submit("b", 64, 8, now=0.0)
    run_events(slow)
    run_events(fast)
    assert b.first_token_time == pytest.approx(a.first_token_time / 10)  # type: ignore[operator]
    assert b.finish_time == pytest.approx(a.finish_time / 10)  # type: ignore[operator]


def test_static_batch_matches_the_analyzer_service_time() -> None:
    """n requests arriving together: prefill(L, b) with b = admission rank, then decode(n) per token."""
    n, prompt, out_tokens = 4, 200, 30
    engine = make(max_num_seqs=n)
    seqs = [engine.submit(i, prompt, out_tokens, now=0.0) for i in range(n)]
    run_events(engine)
    for rank, seq in enumerate(seqs, start=1):
        assert seq.first_token_time == pytest.approx(prefill_s(prompt, rank))
    # once every prefill is over the batch decodes at decode(n): the last one's tokens come every decode(n)
    last = seqs[-1]
    assert last.finish_time is not None and last.first_token_time is not None
    gaps = (last.finish_time - last.first_token_time) / (out_tokens - 1)
    assert gaps == pytest.approx(decode_s(n), rel=0.05)


def test_decode_step_uses_the_running_batch_size() -> None:
    engine = make(max_num_seqs=8)
    for i in range(3):
        engine.submit(i, 10, 50, now=0.0)
    out = merged(run_events(engine))
    gaps: Counter[float] = Counter()
    for gap, count in out.itl:
        gaps[round(gap, 9)] += count
    # after the first decode step, every token of a full batch of 3 comes after decode(3)
    assert gaps[round(decode_s(3), 9)] >= 3 * 40
    assert sum(gaps.values()) == 3 * 49


# ---------------------------------------------------------------------------- batching and FIFO


def test_batch_limit_and_fifo_admission() -> None:
    engine = make(max_num_seqs=2)
    seqs = [engine.submit(i, 20, 10, now=0.001 * i) for i in range(6)]
    assert engine.num_running == 2
    assert engine.num_waiting == 4
    run_events(engine)
    scheduled = [s.scheduled_time for s in seqs]
    firsts = [s.first_token_time for s in seqs]
    assert scheduled == sorted(scheduled)  # type: ignore[type-var]
    assert firsts == sorted(firsts)  # type: ignore[type-var]
    # requests 2.. wait for a slot: they are admitted exactly when an earlier one finishes
    finishes = sorted(s.finish_time for s in seqs[:4])  # type: ignore[type-var]
    assert seqs[2].scheduled_time == pytest.approx(finishes[0])
    assert seqs[3].scheduled_time == pytest.approx(finishes[1])
    assert all(s.scheduled_time >= s.arrival_time for s in seqs)  # type: ignore[operator]


def test_arrival_to_a_busy_engine_with_room_starts_prefill_at_once() -> None:
    engine = make(max_num_seqs=4)
    engine.submit("a", 10, 100, now=0.0)
    engine.advance(0.5)
    seq = engine.submit("b", 100, 5, now=0.5)
    assert seq.scheduled_time == 0.5
    assert seq.state is SeqState.PREFILLING
    engine.advance(0.5 + prefill_s(100, 2) + 1e-9)
    assert seq.first_token_time == pytest.approx(0.5 + prefill_s(100, 2))


def test_each_sequence_records_the_batch_its_prefill_was_timed_at() -> None:
    engine = make(max_num_seqs=2)
    seqs = [engine.submit(i, 20, 10, now=0.001 * i) for i in range(3)]
    assert [s.admitted_batch for s in seqs] == [1, 2, None]  # the third waits for a slot
    run_events(engine)
    assert seqs[2].admitted_batch == 2  # admitted when a slot freed, beside the other one still running
    # the prefill it was timed at: scheduled -> first token
    for s in seqs:
        assert s.first_token_time is not None and s.scheduled_time is not None
        assert s.admitted_batch is not None
        assert s.first_token_time - s.scheduled_time == pytest.approx(prefill_s(20, s.admitted_batch))


def test_gauges_follow_the_engine_state() -> None:
    engine = make(max_num_seqs=1, kv_cache_tokens=10_000)
    engine.submit("a", 100, 10, now=0.0)
    engine.submit("b", 100, 10, now=0.0)
    assert (engine.num_running, engine.num_waiting) == (1, 1)
    assert engine.kv_cache_usage == pytest.approx(101 / 10_000)
    run_events(engine)
    assert (engine.num_running, engine.num_waiting, engine.kv_cache_usage) == (0, 0, 0.0)


# ---------------------------------------------------------------------------- KV cache and preemption


def test_kv_pressure_preempts_the_newest_and_recomputes() -> None:
    # 3 sequences of 100 prompt + up to 200 output in a cache of 500 tokens: they cannot all grow.
    engine = make(max_num_seqs=3, kv_cache_tokens=500, max_model_len=400)
    seqs = [engine.submit(i, 100, 200, now=0.0) for i in range(3)]
    outs = run_events(engine)
    total = merged(outs)
    assert total.preemptions > 0
    assert sum(s.num_preemptions for s in seqs) == total.preemptions
    assert seqs[0].num_preemptions == 0  # the oldest is never the victim
    assert all(s.state is SeqState.FINISHED and s.finish_reason == "length" for s in seqs)
    assert total.generation_tokens == 3 * 200
    # one gap per token after the first, preemption gaps included
    assert sum(c for _, c in total.itl) == 3 * 199
    victim = max(seqs, key=lambda s: s.num_preemptions)
    assert victim.finish_time is not None and victim.first_token_time is not None
    # a preempted sequence loses time: it finishes later than an unpreempted one would
    assert victim.finish_time > seqs[0].finish_time  # type: ignore[operator]


def test_preempted_sequence_prefills_its_generated_tokens_again() -> None:
    engine = make(max_num_seqs=2, kv_cache_tokens=300, max_model_len=300)
    old = engine.submit("old", 100, 150, now=0.0)
    new = engine.submit("new", 100, 150, now=0.0)
    preempted_at = None
    while (t := engine.next_event_time()) is not None:
        out = engine.advance(t)
        if out.preemptions and preempted_at is None:
            preempted_at = t
            generated = engine.num_generated(new)
            assert new.state is SeqState.WAITING and engine.num_waiting == 1
            assert old.state is SeqState.DECODING
    assert preempted_at is not None
    assert new.num_preemptions >= 1 and old.num_preemptions == 0
    assert generated >= 1  # it had produced tokens, which are kept and recomputed
    assert new.finish_time is not None and old.finish_time is not None
    assert new.finish_time > old.finish_time


def test_no_admission_when_kv_is_short() -> None:
    engine = make(max_num_seqs=8, kv_cache_tokens=300, max_model_len=300)
    engine.submit("a", 250, 10, now=0.0)
    b = engine.submit("b", 100, 10, now=0.0)
    assert b.state is SeqState.WAITING  # a free slot, but no KV room
    run_events(engine)
    assert b.finish_time is not None


# ---------------------------------------------------------------------------- abort


def test_abort_in_every_state_frees_the_slot() -> None:
    engine = make(max_num_seqs=1)
    a = engine.submit("a", 10, 100, now=0.0)
    b = engine.submit("b", 10, 100, now=0.0)
    engine.abort(b, now=0.0)  # waiting
    assert b.finish_reason == "abort" and engine.num_waiting == 0
    finished = [s.request_id for s in engine.advance(0.2).finished]
    assert a.state is SeqState.DECODING
    engine.abort(a, now=0.2)  # decoding
    assert a.finish_reason == "abort" and engine.num_running == 0
    c = engine.submit("c", 1000, 10, now=0.3)
    assert c.state is SeqState.PREFILLING
    engine.abort(c, now=0.3)  # prefilling
    assert engine.num_running == 0 and engine.kv_cache_usage == 0
    assert engine.next_event_time() is None
    finished += [s.request_id for s in engine.advance(1.0).finished]
    assert finished == ["b", "a", "c"]
    engine.abort(a, now=1.0)  # finished: a no-op


def test_abort_admits_the_next_waiting_request() -> None:
    engine = make(max_num_seqs=1)
    a = engine.submit("a", 10, 100, now=0.0)
    b = engine.submit("b", 10, 100, now=0.0)
    engine.abort(a, now=0.05)
    assert b.state is SeqState.PREFILLING and b.scheduled_time == 0.05


# ---------------------------------------------------------------------------- errors


def test_time_cannot_go_backwards() -> None:
    engine = make()
    engine.advance(1.0)
    with pytest.raises(EngineError):
        engine.advance(0.5)
    with pytest.raises(EngineError):
        engine.submit("x", 1, 1, now=0.9)


@pytest.mark.parametrize(("prompt", "output"), [(8000, 500), (-1, 5), (5, 0)])
def test_impossible_requests_are_rejected(prompt: int, output: int) -> None:
    engine = make(max_model_len=8192)
    with pytest.raises(EngineError):
        engine.submit("x", prompt, output, now=0.0)


# ---------------------------------------------------------------------------- determinism, jumps


def _workload(engine: Engine, fine: bool) -> tuple[list[tuple[object, float | None, float | None, int]], int]:
    """A fixed mixed workload; returns per-request results and how many fast-path jumps were taken."""
    arrivals = [(0.0005 * i + 0.01 * (i % 3), i, 20 + 7 * i, 5 + (i * 13) % 40) for i in range(40)]
    arrivals.sort()
    seqs: list[Sequence] = []
    outs: list[EngineOutput] = []
    for t, rid, prompt, out in arrivals:
        if fine:
            while (nxt := engine.next_event_time()) is not None and nxt <= t:
                outs.append(engine.advance(nxt))
        seqs.append(engine.submit(rid, prompt, out, now=t))
    if fine:
        outs += run_events(engine)
    else:
        outs.append(engine.advance(1e6))
    jumps = sum(1 for out in outs for _, count in out.itl if count > engine.config.max_num_seqs)
    return [(s.request_id, s.first_token_time, s.finish_time, s.num_preemptions) for s in seqs], jumps


@pytest.mark.parametrize("kv", [100_000, 600])
def test_coarse_and_fine_advancing_give_identical_results(kv: int) -> None:
    """Crossing many steps at once (the fast path) is exact, with and without preemption."""
    fine, fine_jumps = _workload(make(max_num_seqs=6, kv_cache_tokens=kv, max_model_len=600), fine=True)
    coarse, jumps = _workload(make(max_num_seqs=6, kv_cache_tokens=kv, max_model_len=600), fine=False)
    assert fine_jumps == 0 and jumps > 0
    assert fine == coarse
    preemptions = sum(r[3] for r in coarse)
    assert preemptions == 0 if kv == 100_000 else preemptions >= 3


def test_same_seed_same_noise_different_seed_different() -> None:
    runs = [_workload(make(noise=0.2, seed=seed), fine=False)[0] for seed in (1, 1, 2)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_noise_keeps_the_mean_step_time() -> None:
    engine = make(noise=0.3, seed=7, max_num_seqs=1)
    engine.submit("a", 10, 4001, now=0.0)
    out = merged(run_events(engine))
    gaps = [g for g, c in out.itl for _ in range(c)]
    mean = sum(gaps) / len(gaps)
    cv = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps)) / mean
    assert mean == pytest.approx(decode_s(1), rel=0.03)
    assert cv == pytest.approx(0.3, rel=0.15)


def test_advance_to_infinity_runs_everything_to_completion() -> None:
    engine = make(max_num_seqs=2)
    seqs = [engine.submit(i, 30, 20, now=0.001 * i) for i in range(5)]
    out = engine.advance(math.inf)
    assert len(out.finished) == 5 and all(s.state is SeqState.FINISHED for s in seqs)
    assert engine.next_event_time() is None
    assert engine.advance(math.inf).finished == []


def test_aborting_many_waiting_requests_keeps_the_queue_consistent() -> None:
    engine = make(max_num_seqs=1)
    engine.submit("run", 10, 50, now=0.0)
    queued = [engine.submit(i, 10, 5, now=0.0) for i in range(100)]
    for seq in queued[::2]:
        engine.abort(seq, now=0.0)
    assert engine.num_waiting == 50
    out = engine.advance(math.inf)
    done = [s.request_id for s in out.finished if s.finish_reason == "length"]
    assert done == ["run", *range(1, 100, 2)]  # FIFO among the survivors
    assert engine.num_waiting == 0 and engine.num_running == 0


def test_idle_engine_advances_by_hours_in_one_call() -> None:
    engine = make()
    seq = engine.submit("a", 10, 1000, now=0.0, stop_reason="stop")
    out = engine.advance(3600.0 * 5)
    assert seq.finish_reason == "stop"
    assert out.steps == 999 and engine.next_event_time() is None
    assert len(out.itl) <= 3  # crossed in a few jumps, not 999 entries


# ---------------------------------------------------------------------------- property: invariants


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=1, max_value=6),
    st.integers(min_value=400, max_value=3000),
    st.lists(
        st.tuples(
            st.floats(min_value=0.0, max_value=0.5),
            st.integers(min_value=1, max_value=200),
            st.integers(min_value=1, max_value=200),
        ),
        min_size=1,
        max_size=25,
    ),
    st.booleans(),
)
def test_random_workloads_keep_the_invariants(
    max_seqs: int, kv: int, requests: list[tuple[float, int, int]], noisy: bool
) -> None:
    engine = make(max_num_seqs=max_seqs, kv_cache_tokens=kv, max_model_len=400, noise=0.2 if noisy else 0.0)
    seqs: list[Sequence] = []
    outs: list[EngineOutput] = []
    for t, prompt, out_tokens in sorted(requests):
        while (nxt := engine.next_event_time()) is not None and nxt <= t:
            outs.append(engine.advance(nxt))
        seqs.append(engine.submit(len(seqs), prompt, out_tokens, now=t))
        assert engine.num_running <= max_seqs
    outs += run_events(engine)
    total = merged(outs)
    assert all(s.state is SeqState.FINISHED for s in seqs)
    assert total.generation_tokens == sum(s.output_tokens for s in seqs)
    assert sum(c for _, c in total.itl) == sum(s.output_tokens - 1 for s in seqs)
    assert all(g >= 0 for g, _ in total.itl)
    assert len(total.first_tokens) == len(seqs) == len(total.finished)
    assert total.preemptions == sum(s.num_preemptions for s in seqs)
    for s in seqs:
        assert s.scheduled_time is not None and s.first_token_time is not None and s.finish_time is not None
        assert s.arrival_time <= s.scheduled_time <= s.first_token_time <= s.finish_time
        assert engine.num_generated(s) == s.output_tokens
    # FIFO: first admissions happen in arrival order
    order = sorted(seqs, key=lambda s: (s.arrival_time, s.seq_no))
    assert [s.scheduled_time for s in order] == sorted(s.scheduled_time for s in order)  # type: ignore[type-var]
    assert engine.kv_cache_usage == 0
