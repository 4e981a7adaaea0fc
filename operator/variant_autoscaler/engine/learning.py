"""Profiles learned online, in the cycle: collect the pod windows, learn per variant, choose the profile.

Per cycle, whatever the number of variants: one fixed set of PromQL queries
(:mod:`variant_autoscaler.adapters.profile_metrics`) over the time since the last collection (one cycle
interval, usually; a cycle triggered early by a change learns nothing, so that no window is counted
twice). A failed collection means no learning this cycle, never a failed cycle.

For each variant with a scale target — a model on the accelerator it runs on — :func:`core.learning.learn`
continues from the stored state: the VA's ``status.learnedProfile`` (what this process computed last,
while it leads: a status may be written less often than every cycle), or for an annotated HPA or
ScaledObject its entry in the ConfigMap ``WVA_LEARNED_PROFILES_CONFIG_MAP`` of the operator's namespace
(:class:`~variant_autoscaler.adapters.state_store.StateStore`, read from the cycle's list of ConfigMaps
when this process starts leading, written at most once per cycle for all of them). The chosen profile
goes to the planner (``ctx.profiles``); the status object, the Events and the reason's mention of the
profile go to the variant's decision.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from variant_autoscaler.adapters.profile_metrics import ProfileMetrics, ProfileSnapshot
from variant_autoscaler.adapters.prometheus import Collector
from variant_autoscaler.adapters.state_store import StateStore, entry_key
from variant_autoscaler.api.queueing_config import QueueingModelConfig
from variant_autoscaler.api.v1alpha1 import accelerator_of
from variant_autoscaler.core.decision import DEFAULT_MAX_BATCH
from variant_autoscaler.core.estimator import PodWindow
from variant_autoscaler.core.learning import LearningInputs, learn
from variant_autoscaler.core.model import Profile
from variant_autoscaler.core.profile_choice import ProfileChoice, ProfileMode, ProfileSource
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.core.status import parse_time
from variant_autoscaler.engine.translate import VariantContext, pod_owner
from variant_autoscaler.errors import CollectionError, ConfigError, KubeError
from variant_autoscaler.planner import profiles_of
from variant_autoscaler.settings import Settings

__all__ = ["ProfileLearner"]

logger = logging.getLogger(__name__)

SECTION = "learnedProfile"
#: Entries of annotated objects not seen for this long are dropped from the ConfigMap (a failed list of
#: HPAs or ScaledObjects must not wipe what was learned).
FORGET_AFTER_S = 24 * 3600.0


class ProfileLearner:
    """Keeps the learning between cycles: the last collection, this leadership term's states."""

    def __init__(self, settings: Settings, kube: Any) -> None:
        self.enabled = settings.profile_learning
        self.store = StateStore(kube, settings.operator_namespace, settings.learned_profiles_config_map)
        # This term's newest learnedProfile per variant: the status is written less often with
        # STATUS_REFRESH_INTERVAL, and the body read next cycle may predate it.
        self._memory: dict[str, Mapping[str, Any]] = {}
        self._entries: dict[str, dict[str, Any]] | None = None  # the ConfigMap's, once loaded
        self._last_end: float | None = None
        self._last_store_write: float | None = None

    def new_term(self) -> None:
        """This process starts leading: another one may have learned meanwhile."""
        self._memory.clear()
        self._entries = None
        self._last_end = None

    # --- collection ---------------------------------------------------------------------------------

    async def collect(
        self, collector: Callable[[], Awaitable[Collector]], now: float, interval: float
    ) -> tuple[ProfileSnapshot | None, str | None]:
        """This cycle's pod windows (None: nothing to learn from this cycle), and why not."""
        if not self.enabled:
            return None, None
        if self._last_end is not None and now - self._last_end < 0.5 * interval:
            return None, None  # an early cycle: its window would overlap the last one
        window = interval if self._last_end is None else min(now - self._last_end, 2.0 * interval)
        try:
            client = (await collector()).client
            snapshot = await ProfileMetrics(client).collect(now=now, window_seconds=window)
        except (CollectionError, ConfigError) as exc:
            logger.warning("profile learning: no windows this cycle: %s", exc)
            return None, str(exc)
        self._last_end = now
        return snapshot, None

    # --- per variant --------------------------------------------------------------------------------

    def apply(
        self,
        contexts: Sequence[VariantContext],
        snapshot: ProfileSnapshot | None,
        now: datetime,
        listed: Mapping[str, Mapping[str, Any]] | None,
        queueing: QueueingModelConfig | None = None,
    ) -> None:
        """Learn for every variant that has a scale target; set ``ctx.learning`` and ``ctx.profiles``.
        ``listed``: the operator namespace's ConfigMaps as the cycle listed them (None: not listed);
        ``queueing``: WVA's queueing-model ConfigMap, whose ``tuningEnabled: false`` keeps a model on
        its hand profile where its VA does not choose (``profileSource``)."""
        if not self.enabled:
            return
        if self._entries is None and listed is not None and any(c.annotated is not None for c in contexts):
            self._entries = self.store.load(listed.get(self.store.name))
        owned = _owned_windows(contexts, snapshot)
        seen: set[str] = set()
        for ctx in contexts:
            if ctx.invalid or ctx.target is None or ctx.model_id is None:
                continue
            if ctx.va is None and ctx.annotated is None:
                continue
            key = _key(ctx)
            seen.add(key)
            hand, max_batch, mode, accelerator = self._spec_view(ctx)
            mode_reason = None
            if queueing is not None and (ctx.va is None or not ctx.va.spec.profile_source):
                mode_reason = queueing.tuning_off(ctx.model_id, ctx.key[0])
                if mode_reason is not None:
                    mode = ProfileMode.SPEC
            stored = self._memory.get(key)
            if stored is None:
                stored = (
                    ctx.previous.get(SECTION)
                    if ctx.va is not None
                    else ((self._entries or {}).get(_store_key(ctx)) or {}).get(SECTION)
                )
            result = learn(
                LearningInputs(
                    now=now,
                    accelerator=accelerator,
                    mode=mode,
                    hand=hand,
                    windows=owned.get(id(ctx), ()),
                    collected=snapshot is not None,
                    max_batch=max_batch,
                    last_scale=_last_scale(ctx, now),
                    stored=stored if isinstance(stored, Mapping) else None,
                    mode_reason=mode_reason,
                )
            )
            ctx.learning = result
            self._memory[key] = result.status
            ctx.profiles = self._profiles(ctx, result.choice, accelerator, max_batch)
            if ctx.annotated is not None and accelerator is not None and ctx.profiles:
                ctx.accelerator = accelerator
        for gone in set(self._memory) - seen:
            del self._memory[gone]

    @staticmethod
    def _spec_view(
        ctx: VariantContext,
    ) -> tuple[ServiceParms | None, int | None, ProfileMode, str | None]:
        """(hand profile, server's max batch, profile choice, accelerator) of a variant."""
        target = ctx.target
        assert target is not None
        if ctx.va is None:
            accelerator = accelerator_of((ctx.body.get("metadata") or {}).get("labels"))
            return None, target.max_num_seqs, ProfileMode.AUTO, accelerator
        spec = ctx.va.spec
        profile = spec.profile_for(ctx.accelerator) if ctx.accelerator else None
        hand = None
        if profile is not None:
            p = profile.perf_parms
            hand = ServiceParms(alpha=p.alpha, beta=p.beta, gamma=p.gamma, delta=p.delta)
        max_batch = target.max_num_seqs or (profile.max_batch_size if profile is not None else None)
        return hand, max_batch, ProfileMode.parse(spec.profile_source), ctx.accelerator

    @staticmethod
    def _profiles(
        ctx: VariantContext, choice: ProfileChoice, accelerator: str | None, max_batch: int | None
    ) -> tuple[Profile, ...] | None:
        """The planner's profiles: None keeps the spec's; () sizes by saturation."""
        if choice.source is not ProfileSource.LEARNED or choice.parms is None or accelerator is None:
            return None if ctx.va is not None else ()
        count, batch = 1, max_batch or DEFAULT_MAX_BATCH
        others: tuple[Profile, ...] = ()
        if ctx.va is not None:
            try:
                spec = profiles_of(ctx.va.spec.model_profile)
            except ConfigError:
                return None  # the planner reports the spec's bad entry
            mine = next((p for p in spec if p.accelerator == accelerator), None)
            if mine is not None:
                count, batch = mine.acc_count, mine.max_batch_size
            others = tuple(p for p in spec if p.accelerator != accelerator)
        return (Profile(accelerator, count, batch, choice.parms), *others)

    # --- annotated objects' state -------------------------------------------------------------------

    async def persist(
        self, annotated: Sequence[VariantContext], now: datetime, refresh_seconds: float
    ) -> None:
        """Write the annotated objects' learned state: one ConfigMap write at most, only when it changed
        (and, with STATUS_REFRESH_INTERVAL, when a source changed or the interval elapsed)."""
        if not self.enabled or self._entries is None:
            return
        entries = dict(self._entries)
        sources_changed = False
        for ctx in annotated:
            if ctx.learning is None:
                continue
            key = _store_key(ctx)
            before = (entries.get(key) or {}).get(SECTION) or {}
            sources_changed |= before.get("source") != ctx.learning.status.get("source")
            entries[key] = {**(entries.get(key) or {}), SECTION: _compact(ctx.learning.status)}
        cutoff = now.timestamp() - FORGET_AFTER_S
        for key in list(entries):
            seen = parse_time(((entries[key] or {}).get(SECTION) or {}).get("lastRunTime"))
            if seen is None or seen.timestamp() < cutoff:
                del entries[key]
        moment = time.monotonic()
        due = (
            refresh_seconds <= 0
            or self._last_store_write is None
            or moment - self._last_store_write >= refresh_seconds
        )
        if not (due or sources_changed):
            return
        try:
            if await self.store.save(entries, weight=_weight):
                self._last_store_write = moment
            self._entries = entries
        except KubeError as exc:
            logger.warning("cannot write the learned profiles' ConfigMap %s: %s", self.store.name, exc)


