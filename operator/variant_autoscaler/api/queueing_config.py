"""WVA's ``wva-queueing-model-config`` ConfigMap (v0.6-v0.8): its presence selected the queueing model.

Entries (``default`` and per-model overrides, :mod:`variant_autoscaler.api.wva_entries`):
``sloMultiplier`` (default 3, must exceed 1: the SLO WVA inferred when none is given allows the iteration
time to grow k-fold, a target utilisation of 1 - 1/k), ``tuningEnabled`` (default true: learn the
model's parameters online) and, per model, ``targetTTFT`` and ``targetITL`` in ms (both or neither).
Ours: ``targetTTFTPercentile``, ``targetITLPercentile`` and ``attainment`` state those targets as shares
of requests, as a service class's ``slo-*-percentile`` and ``slo-attainment`` do (docs/tail-slo.md).

The explicit targets are the SLOs of a VariantAutoscaling that has no service class
(:meth:`QueueingModelConfig.slo_for`). ``tuningEnabled: false`` keeps the models it covers on their hand
profiles, as WVA's switched-off tuner did (:meth:`QueueingModelConfig.tuning_off`): the operator still
learns and shows their parameters, but does not size by them unless a VA asks (``profileSource``).
A model an entry covers without explicit targets gets WVA's inferred SLOs: ``sloMultiplier`` k sets
them so that a replica sized to them runs at ``1 − 1/k`` of what it sustains
(:meth:`QueueingModelConfig.multiplier_for`, :mod:`variant_autoscaler.core.inferred_slo`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from variant_autoscaler.api.wva_entries import (
    Entry,
    EntryError,
    as_bool,
    as_float,
    parse_entries,
    pick_entries,
)
from variant_autoscaler.core.model import ModelTarget

__all__ = [
    "QUEUEING_CONFIG_MAP_NAMES",
    "QueueingModelConfig",
    "QueueingModelSettings",
    "parse_queueing_config",
]

QUEUEING_CONFIG_MAP_NAMES: tuple[str, ...] = (
    "wva-queueing-model-config",
    "queueing-model-config",
    "workload-variant-autoscaler-queueing-model-config",
)
DEFAULT_SLO_MULTIPLIER = 3.0
_KEYS = ("sloMultiplier", "tuningEnabled", "targetTTFT", "targetITL")
_SHARES = {
    "targetTTFTPercentile": "ttft_percentile",
    "targetITLPercentile": "itl_percentile",
    "attainment": "attainment",
}


@dataclass(frozen=True, slots=True)
class QueueingModelSettings:
    slo_multiplier: float = DEFAULT_SLO_MULTIPLIER
    tuning_enabled: bool = True
    target_ttft_ms: float | None = None
    target_itl_ms: float | None = None
    ttft_percentile: float = 0.0
    itl_percentile: float = 0.0
    attainment: float = 0.0
    source: str = "built-in defaults"


@dataclass(frozen=True, slots=True)
class QueueingModelConfig:
    """``present``: the ConfigMap exists with a ``default`` entry (what selected the queueing model)."""

    present: bool = False
    entries: tuple[tuple[Entry, Mapping[str, object]], ...] = ()
    problems: tuple[str, ...] = ()
    name: str = QUEUEING_CONFIG_MAP_NAMES[0]

    def for_model(self, model_id: str, namespace: str) -> QueueingModelSettings:
        values = {id(e): v for e, v in self.entries}
        out = QueueingModelSettings()
        for entry in pick_entries((e for e, _ in self.entries), model_id, namespace):
            out = replace(out, **values[id(entry)], source=entry.key)  # type: ignore[arg-type]
        return out

    def tuning_off(self, model_id: str, namespace: str) -> str | None:
        """Why the model's learned profile may not size it unless its VA asks (``tuningEnabled: false``
        in the entry that covers it), or None when tuning is on (the default)."""
        s = self.for_model(model_id, namespace)
        if s.tuning_enabled:
            return None
        return f"tuningEnabled is false in {self.name}[{s.source}]"

    def multiplier_for(self, model_id: str, namespace: str) -> tuple[float, str] | None:
        """WVA's inferred SLOs: ``(sloMultiplier, where it was read)`` for a model that an entry of this
        ConfigMap covers without explicit targets; None when none covers it or it states its targets."""
        if not pick_entries((e for e, _ in self.entries), model_id, namespace):
            return None
        s = self.for_model(model_id, namespace)
        if s.target_ttft_ms is not None:
            return None
        return s.slo_multiplier, f"{self.name}[{s.source}]"

    def slo_for(self, model_id: str, namespace: str) -> ModelTarget | None:
        """The model's explicit SLOs (ms), for a VA without a service class; None when not given."""
        s = self.for_model(model_id, namespace)
        if s.target_ttft_ms is None or s.target_itl_ms is None:
            return None
        return ModelTarget(
            model=model_id,
            itl=s.target_itl_ms,
            ttft=s.target_ttft_ms,
            ttft_percentile=s.ttft_percentile,
            itl_percentile=s.itl_percentile,
            attainment=s.attainment,
        )


def _values(where: str, f: Mapping[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    if "sloMultiplier" in f:
        k = as_float(f"{where}.sloMultiplier", f["sloMultiplier"], high=1e3)
        if k <= 1.0:
            raise EntryError(f"{where}.sloMultiplier must be greater than 1, got {k:g}")
        out["slo_multiplier"] = k
    if "tuningEnabled" in f:
        out["tuning_enabled"] = as_bool(f"{where}.tuningEnabled", f["tuningEnabled"])
    has_ttft, has_itl = "targetTTFT" in f, "targetITL" in f
    if has_ttft != has_itl:
        raise EntryError(f"{where}: targetTTFT and targetITL go together (both or neither)")
    if has_ttft:
        ttft = as_float(f"{where}.targetTTFT", f["targetTTFT"], high=1e7)
        itl = as_float(f"{where}.targetITL", f["targetITL"], high=1e7)
        if ttft <= 0 or itl <= 0:
            raise EntryError(f"{where}: targetTTFT and targetITL must be greater than 0 ms")
        out["target_ttft_ms"], out["target_itl_ms"] = ttft, itl
    for key, name in _SHARES.items():
        if key in f:
            share = as_float(f"{where}.{key}", f[key], high=100.0)
            if not 0.0 <= share < 100.0:
                raise EntryError(f"{where}.{key} must be a percentage in [0, 100), e.g. 99; got {share:g}")
            out[name] = share
    return out


def parse_queueing_config(
    data: Mapping[str, object] | None, *, name: str = QUEUEING_CONFIG_MAP_NAMES[0]
) -> QueueingModelConfig:
    """Parse the ConfigMap's ``data``; None (no ConfigMap) gives ``present=False``."""
    entries, problems = parse_entries(name, data)
    parsed: list[tuple[Entry, Mapping[str, object]]] = []
    for entry in entries:
        where = f"{name}[{entry.key}]"
        try:
            values = _values(where, entry.fields)
        except EntryError as exc:
            problems.append(f"{exc} (entry skipped)")
            continue
        problems.extend(
            f"{where}: unknown key {k!r} (ignored)"
            for k in entry.fields
            if k not in _KEYS and k not in _SHARES
        )
        parsed.append((entry, values))
    present = data is not None and any(e.model_id is None for e, _ in parsed)
    return QueueingModelConfig(present, tuple(parsed), tuple(problems), name)
