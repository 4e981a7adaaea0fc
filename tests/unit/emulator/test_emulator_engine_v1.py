"""The V1-like engine: step costs, token budget, chunked prefill, KV blocks, preemption, prefix cache."""

from __future__ import annotations

import math
import random

import pytest

from vllm_emulator.costmodel import CostModel
from vllm_emulator.engine import SeqState
from vllm_emulator.engine_v1 import V1Config, V1Engine, V1Output, V1Sequence
from vllm_emulator.errors import ConfigError, EngineError
from vllm_emulator.metrics import EmulatorMetrics

COST = CostModel(fixed_ms=10.0, token_ms=0.01, context_ms=0.001)
MS = 1e-3


def _config(**kwargs: object) -> V1Config:
    defaults: dict[str, object] = {"cost": COST, "max_num_seqs": 8, "num_gpu_blocks": 1024, "block_size": 16}
    defaults.update(kwargs)
    return V1Config(**defaults)  # type: ignore[arg-type]


def _drain(engine: V1Engine) -> list[V1Output]:
    outs = []
    while (t := engine.next_event_time()) is not None:
        outs.append(engine.advance(t))
    return outs


def _step_ms(tokens: int, context: int) -> float:
    return COST.fixed_ms + COST.token_ms * tokens + COST.context_ms * context


def test_one_request_prefills_in_one_step_then_decodes_one_token_per_step() -> None:
    engine = V1Engine(_config())
    seq = engine.submit("a", prompt_tokens=100, output_tokens=4, now=0.0)
    _drain(engine)
    first = _step_ms(100, 100) * MS  # the prompt in one step; its first token at the step's end
    assert seq.first_token_time == pytest.approx(first)
    # three decode steps, at contexts 101, 102, 103
    decode = sum(_step_ms(1, 100 + k) for k in (1, 2, 3)) * MS
    assert seq.finish_time == pytest.approx(first + decode)
    assert seq.state is SeqState.FINISHED and seq.finish_reason == "length"
    assert engine.completed_steps == 4 and engine.kv_cache_usage == 0.0


def test_a_long_prompt_is_prefilled_in_chunks_while_decodes_go_on() -> None:
    engine = V1Engine(_config(max_num_batched_tokens=512))
    decoder = engine.submit("d", prompt_tokens=10, output_tokens=50, now=0.0)  # step 1: its prefill
    long = engine.submit("long", prompt_tokens=1200, output_tokens=2, now=0.0)  # waits for step 2
    outs = _drain_until(engine, lambda: long.first_token_time is not None)
    # 1200 tokens through a budget of 512 minus the one decode: chunks of 511, 511, 178 in steps 2-4
    assert engine.completed_steps == 4
    assert long.scheduled_time == pytest.approx(_step_ms(10, 10) * MS)
    assert sum(o.generation_tokens for o in outs) == 1 + 3 + 1  # decoder: first + one per chunk step
    assert engine.num_generated(decoder) == 4
    last_chunk = _step_ms(1 + 178, 13 + 1200) * MS
    assert long.first_token_time - outs[-1].itl[-1][0] == pytest.approx(long.first_token_time - last_chunk)
    _drain(engine)
    assert long.finish_time is not None and decoder.finish_time is not None


def _drain_until(engine: V1Engine, done: object) -> list[V1Output]:
    outs = []
    while not done() and (t := engine.next_event_time()) is not None:  # type: ignore[operator]
        outs.append(engine.advance(t))
    return outs


def test_requests_start_at_step_boundaries_and_max_num_seqs_bounds_the_batch() -> None:
    engine = V1Engine(_config(max_num_seqs=2))
    a = engine.submit("a", 20, 30, now=0.0)
    end = engine.next_event_time()
    assert end is not None
    b = engine.submit("b", 20, 30, now=end / 2)  # mid-step: waits for the boundary
    c = engine.submit("c", 20, 30, now=end / 2)
    engine.advance(end)
    assert b.scheduled_time == pytest.approx(end) and engine.num_running == 2 and engine.num_waiting == 1
    _drain(engine)
    assert c.scheduled_time is not None and a.finish_time is not None
    assert c.scheduled_time >= min(a.finish_time, b.finish_time or math.inf)


