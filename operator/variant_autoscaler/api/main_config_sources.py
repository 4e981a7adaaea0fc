"""Where the main configuration comes from, and which source wins.

The main ConfigMap went by several names across WVA's generations; each is read, weakest first, and a
later one's values win key by key (a user who moves from one generation to the next may have two):

1. ``workload-variant-autoscaler-variantautoscaling-config`` (2025-10: kustomize's ``namePrefix`` on
   ``variantautoscaling-config``; the one ``deploy/`` ships),
2. ``wva-variantautoscaling-config`` (later installs, prefix ``wva-``),
3. ``wva-manager-config`` (v0.9).

``CONFIG_MAP_NAME`` (or ``WVA_CONFIG_MAP_NAME``) names the only one to read instead.

A ConfigMap holds its settings as one key per setting (WVA's first format) or as YAML under the single key
``config.yaml`` (its later one), or both (a key beside ``config.yaml`` wins). ``--config-file`` (or
``WVA_CONFIG_FILE``) names a file of the same YAML (or a whole ConfigMap manifest), read at start-up.

Precedence, strongest first: command-line flags > environment > ``--config-file`` > ConfigMap > defaults
(WVA's order). Flags only set process settings; the environment may set the ``PROMETHEUS_*`` keys (all of
them together, WVA's rule) and ``WVA_SCALE_TO_ZERO``, which is the one exception: a ConfigMap or file that
sets it wins over the environment, because WVA's Deployments copied that key from the ConfigMap into the
environment at start, and a later edit of the ConfigMap must take effect (see
:func:`variant_autoscaler.api.config.parse_main_config`).

Keys no generation knows are reported (the engine logs each once, :class:`~.wva_entries.OnceLog`), never
fatal. Pure: text and mappings in, mappings out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from variant_autoscaler.api.config import (
    IGNORED_MAIN_CONFIG_KEYS,
    IGNORED_MAIN_CONFIG_PREFIXES,
    MAIN_CONFIG_KEYS,
)
from variant_autoscaler.api.documents import load_yaml

__all__ = [
    "CONFIG_YAML_KEY",
    "MAIN_CONFIG_MAP_NAMES",
    "MainConfigSources",
    "flatten_config_data",
    "merge_main_config",
    "read_config_file",
]

MAIN_CONFIG_MAP_NAMES: tuple[str, ...] = (
    "workload-variant-autoscaler-variantautoscaling-config",
    "wva-variantautoscaling-config",
    "wva-manager-config",
)
CONFIG_YAML_KEY = "config.yaml"
_MAX_TEXT = 1 << 20


@dataclass(frozen=True, slots=True)
class MainConfigSources:
    """The merged key → value data for :func:`~variant_autoscaler.api.config.parse_main_config`, where
    each key came from, and what was not understood (unknown keys, unreadable values)."""

    data: Mapping[str, str]
    origin: Mapping[str, str]
    problems: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()

    @property
    def sources(self) -> tuple[str, ...]:
        """The sources that set at least one value, weakest first."""
        used = set(self.origin.values())
        return tuple(layer for layer in self.layers if layer in used)


def _scalar(value: object) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    return None


def _known(key: str) -> bool:
    return (
        key in MAIN_CONFIG_KEYS
        or key in IGNORED_MAIN_CONFIG_KEYS
        or key.startswith(IGNORED_MAIN_CONFIG_PREFIXES)
    )


def _yaml_mapping(where: str, text: str) -> tuple[Mapping[str, Any], list[str]]:
    if len(text) > _MAX_TEXT:
        return {}, [f"{where} is larger than 1 MiB: ignored"]
    try:
        doc = load_yaml(text)
    except yaml.YAMLError as exc:
        return {}, [f"{where} is not YAML ({str(exc).splitlines()[0]}): ignored"]
    except RecursionError:
        return {}, [f"{where} is nested too deeply: ignored"]
    if doc is None:
        return {}, []
    if not isinstance(doc, Mapping):
        return {}, [f"{where} must be a mapping of settings: ignored"]
    return doc, []


def _settings(where: str, doc: Mapping[str, Any], out: dict[str, str], problems: list[str]) -> None:
    for key, value in doc.items():
        text = _scalar(value)
        if text is not None:
            out[str(key)] = text
        elif value is not None:
            problems.append(f"{where}: {key} must be a single value: ignored")


def _keep_known(where: str, out: dict[str, str], problems: list[str]) -> dict[str, str]:
    problems.extend(f"{where}: unknown key {key!r} (ignored)" for key in out if not _known(key))
    return {k: v for k, v in out.items() if _known(k)}


def flatten_config_data(where: str, data: Mapping[str, object] | None) -> tuple[dict[str, str], list[str]]:
    """One ConfigMap's ``data`` as key → string: ``config.yaml`` unpacked, keys beside it winning."""
    out: dict[str, str] = {}
    problems: list[str] = []
    data = data or {}
    if CONFIG_YAML_KEY in data:
        raw = data[CONFIG_YAML_KEY]
        inner = f"{where}[{CONFIG_YAML_KEY}]"
        doc, problems = _yaml_mapping(inner, raw if isinstance(raw, str) else "")
        _settings(inner, doc, out, problems)
    _settings(where, {k: v for k, v in data.items() if k != CONFIG_YAML_KEY}, out, problems)
    return _keep_known(where, out, problems), problems


def read_config_file(path: str, text: str) -> tuple[dict[str, str], list[str]]:
    """The ``--config-file``: the YAML of ``config.yaml``, or a ConfigMap manifest (its ``data`` is read)."""
    doc, problems = _yaml_mapping(path, text)
    if doc.get("kind") == "ConfigMap" and isinstance(doc.get("data"), Mapping):
        return flatten_config_data(path, doc["data"])
    out: dict[str, str] = {}
    _settings(path, doc, out, problems)
    return _keep_known(path, out, problems), problems


def merge_main_config(
    configmaps: Sequence[tuple[str, Mapping[str, object] | None]],
    file: tuple[str, Mapping[str, str]] | None = None,
) -> MainConfigSources:
    """Merge the ConfigMaps found (``(name, data)``, weakest first; data None: absent) and the config
    file, which wins over them all. The environment is applied after, by ``parse_main_config``."""
    data: dict[str, str] = {}
    origin: dict[str, str] = {}
    problems: list[str] = []
    layers: list[tuple[str, Mapping[str, str]]] = []
    for name, raw in configmaps:
        if raw is None:
            continue
        flat, found = flatten_config_data(f"ConfigMap {name}", raw)
        problems.extend(found)
        layers.append((f"ConfigMap {name}", flat))
    if file is not None:
        layers.append((f"file {file[0]}", file[1]))
    for where, values in layers:
        for key, value in values.items():
            data[key] = value
            origin[key] = where
    return MainConfigSources(data, origin, tuple(problems), tuple(where for where, _ in layers))
