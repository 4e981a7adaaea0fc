"""Helpers for the operator's integration tests: install it with deploy/'s RBAC, run it as a process.

The operator runs as ``variant-autoscaler run`` (the image's command) with the ServiceAccount and the
ClusterRole/Role from ``deploy/rbac`` — never as admin — against the local cluster's real API server and
Prometheus. Loads come from real ``vllm-loadgen`` processes against real emulator processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from localcluster import LocalCluster, wait_for
from localcluster.net import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
OPERATOR_NS = "workload-variant-autoscaler-system"
SERVICE_ACCOUNT = "variant-autoscaler"
MAIN_CM = "workload-variant-autoscaler-variantautoscaling-config"
LEASE = "variant-autoscaler-leader"

#: The namespace deploy/namespaced, rbac-namespaced and rbac-apply-max-batch name as the one served.
SHIPPED_SERVED_NS = "llm-d-sim"

#: The emulator's defaults are the A100 profile of WVA's sample VariantAutoscaling.
EMULATOR = (str(BIN / "vllm-emulator"),)


def _yaml(relative: str) -> Any:
    return yaml.safe_load((ROOT / relative).read_text())


def configmaps_for_tests(
    prometheus_url: str, ca_file: Path | None = None, **overrides: str
) -> list[dict[str, Any]]:
    """The shipped ConfigMaps; the main one pointed at the test Prometheus with short test periods."""
    main = _yaml("deploy/manager/configmap.yaml")
    main["data"] = {
        "PROMETHEUS_BASE_URL": prometheus_url,
        "GLOBAL_OPT_INTERVAL": "2s",
        "METRICS_WINDOW": "20s",
        "METRICS_STALENESS": "30s",
        "QUEUE_DRAIN_TIME": "60s",
    }
    if ca_file is not None:
        main["data"]["PROMETHEUS_CA_CERT_PATH"] = str(ca_file)
    main["data"].update(overrides)
    return [
        main,
        _yaml("deploy/manager/configmap-accelerator-unitcost.yaml"),
        _yaml("deploy/manager/configmap-serviceclass.yaml"),
    ]


def install(
    cluster: LocalCluster, prometheus_url: str, ca_file: Path | None = None, **overrides: str
) -> Path:
    """CRD, operator namespace, deploy/rbac and the ConfigMaps; returns the ServiceAccount's kubeconfig."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "crd/variantautoscalings.llmd.ai", "--timeout=60s")
    cluster.apply(_yaml("deploy/namespace/namespace.yaml"))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "deploy" / "rbac"))
    # Replace the ConfigMaps outright: keys an earlier test patched in would survive a server-side apply.
    for cm in configmaps_for_tests(prometheus_url, ca_file, **overrides):
        cluster.kubectl(
            "delete", "configmap", "-n", OPERATOR_NS, cm["metadata"]["name"], "--ignore-not-found"
        )
        cluster.apply(cm)
    with contextlib.suppress(Exception):  # a Lease left by a killed operator of an earlier test
        cluster.kubectl("delete", "lease", "-n", OPERATOR_NS, LEASE, "--ignore-not-found")
    return cluster.write_service_account_kubeconfig(OPERATOR_NS, SERVICE_ACCOUNT)


def set_main_config(cluster: LocalCluster, **data: str) -> None:
    patch = json.dumps({"data": data})
    cluster.kubectl("patch", "configmap", "-n", OPERATOR_NS, MAIN_CM, "--type=merge", "-p", patch)


class OperatorProcess:
    """``variant-autoscaler run`` as a child process, bound to 127.0.0.1 on free ports."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str | None,
        log_dir: Path,
        *,
        identity: str = "operator-a",
        env: Mapping[str, str] | None = None,
        operator_namespace: str = OPERATOR_NS,
        scope_flags: bool = True,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.operator_namespace = operator_namespace
        # False: neither -n nor -A, the scope comes from the environment (WATCH_NAMESPACE, WVA_NAMESPACES).
        self.scope_flags = scope_flags
        self.identity = identity
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.log_path = log_dir / f"{identity}.log"
        self.env = {**os.environ, "WVA_DEBOUNCE_SECONDS": "0.5", **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *, plain_metrics: bool = True) -> OperatorProcess:
        """Start, and wait until it serves: its plain-HTTP metrics, or (``plain_metrics=False``, secure
        metrics) its liveness endpoint."""
        argv = [
            str(BIN / "variant-autoscaler"), "run",
            # None: cluster-wide, as the Deployment in deploy/manager runs it.
            *(["--namespace", self.namespace] if self.namespace else ["--all-namespaces"]),
            "--kubeconfig", str(self.kubeconfig),
            "--operator-namespace", self.operator_namespace,
            "--metrics-host", "127.0.0.1", "--metrics-port", str(self.metrics_port),
            "--health-host", "127.0.0.1", "--health-port", str(self.health_port),
            "--identity", self.identity,
            "--log-format", "json",
        ]  # fmt: skip
        if not self.scope_flags:
            argv.remove("--namespace" if self.namespace else "--all-namespaces")
            if self.namespace:
                argv.remove(self.namespace)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        if plain_metrics:
            wait_for(
                lambda: self.alive() and self.scrape() is not None,
                timeout=60,
                what=f"{self.identity} metrics",
            )
        else:
            wait_for(
                lambda: self.alive() and self._answers_health(), timeout=60, what=f"{self.identity} health"
            )
        return self

    def _answers_health(self) -> bool:
        try:
            self.health()
        except (urllib.error.URLError, OSError):
            return False
        return True

    def alive(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            if self.process is not None and self.process.returncode not in (None, 0, -9, -15):
                raise AssertionError(
                    f"{self.identity} exited {self.process.returncode}:\n{self.logs()[-3000:]}"
                )
            return False
        return True

    def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
                text = resp.read().decode()
        except (urllib.error.URLError, OSError):
            return None
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def metric(self, name: str, **labels: str) -> float | None:
        samples = self.scrape() or {}
        return samples.get((name, tuple(sorted(labels.items()))))

    def cycles(self) -> float:
        return self.metric("variant_autoscaler_cycles_total", result="ok") or 0.0

    def health(self) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=15) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> int | None:
        """SIGTERM and wait (graceful shutdown: the Lease is released)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as when a node dies."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@contextlib.contextmanager
