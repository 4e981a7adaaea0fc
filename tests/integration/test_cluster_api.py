"""The local control plane's `api` profile: real etcd + kube-apiserver with TLS, RBAC and SA tokens."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from localcluster import Binaries, ClusterOptions, LocalCluster, MissingBinaryError, read_versions, wait_for
from localcluster.net import http_get, ssl_context
from localcluster.procs import PidRecord

ROOT = Path(__file__).resolve().parents[2]


def _recorded(state_dir: Path) -> list[PidRecord]:
    records = [PidRecord.from_file(p) for p in sorted((state_dir / "pids").glob("*.json"))]
    return [r for r in records if r is not None]


def test_server_is_the_pinned_version_and_kubectl_matches(api_cluster: LocalCluster) -> None:
    pinned = read_versions()["KUBERNETES_VERSION"]
    version = json.loads(api_cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == pinned
    assert version["clientVersion"]["gitVersion"] == pinned


def test_api_server_serves_tls_signed_by_the_cluster_ca_and_rejects_anonymous(
    api_cluster: LocalCluster,
) -> None:
    verified = ssl_context(api_cluster.ca_file)  # hostname 127.0.0.1 is checked against the certificate
    result = http_get(f"{api_cluster.server}/api/v1/namespaces", verified)
    assert result is not None
    assert result[0] in {401, 403}  # reached over verified TLS, but no credentials
    untrusted = ssl_context()  # system CAs only: our throwaway CA is not among them
    assert http_get(f"{api_cluster.server}/readyz", untrusted) is None


def test_service_account_token_is_authorised_by_rbac(api_cluster: LocalCluster, namespace: str) -> None:
    sa_namespace, sa_name = api_cluster.options.service_account
    whoami = api_cluster.kubectl(
        "auth", "whoami", "-o", "json", kubeconfig=api_cluster.service_account_kubeconfig
    )
    assert (
        json.loads(whoami.stdout)["status"]["userInfo"]["username"]
        == f"system:serviceaccount:{sa_namespace}:{sa_name}"
    )

    denied = api_cluster.kubectl(
        "get", "configmaps", "-n", namespace, kubeconfig=api_cluster.service_account_kubeconfig, check=False
    )
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()

    api_cluster.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "read-configmaps", "namespace": namespace},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "read-configmaps", "namespace": namespace},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "read-configmaps",
                },
                "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_namespace}],
            },
        ]
    )
    allowed = wait_for(
        lambda: (
            api_cluster.kubectl(
                "get",
                "configmaps",
                "-n",
                namespace,
                kubeconfig=api_cluster.service_account_kubeconfig,
                check=False,
            ).returncode
            == 0
        ),
        timeout=30,
        what="the RoleBinding to take effect",
    )
    assert allowed


def test_kubectl_apply_helper_creates_objects(
    kubectl_apply: Callable[..., str], kube_client: Any, namespace: str
) -> None:
    kubectl_apply(
        textwrap.dedent(
            """\
            apiVersion: v1
            kind: ConfigMap
            metadata: {name: settings}
            data: {interval: 30s}
            """
        ),
        namespace=namespace,
    )
    cm = client.CoreV1Api(kube_client).read_namespaced_config_map("settings", namespace)
    assert cm.data == {"interval": "30s"}


def test_stop_kills_every_process_by_pid_and_removes_the_state(tmp_path: Path) -> None:
    cluster = LocalCluster(ClusterOptions(profile="api"))
    cluster.start()
    state_dir = cluster.state_dir
    records = _recorded(state_dir)
    assert {r.name for r in records} == {"etcd", "kube-apiserver"}
    assert all(r.is_running() for r in records)
    cluster.stop()
    assert not any(r.is_running() for r in records)
    assert not state_dir.exists()


def test_a_crashed_test_process_leaves_nothing_running(tmp_path: Path) -> None:
    """SIGKILL the process that started a cluster: the kernel kills its components (PR_SET_PDEATHSIG)."""
    state_dir = tmp_path / "cluster"
    script = textwrap.dedent(
        f"""\
        import time
        from pathlib import Path
        from localcluster import ClusterOptions, LocalCluster
        LocalCluster(ClusterOptions(profile="api"), state_dir=Path({str(state_dir)!r})).start()
        print("started", flush=True)
        time.sleep(600)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "started"
        records = _recorded(state_dir)
        assert {r.name for r in records} == {"etcd", "kube-apiserver"}
        assert all(r.is_running() for r in records)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        gone = wait_for(
            lambda: not any(r.is_running() for r in records),
            timeout=30,
            what="components to die with their parent",
        )
        assert gone
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)


def test_cli_up_status_down(tmp_path: Path) -> None:
    state_dir = tmp_path / "cli-cluster"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "localcluster", *args],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    up = cli("up", "--profile", "api", "--state-dir", str(state_dir))
    try:
        assert up.returncode == 0, up.stderr
        assert "API server:" in up.stdout
        records = _recorded(state_dir)
        # Detached: the components outlive the `up` command.
        assert {r.name for r in records} == {"etcd", "kube-apiserver"}
        time.sleep(0.5)
        assert all(r.is_running() for r in records)
        status = cli("status", "--state-dir", str(state_dir))
        assert status.returncode == 0, status.stderr
        assert set(json.loads(status.stdout)["running"]) == {"etcd", "kube-apiserver"}
    finally:
        down = cli("down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stderr
    assert not any(r.is_running() for r in records)
    assert not state_dir.exists()


def test_cli_down_refuses_a_directory_that_is_not_a_cluster(tmp_path: Path) -> None:
    keep = tmp_path / "precious"
    keep.mkdir()
    (keep / "data.txt").write_text("keep me", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "localcluster", "down", "--state-dir", str(keep)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert (keep / "data.txt").read_text(encoding="utf-8") == "keep me"


@pytest.mark.parametrize("missing", ["kube_apiserver", "etcd"])
def test_missing_binary_fails_with_the_build_hint(tmp_path: Path, missing: str) -> None:
    binaries = replace(Binaries.locate(), **{missing: tmp_path / "nope"})
    with pytest.raises(MissingBinaryError, match="make cluster-bins"):
        LocalCluster(ClusterOptions(profile="api"), binaries=binaries).start()
