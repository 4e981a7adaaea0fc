"""Benchmark: autoscaling policies on the simulated cluster (decision quality, issues 8 and 24).

The four bundled scenarios (diurnal, flash crowd, scarce GPUs with two priorities, node failure), two
replays of the Azure LLM inference trace 2023 (conversation; CC BY 4.0), read from ``../shared/traces/``
beside the repository root, as recorded and at four times its rate, and one of the same dataset's code
trace (shipped in ``bench/traces/``), with fixed seeds; every policy over
the same requests: static peak provisioning, HPA on the waiting queue, HPA on KV-cache usage, the 2025
WVA, upstream WVA's later saturation analyzers V1 and V2, ours, and the checked oracle (the cheapest
allocation per interval that the simulation shows meeting the attainment targets, knowing the future
load and starting replicas at once). Then the ablation: ours with each of mean / tail sizing × no /
point / quantile forecast × the burst guard off / on. Writes one table per scenario, the targets table
with pass/fail as measured, the reasons for every missed target read from the same runs, and the
ablation.

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
from pathlib import Path
from typing import Any

from variant_autoscaler.api.config import (
    DEFAULT_AHEAD_STABILIZATION_SECONDS,
    DEFAULT_PATCH_STABILIZATION_SECONDS,
)
from variant_autoscaler.api.documents import load_document
from variant_autoscaler.core.forecast import DEFAULT_DOWN_QUANTILE, DEFAULT_QUANTILE
from variant_autoscaler.sim.cluster import scenario_arrivals
from variant_autoscaler.sim.config import parse_scenario
from variant_autoscaler.sim.observe import Action, Observation, PolicyContext
from variant_autoscaler.sim.policies import Policy
from variant_autoscaler.sim.report import build_report
from variant_autoscaler.sim.runner import POLICY_NAMES, PolicyOptions, run_policies
from variant_autoscaler.sim.scenario import Scenario
from variant_autoscaler.sim.scenarios import BUNDLED, load_bundled
from variant_autoscaler.sim.simulator import simulate
from variant_autoscaler.sim.traffic import FlashCrowd, GeneratedTraffic

HERE = Path(__file__).resolve().parent
# The shared folder beside the repository root; BENCH_TRACE names the trace elsewhere.
TRACE = Path(
    os.environ.get(
        "BENCH_TRACE", HERE.parent.parent / "shared" / "traces" / "azure-llm-inference-2023-conv.csv"
    )
)
#: Replays of the conversation trace: as recorded, and at four times its rate (finer replica granularity).
TRACE_SCENARIOS: dict[str, Path] = {
    name: HERE / "scenarios" / f"{name}.yaml" for name in ("azure-conv", "azure-conv-x4")
}
#: Replays of traces shipped in bench/traces/ (their scenario files name them).
SHIPPED_SCENARIOS: dict[str, Path] = {name: HERE / "scenarios" / f"{name}.yaml" for name in ("azure-code",)}
SCENARIOS: tuple[str, ...] = (*BUNDLED, *TRACE_SCENARIOS, *SHIPPED_SCENARIOS)
SCARCE: frozenset[str] = frozenset({"scarce"})  # scenarios where demand exceeds the inventory
POLICIES: tuple[str, ...] = (*POLICY_NAMES, "oracle-cheapest")
BASELINES: tuple[str, ...] = tuple(p for p in POLICY_NAMES if p not in ("ours", "oracle"))
ABLATION: tuple[str, ...] = tuple(
    f"ours:{sizing}/{forecast}/{guard}"
    for sizing in ("mean", "tail")
    for forecast in ("none", "point", "quantile")
    for guard in ("noguard", "guard")
)
OURS_ARM = "ours:tail/quantile/guard"  # what ours is: the arm is not run twice
#: Each baseline given more capacity by its own knob, to compare with ours at equal attainment: static
#: peak provisioning with headroom over the peak's rate, HPA thresholds per pod, the 2025 WVA planning
#: against tighter SLOs, the saturation thresholds lowered.
SWEEPS: Mapping[str, tuple[str, ...]] = {
    "static": ("static@1.25", "static@1.5", "static@2"),
    "hpa-waiting": ("hpa-waiting@1", "hpa-waiting@0.2"),
    "hpa-kv": ("hpa-kv@0.25", "hpa-kv@0.1"),
    # Below about 0.45 the scaled ITL target falls under the A100 profile's α + β: WVA then keeps the
    # current replicas whatever the load, which says nothing about capacity.
    "wva-2025": ("wva-2025@0.75", "wva-2025@0.5"),
    "wva-saturation-v1": ("wva-saturation-v1@0.4", "wva-saturation-v1@0.2"),
    "wva-saturation-v2": ("wva-saturation-v2@0.4", "wva-saturation-v2@0.2"),
}
TUNED: tuple[str, ...] = tuple(name for names in SWEEPS.values() for name in names)
ATTAIN_TARGET = 0.99
COST_TARGET = 1.15
SAVING = 0.20
#: Attainments this close count as equal when a baseline is compared with ours (0.05 points: a few
#: requests in the trace replays), so that a setting 0.01 points short of ours, and cheaper, is not
#: passed over for a dearer one.
EQUAL_WITHIN = 0.0005
JOBS = 2
# The first scale-down of a variant seen for the first time waits one stabilisation window (300 s), at
# the first plan (one interval in).
FIRST_WINDOW_S = 360.0
COMMAND = "python bench/run_all.py --only policies"


def _pct(x: float) -> str:
    return f"{100.0 * x:.2f} %"


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f}"


def _load(name: str) -> Scenario | None:
    shipped = SHIPPED_SCENARIOS.get(name)
    if shipped is not None:
        return parse_scenario(
            load_document(shipped.read_text(encoding="utf-8"), source=str(shipped)), base_dir=shipped.parent
        )
    path = TRACE_SCENARIOS.get(name)
    if path is not None:
        if not TRACE.exists():
            return None
        doc = load_document(path.read_text(encoding="utf-8"), source=str(path))
        for model in doc["models"]:
            model["traffic"]["trace"]["path"] = str(TRACE)
        return parse_scenario(doc, base_dir=path.parent)
    return load_bundled(name)


class _React(Policy):
    """The best any reactive policy can do against a step in the load or a lost node: ``replicas``
    asked for at ``at_s``, the instant the step begins or the node is lost (before any metric could
    show it), and held; the replicas take the model's start-up time like every policy's."""

    def __init__(self, at_s: float, replicas: Mapping[str, int]) -> None:
        self.name = "reactive-bound"
        self.interval_s = 15.0
        self.at_s = at_s
        self.replicas = dict(replicas)

    def start(self, ctx: PolicyContext) -> Mapping[str, int] | None:
        del ctx
        return None

    def decide(self, obs: Observation) -> Mapping[str, Action]:
        if obs.now < self.at_s:
            return {}
        return {n: Action(replicas=r) for n, r in self.replicas.items() if obs.variants[n].desired != r}


def reactive_bound(scenario: Scenario, report: Mapping[str, Any]) -> dict[str, Any] | None:
    """For a scenario with a flash crowd or a node failure: what a policy attains that asks for the
    oracle's largest replicas after it at the very instant the first such event begins
    (``_React``), or None without one. Before it, the scenario's initial replicas serve."""
    crowds = [
        m.traffic.rate.start_s
        for m in scenario.models
        if isinstance(m.traffic, GeneratedTraffic) and isinstance(m.traffic.rate, FlashCrowd)
    ]
    failures = [f.at_s for f in scenario.failures if f.slowdown is None]
    if not crowds and not failures:
        return None
    at_s = min(crowds + failures)
    event = "crowd" if crowds and min(crowds) == at_s else "failure"
    oracle = report["policies"]["oracle"]["timeseries"]
    after = [i for i, t in enumerate(oracle["sample_t_s"]) if t > at_s]
    desired = oracle["desired_replicas"]
    peak = {var: max((values[i] for i in after), default=0) for var, values in desired.items()}
    result = simulate(scenario, _React(at_s, peak), arrivals=scenario_arrivals(scenario))
    summary = build_report([result], with_timeseries=False)["policies"]["reactive-bound"]
    return {
        "event": event,
        "at_s": at_s,
        "replicas": float(sum(peak.values())),
        "by_variant": {var: int(n) for var, n in peak.items() if n},
        "attainment": float(summary["attainment"]),
        "startup_s": max(m.startup_s for m in scenario.models),
    }


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
    for policy in POLICIES:
        s = pol[policy]
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
    for which, what in (
        ("oracle", "the tail model's plan for the classes' own attainment, tightened where the run missed"),
        ("oracle-cheapest", "the cheapest run that met the targets over the whole run"),
    ):
        notes = pol[which].get("notes")
        if notes:
            tried = ", ".join(f"{t['planning_attainment']:g} % → {t['cost']:,.0f}" for t in notes["tried"])
            lines += [
                "",
                f"`{which}` planned every interval for {notes['planning_attainment']:g} % ({what}; "
                f"tried: {tried}).",
            ]
    models = report["scenario"]["models"]
    if len(models) > 1:
        lines += ["", "Per model (share of its requests within SLO / dropped):", ""]
        header = " | ".join(f"{m['model']} ({m['service_class']})" for m in models)
        lines += [f"| policy | {header} |", "|---|" + "---:|" * len(models)]
        for policy in POLICIES:
            s = pol[policy]
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
    """GPU-hours of ``policy``: held by pods still starting, and held in excess of the oracle's
    allocation (replica-hours, one accelerator unit per replica in these scenarios), in all and in the
    run's first stabilisation window and interval (``initial``)."""
    ts = report["policies"][policy]["timeseries"]
    ots = report["policies"]["oracle"]["timeseries"]
    t = ts["sample_t_s"]
    step = (t[1] - t[0]) / 3600.0 if len(t) > 1 else 0.0
    starting = 0.0
    excess = 0.0
    initial = 0.0
    for var, alloc in ts["allocated_replicas"].items():
        ready = ts["ready_replicas"][var]
        oracle_alloc = ots["allocated_replicas"][var]
        for i, a in enumerate(alloc):
            starting += max(0, a - ready[i]) * step
            excess += max(0, a - oracle_alloc[i]) * step
            if t[i] < FIRST_WINDOW_S:
                initial += max(0, a - oracle_alloc[i]) * step
    return {"starting": starting, "excess": excess, "initial": initial}


