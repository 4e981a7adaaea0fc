"""``python -m localcluster up|down|status`` — the local cluster for people (``make cluster-up``).

``up`` starts a cluster detached from the terminal (its processes outlive the command) and records its
state directory in ``$VA_CACHE_DIR/current-cluster``; ``down`` stops every process recorded there by pid
and deletes the state; ``status`` says what is running. ``up --foreground`` instead runs until Ctrl-C and
cleans up after itself.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from localcluster.cluster import MARKER_FILE, PROFILES, STATE_FILE, ClusterOptions, LocalCluster
from localcluster.errors import LocalClusterError
from localcluster.gpu import DEFAULT_GPU_INVENTORY, inventory_summary, load_inventory
from localcluster.procs import PidRecord, stop_from_pidfiles
from localcluster.versions import cache_dir


def _pointer() -> Path:
    return cache_dir() / "current-cluster"


def _recorded_state_dir(explicit: Path | None) -> Path | None:
    if explicit is not None:
        return explicit
    pointer = _pointer()
    if not pointer.is_file():
        return None
    return Path(pointer.read_text(encoding="utf-8").strip())


def _running(state_dir: Path) -> list[str]:
    names = []
    for path in sorted((state_dir / "pids").glob("*.json")):
        record = PidRecord.from_file(path)
        if record is not None and record.is_running():
            names.append(record.name)
    return names


def _summary(cluster: LocalCluster) -> str:
    lines = [
        f"profile:          {cluster.options.profile}",
        f"state directory:  {cluster.state_dir}",
        f"API server:       {cluster.server}",
        f"admin kubeconfig: {cluster.admin_kubeconfig}",
        f"SA kubeconfig:    {cluster.service_account_kubeconfig}",
        f"kubectl:          {cluster.binaries.kubectl}",
    ]
    if cluster.prometheus is not None:
        lines.append(f"Prometheus:       {cluster.prometheus.url}")
        lines.append(f"GPU nodes:        {', '.join(sorted(cluster.nodes))}")
        lines.append(f"GPUs by product:  {inventory_summary(cluster.nodes.values())}")
    lines.append(f"use it with:      source {cluster.state_dir / 'env'}")
    return "\n".join(lines)


def cmd_up(args: argparse.Namespace) -> int:
    # Only a cluster in a directory of its own choosing is recorded as "the" cluster of this machine.
    record = args.state_dir is None
    previous = _recorded_state_dir(None) if record else None
    if previous is not None and _running(previous):
        print(f"a cluster is already running from {previous}; run `make cluster-down` first", file=sys.stderr)
        return 1
    gpu_nodes = load_inventory(args.gpu_inventory) if args.gpu_inventory else DEFAULT_GPU_INVENTORY
    options = ClusterOptions(
        profile=args.profile,
        gpu_nodes=gpu_nodes,
        prometheus_tls=args.prometheus_tls,
        die_with_parent=args.foreground,
    )
    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix=f"va-cluster-{args.profile}-"))
    cluster = LocalCluster(options, state_dir=state_dir)
    cluster.start()
    if not args.foreground:
        if record:
            _pointer().parent.mkdir(parents=True, exist_ok=True)
            _pointer().write_text(str(cluster.state_dir), encoding="utf-8")
        print(_summary(cluster))
        down = (
            "make cluster-down" if record else f"python -m localcluster down --state-dir {cluster.state_dir}"
        )
        print(f"stop it with:     {down}")
        return 0
    print(_summary(cluster))
    print("running in the foreground; Ctrl-C stops it")
    stop = False

    def request_stop(signum: int, _frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        while not stop:
            signal.pause()
    finally:
        cluster.stop(remove_state=args.state_dir is None)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    state_dir = _recorded_state_dir(args.state_dir)
    if state_dir is None:
        print("no cluster recorded; nothing to stop")
        return 0
    if not (state_dir / MARKER_FILE).is_file():
        print(f"{state_dir} is not a local cluster's state directory; not touching it", file=sys.stderr)
        return 1
    stopped = stop_from_pidfiles(state_dir / "pids")
    print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
    if not args.keep_state:
        shutil.rmtree(state_dir, ignore_errors=True)
        print(f"removed {state_dir}")
    if _recorded_state_dir(None) == state_dir:
        _pointer().unlink(missing_ok=True)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    state_dir = _recorded_state_dir(args.state_dir)
    if state_dir is None or not (state_dir / STATE_FILE).is_file():
        print("no cluster is recorded (make cluster-up starts one)")
        return 1
    state = json.loads((state_dir / STATE_FILE).read_text(encoding="utf-8"))
    running = _running(state_dir)
    print(json.dumps({**state, "running": running}, indent=2))
    expected = {"etcd", "kube-apiserver"}
    if state.get("profile") == "full":
        expected |= {
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
            "prometheus",
            "prometheus-adapter",
            "podrunner",
        }
    missing = sorted(expected - set(running))
    if missing:
        print(f"not running: {', '.join(missing)} (logs in {state_dir / 'logs'})", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start a local cluster")
    up.add_argument("--profile", choices=PROFILES, default=os.environ.get("VA_CLUSTER_PROFILE", "full"))
    up.add_argument("--state-dir", type=Path, help="state directory (default: a new temporary directory)")
    up.add_argument(
        "--gpu-inventory",
        type=Path,
        default=os.environ.get("VA_GPU_INVENTORY") or None,
        help="YAML GPU node inventory (default: the built-in mixed inventory)",
    )
    up.add_argument("--prometheus-tls", action="store_true", help="serve Prometheus over HTTPS")
    up.add_argument("--foreground", action="store_true", help="run until Ctrl-C instead of detaching")
    up.set_defaults(func=cmd_up)
    down = commands.add_parser("down", help="stop the recorded cluster and delete its state")
    down.add_argument("--state-dir", type=Path)
    down.add_argument("--keep-state", action="store_true", help="keep the state directory (logs)")
    down.set_defaults(func=cmd_down)
    status = commands.add_parser("status", help="show the recorded cluster and its processes")
    status.add_argument("--state-dir", type=Path)
    status.set_defaults(func=cmd_status)
    args = parser.parse_args(argv)
    try:
        result: int = args.func(args)
    except LocalClusterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return result


if __name__ == "__main__":
    sys.exit(main())
