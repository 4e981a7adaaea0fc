"""Profiles learned online, in the cycle: collect the pod windows, learn per variant, choose the profile.

Per cycle, whatever the number of variants: one fixed set of PromQL queries
(:mod:`variant_autoscaler.adapters.profile_metrics`) over the time since the last collection (one cycle
interval, usually; a cycle triggered early by a change learns nothing, so that no window is counted
twice). A failed collection means no learning this cycle, never a failed cycle.

For each variant with a scale target — a model on the accelerator it runs on — :func:`core.learning.learn`
continues from the stored state: the VA's ``status.learnedProfile`` (what this process computed last,
while it leads: a status may be written less often than every cycle), or for an annotated HPA or
ScaledObject its entry in the ConfigMap ``WVA_LEARNED_PROFILES_CONFIG_MAP`` of the operator's namespace
(:mod:`.annotated_state`, read from the cycle's list of ConfigMaps when this process starts leading,
written at most once per cycle for all of them, beside the forecast). The chosen profile
goes to the planner (``ctx.profiles``); the status object, the Events and the reason's mention of the
profile go to the variant's decision.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from variant_autoscaler.adapters.profile_metrics import ProfileMetrics, ProfileSnapshot
from variant_autoscaler.adapters.prometheus import Collector
from variant_autoscaler.api.queueing_config import QueueingModelConfig
from variant_autoscaler.api.v1alpha1 import accelerator_of
from variant_autoscaler.core.decision import DEFAULT_MAX_BATCH
from variant_autoscaler.core.estimator import PodWindow
from variant_autoscaler.core.learning import LearningInputs, learn
from variant_autoscaler.core.model import Profile
from variant_autoscaler.core.profile_choice import ProfileChoice, ProfileMode, ProfileSource
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.core.status import parse_time
from variant_autoscaler.engine.annotated_state import LEARNED_PROFILE, AnnotatedState, key_of
from variant_autoscaler.engine.translate import VariantContext, pod_owner
from variant_autoscaler.errors import CollectionError, ConfigError
from variant_autoscaler.planner import profiles_of
from variant_autoscaler.settings import Settings

__all__ = ["ProfileLearner"]

logger = logging.getLogger(__name__)

SECTION = LEARNED_PROFILE


class ProfileLearner:
    """Keeps the learning between cycles: the last collection, this leadership term's states."""

    def __init__(self, settings: Settings, annotated: AnnotatedState) -> None:
        self.enabled = settings.profile_learning
        self.annotated = annotated
        # This term's newest learnedProfile per variant: the status is written less often with
        # STATUS_REFRESH_INTERVAL, and the body read next cycle may predate it.
        self._memory: dict[str, Mapping[str, Any]] = {}
        self._last_end: float | None = None

    def new_term(self) -> None:
        """This process starts leading: another one may have learned meanwhile."""
        self._memory.clear()
        self._last_end = None
        self.annotated.new_term()

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
        queueing: QueueingModelConfig | None = None,
    ) -> None:
        """Learn for every variant that has a scale target; set ``ctx.learning`` and ``ctx.profiles``.
        An annotated object's stored state is :class:`AnnotatedState`'s (loaded by the cycle);
        ``queueing``: WVA's queueing-model ConfigMap, whose ``tuningEnabled: false`` keeps a model on
        its hand profile where its VA does not choose (``profileSource``)."""
        if not self.enabled:
            return
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
                    ctx.previous.get(SECTION) if ctx.va is not None else self.annotated.learned_profile(ctx)
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


def _key(ctx: VariantContext) -> str:
    if ctx.va is not None:
        return str((ctx.body.get("metadata") or {}).get("uid") or ctx.key)
    return key_of(ctx)


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
