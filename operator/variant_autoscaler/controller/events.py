"""Kubernetes Events about VariantAutoscalings and annotated HPAs/ScaledObjects (decision changes,
refusals, invalid specs).

Not kopf's ``kopf.event``: an Event here has a name derived from the fact it reports, so an operator
restarted before it could record that it had posted one does not post it twice, and it is posted
while the caller waits, right after the caller checked that it still leads (kopf's events get generated
names and are posted later from a queue): docs/design.md, "kopf and what is custom".

Events are informative: a failure to post one is logged but never fails a cycle (the same facts are in
the status conditions, which are written with retries).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from variant_autoscaler.adapters.kube import KubeClient
from variant_autoscaler.api.v1alpha1 import GROUP, KIND, VERSION
from variant_autoscaler.errors import ConflictError, KubeError

logger = logging.getLogger(__name__)

COMPONENT = "variant-autoscaler"
EventType = Literal["Normal", "Warning"]


class EventRecorder:
    """Posts Events as ``instance`` (this process's identity, shown as the reporting instance)."""

    def __init__(self, kube: KubeClient, *, instance: str) -> None:
        self.kube = kube
        self.instance = instance

    async def post(
        self,
        va: Mapping[str, Any],
        *,
        reason: str,
        message: str,
        type_: EventType,
        now: datetime,
        name_suffix: str,
    ) -> None:
        """Post an Event about ``va`` named ``<va name>.<name_suffix>``: the same fact posted again (by an
        operator restarted before it could record that it had posted) is a 409, and posted once.

        ``va`` may be another object (an annotated HPA or ScaledObject): its own apiVersion and kind
        name it."""
        meta = va.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        involved = {
            "apiVersion": str(va.get("apiVersion") or f"{GROUP}/{VERSION}"),
            "kind": str(va.get("kind") or KIND),
            "name": name,
            "namespace": namespace,
        }
        if meta.get("uid"):
            involved["uid"] = meta["uid"]
        stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name[:200]}.{name_suffix}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.instance[:128],
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            await self.kube.create_event(namespace, event)
        except ConflictError:
            pass  # the same Event exists already: posted before a restart
        except KubeError as exc:
            logger.warning("could not post Event %s for %s/%s: %s", reason, namespace, name, exc)
