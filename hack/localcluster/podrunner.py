"""The pod runner: makes simulated pods really serve, as local processes.

kwok only pretends to run containers. For every pod that carries the opt-in label
``localcluster.variant-autoscaler.io/run: "true"``, is Running and is bound to a node, the runner starts the
pod's first container's ``command`` + ``args`` as a local process:

* on a free 127.0.0.1 port, given as ``PORT`` (and ``HOST``/``VLLM_EMULATOR_HOST=127.0.0.1``) in the
  environment and, when the arguments contain ``--port N``/``--port=N`` (``--host ...``), substituted there;
* with the container's ``env``/``envFrom`` (literal values, ``$(VAR)`` references, field references to the
  pod's name, namespace, uid, node, IPs, labels and annotations, ConfigMap and Secret keys) plus
  ``POD_NAME``/``POD_NAMESPACE``;
* in its own session, killed with the runner (PR_SET_PDEATHSIG) and recorded by pid in the cluster's pid
  directory, so ``cluster-down`` reaps it even if the runner was killed.

Once the port accepts connections the endpoint is published: the pod gets the annotation
``localcluster.variant-autoscaler.io/endpoint: 127.0.0.1:<port>``, ``<state>/endpoints.json`` lists every
pod's process, and Prometheus' file-SD file ``<sd-dir>/pods.json`` gets a target labelled ``namespace``,
``pod``, ``node``, ``container``, ``model`` (from ``--model``/``--served-model-name``, if given) and the
pod's own labels (sanitised; ``model_name`` is left to the metrics themselves). A container with an
``httpGet`` readiness probe is published only once the probe answers (a 2xx or 3xx), others once their
port accepts connections. A process that exits by itself is not restarted; its exit code is recorded in
endpoints.json and its target withdrawn.

Deleting a pod terminates it as a kubelet does (kwok leaves our pods' deletion to the runner): SIGTERM to
the process at once, which keeps serving the requests it has (the emulator drains: see
``--shutdown-delay``), SIGKILL when the pod's ``terminationGracePeriodSeconds`` have passed, and only
then is the pod object removed. A pod that stops Running for another reason is stopped at once.

Run as ``python -m localcluster.podrunner --kubeconfig K --state-dir D --sd-dir S --pid-dir P``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client import ApiException, V1DeleteOptions

from localcluster.names import ENDPOINT_ANNOTATION, OWN_PREFIX, RUN_LABEL
from localcluster.net import LOOPBACK, free_port, http_get, tcp_open
from localcluster.procs import PidRecord, die_with_parent, proc_start_time
from localcluster.prometheus import write_file_sd

_RESERVED_TARGET_LABELS = frozenset(
    {"namespace", "pod", "node", "container", "model", "job", "instance", "model_name"}
)
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes-style ``$(VAR)`` expansion: defined variables are replaced, ``$$`` is a literal ``$``."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _VAR_REF.sub(replace, text)


def override_flag(argv: Sequence[str], flag: str, value: str) -> list[str]:
    """Replace the value of ``<flag> X`` / ``<flag>=X`` in ``argv`` with ``value`` (absent: unchanged)."""
    result = list(argv)
    for index, arg in enumerate(result):
        if arg == flag and index + 1 < len(result):
            result[index + 1] = value
        elif arg.startswith(f"{flag}="):
            result[index] = f"{flag}={value}"
    return result


def override_port(argv: Sequence[str], port: int) -> list[str]:
    """Make a server's argv listen on 127.0.0.1:``port`` (``--port`` and ``--host`` values replaced)."""
    return override_flag(override_flag(argv, "--port", str(port)), "--host", LOOPBACK)


def model_from_args(argv: Sequence[str]) -> str | None:
    """The served model name from vLLM-style arguments, if any."""
    found: str | None = None
    for index, arg in enumerate(argv):
        for flag in ("--served-model-name", "--model"):
            if arg == flag and index + 1 < len(argv):
                value = argv[index + 1]
            elif arg.startswith(f"{flag}="):
                value = arg.split("=", 1)[1]
            else:
                continue
            if flag == "--served-model-name" or found is None:
                found = value
    return found


