"""Prompts for ``vllm-loadgen``: exact token counts, unique content, optional shared prefixes.

Real traffic shares prefixes: an application sends the same system prompt (instructions, few-shot
examples, a tool list) before every user message, and a few such applications make up most of a
server's load. :class:`PromptBuilder` reproduces that: ``groups`` shared prefixes, whose lengths are
drawn once from a distribution, chosen with Zipf popularity (the first twice as often as the second,
three times as often as the third, ...) by a fraction ``share`` of the requests. The rest of every
prompt is unique: it opens with three random number tokens, so two requests share exactly their
group's prefix and nothing more (a server's prefix cache then hits on whole blocks of the prefix).

Text comes from :func:`~vllm_emulator.tokenizer.generate_text`, one token per word, so a prompt of
``n`` tokens is exactly ``n`` tokens for the emulator's tokenizer (and close to it for a real one).
"""

from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import dataclass

from vllm_emulator.distributions import LengthDistribution
from vllm_emulator.errors import ConfigError
from vllm_emulator.tokenizer import generate_text

__all__ = ["PromptBuilder", "PromptSharing"]

_NONCE_TOKENS = 3


@dataclass(frozen=True, slots=True)
class PromptSharing:
    """Shared prefixes: their length distribution, how many there are and who uses them."""

    prefix_tokens: LengthDistribution
    groups: int = 4
    share: float = 1.0
    zipf: float = 1.0

    def __post_init__(self) -> None:
        if self.groups < 1:
            raise ConfigError(f"prefix groups must be >= 1, got {self.groups}")
        if not 0.0 <= self.share <= 1.0:
            raise ConfigError(f"prefix share must be in [0, 1], got {self.share}")
        if self.zipf < 0:
            raise ConfigError(f"prefix zipf exponent must be >= 0, got {self.zipf}")


class PromptBuilder:
    """Builds prompt texts of a given token count; see the module doc."""

    def __init__(self, sharing: PromptSharing | None, seed: int) -> None:
        self._sharing = sharing
        self._prefixes: list[tuple[int, int]] = []  # (tokens, offset in the word cycle) per group
        self._cumulative: list[float] = []
        if sharing is not None:
            rng = random.Random(f"prefixes-{seed}")
            for _ in range(sharing.groups):
                self._prefixes.append((sharing.prefix_tokens.sample(rng), rng.randrange(1 << 16)))
            weights = [1.0 / (k + 1) ** sharing.zipf for k in range(sharing.groups)]
            self._cumulative = list(itertools.accumulate(weights))

    def text(self, rng: random.Random, tokens: int) -> tuple[str, int]:
        """A prompt of exactly ``tokens`` tokens, and how many of them are a shared prefix."""
        shared = 0
        head = ""
        sharing = self._sharing
        if sharing is not None and rng.random() < sharing.share:
            group = bisect.bisect_left(self._cumulative, rng.random() * self._cumulative[-1])
            length, offset = self._prefixes[min(group, len(self._prefixes) - 1)]
            shared = max(0, min(length, tokens - 1))
            head = generate_text(shared, offset)
        rest = tokens - shared
        nonce = min(_NONCE_TOKENS, rest)
        unique = "".join(f" {rng.randrange(1000):03d}" for _ in range(nonce))
        return head + unique + generate_text(rest - nonce, rng.randrange(1 << 16)), shared