def _key(ctx: VariantContext) -> str:
    if ctx.va is not None:
        return str((ctx.body.get("metadata") or {}).get("uid") or ctx.key)
    return _store_key(ctx)


def _store_key(ctx: VariantContext) -> str:
    a = ctx.annotated
    assert a is not None
    return entry_key(a.namespace, a.source_kind, a.name)


def _compact(status: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if v is not None}


def _weight(entry: Mapping[str, Any]) -> float:
    """What an entry is worth keeping when the ConfigMap is full: the windows it learned from."""
    section = entry.get(SECTION) or {}
    try:
        return float(section.get("decodeWindows") or 0) + float(section.get("prefillWindows") or 0)
    except (TypeError, ValueError):
        return 0.0


def _last_scale(ctx: VariantContext, now: datetime) -> float | None:
    """The last change of the variant's replicas: its status' lastScaleTime, or now when the target's
    replicas differ from what the status last recorded (anyone's change)."""
    previous = ctx.previous
    target = ctx.target
    recorded = (previous.get("currentAlloc") or {}).get("numReplicas")
    if target is not None and isinstance(recorded, int) and recorded != target.spec_replicas:
        return now.timestamp()
    when = parse_time((previous.get("actuation") or {}).get("lastScaleTime"))
    return when.timestamp() if when is not None else None


def _owned_windows(
    contexts: Sequence[VariantContext], snapshot: ProfileSnapshot | None
) -> dict[int, list[PodWindow]]:
    """Each variant's pods' windows (the pods :func:`translate.pod_owner` gives it)."""
    out: dict[int, list[PodWindow]] = {}
    if snapshot is None:
        return out
    owner = pod_owner(contexts)
    for window in snapshot.windows:
        ctx = owner(window.namespace, window.model, window.pod)
        if ctx is not None:
            out.setdefault(id(ctx), []).append(window)
    return out
