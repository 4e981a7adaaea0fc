"""The demo: the operator autoscaling two emulated model servers on the local cluster, live.

1. start the ``full`` local cluster (kube-apiserver, controllers with the HPA, scheduler, kwok GPU nodes,
   Prometheus, prometheus-adapter, the pod runner);
2. install the operator from deploy/ (CRD, RBAC, ConfigMaps) and run it as its container does
   (``variant-autoscaler run --all-namespaces``, with its ServiceAccount), scraped by Prometheus;
3. deploy two emulated variants: WVA's sample (``default/default`` on A100, Premium class with WVA's mean
   SLOs, scaled by WVA's HPA through prometheus-adapter) and ``meta/llama0-7b`` on MI300X (Freemium class,
   its SLO stated as users do: 99 % of requests within both targets; scaled by the operator itself in
   patch mode, ahead of the load: tail sizing, the demand forecast and the burst guard);
4. drive a load schedule through their pods with ``vllm-loadgen`` and show a table refreshed in place;
5. write a PNG of load, replicas and latency over time, and tear everything down (also on Ctrl-C).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from demo.live import LiveTable, Row
from demo.manifests import emulator_variant, variant_autoscaling, wva_hpa
from demo.plot import Sample, plot
from demo.traffic import LoadDriver, Slo, serving_urls
from localcluster import ClusterOptions, LocalCluster, LocalClusterError, wait_for
from localcluster.net import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
OPERATOR_NS = "workload-variant-autoscaler-system"
SERVICE_ACCOUNT = "variant-autoscaler"
NAMESPACE = "llm-d-sim"  # WVA's sample namespace
WINDOW_S = 20.0  # latency and SLO attainment in the table and plot: the last 20 s


@dataclass(frozen=True)
class Variant:
    name: str
    model: str
    accelerator: str  # the name in accelerator-unit-costs
    vendor: str
    product: str  # the node label <vendor>/gpu.product
    profile: Mapping[str, float]
    max_batch: int
    slo: Slo
    slo_class: str  # key of service-classes-config
    mode: str  # metrics (WVA's HPA) or patch
    schedule: tuple[tuple[float, float], ...]  # (seconds, requests per minute)
    attainment: float = 0.0  # percent of requests within both SLOs (0: WVA's means)


VARIANTS = (
    Variant(
        name="vllme-deployment",
        model="default/default",
        accelerator="A100",
        vendor="nvidia",
        product="NVIDIA-A100-PCIE-80GB",
        profile={"alpha": 20.58, "beta": 0.41, "gamma": 20.58, "delta": 0.041},  # WVA's sample
        max_batch=4,
        slo=Slo(ttft_ms=500, itl_ms=24),
        slo_class="premium.yaml",
        mode="metrics",
        schedule=((45, 60), (60, 250), (45, 170), (60, 30)),
    ),
    Variant(
        name="llama-7b-mi300x",
        model="meta/llama0-7b",
        accelerator="MI300X",
        vendor="amd",
        product="AMD-MI300X-192GB",
        profile={"alpha": 35.0, "beta": 0.8, "gamma": 35.0, "delta": 0.08},
        max_batch=8,
        slo=Slo(ttft_ms=1500, itl_ms=150),
        slo_class="freemium.yaml",
        mode="patch",
        schedule=((45, 120), (60, 120), (45, 320), (60, 60)),
        attainment=99.0,
    ),
)
#: Ahead of the load at demo speed: an emulated pod serves within seconds, and the guard looks every 2 s.
DEMO_STARTUP = "15s"
DEMO_GUARD_INTERVAL = "2s"


class Interrupted(Exception):
    """SIGTERM, handled like Ctrl-C."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Interrupted


# ----------------------------------------------------------------------------------------------- setup


