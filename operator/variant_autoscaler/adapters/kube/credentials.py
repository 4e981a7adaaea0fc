"""Credentials for the API server: the in-cluster ServiceAccount or a kubeconfig, loaded by the
``kubernetes`` package's config loaders (which also refresh rotated tokens)."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from variant_autoscaler.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Credentials:
    host: str
    verify: ssl.SSLContext | bool
    token_source: Any = None  # a kubernetes.client.Configuration to refresh and read the token from
    tls_server_name: str | None = None


def load_credentials(kubeconfig: str | None = None, context: str | None = None) -> Credentials:
    """In-cluster ServiceAccount credentials when running in a pod, else the kubeconfig."""
    cfg = k8s_client.Configuration()
    try:
        if kubeconfig is None and context is None:
            try:
                k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            except k8s_config.ConfigException:
                k8s_config.load_kube_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, client_configuration=cfg
            )
    except (k8s_config.ConfigException, OSError, TypeError) as exc:
        raise ConfigError(f"no usable Kubernetes credentials: {exc}") from exc
    try:
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if cfg.cert_file and cfg.key_file:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
        if not cfg.verify_ssl:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"Kubernetes TLS configuration: {exc}") from exc
    return Credentials(
        host=cfg.host.rstrip("/"),
        verify=ctx,
        token_source=cfg,
        tls_server_name=getattr(cfg, "tls_server_name", None),
    )


def authorization_header(source: Any) -> str | None:
    if source is None:
        return None
    hook = getattr(source, "refresh_api_key_hook", None)
    if hook is not None:
        hook(source)
    keys: Mapping[str, str] = getattr(source, "api_key", {}) or {}
    token = keys.get("BearerToken") or keys.get("authorization")
    if not token:
        return None
    scheme, _, rest = token.partition(" ")
    return f"Bearer {rest}" if rest and scheme.lower() == "bearer" else f"Bearer {token}"
