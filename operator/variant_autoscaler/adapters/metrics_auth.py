"""Secure metrics: ``/metrics`` over HTTPS, answered only to callers the Kubernetes API server vouches for.

As controller-runtime's secure metrics (``filters.WithAuthenticationAndAuthorization``): the caller's bearer
token is checked with a TokenReview, and the user it belongs to must be allowed ``get`` on the
non-resource URL ``/metrics`` (a SubjectAccessReview), as RBAC grants it to, say, Prometheus'
ServiceAccount with a ClusterRole rule ``nonResourceURLs: ["/metrics"], verbs: ["get"]``. No token, or
one the API server does not accept: 401; a valid token whose user may not: 403; the API server not
answering: 503 (and nothing is served).

Answers are cached for a minute (denials for ten seconds), keyed by a hash of the token, so a scrape every
few seconds costs the API server two reviews a minute at most. The serving certificate and key are files
(from a ``kubernetes.io/tls`` Secret, e.g. cert-manager's); they are read again when they change, so a
renewed certificate is served without a restart.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from variant_autoscaler.adapters.kube import KubeClient
from variant_autoscaler.errors import ConfigError, KubeError
from variant_autoscaler.settings import Settings

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _TTLCache:
    """A small map whose entries expire; bounded (cleared when full: callers are few)."""

    def __init__(self, max_entries: int = 1024) -> None:
        self._entries: dict[Any, tuple[float, Any]] = {}
        self._max = max_entries

    def get(self, key: Any, now: float) -> tuple[bool, Any]:
        hit = self._entries.get(key)
        if hit is None or hit[0] <= now:
            return False, None
        return True, hit[1]

    def put(self, key: Any, value: Any, expires: float) -> None:
        if len(self._entries) >= self._max:
            self._entries.clear()
        self._entries[key] = (expires, value)


class MetricsSecurity:
    """TLS for the metrics server, and the authentication and authorization of each request."""

    def __init__(
        self,
        kube: KubeClient,
        *,
        cert_file: str,
        key_file: str,
        path: str = "/metrics",
        allowed_ttl: float = 60.0,
        denied_ttl: float = 10.0,
        reload_every: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._cert_file = cert_file
        self._key_file = key_file
        self._path = path
        self._allowed_ttl = allowed_ttl
        self._denied_ttl = denied_ttl
        self._reload_every = reload_every
        self._clock = clock
        self._tokens = _TTLCache()
        self._access = _TTLCache()
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._loaded: tuple[float, float] | None = None
        self._checked = clock()
        self._load()

    # --- TLS ------------------------------------------------------------------------------------------

    @property
    def ssl_context(self) -> ssl.SSLContext:
        return self._context

    def _mtimes(self) -> tuple[float, float]:
        return os.stat(self._cert_file).st_mtime, os.stat(self._key_file).st_mtime

    def _load(self) -> None:
        try:
            self._context.load_cert_chain(self._cert_file, self._key_file)
            self._loaded = self._mtimes()
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"the metrics serving certificate ({self._cert_file}, {self._key_file}): {exc}"
            ) from exc

    def _reload_if_changed(self) -> None:
        # A context loads a new chain in place: later handshakes get it, open connections keep theirs.
        now = self._clock()
        if now - self._checked < self._reload_every:
            return
        self._checked = now
        try:
            if self._mtimes() != self._loaded:
                self._load()
                logger.info("reloaded the metrics serving certificate %s", self._cert_file)
        except (OSError, ConfigError) as exc:
            logger.warning("keeping the metrics serving certificate loaded before: %s", exc)

    # --- authentication and authorization -----------------------------------------------------------------

    async def check(self, authorization: str | None) -> tuple[int, str]:
        """The HTTP status for a request with this ``Authorization`` header (200: serve it), and why."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return 401, "a bearer token is required"
        now = self._clock()
        key = hashlib.sha256(token.encode()).digest()
        try:
            cached, user = self._tokens.get(key, now)
            if not cached:
                status = await self._kube.review_token(token)
                user = status.get("user") if status.get("authenticated") else None
                self._tokens.put(key, user, now + (self._allowed_ttl if user else self._denied_ttl))
            if not user:
                return 401, "the token is not valid"
            who = str(user.get("username") or "")
            spec: dict[str, Any] = {
                "user": who,
                "uid": user.get("uid"),
                "groups": list(user.get("groups") or ()),
                "extra": dict(user.get("extra") or {}),
                "nonResourceAttributes": {"path": self._path, "verb": "get"},
            }
            access_key = (who, spec["uid"], tuple(spec["groups"]), repr(sorted(spec["extra"].items())))
            cached, allowed = self._access.get(access_key, now)
            if not cached:
                allowed = bool((await self._kube.review_access(spec)).get("allowed"))
                self._access.put(
                    access_key, allowed, now + (self._allowed_ttl if allowed else self._denied_ttl)
                )
        except KubeError as exc:
            logger.warning("cannot authenticate a metrics request: %s", exc)
            return 503, "cannot verify the caller now"
        if not allowed:
            return 403, f"{who} may not get {self._path}"
        return 200, who

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self._reload_if_changed()
        code, why = await self.check(request.headers.get("Authorization"))
        if code != 200:
            headers = {"WWW-Authenticate": 'Bearer realm="variant-autoscaler"'} if code == 401 else None
            return web.Response(status=code, text=f"{why}\n", headers=headers)
        return await handler(request)


def metrics_security(settings: Settings, kube: KubeClient) -> MetricsSecurity | None:
    """The metrics endpoint's security as the settings say (None: plain HTTP, no authentication)."""
    if not settings.metrics_secure:
        return None
    if not settings.metrics_cert_file or not settings.metrics_key_file:
        raise ConfigError(
            "WVA_METRICS_SECURE needs a serving certificate: "
            "set WVA_METRICS_CERT_FILE and WVA_METRICS_KEY_FILE"
        )
    return MetricsSecurity(kube, cert_file=settings.metrics_cert_file, key_file=settings.metrics_key_file)
