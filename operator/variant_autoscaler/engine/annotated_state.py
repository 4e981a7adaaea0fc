"""What the operator keeps about annotated HPAs and ScaledObjects, which have no status of ours.

A VariantAutoscaling keeps its learned profile (:mod:`.learning`) and its model's demand forecast
(:mod:`.ahead`) in its own status. An annotated HPA or ScaledObject keeps the same two things in its
entry of one ConfigMap of the operator's namespace, ``WVA_LEARNED_PROFILES_CONFIG_MAP``
(:class:`~variant_autoscaler.adapters.state_store.StateStore`), each in the shape a VA's status gives it:
the learned profile in the object's own entry (``namespace.Kind.name``: ``{"learnedProfile": ...}``),
the forecast once per model and namespace, however many objects serve the model (``namespace.model.``
and a digest of the model ID: ``{"forecast": ...}``, about 2.5 KB). So a restarted operator, or a new
leader, resumes both for a WVA v0.9 variant as it does for a VA: the learned profile instead of learning
afresh, the forecaster's error quantiles instead of twenty intervals of warm-up.

The ConfigMap is read from the cycle's list of the operator namespace's ConfigMaps when this process
starts leading, and written at most once per cycle for all annotated objects, only when something
changed (with ``STATUS_REFRESH_INTERVAL``: when a learned profile's source changed, or the interval
elapsed). Entries of objects not seen for :data:`FORGET_AFTER_S` are dropped.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from variant_autoscaler.adapters.state_store import StateStore, entry_key
from variant_autoscaler.core.status import parse_time
from variant_autoscaler.engine.translate import VariantContext
from variant_autoscaler.errors import KubeError
from variant_autoscaler.settings import Settings

__all__ = ["FORECAST", "FORGET_AFTER_S", "LEARNED_PROFILE", "AnnotatedState", "key_of", "model_key"]

logger = logging.getLogger(__name__)

LEARNED_PROFILE = "learnedProfile"
FORECAST = "forecast"
#: Entries of annotated objects not seen for this long are dropped from the ConfigMap (a failed list of
#: HPAs or ScaledObjects must not wipe what was learned).
FORGET_AFTER_S = 24 * 3600.0
#: Where each section records when it was last brought up to date.
_SEEN_AT = {LEARNED_PROFILE: "lastRunTime", FORECAST: "updated"}

ModelKey = tuple[str, str]  # (model ID, namespace)


class AnnotatedState:
    """The annotated objects' entries, as read this leadership term and as last written."""

    def __init__(self, settings: Settings, kube: Any) -> None:
        self.store = StateStore(kube, settings.operator_namespace, settings.learned_profiles_config_map)
        self._entries: dict[str, dict[str, Any]] | None = None  # the ConfigMap's, once loaded
        self._last_write: float | None = None

    def new_term(self) -> None:
        """This process starts leading: another one may have written meanwhile."""
        self._entries = None

    def load(
        self, contexts: Sequence[VariantContext], listed: Mapping[str, Mapping[str, Any]] | None
    ) -> None:
        """Read the ConfigMap from ``listed`` (the operator namespace's ConfigMaps as the cycle listed
        them; None: not listed) once per term, when there are annotated objects."""
        if self._entries is None and listed is not None and any(c.annotated is not None for c in contexts):
            self._entries = self.store.load(listed.get(self.store.name))

    def learned_profile(self, ctx: VariantContext) -> Mapping[str, Any] | None:
        """The stored learned profile of an annotated object (None: none stored, or not loaded)."""
        if ctx.annotated is None:
            return None
        return self._section(key_of(ctx), LEARNED_PROFILE)

    def forecast(self, ctx: VariantContext) -> Mapping[str, Any] | None:
        """The stored forecast of an annotated object's model (None: none stored, or not loaded)."""
        if ctx.annotated is None or not ctx.model_id:
            return None
        return self._section(model_key(ctx.model_id, ctx.key[0]), FORECAST)

    def _section(self, key: str, name: str) -> Mapping[str, Any] | None:
        value = ((self._entries or {}).get(key) or {}).get(name)
        return value if isinstance(value, Mapping) else None

    async def persist(
        self,
        annotated: Sequence[VariantContext],
        forecast: Callable[[ModelKey], Mapping[str, Any] | None],
        now: datetime,
        refresh_seconds: float,
    ) -> None:
        """Write each annotated object's learned profile as this cycle left it (``ctx.learning``) and
        each of their models' ``forecast((model, namespace))`` (None keeps what is stored): one ConfigMap
        write at most, only when it changed (and, with a refresh interval, when a learned profile's
        source changed or the interval elapsed)."""
        if self._entries is None:
            return
        entries = dict(self._entries)
        urgent = False

        def put(key: str, name: str, value: Mapping[str, Any]) -> None:
            entries[key] = {
                **(entries.get(key) or {}),
                name: {k: v for k, v in value.items() if v is not None},
            }

        models: set[ModelKey] = set()
        for ctx in annotated:
            if ctx.annotated is None:
                continue
            if ctx.model_id:
                models.add((ctx.model_id, ctx.key[0]))
            profile = ctx.learning.status if ctx.learning is not None else None
            if profile is not None:
                before = (entries.get(key_of(ctx)) or {}).get(LEARNED_PROFILE) or {}
                urgent |= before.get("source") != profile.get("source")
                put(key_of(ctx), LEARNED_PROFILE, profile)
        for model, namespace in sorted(models):
            state = forecast((model, namespace))
            if state is not None:
                put(model_key(model, namespace), FORECAST, state)
        cutoff = now.timestamp() - FORGET_AFTER_S
        for key in list(entries):
            seen = _seen(entries[key])
            if seen is None or seen < cutoff:
                del entries[key]
        moment = time.monotonic()
        due = refresh_seconds <= 0 or self._last_write is None or moment - self._last_write >= refresh_seconds
        if not (due or urgent):
            return
        try:
            if await self.store.save(entries, weight=_weight):
                self._last_write = moment
            self._entries = entries
        except KubeError as exc:
            logger.warning("cannot write the annotated objects' ConfigMap %s: %s", self.store.name, exc)


def key_of(ctx: VariantContext) -> str:
    """An annotated object's entry key (``namespace.Kind.name``)."""
    a = ctx.annotated
    assert a is not None
    return entry_key(a.namespace, a.source_kind, a.name)


def model_key(model: str, namespace: str) -> str:
    """The entry key of a model's forecast: ``namespace.model.`` and a digest of the model ID (which may
    hold characters a ConfigMap key does not allow, such as ``/``)."""
    return entry_key(namespace, "model", hashlib.sha256(model.encode()).hexdigest()[:40])


def _seen(entry: Mapping[str, Any]) -> float | None:
    """When any section of ``entry`` was last brought up to date (epoch seconds)."""
    times = []
    for name, field in _SEEN_AT.items():
        section = entry.get(name)
        when = parse_time(section.get(field)) if isinstance(section, Mapping) else None
        if when is not None:
            times.append(when.timestamp())
    return max(times) if times else None


def _weight(entry: Mapping[str, Any]) -> float:
    """What an entry is worth keeping when the ConfigMap is full: the windows its profile learned from,
    then the intervals its forecaster learned."""
    profile = entry.get(LEARNED_PROFILE) or {}
    forecast = entry.get(FORECAST) or {}
    try:
        windows = float(profile.get("decodeWindows") or 0) + float(profile.get("prefillWindows") or 0)
        steps = float(forecast.get("step") or 0)
    except (TypeError, ValueError, AttributeError):
        return 0.0
    return windows + 1e-3 * steps
