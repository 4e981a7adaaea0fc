"""An in-memory copy of one collection, kept current by list-then-watch (what client-go calls an informer).

Used for the VariantAutoscalings (every status write of a cycle comes back as a watch event, and kopf's
per-event processing costs more than this class's) and for the operator namespace's ConfigMaps (kopf
watches a resource in every served namespace, which would need read access to every ConfigMap there):
docs/design.md, "kopf and what is custom", has the reasons and the measurements.

Semantics, as client-go's reflector:

* one LIST (paged) per collection path, then a WATCH from the list's resourceVersion, with bookmarks so a
  quiet collection's resumption point stays recent; when the server ends the watch (its timeout) the
  next one resumes from the last version seen;
* an ``ERROR`` event of 410 Gone (the version was compacted away): list again at once; any other
  error or failure: list again after an exponential back-off (a watch that ends within a second is
  followed by a pause too); objects that vanished in between are reported as ``DELETED``;
* :meth:`Informer.values` raises until every path has been listed once, so that a cycle never runs on a
  partial view (which would drop the missing variants' gauges for that cycle).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from variant_autoscaler.adapters.kube import KubeClient
from variant_autoscaler.errors import KubeError

logger = logging.getLogger(__name__)

EventCallback = Callable[[str | None, Mapping[str, Any]], None]

_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the store keeps of an object: no managedFields, no kubectl's copy of the spec.

    A shallow copy: the nested values are shared with ``body``, which nothing changes afterwards.
    """
    out = dict(body)
    meta = dict(out.get("metadata") or {})
    meta.pop("managedFields", None)
    annotations = meta.get("annotations")
    if annotations and _LAST_APPLIED in annotations:
        meta["annotations"] = {k: v for k, v in annotations.items() if k != _LAST_APPLIED}
    out["metadata"] = meta
    return out


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name")))


class Informer:
    """List-then-watch one or more collection paths (e.g. one per served namespace) into memory.

    ``on_event(type, object)`` is called for every change as it is applied: ``None`` for an object
    seen by a (re)list, ``ADDED``/``MODIFIED``/``DELETED`` from the watch (``DELETED`` also for an
    object a relist no longer finds).
    """

    def __init__(
        self,
        kube: KubeClient,
        paths: Sequence[str],
        *,
        what: str,
        on_event: EventCallback | None = None,
        watch_timeout_seconds: int = 300,
        backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 60.0,
    ) -> None:
        if not paths:
            raise ValueError("an informer needs at least one collection path")
        self._kube = kube
        self._paths = tuple(paths)
        self.what = what
        self.on_event = on_event
        self._watch_timeout = watch_timeout_seconds
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._stores: dict[str, dict[tuple[str, str], dict[str, Any]]] = {p: {} for p in self._paths}
        self._listed: set[str] = set()
        self._all_listed = asyncio.Event()
        self.last_error: str | None = None
        self.relists = 0

    # --- reading ------------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self._all_listed.is_set()

    def values(self) -> list[dict[str, Any]]:
        """Every object, slimmed; raises :class:`KubeError` until every path has been listed once."""
        if not self.synced:
            missing = ", ".join(p for p in self._paths if p not in self._listed)
            error = f" (last error: {self.last_error})" if self.last_error else ""
            raise KubeError(f"{self.what} not listed yet from {missing}{error}")
        return [obj for store in self._stores.values() for obj in store.values()]

    async def wait_synced(self) -> None:
        """Wait until every path has been listed once."""
        await self._all_listed.wait()

    # --- running ------------------------------------------------------------------------------------

    async def run(self) -> None:
        """List and watch every path until cancelled."""
        await asyncio.gather(*(self._run_path(path) for path in self._paths))

    async def _run_path(self, path: str) -> None:
        delay = self._backoff
        while True:
            try:
                version: str | None = await self._relist(path)
                delay = self._backoff
                while version is not None:
                    started = time.monotonic()
                    version = await self._watch(path, version)
                    if time.monotonic() - started < 1.0:
                        # A server that ends watches at once must not get a new one in a tight loop.
                        await asyncio.sleep(self._backoff)
            except KubeError as exc:
                self.last_error = str(exc)
                logger.warning("%s: list/watch failed (retrying in %.0fs): %s", self.what, delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._max_backoff)

    def _emit(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(event_type, obj)

    async def _relist(self, path: str) -> str:
        page = await self._kube.list_with_version(path)
        self.relists += 1
        store = self._stores[path]
        fresh: dict[tuple[str, str], dict[str, Any]] = {}
        for listed in page.items:
            # List items of built-in kinds carry no apiVersion/kind; give every object both.
            item = listed
            if page.item_kind and ("kind" not in item or "apiVersion" not in item):
                item = {"apiVersion": page.api_version, "kind": page.item_kind, **item}
            fresh[_key(item)] = item
        for key in [k for k in store if k not in fresh]:
            self._emit("DELETED", store.pop(key))
        for key, item in fresh.items():
            store[key] = slim(item)
            self._emit(None, item)
        self._listed.add(path)
        if len(self._listed) == len(self._paths):
            self._all_listed.set()
        self.last_error = None
        return page.resource_version

    async def _watch(self, path: str, version: str) -> str | None:
        """Apply watch events from ``version``; return where to resume, or None to list again."""
        params = {"resourceVersion": version, "allowWatchBookmarks": "true"}
        store = self._stores[path]
        async for event in self._kube.watch(path, params=params, timeout_seconds=self._watch_timeout):
            event_type = event.get("type")
            obj = event.get("object") or {}
            if event_type == "ERROR":
                if obj.get("code") == 410:  # Gone: the version was compacted away; list again now
                    logger.info(
                        "%s: watch of %s expired (%s); listing again", self.what, path, obj.get("message")
                    )
                    return None
                raise KubeError(f"WATCH {path}: {obj.get('message') or obj}")
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if event_type == "BOOKMARK":
                continue
            key = _key(obj)
            if event_type == "DELETED":
                store.pop(key, None)
            else:
                store[key] = slim(obj)
            self._emit(event_type, obj)
        return version
