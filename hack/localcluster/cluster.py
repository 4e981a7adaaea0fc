"""The local control plane: real etcd, kube-apiserver, controllers, scheduler, kwok, Prometheus, adapter.

Profiles:

``api``
    etcd + kube-apiserver: fast, for integration tests that only need the API (no controllers: a
    Deployment gets no pods, a namespace stays Terminating, no ServiceAccount is created by itself).
``full``
    plus kube-controller-manager (deployment, replicaset, garbage-collector, HPA, namespace,
    serviceaccount, pod-GC, ... controllers), kube-scheduler, kwok with the simulated GPU nodes, Prometheus,
    prometheus-adapter serving ``external.metrics.k8s.io``, and the pod runner that turns opted-in pods
    into local processes Prometheus scrapes.

Everything listens on 127.0.0.1 on free ports, with TLS from a per-cluster CA, client-certificate users,
service-account tokens signed by a per-cluster key and RBAC authorization. State lives in one temporary
directory; processes are recorded there by pid (see :mod:`localcluster.procs`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from kubernetes import client
from kubernetes import config as kube_config

from localcluster import adapter
from localcluster.errors import ComponentFailedError, LocalClusterError
from localcluster.gpu import DEFAULT_GPU_INVENTORY, KWOK_ANNOTATION, GpuNodeSpec
from localcluster.kubeconfig import write_kubeconfig
from localcluster.net import LOOPBACK, free_port, http_ok, ssl_context
from localcluster.pki import CertificateAuthority, CertPair, write_signing_keypair
from localcluster.procs import ManagedProcess, Supervisor, wait_until
from localcluster.prometheus import PrometheusServer
from localcluster.versions import Binaries, read_versions

Profile = Literal["api", "full"]
PROFILES: tuple[Profile, ...] = ("api", "full")

#: Controllers kube-controller-manager runs in the ``full`` profile.
CONTROLLERS: tuple[str, ...] = (
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
    "horizontal-pod-autoscaler-controller",
    "namespace-controller",
    # Removes the not-ready taint new nodes get, and taints nodes whose kwok lease stops being renewed.
    "node-lifecycle-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "pod-garbage-collector-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "endpointslice-controller",
)

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
POD_CIDR = "10.244.0.0/16"
NODE_IP = "10.200.0.1"
STATE_FILE = "state.json"
#: Written first into every state directory; `cluster-down` only deletes directories that have it.
MARKER_FILE = ".localcluster"


@dataclass(frozen=True)
class ClusterOptions:
    """How to build one local cluster; every field has a test-friendly default."""

    profile: Profile = "api"
    gpu_nodes: tuple[GpuNodeSpec, ...] = DEFAULT_GPU_INVENTORY
    #: Serve Prometheus' API over HTTPS with a certificate from the cluster CA.
    prometheus_tls: bool = False
    scrape_interval: str = "2s"
    #: kube-controller-manager's HPA flags (defaults are 15s and 5m; tests want fast reactions).
    hpa_sync_period: str = "2s"
    hpa_downscale_stabilization: str = "0s"
    #: Feature gates for the API server and controller manager (scale-to-zero HPAs need HPAScaleToZero).
    feature_gates: tuple[str, ...] = ("HPAScaleToZero=true",)
    #: The ServiceAccount (namespace, name) a kubeconfig is written for at start.
    service_account: tuple[str, str] = ("variant-autoscaler-system", "variant-autoscaler")
    #: Tie every process to the starting thread with PR_SET_PDEATHSIG (False for a detached `cluster-up`).
    die_with_parent: bool = True
    start_timeout: float = 180.0
    #: Extra flags per component, e.g. {"kube-apiserver": ("--v=4",)}.
    extra_args: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {PROFILES}, not {self.profile!r}")


@dataclass
class _Pki:
    ca: CertificateAuthority
    front_proxy_ca: CertificateAuthority
    apiserver: CertPair
    apiserver_etcd_client: CertPair
    etcd_server: CertPair
    proxy_client: CertPair
    service_account: CertPair
    admin: CertPair


class LocalCluster:
    """One local cluster. Use as a context manager, or call :meth:`start` and :meth:`stop`."""

    def __init__(
        self,
        options: ClusterOptions | None = None,
        *,
        state_dir: Path | None = None,
        binaries: Binaries | None = None,
    ) -> None:
        self.options = options or ClusterOptions()
        self._owns_state_dir = state_dir is None
        self.state_dir = state_dir or Path(tempfile.mkdtemp(prefix=f"va-cluster-{self.options.profile}-"))
        self.binaries = binaries or Binaries.locate()
        self.versions = read_versions()
        self.supervisor = Supervisor(self.state_dir, die_with_parent=self.options.die_with_parent)
        self.apiserver_port = free_port()
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.prometheus: PrometheusServer | None = None
        self.adapter_port: int | None = None
        self._kcm_port = 0
        self._scheduler_port = 0
        self._kwok_port = 0
        self._pki: _Pki | None = None
        self._api_client: Any = None
        self._nodes: dict[str, GpuNodeSpec] = {}
        self._started = False

    # ----------------------------------------------------------------------------------- properties
    @property
    def server(self) -> str:
        """The API server URL."""
        return f"https://{LOOPBACK}:{self.apiserver_port}"

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def kubeconfig_dir(self) -> Path:
        return self.state_dir / "kubeconfigs"

    @property
    def admin_kubeconfig(self) -> Path:
        """A kubeconfig for a cluster admin (client certificate in ``system:masters``)."""
        return self.kubeconfig_dir / "admin.kubeconfig"

    @property
    def service_account_kubeconfig(self) -> Path:
        """A kubeconfig with a token for :attr:`ClusterOptions.service_account`."""
        namespace, name = self.options.service_account
        return self.kubeconfig_dir / f"sa-{namespace}-{name}.kubeconfig"

    @property
    def ca_file(self) -> Path:
        """The cluster CA (it signed the API server's and Prometheus' serving certificates)."""
        return self.pki_dir / "cluster-ca.crt"

    @property
    def podrunner_dir(self) -> Path:
        return self.state_dir / "podrunner"

    @property
    def prometheus_url(self) -> str:
        return self._require_prometheus().url

    @property
    def prometheus_ca_file(self) -> Path | None:
        """The CA to verify Prometheus with when it serves HTTPS, else None."""
        return self.ca_file if self.options.prometheus_tls else None

    @property
    def nodes(self) -> dict[str, GpuNodeSpec]:
        """The simulated GPU nodes currently in the cluster, by name."""
        return dict(self._nodes)

    # -------------------------------------------------------------------------------------- lifecycle
    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalCluster:
        """Start every component of the profile and wait until the cluster is usable."""
        if self._started:
            return self
        full = self.options.profile == "full"
        needed = ["etcd", "kube_apiserver", "kubectl"]
        if full:
            needed += [
                "kube_controller_manager",
                "kube_scheduler",
                "kwok",
                "prometheus_adapter",
                "prometheus",
            ]
        self._started = True
        try:
            self.binaries.require(*needed)
            self.state_dir.mkdir(parents=True, exist_ok=True)
            (self.state_dir / MARKER_FILE).write_text(
                "variant-autoscaler local cluster state\n", encoding="utf-8"
            )
            self._pki = self._make_pki()
            self._write_component_kubeconfigs()
            if full:
                self._start_prometheus_process()
            etcd = self._start_etcd()
            wait_until(
                self._etcd_healthy, timeout=self.options.start_timeout, what="etcd /health", process=etcd
            )
            apiserver = self._start_apiserver()
            wait_until(
                self._apiserver_ready,
                timeout=self.options.start_timeout,
                what="kube-apiserver /readyz",
                process=apiserver,
            )
            self._write_service_account_kubeconfig(*self.options.service_account)
            if full:
                self._start_full_profile()
            self._write_state_file()
        except BaseException as error:
            # Keep the logs of a cluster that failed to start; an empty temporary directory goes.
            keep = self.supervisor.log_dir.is_dir()
            self.stop(remove_state=self._owns_state_dir and not keep)
            if keep:
                error.add_note(f"the local cluster's logs are kept in {self.supervisor.log_dir}")
            raise
        return self

    def stop(self, *, remove_state: bool | None = None) -> None:
        """Stop every process this cluster started (by pid) and, by default, delete a temporary state dir.

        The state directory is kept when ``VA_KEEP_CLUSTER_STATE=1`` (logs for debugging).
        """
        if self._api_client is not None:
            with contextlib.suppress(Exception):
                self._api_client.close()
            self._api_client = None
        self.supervisor.stop_all()
        self._started = False
        if remove_state is None:
            remove_state = self._owns_state_dir and os.environ.get("VA_KEEP_CLUSTER_STATE", "") not in {
                "1",
                "true",
            }
        if remove_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def restart_apiserver(self, down_seconds: float = 0.0, timeout: float = 60.0) -> None:
        """Stop kube-apiserver, keep it down ``down_seconds``, start it again and wait until it serves
        (etcd and every other component stay up; their clients reconnect as they would to a real one)."""
        self.supervisor.stop("kube-apiserver")
        if down_seconds > 0:
            time.sleep(down_seconds)
        apiserver = self._start_apiserver()
        wait_until(
            self._apiserver_ready, timeout=timeout, what="kube-apiserver to serve again", process=apiserver
        )

    def process(self, name: str) -> ManagedProcess:
        try:
            return self.supervisor.processes[name]
        except KeyError:
            raise LocalClusterError(f"no running component named {name!r}") from None

    # ---------------------------------------------------------------------------------------- clients
    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` authenticated as the admin (shared; closed by :meth:`stop`)."""
        if self._api_client is None:
            load: Any = kube_config.new_client_from_config  # the client's typing is partial
            self._api_client = load(config_file=str(self.admin_kubeconfig))
        return self._api_client

    def core_v1(self) -> Any:
        """A ``kubernetes.client.CoreV1Api`` on :meth:`api_client` (typed ``Any``: its hints are partial)."""
        return client.CoreV1Api(self.api_client())

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120.0,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run our kubectl (same version as the cluster) against this cluster, as the admin by default."""
        argv = [str(self.binaries.kubectl), f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *args]
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            output = result.stderr.strip() or result.stdout.strip()
            raise LocalClusterError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{output}")
        return result

    def apply(
        self,
        manifest: str | Path | Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        namespace: str | None = None,
        server_side: bool = True,
        kubeconfig: Path | None = None,
    ) -> str:
        """``kubectl apply`` YAML text, a file or directory path, an object or a list of objects."""
        args = ["apply"]
        if server_side:
            args += ["--server-side", "--force-conflicts", "--field-manager=localcluster"]
        if namespace:
            args += ["-n", namespace]
        if isinstance(manifest, Path):
            return self.kubectl(*args, "-f", str(manifest), kubeconfig=kubeconfig).stdout
        if isinstance(manifest, str):
            text = manifest
        elif isinstance(manifest, Mapping):
            text = yaml.safe_dump(dict(manifest))
        else:
            text = yaml.safe_dump_all([dict(m) for m in manifest])
        return self.kubectl(*args, "-f", "-", input=text, kubeconfig=kubeconfig).stdout

    # --------------------------------------------------------------------------------- GPU nodes
    def add_gpu_node(self, spec: GpuNodeSpec, *, wait: bool = True) -> None:
        """Create a simulated GPU node (kwok makes it Ready). Needs the ``full`` profile."""
        self._require_full("add_gpu_node")

        self.core_v1().create_node(body=spec.manifest())
        self._nodes[spec.name] = spec
        if wait:
            self.wait_for_node_ready(spec.name)

    def remove_gpu_node(self, name: str, *, delete_pods: bool = True, timeout: float = 30.0) -> None:
        """Take a node away as a failed-and-drained node: cordon, delete it, force-delete its pods.

        Cordoning first keeps the scheduler from binding replacement pods to the vanishing node; pods
        already bound are deleted (grace period 0) until none is left, so their controllers recreate
        them elsewhere at once instead of after the pod-GC's orphan quarantine.
        """
        core = self.core_v1()
        with contextlib.suppress(client.ApiException):
            core.patch_node(name, {"spec": {"unschedulable": True}})
        with contextlib.suppress(client.ApiException):
            core.delete_node(name)
        self._nodes.pop(name, None)
        if not delete_pods:
            return

        def drained() -> bool:
            pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items
            for pod in pods:
                with contextlib.suppress(client.ApiException):
                    core.delete_namespaced_pod(
                        pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
                    )
            return not pods

        wait_until(drained, timeout=timeout, what=f"pods on node {name} to be deleted", interval=0.5)

    def wait_for_node_ready(self, name: str, timeout: float = 60.0) -> None:
        core = self.core_v1()

        def ready() -> bool:
            try:
                node = core.read_node(name)
            except client.ApiException:
                return False
            return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

        wait_until(
            ready, timeout=timeout, what=f"node {name} Ready", process=self.supervisor.processes.get("kwok")
        )

    # -------------------------------------------------------------------------- service accounts
    def write_service_account_kubeconfig(
        self, namespace: str, name: str, *, path: Path | None = None, expiration_seconds: int = 86400
    ) -> Path:
        """Create the namespace and ServiceAccount if needed, and write a kubeconfig with a fresh token."""
        return self._write_service_account_kubeconfig(namespace, name, path, expiration_seconds)

    # -------------------------------------------------------------------------------- Prometheus
    def _require_prometheus(self) -> PrometheusServer:
        if self.prometheus is None:
            raise LocalClusterError("Prometheus runs only in the `full` profile")
        return self.prometheus

    def prometheus_server(self) -> PrometheusServer:
        """The running Prometheus (``full`` profile): add jobs/targets, query, stop/start/restart."""
        return self._require_prometheus()

    # ---------------------------------------------------------------------------------- internals
    def _require_full(self, what: str) -> None:
        if self.options.profile != "full":
            raise LocalClusterError(f"{what} needs the `full` profile")

    def _make_pki(self) -> _Pki:
        d = self.pki_dir
        ca = CertificateAuthority(d, "cluster")
        front = CertificateAuthority(d, "front-proxy")
        apiserver = ca.issue(
            "apiserver",
            "kube-apiserver",
            dns_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ip_addresses=(LOOPBACK, SERVICE_IP),
            server=True,
        )
        pki = _Pki(
            ca=ca,
            front_proxy_ca=front,
            apiserver=apiserver,
            apiserver_etcd_client=ca.issue(
                "apiserver-etcd-client", "kube-apiserver-etcd-client", client=True
            ),
            etcd_server=ca.issue(
                "etcd-server", "etcd", dns_names=("localhost",), ip_addresses=(LOOPBACK,), server=True
            ),
            proxy_client=front.issue("front-proxy-client", "front-proxy-client", client=True),
            service_account=write_signing_keypair(d, "service-account"),
            admin=ca.issue("admin", "localcluster-admin", organizations=("system:masters",), client=True),
        )
        return pki

    @property
    def _p(self) -> _Pki:
        if self._pki is None:
            raise LocalClusterError("the cluster is not started")
        return self._pki

    def _client_kubeconfig(self, stem: str, user: str, organizations: tuple[str, ...] = ()) -> Path:
        pair = self._p.ca.issue(f"client-{stem}", user, organizations=organizations, client=True)
        return write_kubeconfig(
            self.kubeconfig_dir / f"{stem}.kubeconfig",
            server=self.server,
            ca_pem=self.ca_file.read_bytes(),
            user=user,
            client_cert_pem=pair.cert_pem(),
            client_key_pem=pair.key_pem(),
        )

    def _write_component_kubeconfigs(self) -> None:
        admin = self._p.admin
        write_kubeconfig(
            self.admin_kubeconfig,
            server=self.server,
            ca_pem=self.ca_file.read_bytes(),
            user="localcluster-admin",
            client_cert_pem=admin.cert_pem(),
            client_key_pem=admin.key_pem(),
        )
        if self.options.profile == "full":
            self._client_kubeconfig("kube-controller-manager", "system:kube-controller-manager")
            self._client_kubeconfig("kube-scheduler", "system:kube-scheduler")
            # kwok and the pod runner play the kubelets of every simulated node: cluster-admin, as documented.
            self._client_kubeconfig("kwok", "system:localcluster:kwok", ("system:masters",))
            self._client_kubeconfig("podrunner", "system:localcluster:podrunner", ("system:masters",))
            self._client_kubeconfig("prometheus-adapter", adapter.USER)

    def _args(self, component: str) -> tuple[str, ...]:
        return self.options.extra_args.get(component, ())

    def _start_etcd(self) -> ManagedProcess:
        p = self._p
        client_url = f"https://{LOOPBACK}:{self.etcd_port}"
        peer_url = f"http://{LOOPBACK}:{self.etcd_peer_port}"
        argv = [
            str(self.binaries.etcd),
            "--name=localcluster",
            f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=localcluster={peer_url}",
            f"--cert-file={p.etcd_server.cert}",
            f"--key-file={p.etcd_server.key}",
            f"--trusted-ca-file={self.ca_file}",
            "--client-cert-auth",
            "--log-level=warn",
            "--quota-backend-bytes=2147483648",
        ]
        if _supports_flag(self.binaries.etcd, "--unsafe-no-fsync"):
            argv.append("--unsafe-no-fsync")  # throwaway data: durability is not worth the fsync latency
        return self.supervisor.start("etcd", [*argv, *self._args("etcd")])

    def _etcd_healthy(self) -> bool:
        p = self._p
        context = ssl_context(self.ca_file, p.apiserver_etcd_client.cert, p.apiserver_etcd_client.key)
        return http_ok(f"https://{LOOPBACK}:{self.etcd_port}/health", context)

    def _start_apiserver(self) -> ManagedProcess:
        p = self._p
        argv = [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers=https://{LOOPBACK}:{self.etcd_port}",
            f"--etcd-cafile={self.ca_file}",
            f"--etcd-certfile={p.apiserver_etcd_client.cert}",
            f"--etcd-keyfile={p.apiserver_etcd_client.key}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            f"--secure-port={self.apiserver_port}",
            # The `kubernetes` Service endpoint would be 127.0.0.1, which Endpoints validation rejects.
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={p.apiserver.cert}",
            f"--tls-private-key-file={p.apiserver.key}",
            f"--client-ca-file={self.ca_file}",
            f"--service-account-issuer={self.server}",
            f"--service-account-key-file={p.service_account.cert}",
            f"--service-account-signing-key-file={p.service_account.key}",
            "--authorization-mode=RBAC",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            "--profiling=false",
            # Aggregation layer (prometheus-adapter): front-proxy client certificate and request headers.
            f"--requestheader-client-ca-file={p.front_proxy_ca.cert_path}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={p.proxy_client.cert}",
            f"--proxy-client-key-file={p.proxy_client.key}",
            "--v=1",
        ]
        if self.options.feature_gates:
            argv.append(f"--feature-gates={','.join(self.options.feature_gates)}")
        return self.supervisor.start("kube-apiserver", [*argv, *self._args("kube-apiserver")])

    def _apiserver_ready(self) -> bool:
        p = self._p
        return http_ok(f"{self.server}/readyz", ssl_context(self.ca_file, p.admin.cert, p.admin.key))

    def _write_service_account_kubeconfig(
        self, namespace: str, name: str, path: Path | None = None, expiration_seconds: int = 86400
    ) -> Path:
        core = self.core_v1()
        try:
            core.create_namespace({"metadata": {"name": namespace}})
        except client.ApiException as error:
            if error.status != 409:
                raise
        try:
            core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
        except client.ApiException as error:
            if error.status != 409:
                raise
        request = core.create_namespaced_service_account_token(
            name, namespace, {"spec": {"expirationSeconds": expiration_seconds}}
        )
        return write_kubeconfig(
            path or self.kubeconfig_dir / f"sa-{namespace}-{name}.kubeconfig",
            server=self.server,
            ca_pem=self.ca_file.read_bytes(),
            user=f"system:serviceaccount:{namespace}:{name}",
            token=request.status.token,
            namespace=namespace,
        )

    def _start_prometheus_process(self) -> None:
        tls = None
        if self.options.prometheus_tls:
            tls = self._p.ca.issue(
                "prometheus", "prometheus", dns_names=("localhost",), ip_addresses=(LOOPBACK,), server=True
            )
        self.prometheus = PrometheusServer(
            binary=self.binaries.prometheus,
            directory=self.state_dir / "prometheus",
            supervisor=self.supervisor,
            scrape_interval=self.options.scrape_interval,
            tls=tls,
            ca_file=self.ca_file if tls is not None else None,
        )
        self.prometheus.write_config()
        self.prometheus.process = self.supervisor.start("prometheus", self.prometheus.argv())

    def _start_full_profile(self) -> None:
        timeout = self.options.start_timeout
        prometheus = self._require_prometheus()
        # The nodes first: kwok initialises them as soon as it starts.
        for spec in self.options.gpu_nodes:
            self.add_gpu_node(spec, wait=False)
        kcm = self._start_controller_manager()
        scheduler = self._start_scheduler()
        kwok = self._start_kwok()
        self.adapter_port = free_port()
        self.apply(adapter.manifests(self.adapter_port, self.ca_file.read_bytes()))
        prometheus_process = prometheus.process
        assert prometheus_process is not None
        wait_until(prometheus.ready, timeout=timeout, what="Prometheus /-/ready", process=prometheus_process)
        adapter_process = self._start_adapter()
        runner = self._start_podrunner()
        insecure = ssl_context(verify=False)
        wait_until(
            lambda: http_ok(f"https://{LOOPBACK}:{self._kcm_port}/healthz", insecure),
            timeout=timeout,
            what="kube-controller-manager /healthz",
            process=kcm,
        )
        wait_until(
            lambda: http_ok(f"https://{LOOPBACK}:{self._scheduler_port}/healthz", insecure),
            timeout=timeout,
            what="kube-scheduler /healthz",
            process=scheduler,
        )
        for spec in self.options.gpu_nodes:
            wait_until(
                functools.partial(self._node_ready, spec.name),
                timeout=timeout,
                what=f"node {spec.name} Ready",
                process=kwok,
            )
        wait_until(
            (self.podrunner_dir / "ready").exists,
            timeout=timeout,
            what="pod runner ready",
            process=runner,
        )
        wait_until(
            self._external_metrics_available,
            timeout=timeout,
            what="external.metrics.k8s.io available",
            process=adapter_process,
        )
        self._wait_for_default_service_account(timeout)

    def _node_ready(self, name: str) -> bool:
        try:
            node = self.core_v1().read_node(name)
        except client.ApiException:
            return False
        return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

    def _wait_for_default_service_account(self, timeout: float) -> None:
        """The serviceaccount controller creates `default` in every namespace; pods need it to be admitted."""
        core = self.core_v1()

        def exists() -> bool:
            try:
                core.read_namespaced_service_account("default", "default")
            except client.ApiException:
                return False
            return True

        kcm = self.supervisor.processes.get("kube-controller-manager")
        wait_until(exists, timeout=timeout, what="ServiceAccount default/default", process=kcm)

    def _start_controller_manager(self) -> ManagedProcess:
        self._kcm_port = free_port()
        kubeconfig = self.kubeconfig_dir / "kube-controller-manager.kubeconfig"
        argv = [
            str(self.binaries.kube_controller_manager),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={self._kcm_port}",
            f"--cert-dir={self.state_dir / 'kube-controller-manager'}",
            "--leader-elect=false",
            f"--controllers={','.join(CONTROLLERS)}",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self._p.service_account.key}",
            f"--root-ca-file={self.ca_file}",
            f"--horizontal-pod-autoscaler-sync-period={self.options.hpa_sync_period}",
            f"--horizontal-pod-autoscaler-downscale-stabilization={self.options.hpa_downscale_stabilization}",
            "--v=1",
        ]
        if self.options.feature_gates:
            argv.append(f"--feature-gates={','.join(self.options.feature_gates)}")
        return self.supervisor.start(
            "kube-controller-manager", [*argv, *self._args("kube-controller-manager")]
        )

    def _start_scheduler(self) -> ManagedProcess:
        self._scheduler_port = free_port()
        kubeconfig = self.kubeconfig_dir / "kube-scheduler.kubeconfig"
        argv = [
            str(self.binaries.kube_scheduler),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={self._scheduler_port}",
            f"--cert-dir={self.state_dir / 'kube-scheduler'}",
            "--leader-elect=false",
            "--v=1",
        ]
        return self.supervisor.start("kube-scheduler", [*argv, *self._args("kube-scheduler")])

    def _start_kwok(self) -> ManagedProcess:
        self._kwok_port = free_port()
        argv = [
            str(self.binaries.kwok),
            f"--kubeconfig={self.kubeconfig_dir / 'kwok.kubeconfig'}",
            f"--config={Path(__file__).with_name('kwok-stages.yaml')}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            f"--cidr={POD_CIDR}",
            f"--node-ip={NODE_IP}",
            f"--server-address={LOOPBACK}:{self._kwok_port}",
            # Renew a Lease per node, as kubelets do, so the node-lifecycle controller keeps the nodes Ready.
            "--node-lease-duration-seconds=40",
        ]
        return self.supervisor.start("kwok", [*argv, *self._args("kwok")])

    def _start_adapter(self) -> ManagedProcess:
        assert self.adapter_port is not None
        prometheus = self._require_prometheus()
        directory = self.state_dir / "prometheus-adapter"
        directory.mkdir(parents=True, exist_ok=True)
        config = directory / "config.yaml"
        config.write_text(adapter.adapter_config(), encoding="utf-8")
        serving = self._p.ca.issue(
            "prometheus-adapter-serving",
            "prometheus-adapter",
            dns_names=adapter.serving_dns_names(),
            ip_addresses=(LOOPBACK,),
            server=True,
        )
        kubeconfig = self.kubeconfig_dir / "prometheus-adapter.kubeconfig"
        argv = [
            str(self.binaries.prometheus_adapter),
            f"--secure-port={self.adapter_port}",
            f"--bind-address={LOOPBACK}",
            f"--tls-cert-file={serving.cert}",
            f"--tls-private-key-file={serving.key}",
            f"--lister-kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--prometheus-url={prometheus.url}",
            "--metrics-relist-interval=4s",
            f"--config={config}",
            "--v=1",
        ]
        if prometheus.ca_file is not None:
            argv.append(f"--prometheus-ca-file={prometheus.ca_file}")
        return self.supervisor.start("prometheus-adapter", [*argv, *self._args("prometheus-adapter")])

    def _external_metrics_available(self) -> bool:
        result = self.kubectl(
            "get",
            "--raw",
            f"/apis/{adapter.EXTERNAL_GROUP}/{adapter.EXTERNAL_VERSION}",
            check=False,
            timeout=15,
        )
        return result.returncode == 0

    def _start_podrunner(self) -> ManagedProcess:
        prometheus = self._require_prometheus()
        self.podrunner_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        # Console scripts of this interpreter's environment (vllm-emulator) are found on PATH.
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        argv = [
            sys.executable,
            "-m",
            "localcluster.podrunner",
            f"--kubeconfig={self.kubeconfig_dir / 'podrunner.kubeconfig'}",
            f"--state-dir={self.podrunner_dir}",
            f"--sd-dir={prometheus.pods_sd_dir}",
            f"--pid-dir={self.supervisor.pid_dir}",
        ]
        return self.supervisor.start("podrunner", argv, env=env)

    def _write_state_file(self) -> None:
        state: dict[str, Any] = {
            "profile": self.options.profile,
            "state_dir": str(self.state_dir),
            "server": self.server,
            "ca_file": str(self.ca_file),
            "admin_kubeconfig": str(self.admin_kubeconfig),
            "service_account_kubeconfig": str(self.service_account_kubeconfig),
            "kubectl": str(self.binaries.kubectl),
            "pid_dir": str(self.supervisor.pid_dir),
            "log_dir": str(self.supervisor.log_dir),
            "versions": self.versions,
        }
        if self.prometheus is not None:
            state["prometheus_url"] = self.prometheus.url
            state["prometheus_ca_file"] = str(self.prometheus.ca_file) if self.prometheus.ca_file else None
            state["prometheus_targets_dir"] = str(self.prometheus.targets_sd_dir)
            state["podrunner_endpoints"] = str(self.podrunner_dir / "endpoints.json")
            state["gpu_nodes"] = sorted(self._nodes)
        (self.state_dir / STATE_FILE).write_text(json.dumps(state, indent=2), encoding="utf-8")
        env_lines = [
            f"export KUBECONFIG={self.admin_kubeconfig}",
            f"export VA_CLUSTER_STATE_DIR={self.state_dir}",
        ]
        if self.prometheus is not None:
            env_lines.append(f"export PROMETHEUS_URL={self.prometheus.url}")
        env_lines.append(f"alias kubectl={self.binaries.kubectl}")
        (self.state_dir / "env").write_text("\n".join(env_lines) + "\n", encoding="utf-8")


def _supports_flag(binary: Path, flag: str) -> bool:
    try:
        result = subprocess.run(
            [str(binary), "--help"], capture_output=True, text=True, timeout=20, check=False
        )
    except OSError:
        return False
    return flag in result.stdout or flag in result.stderr


def wait_for(check: Any, *, timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``check()`` until it returns a truthy value and return that value (tests' waiting helper)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise ComponentFailedError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)