def target_labels(pod: Any, container: str, argv: Sequence[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for key, value in (pod.metadata.labels or {}).items():
        if key.startswith(OWN_PREFIX):
            continue
        name = re.sub(r"[^a-zA-Z0-9_]", "_", key)
        if name[0].isdigit():
            name = f"_{name}"
        if name in _RESERVED_TARGET_LABELS or name.startswith("__"):
            continue
        labels[name] = str(value)
    labels.update(
        {
            "namespace": pod.metadata.namespace,
            "pod": pod.metadata.name,
            "node": pod.spec.node_name or "",
            "container": container,
        }
    )
    model = model_from_args(argv)
    if model:
        labels["model"] = model
    return labels


@dataclass
class PodProcess:
    """The local process behind one pod."""

    key: str
    uid: str
    namespace: str
    name: str
    node: str
    container: str
    port: int
    argv: list[str]
    log_path: Path
    pidfile: Path
    labels: dict[str, str]
    popen: subprocess.Popen[bytes] | None = None
    state: str = "starting"
    exit_code: int | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # An httpGet readiness probe's path, if the container has one.
    ready_path: str | None = None
    # time.monotonic() when the pod's deletion was first seen (SIGTERM sent), and its grace period.
    terminating_since: float | None = None
    grace_seconds: float = 30.0

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def record(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "pod": self.name,
            "uid": self.uid,
            "node": self.node,
            "container": self.container,
            "address": self.address,
            "port": self.port,
            "pid": self.popen.pid if self.popen is not None else None,
            "state": self.state,
            "exit_code": self.exit_code,
            "error": self.error,
            "argv": self.argv,
            "log": str(self.log_path),
            "labels": self.labels,
        }


class PodRunner:
    """Reconciles opted-in Running pods with local processes, once per :meth:`sync`."""

    def __init__(self, core: Any, state_dir: Path, sd_dir: Path, pid_dir: Path, log: Any = None) -> None:
        self.core = core
        self.state_dir = state_dir
        self.sd_file = sd_dir / "pods.json"
        self.pid_dir = pid_dir
        self.processes: dict[str, PodProcess] = {}  # by pod uid
        self._published: list[tuple[list[str], dict[str, str]]] | None = None
        self._endpoints_text: str | None = None
        self._log = log or (lambda message: print(message, flush=True))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.pid_dir.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------------------------- reconcile
    def sync(self) -> None:
        pods = self.core.list_pod_for_all_namespaces(label_selector=f"{RUN_LABEL}=true").items
        wanted = {pod.metadata.uid: pod for pod in pods if _eligible(pod)}
        deleting = {pod.metadata.uid: pod for pod in pods if pod.metadata.deletion_timestamp is not None}
        for uid, pod in deleting.items():
            self._terminate(pod, self.processes.get(uid))
        for uid in list(self.processes):
            if uid not in wanted and uid not in deleting:
                self._stop(self.processes.pop(uid), reason="pod gone or not Running")
        for uid, pod in wanted.items():
            if uid not in self.processes:
                self.processes[uid] = self._start(pod)
        for process in self.processes.values():
            self._observe(process)
        self._publish()

    def _terminate(self, pod: Any, process: PodProcess | None) -> None:
        """One step of a deleted pod's termination (see the module doc)."""
        meta = pod.metadata
        running = process is not None and process.popen is not None and process.popen.poll() is None
        if process is not None and running and process.terminating_since is None:
            assert process.popen is not None
            process.terminating_since = time.monotonic()
            grace = pod.spec.termination_grace_period_seconds
            process.grace_seconds = 30.0 if grace is None else float(grace)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.popen.pid, signal.SIGTERM)
            self._log(f"{process.key}: terminating (grace {process.grace_seconds:g} s)")
            return
        if process is not None and running:
            assert process.terminating_since is not None
            if time.monotonic() - process.terminating_since < process.grace_seconds:
                return  # still draining within its grace period
            self._stop(process, reason="grace period over")
        elif process is not None:
            process.pidfile.unlink(missing_ok=True)
            self._log(f"{process.key}: terminated")
        self.processes.pop(meta.uid, None)

        try:  # the kubelet's last step: the pod object goes
            self.core.delete_namespaced_pod(
                meta.name, meta.namespace, body=V1DeleteOptions(grace_period_seconds=0)
            )
        except ApiException as error:
            if error.status != 404:
                self._log(f"{meta.namespace}/{meta.name}: cannot delete: {error.status} {error.reason}")

    def _observe(self, process: PodProcess) -> None:
        if process.popen is None or process.state in {"exited", "error"}:
            return
        code = process.popen.poll()
        if code is not None:
            process.state = "exited"
            process.exit_code = code
            process.pidfile.unlink(missing_ok=True)
            self._log(f"{process.key}: process exited with {code}; see {process.log_path}")
            return
        if process.state == "starting" and self._ready(process):
            process.state = "serving"
            self._annotate(process, process.address)
            self._log(f"{process.key}: serving on {process.address}")

    @staticmethod
    def _ready(process: PodProcess) -> bool:
        if not tcp_open(process.port):
            return False
        if process.ready_path is None:
            return True
        answer = http_get(f"http://{process.address}{process.ready_path}", timeout=1.0)
        return answer is not None and 200 <= answer[0] < 400

    def _publish(self) -> None:
        groups = [
            ([p.address], p.labels)
            for p in sorted(self.processes.values(), key=lambda p: p.key)
            if p.state == "serving"
        ]
        if groups != self._published:
            write_file_sd(self.sd_file, groups)
            self._published = groups
        endpoints = {p.key: p.record() for p in sorted(self.processes.values(), key=lambda p: p.key)}
        text = json.dumps(endpoints, indent=1, sort_keys=True)
        if text != self._endpoints_text:
            path = self.state_dir / "endpoints.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
            self._endpoints_text = text

    # ------------------------------------------------------------------------------- processes
    def _start(self, pod: Any) -> PodProcess:
        meta, spec = pod.metadata, pod.spec
        container = spec.containers[0]
        key = f"{meta.namespace}/{meta.name}"
        port = free_port()
        workdir = self.state_dir / "pods" / f"{meta.namespace}_{meta.name}_{meta.uid[:8]}"
        workdir.mkdir(parents=True, exist_ok=True)
        process = PodProcess(
            key=key,
            uid=meta.uid,
            namespace=meta.namespace,
            name=meta.name,
            node=spec.node_name or "",
            container=container.name,
            port=port,
            argv=[],
            log_path=workdir / "output.log",
            pidfile=self.pid_dir / f"pod-{meta.namespace}-{meta.name}-{meta.uid[:8]}.json",
            labels={},
        )
        try:
            env = self._environment(pod, container, port)
            raw = [*(container.command or []), *(container.args or [])]
            if not raw:
                raise ValueError(
                    "the container has no command: the runner cannot know the image's entrypoint"
                )
            argv = override_port([expand(arg, env) for arg in raw], port)
            process.argv = argv
            probe = container.readiness_probe
            if probe is not None and probe.http_get is not None:
                process.ready_path = probe.http_get.path or "/"
            process.labels = target_labels(pod, container.name, argv)
            base = dict(os.environ)
            base.update(env)
            with process.log_path.open("ab") as log:
                process.popen = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=base,
                    cwd=workdir,
                    start_new_session=True,
                    preexec_fn=die_with_parent(os.getpid()),  # noqa: PLW1509
                )
        except (OSError, ValueError, LookupError) as error:
            process.state = "error"
            process.error = str(error)
            self._log(f"{key}: cannot start: {error}")
            return process
        start_time = proc_start_time(process.popen.pid)
        record = PidRecord(
            f"pod-{key}", process.popen.pid, start_time if start_time is not None else -1, tuple(argv)
        )
        process.pidfile.write_text(record.to_json(), encoding="utf-8")
        self._log(f"{key}: started pid {process.popen.pid} on port {port}: {' '.join(argv)}")
        return process

    def _stop(self, process: PodProcess, reason: str) -> None:
        """Kill the process at once: its pod is gone without a grace period (force-deleted, its node
        lost), its grace period is over, or the runner itself stops."""
        if process.popen is not None and process.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.popen.pid, signal.SIGKILL)
            process.popen.wait(5)
        process.pidfile.unlink(missing_ok=True)
        self._log(f"{process.key}: stopped ({reason})")

    def stop_all(self) -> None:
        for uid in list(self.processes):
            self._stop(self.processes.pop(uid), reason="pod runner stopping")
        self._publish()

    # ------------------------------------------------------------------------------------ helpers
    def _annotate(self, process: PodProcess, value: str) -> None:
        body = {"metadata": {"annotations": {ENDPOINT_ANNOTATION: value}}}
        try:
            self.core.patch_namespaced_pod(process.name, process.namespace, body)
        except ApiException as error:
            if error.status != 404:
                self._log(f"{process.key}: cannot annotate: {error.status} {error.reason}")

    def _environment(self, pod: Any, container: Any, port: int) -> dict[str, str]:
        env: dict[str, str] = {
            "PORT": str(port),
            "HOST": LOOPBACK,
            "VLLM_EMULATOR_HOST": LOOPBACK,  # the bundled emulator binds 0.0.0.0 unless told otherwise
            "POD_NAME": pod.metadata.name,
            "POD_NAMESPACE": pod.metadata.namespace,
        }
        for source in container.env_from or []:
            prefix = source.prefix or ""
            if source.config_map_ref is not None:
                data = self._config_map(
                    pod.metadata.namespace, source.config_map_ref.name, source.config_map_ref.optional
                )
                env.update({f"{prefix}{k}": v for k, v in data.items()})
            if source.secret_ref is not None:
                data = self._secret(
                    pod.metadata.namespace, source.secret_ref.name, source.secret_ref.optional
                )
                env.update({f"{prefix}{k}": v for k, v in data.items()})
        for var in container.env or []:
            if var.value_from is None:
                env[var.name] = expand(var.value or "", env)
                continue
            resolved = self._value_from(pod, var.value_from)
            if resolved is not None:
                env[var.name] = resolved
        env["PORT"] = env["VLLM_EMULATOR_PORT"] = str(port)  # the runner's address always wins
        env["HOST"] = env["VLLM_EMULATOR_HOST"] = LOOPBACK
        return env

    def _value_from(self, pod: Any, source: Any) -> str | None:
        namespace = pod.metadata.namespace
        if source.field_ref is not None:
            return _field(pod, source.field_ref.field_path)
        if source.config_map_key_ref is not None:
            ref = source.config_map_key_ref
            return self._config_map(namespace, ref.name, ref.optional).get(ref.key)
        if source.secret_key_ref is not None:
            ref = source.secret_key_ref
            return self._secret(namespace, ref.name, ref.optional).get(ref.key)
        return None  # resourceFieldRef and others: not meaningful for a local process

    def _config_map(self, namespace: str, name: str, optional: bool | None) -> dict[str, str]:
        try:
            return dict(self.core.read_namespaced_config_map(name, namespace).data or {})
        except ApiException as error:
            if error.status == 404 and optional:
                return {}
            raise LookupError(f"ConfigMap {namespace}/{name}: {error.status} {error.reason}") from None

    def _secret(self, namespace: str, name: str, optional: bool | None) -> dict[str, str]:
        try:
            data = self.core.read_namespaced_secret(name, namespace).data or {}
        except ApiException as error:
            if error.status == 404 and optional:
                return {}
            raise LookupError(f"Secret {namespace}/{name}: {error.status} {error.reason}") from None
        return {k: base64.b64decode(v).decode("utf-8", errors="replace") for k, v in data.items()}


def _eligible(pod: Any) -> bool:
    return (
        pod.metadata.deletion_timestamp is None
        and bool(pod.spec.node_name)
        and pod.status is not None
        and pod.status.phase == "Running"
    )


_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def _field(pod: Any, path: str) -> str | None:
    simple = {
        "metadata.name": pod.metadata.name,
        "metadata.namespace": pod.metadata.namespace,
        "metadata.uid": pod.metadata.uid,
        "spec.nodeName": pod.spec.node_name,
        "spec.serviceAccountName": pod.spec.service_account_name,
        "status.podIP": LOOPBACK,  # the process really listens on loopback
        "status.hostIP": LOOPBACK,
    }
    if path in simple:
        value = simple[path]
        return None if value is None else str(value)
    match = _LABEL_REF.match(path)
    if match:
        mapping = (pod.metadata.labels if match.group(1) == "labels" else pod.metadata.annotations) or {}
        value = mapping.get(match.group(2))
        return None if value is None else str(value)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m localcluster.podrunner", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--sd-dir", required=True, type=Path)
    parser.add_argument("--pid-dir", required=True, type=Path)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between reconciliations")
    args = parser.parse_args(argv)

    load: Any = kube_config.new_client_from_config  # the client's typing is partial
    api = load(config_file=str(args.kubeconfig))
    core: Any = client.CoreV1Api(api)
    runner = PodRunner(core, args.state_dir, args.sd_dir, args.pid_dir)

    stopping = False

    def request_stop(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    ready_file = args.state_dir / "ready"
    failures = 0
    try:
        while not stopping:
            try:
                runner.sync()
                failures = 0
                if not ready_file.exists():
                    ready_file.write_text(str(os.getpid()), encoding="utf-8")
            except Exception as error:  # the API server may be restarting; keep reconciling
                failures += 1
                if failures in {1, 10} or failures % 100 == 0:
                    print(f"sync failed ({failures} in a row): {type(error).__name__}: {error}", flush=True)
            time.sleep(args.interval)
    finally:
        runner.stop_all()
        api.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
