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
``limiters``                  ``{type: gpu-inventory}`` (or ``inventory``: the nodes' GPUs),
                              ``{type: quota, quotas: {H100: 32}}`` (at most that many GPUs of a type;
                              ``-1``: no cap), ``{type: quota, scope: namespace, namespaceQuotas:
                              {team-a: {H100: 8}, default: {H100: 2}}, exclude: [...]}`` (per
                              namespace), ``{type: namespace-inventory}`` (not supported: reported)
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
    "QUOTA_UNLIMITED",
    "SATURATION_CONFIG_MAP_NAMES",
    "AnalyzerConfig",
    "Limiter",
    "NamespaceQuota",
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
#: WVA's last generation also spells the physical-inventory limiter ``inventory``.
_LIMITER_ALIASES: Mapping[str, LimiterType] = {"inventory": "gpu-inventory"}
#: A quota of -1 (Kubernetes' "no limit") leaves that accelerator type uncapped.
QUOTA_UNLIMITED = -1
#: The namespace key of a namespace-scoped quota that applies to every namespace it does not list.
DEFAULT_NAMESPACE_KEY = "default"
_MAX_QUOTA = 1 << 20

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
    on the GPUs of each type, cluster-wide (``quotas``) or, ``scope: namespace``, per namespace
    (``namespace_quotas``, keyed by namespace or ``default`` for the others; ``exclude``: namespaces it
    leaves alone); a cap of -1 is no cap. ``namespace-inventory`` is not supported (``supported``
    False)."""

    type: LimiterType
    scope: str | None = None
    quotas: Mapping[str, int] = field(default_factory=dict)
    name: str | None = None
    namespace_quotas: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    exclude: tuple[str, ...] = ()

    @property
    def supported(self) -> bool:
        return self.type != "namespace-inventory"

    @property
    def per_namespace(self) -> bool:
        return self.type == "quota" and self.scope == "namespace"

    def namespace_caps(self, namespace: str) -> Mapping[str, int] | None:
        """The caps this namespace-scoped quota sets in ``namespace`` by accelerator type (-1: none), a
        type it does not name getting none at all (WVA's rule); None where it sets nothing (another
        scope, or the namespace excluded)."""
        if not self.per_namespace or namespace in self.exclude:
            return None
        if namespace in self.namespace_quotas:
            return self.namespace_quotas[namespace]
        return self.namespace_quotas.get(DEFAULT_NAMESPACE_KEY, {})


@dataclass(frozen=True, slots=True)
class NamespaceQuota:
    """The GPUs one namespace's variants may hold by accelerator type (WVA's namespace-scoped quota
    limiters, the smallest where several apply): ``caps`` for the types they name (None: no cap); a
    type none of them names may hold none (WVA's rule). ``limiters`` names them, for reasons."""

    caps: Mapping[str, int | None]
    limiters: tuple[str, ...]


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
        """GPUs each accelerator type may use at most, cluster-wide (the smallest quota where several
        name it; -1 caps nothing)."""
        caps: dict[str, int] = {}
        if not self.enable_limiter:
            return caps
        for lim in self.limiters:
            if lim.per_namespace:
                continue
            for acc, count in lim.quotas.items():
                if count != QUOTA_UNLIMITED:
                    caps[acc] = min(count, caps.get(acc, count))
        return caps

    def namespace_quota(self, namespace: str) -> NamespaceQuota | None:
        """What the namespace-scoped quota limiters let ``namespace`` hold (None: none applies)."""
        applying = [
            (lim, caps)
            for lim in self.limiters
            if self.enable_limiter and (caps := lim.namespace_caps(namespace)) is not None
        ]
        if not applying:
            return None
        types = sorted({acc for _, caps in applying for acc in caps})
        out: dict[str, int | None] = {}
        for acc in types:
            found = [caps.get(acc, 0) for _, caps in applying]
            capped = [c for c in found if c != QUOTA_UNLIMITED]
            out[acc] = min(capped) if capped else None
        names = tuple(lim.name or f"quota limiter {i + 1}" for i, (lim, _) in enumerate(applying))
        return NamespaceQuota(out, names)


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


def _type_caps(where: str, raw: object) -> dict[str, int]:
    """An accelerator type -> GPUs map of a quota (whole numbers from -1, no cap, to 2^20)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise EntryError(f"{where} must map accelerator types to GPU counts")
    out: dict[str, int] = {}
    for key, value in raw.items():
        if not str(key).strip():
            raise EntryError(f"{where}: an accelerator type name is empty")
        count = as_float(f"{where}.{key}", value, low=QUOTA_UNLIMITED, high=_MAX_QUOTA)
        if count != int(count):
            raise EntryError(f"{where}.{key} = {value!r} must be a whole number of GPUs (-1: no cap)")
        out[str(key)] = int(count)
    return out


def _limiters(where: str, raw: object) -> tuple[tuple[Limiter, ...], list[str]]:
    """The limiters of an entry, and what is read but not applied (reported, not fatal)."""
    if not isinstance(raw, list):
        raise EntryError(f"{where}.limiters must be a list")
    out: list[Limiter] = []
    notes: list[str] = []
    for i, item in enumerate(raw):
        at = f"{where}.limiters[{i}]"
        kind = item.get("type") if isinstance(item, Mapping) else None
        kind = _LIMITER_ALIASES.get(str(kind), kind)
        if kind not in _LIMITER_TYPES:
            raise EntryError(
                f"{at}: type must be one of {', '.join((*_LIMITER_TYPES, *_LIMITER_ALIASES))}, got {kind!r}"
            )
        assert isinstance(item, Mapping)
        name = item.get("name")
        scope = item.get("scope")
        quotas = _type_caps(f"{at}.quotas", item.get("quotas"))
        per_ns_raw = item.get("namespaceQuotas")
        if per_ns_raw is not None and not isinstance(per_ns_raw, Mapping):
            raise EntryError(f"{at}.namespaceQuotas must map namespaces to accelerator types and GPUs")
        per_ns = {
            str(ns): _type_caps(f"{at}.namespaceQuotas.{ns}", caps) for ns, caps in (per_ns_raw or {}).items()
        }
        exclude_raw = item.get("exclude") or []
        if not isinstance(exclude_raw, list) or not all(
            isinstance(n, str) and n.strip() for n in exclude_raw
        ):
            raise EntryError(f"{at}.exclude must be a list of namespace names")
        if kind == "quota":
            if scope not in (None, "cluster", "namespace"):
                raise EntryError(f'{at}.scope must be "cluster" or "namespace", got {scope!r}')
            if scope == "namespace" and quotas:
                raise EntryError(
                    f"{at}: quotas is for cluster scope; a namespace-scoped one has namespaceQuotas"
                )
            if scope != "namespace" and (per_ns or exclude_raw):
                raise EntryError(f"{at}: namespaceQuotas and exclude need scope: namespace")
        elif quotas or per_ns or exclude_raw or scope is not None:
            notes.append(f"{at}: a {kind} limiter takes no scope or quotas (ignored)")
            scope, quotas, per_ns, exclude_raw = None, {}, {}, []
        if kind == "namespace-inventory":
            notes.append(f"{at}: the namespace-inventory limiter is not supported (ignored)")
        out.append(
            Limiter(
                kind,
                str(scope) if scope is not None else None,
                quotas,
                name=str(name) if name is not None else None,
                namespace_quotas=per_ns,
                exclude=tuple(exclude_raw),
            )
        )
    return tuple(out), notes


def _layer(where: str, entry: Entry) -> tuple[_Layer, list[str]]:
    f = entry.fields
    v1, v2 = _thresholds(where, f)
    unknown = [
        f"{where}: unknown key {k!r} (ignored)" for k in f if k not in {*_V1_KEYS, *_V2_KEYS, *_OTHER_KEYS}
    ]
    limiters: tuple[Limiter, ...] | None = None
    if "limiters" in f:
        limiters, notes = _limiters(where, f["limiters"])
        unknown.extend(notes)
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
        limiters=limiters,
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
