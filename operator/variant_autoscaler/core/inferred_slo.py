"""SLOs inferred from a profile: WVA's ``sloMultiplier`` for models whose ConfigMap entry states none.

WVA's queueing-model ConfigMap (v0.6-v0.8) let a model go without ``targetTTFT``/``targetITL``: its SLOs
were then derived from the model's parameters with a multiplier ``k`` (``sloMultiplier``, default 3),
chosen so that a server sized to them runs at the utilisation ``ρ = 1 − 1/k`` (k = 3: two thirds of
what it could sustain). WVA wrote that as closed formulas in its own (later, three-parameter) model.

Here the same contract is kept with the model we size by: the targets are the mean TTFT and ITL the
queueing model predicts for one replica loaded to ``ρ`` of the largest rate it sustains, for the
request lengths the variant serves. Latency grows with load, so sizing to those targets loads each
replica to exactly ``ρ`` of its capacity: the meaning WVA gave ``k``, whatever the parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from variant_autoscaler.core.analyzer import SLO
from variant_autoscaler.core.model import Profile
from variant_autoscaler.core.queueing import RequestSize, cached_analyzer
from variant_autoscaler.errors import ModelError

__all__ = ["InferredSLO", "infer_slo"]


@dataclass(frozen=True, slots=True)
class InferredSLO:
    """The targets (``slo``, mean semantics), the utilisation they stand for, and the profile (its
    accelerator) and request lengths they were inferred from."""

    slo: SLO
    utilisation: float
    accelerator: str
    input_tokens: float
    output_tokens: float

    def describe(self) -> str:
        """E.g. ``ITL ≤ 31.4 ms, TTFT ≤ 212 ms: 67 % of what one A100 replica sustains (...)``."""
        return (
            f"{self.slo.describe()}: "
            f"{100.0 * self.utilisation:.0f} % of what one {self.accelerator} replica sustains "
            f"({self.input_tokens:.0f} in / {self.output_tokens:.0f} out tokens)"
        )


def _round_up(value: float) -> float:
    """Up to three significant digits: the targets do not move with every small change of the lengths,
    and never fall below the point they stand for (which could leave nothing feasible at a small k)."""
    step = 10.0 ** (math.floor(math.log10(value)) - 2)
    return float(f"{math.ceil(value / step - 1e-9) * step:.3g}")


def infer_slo(
    profile: Profile,
    multiplier: float,
    input_tokens: float,
    output_tokens: float,
    *,
    max_batch_size: int | None = None,
) -> InferredSLO:
    """The mean TTFT and ITL targets (ms) that load one replica of ``profile`` to ``1 − 1/multiplier`` of
    the largest rate it sustains, for requests of these mean lengths (tokens). ``max_batch_size``
    overrides the profile's, as the server's own setting does.

    Raises :class:`~variant_autoscaler.errors.ModelError` for a multiplier not above 1, lengths that are
    not positive, or a profile the model cannot analyse.
    """
    if isinstance(multiplier, bool) or not (math.isfinite(multiplier) and multiplier > 1.0):
        raise ModelError(f"sloMultiplier must be a number greater than 1, got {multiplier!r}")
    for name, tokens in (("input", input_tokens), ("output", output_tokens)):
        if not (math.isfinite(tokens) and tokens > 0):
            raise ModelError(f"SLOs inferred from a profile need the mean {name} length, got {tokens!r}")
    batch = max_batch_size if max_batch_size is not None else profile.max_batch_size
    analyzer = cached_analyzer(batch, None, profile.parms, RequestSize(input_tokens, output_tokens))
    utilisation = 1.0 - 1.0 / multiplier
    at = analyzer.analyze(utilisation * analyzer.rate_range[1])
    ttft = at.avg_wait_time + at.avg_prefill_time  # the TTFT the sizing bounds
    return InferredSLO(
        slo=SLO(ttft=_round_up(ttft), itl=_round_up(at.itl)),
        utilisation=utilisation,
        accelerator=profile.accelerator,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )
