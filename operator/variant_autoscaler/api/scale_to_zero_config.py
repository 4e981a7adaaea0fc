"""WVA's ``wva-model-scale-to-zero-config`` ConfigMap: which models may go to zero replicas, and after how
long without a request.

Entries (``default`` and per-model overrides, :mod:`variant_autoscaler.api.wva_entries`; an override may
name only ``model_id``, for every namespace): ``enable_scale_to_zero`` (true/false) and
``retention_period`` (a duration, default ``10m``). A model is idle when no request succeeded within the
retention period (``sum(increase(vllm:request_success_total{...}[retention])) == 0``).

Without the ConfigMap (or where it says nothing), ``WVA_SCALE_TO_ZERO`` decides, as in every WVA
generation: ``"true"`` enables it for every model. A variant still goes to zero only if its minReplicas
allows it (0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from variant_autoscaler.api.wva_entries import (
    Entry,
    EntryError,
    as_bool,
    as_duration,
    parse_entries,
    pick_entries,
)

__all__ = [
    "DEFAULT_RETENTION_SECONDS",
    "SCALE_TO_ZERO_CONFIG_MAP_NAMES",
    "ScaleToZero",
    "ScaleToZeroConfig",
    "parse_scale_to_zero_config",
]

SCALE_TO_ZERO_CONFIG_MAP_NAMES: tuple[str, ...] = (
    "wva-model-scale-to-zero-config",
    "model-scale-to-zero-config",
    "workload-variant-autoscaler-model-scale-to-zero-config",
)
DEFAULT_RETENTION_SECONDS = 600.0
_KEYS = ("enable_scale_to_zero", "retention_period")


@dataclass(frozen=True, slots=True)
class ScaleToZero:
    """What applies to one model: enabled, the idle period, and which entry said so."""

    enabled: bool
    retention_seconds: float = DEFAULT_RETENTION_SECONDS
    source: str = "default"


@dataclass(frozen=True, slots=True)
class ScaleToZeroConfig:
    entries: tuple[tuple[Entry, bool | None, float | None], ...] = ()
    problems: tuple[str, ...] = ()

    def for_model(self, model_id: str, namespace: str, *, env_default: str | None = None) -> ScaleToZero:
        """The setting for ``model_id`` in ``namespace``; ``env_default`` is ``WVA_SCALE_TO_ZERO``."""
        enabled = (env_default or "").strip().lower() == "true"
        source = "WVA_SCALE_TO_ZERO" if env_default is not None else "default (off)"
        retention = DEFAULT_RETENTION_SECONDS
        values = {id(e): (on, keep) for e, on, keep in self.entries}
        for entry in pick_entries((e for e, _, _ in self.entries), model_id, namespace):
            on, keep = values[id(entry)]
            if on is not None:
                enabled, source = on, entry.key
            if keep is not None:
                retention = keep
        return ScaleToZero(enabled, retention, source)


def parse_scale_to_zero_config(
    data: Mapping[str, object] | None, *, name: str = SCALE_TO_ZERO_CONFIG_MAP_NAMES[0]
) -> ScaleToZeroConfig:
    entries, problems = parse_entries(name, data)
    parsed: list[tuple[Entry, bool | None, float | None]] = []
    for entry in entries:
        where = f"{name}[{entry.key}]"
        f = entry.fields
        try:
            on = (
                as_bool(f"{where}.enable_scale_to_zero", f["enable_scale_to_zero"]) if _KEYS[0] in f else None
            )
            keep = as_duration(f"{where}.retention_period", f["retention_period"]) if _KEYS[1] in f else None
            if keep is not None and keep <= 0:
                raise EntryError(f"{where}.retention_period must be longer than zero")
        except EntryError as exc:
            problems.append(f"{exc} (entry skipped)")
            continue
        problems.extend(f"{where}: unknown key {k!r} (ignored)" for k in f if k not in _KEYS)
        parsed.append((entry, on, keep))
    return ScaleToZeroConfig(tuple(parsed), tuple(problems))
