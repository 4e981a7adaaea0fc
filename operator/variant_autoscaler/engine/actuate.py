"""The cycle's writes to the cluster: scale and batch patches, status writes and Events.

Every write is made on the version the cycle read (a scale patch with the target's resourceVersion, a
JSON patch that tests the args it replaces, a status PUT with the VA's resourceVersion), so nothing
another writer changed since is overwritten; and only while this process leads (a replica that lost its
Lease mid-cycle writes nothing more).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from variant_autoscaler.adapters.exporter import Exporter
from variant_autoscaler.adapters.kube import (
    InvalidError,
    KubeClient,
    NotFoundError,
    ScaleTarget,
    target_from_deployment,
    with_max_num_seqs,
)
from variant_autoscaler.controller.events import EventRecorder, EventType
from variant_autoscaler.core import status as st
from variant_autoscaler.core.decision import ActuationResult, EventSpec, Report, VariantDecision, unchanged
from variant_autoscaler.engine.translate import VariantContext
from variant_autoscaler.errors import ConflictError, KubeError
from variant_autoscaler.settings import Settings

__all__ = ["Actuator"]

logger = logging.getLogger(__name__)


class Actuator:
    """Writes one cycle's decisions; ``leading`` says whether this process still holds the Lease, and
    ``trigger`` asks for another cycle soon (a target changed)."""

    def __init__(
        self,
        settings: Settings,
        *,
        kube: KubeClient,
        exporter: Exporter,
        events: EventRecorder,
        leading: Callable[[], bool],
        trigger: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.exporter = exporter
        self.events = events
        self.leading = leading
        self.trigger = trigger

    async def actuate(self, ctx: VariantContext, decision: VariantDecision) -> ActuationResult:
        """Patch mode: set what the decision asks of the target, on the version this cycle read."""
        target = ctx.target
        assert target is not None
        done: list[str] = []
        failed: st.Condition | None = None
        try:
            if decision.scale_to is not None:
                moved = await self.patch_replicas(target, decision.scale_to)
                if moved is not None:
                    return ActuationResult(
                        applied=False,
                        condition=self.target_changed(
                            target,
                            f"not patching {target.kind}/{target.name}: its replicas changed from "
                            f"{target.spec_replicas} to {moved} after this cycle read them (another "
                            "controller or a person); deciding again on the new count",
                        ),
                    )
                direction = "up" if decision.scale_to > target.spec_replicas else "down"
                plan = decision.inputs.plan
                self.exporter.scalings.labels(
                    variant_name=ctx.key[1],
                    namespace=ctx.key[0],
                    direction=direction,
                    reason=plan.decided_by if plan is not None else "hold",
                ).inc()
                done.append(
                    f"scaled {target.kind}/{target.name} from {target.spec_replicas} to {decision.scale_to}"
                )
            if decision.batch_to is not None:
                failed = await self.patch_max_batch(target, decision.batch_to)
                if failed is None:
                    done.append(f"set --max-num-seqs {decision.batch_to} (was {target.max_num_seqs})")
        except KubeError as exc:
            failed = st.Condition(st.ACTUATED, "False", st.REASON_SCALE_FAILED, str(exc))
        said = "; ".join(done)
        if failed is not None:
            # What was done before the failure stays said.
            message = f"{said}; then: {failed.message}" if said else failed.message
            return ActuationResult(
                applied=False, condition=replace(failed, message=message), done=tuple(done)
            )
        if done:
            return ActuationResult(
                applied=True,
                condition=st.Condition(st.ACTUATED, "True", st.REASON_SCALED, said),
                done=tuple(done),
            )
        return unchanged(decision)

    async def patch_max_batch(self, target: ScaleTarget, max_batch: int) -> st.Condition | None:
        """Set the serving container's ``--max-num-seqs``, on the args this cycle read; None once done.

        The JSON patch tests the args first, so it never overwrites args changed since the read (the
        API server answers 422, which says nothing more): the object is read again to tell that case,
        reported as ``TargetChanged``, from a real rejection, which is raised.
        """
        path = f"/spec/template/spec/containers/{target.container_index}/{target.args_field}"
        old = list(target.container_args or ())
        ops: list[dict[str, Any]] = [{"op": "test", "path": path, "value": old}] if old else []
        ops.append(
            {"op": "replace" if old else "add", "path": path, "value": with_max_num_seqs(old, max_batch)}
        )
        try:
            await self.kube.json_patch(target.api_version, target.kind, target.namespace, target.name, ops)
            return None
        except InvalidError:
            fresh = await self.kube.get_object(target.api_version, target.kind, target.namespace, target.name)
            if target_from_deployment(fresh).container_args == target.container_args:
                raise
        return self.target_changed(
            target,
            f"not setting --max-num-seqs on {target.kind}/{target.name}: its container's "
            f"{target.args_field} changed after this cycle read them; deciding again on the new ones",
        )

    def target_changed(self, target: ScaleTarget, message: str) -> st.Condition:
        """Someone changed the target after this cycle read it: nothing was overwritten, and the next
        cycle, soon, decides on what is there now."""
        self.trigger(f"{target.kind} {target.namespace}/{target.name} changed")
        return st.Condition(st.ACTUATED, "False", st.REASON_TARGET_CHANGED, message)

    async def patch_replicas(self, target: ScaleTarget, replicas: int) -> int | None:
        """Set the target's replicas, on the version this cycle read; None once done.

        The patch carries the target's resourceVersion, so it never lands on a target that changed
        since it was read: neither on a ``kubectl scale`` or another controller's change, nor, from a
        process whose Lease expired while its patch hung, on the new leader's. After a 409 the scale is
        read again: if only the status moved on (pods starting), the patch is retried on the new
        version; if the replicas changed, nothing is patched and their new count is returned.
        """
        version = target.resource_version
        for attempt in range(self.settings.conflict_retries + 1):
            try:
                await self.kube.patch_scale(
                    target.api_version,
                    target.kind,
                    target.namespace,
                    target.name,
                    replicas,
                    resource_version=version,
                )
                return None
            except ConflictError:
                # Retry only while leading: after a lost Lease the 409 may well be the new leader's write.
                if attempt == self.settings.conflict_retries or not self.leading():
                    raise
                scale = await self.kube.get_scale(
                    target.api_version, target.kind, target.namespace, target.name
                )
                now = int((scale.get("spec") or {}).get("replicas") or 0)
                if now != target.spec_replicas:
                    return now
                version = (scale.get("metadata") or {}).get("resourceVersion")
        return None  # pragma: no cover - the loop returns or raises

    async def release_owner(self, ctx: VariantContext) -> None:
        """Remove the ownerReference an earlier version of this operator set on the VA (WVA 2025-10's
        ownership), which would have the garbage collector delete the VA with its target: a VA does not
        own its target (WVA's final CRD). Only a reference exactly as we wrote it goes — controller true,
        blockOwnerDeletion false, pointing at the VA's target; the patch tests the list it replaces."""
        refs = list((ctx.body.get("metadata") or {}).get("ownerReferences") or [])
        target = ctx.target_ref
        if not refs or target is None:
            return

        def ours(ref: Mapping[str, Any]) -> bool:
            return (
                ref.get("controller") is True
                and ref.get("blockOwnerDeletion") is False
                and (ref.get("apiVersion"), ref.get("kind"), ref.get("name")) == target
            )

        kept = [r for r in refs if not ours(r)]
        if len(kept) == len(refs) or not self.leading():
            return
        ops = [
            {"op": "test", "path": "/metadata/ownerReferences", "value": refs},
            {"op": "replace", "path": "/metadata/ownerReferences", "value": kept},
        ]
        try:
            await self.kube.json_patch_va(ctx.key[0], ctx.key[1], ops)
            logger.info("%s/%s: removed the ownerReference to its target", ctx.key[0], ctx.key[1])
        except KubeError as exc:  # changed meanwhile (422), or gone: the next cycle looks again
            logger.warning("could not remove the owner of %s/%s: %s", ctx.key[0], ctx.key[1], exc)

    async def write_status(self, ctx: VariantContext, rep: Report) -> bool:
        """Write the status with the resourceVersion we read; on 409 re-read, rebuild and retry."""
        meta = ctx.body.get("metadata") or {}
        version = meta.get("resourceVersion")
        body: Mapping[str, Any] = rep.status
        current: Mapping[str, Any] = ctx.body
        for attempt in range(self.settings.conflict_retries + 1):
            if not self.leading():
                # Lost the Lease during this variant (a slow scale patch, or a 409 that may be the new
                # leader's write): write nothing more.
                return False
            try:
                if attempt:
                    # After a 409: the VA as it is now, and the status rebuilt on it.
                    current = await self.kube.get_va(ctx.key[0], ctx.key[1])
                    version = (current.get("metadata") or {}).get("resourceVersion")
                    body = rep.on(current)
                # With the object it was read as: a PUT, cheaper for the API server than a patch.
                await self.kube.patch_va_status(ctx.key[0], ctx.key[1], body, version, current=current)
                return True
            except ConflictError:
                self.exporter.status_conflicts.inc()
                if attempt == self.settings.conflict_retries:
                    raise
            except NotFoundError:
                return False  # deleted meanwhile
        return False  # pragma: no cover - the loop returns or raises

    async def post_all(self, ctx: VariantContext, events: Sequence[EventSpec], now: datetime) -> None:
        for event in events:
            await self.post(ctx, event.reason, event.message, event.type, now, dedupe=event.dedupe)

    async def post(
        self, ctx: VariantContext, reason: str, message: str, type_: EventType, now: datetime, *, dedupe: str
    ) -> None:
        if not self.leading():
            # Lost the Lease during this cycle (as _write_status): the new leader reports from now on.
            return
        uid = (ctx.body.get("metadata") or {}).get("uid") or ""
        digest = hashlib.sha256(f"{uid}|{reason}|{dedupe}".encode()).hexdigest()[:20]
        await self.events.post(
            ctx.body, reason=reason, message=message, type_=type_, now=now, name_suffix=digest
        )
