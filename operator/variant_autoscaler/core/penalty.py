"""WVA's transition penalty (wva.md §6.1): what it costs to move a variant from its current allocation.

Unlimited mode picks, per variant, the candidate with the lowest *value* = this penalty, exactly as
WVA's ``Allocation.TransitionPenalty`` and ``Solver.SolveUnlimited`` do.
"""

from __future__ import annotations

from collections.abc import Mapping

from variant_autoscaler.core.model import AcceleratorType, VariantInput

__all__ = ["ACCEL_PENALTY_FACTOR", "current_cost", "transition_penalty"]

#: WVA's ``AccelPenaltyFactor``: switching accelerator costs 10 % of the old plus the new cost.
ACCEL_PENALTY_FACTOR = 0.1


def transition_penalty(
    *,
    current_accelerator: str,
    current_replicas: int,
    current_cost: float,
    new_accelerator: str,
    new_replicas: int,
    new_cost: float,
) -> float:
    """Penalty of moving from the current allocation to a new one.

    * same accelerator and replicas: 0;
    * same accelerator, other replicas: ``new_cost - current_cost``;
    * other accelerator: ``0.1 · (current_cost + new_cost) + (new_cost - current_cost)``.

    An empty accelerator name (``""``) stands for "no allocation", as in WVA.
    """
    if current_accelerator == new_accelerator:
        if current_replicas == new_replicas:
            return 0.0
        return new_cost - current_cost
    return ACCEL_PENALTY_FACTOR * (current_cost + new_cost) + (new_cost - current_cost)


def current_cost(variant: VariantInput, accelerators: Mapping[str, AcceleratorType]) -> float:
    """Cost of the current allocation as WVA's collector computes it: ``replicas × unit cost``.

    WVA does not multiply by the profile's ``accCount`` here (it does for candidates); we keep that so
    that unlimited mode chooses as WVA does. An unknown or missing accelerator costs 0.
    """
    if not variant.current_accelerator:
        return 0.0
    accelerator = accelerators.get(variant.current_accelerator)
    if accelerator is None:
        return 0.0
    return variant.current_replicas * accelerator.cost
