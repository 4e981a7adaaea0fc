"""Benchmark: autoscaling policies on the simulated cluster (decision quality, issue 8).

Four bundled scenarios (diurnal, flash crowd, scarce GPUs with two priorities, node failure), fixed
seeds, every policy (static peak provisioning, HPA on the waiting queue, HPA on KV-cache usage, WVA,
ours, the hindsight oracle) and two experiments (``ours@0.5``: ours planning against half the SLOs;
``ours+trend``: ours adding the demand's recent rise projected over start-up plus one interval),
all over the same requests. Writes one table per scenario, the targets table with pass/fail as
measured, and, for every missed target, the reason read from the same runs.

Run: ``python bench/policies.py`` (this section only, to stdout) or
``python bench/run_all.py --only policies`` (rewrites docs/benchmarks.md). ``--jobs`` sets the worker
processes (default 2). JSON reports and plots: ``variant-autoscaler simulate --scenario NAME``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from variant_autoscaler.sim.report import build_report
from variant_autoscaler.sim.runner import POLICY_NAMES, run_policies
from variant_autoscaler.sim.scenarios import BUNDLED, load_bundled

SCENARIOS: tuple[str, ...] = BUNDLED
SCARCE: frozenset[str] = frozenset({"scarce"})  # scenarios where demand exceeds the inventory
EXPERIMENT = "ours@0.5"
TREND = "ours+trend"
POLICIES: tuple[str, ...] = (*POLICY_NAMES, EXPERIMENT, TREND)
HPA = ("hpa-waiting", "hpa-kv")
ATTAIN_TARGET = 0.99
COST_TARGET = 1.15
HPA_SAVING = 0.20
JOBS = 2
COMMAND = "python bench/run_all.py --only policies"


def _pct(x: float) -> str:
    return f"{100.0 * x:.2f} %"


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f}"


def _scenario_table(name: str, report: Mapping[str, Any]) -> list[str]:
    pol = report["policies"]
    oracle_cost = pol["oracle"]["cost"] if "oracle" in pol else None
    lines = [
        f"### {name}",
        "",
        report["scenario"]["description"],
        "",
        f"{report['scenario']['requests']:,} requests over {report['scenario']['duration_s'] / 3600:.1f} h "
        f"(seed {report['scenario']['seed']}).",
        "",
        "| policy | cost | × oracle | GPU-h | in SLO | TTFT ok | ITL ok | minor | severe | dropped "
        "| TTFT p50 / p99 (ms) | ITL p50 / p99 (ms) | scaling actions | simulated s per CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for policy, s in pol.items():
        ratio = f"{s['cost'] / oracle_cost:.2f}" if oracle_cost else "–"
        lat = s["latency_ms"]
        tiers = s["tiers"]
        lines.append(
            f"| {policy} | {s['cost']:,.0f} | {ratio} | {sum(s['gpu_hours'].values()):.1f} "
            f"| {_pct(s['attainment'])} | {_pct(s['ttft_attainment'])} | {_pct(s['itl_attainment'])} "
            f"| {_pct(tiers['minor'])} | {_pct(tiers['severe'])} | {_pct(tiers['dropped'])} "
            f"| {_ms(lat['ttft_p50'])} / {_ms(lat['ttft_p99'])} "
            f"| {_ms(lat['itl_p50'])} / {_ms(lat['itl_p99'])} "
            f"| {s['scaling_actions']['total']} | {s['sim']['simulated_s_per_cpu_s']:,.0f} |"
        )
    models = report["scenario"]["models"]
    if len(models) > 1:
        lines += ["", "Per model (share of its requests within SLO / dropped):", ""]
        header = " | ".join(f"{m['model']} ({m['service_class']})" for m in models)
        lines += [f"| policy | {header} |", "|---|" + "---:|" * len(models)]
        for policy, s in pol.items():
            cells = " | ".join(
                f"{_pct(s['per_model'][m['model']]['attainment'])} / "
                f"{_pct(s['per_model'][m['model']]['tiers']['dropped'])}"
                for m in models
            )
            lines.append(f"| {policy} | {cells} |")
    lines.append("")
    return lines


# ------------------------------------------------------------------------------------------ diagnosis


def _series_by_model(report: Mapping[str, Any], policy: str, key: str) -> dict[str, list[float]]:
    """A per-variant replica series summed per model."""
    ts = report["policies"][policy]["timeseries"]
    model_of = {v["name"]: v["model"] for v in report["scenario"]["variants"]}
    out: dict[str, list[float]] = {}
    for var, values in ts[key].items():
        acc = out.setdefault(model_of[var], [0.0] * len(values))
        for i, v in enumerate(values):
            acc[i] += v
    return out


def lag_share(report: Mapping[str, Any], policy: str) -> float | None:
    """Share of ``policy``'s SLO misses that fell in sample intervals where it had fewer ready replicas
    than the oracle planned for that interval (its capacity behind the load)."""
    pol = report["policies"]
    if "oracle" not in pol:
        return None
    ours_ready = _series_by_model(report, policy, "ready_replicas")
    oracle_desired = _series_by_model(report, "oracle", "desired_replicas")
    ts = pol[policy]["timeseries"]
    misses_total = 0.0
    misses_behind = 0.0
    for model, attain in ts["attainment"].items():
        load = ts["arrival_rps"][model]
        step = report["scenario"]["duration_s"] / max(1, len(load))
        ready = ours_ready[model]
        # Samples are taken at the start of each interval, before that instant's decision: sample i
        # shows what was ready when interval i began, sample i+1 the oracle's plan for interval i.
        planned = oracle_desired[model]
        for i, a in enumerate(attain):
            if a is None or i + 1 >= len(planned) or i >= len(ready):
                continue
            misses = (1.0 - a) * load[i] * step
            misses_total += misses
            if ready[i] < planned[i + 1]:
                misses_behind += misses
    return misses_behind / misses_total if misses_total > 0 else None


def cost_breakdown(report: Mapping[str, Any], policy: str) -> dict[str, float]:
    """GPU-hours of ``policy``: total, held by pods still starting, and held in excess of the oracle's
    allocation (replica-hours, one accelerator unit per replica in the bundled scenarios)."""
    ts = report["policies"][policy]["timeseries"]
    ots = report["policies"]["oracle"]["timeseries"]
    t = ts["sample_t_s"]
    step = (t[1] - t[0]) / 3600.0 if len(t) > 1 else 0.0
    starting = 0.0
    excess = 0.0
    for var, alloc in ts["allocated_replicas"].items():
        ready = ts["ready_replicas"][var]
        oracle_alloc = ots["allocated_replicas"][var]
        for i, a in enumerate(alloc):
            starting += max(0, a - ready[i]) * step
            excess += max(0, a - oracle_alloc[i]) * step
    return {"starting": starting, "excess": excess}


def _gpu_hours(summary: Mapping[str, Any]) -> str:
    return ", ".join(f"{acc} {hours:.1f} GPU-h" for acc, hours in summary["gpu_hours"].items())


def _why_attainment(name: str, report: Mapping[str, Any]) -> str:
    pol = report["policies"]
    ours = pol["ours"]
    parts = [
        f"ours serves {_pct(ours['attainment'])} of requests within SLO "
        f"(TTFT misses {_pct(1 - ours['ttft_attainment'])}, ITL misses {_pct(1 - ours['itl_attainment'])}, "
        f"dropped {_pct(ours['tiers']['dropped'])})."
    ]
    if "oracle" in pol:
        oracle = pol["oracle"]
        parts.append(
            "The oracle, which knows each minute's load in advance and starts replicas instantly, "
            f"reaches only {_pct(oracle['attainment'])} with the same planner: the planner sizes replicas "
            "so that the *mean* TTFT and ITL of a replica equal the SLO (WVA's model), so at the planned "
            "load a large share of individual requests lands above it."
        )
    share = lag_share(report, "ours")
    if share is not None:
        parts.append(
            f"{_pct(share)} of ours' misses fell in minutes where it had fewer ready replicas than the "
            "oracle planned: capacity behind the load (60 s decisions on a 1-minute rate, start-up delay, "
            "no scale-up while replicas are starting)."
        )
    oracle_cost = pol["oracle"]["cost"] if "oracle" in pol else None
    for exp_name, what in (
        (EXPERIMENT, "Planning against half the SLOs"),
        (TREND, "Projecting the demand's rise"),
    ):
        if exp_name in pol:
            exp = pol[exp_name]
            cost = f" at {exp['cost'] / oracle_cost:.2f}× the oracle's cost" if oracle_cost else ""
            parts.append(
                f"{what} ({exp_name}) gives {_pct(exp['attainment'])}{cost}, "
                f"{_pct(exp['tiers']['dropped'])} dropped."
            )
    return " ".join(parts)


def _why_cost(report: Mapping[str, Any]) -> str:
    pol = report["policies"]
    ours_gpu = sum(pol["ours"]["gpu_hours"].values())
    oracle_gpu = sum(pol["oracle"]["gpu_hours"].values())
    br = cost_breakdown(report, "ours")
    return (
        f"ours holds {ours_gpu:.1f} GPU-h against the oracle's {oracle_gpu:.1f}: "
        f"{br['starting']:.1f} GPU-h in replicas still starting (the oracle starts instantly), and "
        f"{br['excess']:.1f} replica-hours above the oracle's allocation, minute by minute (capacity kept "
        "after the load falls: the 300 s scale-down stabilisation and the lag of a 1-minute rate)."
    )


def targets(reports: Mapping[str, Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    rows = [
        "| scenario | target | measured | result |",
        "|---|---|---|---|",
    ]
    whys: list[str] = []
    for name, report in reports.items():
        pol = report["policies"]
        ours = pol["ours"]
        if name not in SCARCE:
            ok = ours["attainment"] >= ATTAIN_TARGET
            rows.append(
                f"| {name} | ours ≥ 99 % of requests within SLO | {_pct(ours['attainment'])} "
                f"| {'pass' if ok else '**fail**'} |"
            )
            if not ok:
                whys.append(f"- **{name}, attainment:** {_why_attainment(name, report)}")
        ratio = ours["cost"] / pol["oracle"]["cost"]
        ok = ratio <= COST_TARGET
        rows.append(
            f"| {name} | ours cost ≤ 1.15 × oracle | {ratio:.2f} × | {'pass' if ok else '**fail**'} |"
        )
        if not ok:
            whys.append(f"- **{name}, cost:** {_why_cost(report)}")
        for hpa in HPA:
            h = pol[hpa]
            saving = 1.0 - ours["cost"] / h["cost"]
            better = ours["attainment"] >= h["attainment"]
            ok = saving >= HPA_SAVING and better
            rows.append(
                f"| {name} | ours ≥ 20 % cheaper than {hpa} at equal or better attainment "
                f"| {100 * saving:+.1f} % cost saving, attainment "
                f"{100 * (ours['attainment'] - h['attainment']):+.2f} pp "
                f"| {'pass' if ok else '**fail**'} |"
            )
            if not ok:
                why = (
                    f"{hpa} costs {h['cost']:,.0f} for {_pct(h['attainment'])} within SLO "
                    f"({_gpu_hours(h)}); ours {ours['cost']:,.0f} for {_pct(ours['attainment'])} "
                    f"({_gpu_hours(ours)})."
                )
                if better:
                    why += f" Ours has the better attainment but saves only {100 * saving:.1f} % of the cost."
                else:
                    why += f" {hpa} has the better attainment, at {h['cost'] / ours['cost']:.2f}× ours' cost."
                whys.append(f"- **{name}, vs {hpa}:** {why}")
        if name in SCARCE:
            w = pol["wva"]
            ok = ours["attainment"] > w["attainment"]
            per = ours["per_model"]
            first = min(per, key=lambda m: per[m]["priority"])
            rows.append(
                f"| {name} | ours attainment better than WVA under scarcity | {_pct(ours['attainment'])} vs "
                f"{_pct(w['attainment'])} (priority {per[first]['priority']}: "
                f"{_pct(per[first]['attainment'])} vs {_pct(w['per_model'][first]['attainment'])}) "
                f"| {'pass' if ok else '**fail**'} |"
            )
            if not ok:
                whys.append(
                    f"- **{name}, vs WVA:** ours {_pct(ours['attainment'])}, WVA {_pct(w['attainment'])}."
                )
    return rows, whys


def run(jobs: int | None = None) -> str:
    jobs = jobs or int(os.environ.get("BENCH_JOBS", JOBS))
    reports: dict[str, dict[str, Any]] = {}
    sections: list[str] = []
    total_sim = 0.0
    total_cpu = 0.0
    total_requests = 0
    started = time.perf_counter()
    for name in SCENARIOS:
        scenario = load_bundled(name)
        t0 = time.perf_counter()
        results = run_policies(scenario, POLICIES, jobs=jobs)
        print(f"   {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        report = build_report(results)
        reports[name] = report
        total_sim += scenario.duration_s * len(results)
        total_cpu += sum(r.cpu_s for r in results)
        total_requests += len(results[0].arrival_s) * len(results)
        sections += _scenario_table(name, report)
    wall = time.perf_counter() - started
    rows, whys = targets(reports)
    out = [
        "## Policies: cost and SLO attainment on a simulated cluster",
        "",
        "Each bundled scenario is simulated once per policy over the same requests (fixed seed): replicas "
        "run the emulator's continuous-batching engine, pods need free accelerators and take the model's "
        "start-up time to become ready, scale-down drains. A request *meets* its SLO when its TTFT and its "
        "mean ITL are both within the model's service-class SLO; *minor* within 1.5×, *severe* beyond, "
        "*dropped* when the client timed out (120 s without a token) or its pod died. Cost = accelerator "
        "units × unit cost × hours held (from scheduling to release). Policies: `static` (the oracle's "
        "planner at each model's busiest 5 minutes, all run), `hpa-waiting` / `hpa-kv` (KEDA + HPA on "
        "`vllm:num_requests_waiting`, 5 per pod / `vllm:kv_cache_usage_perc`, 0.5 per pod; HPA's "
        "tolerance, 300 s scale-down stabilisation and rate limits), `wva` (wva.md: unlimited, keep "
        "accelerator, 60 s, completion rate of the model), `ours` (limited mode over the inventory, "
        "demand with the waiting queue, load shared across a model's variants, the operator's replica "
        "policy), `oracle` (each minute planned for the load that will arrive in it, replicas ready at "
        f"once), and two experiments: `{EXPERIMENT}` (ours planning against half the SLOs) and `{TREND}` "
        "(ours adding the demand's rise over the last 5 minutes, projected over the start-up time plus "
        "one interval). See "
        "docs/simulator.md.",
        "",
        f"Command: `{COMMAND}` ({jobs} worker processes). Whole benchmark: {wall:.0f} s wall, "
        f"{total_cpu:.0f} s CPU for {total_requests:,} simulated requests; "
        f"{total_sim / total_cpu:,.0f} simulated seconds per CPU second overall.",
        "",
        *sections,
        "### Targets for ours",
        "",
        *rows,
        "",
    ]
    if whys:
        out += ["Where ours falls short, and why (from the runs above):", "", *whys, ""]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=JOBS)
    args = parser.parse_args(argv)
    print(run(args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
