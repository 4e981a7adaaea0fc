"""The KV cache's batch ceiling (core/kvcache.py): what a running sequence holds, block rounding, the
margin, and no ceiling where the cache or the lengths are unknown."""

from __future__ import annotations

import math

import pytest

from variant_autoscaler.core.kvcache import (
    DEFAULT_OUTPUT_CV2,
    KV_HEADROOM,
    KVCache,
    batch_ceiling,
    coarse,
    held_tokens,
)
from variant_autoscaler.core.workload import TokenLengths


def _simulated_mean_held(prompt: int, outputs: list[int]) -> float:
    """What running sequences hold on average, counted step by step: each request spends one step per
    output token in the batch, holding its prompt then one more token per decode."""
    held = [prompt + k for out in outputs for k in range(out)]
    return sum(held) / len(held)


def test_fixed_lengths_hold_the_prompt_and_half_the_output() -> None:
    assert held_tokens(100.0, 201.0, output_cv2=0.0) == 100.0 + 100.0
    assert held_tokens(100.0, 201.0, output_cv2=0.0) == _simulated_mean_held(100, [201] * 3)


def test_spread_outputs_weigh_the_long_ones_by_their_time_in_the_batch() -> None:
    outputs = [10, 50, 300]  # a running batch finds the 300-token request far more often
    mean = sum(outputs) / 3
    cv2 = (sum(o * o for o in outputs) / 3 - mean**2) / mean**2
    assert held_tokens(100.0, mean, output_cv2=cv2) == pytest.approx(_simulated_mean_held(100, outputs))
    assert held_tokens(100.0, mean, output_cv2=cv2) > held_tokens(100.0, mean, output_cv2=0.0)
    # Only the means known: exponential-like outputs, the final length's mean less half a token.
    assert DEFAULT_OUTPUT_CV2 == 1.0 and held_tokens(100.0, 200.0) == 100.0 + 200.0 - 0.5


def test_the_ceiling_rounds_each_sequence_to_blocks_and_keeps_a_margin() -> None:
    cache = KVCache(num_gpu_blocks=1000, block_size=16)
    ceiling = batch_ceiling(cache, 500.0, 200.0)
    assert ceiling is not None
    per_sequence = 500.0 + 199.5 + 7.5  # held, plus half a block (15 / 2) of rounding
    assert ceiling.per_sequence == per_sequence
    assert ceiling.batch == math.floor(KV_HEADROOM * 16_000 / per_sequence) == 20
    # Without the margin it would be the plain quotient.
    assert batch_ceiling(cache, 500.0, 200.0, headroom=1.0) == type(ceiling)(22, per_sequence)


def test_a_measured_output_distribution_replaces_the_assumed_spread() -> None:
    cache = KVCache(num_gpu_blocks=1000, block_size=16)
    fixed = batch_ceiling(cache, 500.0, 200.0, output=TokenLengths.fixed(200.0))
    assumed = batch_ceiling(cache, 500.0, 200.0)
    assert fixed is not None and assumed is not None
    assert fixed.per_sequence == 500.0 + 99.5 + 7.5 and fixed.batch > assumed.batch


def test_at_least_one_sequence_runs() -> None:
    tiny = batch_ceiling(KVCache(num_gpu_blocks=4, block_size=16), 4000.0, 100.0)
    assert tiny is not None and tiny.batch == 1


@pytest.mark.parametrize(
    ("cache", "avg_input", "avg_output"),
    [
        (None, 500.0, 200.0),  # the pods do not export vllm:cache_config_info
        (KVCache(1000, 16), 0.0, 0.0),  # no request measured in the window
        (KVCache(1000, 16), math.nan, 200.0),
    ],
)
def test_unknown_capacity_or_lengths_give_no_ceiling(
    cache: KVCache | None, avg_input: float, avg_output: float
) -> None:
    assert batch_ceiling(cache, avg_input, avg_output) is None


def test_a_cache_needs_blocks() -> None:
    with pytest.raises(ValueError):
        KVCache(num_gpu_blocks=0, block_size=16)


def test_the_ceiling_moves_in_coarse_steps_so_small_length_changes_keep_the_batch() -> None:
    assert [coarse(b) for b in (0, 1, 16, 17, 18, 33, 36, 39, 71, 72, 150)] == [
        1, 1, 16, 16, 18, 32, 36, 36, 64, 72, 144,
    ]  # fmt: skip
    cache = KVCache(num_gpu_blocks=6000, block_size=16)  # room for about 80 sequences of 1000 tokens
    batches = {b.batch for a in range(800, 821) if (b := batch_ceiling(cache, float(a), 200.0)) is not None}
    assert batches == {80}  # prompts from 800 to 820 tokens: the same batch