def test_blocks_run_out_the_last_admitted_is_preempted_and_recomputes() -> None:
    # 8 blocks of 16 tokens: two requests of 40 + 40 tokens cannot both finish.
    engine = V1Engine(_config(num_gpu_blocks=8, max_model_len=128))
    a = engine.submit("a", 40, 40, now=0.0)
    b = engine.submit("b", 40, 40, now=0.0)
    outs = _drain(engine)
    assert sum(o.preemptions for o in outs) >= 1
    assert b.num_preemptions >= 1 and a.num_preemptions == 0
    assert a.finish_time is not None and b.finish_time is not None and b.finish_time > a.finish_time
    assert engine.num_generated(b) == 40 and engine.kv_cache_usage == 0.0
    # The gap over the preemption is one (long) inter-token latency, not several.
    gaps = sum(count for o in outs for _, count in o.itl) + sum(r[2] * r[3] for o in outs for r in o.itl_runs)
    assert gaps == 39 + 39


def test_prefix_cache_shares_full_blocks_and_always_computes_one_token() -> None:
    engine = V1Engine(_config())
    keys = tuple(range(6))  # six full blocks: 96 tokens of shared prefix
    first = engine.submit("a", 100, 2, now=0.0, prefix_keys=keys)
    _drain(engine)
    assert first.cached_tokens == 0
    second = engine.submit("b", 100, 2, now=engine.now, prefix_keys=keys)
    out = engine.advance(engine.next_event_time() or 0.0)
    assert second.cached_tokens == 96
    assert out.prefix_queries == 100 and out.prefix_hits == 96
    # The whole prompt cached: its last block is recomputed so the step has a token to sample from.
    third = engine.submit("c", 96, 2, now=engine.now, prefix_keys=keys)
    _drain(engine)
    assert third.cached_tokens == 80
    assert engine.kv_cache_usage == 0.0


def test_cached_prefix_blocks_are_evicted_oldest_first_when_blocks_run_out() -> None:
    engine = V1Engine(_config(num_gpu_blocks=16, max_model_len=256))
    a_keys = tuple(("a", i) for i in range(4))  # chained in real use: no key is shared across prompts
    b_keys = tuple(("b", i) for i in range(4))
    engine.submit("a", 64, 1, now=0.0, prefix_keys=a_keys)
    _drain(engine)
    engine.submit("b", 64, 1, now=engine.now, prefix_keys=b_keys)
    _drain(engine)
    # 8 cached free blocks; a request needing 12 evicts four of them, a's first
    engine.submit("big", 190, 1, now=engine.now)
    _drain(engine)
    again = engine.submit("a2", 64, 1, now=engine.now, prefix_keys=a_keys)
    _drain(engine)
    assert again.cached_tokens == 0
    b2 = engine.submit("b2", 64, 1, now=engine.now, prefix_keys=b_keys)
    _drain(engine)
    assert b2.cached_tokens == 48


def test_a_fixed_hit_ratio_needs_no_content() -> None:
    engine = V1Engine(_config(prefix_hit_ratio=0.5))
    seq = engine.submit("a", 100, 2, now=0.0)
    out = engine.advance(engine.next_event_time() or 0.0)
    assert seq.cached_tokens == 48 and out.prefix_hits == 48 and out.prefix_queries == 100
    off = V1Engine(_config(enable_prefix_caching=False))
    off.submit("a", 100, 2, now=0.0, prefix_keys=(1, 2, 3))
    assert off.advance(off.next_event_time() or 0.0).prefix_queries == 0


def _run(seed: int, *, step_by_step: bool, noise: float = 0.0, blocks: int = 120) -> list[tuple[object, ...]]:
    engine = V1Engine(
        _config(
            max_num_seqs=16,
            num_gpu_blocks=blocks,
            max_model_len=1024,
            max_num_batched_tokens=256,
            noise=noise,
            seed=3,
        )
    )
    rng = random.Random(seed)
    t = 0.0
    seqs: list[V1Sequence] = []
    for i in range(600):
        t += rng.expovariate(30.0)
        if step_by_step:
            while (n := engine.next_event_time()) is not None and n <= t:
                engine.advance(n)
        engine.advance(t)
        keys = tuple(("p", rng.randrange(3), j) for j in range(4))
        seqs.append(engine.submit(i, rng.randint(20, 300), rng.randint(1, 120), t, prefix_keys=keys))
        if rng.random() < 0.03:
            engine.abort(seqs[rng.randrange(len(seqs))], t)
    engine.advance(math.inf)
    assert engine.kv_cache_usage == 0.0 and engine.num_running == 0 and engine.num_waiting == 0
    return [(s.first_token_time, s.finish_time, s.num_preemptions, s.finish_reason) for s in seqs]


