"""WVA's saturation ConfigMap (``wva-saturation-scaling-config``, earlier ``saturation-scaling-config`` and
``capacity-scaling-config``): which saturation analyzers run for a model, their thresholds, and the
limiter.

Per entry (``default`` and per-model overrides, see :mod:`variant_autoscaler.api.wva_entries`):

===========================  ============================================================================
``kvCacheThreshold`` 0.80     V1: a replica at or above this KV-cache usage is saturated (0 to 1)
``queueLengthThreshold`` 5    V1: ... or with this many requests waiting
``kvSpareTrigger`` 0.10       V1: scale up when the average spare KV capacity falls under this
``queueSpareTrigger`` 3       V1: ... or the average spare queue under this
``scaleUpThreshold`` 0.85     V2: scale up above this token utilisation
``scaleDownBoundary`` 0.70    V2: scale down below this one
``analyzerName``              ``""`` (V1) or ``saturation`` (V2); superseded by ``analyzers``
``analyzers``                 list of ``{name (or type), enabled, score, scaleUpThreshold,
                              scaleDownBoundary, parameters}``; names ``saturation`` (V2) and, ours,
                              ``saturation-v1``; others are reported and skipped
``enableLimiter``             bound the decisions by the GPUs there are (our limited mode)
``limiters``                  ``{type: gpu-inventory}`` (the nodes' GPUs: our inventory),
                              ``{type: quota, quotas: {H100: 32}}`` (at most that many GPUs of a type),
                              ``{type: namespace-inventory}`` (read, not supported: reported)
``priority``                  the model's weight in the GPU limiter (its saturation is multiplied by it;
                              default 1, and 0 reads as 1, as WVA reads it)
``enableRescale``, ``scaleToZero``  read and kept for the engine; ``scaleToZero`` may hold
                              ``enable_scale_to_zero``/``retention_period`` like the scale-to-zero ConfigMap
===========================  ============================================================================

The default analyzer depends on the variant, not on a global switch: a VariantAutoscaling gets V1 (WVA's
default for every VA generation), an annotated HPA or ScaledObject (WVA v0.9) gets V2 (v0.9's default).
An entry that breaks a rule (a threshold out of range, ``kvSpareTrigger`` above ``kvCacheThreshold``,
``scaleDownBoundary`` not under ``scaleUpThreshold``) is skipped whole and reported, as WVA does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from variant_autoscaler.api.wva_entries import (
    Entry,
    EntryError,
    as_bool,
    as_duration,
    as_float,
    parse_entries,
    pick_entries,
)
from variant_autoscaler.core.saturation import V1, V2, V1Params, V2Params

__all__ = [
    "SATURATION_CONFIG_MAP_NAMES",
    "AnalyzerConfig",
    "Limiter",
    "SaturationConfig",
    "SaturationSettings",
    "parse_saturation_config",
]

#: Every name WVA gave this ConfigMap, newest first (the first one found is read).
SATURATION_CONFIG_MAP_NAMES: tuple[str, ...] = (
    "wva-saturation-scaling-config",
    "saturation-scaling-config",
    "capacity-scaling-config",
    "workload-variant-autoscaler-saturation-scaling-config",
)

_T = TypeVar("_T")
LimiterType = Literal["gpu-inventory", "quota", "namespace-inventory"]
_LIMITER_TYPES: tuple[LimiterType, ...] = ("gpu-inventory", "quota", "namespace-inventory")

_V1_KEYS = {
    "kvCacheThreshold": "kv_cache_threshold",
    "queueLengthThreshold": "queue_length_threshold",
    "kvSpareTrigger": "kv_spare_trigger",
    "queueSpareTrigger": "queue_spare_trigger",
}
_V2_KEYS = {"scaleUpThreshold": "scale_up_threshold", "scaleDownBoundary": "scale_down_boundary"}
_OTHER_KEYS = {
    "analyzerName",
    "analyzers",
    "enableLimiter",
    "limiters",
    "priority",
    "enableRescale",
    "scaleToZero",
}


@dataclass(frozen=True, slots=True)
class AnalyzerConfig:
    """One analyzer to run: ``kind`` is :data:`~variant_autoscaler.core.saturation.V1` or ``V2``."""

    kind: str
    score: float = 1.0
    v1: V1Params = field(default_factory=V1Params)
    v2: V2Params = field(default_factory=V2Params)


@dataclass(frozen=True, slots=True)
class Limiter:
    """A limiter entry. ``gpu-inventory`` maps onto our limited mode (the nodes' GPUs); ``quota`` onto a cap
    on the GPUs of each type; ``namespace-inventory`` is not supported (``supported`` False)."""

    type: LimiterType
    scope: str | None = None
    quotas: Mapping[str, int] = field(default_factory=dict)

    @property
    def supported(self) -> bool:
        return self.type != "namespace-inventory"


@dataclass(frozen=True, slots=True)
class SaturationSettings:
    """What applies to one model in one namespace."""

    analyzers: tuple[AnalyzerConfig, ...]
    enable_limiter: bool = False
    limiters: tuple[Limiter, ...] = ()
    priority: float = 1.0
    enable_rescale: bool | None = None
    scale_to_zero: Mapping[str, Any] | None = None
    #: The entries applied, weakest first (for reasons and logs).
    sources: tuple[str, ...] = ()

    def inline_scale_to_zero(self) -> tuple[bool | None, float | None]:
        """The entry's own ``scaleToZero`` (WVA's last generation: it overrides the scale-to-zero
        ConfigMap for the models it covers): whether enabled (``enabled``, or the ConfigMap's
        ``enable_scale_to_zero``) and the retention period in seconds; None where it says nothing."""
        inline = self.scale_to_zero or {}
        flag = inline.get("enabled", inline.get("enable_scale_to_zero"))
        keep = inline.get("retention_period")
        return (
            as_bool("scaleToZero.enabled", flag) if flag is not None else None,
            as_duration("scaleToZero.retention_period", keep) if keep is not None else None,
        )

    @property
    def limited_mode(self) -> bool:
        """Plan within the GPUs there are (our ``OPTIMIZER_MODE=limited``): enableLimiter with the
        ``gpu-inventory`` limiter, which is what enableLimiter alone meant."""
        return self.enable_limiter and any(lim.type == "gpu-inventory" for lim in self.limiters)

    def gpu_quotas(self) -> dict[str, int]:
        """GPUs each accelerator type may use at most (the smallest quota where several name it)."""
        caps: dict[str, int] = {}
        if not self.enable_limiter:
            return caps
        for lim in self.limiters:
            for acc, count in lim.quotas.items():
                caps[acc] = min(count, caps.get(acc, count))
        return caps


@dataclass(frozen=True, slots=True)
class _Layer:
    """The fields one entry sets (None: not set)."""

    v1: Mapping[str, float]
    v2: Mapping[str, float]
    analyzer_name: str | None = None
    analyzers: tuple[tuple[str, Mapping[str, Any]], ...] | None = None
    enable_limiter: bool | None = None
    limiters: tuple[Limiter, ...] | None = None
    priority: float | None = None
    enable_rescale: bool | None = None
    scale_to_zero: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class SaturationConfig:
    """The parsed ConfigMap: its entries and what could not be read."""

    entries: tuple[tuple[Entry, _Layer], ...] = ()
    problems: tuple[str, ...] = ()

    def for_model(self, model_id: str, namespace: str, *, annotated: bool = False) -> SaturationSettings:
        """The settings for ``model_id`` in ``namespace``; ``annotated``: the variant is an annotated HPA or
        ScaledObject (default analyzer V2) rather than a VariantAutoscaling (default V1)."""
        layers = {id(e): layer for e, layer in self.entries}
        picked = pick_entries((e for e, _ in self.entries), model_id, namespace)
        v1 = V1Params()
        v2 = V2Params()
        analyzer_name: str | None = None
        analyzers: tuple[tuple[str, Mapping[str, Any]], ...] | None = None
        out = SaturationSettings(analyzers=())
        for entry in picked:
            layer = layers[id(entry)]
            v1 = replace(v1, **layer.v1)
            v2 = replace(v2, **layer.v2)
            analyzer_name = layer.analyzer_name if layer.analyzer_name is not None else analyzer_name
            analyzers = layer.analyzers if layer.analyzers is not None else analyzers
            out = replace(
                out,
                enable_limiter=_pick(layer.enable_limiter, out.enable_limiter),
                limiters=_pick(layer.limiters, out.limiters),
                priority=_pick(layer.priority, out.priority),
                enable_rescale=_pick(layer.enable_rescale, out.enable_rescale),
                scale_to_zero=_pick(layer.scale_to_zero, out.scale_to_zero),
            )
        if out.enable_limiter and not out.limiters:
            out = replace(out, limiters=(Limiter("gpu-inventory"),))  # what enableLimiter alone meant
        return replace(
            out,
            analyzers=_analyzers(analyzer_name, analyzers, v1, v2, annotated),
            sources=tuple(e.key for e in picked),
        )


def _pick(new: _T | None, old: _T) -> _T:
    return old if new is None else new


def _analyzers(
    name: str | None,
    listed: tuple[tuple[str, Mapping[str, Any]], ...] | None,
    v1: V1Params,
    v2: V2Params,
    annotated: bool,
) -> tuple[AnalyzerConfig, ...]:
    if listed is not None:
        out: list[AnalyzerConfig] = []
        for kind, entry in listed:
            if not entry.get("enabled", True):
                continue
            own = {_V2_KEYS[k]: float(entry[k]) for k in _V2_KEYS if k in entry}
            out.append(AnalyzerConfig(kind, float(entry.get("score", 1.0)), v1, replace(v2, **own)))
        if out:
            return tuple(out)
    if name == "saturation" or (name is None and annotated):
        return (AnalyzerConfig(V2, v1=v1, v2=v2),)
    return (AnalyzerConfig(V1, v1=v1, v2=v2),)


def _thresholds(where: str, fields: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    v1: dict[str, float] = {}
    for key, attr in _V1_KEYS.items():
        if key in fields:
            high = 1.0 if key.startswith("kv") else 1e6
            v1[attr] = as_float(f"{where}.{key}", fields[key], high=high)
    v2: dict[str, float] = {}
    for key, attr in _V2_KEYS.items():
        if key in fields:
            v2[attr] = as_float(f"{where}.{key}", fields[key], high=1.0)
    return v1, v2


def _analyzer_list(where: str, raw: object) -> tuple[tuple[str, Mapping[str, Any]], ...]:
    if not isinstance(raw, list):
        raise EntryError(f"{where}.analyzers must be a list")
    out: list[tuple[str, Mapping[str, Any]]] = []
    for i, item in enumerate(raw):
        at = f"{where}.analyzers[{i}]"
        if not isinstance(item, Mapping):
            raise EntryError(f"{at} must be a mapping with a name")
        name = item.get("name", item.get("type"))
        kind = {"saturation": V2, "saturation-v2": V2, "saturation-v1": V1}.get(str(name))
        if kind is None:
            raise EntryError(f"{at}: analyzer {name!r} is not supported (saturation, saturation-v1)")
        entry: dict[str, Any] = {"enabled": as_bool(f"{at}.enabled", item.get("enabled", True))}
        entry["score"] = as_float(f"{at}.score", item.get("score", 1.0), high=1e6)
        # thresholds may sit on the entry or under `parameters`/`thresholds`
        merged: dict[str, Any] = {}
        for part in (item.get("parameters"), item.get("thresholds"), item):
            if isinstance(part, Mapping):
                merged.update({k: part[k] for k in _V2_KEYS if k in part})
        for key in _V2_KEYS:
            if key in merged:
                entry[key] = as_float(f"{at}.{key}", merged[key], high=1.0)
        out.append((kind, entry))
    return tuple(out)


def _limiters(where: str, raw: object) -> tuple[Limiter, ...]:
    if not isinstance(raw, list):
        raise EntryError(f"{where}.limiters must be a list")
    out: list[Limiter] = []
    for i, item in enumerate(raw):
        at = f"{where}.limiters[{i}]"
        kind = item.get("type") if isinstance(item, Mapping) else None
        if kind not in _LIMITER_TYPES:
            raise EntryError(f"{at}: type must be one of {', '.join(_LIMITER_TYPES)}, got {kind!r}")
        assert isinstance(item, Mapping)
        quotas_raw = item.get("quotas") or {}
        if not isinstance(quotas_raw, Mapping):
            raise EntryError(f"{at}.quotas must map accelerator types to GPU counts")
        quotas = {str(k): int(as_float(f"{at}.quotas.{k}", v, high=1e6)) for k, v in quotas_raw.items()}
        scope = item.get("scope")
        out.append(Limiter(kind, str(scope) if scope is not None else None, quotas))
    return tuple(out)


def _layer(where: str, entry: Entry) -> tuple[_Layer, list[str]]:
    f = entry.fields
    v1, v2 = _thresholds(where, f)
    unknown = [
        f"{where}: unknown key {k!r} (ignored)" for k in f if k not in {*_V1_KEYS, *_V2_KEYS, *_OTHER_KEYS}
    ]
    name = f.get("analyzerName")
    if name is not None and name not in ("", "saturation"):
        raise EntryError(f'{where}.analyzerName must be "" (V1) or "saturation" (V2), got {name!r}')
    scale_to_zero = f.get("scaleToZero")
    if scale_to_zero is not None and not isinstance(scale_to_zero, Mapping):
        raise EntryError(f"{where}.scaleToZero must be a mapping")
    if isinstance(scale_to_zero, Mapping):
        for key in ("enabled", "enable_scale_to_zero"):
            if key in scale_to_zero:
                as_bool(f"{where}.scaleToZero.{key}", scale_to_zero[key])
        if "retention_period" in scale_to_zero:
            keep = as_duration(f"{where}.scaleToZero.retention_period", scale_to_zero["retention_period"])
            if keep <= 0:
                raise EntryError(f"{where}.scaleToZero.retention_period must be longer than zero")
    layer = _Layer(
        v1=v1,
        v2=v2,
        analyzer_name=None if name is None else str(name),
        analyzers=_analyzer_list(where, f["analyzers"]) if "analyzers" in f else None,
        enable_limiter=as_bool(f"{where}.enableLimiter", f["enableLimiter"])
        if "enableLimiter" in f
        else None,
        limiters=_limiters(where, f["limiters"]) if "limiters" in f else None,
        # 0 is WVA's "unset" (its default, 1, applies).
        priority=(as_float(f"{where}.priority", f["priority"], high=1e6) or None)
        if "priority" in f
        else None,
        enable_rescale=as_bool(f"{where}.enableRescale", f["enableRescale"])
        if "enableRescale" in f
        else None,
        scale_to_zero=dict(scale_to_zero) if isinstance(scale_to_zero, Mapping) else None,
    )
    return layer, unknown


def _consistent(where: str, layers: Sequence[_Layer]) -> None:
    """WVA's cross-field rules, on the values the entry ends up with (over the built-in defaults)."""
    v1 = V1Params()
    v2 = V2Params()
    for layer in layers:
        v1 = replace(v1, **layer.v1)
        v2 = replace(v2, **layer.v2)
    if v1.kv_spare_trigger > v1.kv_cache_threshold:
        raise EntryError(f"{where}: kvSpareTrigger must not exceed kvCacheThreshold")
    if not 0.0 < v2.scale_down_boundary < v2.scale_up_threshold:
        raise EntryError(f"{where}: scaleDownBoundary must be above 0 and below scaleUpThreshold")


def parse_saturation_config(
    data: Mapping[str, object] | None, *, name: str = SATURATION_CONFIG_MAP_NAMES[0]
) -> SaturationConfig:
    """Parse the ConfigMap's ``data``; None or {} gives WVA's built-in defaults."""
    entries, problems = parse_entries(name, data)
    parsed: list[tuple[Entry, _Layer]] = []
    default: _Layer | None = None
    for entry in entries:
        where = f"{name}[{entry.key}]"
        try:
            layer, unknown = _layer(where, entry)
            _consistent(where, [*([default] if default and entry.model_id else []), layer])
        except EntryError as exc:
            problems.append(f"{exc} (entry skipped)")
            continue
        problems.extend(unknown)
        if entry.model_id is None:
            default = layer
        parsed.append((entry, layer))
    return SaturationConfig(tuple(parsed), tuple(problems))
