"""Least privilege, proven: the real API server is asked, for each install in deploy/, a matrix of verbs x
resources x namespaces (kube-system and Secrets included), and every answer must be the expected one.

Each install is rendered with kustomize and applied under a fresh identity (its own operator namespace,
served namespace and ClusterRole names), so the shared test cluster's other installs cannot answer for
it. The questions are SelfSubjectAccessReviews sent as the operator's ServiceAccount through
impersonation: the request ``kubectl auth can-i --as=system:serviceaccount:NS:variant-autoscaler`` sends,
without starting kubectl 800 times; a sample is asked through kubectl itself as well, and must agree.

The namespaced install is also run: the operator with only its Roles (no ClusterRole at all) serves its
namespace, scales a workload there and reports, and no request of its is refused.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from kubernetes import client

from localcluster import LocalCluster, wait_for
from vatesting.harness import (
    ROOT,
    SERVICE_ACCOUNT,
    Install,
    OperatorProcess,
    conditions,
    configmaps_for_tests,
    events,
    fresh_install,
    get_va,
    installed,
    namespace_manifest,
    render_install,
    running,
    va_manifest,
)

LEASE = "variant-autoscaler-leader"
LEARNED_PROFILES = "variant-autoscaler-learned-profiles"
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")

# (group, resource, subresource); namespaced unless in CLUSTER_SCOPED.
RESOURCES: tuple[tuple[str, str, str], ...] = (
    ("llmd.ai", "variantautoscalings", ""),
    ("llmd.ai", "variantautoscalings", "status"),
    ("apps", "deployments", ""),
    ("apps", "deployments", "scale"),
    ("apps", "statefulsets", ""),
    ("apps", "statefulsets", "scale"),
    ("apps", "daemonsets", ""),
    ("autoscaling", "horizontalpodautoscalers", ""),
    ("leaderworkerset.x-k8s.io", "leaderworkersets", ""),
    ("leaderworkerset.x-k8s.io", "leaderworkersets", "scale"),
    ("keda.sh", "scaledobjects", ""),
    ("", "pods", ""),
    ("", "pods", "exec"),
    ("", "events", ""),
    ("events.k8s.io", "events", ""),
    ("", "configmaps", ""),
    ("", "secrets", ""),
    ("", "serviceaccounts", "token"),
    ("coordination.k8s.io", "leases", ""),
    ("rbac.authorization.k8s.io", "roles", ""),
    ("rbac.authorization.k8s.io", "rolebindings", ""),
    ("", "nodes", ""),
    ("", "namespaces", ""),
    ("rbac.authorization.k8s.io", "clusterroles", ""),
    ("rbac.authorization.k8s.io", "clusterrolebindings", ""),
    ("apiextensions.k8s.io", "customresourcedefinitions", ""),
    ("authentication.k8s.io", "tokenreviews", ""),
    ("authorization.k8s.io", "subjectaccessreviews", ""),
)
#: API groups whose kinds the test cluster does not serve (no CRD installed).
NOT_SERVED = {"leaderworkerset.x-k8s.io", "keda.sh"}
CLUSTER_SCOPED = {
    "nodes",
    "namespaces",
    "clusterroles",
    "clusterrolebindings",
    "customresourcedefinitions",
    "tokenreviews",
    "subjectaccessreviews",
}

# What the operator's code calls (deploy/rbac/clusterrole.yaml gives the reason for each).
SERVING = {
    ("llmd.ai", "variantautoscalings", ""): {"get", "list", "watch", "patch"},
    ("llmd.ai", "variantautoscalings", "status"): {"patch", "update"},
    ("apps", "deployments", ""): {"get", "list"},
    ("apps", "statefulsets", ""): {"get", "list"},
    ("apps", "deployments", "scale"): {"get", "patch"},
    ("apps", "statefulsets", "scale"): {"get", "patch"},
    ("autoscaling", "horizontalpodautoscalers", ""): {"list"},
    ("leaderworkerset.x-k8s.io", "leaderworkersets", ""): {"get"},
    ("leaderworkerset.x-k8s.io", "leaderworkersets", "scale"): {"get", "patch"},
    ("keda.sh", "scaledobjects", ""): {"list"},
    ("", "events", ""): {"create"},
}
INVENTORY = {("", "nodes", ""): {"list", "watch"}, ("", "pods", ""): {"list"}}
#: Cluster-wide only: the namespaces' wva.llmd.ai/exclude annotation.
EXCLUSION = {("", "namespaces", ""): {"list"}}
#: Namespace-local configuration: these ConfigMaps by name, GET only, wherever variants are served.
LOCAL_CONFIG_MAPS = ("wva-saturation-scaling-config", "wva-model-scale-to-zero-config")
OWN_NAMESPACE = {
    ("", "configmaps", ""): {"get", "list", "watch", "create"},
    ("coordination.k8s.io", "leases", ""): {"create"},
}


Question = tuple[str, str, str, str, str, str]  # verb, group, resource, subresource, namespace, name


def _questions(install: Install) -> list[Question]:
    namespaces = (install.operator_ns, install.served_ns, "kube-system", "default", "")
    out: list[Question] = []
    for group, resource, sub in RESOURCES:
        for verb in VERBS:
            if resource in CLUSTER_SCOPED:
                out.append((verb, group, resource, sub, "", ""))
            else:
                out.extend((verb, group, resource, sub, ns, "") for ns in namespaces)
    for verb in VERBS:  # the Lease and the learned profiles' ConfigMap by name: only its own
        for name in (LEASE, "someone-elses"):
            out.append((verb, "coordination.k8s.io", "leases", "", install.operator_ns, name))
        for name in (LEARNED_PROFILES, "someone-elses"):
            out.append((verb, "", "configmaps", "", install.operator_ns, name))
        for ns in (install.served_ns, "kube-system"):  # namespace-local configuration: by name only
            for name in (*LOCAL_CONFIG_MAPS, "someone-elses"):
                out.append((verb, "", "configmaps", "", ns, name))
    return out


def _expected(
    q: Question,
    install: Install,
    *,
    clusterwide: bool,
    max_batch_in: Sequence[str] = (),
    reviews: bool = False,
) -> bool:
    verb, group, resource, sub, ns, name = q
    key = (group, resource, sub)
    if reviews and resource in ("tokenreviews", "subjectaccessreviews") and verb == "create":
        return True  # secure metrics: system:auth-delegator
    if ns == install.operator_ns and verb in OWN_NAMESPACE.get(key, set()):
        return True
    if key == ("coordination.k8s.io", "leases", "") and ns == install.operator_ns and name == LEASE:
        return verb in {"get", "update"}
    if key == ("", "configmaps", "") and ns == install.operator_ns and name == LEARNED_PROFILES:
        return verb == "update"
    if key == ("", "configmaps", "") and name in LOCAL_CONFIG_MAPS and verb == "get":
        return clusterwide or ns == install.served_ns
    everywhere = SERVING.get(key, set()) | INVENTORY.get(key, set()) | EXCLUSION.get(key, set())
    if clusterwide and verb in everywhere:
        return True
    if not clusterwide and ns == install.served_ns and verb in SERVING.get(key, set()):
        return True
    return key == ("apps", "deployments", "") and verb == "patch" and ns in max_batch_in and ns != ""


def _ask_all(cluster: LocalCluster, install: Install, questions: Sequence[Question]) -> dict[Question, bool]:
    """SelfSubjectAccessReviews as the ServiceAccount (impersonated), as `kubectl auth can-i --as` sends."""
    api_client = cluster.api_client()
    impersonating = client.ApiClient(api_client.configuration)
    impersonating.set_default_header("Impersonate-User", install.user)
    api = client.AuthorizationV1Api(impersonating)
    answers = {}
    try:
        for q in questions:
            verb, group, resource, sub, ns, name = q
            attrs = {"verb": verb, "group": group, "resource": resource, "subresource": sub}
            if ns:
                attrs["namespace"] = ns
            if name:
                attrs["name"] = name
            review = api.create_self_subject_access_review({"spec": {"resourceAttributes": attrs}})
            answers[q] = bool(review.status.allowed)
    finally:
        impersonating.close()
    return answers


def _kubectl_can_i(cluster: LocalCluster, install: Install, q: Question) -> bool:
    verb, group, resource, sub, ns, name = q
    what = f"{resource}.{group}" if group else resource
    if name:
        what += f"/{name}"
    args = ["auth", "can-i", f"--as={install.user}", verb, what]
    if sub:
        args.append(f"--subresource={sub}")
    args += ["-n", ns] if ns else ["--all-namespaces"]
    return cluster.kubectl(*args, check=False).stdout.strip() == "yes"


def _check(
    cluster: LocalCluster, install: Install, expected: Mapping[Question, bool], *, kubectl: bool = True
) -> None:
    # The authorizer follows RBAC objects through a watch: a change just applied may take a moment.
    for _ in range(20):
        answers = _ask_all(cluster, install, list(expected))
        wrong = sorted(
            f"{'ALLOWED' if answers[q] else 'denied'} but expected {'allowed' if want else 'denied'}: {q}"
            for q, want in expected.items()
            if answers[q] != want
        )
        if not wrong:
            break
        time.sleep(0.5)
    assert not wrong, "\n".join(wrong)
    assert sum(answers.values()) >= 10  # the identity is the installed one: it may do something
    if not kubectl:
        return
    # kubectl itself agrees: on what is allowed in the served namespace and cluster-wide, and on the
    # sensitive questions about kube-system.
    # (Not about kinds the test cluster does not serve, LeaderWorkerSets and ScaledObjects: kubectl finds
    # resources through discovery and says no to those; the reviews above ask RBAC itself.)
    sample = [
        q for q in expected if expected[q] and q[4] in (install.served_ns, "") and q[1] not in NOT_SERVED
    ] + [
        q
        for q in expected
        if q[2] in ("secrets", "configmaps", "deployments", "pods")
        and q[4] == "kube-system"
        and q[0] in ("get", "create", "patch")
    ]
    mismatched = [q for q in sample if _kubectl_can_i(cluster, install, q) != answers[q]]
    assert not mismatched, mismatched


@pytest.fixture(autouse=True)
def _crd(api_cluster: LocalCluster) -> None:
    """kubectl resolves a resource through discovery: the CRD must be served for it to answer about VAs."""
    api_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "crds"))
    api_cluster.kubectl(
        "wait", "--for=condition=Established", "crd/variantautoscalings.llmd.ai", "--timeout=60s"
    )


# --- the installs -------------------------------------------------------------------------------------


def test_the_cluster_wide_install_grants_what_the_code_calls_and_nothing_more(
    api_cluster: LocalCluster,
) -> None:
    install = fresh_install()
    objects = [*render_install(api_cluster, "rbac", install), namespace_manifest(install.operator_ns)]
    assert not any(o["kind"] == "Role" and o["metadata"]["namespace"] != install.operator_ns for o in objects)
    with installed(api_cluster, objects):
        questions = _questions(install)
        _check(api_cluster, install, {q: _expected(q, install, clusterwide=True) for q in questions})
        # applyMaxBatch's pod-template write: only where its overlay is applied, one namespace at a time.
        max_batch = render_install(api_cluster, "rbac-apply-max-batch", install)
        assert {o["kind"] for o in max_batch} == {"Role", "RoleBinding"}
        with installed(api_cluster, [namespace_manifest(install.served_ns), *max_batch]):
            expected = {
                q: _expected(q, install, clusterwide=True, max_batch_in=[install.served_ns])
                for q in questions
            }
            _check(api_cluster, install, expected, kubectl=False)
            patch = ("patch", "apps", "deployments", "", install.served_ns, "")
            assert expected[patch] and _kubectl_can_i(api_cluster, install, patch)
            elsewhere = ("patch", "apps", "deployments", "", "kube-system", "")
            assert not expected[elsewhere] and not _kubectl_can_i(api_cluster, install, elsewhere)
        # Secure metrics adds Kubernetes' auth-delegator role (TokenReviews, SubjectAccessReviews), no more.
        delegator = [
            o
            for o in render_install(api_cluster, "default-secure-metrics", install)
            if o["kind"] == "ClusterRoleBinding" and o["roleRef"]["name"] == "system:auth-delegator"
        ]
        assert len(delegator) == 1
        with installed(api_cluster, delegator):
            expected = {q: _expected(q, install, clusterwide=True, reviews=True) for q in questions}
            _check(api_cluster, install, expected, kubectl=False)


def test_the_namespaced_install_has_no_cluster_role_and_acts_only_where_it_serves(
    api_cluster: LocalCluster,
) -> None:
    install = fresh_install()
    objects = render_install(api_cluster, "namespaced", install)
    kinds = {o["kind"] for o in objects}
    assert "ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds
    rbac = [o for o in objects if o["kind"] in ("ServiceAccount", "Role", "RoleBinding", "Namespace")]
    with installed(api_cluster, [*rbac, namespace_manifest(install.served_ns)]):
        questions = _questions(install)
        _check(api_cluster, install, {q: _expected(q, install, clusterwide=False) for q in questions})


def test_the_operator_runs_with_the_namespaced_install_alone(
    api_cluster: LocalCluster, tmp_path: Path
) -> None:
    """Roles only, as deploy/namespaced ships them (its Deployment's settings too): the operator serves
    its namespace, patches a workload there, writes statuses and Events, and is refused nothing."""
    install = fresh_install()
    objects = render_install(api_cluster, "namespaced", install)
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert container["command"] == ["variant-autoscaler", "run"]
    assert env["WATCH_NAMESPACE"] == install.served_ns and env["WVA_GPU_INVENTORY"] == "false"
    rbac = [o for o in objects if o["kind"] in ("ServiceAccount", "Role", "RoleBinding", "Namespace")]
    with installed(api_cluster, [*rbac, namespace_manifest(install.served_ns)]):
        for cm in configmaps_for_tests("http://127.0.0.1:9"):
            cm["metadata"]["namespace"] = install.operator_ns
            api_cluster.apply(cm)
        kubeconfig = api_cluster.write_service_account_kubeconfig(install.operator_ns, SERVICE_ACCOUNT)
        target = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "vllme-deployment", "namespace": install.served_ns},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "vllme"}},
                "template": {
                    "metadata": {"labels": {"app": "vllme"}},
                    "spec": {"containers": [{"name": "vllm", "image": "none.invalid/vllm"}]},
                },
            },
        }
        api_cluster.apply(target)
        api_cluster.apply(va_manifest(install.served_ns, minReplicas=2, actuation={"mode": "patch"}))
        operator = OperatorProcess(
            kubeconfig,
            None,  # the scope comes from WATCH_NAMESPACE, as in the shipped Deployment
            tmp_path,
            operator_namespace=install.operator_ns,
            env={"WATCH_NAMESPACE": env["WATCH_NAMESPACE"], "WVA_GPU_INVENTORY": "false"},
            scope_flags=False,
        )
        with running(operator):

            def scaled() -> bool:
                out = api_cluster.kubectl(
                    "get", "deployment", "-n", install.served_ns, "vllme-deployment", "-ojson"
                )
                return bool(json.loads(out.stdout)["spec"]["replicas"] == 2)

            wait_for(scaled, timeout=60, what="the served namespace's Deployment scaled to minReplicas")
            wait_for(lambda: operator.cycles() >= 2, timeout=60, what="two cycles")
            va = get_va(api_cluster, install.served_ns)
            assert conditions(va)["Actuated"]["status"] == "True"
            assert conditions(va)["MetricsAvailable"]["reason"] == "PrometheusError"  # reported, no crash
            posted = {e["reason"] for e in events(api_cluster, install.served_ns)}
            assert {"Scaled", "PrometheusError"} <= posted, posted
        logs = operator.logs()
        # An HTTP 403, not the digits of a timestamp's milliseconds or a port (that flaked once).
        assert not re.search(r"(?<![\d.:])403(?!\d)", logs) and "orbidden" not in logs, logs[-3000:]
        assert operator.process is not None and operator.process.returncode == 0
