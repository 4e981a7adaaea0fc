"""Building blocks of the end-to-end suite: load through the Deployments' pods, SLO attainment, results.

* :class:`~demo.traffic.LoadDriver` (shared with ``make demo``) drives ``vllm-loadgen`` against the
  serving pods of Deployments, as a Service would, and records every request;
  :class:`~demo.traffic.PhaseStats` is a phase's SLO attainment measured at the load generator.
* :class:`E2EResults` collects the figures of every scenario and writes them as JSON and Markdown.
* :class:`Operator` runs ``variant-autoscaler run --all-namespaces`` (the container's command) through the
  integration harness's :class:`~vatesting.harness.OperatorProcess`, registered as a Prometheus target
  the way a ServiceMonitor would.

Every wait polls with a deadline; nothing sleeps blindly.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from demo.manifests import emulator_variant, variant_autoscaling, wva_hpa
from demo.traffic import INSTANCE_LABEL, LoadDriver, PhaseStats, Slo, serving_urls
from localcluster import LocalCluster, wait_for
from variant_autoscaler.api.v1alpha1 import VariantAutoscalingStatus
from vatesting.harness import OPERATOR_NS, OperatorProcess

# Re-exported for the scenarios.
__all__ = ["LoadDriver", "PhaseStats", "Slo", "emulator_variant", "variant_autoscaling", "wva_hpa"]


# WVA's e2e setup: the emulator serving default/default with the A100 profile of WVA's sample
# VariantAutoscaling (ms, max batch 4), the sample itself and the Premium class (TTFT 500 ms, ITL 24 ms).
MODEL = "default/default"
VA = "vllme-deployment"
A100 = "NVIDIA-A100-PCIE-80GB"
WVA_A100 = {"alpha": 20.58, "beta": 0.41, "gamma": 20.58, "delta": 0.041}
WVA_G2 = {"alpha": 17.15, "beta": 0.34, "gamma": 17.15, "delta": 0.34}
#: With 100 prompt and 64 output tokens one A100 replica serves up to about 115 requests per minute
#: within Premium's SLOs (``variant-autoscaler analyze``): 60 need one replica, 280 need three.
LOW_RPM = 60.0
HIGH_RPM = 280.0
#: Cycles to wait for the decision to settle: 10 × 2 s covers the 20 s metrics window.
SETTLE_CYCLES = 10
PREMIUM = Slo(ttft_ms=500, itl_ms=24)


# --------------------------------------------------------------------------------------------- results


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100.0 * value:.1f}%"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


@dataclass
class ResultRow:
    scenario: str
    phase: str
    slo: Slo | None
    stats: PhaseStats | None
    facts: dict[str, Any]


class E2EResults:
    """The suite's measured figures: ``results.json`` and ``results.md`` in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.rows: list[ResultRow] = []
        self.started = time.monotonic()
        self.wall_seconds: float | None = None
        self.scenario_seconds: dict[str, float] = {}

    def add(
        self,
        scenario: str,
        phase: str,
        stats: PhaseStats | None = None,
        slo: Slo | None = None,
        **facts: Any,
    ) -> None:
        self.rows.append(ResultRow(scenario, phase, slo, stats, dict(facts)))
        self.write()

    def timed(self, scenario: str, seconds: float) -> None:
        self.scenario_seconds[scenario] = round(seconds, 1)
        # Up to the end of the last scenario: the session (and this object) outlives the e2e tier when
        # the other tiers run in the same pytest session.
        self.wall_seconds = time.monotonic() - self.started
        self.write()

    def finish(self) -> None:
        self.write()

    def to_json(self) -> dict[str, Any]:
        rows = []
        for row in self.rows:
            stats = None
            if row.stats is not None:
                stats = {**asdict(row.stats), "attainment": row.stats.attainment}
            rows.append(
                {
                    "scenario": row.scenario,
                    "phase": row.phase,
                    "slo_ms": None if row.slo is None else asdict(row.slo),
                    "stats": stats,
                    "facts": row.facts,
                }
            )
        return {
            "wall_seconds": None if self.wall_seconds is None else round(self.wall_seconds, 1),
            "scenario_seconds": self.scenario_seconds,
            "rows": rows,
        }

    def markdown(self) -> str:
        lines = [
            "| Scenario | Phase | SLO TTFT/ITL (ms) | Requests | Met both | TTFT p50/p90 (ms) "
            "| Mean ITL (ms) | Facts |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in sorted(self.rows, key=lambda r: r.scenario.split(" ", 1)[0]):  # in scenario order
            slo = "" if row.slo is None else f"{row.slo.ttft_ms:g} / {row.slo.itl_ms:g}"
            s = row.stats
            facts = "; ".join(f"{k}: {v}" for k, v in row.facts.items())
            if s is None or not s.requests:
                lines.append(f"| {row.scenario} | {row.phase} | {slo} | 0 | n/a | | | {facts} |")
                continue
            lines.append(
                f"| {row.scenario} | {row.phase} | {slo} | {s.requests} | {_pct(s.attainment)} "
                f"| {_num(s.ttft_p50_ms)} / {_num(s.ttft_p90_ms)} | {_num(s.itl_mean_ms)} | {facts} |"
            )
        if self.scenario_seconds:
            lines.append("")
            lines.append(
                "Scenario wall times (s): "
                + ", ".join(f"{k} {v:g}" for k, v in sorted(self.scenario_seconds.items()))
            )
        if self.wall_seconds is not None:
            lines.append("")
            lines.append(f"Suite wall time, cluster start included: {self.wall_seconds:.0f} s")
        return "\n".join(lines) + "\n"

    def write(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "results.json").write_text(json.dumps(self.to_json(), indent=2) + "\n")
        (self.directory / "results.md").write_text(self.markdown())


# --------------------------------------------------------------------------------------------- operator


class Operator:
    """``variant-autoscaler run --all-namespaces`` as a process, scraped by the cluster's Prometheus."""

    TARGET = "variant-autoscaler"

    def __init__(self, cluster: LocalCluster, kubeconfig: Path, log_dir: Path, identity: str) -> None:
        self.cluster = cluster
        self.kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.identity = identity
        self.process: OperatorProcess | None = None

    def start(self) -> Operator:
        """Start a process (a restarted container keeps its pod name: the same identity)."""
        process = OperatorProcess(self.kubeconfig, None, self.log_dir, identity=self.identity)
        process.start()
        self.process = process
        # As deploy/prometheus' ServiceMonitor: the target's own `namespace` label turns the VA namespace
        # of the inferno_* series into `exported_namespace`.
        self.cluster.prometheus_server().add_targets(
            self.TARGET, [f"127.0.0.1:{process.metrics_port}"], {"namespace": OPERATOR_NS}
        )
        return self

    @property
    def proc(self) -> OperatorProcess:
        assert self.process is not None, "the operator is not running"
        return self.process

    def cycles(self) -> float:
        return self.proc.cycles()

    def wait_cycles(self, count: int, timeout: float = 120.0) -> None:
        target = self.cycles() + count
        wait_for(lambda: self.cycles() >= target, timeout=timeout, what=f"{count} more operator cycles")

    def kill(self) -> None:
        self.proc.kill()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
        self.cluster.prometheus_server().remove_targets(self.TARGET)

    def logs(self) -> str:
        return self.proc.logs()


# --------------------------------------------------------------------------------------------- reading


class Kube:
    """Typed-enough reads of the objects the scenarios look at (admin client of the cluster)."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        api = cluster.api_client()
        self.core: Any = client.CoreV1Api(api)
        self.apps: Any = client.AppsV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)

    def va(self, namespace: str, name: str) -> dict[str, Any]:
        body: dict[str, Any] = self.custom.get_namespaced_custom_object(
            "llmd.ai", "v1alpha1", namespace, "variantautoscalings", name
        )
        return body

    def replicas(self, namespace: str, name: str) -> int:
        return int(self.apps.read_namespaced_deployment(name, namespace).spec.replicas or 0)

    def pods(self, namespace: str, deployment: str) -> list[Any]:
        return list(
            self.core.list_namespaced_pod(namespace, label_selector=f"{INSTANCE_LABEL}={deployment}").items
        )

    def pending_pods(self, namespace: str, deployment: str) -> list[str]:
        return [
            p.metadata.name
            for p in self.pods(namespace, deployment)
            if p.status.phase == "Pending" and p.metadata.deletion_timestamp is None
        ]

    def serving(self, namespace: str, deployment: str) -> list[str]:
        """URLs of the deployment's pods whose local process serves."""
        return serving_urls(self.core, namespace, [deployment])

    def events(self, namespace: str, involved: str, reason: str | None = None) -> list[Any]:
        items = self.core.list_namespaced_event(namespace).items
        return [
            e for e in items if e.involved_object.name == involved and (reason is None or e.reason == reason)
        ]

    def external_metric(self, namespace: str, metric: str, variant: str) -> list[str]:
        """Values the HPA would read from prometheus-adapter (external.metrics.k8s.io)."""
        raw = self.cluster.kubectl(
            "get",
            "--raw",
            f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/{metric}"
            f"?labelSelector=variant_name%3D{variant}",
            check=False,
        )
        if raw.returncode != 0:
            return []
        return [str(item["value"]) for item in json.loads(raw.stdout).get("items", [])]


def desired(va: Mapping[str, Any]) -> int | None:
    value = ((va.get("status") or {}).get("desiredOptimizedAlloc") or {}).get("numReplicas")
    return value if isinstance(value, int) else None


def reason(va: Mapping[str, Any]) -> str:
    return str(((va.get("status") or {}).get("desiredOptimizedAlloc") or {}).get("reason") or "")


def condition(va: Mapping[str, Any], type_: str) -> dict[str, Any]:
    for cond in (va.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def valid_status(va: Mapping[str, Any]) -> VariantAutoscalingStatus:
    """The status parsed by the API's model (WVA's field rules: decimal strings, accelerator length, ...)."""
    status = VariantAutoscalingStatus.model_validate(va.get("status") or {})
    assert status.desired_optimized_alloc is not None, f"no desiredOptimizedAlloc: {va.get('status')}"
    assert status.conditions, "no conditions"
    generation = (va.get("metadata") or {}).get("generation")
    assert {c.observed_generation for c in status.conditions} == {generation}, status.conditions
    return status


def wait_va(
    kube: Kube,
    namespace: str,
    name: str,
    check: Callable[[dict[str, Any]], bool],
    what: str,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """Poll the VariantAutoscaling until ``check`` holds; returns it."""

    def probe() -> dict[str, Any] | None:
        va = kube.va(namespace, name)
        return va if check(va) else None

    result: dict[str, Any] = wait_for(probe, timeout=timeout, what=what, interval=0.5)
    return result


def prometheus_value(cluster: LocalCluster, promql: str) -> float | None:
    """The single value of an instant query (None when the result is empty)."""
    result = cluster.prometheus_server().query(promql)
    if not result:
        return None
    assert len(result) == 1, f"{promql} returned {len(result)} series: {result}"
    return float(result[0]["value"][1])


class Sampler:
    """Samples a value every ``interval`` seconds in a thread (e.g. replicas during a fault)."""

    def __init__(self, read: Callable[[], Any], interval: float = 0.5) -> None:
        self._read = read
        self._interval = interval
        self.samples: list[tuple[float, Any]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="e2e-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.time(), self._read()))
            except Exception:  # an API hiccup: counted, the next sample retries
                self.errors += 1
            self._stop.wait(self._interval)

    def values(self) -> list[Any]:
        return [value for _, value in self.samples]


def settle(cluster: LocalCluster, operator: Operator, namespace: str) -> None:
    """Wait until no request waits on any pod of ``namespace``, then :data:`SETTLE_CYCLES` cycles.

    A backlog queued while too few replicas served is demand the operator rightly sees; a steady state
    starts once it has drained and a metrics window has passed.
    """
    waiting = f'sum(vllm:num_requests_waiting{{namespace="{namespace}"}})'
    wait_for(
        lambda: (prometheus_value(cluster, waiting) or 0.0) < 1.0,
        timeout=180,
        what="the waiting queues to drain",
        interval=1.0,
    )
    operator.wait_cycles(SETTLE_CYCLES)
