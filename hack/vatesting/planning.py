"""A planner request over the shipped ConfigMaps (accelerator costs and service classes), as the planner
tests build it; a test states only the variants and what it varies."""

from __future__ import annotations

from variant_autoscaler.api.config import parse_main_config
from variant_autoscaler.api.configmaps import ServiceClasses, parse_accelerator_costs, parse_service_classes
from variant_autoscaler.planner import PlannedVariant, PlanRequest, optimizer_config
from vatesting.fakes import load_yaml

__all__ = ["SHIPPED_CLASSES", "SHIPPED_COSTS", "plan_request"]

SHIPPED_COSTS = parse_accelerator_costs(
    load_yaml("deploy/manager/configmap-accelerator-unitcost.yaml")["data"]
)
SHIPPED_CLASSES = parse_service_classes(load_yaml("deploy/manager/configmap-serviceclass.yaml")["data"])


def plan_request(
    *variants: PlannedVariant,
    capacity: dict[str, int] | None = None,
    classes: ServiceClasses = SHIPPED_CLASSES,
    saturation_floor: bool = False,
    **main_config: str,
) -> PlanRequest:
    """``variants`` planned with the shipped costs and ``classes``, the optimizer configured from the main
    ConfigMap's ``main_config`` keys (none: its defaults)."""
    return PlanRequest(
        variants=variants,
        accelerators=SHIPPED_COSTS.accelerators,
        classes=classes,
        optimizer=optimizer_config(parse_main_config(main_config)),
        capacity=capacity,
        saturation_floor=saturation_floor,
    )
