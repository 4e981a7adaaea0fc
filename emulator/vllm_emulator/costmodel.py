"""Step time of the V1-like engine: a fixed part, a part per batched token, a part per context token.

One engine step (a forward pass over every scheduled token) lasts, in milliseconds::

    step = fixed_ms + token_ms · (tokens scheduled in the step) + context_ms · (attention context)

where the attention context is the sum, over the requests in the step, of their KV length once the
step is done (a decoding request with 900 tokens of prompt and output adds 900; a prefill chunk adds
the tokens computed before it plus the chunk). The fixed part is what every step pays whatever its
size (reading the weights, launching kernels); the token part is the compute of the batched tokens;
the context part is reading the KV cache in attention. Prefill attention's quadratic compute is not
modelled (it matters only for prompts of many thousands of tokens).

:data:`PRESETS` holds the three coefficients (and vLLM's defaults that go with the GPU) for a few
model × GPU pairs, fitted on published measurements; docs/emulator.md gives each source and says
which coefficients are estimates. :func:`from_profile` maps a WVA-style profile (α, β, γ, δ) onto
the three coefficients, for deployments that only have a hand profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vllm_emulator.errors import ConfigError

__all__ = ["PRESETS", "CostModel", "Preset", "from_profile", "preset"]


@dataclass(frozen=True, slots=True)
class CostModel:
    """Step-time coefficients in milliseconds (see the module doc)."""

    fixed_ms: float
    token_ms: float
    context_ms: float

    def __post_init__(self) -> None:
        for name in ("fixed_ms", "token_ms", "context_ms"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"step cost {name} must be a finite number >= 0, got {value!r}")
        if self.fixed_ms + self.token_ms <= 0:
            raise ConfigError("step cost fixed_ms + token_ms must be > 0: a step must take some time")

    def step_ms(self, tokens: float, context: float) -> float:
        return self.fixed_ms + self.token_ms * tokens + self.context_ms * context

    def describe(self) -> str:
        return f"fixed={self.fixed_ms:g}ms token={self.token_ms:g}ms context={self.context_ms:g}ms"


@dataclass(frozen=True, slots=True)
class Preset:
    """A model × GPU pair: its step costs and the vLLM settings that come with the GPU."""

    cost: CostModel
    max_num_batched_tokens: int
    """vLLM's default for the OpenAI server on this GPU (8192 at >= 70 GiB except A100, else 2048)."""
    kv_cache_tokens: int
    """KV-cache capacity in tokens at vLLM's default memory utilisation (an estimate, see the docs)."""
    source: str


PRESETS: dict[str, Preset] = {
    # Llama-3.1-8B (BF16, 128 KiB of KV per token) on one H100 80GB SXM: TPOT 6.48 / 6.59 ms at 1 / 4
    # concurrent requests, TTFT 14 ms at 1 (vLLM 0.21). Context part from the KV bytes per token at the
    # bandwidth efficiency the fixed part implies; token part at ~50 % of BF16 peak (estimate).
    "llama-3.1-8b/h100-80gb": Preset(
        CostModel(fixed_ms=6.4, token_ms=0.03, context_ms=5.3e-5),
        max_num_batched_tokens=8192,
        kv_cache_tokens=440_000,
        source="yobitelcomm bench concurrency-sweep recipe (H100-80GB-HBM3, vLLM 0.21.0)",
    ),
    # Llama-3.1-8B on one A100 40GB: 75 tokens/s at one request (13.3 ms per token, 1024 in / 128
    # out, vLLM 0.23). Token part from the BF16 peak at ~55 % (estimate).
    "llama-3.1-8b/a100-40gb": Preset(
        CostModel(fixed_ms=13.15, token_ms=0.094, context_ms=1.09e-4),
        max_num_batched_tokens=2048,
        kv_cache_tokens=150_000,
        source="johnmusgrave.com, vLLM throughput-latency sweep on NVIDIA A100 (40GB, vLLM 0.23.0)",
    ),
    # The 40GB figures scaled by memory bandwidth to the 80GB PCIe card (1.935 vs 1.555 TB/s): an
    # estimate, no measurement of this pair was found.
    "llama-3.1-8b/a100-80gb": Preset(
        CostModel(fixed_ms=10.57, token_ms=0.094, context_ms=8.8e-5),
        max_num_batched_tokens=2048,
        kv_cache_tokens=440_000,
        source="estimate: the A100 40GB measurement scaled by memory bandwidth",
    ),
    # Qwen2.5-0.5B-Instruct (12 KiB of KV per token) on one L4: ITL p50 5.1 ms at 1 and 7.1 ms at 32
    # concurrent requests, 256 in / 128 out (vLLM 0.23). Context part from bandwidth (estimate).
    "qwen2.5-0.5b/l4": Preset(
        CostModel(fixed_ms=5.0, token_ms=0.04, context_ms=6.3e-5),
        max_num_batched_tokens=2048,
        kv_cache_tokens=1_600_000,
        source="ai.wmx.dev/benchmarks (1x NVIDIA L4, Qwen/Qwen2.5-0.5B-Instruct, vLLM v0.23.0)",
    ),
}


def preset(name: str) -> Preset:
    """The preset called ``name`` (case-insensitive); ConfigError naming the known ones otherwise."""
    found = PRESETS.get(name.strip().lower())
    if found is None:
        raise ConfigError(f"unknown hardware preset {name!r}; known: {', '.join(sorted(PRESETS))}")
    return found


def from_profile(
    alpha: float, beta: float, gamma: float, delta: float, *, context_tokens: int = 256
) -> CostModel:
    """Step costs that reproduce a WVA profile at ``context_tokens`` of context per request.

    ``decode(b) = α + β·b`` becomes ``α + b·(token_ms + context_ms·context)``, and a lone prefill of
    ``L`` tokens, ``γ + δ·L``, becomes ``α + token_ms·L``: so ``fixed_ms = α``, ``token_ms =
    min(δ, β)`` and the rest of β goes to the context part at ``context_tokens`` tokens (a request
    with a shorter context decodes faster than the profile says, a longer one slower). γ is not used:
    in a V1 engine a prefill runs inside a step, whose fixed part is α.
    """
    if context_tokens < 1:
        raise ConfigError(f"context_tokens must be >= 1, got {context_tokens}")
    token = min(delta, beta)
    context = (beta - token) / context_tokens
    if alpha + token <= 0:
        # A profile with α = 0 and δ = 0 still needs a step time; γ stands in for the fixed part.
        return CostModel(fixed_ms=gamma if gamma > 0 else 1e-3, token_ms=token, context_ms=context)
    return CostModel(fixed_ms=alpha, token_ms=token, context_ms=context)
