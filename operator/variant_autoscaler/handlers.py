"""kopf wiring — the only module that imports kopf. Every handler parses, delegates, maps errors.

* ``startup`` tunes kopf and starts the :class:`~variant_autoscaler.engine.Runtime` (clients, metrics
  endpoint, leader election, the VariantAutoscaling and ConfigMap informers, and the one engine task),
  kept in ``memo``;
  ``cleanup`` stops it (and gives up the leader Lease).
* A kopf index keeps the nodes' GPU facts in memory, and an event handler tells the engine about node
  changes; it writes nothing, so kopf keeps no annotations or finalizers on the objects.
* The VariantAutoscalings are not watched through kopf: every status write of every cycle comes back
  as a watch event, and kopf's processing of each cost a third of the operator's CPU at 500 VAs. The
  runtime keeps them with its own informer (:mod:`variant_autoscaler.adapters.informer`).
* The liveness probe reports the last completed cycle and fails when cycles stop completing.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterable
from typing import Any

import kopf

from variant_autoscaler.adapters.inventory import NodeGPUs, node_gpus
from variant_autoscaler.api.v1alpha1 import GROUP
from variant_autoscaler.engine import Runtime
from variant_autoscaler.errors import VariantAutoscalerError
from variant_autoscaler.settings import Settings

_KOPF_PREFIX = "kopf.llmd.ai"


class _NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """A diff base that is never built.

    kopf builds a diff base (a deep copy of the object) on every event, for change handlers. Ours are
    index and event handlers only, which never use it; when kopf still watched the VariantAutoscalings,
    with one status write per variant per cycle coming back as watch events, the copies were most of
    the operator's CPU. (Adding an on.create / on.update / on.field handler requires removing this.)
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None


def _tune(settings: kopf.OperatorSettings, cfg: Settings) -> None:
    """All kopf tuning in one place."""
    # State kopf might keep on objects lives under our group (our handlers need none: no finalizer).
    settings.persistence.finalizer = f"{GROUP}/variant-autoscaler"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=_KOPF_PREFIX)
    settings.persistence.diffbase_storage = _NoDiffBase(prefix=_KOPF_PREFIX, key="last-handled-configuration")
    # Keep per-object workers between cycles instead of re-creating one per object per status write.
    settings.queueing.idle_timeout = 600
    # We post our own Events (decision changes, refusals); kopf's per-log-line Events would be noise.
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
async def startup(*, settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    cfg = memo.get("settings") or Settings()
    _tune(settings, cfg)
    # The index defined below, injected by kopf under its function name (absent with the inventory off).
    nodes: kopf.Index[str, NodeGPUs] | None = kwargs.get("node_index")
    try:
        memo.runtime = await Runtime.start(cfg, nodes=lambda: _values(nodes) if nodes is not None else ())
    except VariantAutoscalerError as exc:
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
# a hop per watch event (one per status write per cycle) that cost more CPU than the handlers themselves.


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
        health: dict[str, Any] = memo.runtime.engine.health()
    except VariantAutoscalerError as exc:
        raise kopf.PermanentError(str(exc)) from exc
    return health


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
    kopf.run(
        standalone=True,  # one active replica is ensured by our Lease, not by kopf's peering CRDs
        clusterwide=cfg.clusterwide,
        namespaces=cfg.namespaces,
        liveness_endpoint=f"http://{cfg.health_host}:{cfg.health_port}/healthz",
        memo=kopf.Memo(settings=cfg),
    )
