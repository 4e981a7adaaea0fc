"""``variant-autoscaler simulate``: run autoscaling policies over a simulated cluster and compare them.

Examples::

    variant-autoscaler simulate --scenario diurnal
    variant-autoscaler simulate -f my-cluster.yaml --policies ours,wva,oracle -o report.json --plots out/
    variant-autoscaler simulate --dump-scenario scarce > my-cluster.yaml
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.config import load_scenario, parse_duration
from variant_autoscaler.sim.history import split_history
from variant_autoscaler.sim.plots import plot_report
from variant_autoscaler.sim.replica import max_model_len
from variant_autoscaler.sim.report import build_report, write_report
from variant_autoscaler.sim.runner import (
    AGENTS,
    EXPERIMENTS,
    POLICY_NAMES,
    PolicyOptions,
    make_policy_known,
    run_policies,
)
from variant_autoscaler.sim.scenarios import BUNDLED, bundled_text, load_bundled
from variant_autoscaler.sim.simulator import scenario_arrivals
from variant_autoscaler.sim.traffic import TraceTraffic, longer_than

if TYPE_CHECKING:
    from variant_autoscaler.sim.scenario import Scenario

__all__ = ["check_policies", "format_table", "register", "run", "scenario_notes"]


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "simulate",
        help="compare autoscaling policies on a simulated cluster (cost, SLO attainment)",
        description=(
            "Discrete-event simulation of a cluster (models, variants, accelerators with an inventory, "
            "replicas running the emulator's continuous-batching engine, start-up delays, failures) under "
            "each policy; prints cost and SLO attainment, writes a JSON report and PNG plots."
        ),
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("-f", "--file", type=Path, help="scenario file (YAML or JSON)")
    src.add_argument("--scenario", choices=BUNDLED, help="a bundled scenario")
    src.add_argument("--list-scenarios", action="store_true", help="list the bundled scenarios and exit")
    src.add_argument("--dump-scenario", choices=BUNDLED, metavar="NAME", help="print a bundled scenario file")
    p.add_argument(
        "--policies",
        default=",".join(POLICY_NAMES),
        help=(
            f"comma-separated policies to run (default: all of {', '.join(POLICY_NAMES)}); experiments: "
            "ours@<SLO scale> (e.g. ours@0.5), ours+trend; a trained agent: agent (the bundled one) or "
            "agent:PATH (docs/learning-env.md)"
        ),
    )
    p.add_argument("--duration", help="override the scenario's duration (seconds, or e.g. 30m, 2h)")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument(
        "--history",
        help=(
            "treat the traffic's first DURATION (e.g. 20m) as what Prometheus recorded before the "
            "operator started: ours' forecasters learn its per-minute arrival rates first (as "
            "FORECAST_HISTORY does), and every policy runs the rest from the initial replicas"
        ),
    )
    p.add_argument("-o", "--output", type=Path, help="write the JSON report here")
    p.add_argument("--plots", type=Path, metavar="DIR", help="write PNG plots into DIR (needs matplotlib)")
    p.add_argument("--no-timeseries", action="store_true", help="leave the time series out of the report")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format")
    p.add_argument("-j", "--jobs", type=int, default=1, help="run policies in this many processes")
    p.add_argument("--hpa-waiting-threshold", type=float, default=5.0, help="waiting requests per pod")
    p.add_argument("--hpa-kv-threshold", type=float, default=0.5, help="KV-cache usage per pod (0-1)")
    p.set_defaults(func=run)


def format_table(report: dict[str, Any]) -> str:
    """A plain-text summary of a report: one line per policy."""
    header = (
        f"{'policy':<12} {'cost':>9} {'GPU-h':>7} {'in SLO':>7} {'TTFT ok':>7} {'ITL ok':>7} "
        f"{'minor':>6} {'severe':>6} {'dropped':>7} {'TTFT p50/p99 ms':>17} {'ITL p50/p99 ms':>15} "
        f"{'actions':>7} {'sim-s/cpu-s':>11}"
    )
    lines = [f"scenario {report['scenario']['name']}: {report['scenario']['requests']} requests", header]

    def pct(x: float) -> str:
        return f"{100 * x:6.2f}%"

    def pair(a: float | None, b: float | None) -> str:
        fa = "-" if a is None else f"{a:.0f}"
        fb = "-" if b is None else f"{b:.0f}"
        return f"{fa}/{fb}"

    for name, s in report["policies"].items():
        lat = s["latency_ms"]
        tiers = s["tiers"]
        speed = s["sim"]["simulated_s_per_cpu_s"]
        lines.append(
            f"{name:<12} {s['cost']:>9.1f} {sum(s['gpu_hours'].values()):>7.1f} {pct(s['attainment']):>7} "
            f"{pct(s['ttft_attainment']):>7} {pct(s['itl_attainment']):>7} {pct(tiers['minor']):>6} "
            f"{pct(tiers['severe']):>6} {pct(tiers['dropped']):>7} "
            f"{pair(lat['ttft_p50'], lat['ttft_p99']):>17} {pair(lat['itl_p50'], lat['itl_p99']):>15} "
            f"{s['scaling_actions']['total']:>7} {speed if speed is not None else '-':>11}"
        )
    return "\n".join(lines)


def check_policies(names: list[str]) -> None:
    """:class:`ConfigError` naming every valid policy unless each of ``names`` is one."""
    if not names:
        raise ConfigError(f"--policies: name at least one of {', '.join((*POLICY_NAMES, *EXPERIMENTS))}")
    for name in names:
        if not make_policy_known(name):
            raise ConfigError(
                f"unknown policy {name!r}; valid: {', '.join(POLICY_NAMES)}; experiments: "
                f"{', '.join(EXPERIMENTS)} (e.g. ours@0.5); trained agents: {', '.join(AGENTS)}"
            )


def scenario_notes(scenario: Scenario) -> list[str]:
    """What a user should know before a run: requests no replica accepts (longer than ``maxModelLen`` or
    the KV cache: they will be dropped), and traces that end before the run does."""
    notes: list[str] = []
    arrivals = scenario_arrivals(scenario)
    for model in scenario.models:
        arr = arrivals[model.model_id]
        for profile in model.profiles:
            limit = max_model_len(profile)
            count = longer_than(arr, limit)
            if count:
                notes.append(
                    f"warning: model {model.model_id}: {count:,} of {len(arr):,} requests "
                    f"({100 * count / len(arr):.2g} %) need more than the {limit:,} tokens a "
                    f"{profile.accelerator} replica accepts (maxModelLen, capped by kvCacheTokens); they "
                    "will be dropped as rejected"
                )
        traffic = model.traffic
        if isinstance(traffic, TraceTraffic) and traffic.end_s < scenario.duration_s:
            notes.append(
                f"note: model {model.model_id}: its trace ends at {_span(traffic.end_s)} of the "
                f"{_span(scenario.duration_s)} run; the last {_span(scenario.duration_s - traffic.end_s)} "
                "have no requests from it (shorten --duration, or lower the trace's speedup)"
            )
    return notes


def _span(seconds: float) -> str:
    """A duration as people read it: ``45 s``, ``12.5 min``, ``2.25 h``."""
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def run(args: argparse.Namespace) -> int:
    if args.list_scenarios:
        for name in BUNDLED:
            scenario = load_bundled(name)
            print(f"{name:<14} {scenario.description}")
        return 0
    if args.dump_scenario:
        sys.stdout.write(bundled_text(args.dump_scenario))
        return 0
    if args.file is None and args.scenario is None:
        raise ConfigError("give a scenario: -f FILE or --scenario NAME (see --list-scenarios)")
    scenario = load_scenario(args.file) if args.file is not None else load_bundled(args.scenario)
    if args.duration is not None:
        try:
            scenario = replace(scenario, duration_s=parse_duration(args.duration))
        except ValueError as exc:
            raise ConfigError(f"--duration: {exc}") from None
    if args.seed is not None:
        scenario = replace(scenario, seed=args.seed)
    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    check_policies(names)
    for line in scenario_notes(scenario):
        print(line, file=sys.stderr)
    options = PolicyOptions(
        hpa_waiting_threshold=args.hpa_waiting_threshold, hpa_kv_threshold=args.hpa_kv_threshold
    )
    arrivals, history_s = None, 0.0
    if args.history is not None:
        try:
            wanted = parse_duration(args.history)
        except ValueError as exc:
            raise ConfigError(f"--history: {exc}") from None
        try:
            split = split_history(
                scenario, scenario_arrivals(scenario), wanted, step_s=options.ours_interval_s
            )
        except ConfigError as exc:
            raise ConfigError(f"--history: {exc}") from None
        scenario, arrivals, history_s = split.scenario, split.arrivals, split.history_s
        options = replace(options, forecast_history=split.history)
        print(
            f"note: the first {_span(split.history_s)} of the traffic are history (ours' forecasters "
            f"learn them); every policy runs the remaining {_span(scenario.duration_s)}",
            file=sys.stderr,
        )
    results = run_policies(scenario, names, jobs=args.jobs, options=options, arrivals=arrivals)
    report = build_report(results, with_timeseries=not args.no_timeseries or args.plots is not None)
    if history_s:
        report["scenario"]["history_s"] = history_s  # the run starts after it (its times from 0)
    if args.plots is not None:
        for path in plot_report(report, args.plots):
            print(f"wrote {path}", file=sys.stderr)
    if args.no_timeseries:
        for entry in report["policies"].values():
            entry.pop("timeseries", None)
    if args.output is not None:
        print(f"wrote {write_report(report, args.output)}", file=sys.stderr)
    if args.format == "json":
        slim = {
            **report,
            "policies": {
                name: {k: v for k, v in entry.items() if k != "timeseries"}
                for name, entry in report["policies"].items()
            },
        }
        print(json.dumps(slim, indent=2))
    else:
        print(format_table(report))
    return 0
