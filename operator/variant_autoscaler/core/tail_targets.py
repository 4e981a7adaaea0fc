"""Targets on shares of requests ("99 % of requests with the first token within 1 s"), for the tail model
(:mod:`variant_autoscaler.core.tail`): what a service class's percentiles and attainment mean as budgets.

Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from variant_autoscaler.core.analyzer import SLO
from variant_autoscaler.core.queueing import TargetPerf
from variant_autoscaler.errors import ModelError

__all__ = ["TailTargets", "checked_number"]


def checked_number(name: str, value: object, minimum: float = 0.0) -> float:
    """``value`` as a float, or a :class:`ModelError` naming ``name`` unless it is a finite number at
    least ``minimum`` (booleans refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not minimum <= value < math.inf:
        raise ModelError(f"{name} must be a finite number >= {minimum:g}, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class TailTargets:
    """Targets on shares of requests: at most ``ttft_miss`` of them over ``ttft`` ms, at most
    ``itl_miss`` over ``itl`` ms (per-request mean ITL), at most ``joint_miss`` over either. A budget of
    0 leaves that constraint out (a target without any budget is WVA's mean target, sized by the
    analyzer)."""

    ttft: float = 0.0
    itl: float = 0.0
    ttft_miss: float = 0.0
    itl_miss: float = 0.0
    joint_miss: float = 0.0

    def __post_init__(self) -> None:
        for name in ("ttft", "itl"):
            checked_number(f"{name} target", getattr(self, name))
        for name in ("ttft_miss", "itl_miss", "joint_miss"):
            value = checked_number(name, getattr(self, name))
            if value >= 1.0:
                raise ModelError(f"{name} must be a share below 1, got {value:g}")

    @classmethod
    def from_slo(cls, slo: SLO) -> TailTargets:
        """The tail part of an SLO: its percentiles and its attainment (percent of requests meeting both
        targets)."""
        ttft_p, itl_p, attainment = slo.ttft_percentile, slo.itl_percentile, slo.attainment
        return cls(
            ttft=slo.ttft,
            itl=slo.itl,
            ttft_miss=1.0 - ttft_p / 100.0 if ttft_p > 0 and slo.ttft > 0 else 0.0,
            itl_miss=1.0 - itl_p / 100.0 if itl_p > 0 and slo.itl > 0 else 0.0,
            joint_miss=1.0 - attainment / 100.0 if attainment > 0 else 0.0,
        )

    @property
    def is_tail(self) -> bool:
        """Whether any share is bounded (else everything is a mean target)."""
        return self._ttft_bounded or self._itl_bounded

    @property
    def _ttft_bounded(self) -> bool:
        return self.ttft > 0 and (self.ttft_miss > 0 or self.joint_miss > 0)

    @property
    def _itl_bounded(self) -> bool:
        return self.itl > 0 and (self.itl_miss > 0 or self.joint_miss > 0)

    def mean_targets(self, tps: float = 0.0) -> TargetPerf:
        """The targets left to the mean analyzer: those without a share budget (WVA's meaning)."""
        return TargetPerf(
            ttft=0.0 if self._ttft_bounded else self.ttft,
            itl=0.0 if self._itl_bounded else self.itl,
            tps=tps,
        )

    def describe(self) -> str:
        parts = []
        if self.ttft > 0:
            share = f" for {100 * (1 - self.ttft_miss):g} %" if self.ttft_miss else ""
            parts.append(f"TTFT ≤ {self.ttft:g} ms{share}")
        if self.itl > 0:
            share = f" for {100 * (1 - self.itl_miss):g} %" if self.itl_miss else ""
            parts.append(f"ITL ≤ {self.itl:g} ms{share}")
        text = ", ".join(parts)
        if self.joint_miss:
            text += f"; {100 * (1 - self.joint_miss):g} % of requests within both"
        return text
