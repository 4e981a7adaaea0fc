"""Argument types shared by the commands: numbers that must be finite and within bounds.

argparse calls them with the flag's text; a bad value is reported as argparse reports any bad flag
(``variant-autoscaler <command>: error: argument --rate: ...``, exit 2), before anything runs.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["count", "number"]


def number(
    *, minimum: float = 0.0, above: bool = False, below: float | None = None
) -> Callable[[str], float]:
    """A finite float ``>= minimum`` (``> minimum`` with ``above``), and ``< below`` when given."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if value < minimum or (above and value == minimum):
            raise argparse.ArgumentTypeError(f"{text!r} must be {'>' if above else '>='} {minimum:g}")
        if below is not None and value >= below:
            raise argparse.ArgumentTypeError(f"{text!r} must be < {below:g}")
        return value

    return parse


def count(*, minimum: int = 0, maximum: int = 2**31 - 1) -> Callable[[str], int]:
    """A whole number within ``[minimum, maximum]`` (int32 by default, as Kubernetes counts)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"{text!r} must be between {minimum} and {maximum}")
        return value

    return parse
