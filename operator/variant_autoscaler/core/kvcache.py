"""The batch a replica's KV cache can hold, from its size and the measured request lengths. Pure.

A queueing profile's ``maxBatchSize`` (and vLLM's ``--max-num-seqs``) bounds the sequences a server runs
at once, but the server can only run as many as its KV cache holds: past that, vLLM's scheduler admits
no more, and running sequences that need a new block preempt the newest ones (recomputed later). Sized
with ``maxBatchSize`` alone, the model then predicts a concurrency the server never reaches.
:func:`batch_ceiling` is the largest batch whose sequences fit in the cache on average.

What a running sequence holds, on average over its life. A request with ``P`` prompt tokens and ``O``
output tokens holds ``P`` tokens after its prefill step and ``P + k`` while it decodes its ``k + 1``-th
output token (``k = 1 .. O - 1``): ``O`` steps in the batch, ``P + (O - 1) / 2`` tokens on average.
Sequences are found in a running batch in proportion to the steps they spend there (``O``), so the mean
over the batch weights each request by ``O`` (long outputs are over-represented)::

    held = E[O·P + O·(O - 1)/2] / E[O] = E[P] + (E[O²] / E[O] - 1) / 2     (P, O independent)
         = P̄ + (Ō·(1 + cv²) - 1) / 2                                      (cv: O's coefficient of variation)

With fixed output lengths (cv = 0) that is ``P̄ + (Ō - 1) / 2``; with exponential-like ones (cv = 1, what
the analyzer assumes when only the means are known, and close to chat traces: 0.77 in the Azure
conversation trace) ``P̄ + Ō - 1/2``. Block rounding: a sequence holds ``ceil(tokens / block_size)``
blocks, on average ``(block_size - 1) / 2`` tokens more than it uses. Margin: the sum over a batch
fluctuates about ``batch × held`` (by about ``cv / √batch``), so only :data:`KV_HEADROOM` of the cache
is planned for::

    ceiling = floor(KV_HEADROOM × num_gpu_blocks × block_size / (held + (block_size - 1) / 2))

rounded down to eight steps per doubling (``..., 15, 16, 18, 20, ..., 30, 32, 36, 40, ...``): the
measured lengths move a little every cycle, and a batch that moved with them would change the decision
(and its Event, and a batch patch) each time.

Prefix caching shares prompt blocks between sequences and lets more fit; it is not counted (the
ceiling errs low). If a server still preempts, the operator reads it as evidence and does not scale the
variant down (docs/operator.md, "KV cache").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from variant_autoscaler.core.workload import TokenLengths

__all__ = [
    "DEFAULT_OUTPUT_CV2",
    "KV_HEADROOM",
    "KVCache",
    "KVCeiling",
    "batch_ceiling",
    "coarse",
    "held_tokens",
]

#: The share of the KV cache planned for: the rest absorbs the batch's fluctuation about its mean.
KV_HEADROOM = 0.9
#: The squared coefficient of variation of output lengths assumed when only their mean is known
#: (exponential, as the analyzer assumes).
DEFAULT_OUTPUT_CV2 = 1.0


@dataclass(frozen=True, slots=True)
class KVCache:
    """One replica's KV cache as vLLM reports it (``vllm:cache_config_info``)."""

    num_gpu_blocks: int
    block_size: int

    def __post_init__(self) -> None:
        if self.num_gpu_blocks < 1 or self.block_size < 1:
            raise ValueError(f"a KV cache needs blocks and a block size >= 1, got {self}")

    @property
    def tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size


@dataclass(frozen=True, slots=True)
class KVCeiling:
    """The largest batch that fits (``batch``), and the tokens one running sequence takes on average,
    block rounding included (``per_sequence``)."""

    batch: int
    per_sequence: float


def held_tokens(avg_input: float, avg_output: float, output_cv2: float = DEFAULT_OUTPUT_CV2) -> float:
    """KV tokens a running sequence holds on average (the module doc's ``held``)."""
    output = max(avg_output, 1.0)
    return max(avg_input, 0.0) + max(output * (1.0 + max(output_cv2, 0.0)) - 1.0, 0.0) / 2.0


def batch_ceiling(
    cache: KVCache | None,
    avg_input: float,
    avg_output: float,
    *,
    output: TokenLengths | None = None,
    headroom: float = KV_HEADROOM,
) -> KVCeiling | None:
    """The largest batch whose sequences fit in ``cache`` on average (at least 1), for requests of
    ``avg_input`` prompt and ``avg_output`` output tokens; ``output``: the measured distribution of output
    lengths (its spread; without it :data:`DEFAULT_OUTPUT_CV2`). None when the cache or the lengths are
    unknown (no requests measured): no ceiling."""
    if cache is None or not (math.isfinite(avg_input) and math.isfinite(avg_output)):
        return None
    if avg_input <= 0 and avg_output <= 0:
        return None
    cv2 = DEFAULT_OUTPUT_CV2
    if output is not None and output.mean > 0:
        cv2 = output.variance / output.mean**2
    per_sequence = held_tokens(avg_input, avg_output, cv2) + (cache.block_size - 1) / 2.0
    batch = math.floor(headroom * cache.tokens / per_sequence)
    return KVCeiling(coarse(batch), per_sequence)


def coarse(batch: int) -> int:
    """``batch`` rounded down to eight steps per doubling (exact up to 16), at least 1."""
    if batch <= 16:
        return max(batch, 1)
    step = 1 << (batch.bit_length() - 4)  # 2 from 16, 4 from 32, 8 from 64, ...
    return batch - batch % step
