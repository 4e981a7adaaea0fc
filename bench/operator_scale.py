"""The operator at scale: one full cycle's wall time, PromQL queries per cycle, and memory, with 500 VAs.

Setup (all local, all real processes):

* the local API server (``api`` profile: etcd + kube-apiserver, from hack/localcluster);
* a real Prometheus (the Debian binary) scraping a synthetic vLLM exporter that serves the metrics of
  one model per variant, every counter growing at its own rate (so every variant has a non-zero load);
* N Deployments and N VariantAutoscalings (WVA's sample profile, one model each), every model listed in
  the premium service class so that the plan sizes every variant;
* the operator as a process, ``variant-autoscaler run``, with deploy/'s ServiceAccount and RBAC.

Each phase waits for cycles that saw all N variants and reports the operator's own metrics: the wall
time of a cycle (``variant_autoscaler_last_cycle_duration_seconds``: ConfigMaps, Deployments list,
Prometheus, the plan, and N status writes with their resourceVersion), PromQL queries per cycle, and
the operator's resident memory (VmRSS, and the peak VmHWM) from /proc. Then, at the last phase's
size, the VariantAutoscalings kept by a kopf index (``WVA_VA_WATCH=kopf``) against the operator's own
informer, alternating, each on a freshly started operator after one cycle to warm up: the cost of
watching them through kopf (docs/design.md, "kopf and what is custom"). Last, with the operator
stopped, the API server's floor: every VA's status written once more by the operator's own client call
(a PUT with the resourceVersion, the same concurrency), a few rounds, timed: what the writes a cycle
must make cost on this machine with no operator logic around them.

Run: ``python bench/run_all.py --only operator_scale --output /tmp/operator.md``. Needs the local
cluster binaries (``make cluster-bins``) and Prometheus on PATH or at
/usr/bin/prometheus; the venv's ``bin`` must hold ``variant-autoscaler``.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from localcluster import ClusterOptions, LocalCluster
from localcluster.net import free_port
from variant_autoscaler.adapters.kube import KubeClient, load_credentials
from variant_autoscaler.core.status import format_time
from variant_autoscaler.settings import Settings
from vatesting.harness import OperatorProcess, install, set_main_config

ROOT = Path(__file__).resolve().parents[1]

PHASES = (50, 500)
CYCLES_PER_PHASE = 5
#: After the phases, the last one again with this main-ConfigMap setting (docs/configuration.md).
REFRESH = "5m"
#: Who keeps the VAs, phase by phase, back to back: a kopf index against the operator's informer, in
#: both orders (a host whose load drifts during the run favours neither).
WATCHES = ("kopf", "informer", "informer", "kopf")
#: Rounds of status writes alone (no operator) that measure the API server's floor.
WRITE_ROUNDS = 3
NAMESPACE = "bench"
OPERATOR_NS = "workload-variant-autoscaler-system"
BIN = Path(sys.executable).parent
COMMAND = "python bench/run_all.py --only operator_scale"


class SyntheticVllm:
    """vLLM's metrics for many models on one endpoint; counters grow linearly, each at its own rate."""

    def __init__(self, models: int) -> None:
        self.models = models
        self.start = time.time()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = outer.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return

        return Handler

    def render(self) -> str:
        t = time.time() - self.start
        lines = []
        for i in range(self.models):
            m = f'model_name="bench/model-{i:04d}"'
            rps = 0.2 + (i % 7) * 0.1  # 12 to 48 requests per minute
            done = rps * t
            lines += [
                f"vllm:request_success_total{{{m}}} {done:.3f}",
                f"vllm:request_prompt_tokens_sum{{{m}}} {done * 120:.3f}",
                f"vllm:request_prompt_tokens_count{{{m}}} {done:.3f}",
                f"vllm:request_generation_tokens_sum{{{m}}} {done * 200:.3f}",
                f"vllm:request_generation_tokens_count{{{m}}} {done:.3f}",
                f"vllm:time_to_first_token_seconds_sum{{{m}}} {done * 0.08:.4f}",
                f"vllm:time_to_first_token_seconds_count{{{m}}} {done:.3f}",
                f"vllm:time_per_output_token_seconds_sum{{{m}}} {done * 200 * 0.021:.4f}",
                f"vllm:time_per_output_token_seconds_count{{{m}}} {done * 200:.3f}",
                f"vllm:num_requests_waiting{{{m}}} 0",
                f"vllm:num_requests_running{{{m}}} 2",
            ]
        return "\n".join(lines) + "\n"

    def __enter__(self) -> SyntheticVllm:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def prometheus(target_port: int, workdir: Path) -> Iterator[str]:
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    port = free_port()
    config = {
        "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
        "scrape_configs": [
            {
                "job_name": "vllm",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{target_port}"], "labels": {"namespace": NAMESPACE}}
                ],
            }
        ],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(
        [binary, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=(workdir / "prometheus.log").open("wb"),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: _http_ok(f"{url}/-/ready"), 60, "Prometheus ready")
        yield url
    finally:
        proc.terminate()
        proc.wait(20)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _wait(check: Any, timeout: float, what: str, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(interval)


def _objects(first: int, last: int) -> list[dict[str, Any]]:
    sample = yaml.safe_load((ROOT / "deploy" / "samples" / "variantautoscaling.yaml").read_text())
    out: list[dict[str, Any]] = []
    for i in range(first, last):
        name = f"va-{i:04d}"
        out.append({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "vllm", "image": "none.invalid/vllm",
                                                           "args": ["--max-num-seqs", "4"]}]}}},
        })  # fmt: skip
        va = json.loads(json.dumps(sample))
        va["metadata"].update(name=name, namespace=NAMESPACE)
        va["spec"]["modelID"] = f"bench/model-{i:04d}"
        out.append(va)
    return out


