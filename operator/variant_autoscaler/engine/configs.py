"""One cycle's configuration: every ConfigMap of every WVA generation, read live, and the config file.

Per cycle one LIST of the operator namespace's ConfigMaps (whatever the number of variants), from which:

* the main configuration under each of its names, weakest first, or only ``CONFIG_MAP_NAME``'s, merged
  key by key with the ``--config-file`` (read once, at the first cycle) and the environment
  (:mod:`variant_autoscaler.api.main_config_sources`; an invalid value is a configuration error: every
  VA keeps its last decision and says why);
* ``accelerator-unit-costs`` and ``service-classes-config``, optional since WVA v0.4 (absent: empty; a
  variant that needs them says so in its conditions);
* the saturation, scale-to-zero and queueing-model ConfigMaps, each the first of its names found.

What could not be read (unknown keys, skipped entries) is logged once per distinct message, never fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from variant_autoscaler.adapters.kube import KubeClient
from variant_autoscaler.api.config import MainConfig, parse_main_config
from variant_autoscaler.api.configmaps import (
    AcceleratorCosts,
    ServiceClasses,
    parse_accelerator_costs,
    parse_service_classes,
)
from variant_autoscaler.api.main_config_sources import merge_main_config, read_config_file
from variant_autoscaler.api.queueing_config import (
    QUEUEING_CONFIG_MAP_NAMES,
    QueueingModelConfig,
    parse_queueing_config,
)
from variant_autoscaler.api.saturation_config import (
    SATURATION_CONFIG_MAP_NAMES,
    SaturationConfig,
    parse_saturation_config,
)
from variant_autoscaler.api.scale_to_zero_config import (
    SCALE_TO_ZERO_CONFIG_MAP_NAMES,
    ScaleToZero,
    ScaleToZeroConfig,
    parse_scale_to_zero_config,
)
from variant_autoscaler.api.wva_entries import OnceLog
from variant_autoscaler.errors import ConfigError, KubeError
from variant_autoscaler.settings import Settings

__all__ = ["ConfigReader", "CycleConfig"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CycleConfig:
    """Everything configurable one cycle decides with. ``error``: the main configuration is unusable
    (every variant holds and reports it)."""

    main: MainConfig
    error: str | None = None
    accelerators: AcceleratorCosts = field(default_factory=lambda: AcceleratorCosts({}))
    classes: ServiceClasses = field(default_factory=lambda: ServiceClasses(()))
    saturation: SaturationConfig = field(default_factory=SaturationConfig)
    scale_to_zero: ScaleToZeroConfig = field(default_factory=ScaleToZeroConfig)
    queueing: QueueingModelConfig = field(default_factory=QueueingModelConfig)
    #: Where the main configuration came from, weakest first (for the log).
    sources: tuple[str, ...] = ()
    #: Every ConfigMap of the operator namespace as listed, by name (None: the list failed).
    listed: Mapping[str, Mapping[str, Any]] | None = None

    def zero_for(self, model_id: str, namespace: str) -> ScaleToZero:
        """Scale to zero for a model: its ConfigMap entry, else ``WVA_SCALE_TO_ZERO`` (main config and
        environment, as merged)."""
        return self.scale_to_zero.for_model(
            model_id, namespace, env_default="true" if self.main.scale_to_zero else "false"
        )


def _first(
    found: Mapping[str, Mapping[str, Any]], names: Sequence[str]
) -> tuple[str, Mapping[str, Any]] | None:
    for name in names:
        if name in found:
            return name, found[name]
    return None


class ConfigReader:
    """Reads the ConfigMaps each cycle; logs each distinct problem once."""

    def __init__(self, settings: Settings, kube: KubeClient) -> None:
        self.settings = settings
        self.kube = kube
        self.once = OnceLog()
        self._file: tuple[str, Mapping[str, str]] | None = None
        self._file_error: str | None = None
        self._file_read = False

    def _config_file(self) -> None:
        """The ``--config-file``, read once (start-up semantics, as WVA's)."""
        if self._file_read:
            return
        self._file_read = True
        path = self.settings.config_file
        if not path:
            return
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self._file_error = f"config file {path}: {exc}"
            return
        values, problems = read_config_file(path, text)
        self._warn(problems)
        self._file = (path, values)

    def _warn(self, problems: Sequence[str]) -> None:
        for message in self.once.new(problems):
            logger.warning("configuration: %s", message)

    async def read(self) -> CycleConfig:
        """This cycle's configuration (a failed LIST keeps the main configuration's defaults and reports
        it as a configuration error)."""
        self._config_file()
        ns = self.settings.operator_namespace
        try:
            listed = await self.kube.list_configmaps(ns)
        except KubeError as exc:
            return CycleConfig(MainConfig(), error=f"cannot list the ConfigMaps of {ns}: {exc}")
        found = {str((cm.get("metadata") or {}).get("name")): dict(cm.get("data") or {}) for cm in listed}
        sources = merge_main_config(
            [(name, found.get(name)) for name in self.settings.main_config_map_names], self._file
        )
        self._warn(sources.problems)
        error = self._file_error
        try:
            main = parse_main_config(sources.data, env=self.settings.config_env())
        except ConfigError as exc:
            main = MainConfig()
            where = ", ".join(sources.sources) or f"ConfigMap {self.settings.config_map_name}"
            error = error or f"{where}: {exc}"
        costs = parse_accelerator_costs(found.get(self.settings.accelerator_costs_config_map) or {})
        classes = parse_service_classes(found.get(self.settings.service_classes_config_map) or {})
        self._warn([*costs.problems, *classes.problems])
        bodies = {str((cm.get("metadata") or {}).get("name")): cm for cm in listed}
        out = CycleConfig(main, error, costs, classes, sources=sources.sources, listed=bodies)
        if (sat := _first(found, SATURATION_CONFIG_MAP_NAMES)) is not None:
            out = replace(out, saturation=parse_saturation_config(sat[1], name=sat[0]))
        if (zero := _first(found, SCALE_TO_ZERO_CONFIG_MAP_NAMES)) is not None:
            out = replace(out, scale_to_zero=parse_scale_to_zero_config(zero[1], name=zero[0]))
        if (queueing := _first(found, QUEUEING_CONFIG_MAP_NAMES)) is not None:
            out = replace(out, queueing=parse_queueing_config(queueing[1], name=queueing[0]))
        self._warn([*out.saturation.problems, *out.scale_to_zero.problems, *out.queueing.problems])
        return out