def _gpu_hours(summary: Mapping[str, Any]) -> str:
    return ", ".join(f"{acc} {hours:.1f} GPU-h" for acc, hours in summary["gpu_hours"].items())


def _first_priority(report: Mapping[str, Any], policy: str) -> tuple[str, float]:
    per = report["policies"][policy]["per_model"]
    first = min(per, key=lambda m: per[m]["priority"])
    return first, per[first]["attainment"]


def _judged(report: Mapping[str, Any], name: str, policy: str) -> float:
    """The attainment a target judges: of all requests, or in scarce scenarios of the first-priority
    class."""
    if name in SCARCE:
        return _first_priority(report, policy)[1]
    return float(report["policies"][policy]["attainment"])


def equal_attainment(report: Mapping[str, Any], name: str, base: str) -> tuple[str, bool]:
    """The baseline's run to compare ours with: the cheapest of its settings (its default and
    :data:`SWEEPS`) that attains at least what ours does, to within :data:`EQUAL_WITHIN` (True), else
    its best-attaining one (False)."""
    pol = report["policies"]
    ours = _judged(report, name, "ours")
    runs = [base, *SWEEPS.get(base, ())]
    reach = [r for r in runs if _judged(report, name, r) >= ours - EQUAL_WITHIN]
    if reach:
        return min(reach, key=lambda r: pol[r]["cost"]), True
    return max(runs, key=lambda r: (_judged(report, name, r), -pol[r]["cost"])), False