def _service_classes(models: int) -> dict[str, Any]:
    """deploy/'s service classes with every bench model in the premium class, so that each variant is
    really planned (a model without a class would fail at once and leave the plan nearly empty)."""
    cm: dict[str, Any] = yaml.safe_load(
        (ROOT / "deploy" / "manager" / "configmap-serviceclass.yaml").read_text()
    )
    premium = yaml.safe_load(cm["data"]["premium.yaml"])
    premium["data"] += [
        {"model": f"bench/model-{i:04d}", "slo-tpot": 24, "slo-ttft": 500} for i in range(models)
    ]
    cm["data"]["premium.yaml"] = yaml.safe_dump(premium, sort_keys=False)
    return cm


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("variant_autoscaler_") and " " in line:
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                values[name] = float(value)
    return values


def _rss_mib(pid: int) -> tuple[float, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(
    operator: Any, variants: int, servers: dict[str, int], cycles: int = CYCLES_PER_PHASE
) -> dict[str, Any]:
    """Watch ``cycles`` cycles over ``variants``; CPU (the operator's, and that of ``servers``: name ->
    pid) and skipped writes from the end of the first to the end of the last (whole cycles)."""
    port, pid = operator.metrics_port, operator.process.pid
    durations: list[float] = []
    queries: set[float] = set()
    cpu_start = skipped_start = conflicts_start = 0.0
    servers_start: dict[str, float] = {}
    ok = 'variant_autoscaler_cycles_total{result="ok"}'
    seen = _scrape(port).get(ok, 0.0)
    while len(durations) < cycles:
        # Polled once a second: rendering /metrics grows with the variants and loads the operator too.
        values = _wait(
            lambda seen=seen: v if (v := _scrape(port)).get(ok, 0.0) > seen else None,
            300,
            f"a cycle over {variants} variants",
            interval=1.0,
        )
        seen = values[ok]
        if values.get("variant_autoscaler_variants") != variants:
            continue
        durations.append(values["variant_autoscaler_last_cycle_duration_seconds"])
        queries.add(values["variant_autoscaler_promql_queries_last_cycle"])
        plan_seconds = values["variant_autoscaler_optimizer_duration_seconds"]
        skipped = values.get("variant_autoscaler_status_writes_skipped_total", 0.0)
        conflicts = values.get("variant_autoscaler_status_conflicts_total", 0.0)
        if len(durations) == 1:
            cpu_start, skipped_start, conflicts_start = _cpu_seconds(pid), skipped, conflicts
            servers_start = {name: _cpu_seconds(p) for name, p in servers.items()}
    cycles = max(len(durations) - 1, 1)
    return {
        "servers": {name: (_cpu_seconds(p) - servers_start[name]) / cycles for name, p in servers.items()},
        "durations": durations,
        "queries": sorted(queries),
        "plan_seconds": plan_seconds,
        "cpu": (_cpu_seconds(pid) - cpu_start) / cycles,
        "writes": variants - (skipped - skipped_start) / cycles,
        "conflicts": (conflicts - conflicts_start) / cycles,
    }


def run() -> str:
    results: list[tuple[str, int, dict[str, Any], tuple[float, float]]] = []
    watches: list[tuple[str, dict[str, Any], tuple[float, float]]] = []
    workdir = Path(tempfile.mkdtemp(prefix="bench-operator-"))
    cluster = LocalCluster(ClusterOptions(profile="api"))
    cluster.start()
    env = {"WVA_DEBOUNCE_SECONDS": "2", "WVA_LOG_LEVEL": "warning"}
    try:
        with SyntheticVllm(max(PHASES)) as vllm, prometheus(vllm.port, workdir) as prom_url:
            sa = install(cluster, prom_url, GLOBAL_OPT_INTERVAL="10s", METRICS_STALENESS="60s")
            cluster.apply(_service_classes(max(PHASES)))
            cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
            operator = OperatorProcess(sa, NAMESPACE, workdir, identity="bench", env=env)
            servers = {
                name: proc.popen.pid
                for name, proc in cluster.supervisor.processes.items()
                if name in ("kube-apiserver", "etcd")
            }
            previous = 0
            with _started(operator):
                for count in PHASES:
                    objects = _objects(previous, count)
                    for chunk in range(0, len(objects), 200):
                        cluster.apply(objects[chunk : chunk + 200])
                    previous = count
                    assert operator.process is not None
                    measured = _measure(operator, count, servers)
                    results.append(("every cycle", count, measured, _rss_mib(operator.process.pid)))
            for watch in WATCHES:
                one = OperatorProcess(
                    sa, NAMESPACE, workdir, identity="bench", env={**env, "WVA_VA_WATCH": watch}
                )
                with _started(one):
                    assert one.process is not None
                    _measure(one, previous, servers, cycles=1)  # the first cycle of a process: its slowest
                    watches.append((watch, _measure(one, previous, servers), _rss_mib(one.process.pid)))
            # The same variants, statuses rewritten only when something essential changed.
            set_main_config(cluster, STATUS_REFRESH_INTERVAL=REFRESH)
            with _started(operator):
                assert operator.process is not None
                _measure(operator, previous, servers)  # let the edit land
                measured = _measure(operator, previous, servers)
                label = f"on change (`STATUS_REFRESH_INTERVAL={REFRESH}`)"
                results.append((label, previous, measured, _rss_mib(operator.process.pid)))
            floor = asyncio.run(_writes_alone(sa, previous, servers))
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return _report(results, watches, floor)


async def _write_all(kube: Any, vas: list[dict[str, Any]], status: dict[str, Any], concurrency: int) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def write(va: dict[str, Any]) -> None:
        meta = va["metadata"]
        async with gate:
            await kube.patch_va_status(NAMESPACE, meta["name"], status, meta["resourceVersion"], current=va)

    await asyncio.gather(*(write(va) for va in vas))


async def _writes_alone(kubeconfig: Path, variants: int, servers: dict[str, int]) -> dict[str, Any]:
    """Every VA's status written once more per round, with the operator stopped: the operator's client
    call (a PUT of the object it read, with its resourceVersion), its concurrency, its ServiceAccount;
    only ``desiredOptimizedAlloc.lastRunTime`` changes, as a cycle changes it at least."""
    concurrency = Settings.model_fields["kube_concurrency"].default
    kube = KubeClient(load_credentials(str(kubeconfig)))
    rounds: list[dict[str, float]] = []
    try:
        for _ in range(WRITE_ROUNDS):
            vas = await kube.list_vas(NAMESPACE)  # an informer holds them; not timed
            assert len(vas) == variants, len(vas)
            stamp = {"desiredOptimizedAlloc": {"lastRunTime": format_time(datetime.now(UTC))}}
            cpu = {name: _cpu_seconds(pid) for name, pid in servers.items()}
            started = time.perf_counter()
            await _write_all(kube, vas, stamp, concurrency)
            wall = time.perf_counter() - started
            rounds.append({"wall": wall, **{n: _cpu_seconds(p) - cpu[n] for n, p in servers.items()}})
            await asyncio.sleep(1.0)  # a whole second later: a new lastRunTime
    finally:
        await kube.aclose()
    return {"variants": variants, "concurrency": concurrency, "rounds": rounds}


@contextlib.contextmanager
def _started(operator: Any) -> Iterator[None]:
    operator.start()
    try:
        yield
    finally:
        operator.stop()


def _report(
    results: list[tuple[str, int, dict[str, Any], tuple[float, float]]],
    watches: list[tuple[str, dict[str, Any], tuple[float, float]]],
    floor: dict[str, Any],
) -> str:
    rows = []
    for label, count, measured, (rss, hwm) in results:
        d = sorted(measured["durations"])
        rows.append(
            f"| {count} | {label} | {statistics.median(d):.3f} | {max(d):.3f} | {measured['cpu']:.2f} | "
            f"{measured['servers']['kube-apiserver']:.2f} | {measured['servers']['etcd']:.2f} | "
            f"{measured['plan_seconds']:.3f} | {', '.join(f'{q:g}' for q in measured['queries'])} | "
            f"{measured['writes']:.0f} | {rss:.0f} | {hwm:.0f} |"
        )
    return (
        "## Operator at scale\n\n"
        f"`{COMMAND}` — the operator process (`variant-autoscaler run`, deploy/'s RBAC) against the local "
        "API server and a real Prometheus scraping a synthetic vLLM exporter (one model per variant, each "
        f"at a constant rate). {CYCLES_PER_PHASE} cycles per row after the variants were created. A cycle "
        "is everything: three ConfigMap reads, one Deployment list, the PromQL queries, the plan "
        "(unlimited mode; every bench model is in the premium service class, so every variant is sized), "
        "and the status writes. *Status writes* is per cycle: by default every VA's "
        "status is written every cycle (WVA's behaviour); the last row sets `STATUS_REFRESH_INTERVAL`, "
        "so that a status is written only when its decision, actuation or conditions change (here they "
        "do not: constant load), and otherwise once per interval.\n\n"
        "| variants | status written | cycle wall time, median (s) | max (s) | operator CPU per cycle (s) | "
        "API server CPU per cycle (s) | etcd CPU per cycle (s) | "
        "plan (s) | PromQL queries per cycle | status writes per cycle | RSS (MiB) | peak RSS (MiB) |\n"
        "|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|\n" + "\n".join(rows) + "\n\n"
        "*PromQL queries per cycle* lists the distinct counts seen: the load and saturation queries every "
        "cycle, and the profile learning's pod-window queries in the cycles whose window does not overlap "
        "the last one (a cycle triggered less than half an interval after another skips them); neither "
        "depends on the number of variants.\n\n"
        "CPU per cycle is each process's user+system time between the ends of the first and the last "
        "cycle, divided by the cycles: for the operator it includes its informer handling the watch "
        "events of the cycle's own status writes, the bench reading /metrics once a second and the Lease "
        "renewals. All "
        "processes share the machine's cores, so a cycle can take no less than the CPU the API server, "
        "etcd and the operator spend on it shared among those cores: the API server spends a few "
        "milliseconds of CPU on every status write of a VariantAutoscaling (it handles custom resources "
        "as untyped JSON: decoding, schema validation, managed fields and encoding for etcd and for "
        "watchers), so that with every status written each cycle it is the bottleneck here. "
        f"Machine load average when measured: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.\n\n"
        + _watch_report(watches)
        + _floor_report(floor)
        + "Targets (issue): a cycle of 500 variants in at most 2 s; a constant number of PromQL queries; "
        "at most 150 MB RSS.\n"
    )


def _watch_report(watches: list[tuple[str, dict[str, Any], tuple[float, float]]]) -> str:
    rows = []
    for watch, measured, (rss, _) in watches:
        d = measured["durations"]
        kept_by = "kopf index" if watch == "kopf" else "informer"
        rows.append(
            f"| {kept_by} | {statistics.median(d):.3f} | {', '.join(f'{x:.2f}' for x in d)} | "
            f"{measured['cpu']:.2f} | {measured['servers']['kube-apiserver']:.2f} | "
            f"{measured['conflicts']:.0f} | {rss:.0f} |"
        )
    pairs = []
    for first, second in zip(watches[::2], watches[1::2], strict=True):
        kopf, ours = (first[1], second[1]) if first[0] == "kopf" else (second[1], first[1])
        cpu = kopf["cpu"] / ours["cpu"]
        cycle = statistics.median(kopf["durations"]) / statistics.median(ours["durations"])
        pairs.append(f"operator CPU ×{cpu:.2f}, cycle ×{cycle:.2f}")
    variants = round(watches[0][1]["writes"])  # every status written: one write per variant
    return (
        f"**The VariantAutoscalings through a kopf index** (`WVA_VA_WATCH=kopf`: `@kopf.index` and "
        f"`@kopf.on.event` on the VAs) against the operator's informer (the default), {variants} variants, "
        "every status written each cycle, four phases back to back in the same run (kopf, informer, "
        "informer, kopf: a load that drifts during the run favours neither), each a freshly started "
        f"operator measured over {CYCLES_PER_PHASE} cycles after one to warm up:\n\n"
        "| VAs kept by | cycle wall time, median (s) | each cycle (s) | operator CPU per cycle (s) | "
        "API server CPU per cycle (s) | status conflicts per cycle | RSS (MiB) |\n"
        "|---|---:|---|---:|---:|---:|---:|\n"
        + "\n".join(rows)
        + "\n\nkopf index against the informer next to it (phases 1–2, 3–4): "
        + "; ".join(pairs)
        + ".\n\n"
    )


def _floor_report(floor: dict[str, Any]) -> str:
    rounds = floor["rounds"]
    walls = sorted(r["wall"] for r in rounds)
    api = sorted(r["kube-apiserver"] for r in rounds)
    etcd = sorted(r["etcd"] for r in rounds)

    def each(values: list[float]) -> str:
        return ", ".join(f"{v:.2f}" for v in values)

    return (
        f"**The API server's floor.** With the operator stopped, the {floor['variants']} statuses written "
        f"again by the operator's own client call (a PUT of the object with its resourceVersion, "
        f"{floor['concurrency']} at a time, only `lastRunTime` changed), {len(rounds)} rounds: "
        f"{statistics.median(walls):.3f} s median wall time per round ({each(walls)}); API server CPU "
        f"{each(api)} s, etcd {each(etcd)} s per round. A cycle that writes every status cannot be "
        "shorter than this on the same machine; the difference between the two is what the rest of the "
        "cycle (reads, PromQL, the plan, building the statuses) adds.\n\n"
    )
