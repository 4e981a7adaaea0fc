"""Per-object operator state in one ConfigMap of the operator's namespace, for objects without a status
of our own (annotated HPAs and ScaledObjects).

Each managed object's state is one key of the ConfigMap's ``data`` (:func:`entry_key`), a compact JSON
object of named sections (``{"learnedProfile": {...}}``), so that other per-object state can share the
same ConfigMap and the same one write per cycle. The engine reads it when it starts leading, from the
cycle's list of the operator namespace's ConfigMaps (:meth:`StateStore.load`), and writes it at most
once per cycle, only when it changed (:meth:`StateStore.save`), with the resourceVersion it last saw (a
409 re-reads and retries once).

Bounded: the ConfigMap holds at most :data:`MAX_BYTES` of entries (the API server refuses objects over
1 MiB). Past it, the entries of the objects with the least state left out (``weight`` decides) are left
out of the write: those objects learn afresh after a restart, and the log says so.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from variant_autoscaler.adapters.kube import KubeClient, NotFoundError
from variant_autoscaler.adapters.refs import name_part, ns_part
from variant_autoscaler.errors import ConflictError, KubeError

__all__ = ["MAX_BYTES", "StateStore", "entry_key"]

logger = logging.getLogger(__name__)

#: The entries' budget: below the API server's 1 MiB object limit, with room for the metadata.
MAX_BYTES = 900 * 1024
_KEY_MAX = 253


def entry_key(namespace: str, kind: str, name: str) -> str:
    """A ConfigMap data key for an object: ``namespace.Kind.name`` (the characters a key allows), or
    its digest when that would be too long."""
    key = f"{namespace}.{kind}.{name}"
    if len(key) <= _KEY_MAX:
        return key
    return f"{namespace[:63]}.{kind}.{hashlib.sha256(key.encode()).hexdigest()[:40]}"


class StateStore:
    """The ConfigMap ``name`` in ``namespace`` as a map from entry keys to JSON objects."""

    def __init__(self, kube: KubeClient, namespace: str, name: str, *, max_bytes: int = MAX_BYTES) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.max_bytes = max_bytes
        self._written: dict[str, str] | None = None  # the data as last read or written
        self._version: str | None = None
        self._exists = False
        self.writes = 0
        self.left_out = 0

    @property
    def _path(self) -> str:
        return f"/api/v1/namespaces/{ns_part(self.namespace)}/configmaps"

    def load(self, body: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
        """Every entry of the ConfigMap as read (``body``; None: it does not exist) that reads as a JSON
        object (others are dropped, and logged)."""
        self._exists = body is not None
        self._version = str(((body or {}).get("metadata") or {}).get("resourceVersion") or "") or None
        data = {str(k): str(v) for k, v in ((body or {}).get("data") or {}).items()}
        self._written = dict(data)
        out: dict[str, dict[str, Any]] = {}
        for key, text in data.items():
            try:
                value = json.loads(text)
            except ValueError:
                value = None
            if isinstance(value, dict):
                out[key] = value
            else:
                logger.warning("ConfigMap %s/%s: entry %s is not a JSON object; dropped", *self._where, key)
        return out

    @property
    def _where(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    async def save(
        self, entries: Mapping[str, Mapping[str, Any]], *, weight: Callable[[Mapping[str, Any]], float]
    ) -> bool:
        """Write ``entries`` (all of them: keys absent are removed) if they differ from what is stored;
        True when a write was made."""
        encoded = {k: json.dumps(v, separators=(",", ":"), sort_keys=True) for k, v in entries.items()}
        total = sum(len(k) + len(v) for k, v in encoded.items())
        self.left_out = 0
        if total > self.max_bytes:
            kept: dict[str, str] = {}
            used = 0
            for key in sorted(encoded, key=lambda k: (-weight(entries[k]), k)):
                size = len(key) + len(encoded[key])
                if used + size <= self.max_bytes:
                    kept[key] = encoded[key]
                    used += size
            self.left_out = len(encoded) - len(kept)
            logger.warning(
                "ConfigMap %s/%s: %d entries left out (over %d bytes); those objects start learning "
                "afresh after a restart",
                *self._where,
                self.left_out,
                self.max_bytes,
            )
            encoded = kept
        if self._written is not None and encoded == self._written:
            return False
        if not encoded and not self._exists:
            return False
        for attempt in range(2):
            try:
                await self._write(encoded)
                self._written = encoded
                self.writes += 1
                return True
            except ConflictError:
                if attempt:
                    raise
                await self._reread()
        return False  # pragma: no cover - the loop returns or raises

    async def _reread(self) -> None:
        body = await self.kube.get_configmap(self.namespace, self.name)
        self._exists = body is not None
        self._version = str(((body or {}).get("metadata") or {}).get("resourceVersion") or "") or None

    async def _write(self, data: Mapping[str, str]) -> None:
        meta: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {"app.kubernetes.io/name": "variant-autoscaler"},
        }
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}
        if not self._exists:
            try:
                created = await self.kube.request("POST", self._path, body=body)
            except ConflictError:  # created meanwhile (AlreadyExists): replace it
                await self._reread()
            else:
                self._exists = True
                self._version = str((created.get("metadata") or {}).get("resourceVersion") or "") or None
                return
        if self._version:
            meta["resourceVersion"] = self._version
        try:
            replaced = await self.kube.request(
                "PUT", f"{self._path}/{name_part(self.name, 'ConfigMap')}", body=body
            )
        except NotFoundError:
            self._exists = False
            raise KubeError(f"ConfigMap {self.namespace}/{self.name} was deleted meanwhile") from None
        self._version = str((replaced.get("metadata") or {}).get("resourceVersion") or "") or None
