"""The bundled scenarios (YAML files next to this module), as used by bench/policies.py.

``variant-autoscaler simulate --scenario NAME`` runs one; ``--dump-scenario NAME`` prints its file, a
starting point for your own.
"""

from __future__ import annotations

from importlib import resources

from variant_autoscaler.api.documents import load_document
from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.config import parse_scenario
from variant_autoscaler.sim.scenario import Scenario

__all__ = ["BUNDLED", "bundled_text", "load_bundled"]

BUNDLED: tuple[str, ...] = ("diurnal", "flash-crowd", "scarce", "node-failure")


def bundled_text(name: str) -> str:
    """The YAML text of a bundled scenario."""
    if name not in BUNDLED:
        raise ConfigError(f"no bundled scenario {name!r} (bundled: {', '.join(BUNDLED)})")
    return resources.files(__name__).joinpath(f"{name}.yaml").read_text(encoding="utf-8")


def load_bundled(name: str) -> Scenario:
    return parse_scenario(load_document(bundled_text(name), source=f"bundled scenario {name}"))
