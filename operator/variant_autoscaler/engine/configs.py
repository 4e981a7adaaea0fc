"""One cycle's configuration: every ConfigMap of every WVA generation, read live, and the config file.

Per cycle one LIST of the operator namespace's ConfigMaps (whatever the number of variants), from which:

* the main configuration under each of its names, weakest first, or only ``CONFIG_MAP_NAME``'s, merged
  key by key with the ``--config-file`` (read once, at the first cycle) and the environment
  (:mod:`variant_autoscaler.api.main_config_sources`; an invalid value is a configuration error: every
  VA keeps its last decision and says why);
* ``accelerator-unit-costs`` and ``service-classes-config``, optional since WVA v0.4 (absent: empty; a
  variant that needs them says so in its conditions);
* the saturation, scale-to-zero and queueing-model ConfigMaps, each the first of its names found (only
  the one named by WVA's ``SATURATION_CONFIG_MAP_NAME`` / ``QUEUEING_MODEL_CONFIG_MAP_NAME`` when set).

Cluster-wide, the same cycle lists the namespaces once: one annotated ``wva.llmd.ai/exclude: "true"`` is
left alone (WVA's rule; a namespaced install serves what it is given, as WVA's ``--watch-namespace``).
Once the variants are known, :meth:`ConfigReader.read_local` reads the namespace-local ConfigMaps that
WVA's last generations honour: ``wva-saturation-scaling-config`` (or the name set) and
``wva-model-scale-to-zero-config`` in a namespace holding variants replace the operator namespace's for
that namespace's variants (whole, as WVA resolves them; the limiter stays the operator namespace's, it
bounds one global plan). Two GETs per such namespace, at the same time.

What could not be read (unknown keys, skipped entries) is logged once per distinct message, never fatal.
A failed read keeps what the last one found (a namespace excluded for maintenance stays excluded through
an API server's hiccup); a refused one (403: the RBAC of an older install) is logged once and reads as
absent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from variant_autoscaler.adapters.kube import ForbiddenError, KubeClient
from variant_autoscaler.api.config import MainConfig, parse_main_config
from variant_autoscaler.api.configmaps import (
    AcceleratorCosts,
    ServiceClasses,
    parse_accelerator_costs,
    parse_service_classes,
)
from variant_autoscaler.api.main_config_sources import merge_main_config, read_config_file
from variant_autoscaler.api.queueing_config import QueueingModelConfig, parse_queueing_config
from variant_autoscaler.api.saturation_config import SaturationConfig, parse_saturation_config
from variant_autoscaler.api.scale_to_zero_config import (
    SCALE_TO_ZERO_CONFIG_MAP_NAMES,
    ScaleToZero,
    ScaleToZeroConfig,
    parse_scale_to_zero_config,
)
from variant_autoscaler.api.v1alpha1 import namespace_excluded
from variant_autoscaler.api.wva_entries import OnceLog
from variant_autoscaler.errors import ConfigError, KubeError
from variant_autoscaler.settings import Settings

__all__ = ["ConfigReader", "CycleConfig"]
EXCLUDE_HINT = (
    "wva.llmd.ai/exclude annotation is not read (grant list on namespaces, as "
    "deploy/rbac/clusterrole.yaml does)"
)
LOCAL_HINT = (
    "namespace-local configuration is not read there (grant get on these ConfigMaps, as "
    "deploy/rbac/clusterrole.yaml does)"
)

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
    #: Namespaces annotated ``wva.llmd.ai/exclude: "true"`` (cluster-wide installs only).
    excluded: frozenset[str] = frozenset()
    #: Namespace-local saturation and scale-to-zero ConfigMaps by namespace (ConfigReader.read_local).
    local_saturation: Mapping[str, SaturationConfig] = field(default_factory=dict)
    local_scale_to_zero: Mapping[str, ScaleToZeroConfig] = field(default_factory=dict)

    def saturation_for(self, namespace: str) -> SaturationConfig:
        """The saturation ConfigMap that applies in ``namespace``: its own, when it has one with an entry
        that could be read, else the operator namespace's."""
        local = self.local_saturation.get(namespace)
        return local if local is not None and local.entries else self.saturation

    def zero_for(self, model_id: str, namespace: str) -> ScaleToZero:
        """Scale to zero for a model: the ``scaleToZero`` of its saturation entry when it has one (WVA's
        last generation: it overrides the scale-to-zero ConfigMap), else its entry in the namespace's own
        scale-to-zero ConfigMap when there is one (with an entry that could be read), else in the operator
        namespace's, else ``WVA_SCALE_TO_ZERO`` (main config and environment, as merged)."""
        local = self.local_scale_to_zero.get(namespace)
        config = local if local is not None and local.entries else self.scale_to_zero
        out = config.for_model(
            model_id, namespace, env_default="true" if self.main.scale_to_zero else "false"
        )
        saturation = self.saturation_for(namespace).for_model(model_id, namespace)
        enabled, retention = saturation.inline_scale_to_zero()
        if enabled is None and retention is None:
            return out
        return ScaleToZero(
            out.enabled if enabled is None else enabled,
            out.retention_seconds if retention is None else retention,
            "the saturation ConfigMap's scaleToZero" if enabled is not None else out.source,
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
        self._excluded: frozenset[str] = frozenset()
        # (namespace, ConfigMap name) -> its data as last read (None: absent or refused).
        self._local: dict[tuple[str, str], Mapping[str, Any] | None] = {}

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
        listing, excluded = await asyncio.gather(
            self.kube.list_configmaps(ns), self._read_excluded(), return_exceptions=True
        )
        if isinstance(excluded, BaseException):
            raise excluded  # _read_excluded handles the API's errors: anything else is a bug
        if isinstance(listing, KubeError):
            return CycleConfig(
                MainConfig(), error=f"cannot list the ConfigMaps of {ns}: {listing}", excluded=excluded
            )
        if isinstance(listing, BaseException):
            raise listing
        listed = listing
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
        out = CycleConfig(
            main, error, costs, classes, sources=sources.sources, listed=bodies, excluded=excluded
        )
        if (sat := _first(found, self.settings.saturation_config_map_names)) is not None:
            out = replace(out, saturation=parse_saturation_config(sat[1], name=sat[0]))
        if (zero := _first(found, SCALE_TO_ZERO_CONFIG_MAP_NAMES)) is not None:
            out = replace(out, scale_to_zero=parse_scale_to_zero_config(zero[1], name=zero[0]))
        if (queueing := _first(found, self.settings.queueing_config_map_names)) is not None:
            out = replace(out, queueing=parse_queueing_config(queueing[1], name=queueing[0]))
        self._warn([*out.saturation.problems, *out.scale_to_zero.problems, *out.queueing.problems])
        return out

    async def _read_excluded(self) -> frozenset[str]:
        """The namespaces annotated ``wva.llmd.ai/exclude: "true"``: one LIST, cluster-wide installs only."""
        if not self.settings.clusterwide:
            return frozenset()
        try:
            namespaces = await self.kube.list_namespaces()
        except ForbiddenError as exc:
            self._warn([f"cannot list namespaces ({exc}): the {EXCLUDE_HINT}"])
            return self._excluded
        except KubeError as exc:
            logger.warning("cannot list namespaces (%s): keeping the last excluded ones", exc)
            return self._excluded
        excluded = frozenset(
            str((n.get("metadata") or {}).get("name")) for n in namespaces if namespace_excluded(n)
        )
        for name in sorted(excluded - self._excluded):
            logger.info(
                "namespace %s is annotated wva.llmd.ai/exclude=true: its variants are left alone", name
            )
        for name in sorted(self._excluded - excluded):
            logger.info("namespace %s is no longer excluded: its variants are served again", name)
        self._excluded = excluded
        return excluded

    async def read_local(self, cycle: CycleConfig, namespaces: Iterable[str]) -> CycleConfig:
        """``cycle`` with the namespace-local saturation and scale-to-zero ConfigMaps of ``namespaces``
        (those holding variants; the operator namespace's are the global ones)."""
        wanted = sorted(set(namespaces) - {self.settings.operator_namespace} - cycle.excluded)
        local_names = self.settings.local_config_map_names
        keys = [(ns, name) for ns in wanted for name in local_names]
        read = await asyncio.gather(*(self._read_one(ns, name) for ns, name in keys))
        self._local = dict(zip(keys, read, strict=True))
        saturation: dict[str, SaturationConfig] = {}
        zero: dict[str, ScaleToZeroConfig] = {}
        for (ns, name), data in self._local.items():
            if data is None:
                continue
            where = f"{ns}/{name}"
            if name == local_names[0]:
                saturation[ns] = parse_saturation_config(data, name=where)
                self._warn(saturation[ns].problems)
            else:
                zero[ns] = parse_scale_to_zero_config(data, name=where)
                self._warn(zero[ns].problems)
        return replace(cycle, local_saturation=saturation, local_scale_to_zero=zero)

    async def _read_one(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            cm = await self.kube.get_configmap(namespace, name)
        except ForbiddenError as exc:
            self._warn([f"cannot read ConfigMap {namespace}/{name} ({exc}): {LOCAL_HINT}"])
            return None
        except KubeError as exc:
            logger.warning(
                "cannot read ConfigMap %s/%s (%s): keeping what was read last", namespace, name, exc
            )
            return self._local.get((namespace, name))
        return None if cm is None else dict(cm.get("data") or {})
