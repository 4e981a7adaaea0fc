"""Secure metrics against the real API server: the metrics endpoint over HTTPS, served only to callers the
API server authenticates (TokenReview) and authorizes (SubjectAccessReview on ``get /metrics``).

deploy/default-secure-metrics is rendered and its RBAC applied under a fresh identity (see
vatesting.harness); the operator's exporter, with the settings that install gives it, then serves a
ServiceAccount bound to the shipped metrics-reader ClusterRole (200), one that is not (403), a caller
with no token or a forged one (401), and nobody over plain HTTP.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import httpx
import pytest

from localcluster import LocalCluster
from localcluster.pki import CertificateAuthority
from variant_autoscaler.adapters.exporter import Exporter
from variant_autoscaler.adapters.kube import KubeClient, load_credentials
from variant_autoscaler.adapters.metrics_auth import metrics_security
from variant_autoscaler.settings import Settings
from vatesting.harness import (
    SERVICE_ACCOUNT,
    OperatorProcess,
    fresh_install,
    installed,
    namespace_manifest,
    render_install,
)


def _token(cluster: LocalCluster, namespace: str, name: str) -> str:
    core = cluster.core_v1()
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    request = core.create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": 3600}}
    )
    return str(request.status.token)


def test_metrics_are_served_only_to_callers_the_api_server_allows(
    api_cluster: LocalCluster, tmp_path: Path
) -> None:
    install = fresh_install()
    objects = render_install(api_cluster, "default-secure-metrics", install)
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["WVA_METRICS_SECURE"] == "true"
    mounted = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert env["WVA_METRICS_CERT_FILE"].startswith(mounted["metrics-cert"] + "/")
    assert {"name": "metrics-cert", "secret": {"secretName": "variant-autoscaler-metrics-cert"}} in pod[
        "volumes"
    ]
    rbac = [o for o in objects if o["kind"] in ("ServiceAccount", "Role", "RoleBinding", "Namespace")]
    rbac += [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    reader_role = next(
        o for o in rbac if o["metadata"]["name"].startswith("variant-autoscaler-metrics-reader")
    )

    ca = CertificateAuthority(tmp_path / "ca", "metrics-ca")
    pair = ca.issue("metrics", "variant-autoscaler", ip_addresses=("127.0.0.1",), server=True)

    with installed(api_cluster, [*rbac, namespace_manifest(install.operator_ns)]):
        kubeconfig = api_cluster.write_service_account_kubeconfig(install.operator_ns, SERVICE_ACCOUNT)
        reader = _token(api_cluster, install.operator_ns, "prometheus")
        stranger = _token(api_cluster, install.operator_ns, "stranger")
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"prometheus-reads-variant-autoscaler{install.suffix}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": reader_role["metadata"]["name"],
            },
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": install.operator_ns}],
        }
        with installed(api_cluster, [binding]):
            settings = Settings(
                metrics_secure=env["WVA_METRICS_SECURE"] == "true",
                metrics_cert_file=str(pair.cert),
                metrics_key_file=str(pair.key),
            )

            async def scrape() -> dict[str, tuple[int, str]]:
                kube = KubeClient(load_credentials(str(kubeconfig)))
                exporter = Exporter(is_active=lambda: True)
                exporter.cycles.labels(result="ok").inc()
                port = await exporter.start("127.0.0.1", 0, security=metrics_security(settings, kube))
                url = f"https://127.0.0.1:{port}/metrics"
                out: dict[str, tuple[int, str]] = {}
                try:
                    async with httpx.AsyncClient(
                        verify=ssl.create_default_context(cafile=str(ca.cert_path)), timeout=30
                    ) as http:
                        for who, headers in (
                            ("reader", {"Authorization": f"Bearer {reader}"}),
                            ("reader-again", {"Authorization": f"Bearer {reader}"}),
                            ("stranger", {"Authorization": f"Bearer {stranger}"}),
                            ("forged", {"Authorization": f"Bearer {reader[:-8]}AAAAAAAA"}),
                            ("anonymous", {}),
                        ):
                            response = await http.get(url, headers=headers)
                            out[who] = (response.status_code, response.text)
                    async with httpx.AsyncClient(timeout=30) as http:
                        with pytest.raises(httpx.HTTPError):
                            await http.get(f"http://127.0.0.1:{port}/metrics")
                finally:
                    await exporter.stop()
                    await kube.aclose()
                return out

            answers = asyncio.run(scrape())

            # The same through the operator process, as the Deployment runs it.
            operator = OperatorProcess(
                kubeconfig,
                None,
                tmp_path,
                identity="secure-metrics",
                operator_namespace=install.operator_ns,
                env={
                    "WVA_METRICS_SECURE": "true",
                    "WVA_METRICS_CERT_FILE": str(pair.cert),
                    "WVA_METRICS_KEY_FILE": str(pair.key),
                    "WVA_LEADER_ELECTION": "false",
                },
            )
            try:
                operator.start(plain_metrics=False)
                url = f"https://127.0.0.1:{operator.metrics_port}/metrics"
                context = ssl.create_default_context(cafile=str(ca.cert_path))
                with httpx.Client(verify=context, timeout=30) as http:
                    served = {
                        who: http.get(url, headers=headers).status_code
                        for who, headers in (
                            ("reader", {"Authorization": f"Bearer {reader}"}),
                            ("stranger", {"Authorization": f"Bearer {stranger}"}),
                            ("anonymous", {}),
                        )
                    }
                assert operator.scrape() is None  # nothing in the clear
            finally:
                operator.stop()
            assert served == {"reader": 200, "stranger": 403, "anonymous": 401}, operator.logs()[-3000:]

    assert answers["reader"][0] == 200 and "variant_autoscaler_cycles_total" in answers["reader"][1]
    assert answers["reader-again"][0] == 200
    assert answers["stranger"][0] == 403
    assert (
        f"system:serviceaccount:{install.operator_ns}:stranger may not get /metrics" in answers["stranger"][1]
    )
    assert answers["forged"][0] == 401
    assert answers["anonymous"][0] == 401
    for who in ("stranger", "forged", "anonymous"):
        assert "variant_autoscaler" not in answers[who][1]