def _ablation_best(report: Mapping[str, Any]) -> str:
    pol = report["policies"]
    oracle_cost = pol["oracle"]["cost"]
    arms = [a for a in (*ABLATION, "ours") if a in pol and a != OURS_ARM]
    meeting = [a for a in arms if pol[a]["attainment"] >= ATTAIN_TARGET]
    if not meeting:
        top = max(arms, key=lambda a: pol[a]["attainment"])
        return (
            f"No arm of the ablation reaches 99 %; the best, `{top}`, attains {_pct(pol[top]['attainment'])} "
            f"at {pol[top]['cost'] / oracle_cost:.2f}× the oracle's cost."
        )
    cheapest = min(meeting, key=lambda a: pol[a]["cost"])
    return (
        f"The cheapest arm of the ablation that reaches 99 % is `{cheapest}`: "
        f"{_pct(pol[cheapest]['attainment'])} at {pol[cheapest]['cost'] / oracle_cost:.2f}× the oracle's "
        "cost."
    )


def _why_bound(bound: Mapping[str, Any]) -> str:
    """What the reactive bound says about the scenario's event."""
    got = float(bound["attainment"])
    start = f"{bound['startup_s'] / 60:.0f} min"
    if bound.get("event") == "failure":
        asked = ", ".join(f"{n} {var}" for var, n in sorted(bound.get("by_variant", {}).items()))
        what = (
            f"one that asks for the oracle's largest allocation after the failure ({asked}) at the very "
            f"second the node is lost, {bound['at_s'] / 60:.0f} min in, attains {_pct(got)}"
        )
        because = (
            f"because its new replicas take {start} to start, while the replicas that survived carry the "
            "whole load and a backlog builds that the new ones must then drain"
        )
    else:
        what = (
            f"one that asks for the oracle's peak ({bound['replicas']:.0f} replicas) at the very second "
            f"the crowd starts, {bound['at_s'] / 60:.0f} min in, before any metric could show it, attains "
            f"{_pct(got)}"
        )
        because = f"because its replicas take {start} to start and the crowd arrives faster"
    if got < 0.99:
        return f"No reactive policy can reach 99 % here: {what}, {because}."
    return f"A reactive policy can reach 99 % here: {what}."


