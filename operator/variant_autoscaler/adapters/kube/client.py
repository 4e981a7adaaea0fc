"""The Kubernetes API client: the reads and writes the cycle needs, with errors as the project's types.

The informers' list and watch streams, ConfigMaps, scale targets and their ``/scale``, HPAs and
ScaledObjects, pods (limited mode), VariantAutoscaling status, Events and the leader Lease, over the
transport of :mod:`.transport` (bodies through orjson: docs/operator.md, "Scale").

Library errors become :mod:`variant_autoscaler.errors` types: 409 :class:`ConflictError`, 404
:class:`NotFoundError`, 403 :class:`ForbiddenError`, 422 :class:`InvalidError`; transport errors and 5xx
are retried a bounded number of times, then raised as :class:`KubeError`.

A variant acts only in its own namespace: every URL is built from parts checked and percent-quoted by
:mod:`variant_autoscaler.adapters.refs`, a scale target must be of a namespaced kind, and an object read
must say it lives in the namespace asked for (docs/security.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from variant_autoscaler import USER_AGENT
from variant_autoscaler.adapters.kube.credentials import Credentials, authorization_header
from variant_autoscaler.adapters.kube.transport import (
    JSON,
    JSON_PATCH,
    MERGE_PATCH,
    AiohttpTransport,
    HttpTransport,
    TransportFailure,
    encode_json,
)
from variant_autoscaler.adapters.refs import (
    NamespaceMismatchError,
    api_prefix,
    check_kind,
    check_name,
    check_namespace,
    name_part,
    ns_part,
    segment,
)
from variant_autoscaler.api.v1alpha1 import GROUP, PLURAL, VERSION
from variant_autoscaler.errors import ConflictError, KubeError

logger = logging.getLogger(__name__)


class NotFoundError(KubeError):
    """HTTP 404."""


class ForbiddenError(KubeError):
    """HTTP 403: the ServiceAccount lacks a permission."""


class InvalidError(KubeError):
    """HTTP 422: the API server rejected the object (schema or admission)."""


@dataclass(frozen=True, slots=True)
class ListResult:
    """A whole collection as one LIST saw it."""

    items: list[JSON]
    resource_version: str
    api_version: str
    item_kind: str  # "VariantAutoscaling" for a "VariantAutoscalingList"; "" when unknown


class KubeClient:
    """A minimal async Kubernetes REST client (JSON in, JSON out)."""

    def __init__(
        self,
        credentials: Credentials,
        *,
        timeout: float = 30.0,
        retries: int = 2,
        backoff: float = 0.2,
        transport: HttpTransport | None = None,
    ) -> None:
        self._credentials = credentials
        self._retries = retries
        self._backoff = backoff
        self._transport: HttpTransport = transport or AiohttpTransport(credentials, timeout=timeout)
        self._plurals: dict[tuple[str, str], tuple[str, bool]] = {}
        self._auth_cache: tuple[float, str | None] | None = None
        self.requests = 0

    async def aclose(self) -> None:
        await self._transport.aclose()

    def _auth(self) -> str | None:
        # The loaders' refresh hook re-reads rotated tokens; it is not free, so ask it every 30 s at most.
        now = time.monotonic()
        if self._auth_cache is None or now - self._auth_cache[0] > 30.0:
            self._auth_cache = (now, authorization_header(self._credentials.token_source))
        return self._auth_cache[1]

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        # The API server names the field manager of every write after the User-Agent's product (the
        # part before "/"): without it, managedFields and audit logs said "Python".
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        auth = self._auth()
        if auth:
            headers["Authorization"] = auth
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        decode: bool = True,
    ) -> JSON:
        """One API call; returns the decoded JSON body (``{}`` when empty or ``decode=False``)."""
        content = encode_json(body) if body is not None else None
        headers = self._headers(content_type if content is not None else None)
        attempt = 0
        while True:
            self.requests += 1
            try:
                status, raw = await self._transport.request(
                    method, path, params=params, content=content, headers=headers
                )
            except TransportFailure as exc:
                if attempt < self._retries:
                    attempt += 1
                    await asyncio.sleep(self._backoff * 2**attempt)
                    continue
                raise KubeError(f"{method} {path}: {exc}") from exc
            if status >= 500 and attempt < self._retries:
                attempt += 1
                await asyncio.sleep(self._backoff * 2**attempt)
                continue
            if status >= 400:
                raise _error(method, path, status, raw)
            if not raw or not decode:
                return {}
            try:
                result: JSON = orjson.loads(raw)
            except ValueError as exc:
                raise KubeError(f"{method} {path}: the response is not JSON: {raw[:200]!r}") from exc
            return result

    async def watch(
        self, path: str, *, params: Mapping[str, str] | None = None, timeout_seconds: int = 300
    ) -> AsyncIterator[JSON]:
        """Stream watch events (``{"type": ..., "object": ...}``) until the server closes the stream."""
        query = {**(params or {}), "watch": "true", "timeoutSeconds": str(timeout_seconds)}
        try:
            async for status, line in self._transport.lines(
                path, params=query, headers=self._headers(), read_timeout=timeout_seconds + 30
            ):
                if status >= 400:
                    raise _error("WATCH", path, status, line)
                if line.strip():
                    yield orjson.loads(line)
        except TransportFailure as exc:
            raise KubeError(f"WATCH {path}: {exc}") from exc

    # --- discovery ----------------------------------------------------------------------------------

    async def resource_path(self, api_version: str, kind: str, namespace: str | None) -> str:
        """The collection path of ``kind`` (found by API discovery, cached)."""
        plural, namespaced = await self._plural(api_version, kind)
        prefix = api_prefix(api_version)
        if namespaced and namespace is not None:
            return f"{prefix}/namespaces/{ns_part(namespace)}/{segment(plural)}"
        return f"{prefix}/{segment(plural)}"

    async def object_path(self, api_version: str, kind: str, namespace: str, name: str) -> str:
        """The path of one object of a *namespaced* kind in ``namespace``; a cluster-scoped kind is
        refused, since a variant acts only on objects in its own namespace."""
        check_namespace(namespace)
        check_name(name, kind)
        plural, namespaced = await self._plural(api_version, kind)
        if not namespaced:
            raise NamespaceMismatchError(
                f"{kind} ({api_version}) is cluster-scoped: a variant only acts on objects in its own "
                f"namespace {namespace}"
            )
        prefix = api_prefix(api_version)
        return f"{prefix}/namespaces/{ns_part(namespace)}/{segment(plural)}/{name_part(name, kind)}"

    async def _plural(self, api_version: str, kind: str) -> tuple[str, bool]:
        key = (api_version, kind)
        if key not in self._plurals:
            check_kind(kind)
            prefix = api_prefix(api_version)
            listing = await self.request("GET", prefix)
            for res in listing.get("resources", ()):
                if "/" not in res.get("name", "") and res.get("kind"):
                    self._plurals[(api_version, res["kind"])] = (res["name"], bool(res.get("namespaced")))
            if key not in self._plurals:
                raise NotFoundError(f"the API server does not serve kind {kind} in {api_version}")
        return self._plurals[key]

    # --- ConfigMaps ---------------------------------------------------------------------------------

    async def get_configmap(self, namespace: str, name: str) -> JSON | None:
        try:
            path = f"/api/v1/namespaces/{ns_part(namespace)}/configmaps/{name_part(name, 'ConfigMap')}"
            return await self.request("GET", path)
        except NotFoundError:
            return None

    async def list_configmaps(self, namespace: str) -> list[JSON]:
        return await self._list(f"/api/v1/namespaces/{ns_part(namespace)}/configmaps")

    # --- namespaces ---------------------------------------------------------------------------------

    async def list_namespaces(self) -> list[JSON]:
        """Every namespace (cluster-scoped; read for WVA's ``wva.llmd.ai/exclude`` annotation)."""
        return await self._list("/api/v1/namespaces")

    # --- scale targets ------------------------------------------------------------------------------

    async def list_deployments(self, namespace: str | None) -> list[JSON]:
        path = (
            f"/apis/apps/v1/namespaces/{ns_part(namespace)}/deployments"
            if namespace
            else "/apis/apps/v1/deployments"
        )
        return await self._list(path)

    async def get_object(self, api_version: str, kind: str, namespace: str, name: str) -> JSON:
        """One object of a namespaced kind, refused unless it says it lives in ``namespace``."""
        path = await self.object_path(api_version, kind, namespace, name)
        return _in_namespace(await self.request("GET", path), namespace, f"{kind} {name}")

    async def get_scale(self, api_version: str, kind: str, namespace: str, name: str) -> JSON:
        """The ``/scale`` subresource, refused unless it says it lives in ``namespace``."""
        path = f"{await self.object_path(api_version, kind, namespace, name)}/scale"
        return _in_namespace(await self.request("GET", path), namespace, f"{kind} {name}/scale")

    async def patch_scale(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        replicas: int,
        *,
        resource_version: str | None = None,
    ) -> JSON:
        """Set the replicas through ``/scale``; with a resourceVersion the patch fails with 409 (a
        :class:`ConflictError`) if the target changed since it was read at that version."""
        path = f"{await self.object_path(api_version, kind, namespace, name)}/scale"
        body: JSON = {"spec": {"replicas": replicas}}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return await self.request("PATCH", path, body=body, content_type=MERGE_PATCH)

    async def json_patch(
        self, api_version: str, kind: str, namespace: str, name: str, ops: Sequence[JSON]
    ) -> JSON:
        path = await self.object_path(api_version, kind, namespace, name)
        return await self.request("PATCH", path, body=list(ops), content_type=JSON_PATCH)

    async def list_hpas(self, namespace: str | None) -> list[JSON]:
        path = (
            f"/apis/autoscaling/v2/namespaces/{ns_part(namespace)}/horizontalpodautoscalers"
            if namespace
            else "/apis/autoscaling/v2/horizontalpodautoscalers"
        )
        return await self._list(path)

    async def list_scaled_objects(self, namespace: str | None) -> list[JSON]:
        """KEDA's ScaledObjects; :class:`NotFoundError` when KEDA's CRD is not installed."""
        path = (
            f"/apis/keda.sh/v1alpha1/namespaces/{ns_part(namespace)}/scaledobjects"
            if namespace
            else "/apis/keda.sh/v1alpha1/scaledobjects"
        )
        return await self._list(path)

    async def list_pods(self, *, field_selector: str | None = None) -> list[JSON]:
        params = {"fieldSelector": field_selector} if field_selector else None
        return await self._list("/api/v1/pods", params=params)

    async def _list(self, path: str, params: Mapping[str, str] | None = None) -> list[JSON]:
        return (await self.list_with_version(path, params)).items

    async def list_with_version(self, path: str, params: Mapping[str, str] | None = None) -> ListResult:
        """Every item of a collection (pages of 500), with the resourceVersion to watch from."""
        items: list[JSON] = []
        query = dict(params or {})
        query["limit"] = "500"
        while True:
            page = await self.request("GET", path, params=query)
            items.extend(page.get("items") or ())
            meta = page.get("metadata") or {}
            cont = meta.get("continue")
            if not cont:
                kind = str(page.get("kind") or "")
                return ListResult(
                    items=items,
                    resource_version=str(meta.get("resourceVersion") or ""),
                    api_version=str(page.get("apiVersion") or ""),
                    item_kind=kind.removesuffix("List") if kind.endswith("List") else "",
                )
            query["continue"] = cont

    # --- VariantAutoscalings ------------------------------------------------------------------------

    @staticmethod
    def va_path(namespace: str, name: str) -> str:
        return f"/apis/{GROUP}/{VERSION}/namespaces/{ns_part(namespace)}/{PLURAL}/{name_part(name)}"

    async def get_va(self, namespace: str, name: str) -> JSON:
        return await self.request("GET", self.va_path(namespace, name))

    @staticmethod
    def va_collection(namespace: str | None) -> str:
        """The VariantAutoscalings of one namespace, or of all of them."""
        if namespace:
            return f"/apis/{GROUP}/{VERSION}/namespaces/{ns_part(namespace)}/{PLURAL}"
        return f"/apis/{GROUP}/{VERSION}/{PLURAL}"

    async def list_vas(self, namespace: str | None = None) -> list[JSON]:
        return await self._list(self.va_collection(namespace))

    async def patch_va_status(
        self,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None,
        *,
        current: Mapping[str, Any] | None = None,
    ) -> JSON:
        """Merge ``status`` into ``.status``; with a resourceVersion the write fails with 409 if the VA
        moved on.

        Given ``current`` (the VA as read at ``resource_version``) and a resourceVersion, the merge is
        done here and the object is sent with PUT: the same result and precondition, but the API server
        skips applying a patch (encoding the stored object to JSON, merging, decoding the result), which
        was 15 to 20 % of its CPU per status write of a VariantAutoscaling (500 VAs, local API server).
        """
        path = f"{self.va_path(namespace, name)}/status"
        # The response (the whole object) is not needed: skip decoding it, once per variant per cycle.
        if current is not None and resource_version:
            meta = {k: v for k, v in (current.get("metadata") or {}).items() if k != "managedFields"}
            meta["resourceVersion"] = resource_version
            merged = merge_patch(current.get("status") or {}, status)
            obj: JSON = {**current, "metadata": meta, "status": merged}
            return await self.request("PUT", path, body=obj, decode=False)
        body: JSON = {"status": dict(status)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return await self.request("PATCH", path, body=body, content_type=MERGE_PATCH, decode=False)

    async def json_patch_va(self, namespace: str, name: str, ops: Sequence[JSON]) -> JSON:
        return await self.request(
            "PATCH", self.va_path(namespace, name), body=list(ops), content_type=JSON_PATCH
        )

    # --- Events -------------------------------------------------------------------------------------

    async def create_event(self, namespace: str, event: Mapping[str, Any]) -> JSON:
        return await self.request("POST", f"/api/v1/namespaces/{ns_part(namespace)}/events", body=dict(event))

    # --- authentication and authorization of callers (the secure metrics endpoint) -----------------

    async def review_token(self, token: str) -> JSON:
        """A TokenReview of a caller's bearer token; returns its ``status``."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        review = await self.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body=body)
        return dict(review.get("status") or {})

    async def review_access(self, spec: Mapping[str, Any]) -> JSON:
        """A SubjectAccessReview (may this user do this?); returns its ``status``."""
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": dict(spec)}
        review = await self.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=body)
        return dict(review.get("status") or {})

    # --- Leases -------------------------------------------------------------------------------------

    @staticmethod
    def lease_path(namespace: str, name: str | None = None) -> str:
        base = f"/apis/coordination.k8s.io/v1/namespaces/{ns_part(namespace)}/leases"
        return f"{base}/{name_part(name, 'Lease')}" if name else base

    async def get_lease(self, namespace: str, name: str) -> JSON | None:
        try:
            return await self.request("GET", self.lease_path(namespace, name))
        except NotFoundError:
            return None

    async def create_lease(self, namespace: str, lease: Mapping[str, Any]) -> JSON:
        return await self.request("POST", self.lease_path(namespace), body=dict(lease))

    async def replace_lease(self, namespace: str, name: str, lease: Mapping[str, Any]) -> JSON:
        return await self.request("PUT", self.lease_path(namespace, name), body=dict(lease))


def _in_namespace(obj: JSON, namespace: str, what: str) -> JSON:
    """``obj`` if its metadata says it lives in ``namespace``; else :class:`NamespaceMismatchError`."""
    found = (obj.get("metadata") or {}).get("namespace")
    if found != namespace:
        raise NamespaceMismatchError(
            f"{what}: the API server returned an object in namespace {found!r}, not {namespace!r}; "
            "a variant only acts on objects in its own namespace"
        )
    return obj


def _error(method: str, path: str, status: int, raw: bytes) -> KubeError:
    text_body = raw.decode(errors="replace")
    try:
        decoded = orjson.loads(raw)
        message = str(decoded.get("message") or text_body) if isinstance(decoded, dict) else text_body
    except ValueError:
        message = text_body
    text = f"{method} {path}: HTTP {status}: {message[:500]}"
    match status:
        case 409:
            return ConflictError(text)
        case 404:
            return NotFoundError(text)
        case 403:
            return ForbiddenError(text)
        case 422:
            return InvalidError(text)
        case _:
            return KubeError(text)


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies ``application/merge-patch+json``: objects
    merge key by key, ``None`` deletes a key, anything else (lists included) replaces."""
    if not isinstance(patch, Mapping):
        return patch
    out: JSON = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out
