"""Parsers for WVA's ``accelerator-unit-costs`` and ``service-classes-config`` ConfigMaps (wva.md §2.2–2.3).

Both take the ConfigMap's ``data`` (key → string) exactly as Kubernetes returns it, and return core
types. Values may also be already-decoded mappings (the ``plan`` command's file embeds them that way).

WVA's behaviour is kept where it is lenient (an accelerator whose cost does not parse is dropped; a
service class that does not decode is dropped) and reported: each parser returns the entries it could
read plus a list of problems, each naming the key and field. ``strict=True`` raises
:class:`~variant_autoscaler.errors.ConfigError` on the first problem instead.

We accept a little more than WVA: numeric (not only string) costs, and fractional SLO values; and a
service-class entry may state its targets as shares of requests (``slo-ttft-percentile``,
``slo-tpot-percentile``, ``slo-attainment``; docs/tail-slo.md). An entry with none keeps WVA's meaning.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from variant_autoscaler.api.documents import load_yaml
from variant_autoscaler.core.model import AcceleratorType, ModelTarget, ServiceClass, normalize_priority
from variant_autoscaler.errors import ConfigError

__all__ = [
    "ACCELERATOR_COSTS_CONFIG_MAP",
    "SERVICE_CLASSES_CONFIG_MAP",
    "AcceleratorCosts",
    "ServiceClasses",
    "parse_accelerator_costs",
    "parse_service_classes",
]

ACCELERATOR_COSTS_CONFIG_MAP = "accelerator-unit-costs"
SERVICE_CLASSES_CONFIG_MAP = "service-classes-config"


@dataclass(frozen=True, slots=True)
class AcceleratorCosts:
    """Accelerators by name, and what could not be read."""

    accelerators: Mapping[str, AcceleratorType]
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ServiceClasses:
    """Service classes in key order, and what could not be read."""

    classes: tuple[ServiceClass, ...]
    problems: tuple[str, ...] = ()
    # The class each ConfigMap key holds (what ``sloClassRef: {name: <this ConfigMap>, key}`` names),
    # including one whose name repeats an earlier key's (left out of ``classes``).
    by_key: Mapping[str, ServiceClass] = field(default_factory=dict)

    def named(self, name: str) -> ServiceClass | None:
        for cls in self.classes:
            if cls.name == name:
                return cls
        return None


class _Problem(Exception):
    """One unreadable entry; collected, or raised as ConfigError in strict mode."""


def _number(where: str, value: object) -> float:
    if isinstance(value, bool):
        raise _Problem(f"{where} = {value!r} is not a number")
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise _Problem(f"{where} = {value!r} is not a number") from None
    else:
        raise _Problem(f"{where} = {value!r} is not a number")
    if not math.isfinite(number) or number < 0:
        raise _Problem(f"{where} = {value!r} must be a finite number >= 0")
    return number


def _accelerator(name: str, raw: object) -> AcceleratorType:
    where = f"{ACCELERATOR_COSTS_CONFIG_MAP}[{name}]"
    entry: Any = raw
    if isinstance(raw, str):
        try:
            entry = json.loads(raw)
        except ValueError as exc:
            raise _Problem(f"{where} is not JSON: {exc}") from None
    if not isinstance(entry, Mapping):
        raise _Problem(f"{where} must be a JSON object with the fields device and cost")
    device = entry.get("device")
    if not isinstance(device, str) or not device:
        raise _Problem(f"{where}: field 'device' must be a non-empty string, got {device!r}")
    if "cost" not in entry:
        raise _Problem(f"{where}: field 'cost' is missing")
    cost = _number(f"{where}.cost", entry["cost"])
    return AcceleratorType(name=name, device=device, cost=cost)


def parse_accelerator_costs(data: Mapping[str, object], *, strict: bool = False) -> AcceleratorCosts:
    """The ``accelerator-unit-costs`` data: key = accelerator name, value = ``{"device", "cost"}``."""
    accelerators: dict[str, AcceleratorType] = {}
    problems: list[str] = []
    for name in sorted(data):
        if not name:
            problems.append(f"{ACCELERATOR_COSTS_CONFIG_MAP}: an accelerator name is empty")
            continue
        try:
            accelerators[name] = _accelerator(name, data[name])
        except _Problem as exc:
            problems.append(str(exc))
        if strict and problems:
            raise ConfigError(problems[0])
    return AcceleratorCosts(accelerators, tuple(problems))


def _slo(where: str, entry: Mapping[str, object], field: str) -> float:
    if field not in entry or entry[field] is None:
        return 0.0
    return _number(f"{where}.{field}", entry[field])


def _percentile(where: str, entry: Mapping[str, object], field: str = "slo-ttft-percentile") -> float:
    """A share of requests in percent (ours: ``slo-ttft-percentile``, ``slo-tpot-percentile``,
    ``slo-attainment``): absent or 0 means none (WVA's mean meaning); else in (0, 100). ``"99%"`` reads
    as 99."""
    raw = entry.get(field)
    if isinstance(raw, str) and raw.strip().endswith("%"):
        entry = {field: raw.strip()[:-1]}
    value = _slo(where, entry, field)
    if value != 0.0 and not 0.0 < value < 100.0:
        raise _Problem(f"{where}.{field} must be between 0 and 100 (e.g. 99), got {value:g}")
    return value


def _service_class(where: str, raw: object) -> ServiceClass:
    if isinstance(raw, str):
        return _service_class_text(where, raw)
    return _service_class_doc(where, raw)


@functools.lru_cache(maxsize=256)
def _service_class_text(where: str, raw: str) -> ServiceClass:
    """A class document as text, parsed once: the ConfigMap is read every cycle and rarely changes,
    and parsing one class of 500 models took ~0.1 s of pure-Python YAML (a result is immutable)."""
    return _service_class_doc(where, raw)


def _service_class_doc(where: str, raw: object) -> ServiceClass:
    doc: Any = raw
    if isinstance(raw, str):
        try:
            doc = load_yaml(raw)
        except yaml.YAMLError as exc:
            raise _Problem(f"{where} is not YAML: {exc}") from None
        except RecursionError:
            raise _Problem(f"{where} is nested too deeply to be read") from None
    if not isinstance(doc, Mapping):
        raise _Problem(f"{where} must be a mapping with the fields name, priority and data")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise _Problem(f"{where}: field 'name' must be a non-empty string, got {name!r}")
    priority_raw = doc.get("priority", 0)
    if isinstance(priority_raw, bool) or not isinstance(priority_raw, int):
        raise _Problem(f"{where}: field 'priority' must be an integer, got {priority_raw!r}")
    entries = doc.get("data") or []
    if not isinstance(entries, list):
        raise _Problem(f"{where}: field 'data' must be a list of {{model, slo-tpot, slo-ttft}}")
    targets: list[ModelTarget] = []
    for index, entry in enumerate(entries):
        at = f"{where}.data[{index}]"
        if not isinstance(entry, Mapping):
            raise _Problem(f"{at} must be a mapping with the fields model, slo-tpot and slo-ttft")
        model = entry.get("model")
        if not isinstance(model, str) or not model:
            raise _Problem(f"{at}: field 'model' must be a non-empty string, got {model!r}")
        targets.append(
            ModelTarget(
                model=model,
                itl=_slo(at, entry, "slo-tpot"),
                ttft=_slo(at, entry, "slo-ttft"),
                tps=_slo(at, entry, "slo-tps"),
                ttft_percentile=_percentile(at, entry),
                itl_percentile=_percentile(at, entry, "slo-tpot-percentile"),
                attainment=_percentile(at, entry, "slo-attainment"),
            )
        )
    return ServiceClass(name=name, priority=normalize_priority(priority_raw), targets=tuple(targets))


def parse_service_classes(
    data: Mapping[str, object] | list[object], *, strict: bool = False
) -> ServiceClasses:
    """The ``service-classes-config`` data: each key holds one class document (YAML).

    A list of documents is accepted too (keys are then ``[0]``, ``[1]``, ...). Priorities outside
    ``[1, 100]`` become 100, as in WVA.
    """
    items: list[tuple[str, object]]
    if isinstance(data, list):
        items = [(str(i), doc) for i, doc in enumerate(data)]
    else:
        items = [(key, data[key]) for key in sorted(data)]
    classes: list[ServiceClass] = []
    by_key: dict[str, ServiceClass] = {}
    problems: list[str] = []
    seen: dict[str, str] = {}
    for key, raw in items:
        where = f"{SERVICE_CLASSES_CONFIG_MAP}[{key}]"
        try:
            cls = _service_class(where, raw)
        except _Problem as exc:
            problems.append(str(exc))
        else:
            by_key[key] = cls
            if cls.name in seen:
                problems.append(f"{where}: class {cls.name!r} is already defined in {seen[cls.name]}")
            else:
                seen[cls.name] = where
                classes.append(cls)
        if strict and problems:
            raise ConfigError(problems[0])
    return ServiceClasses(tuple(classes), tuple(problems), by_key)