def _why_attainment(name: str, report: Mapping[str, Any]) -> str:
    pol = report["policies"]
    ours = pol["ours"]
    parts = [
        f"ours serves {_pct(ours['attainment'])} of requests within SLO "
        f"(TTFT misses {_pct(1 - ours['ttft_attainment'])}, ITL misses {_pct(1 - ours['itl_attainment'])}, "
        f"dropped {_pct(ours['tiers']['dropped'])})."
    ]
    if name in SCARCE:
        first, got = _first_priority(report, "oracle")
        parts.append(
            f"The first-priority model {first} gets {_pct(got)} even from the oracle: at the peak the "
            "inventory holds fewer replicas than 99 % of its requests need."
        )
    bound = report.get("reactive_bound")
    if bound is not None:
        parts.append(_why_bound(bound))
    share = lag_share(report, "ours")
    if share is not None:
        parts.append(
            f"{_pct(share)} of ours' misses fell in minutes where it had fewer ready replicas than the "
            "oracle planned: capacity behind the load (start-up delay; a rise the forecast and the guard "
            "saw too late)."
        )
    parts.append(_ablation_best(report))
    return " ".join(parts)


#: Ours without the forecast, everything else alike: what the forecast costs is ours' cost less this arm's.
UNFORECAST_ARM = "ours:tail/none/guard"


def _why_cost(report: Mapping[str, Any]) -> str:
    pol = report["policies"]
    ours_gpu = sum(pol["ours"]["gpu_hours"].values())
    oracle_gpu = sum(pol["oracle"]["gpu_hours"].values())
    br = cost_breakdown(report, "ours")
    causes = (
        "the forecast's quantiles (a plan made now must hold until start-up + one interval, the oracle's "
        "only for the coming minute, whose load it knows; and it falls only below the forecast's "
        f"{DEFAULT_DOWN_QUANTILE:g} quantile) and the scale-down stabilisation "
        f"({DEFAULT_PATCH_STABILIZATION_SECONDS:.0f} s until that hysteresis holds, after the forecaster's "
        f"warm-up, then {DEFAULT_AHEAD_STABILIZATION_SECONDS:.0f} s)"
    )
    unforecast = pol.get(UNFORECAST_ARM)
    ours_cost, oracle_cost = pol["ours"]["cost"], pol["oracle"]["cost"]
    if unforecast is not None and unforecast["cost"] >= oracle_cost + 0.8 * (ours_cost - oracle_cost):
        # Without the forecast ours costs nearly as much: the forecast is not what costs here.
        causes = (
            f"the sizing, not the forecast: without the forecast (`{UNFORECAST_ARM}`) ours costs "
            f"{unforecast['cost'] / oracle_cost:.2f}× the oracle's. Each plan sizes replicas with the tail "
            "model on the burstiness and lengths measured over the last ten minutes (from counters over "
            "30 s and more) and keeps them one stabilisation window; the oracle sizes each minute on that "
            "minute's own arrivals"
        )
    return (
        f"ours holds {ours_gpu:.1f} GPU-h against the oracle's {oracle_gpu:.1f}: "
        f"{br['starting']:.1f} GPU-h in replicas still starting (the oracle starts instantly), and "
        f"{br['excess']:.1f} replica-hours above the oracle's allocation, minute by minute: {causes}"
        + (
            f", {br['initial']:.1f} of them in the first {FIRST_WINDOW_S / 60:.0f} minutes (the scenario's "
            "initial replicas, kept one stabilisation window before a first scale-down; the oracle "
            "starts at its plan)"
            if br["initial"] >= 0.25 * br["excess"]  # named only where it is a good part of the excess
            else ""
        )
        + f". {_ablation_best(report)}"
    )


