"""What WVA's later ConfigMaps have in common: a ``default`` entry and per-model overrides, each a YAML
document, and lenient reading (a bad entry is skipped and reported, never fatal).

An override applies to one model in one namespace. WVA wrote it two ways, both read: the key
``<modelID>#<namespace>``, or any key whose entry carries ``model_id`` (and ``namespace``; without one, it
applies in every namespace, below an entry that names the namespace). Only the fields an entry sets
override; the rest come from ``default``, then from the built-in defaults.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from variant_autoscaler.api.config import parse_duration
from variant_autoscaler.api.documents import load_yaml
from variant_autoscaler.errors import ConfigError

__all__ = [
    "DEFAULT_KEY",
    "Entry",
    "EntryError",
    "OnceLog",
    "as_bool",
    "as_duration",
    "as_float",
    "parse_entries",
    "pick_entries",
]

DEFAULT_KEY = "default"
_MAX_ENTRY_CHARS = 1 << 20  # a ConfigMap holds at most 1 MiB


class EntryError(Exception):
    """One unreadable entry or field; reported and skipped."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry: where it came from, the model/namespace it applies to (None: the default), its fields."""

    key: str
    model_id: str | None
    namespace: str | None
    fields: Mapping[str, Any]


def _document(where: str, raw: object) -> Mapping[str, Any]:
    doc: Any = raw
    if isinstance(raw, str):
        if len(raw) > _MAX_ENTRY_CHARS:
            raise EntryError(f"{where} is larger than a ConfigMap can hold")
        try:
            doc = load_yaml(raw)
        except yaml.YAMLError as exc:
            raise EntryError(f"{where} is not YAML: {str(exc).splitlines()[0]}") from None
        except RecursionError:
            raise EntryError(f"{where} is nested too deeply") from None
    if doc is None:
        return {}
    if not isinstance(doc, Mapping):
        raise EntryError(f"{where} must be a mapping of settings")
    return doc


def parse_entries(config_map: str, data: Mapping[str, object] | None) -> tuple[list[Entry], list[str]]:
    """Every entry of a ConfigMap's ``data``, in key order, and the problems of those that were skipped."""
    entries: list[Entry] = []
    problems: list[str] = []
    for key in sorted(data or {}):
        where = f"{config_map}[{key}]"
        try:
            fields = dict(_document(where, (data or {})[key]))
        except EntryError as exc:
            problems.append(str(exc))
            continue
        model = fields.pop("model_id", None)
        namespace = fields.pop("namespace", None)
        if key == DEFAULT_KEY and model is None:
            entries.append(Entry(key, None, None, fields))
            continue
        if model is None and "#" in key:
            model, _, namespace = key.partition("#")
        if not isinstance(model, str) or not model:
            problems.append(f"{where}: an override needs model_id (or the key <modelID>#<namespace>)")
            continue
        if namespace is not None and (not isinstance(namespace, str) or not namespace):
            problems.append(f"{where}: namespace must be a non-empty string")
            continue
        entries.append(Entry(key, model, namespace, fields))
    return entries, problems


def pick_entries(entries: Iterable[Entry], model_id: str, namespace: str) -> list[Entry]:
    """The entries that apply to ``model_id`` in ``namespace``, weakest first: the default, then overrides
    for the model in any namespace, then those for the model in this namespace."""
    ordered = list(entries)
    return (
        [e for e in ordered if e.model_id is None]
        + [e for e in ordered if e.model_id == model_id and e.namespace is None]
        + [e for e in ordered if e.model_id == model_id and e.namespace == namespace]
    )


def as_float(where: str, value: object, *, low: float = 0.0, high: float = math.inf) -> float:
    if isinstance(value, bool):
        raise EntryError(f"{where} = {value!r} is not a number")
    try:
        number = float(value) if isinstance(value, int | float | str) else math.nan
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise EntryError(f"{where} = {value!r} is not a number")
    if not low <= number <= high:
        raise EntryError(f"{where} = {value!r} must be between {low:g} and {high:g}")
    return number


def as_bool(where: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise EntryError(f"{where} = {value!r} must be true or false")


def as_duration(where: str, value: object) -> float:
    if isinstance(value, bool):
        raise EntryError(f"{where} = {value!r} is not a duration")
    if isinstance(value, int | float):
        return as_float(where, value)
    if not isinstance(value, str):
        raise EntryError(f"{where} = {value!r} is not a duration (e.g. 10m)")
    try:
        return parse_duration(value)
    except ConfigError as exc:
        raise EntryError(f"{where}: {exc}") from None


class OnceLog:
    """Remembers what was reported, so that a problem read again every cycle is logged once."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def new(self, messages: Iterable[str]) -> list[str]:
        """The messages not reported before (and now remembered), in order."""
        fresh = [m for m in dict.fromkeys(messages) if m not in self._seen]
        self._seen.update(fresh)
        return fresh
