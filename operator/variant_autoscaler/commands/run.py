"""``variant-autoscaler run``: run the operator (the command the operator image uses).

Examples::

    variant-autoscaler run --all-namespaces            # cluster-wide (the Deployment in deploy/)
    variant-autoscaler run -n team-a -n team-b         # only these namespaces
    variant-autoscaler run -A --kubeconfig ~/.kube/config --operator-namespace wva --no-leader-election

Flags override the ``WVA_*`` environment (see docs/configuration.md); everything else about the cycle
is in the main ConfigMap, which is re-read every cycle.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from pydantic import ValidationError

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.settings import Settings

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "run",
        help="run the operator",
        description=(
            "Run the operator until SIGTERM or SIGINT: watch VariantAutoscalings and nodes, run the global "
            "cycle, actuate, write status. Flags override the WVA_* environment variables."
        ),
    )
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="serve every namespace (default)")
    scope.add_argument(
        "-n",
        "--namespace",
        "--watch-namespace",
        action="append",
        default=None,
        metavar="NS",
        help="serve only NS (repeatable; --watch-namespace is WVA's spelling)",
    )
    p.add_argument("--config-file", help="main-config settings file (wins over the ConfigMaps)")
    p.add_argument("--controller-instance", help="manage only objects labelled with this controller instance")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    p.add_argument("--operator-namespace", help="namespace of the ConfigMaps and the leader Lease")
    p.add_argument("--metrics-host", help="address of the metrics endpoint (default 0.0.0.0)")
    p.add_argument("--metrics-port", type=int, help="port of the metrics endpoint (default 8080; 0 = any)")
    p.add_argument("--health-host", help="address of the liveness endpoint (default 0.0.0.0)")
    p.add_argument("--health-port", type=int, help="port of the liveness endpoint /healthz (default 8081)")
    p.add_argument("--identity", help="leader-election identity (default: hostname-pid)")
    p.add_argument(
        "--no-leader-election", action="store_true", help="act without taking the Lease (one process only!)"
    )
    p.add_argument("--log-format", choices=("json", "plain"), help="log format (default json)")
    p.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), help="log level (default info)"
    )
    p.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace) -> Any:
    """The Settings object: the environment, overridden by the flags given."""
    overrides: dict[str, Any] = {}
    if args.namespace:
        overrides["namespaces"] = list(args.namespace)
    elif args.all_namespaces:
        overrides["namespaces"] = []
    for flag, field in (
        ("operator_namespace", "operator_namespace"),
        ("metrics_host", "metrics_host"),
        ("metrics_port", "metrics_port"),
        ("health_host", "health_host"),
        ("health_port", "health_port"),
        ("identity", "identity"),
        ("log_format", "log_format"),
        ("log_level", "log_level"),
        ("config_file", "config_file"),
        ("controller_instance", "controller_instance"),
    ):
        value = getattr(args, flag)
        if value is not None:
            overrides[field] = value
    if args.no_leader_election:
        overrides["leader_election"] = False
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(f"invalid settings: {exc}") from exc


def run(args: argparse.Namespace) -> int:
    cfg = settings_from_args(args)
    if args.kubeconfig:
        # Read by both kopf's login and our client when the process starts talking to the API.
        os.environ["KUBECONFIG"] = args.kubeconfig
    from variant_autoscaler.handlers import run_operator  # noqa: PLC0415  kopf: +0.4 s on `--help`

    run_operator(cfg)
    return 0
