"""WVA v0.9's variants without a CRD: HPAs and KEDA ScaledObjects annotated ``llm-d.ai/managed: "true"``.

Listed each cycle (one LIST of HPAs and one of ScaledObjects, cluster-wide or per served namespace,
whatever the number of variants; the HPA list also tells patch mode which targets an HPA manages). A
missing KEDA CRD is not an error: there are no ScaledObjects then. An annotated object that cannot be
planned gets one Warning Event saying why (again only when it changes).

Such an object has no status: what a VA keeps in its status from one cycle to the next (the last
decision, the stabilisation window) is kept here in memory, by uid, and lost on a restart (the first
cycle after it starts from the target's replicas, as for a new VA).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from variant_autoscaler.adapters.kube import JSON, ForbiddenError, KubeClient, NotFoundError
from variant_autoscaler.api.annotated import AnnotationError, parse_annotated
from variant_autoscaler.core import status as st
from variant_autoscaler.engine.translate import VariantContext
from variant_autoscaler.errors import KubeError
from variant_autoscaler.settings import Settings

__all__ = ["AnnotatedSource", "Listed"]

logger = logging.getLogger(__name__)

_HPA = ("autoscaling/v2", "HorizontalPodAutoscaler")
_SCALED_OBJECT = ("keda.sh/v1alpha1", "ScaledObject")


@dataclass
class Listed:
    """One cycle's HPAs and ScaledObjects (each with its apiVersion and kind), and what failed."""

    hpas: list[JSON] = field(default_factory=list)
    scaled_objects: list[JSON] = field(default_factory=list)
    hpa_error: str | None = None


def _typed(items: Sequence[JSON], api_kind: tuple[str, str]) -> list[JSON]:
    # Items of a built-in kind's LIST carry no apiVersion/kind of their own.
    return [{**item, "apiVersion": api_kind[0], "kind": api_kind[1]} for item in items]


class AnnotatedSource:
    """Lists the annotated objects and keeps their decisions' history between cycles."""

    def __init__(self, settings: Settings, kube: KubeClient) -> None:
        self.settings = settings
        self.kube = kube
        self._memory: dict[str, Mapping[str, Any]] = {}
        self._reported: dict[str, str] = {}
        self._keda_absent_logged = False
        self._keda_forbidden_logged = False

    async def _each_namespace(self, list_one: Any) -> list[JSON]:
        if self.settings.clusterwide:
            items: list[JSON] = await list_one(None)
            return items
        lists = await asyncio.gather(*(list_one(ns) for ns in self.settings.namespaces))
        return [item for found in lists for item in found]

    async def read(self) -> Listed:
        hpas, scaled = await asyncio.gather(
            self._each_namespace(self.kube.list_hpas),
            self._each_namespace(self.kube.list_scaled_objects),
            return_exceptions=True,
        )
        out = Listed()
        if isinstance(hpas, KubeError):
            out.hpa_error = str(hpas)
        elif isinstance(hpas, BaseException):
            raise hpas
        else:
            out.hpas = _typed(hpas, _HPA)
        if isinstance(scaled, NotFoundError):
            if not self._keda_absent_logged:
                self._keda_absent_logged = True
                logger.info("KEDA's ScaledObject CRD is not installed: no ScaledObjects to discover")
        elif isinstance(scaled, ForbiddenError):
            if not self._keda_forbidden_logged:
                self._keda_forbidden_logged = True
                logger.warning("not allowed to list KEDA ScaledObjects (RBAC): %s", scaled)
        elif isinstance(scaled, KubeError):
            logger.warning("cannot list KEDA ScaledObjects: %s", scaled)
        elif isinstance(scaled, BaseException):
            raise scaled
        else:
            out.scaled_objects = _typed(scaled, _SCALED_OBJECT)
        return out

    def contexts(
        self,
        listed: Listed,
        taken: set[tuple[str, str]] | None = None,
        excluded: frozenset[str] = frozenset(),
    ) -> tuple[list[VariantContext], list[tuple[JSON, str]]]:
        """The managed objects as variants, and the managed ones that cannot be planned (with why, once
        per distinct message). Memory of objects gone is dropped.

        ``taken``: the ``(namespace, variant_name)`` of the VAs' series. An annotated object exports its
        decision under its target's name; a second variant under the same name (a VA named like the
        target, or a second annotated object for it) would make the scrape fail as a whole, so it is
        refused.

        ``excluded``: namespaces annotated ``wva.llmd.ai/exclude``; their objects are passed over as if
        not listed (no variant, no refusal: that comes once the namespace is served again)."""
        found: list[VariantContext] = []
        refused: list[tuple[JSON, str]] = []
        seen: set[str] = set()
        names = set(taken or ())
        for obj in (*listed.hpas, *listed.scaled_objects):
            meta = obj.get("metadata") or {}
            if meta.get("deletionTimestamp") or meta.get("namespace") in excluded:
                continue
            uid = str(meta.get("uid") or f"{obj.get('kind')}/{meta.get('namespace')}/{meta.get('name')}")
            try:
                variant = parse_annotated(obj, controller_instance=self.settings.controller_instance)
            except AnnotationError as exc:
                seen.add(uid)
                if self._reported.get(uid) != str(exc):
                    self._reported[uid] = str(exc)
                    refused.append((obj, str(exc)))
                continue
            if variant is None:
                continue
            seen.add(uid)
            series = (variant.namespace, variant.metrics_variant_name)
            if series in names:
                message = (
                    f"{variant.source_kind} {variant.namespace}/{variant.name}: another variant already "
                    f"exports its decision as variant_name={variant.target_name!r} (a VariantAutoscaling, "
                    "or another annotated object for the same target): this one is ignored"
                )
                if self._reported.get(uid) != message:
                    self._reported[uid] = message
                    refused.append((obj, message))
                continue
            names.add(series)
            self._reported.pop(uid, None)
            found.append(
                VariantContext(
                    body=obj,
                    key=(variant.namespace, f"{variant.source_kind}/{variant.name}"),
                    annotated=variant,
                    memory=self._memory.get(uid, {}),
                )
            )
        for gone in set(self._memory) - seen:
            del self._memory[gone]
        for gone in set(self._reported) - seen:
            del self._reported[gone]
        return found, refused

    def remember(self, ctx: VariantContext, status: Mapping[str, Any]) -> None:
        """Keep the decision's status for the next cycle (what a VA's status would hold)."""
        uid = str((ctx.body.get("metadata") or {}).get("uid") or ctx.key)
        self._memory[uid] = st.strip_nulls(dict(status))