def running(*operators: OperatorProcess) -> Iterator[tuple[OperatorProcess, ...]]:
    try:
        for op in operators:
            op.start()
        yield operators
    finally:
        for op in operators:
            op.stop()


class LoadGenerator:
    """``vllm-loadgen`` at a constant rate (requests per minute) against the given endpoints."""

    def __init__(
        self, urls: list[str], model: str, rpm: float, log_dir: Path, *, output_tokens: int = 64
    ) -> None:
        self.log_path = log_dir / f"loadgen-{rpm:g}.log"
        argv = [
            str(BIN / "vllm-loadgen"),
            "--url", ",".join(urls),
            "--model", model,
            "--rate", f"{rpm:g}",
            "--duration", "3600",
            "--arrival", "deterministic",
            "--input-tokens", "100",
            "--output-tokens", str(output_tokens),
            "--seed", "7",
        ]  # fmt: skip
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def va_manifest(namespace: str, name: str = "vllme-deployment", **spec: Any) -> dict[str, Any]:
    """WVA's sample VariantAutoscaling, moved to ``namespace`` (and renamed), optionally with our fields."""
    va = _yaml("deploy/samples/variantautoscaling.yaml")
    va["metadata"]["namespace"] = namespace
    va["metadata"]["name"] = name
    va["spec"].update(spec)
    return dict(va)


def get_va(cluster: LocalCluster, namespace: str, name: str = "vllme-deployment") -> dict[str, Any]:
    out = cluster.kubectl("get", "variantautoscaling", "-n", namespace, name, "-o", "json").stdout
    result: dict[str, Any] = json.loads(out)
    return result


def conditions(va: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (va.get("status") or {}).get("conditions", [])}


def deployment_replicas(cluster: LocalCluster, namespace: str, name: str) -> int:
    out = cluster.kubectl(
        "get", "deployment", "-n", namespace, name, "-o", "jsonpath={.spec.replicas}"
    ).stdout
    return int(out)


def events(cluster: LocalCluster, namespace: str, involved: str | None = None) -> list[dict[str, Any]]:
    """Events about VariantAutoscalings (optionally only about ``involved``)."""
    out = cluster.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    items = json.loads(out)["items"]
    return [
        e
        for e in items
        if e["involvedObject"].get("kind") == "VariantAutoscaling"
        and (involved is None or e["involvedObject"]["name"] == involved)
    ]


# --- an install of deploy/ under a fresh identity ---------------------------------------------------------
# The shared test cluster holds deploy/rbac's install for the other tests; an install whose RBAC is under
# test is moved to its own operator namespace, served namespace and cluster-scoped names, so nothing else
# can answer for it.


@dataclass(frozen=True)
class Install:
    """One install's identity on the shared cluster: where its operator runs, what it serves."""

    operator_ns: str
    served_ns: str
    suffix: str

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.operator_ns}:{SERVICE_ACCOUNT}"


def render_install(cluster: LocalCluster, overlay: str, install: Install) -> list[dict[str, Any]]:
    """``kubectl kustomize deploy/OVERLAY``: its RBAC (and namespaces), moved to ``install``'s identity."""
    text = cluster.kubectl("kustomize", str(ROOT / "deploy" / overlay)).stdout
    text = text.replace(OPERATOR_NS, install.operator_ns).replace(SHIPPED_SERVED_NS, install.served_ns)
    out = []
    for obj in yaml.safe_load_all(text):
        if obj is None or obj["kind"] in ("CustomResourceDefinition",):
            continue
        if obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            obj["metadata"]["name"] += install.suffix
            ref = obj.get("roleRef") or {}
            if ref.get("kind") == "ClusterRole" and not ref["name"].startswith("system:"):
                ref["name"] += install.suffix
            # Aggregation labels would fold the people's roles into admin/edit/view: not under test here.
            obj["metadata"].get("labels", {}).pop("rbac.authorization.k8s.io/aggregate-to-admin", None)
            obj["metadata"].get("labels", {}).pop("rbac.authorization.k8s.io/aggregate-to-edit", None)
            obj["metadata"].get("labels", {}).pop("rbac.authorization.k8s.io/aggregate-to-view", None)
        out.append(obj)
    return out


@contextlib.contextmanager
def installed(cluster: LocalCluster, objects: Sequence[dict[str, Any]]) -> Iterator[None]:
    namespaces = [o for o in objects if o["kind"] == "Namespace"]
    others = [o for o in objects if o["kind"] != "Namespace"]
    for batch in (namespaces, others):
        if batch:
            cluster.apply(batch)
    try:
        yield
    finally:
        # Everything explicitly: the api profile has no namespace controller to empty a deleted namespace.
        if others:
            text = yaml.safe_dump_all([dict(o) for o in others])
            cluster.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=text)
        for obj in namespaces:
            cluster.kubectl(
                "delete", "namespace", obj["metadata"]["name"], "--wait=false", "--ignore-not-found"
            )


def fresh_install() -> Install:
    tag = uuid.uuid4().hex[:6]
    return Install(operator_ns=f"wva-op-{tag}", served_ns=f"wva-served-{tag}", suffix=f"-{tag}")


def namespace_manifest(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
