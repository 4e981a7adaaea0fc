"""kopf wiring — the only module that imports kopf. Every handler parses, delegates, maps errors.

* ``configure`` holds all of kopf's tuning; ``startup`` starts the
  :class:`~variant_autoscaler.engine.Runtime` (API clients, metrics endpoint, the Lease elector, the
  informers and the engine's task) and keeps it in ``memo``; ``cleanup`` stops it and gives up the Lease.
* With the GPU inventory on, a kopf index keeps the nodes' GPU facts in memory, and an event handler
  tells the engine about node changes; they write nothing, so kopf keeps no annotations or finalizers
  on the objects.
* The ``cycle`` probe reports leadership and the last completed cycle, and fails when cycles stop
  completing or a background task died.
* The VariantAutoscalings, the operator namespace's ConfigMaps, leader election and Events are the
  runtime's own (:mod:`variant_autoscaler.controller`); docs/design.md, "kopf and what is custom", says
  why for each, with the measurements. ``WVA_VA_WATCH=kopf`` watches the VariantAutoscalings through a
  kopf index instead (:func:`watch_vas`), for the benchmark that compares the two.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from variant_autoscaler.adapters.inventory import NodeGPUs, node_gpus
from variant_autoscaler.api.v1alpha1 import GROUP, PLURAL, VERSION
from variant_autoscaler.controller.informer import slim
from variant_autoscaler.engine import Runtime
from variant_autoscaler.errors import VariantAutoscalerError
from variant_autoscaler.settings import Settings

VariantKey = tuple[str, str]

_KOPF_PREFIX = "kopf.llmd.ai"


class _NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """A diff base that is never built.

    kopf builds one (a deep copy of the object) on every watch event, for change handlers; ours are
    index and event handlers only, which never use it. (An on.create / on.update / on.field handler
    would need the default back.)
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None


@kopf.on.startup()
async def configure(*, settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """All kopf tuning in one place."""
    cfg: Settings = memo.settings
    # State kopf might keep on objects lives under our group (our handlers need none: no finalizer).
    settings.persistence.finalizer = f"{GROUP}/variant-autoscaler"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=_KOPF_PREFIX)
    settings.persistence.diffbase_storage = _NoDiffBase(prefix=_KOPF_PREFIX, key="last-handled-configuration")
    # Keep per-object workers between cycles instead of re-creating one per object per event.
    settings.queueing.idle_timeout = 600
    # Our Events are posted by the runtime (controller/events.py); kopf's per-log-line Events would be noise.
    settings.posting.enabled = False
    # No CRD or namespace scanning: it would need cluster-wide RBAC on CRDs and namespaces.
    settings.scanning.disabled = True
    # Re-establish watches regularly so a silently dead connection cannot stall the indices.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = cfg.kube_timeout_seconds


def _values(index: kopf.Index[Any, Any]) -> Iterable[Any]:
    for store in list(index.values()):
        yield from list(store)


@kopf.on.startup()
async def startup(*, memo: kopf.Memo, **kwargs: Any) -> None:
    cfg: Settings = memo.settings
    # The indices, injected by kopf under their handlers' names when registered (run_operator).
    nodes: kopf.Index[str, NodeGPUs] | None = kwargs.get("node_index")
    vas: kopf.Index[VariantKey, Mapping[str, Any]] | None = kwargs.get("variant_autoscalings")
    try:
        memo.runtime = await Runtime.start(
            cfg,
            nodes=lambda: () if nodes is None else _values(nodes),
            vas=None if vas is None else lambda: _values(vas),
        )
    except VariantAutoscalerError as exc:
        # Bad credentials or settings: a restart of the pod is the retry.
        raise kopf.PermanentError(f"cannot start: {exc}") from exc
    if cfg.metrics_secure and not memo.runtime.exporter.secure:
        # Fail closed: a setting that asked for authentication must never leave /metrics open.
        await memo.runtime.stop()
        raise kopf.PermanentError("WVA_METRICS_SECURE is set, but the runtime did not secure /metrics")
    # Everything loaded so far (modules, classes, settings) lives as long as the process: keep it out of
    # the garbage collector's full passes, which otherwise walk it again every few seconds under load.
    gc.collect()
    gc.freeze()


@kopf.on.cleanup()
async def cleanup(*, memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime | None = memo.get("runtime")
    if runtime is not None:
        await runtime.stop()


# The handlers are coroutines although they do not await: kopf runs plain functions in a thread pool,
# a hop per watch event that costs more CPU than the handlers themselves.


async def node_index(*, name: str, body: kopf.Body, **_: Any) -> dict[str, NodeGPUs]:
    return {name: node_gpus(body)}


async def node_event(*, type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    memo.runtime.engine.notify_node(type, body)


def watch_nodes(registry: kopf.OperatorRegistry) -> None:
    """Register the node handlers: only with the GPU inventory on, since nodes are cluster-scoped and a
    namespaced install (Roles only, deploy/namespaced) may not watch them."""
    kopf.index("", "v1", "nodes", registry=registry)(node_index)
    kopf.on.event("", "v1", "nodes", registry=registry)(node_event)


@kopf.on.probe(id="cycle")
def cycle_probe(*, memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    try:
        health: dict[str, Any] = memo.runtime.health()
    except VariantAutoscalerError as exc:
        raise kopf.PermanentError(str(exc)) from exc
    return health


# The VariantAutoscalings through kopf: the alternative to the informer, registered only when selected.


async def variant_autoscalings(
    *, namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[VariantKey, dict[str, Any]]:
    return {(namespace or "", name): slim(body)}


async def va_event(*, type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    memo.runtime.engine.notify_va(type, body)


def watch_vas(registry: kopf.OperatorRegistry) -> None:
    """Register the VA handlers: only with ``WVA_VA_WATCH=kopf``, for the benchmark that compares them
    with the informer (docs/design.md)."""
    kopf.index(GROUP, VERSION, PLURAL, registry=registry)(variant_autoscalings)
    kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)(va_event)


def run_operator(cfg: Settings) -> None:
    """Run the operator in this process until SIGTERM/SIGINT (what ``variant-autoscaler run`` calls)."""
    kopf.configure(
        debug=cfg.log_level == "debug",
        quiet=cfg.log_level in ("warning", "error"),
        log_format=kopf.LogFormat.JSON if cfg.log_format == "json" else kopf.LogFormat.PLAIN,
    )
    if cfg.log_level == "error":
        logging.getLogger().setLevel(logging.ERROR)
    if cfg.log_level != "debug":
        # One line per HTTP request, and one per watch event ("Handler ... succeeded"), are debug noise.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    if cfg.gpu_inventory:
        watch_nodes(kopf.get_default_registry())
    if cfg.va_watch == "kopf":
        watch_vas(kopf.get_default_registry())
    kopf.run(
        standalone=True,  # one active replica is ensured by our Lease, not by kopf's peering
        clusterwide=cfg.clusterwide,
        namespaces=cfg.namespaces,
        liveness_endpoint=f"http://{cfg.health_host}:{cfg.health_port}/healthz",
        memo=kopf.Memo(settings=cfg),
    )