@pytest.mark.parametrize("noise", [0.0, 0.2])
def test_deterministic_whatever_the_advance_granularity(noise: float) -> None:
    a = _run(1, step_by_step=False, noise=noise)
    assert a == _run(1, step_by_step=True, noise=noise)
    assert any(p for _, _, p, _ in a)  # the small cache preempts
    assert a != _run(2, step_by_step=False, noise=noise)


def test_plain_steps_are_crossed_in_one_jump_with_exact_metrics() -> None:
    engine = V1Engine(_config(max_num_seqs=4))
    for i in range(4):
        engine.submit(i, 50, 5000 - 100 * i, now=0.0)
    metrics = EmulatorMetrics("m", 8192)
    outs = []
    while (t := engine.next_event_time()) is not None:
        out = engine.advance(t + 3600.0)  # an hour at a time
        metrics.record(out)
        outs.append(out)
    assert any(o.itl_runs for o in outs)
    generated = sum(o.generation_tokens for o in outs)
    assert generated == sum(5000 - 100 * i for i in range(4))
    assert metrics.itl.count == generated - 4
    # iteration tokens: each step's prompt tokens of first tokens plus generated tokens
    assert metrics.iteration_tokens.sum == pytest.approx(4 * 50 + generated)
    assert metrics.iteration_tokens.count == engine.completed_steps
    # the inter-token gaps add up to the decode time of every request
    assert metrics.decode.sum == pytest.approx(metrics.itl.sum)


def test_abort_frees_blocks_in_every_state() -> None:
    engine = V1Engine(_config(max_num_seqs=1, max_num_batched_tokens=64))
    running = engine.submit("r", 200, 10, now=0.0)  # a partial prefill (chunks of 64)
    waiting = engine.submit("w", 10, 10, now=0.0)
    engine.advance(engine.next_event_time() or 0.0)
    assert running.state is SeqState.PREFILLING and engine.kv_cache_usage > 0
    engine.abort(waiting, engine.now)
    engine.abort(running, engine.now)
    out = engine.advance(engine.now)
    assert {s.finish_reason for s in out.finished} == {"abort"}
    _drain(engine)
    assert engine.kv_cache_usage == 0.0 and engine.num_running == 0 and engine.num_waiting == 0
    decoder = engine.submit("d", 10, 100, now=engine.now)
    engine.advance((engine.next_event_time() or 0.0) + 0.05)
    assert decoder.state is SeqState.DECODING
    engine.abort(decoder, engine.now)
    _drain(engine)
    assert engine.kv_cache_usage == 0.0


def test_time_scale_divides_every_duration() -> None:
    slow = V1Engine(_config())
    fast = V1Engine(_config(time_scale=10.0))
    a = slow.submit("a", 100, 20, now=0.0)
    b = fast.submit("a", 100, 20, now=0.0)
    _drain(slow)
    _drain(fast)
    assert a.finish_time == pytest.approx(10 * (b.finish_time or 0.0))


def test_bad_configuration_and_requests() -> None:
    with pytest.raises(ConfigError):
        _config(max_num_batched_tokens=4)  # below max_num_seqs
    with pytest.raises(ConfigError):
        _config(num_gpu_blocks=10, max_model_len=8192)
    with pytest.raises(ConfigError):
        _config(prefix_hit_ratio=1.5)
    with pytest.raises(ConfigError):
        CostModel(-1.0, 0.0, 0.0)
    engine = V1Engine(_config(max_model_len=100))
    with pytest.raises(EngineError):
        engine.submit("x", 90, 20, now=0.0)
    with pytest.raises(EngineError):
        engine.submit("x", 0, 20, now=0.0)
    engine.advance(1.0)
    with pytest.raises(EngineError):
        engine.advance(0.5)