def install_operator(cluster: LocalCluster, interval: str) -> Path:
    """deploy/'s CRD, namespace, RBAC and ConfigMaps, wired to the cluster's Prometheus."""
    cluster.kubectl("apply", "--server-side", "-k", str(ROOT / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "crd/variantautoscalings.llmd.ai", "--timeout=60s")
    cluster.apply(ROOT / "deploy" / "namespace" / "namespace.yaml")
    cluster.kubectl("apply", "--server-side", "-k", str(ROOT / "deploy" / "rbac"))
    main = yaml.safe_load((ROOT / "deploy" / "manager" / "configmap.yaml").read_text())
    main["data"] = {
        "PROMETHEUS_BASE_URL": cluster.prometheus_url,
        "GLOBAL_OPT_INTERVAL": interval,
        "METRICS_WINDOW": "20s",
        "METRICS_STALENESS": "60s",
        "QUEUE_DRAIN_TIME": "60s",
        "STARTUP_TIME": DEMO_STARTUP,
        "BURST_GUARD_INTERVAL": DEMO_GUARD_INTERVAL,
    }
    if cluster.prometheus_ca_file is not None:
        main["data"]["PROMETHEUS_CA_CERT_PATH"] = str(cluster.prometheus_ca_file)
    cluster.apply(
        [
            main,
            yaml.safe_load((ROOT / "deploy" / "manager" / "configmap-accelerator-unitcost.yaml").read_text()),
            service_classes(VARIANTS),
        ]
    )
    return cluster.write_service_account_kubeconfig(OPERATOR_NS, SERVICE_ACCOUNT)


def service_classes(variants: Sequence[Variant]) -> dict[str, Any]:
    """deploy/'s service classes, with ``slo-attainment`` on the entries of variants that state one."""
    cm: dict[str, Any] = yaml.safe_load(
        (ROOT / "deploy" / "manager" / "configmap-serviceclass.yaml").read_text()
    )
    for key, text in list(cm["data"].items()):
        doc = yaml.safe_load(text)
        for entry in doc.get("data") or []:
            for v in variants:
                if v.slo_class == key and v.model == entry.get("model") and v.attainment:
                    entry["slo-attainment"] = v.attainment
        cm["data"][key] = yaml.safe_dump(doc, sort_keys=False)
    return cm


@contextlib.contextmanager
def operator_process(cluster: LocalCluster, kubeconfig: Path, log: Path) -> Iterator[int]:
    """``variant-autoscaler run --all-namespaces`` (the image's command); yields its metrics port."""
    metrics_port, health_port = free_port(), free_port()
    argv = [
        str(BIN / "variant-autoscaler"),
        "run",
        "--all-namespaces",
        "--kubeconfig",
        str(kubeconfig),
        "--operator-namespace",
        OPERATOR_NS,
        "--metrics-host",
        "127.0.0.1",
        "--metrics-port",
        str(metrics_port),
        "--health-host",
        "127.0.0.1",
        "--health-port",
        str(health_port),
        "--identity",
        "demo",
        "--log-format",
        "json",
    ]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    prometheus = cluster.prometheus_server()
    try:
        # Scraped as a ServiceMonitor would: the target's `namespace` makes the VA's `exported_namespace`.
        prometheus.add_targets(
            "variant-autoscaler", [f"127.0.0.1:{metrics_port}"], {"namespace": OPERATOR_NS}
        )
        yield metrics_port
    finally:
        prometheus.remove_targets("variant-autoscaler")
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def deploy_variants(
    cluster: LocalCluster, variants: Sequence[Variant], *, engine: str = "v1", vllm_version: str | None = None
) -> None:
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    for v in variants:
        cluster.apply(
            emulator_variant(
                v.name,
                NAMESPACE,
                model=v.model,
                vendor=v.vendor,
                product=v.product,
                profile=v.profile,
                max_batch=v.max_batch,
                engine=engine,
                vllm_version=vllm_version,
            )
        )
        spec: dict[str, Any] = {}
        if v.mode == "patch":
            spec = {"actuation": {"mode": "patch"}, "scaleDown": {"stabilizationWindowSeconds": 30}}
        cluster.apply(
            variant_autoscaling(
                v.name,
                NAMESPACE,
                model=v.model,
                accelerator=v.accelerator,
                profiles={v.accelerator: (v.profile, v.max_batch)},
                slo_class=("service-classes-config", v.slo_class),
                **spec,
            )
        )
        if v.mode == "metrics":
            cluster.apply(wva_hpa(NAMESPACE, v.name))


# ----------------------------------------------------------------------------------------------- observe


class Observer:
    """Reads what the table and plot show: VariantAutoscaling status, Deployments, load figures."""

    def __init__(self, cluster: LocalCluster) -> None:
        api = cluster.api_client()
        self.custom: Any = client.CustomObjectsApi(api)
        self.apps: Any = client.AppsV1Api(api)
        self.core: Any = client.CoreV1Api(api)

    def status(self, name: str) -> dict[str, Any]:
        try:
            va = self.custom.get_namespaced_custom_object(
                "llmd.ai", "v1alpha1", NAMESPACE, "variantautoscalings", name
            )
        except Exception:  # the API server is busy: show "-" this time
            return {}
        return dict(va.get("status") or {})

    def replicas(self, name: str) -> int | None:
        try:
            return int(self.apps.read_namespaced_deployment(name, NAMESPACE).spec.replicas or 0)
        except Exception:
            return None

    def guard_scalings(self, metrics_port: int | None) -> dict[str, float]:
        """Per variant, the burst guard's scale-ups so far (the operator's own metrics endpoint)."""
        if metrics_port is None:
            return {}

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2) as response:
                text = response.read().decode()
        except OSError:
            return {}
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "inferno_replica_scaling_total" and sample.labels.get("reason") == "guard":
                    name = sample.labels.get("variant_name", "")
                    out[name] = out.get(name, 0.0) + sample.value
        return out


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def observe(
    v: Variant, load: LoadDriver, observer: Observer, elapsed: float, guard_scalings: float | None = None
) -> tuple[Row, Sample]:
    status = observer.status(v.name)
    current = status.get("currentAlloc") or {}
    wanted = status.get("desiredOptimizedAlloc") or {}
    window = load.stats(since=time.time() - WINDOW_S)
    records = load.records(since=time.time() - WINDOW_S)
    ttfts = [1000.0 * r.ttft_s for r in records if r.error is None and r.ttft_s is not None]
    itls = [1000.0 * r.itl_s for r in records if r.error is None and r.itl_s is not None]
    replicas = observer.replicas(v.name)
    desired = wanted.get("numReplicas") if isinstance(wanted.get("numReplicas"), int) else None
    observed = _float((current.get("load") or {}).get("arrivalRate"))
    ttft_measured = sum(ttfts) / len(ttfts) if ttfts else None
    itl_measured = sum(itls) / len(itls) if itls else None
    row = Row(
        variant=v.name,
        model=v.model,
        accelerator=str(wanted.get("accelerator") or v.accelerator),
        mode=v.mode,
        offered_rpm=load.rpm,
        observed_rpm=observed,
        replicas=replicas,
        serving=len(load.endpoints()),
        desired=desired,
        ttft_predicted=_float(wanted.get("ttftAverage")),
        ttft_measured=ttft_measured,
        itl_predicted=_float(wanted.get("itlAverage")),
        itl_measured=itl_measured,
        slo_ttft=v.slo.ttft_ms,
        slo_itl=v.slo.itl_ms,
        attainment=window.attainment,
    )
    sample = Sample(
        t=elapsed,
        offered_rpm=load.rpm,
        observed_rpm=observed,
        replicas=replicas,
        desired=desired,
        ttft_predicted=row.ttft_predicted,
        ttft_measured=ttft_measured,
        itl_predicted=row.itl_predicted,
        itl_measured=itl_measured,
        forecast_rpm=_planned_rpm(status.get("forecast") or {}),
        guard_scalings=guard_scalings,
    )
    return row, sample