def _cheaper(saving: float) -> str:
    """Ours' cost against a baseline's, in words: a saving of 0.2 is "20.0 % cheaper"."""
    return f"{100 * abs(saving):.1f} % {'cheaper' if saving >= 0 else 'dearer'}"


def targets(reports: Mapping[str, Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    rows = ["| scenario | target | measured | result |", "|---|---|---|---|"]
    whys: list[str] = []
    for name, report in reports.items():
        pol = report["policies"]
        ours = pol["ours"]
        if name in SCARCE:
            first, got = _first_priority(report, "ours")
            ok = got >= ATTAIN_TARGET
            rows.append(
                f"| {name} | ours: the first-priority class ≥ 99 % within SLO | {first}: {_pct(got)} "
                f"| {'pass' if ok else '**fail**'} |"
            )
        else:
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
        mine = _judged(report, name, "ours")
        for base in BASELINES:
            run, reached = equal_attainment(report, name, base)
            b = pol[run]
            theirs = _judged(report, name, run)
            saving = 1.0 - ours["cost"] / b["cost"] if b["cost"] > 0 else 0.0
            if reached:
                ok = saving >= SAVING
                measured = f"`{run}` attains {_pct(theirs)} at {b['cost']:,.0f}: ours {_cheaper(saving)}"
            else:
                ok = saving >= 0.0
                measured = (
                    f"no setting reaches ours' {_pct(mine)}; the best, `{run}`, {_pct(theirs)} at "
                    f"{b['cost']:,.0f}: ours {_cheaper(saving)}"
                )
            rows.append(
                f"| {name} | ours ≥ 20 % cheaper than {base} at equal attainment (or more at equal cost) "
                f"| {measured} | {'pass' if ok else '**fail**'} |"
            )
            if not ok:
                why = (
                    f"`{run}` costs {b['cost']:,.0f} for {_pct(theirs)} ({_gpu_hours(b)}); ours "
                    f"{ours['cost']:,.0f} for {_pct(mine)} ({_gpu_hours(ours)})."
                )
                if reached:
                    why += (
                        f" At equal attainment ours saves only {100 * saving:.1f} % of the cost."
                        if saving >= 0
                        else f" At equal attainment ours costs {100 * -saving:.1f} % more."
                    )
                    why += _bound_saving(report, b["cost"])
                else:
                    why += (
                        f" None of {base}'s settings tried reaches ours' attainment; ours attains more at "
                        f"{ours['cost'] / b['cost']:.2f}× the cost of its best."
                    )
                whys.append(f"- **{name}, vs {base}:** {why}")
    return rows, whys


def _bound_saving(report: Mapping[str, Any], cost: float) -> str:
    """Where even the cheapest hindsight bound saves less than the target against a baseline's
    ``cost``, a sentence that says so (the target then asks for less than the bound costs), else
    nothing."""
    pol = report["policies"]
    bounds = [b for b in ("oracle", "oracle-cheapest") if b in pol]
    if not bounds or cost <= 0:
        return ""
    best = min(bounds, key=lambda b: pol[b]["cost"])
    saving = 1.0 - pol[best]["cost"] / cost
    if saving >= SAVING:
        return ""
    how = (
        f"only {100 * saving:.1f} % less"
        if saving > 0
        else f"{-100 * saving:.1f} % more (it meets the target)"
    )
    return (
        f" Even `{best}`, the hindsight bound (the load known ahead, replicas ready at once), costs "
        f"{pol[best]['cost']:,.0f}: {how}."
    )


def sweep_table(name: str, report: Mapping[str, Any]) -> list[str]:
    pol = report["policies"]
    cells = []
    for base in BASELINES:
        runs = [base, *SWEEPS.get(base, ())]
        cells.append(
            f"| {base} | "
            + "; ".join(f"`{r}` {_pct(_judged(report, name, r))} at {pol[r]['cost']:,.0f}" for r in runs)
            + " |"
        )
    judged = "the first-priority class's share" if name in SCARCE else "the share"
    return [
        f"Baselines given more capacity by their own knob ({judged} within SLO at its cost; ours: "
        f"{_pct(_judged(report, name, 'ours'))} at {pol['ours']['cost']:,.0f}):",
        "",
        "| baseline | settings |",
        "|---|---|",
        *cells,
        "",
    ]


def ablation_table(reports: Mapping[str, Mapping[str, Any]]) -> list[str]:
    names = list(reports)
    lines = [
        "| sizing / forecast / guard | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for arm in ABLATION:
        cells = []
        for name in names:
            pol = reports[name]["policies"]
            s = pol["ours"] if arm == OURS_ARM else pol[arm]
            if name in SCARCE:
                _, att = _first_priority(reports[name], "ours" if arm == OURS_ARM else arm)
            else:
                att = s["attainment"]
            cells.append(f"{_pct(att)} at {s['cost'] / pol['oracle']['cost']:.2f}×")
        label = arm.removeprefix("ours:").replace("/", " / ").replace("noguard", "off").replace("guard", "on")
        lines.append(f"| {label}{' (ours)' if arm == OURS_ARM else ''} | " + " | ".join(cells) + " |")
    return lines


def run(jobs: int | None = None, scenarios: Sequence[str] = SCENARIOS) -> str:
    jobs = jobs or int(os.environ.get("BENCH_JOBS", JOBS))
    reports: dict[str, dict[str, Any]] = {}
    sections: list[str] = []
    skipped: list[str] = []
    total_sim = 0.0
    total_cpu = 0.0
    total_requests = 0
    started = time.perf_counter()
    speeds: dict[str, float] = {}
    for name in scenarios:
        scenario = _load(name)
        if scenario is None:
            skipped.append(name)
            print(f"   {name}: skipped, {TRACE} not found", file=sys.stderr, flush=True)
            continue
        t0 = time.perf_counter()
        names = [*POLICIES, *(a for a in ABLATION if a != OURS_ARM), *TUNED]
        options = PolicyOptions(oracle_first_priority=name in SCARCE)
        results = run_policies(scenario, names, jobs=jobs, options=options)
        print(f"   {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        report = build_report(results)
        for result in results:  # the checked oracles' planning attainment and the runs they tried
            if "notes" in result.series:
                report["policies"][result.policy]["notes"] = result.series["notes"]
        bound = reactive_bound(scenario, report)
        if bound is not None:
            report["reactive_bound"] = bound
        reports[name] = report
        total_sim += scenario.duration_s * len(results)
        total_cpu += sum(r.cpu_s for r in results)
        total_requests += len(results[0].arrival_s) * len(results)
        speeds[name] = sum(scenario.duration_s for _ in results) / sum(r.cpu_s for r in results)
        sections += _scenario_table(name, report)
        sections += sweep_table(name, report)
    wall = time.perf_counter() - started
    rows, whys = targets(reports)
    speed = ", ".join(f"{n} {v:,.0f}" for n, v in speeds.items())
    out = [
        "## Policies: cost and SLO attainment on a simulated cluster",
        "",
        "Each scenario is simulated once per policy over the same requests (fixed seed): replicas run the "
        "emulator's continuous-batching engine, pods need free accelerators and take the model's start-up "
        "time to become ready, scale-down drains. Every model's class states its SLO as users do: 99 % of "
        "requests with their first token within the TTFT target and a mean ITL within the ITL target. A "
        "request *meets* its SLO when both hold; *minor* within 1.5×, *severe* beyond, *dropped* when the "
        "client timed out (120 s without a token) or its pod died. Cost = accelerator units × unit cost × "
        "hours held (from scheduling to release). Policies: `static` (the oracle's planner at each model's "
        "busiest 5 minutes, all run), `hpa-waiting` / `hpa-kv` (KEDA + HPA on `vllm:num_requests_waiting`, "
        "5 per pod / `vllm:kv_cache_usage_perc`, 0.5 per pod; HPA's tolerance, 300 s scale-down "
        "stabilisation and rate limits), `wva-2025` (wva.md: unlimited, keep accelerator, 60 s, completion "
        "rate of the model, sized on means), `wva-saturation-v1` / `-v2` (upstream WVA's later defaults: "
        "the saturation analyzers, V1 every 60 s, V2 every 15 s, applied as WVA's sample HPA does), `ours` "
        "(the operator in patch mode: limited mode over the inventory, the load shared across a model's "
        "variants, tail sizing on the burstiness and lengths read over the last 10 minutes, the demand "
        f"forecast over start-up + one interval, rising with its {DEFAULT_QUANTILE:g} quantile and falling "
        f"only below its {DEFAULT_DOWN_QUANTILE:g} quantile, the burst guard every "
        "scrape, starting replicas counted as supply and no variant scaled down while the replicas that "
        "replace it start, the operator's replica policy), `oracle` (each minute, the fewest "
        "replicas the tail model says keep 99 % of that minute's requests within SLO, knowing the load "
        "that will arrive in it, replicas ready at once; checked by simulation, its planning attainment "
        "tightened where the run missed the target) and `oracle-cheapest` (the same, the planning "
        "attainment loosened while the whole run still meets the target: a tighter bound that lets "
        "single minutes fall below it). Cost ratios are against `oracle`. Below each scenario, each "
        "baseline given more capacity by its own knob, for the comparisons at equal attainment. See "
        "docs/simulator.md and docs/tail-slo.md.",
        "",
        f"Command: `{COMMAND}` ({jobs} worker processes, on a machine shared with other jobs: wall times "
        f"are inflated by their load). Whole benchmark: {wall:.0f} s wall, {total_cpu:.0f} s CPU for "
        f"{total_requests:,} simulated requests; {total_sim / total_cpu:,.0f} simulated seconds per CPU "
        f"second overall (per scenario: {speed}).",
        "",
    ]
    if skipped:
        out += [
            f"Not run: {', '.join(skipped)} (the trace {TRACE.name} was not found at ../shared/traces/).",
            "",
        ]
    out += [
        *sections,
        "### Targets for ours",
        "",
        "Against each baseline, ours is compared with the cheapest of the baseline's settings that "
        f"attains at least what ours does ({100 * EQUAL_WITHIN:g} points short counts as equal), and "
        "must cost at least 20 % less; where no setting attains that much, with its best-attaining "
        "setting, which ours must not cost more than.",
        "",
        *rows,
        "",
    ]
    if whys:
        out += ["Where ours falls short, and why (from the runs above):", "", *whys, ""]
    out += [
        "### Ablation: what each part brings",
        "",
        "Ours with one choice per part, over the same requests: *sizing* `mean` (the classes' TTFT and ITL "
        "read as means, WVA's meaning) or `tail` (99 % of requests, the tail model on the measured "
        "workload); *forecast* `none` (the observed demand), `point` (at least Holt's forecast of the "
        f"horizon's peak) or `quantile` (at least the rate planned with its {DEFAULT_QUANTILE:g} quantile up "
        f"and {DEFAULT_DOWN_QUANTILE:g} down, and the shorter scale-down window once that holds); *guard* "
        "off or on. "
        "Each cell: the share within SLO (scarce: of the first-priority class) and the cost against the "
        "oracle's.",
        "",
        *ablation_table(reports),
        "",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument(
        "--scenarios",
        type=lambda text: tuple(text.split(",")),
        default=SCENARIOS,
        help=f"comma-separated, a subset of {','.join(SCENARIOS)} (default: all; a subset is a preview, "
        "not what docs/benchmarks.md records)",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenarios {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    print(run(args.jobs, args.scenarios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
