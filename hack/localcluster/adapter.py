"""prometheus-adapter serving ``external.metrics.k8s.io`` from the cluster's Prometheus.

The rules are WVA's, one per gauge family: the external metric ``inferno_desired_replicas`` (WVA 2025-10
to v0.4) comes from the series ``inferno_desired_replicas{variant_name!="",exported_namespace!=""}``, and
``wva_desired_replicas`` (v0.5 on, and v0.9's annotated HPAs) from ``wva_desired_replicas{...}``, each with
``exported_namespace`` as the namespace and ``variant_name`` as the deployment, so an HPA with an External
metric selecting ``variant_name: <deployment>`` reads the operator's desired replica count. (The
production rules the operator ships live in deploy/prometheus/; these are the harness's own, independent
of deploy/.)

Routing: the adapter is an aggregated API server listening on 127.0.0.1. The API server cannot route to a
loopback Endpoint/EndpointSlice (their validation rejects 127.0.0.0/8), so the APIService points at an
``ExternalName`` Service whose name is ``localhost`` and the API server runs *without*
``--enable-aggregator-routing``: it then dials ``localhost:<port>`` and verifies the adapter's certificate for
``prometheus-adapter.<namespace>.svc`` against the APIService's caBundle, as it would in a real cluster.
"""

from __future__ import annotations

import base64
from typing import Any

import yaml

NAMESPACE = "monitoring"
NAME = "prometheus-adapter"
#: The adapter's identity (client certificate CN) towards the API server.
USER = "system:localcluster:prometheus-adapter"
EXTERNAL_GROUP = "external.metrics.k8s.io"
EXTERNAL_VERSION = "v1beta1"


def adapter_config() -> str:
    """The adapter's rule file (``--config``)."""
    config = {"externalRules": [_rule(name) for name in ("inferno_desired_replicas", "wva_desired_replicas")]}
    return yaml.safe_dump(config, sort_keys=False)


def _rule(metric: str) -> dict[str, Any]:
    return {
        "seriesQuery": f'{metric}{{variant_name!="",exported_namespace!=""}}',
        "resources": {
            "overrides": {
                "exported_namespace": {"resource": "namespace"},
                "variant_name": {"resource": "deployment"},
            }
        },
        "name": {"matches": f"^{metric}$", "as": metric},
        "metricsQuery": f"{metric}{{<<.LabelMatchers>>}}",
    }


def manifests(port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """RBAC for the adapter's identity, its Service, and the APIService registering it."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            # Delegated authentication and authorization (TokenReview, SubjectAccessReview).
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{NAME}:system:auth-delegator"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:auth-delegator",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        },
        {
            # Reading the request-header CA from kube-system/extension-apiserver-authentication.
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{NAME}-auth-reader", "namespace": "kube-system"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "extension-apiserver-authentication-reader",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"{NAME}-resource-reader"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["namespaces", "pods", "nodes", "services"],
                    "verbs": ["get", "list", "watch"],
                },
                {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{NAME}-resource-reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"{NAME}-resource-reader",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        },
        {
            # Let every controller and user read external metrics (the HPA controller has it built in).
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "external-metrics-reader"},
            "rules": [{"apiGroups": [EXTERNAL_GROUP], "resources": ["*"], "verbs": ["get", "list", "watch"]}],
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {
                "type": "ExternalName",
                "externalName": "localhost",
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            },
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"{EXTERNAL_VERSION}.{EXTERNAL_GROUP}"},
            "spec": {
                "group": EXTERNAL_GROUP,
                "version": EXTERNAL_VERSION,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
                "caBundle": base64.b64encode(ca_pem).decode("ascii"),
                "service": {"name": NAME, "namespace": NAMESPACE, "port": port},
            },
        },
    ]


def serving_dns_names() -> tuple[str, ...]:
    """The names the API server verifies the adapter's serving certificate against."""
    return (f"{NAME}.{NAMESPACE}.svc", f"{NAME}.{NAMESPACE}.svc.cluster.local", "localhost")
