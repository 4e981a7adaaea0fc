"""Token-length distributions, written as short specs on the command line.

=========================  ==================================================================
spec                       meaning
=========================  ==================================================================
``128`` or ``fixed:128``   always 128
``uniform:64:256``         uniform integer in [64, 256]
``exponential:128``        geometric (discrete exponential) with mean 128, at least 1
``lognormal:128:1.0``      log-normal with mean 128 and log-space sigma 1.0, rounded, at least 1
``sharegpt``               long-tailed, ShareGPT-like: ``lognormal`` with sigma 1.0 and mean 256
``sharegpt:MEAN``          the same with another mean
=========================  ==================================================================

Every distribution is sampled with a caller-supplied :class:`random.Random`, so a seed makes a run
reproducible. ``sharegpt`` is a shape, not a replay of the dataset: conversation lengths in ShareGPT
are heavy-tailed (most prompts short, a few very long), which a log-normal with sigma 1 reproduces
(p99 about 10 times the median).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from vllm_emulator.errors import ConfigError

__all__ = ["LengthDistribution", "parse_distribution"]

_SHAREGPT_SIGMA = 1.0
_SHAREGPT_MEAN = 256.0


@dataclass(frozen=True, slots=True)
class LengthDistribution:
    """A distribution of positive token counts; build it with :func:`parse_distribution`."""

    kind: str
    a: float
    b: float = 0.0
    spec: str = ""

    @property
    def mean(self) -> float:
        """The distribution's mean (before any caller-side capping)."""
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        return self.a

    def sample(self, rng: random.Random) -> int:
        """One value, always >= 1."""
        kind = self.kind
        if kind == "fixed":
            return int(self.a)
        if kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        if kind == "exponential":
            # geometric on {1, 2, ...} with mean a: P(k) = p(1-p)^(k-1), p = 1/a
            if self.a <= 1:
                return 1
            u = 1.0 - rng.random()  # (0, 1]
            return 1 + int(math.log(u) / math.log1p(-1.0 / self.a))
        # lognormal with the given mean: mu = ln(mean) - sigma^2/2
        sigma = self.b
        mu = math.log(self.a) - 0.5 * sigma * sigma
        return max(1, round(rng.lognormvariate(mu, sigma)))

    def __str__(self) -> str:
        return self.spec or f"{self.kind}:{self.a:g}"


def _number(text: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"bad number {text!r} in length distribution {spec!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"bad number {text!r} in length distribution {spec!r}")
    return value


def _integer(text: str, spec: str) -> int:
    value = _number(text, spec)
    if value != int(value):
        raise ConfigError(f"{text!r} must be an integer in length distribution {spec!r}")
    return int(value)


def parse_distribution(spec: str) -> LengthDistribution:
    """Parse a spec (see the module doc); raises :class:`~vllm_emulator.errors.ConfigError` if invalid."""
    text = spec.strip()
    if not text:
        raise ConfigError("empty length distribution")
    head, _, rest = text.partition(":")
    args = [part.strip() for part in rest.split(":")] if rest else []
    name = head.strip().lower()
    if name not in {"fixed", "uniform", "exponential", "lognormal", "sharegpt"}:
        if args:
            raise ConfigError(
                f"unknown length distribution {head!r} in {spec!r}: use fixed, uniform, exponential, "
                "lognormal or sharegpt"
            )
        name, args = "fixed", [head]
    if name == "fixed":
        if len(args) != 1:
            raise ConfigError(f"use fixed:N, got {spec!r}")
        n = _integer(args[0], spec)
        if n < 1:
            raise ConfigError(f"a fixed length must be >= 1, got {spec!r}")
        return LengthDistribution("fixed", n, spec=text)
    if name == "uniform":
        if len(args) != 2:
            raise ConfigError(f"use uniform:LOW:HIGH, got {spec!r}")
        low, high = _integer(args[0], spec), _integer(args[1], spec)
        if not 1 <= low <= high:
            raise ConfigError(f"uniform needs 1 <= LOW <= HIGH, got {spec!r}")
        return LengthDistribution("uniform", low, high, spec=text)
    if name == "exponential":
        if len(args) != 1:
            raise ConfigError(f"use exponential:MEAN, got {spec!r}")
        mean = _number(args[0], spec)
        if mean < 1:
            raise ConfigError(f"exponential needs MEAN >= 1, got {spec!r}")
        return LengthDistribution("exponential", mean, spec=text)
    if name == "lognormal":
        if len(args) != 2:
            raise ConfigError(f"use lognormal:MEAN:SIGMA, got {spec!r}")
        mean, sigma = _number(args[0], spec), _number(args[1], spec)
        if mean < 1 or not 0 < sigma <= 4:
            raise ConfigError(f"lognormal needs MEAN >= 1 and 0 < SIGMA <= 4, got {spec!r}")
        return LengthDistribution("lognormal", mean, sigma, spec=text)
    # sharegpt
    if len(args) > 1:
        raise ConfigError(f"use sharegpt or sharegpt:MEAN, got {spec!r}")
    mean = _number(args[0], spec) if args else _SHAREGPT_MEAN
    if mean < 1:
        raise ConfigError(f"sharegpt needs MEAN >= 1, got {spec!r}")
    return LengthDistribution("lognormal", mean, _SHAREGPT_SIGMA, spec=text)