def _planned_rpm(forecast: dict[str, Any]) -> float | None:
    """The rate the operator planned for (req/min); an operator before plannedRate gave upperRate."""
    planned = _float(forecast.get("plannedRate"))
    return planned if planned is not None else _float(forecast.get("upperRate"))


def rate_at(schedule: Sequence[tuple[float, float]], t: float, scale: float) -> float | None:
    """The scheduled rate at ``t`` seconds, or None after the end."""
    start = 0.0
    for duration, rpm in schedule:
        end = start + duration * scale
        if t < end:
            return rpm
        start = end
    return None


# ----------------------------------------------------------------------------------------------- main


def run(args: argparse.Namespace) -> int:
    variants = VARIANTS
    table = LiveTable()
    print("starting the local cluster (full profile) ...", flush=True)
    cluster = LocalCluster(ClusterOptions(profile="full"))
    loads: dict[str, LoadDriver] = {}
    samples: dict[str, list[Sample]] = {v.name: [] for v in variants}
    log = cluster.state_dir / "demo" / "operator.log"
    summary: dict[str, Any] = {}
    try:
        cluster.start()
        print(f"cluster up: {cluster.server}; Prometheus {cluster.prometheus_url}", flush=True)
        kubeconfig = install_operator(cluster, args.interval)
        deploy_variants(cluster, variants, engine=args.engine, vllm_version=args.vllm_version)
        observer = Observer(cluster)
        wait_for(
            lambda: all(len(serving_urls(observer.core, NAMESPACE, [v.name])) == 1 for v in variants),
            timeout=120,
            what="one serving pod per variant",
        )
        with operator_process(cluster, kubeconfig, log) as metrics_port:
            for v in variants:
                loads[v.name] = LoadDriver(cluster, NAMESPACE, [v.name], v.model, v.slo, seed=len(loads) + 1)
                loads[v.name].start(v.schedule[0][1], "demo")
            started = time.monotonic()
            total = max(sum(d for d, _ in v.schedule) for v in variants) * args.schedule_scale
            while (elapsed := time.monotonic() - started) < total:
                rows = []
                guarded = observer.guard_scalings(metrics_port)
                for v in variants:
                    rpm = rate_at(v.schedule, elapsed, args.schedule_scale)
                    loads[v.name].set_rate(rpm or 0.0)
                    row, sample = observe(v, loads[v.name], observer, elapsed, guarded.get(v.name))
                    rows.append(row)
                    samples[v.name].append(sample)
                title = (
                    f"variant-autoscaler demo — {elapsed:5.0f} s of {total:.0f} s "
                    f"(cycle {args.interval}; Ctrl-C stops and cleans up)"
                )
                footer = [
                    "load: sent by vllm-loadgen / seen by the operator; replicas: Deployment / decided "
                    "(* = not all serving yet)",
                    f"TTFT, ITL: predicted by the operator / measured at the load generator (last "
                    f"{WINDOW_S:.0f} s); SLO met: share of requests within both SLOs",
                    f"operator log: {log}",
                ]
                table.show(title, rows, footer)
                time.sleep(max(0.0, args.refresh - (time.monotonic() - started - elapsed)))
            for v in variants:
                stats = loads[v.name].stats("demo")
                summary[v.name] = {
                    "slo_ms": [v.slo.ttft_ms, v.slo.itl_ms],
                    "requests": stats.requests,
                    "attainment": stats.attainment,
                    "errors": dict(stats.errors),
                }
    except (KeyboardInterrupt, Interrupted):
        print("\ninterrupted: cleaning up", flush=True)
    except LocalClusterError as exc:
        print(f"\nerror: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        for load in loads.values():
            with contextlib.suppress(Exception):
                load.stop(drain_timeout=20.0)
        if any(len(s) > 1 for s in samples.values()):
            plot(
                args.plot,
                samples,
                {v.name: (v.slo.ttft_ms, v.slo.itl_ms) for v in variants},
                "variant-autoscaler on the local cluster, two variants under a load schedule\n"
                "(vllme-deployment: WVA's mean SLOs; llama-7b-mi300x: 99 % attainment, ahead of the load)",
            )
            print(f"plot written to {args.plot}", flush=True)
        print("stopping the local cluster ...", flush=True)
        cluster.stop()
    if summary:
        print("SLO attainment over the whole run (at the load generator):")
        print(json.dumps(summary, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--plot",
        type=Path,
        default=Path(os.environ.get("DEMO_PLOT", ROOT / "docs/img/demo.png")),
        help="where to write the PNG (default docs/img/demo.png, or $DEMO_PLOT)",
    )
    parser.add_argument("--interval", default="5s", help="the operator's cycle (GLOBAL_OPT_INTERVAL)")
    parser.add_argument(
        "--schedule-scale", type=float, default=1.0, help="stretch (>1) or shrink (<1) the load schedule"
    )
    parser.add_argument("--refresh", type=float, default=2.0, help="seconds between table refreshes")
    parser.add_argument(
        "--engine",
        choices=("v1", "wva"),
        default="v1",
        help="the emulator's engine: v1 (vLLM V1's scheduler) or wva (the analyzer's own accounting)",
    )
    parser.add_argument(
        "--vllm-version", default=None, help="export the metric names of this vLLM version (0.10, 0.11, 0.12)"
    )
    args = parser.parse_args(argv)
    # Ctrl-C must work even when started with SIGINT ignored (in the background of a script, say).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _on_sigterm)
    return run(args)
