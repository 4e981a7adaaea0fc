"""Benchmark: the learning environment (issue 21): the trained agent against the hand-made policies on
held-out episodes, and the environment's speed.

Held-out episodes: for each bundled cluster (diurnal, flash-crowd, scarce, node-failure), episodes drawn
by the environment from seeds 1000, 1001, … (training draws its episodes from another random stream:
``python -m variant_autoscaler.sim.train --seed 0``), with the training distribution of traffic shapes
(generated and trace windows from the trace's first 40 minutes) and faults (node lost, node slowed); and
one episode per cluster replaying the trace's last 20 minutes, which training never saw. Every policy
(static, hpa-waiting, hpa-kv, wva, ours, oracle, and the trained agent ``agent``) runs each episode
through ``simulate``'s runner over the same requests; the table reports each policy as it comes out.

Run: ``python bench/learning.py`` (this section only, to stdout) or
``python bench/run_all.py --only learning`` (rewrites docs/benchmarks.md). The trace is read from
``../shared/traces/azure-llm-inference-2023-conv.csv`` beside the repository (``--trace`` to change; without
it, generated traffic only). ``--episodes`` sets the held-out episodes per cluster (default 6);
``--no-bundled`` leaves out the bundled scenarios as they are (the policies section's, hours long).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from variant_autoscaler.sim.agent import PARAMETERS, Controller, load_agent
from variant_autoscaler.sim.report import TIER_MEETS, classify, summarize
from variant_autoscaler.sim.runner import POLICY_NAMES, run_policies
from variant_autoscaler.sim.scenario import Scenario
from variant_autoscaler.sim.scenarios import BUNDLED, load_bundled
from variant_autoscaler.sim.scoring import RewardConfig, episode_return, recovery_times
from variant_autoscaler.sim.train import TEMPLATES, make_env

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared" / "traces" / "azure-llm-inference-2023-conv.csv"
HELD_OUT_TRACE_S = (2400.0, 3600.0)
POLICIES: tuple[str, ...] = (*POLICY_NAMES, "agent")
EARLY_S = 300.0  # requests arriving before this are the episode's first transient (see _table)
SEEDS_FROM = 1000
EPISODES = 6
JOBS = 2
COMMAND = "python bench/run_all.py --only learning"


def _episodes(trace: str | None, per_cluster: int) -> list[tuple[str, str, Scenario]]:
    """(kind, cluster, scenario) of every held-out episode."""
    out: list[tuple[str, str, Scenario]] = []
    for template in TEMPLATES:
        env = make_env(template, trace_path=trace, trace_range_s=(0.0, 2400.0) if trace else None)
        for k in range(per_cluster):
            env.reset(seed=SEEDS_FROM + k)
            out.append(("seeds", template, env.unwrapped.scenario))
        if trace is not None:
            held = make_env(
                template,
                trace_path=trace,
                trace_range_s=HELD_OUT_TRACE_S,
                duration_s=(1200.0, 1200.0),
                shapes={"trace": 1.0},
                rate_scale=(1.0, 1.0),
            )
            held.reset(seed=SEEDS_FROM)
            out.append(("trace", template, held.unwrapped.scenario))
    return out


def _evaluate(episodes: Sequence[tuple[str, str, Scenario]], jobs: int) -> list[dict[str, Any]]:
    reward = RewardConfig()
    rows: list[dict[str, Any]] = []
    for kind, cluster, scenario in episodes:
        t0 = time.perf_counter()
        results = run_policies(scenario, POLICIES, jobs=jobs)
        print(
            f"   {cluster} {kind} {scenario.seed}: {time.perf_counter() - t0:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        for r in results:
            s = summarize(r)
            meets = classify(r) == TIER_MEETS
            early = np.asarray(r.arrival_s) < EARLY_S
            rows.append(
                {
                    "kind": kind,
                    "cluster": cluster,
                    "policy": r.policy,
                    "requests": s["requests"],
                    "return": episode_return(r, reward),
                    "attainment": s["attainment"],
                    "dropped": s["tiers"]["dropped"],
                    "cost": s["cost"],
                    "recovery": recovery_times(r),
                    "faults": len(scenario.failures),
                    "cpu_s": r.cpu_s,
                    "early": (int(meets[early].sum()), int(early.sum())),
                    "late": (int(meets[~early].sum()), int((~early).sum())),
                }
            )
    return rows


def _table(rows: Sequence[Mapping[str, Any]], title: str) -> list[str]:
    by: dict[str, list[Mapping[str, Any]]] = {p: [r for r in rows if r["policy"] == p] for p in POLICIES}
    oracle_cost = sum(r["cost"] for r in by["oracle"]) or 1.0
    n = len(by["agent"])
    wins: dict[str, int] = dict.fromkeys(POLICIES, 0)
    for i in range(n):
        best = max(POLICIES, key=lambda p: by[p][i]["return"] / max(1, by[p][i]["requests"]))
        wins[best] += 1
    lines = [
        f"#### {title}",
        "",
        "| policy | return per request | in SLO | in SLO, first 5 min / after | dropped | cost (× oracle) | "
        "best return in | recovered from faults | median recovery |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def pooled(rs: Sequence[Mapping[str, Any]], part: str) -> str:
        met, total = (sum(r[part][k] for r in rs) for k in (0, 1))
        return f"{100 * met / total:.1f} %" if total else "–"

    for p in POLICIES:
        rs = by[p]
        per_req = statistics.fmean(r["return"] / max(1, r["requests"]) for r in rs)
        attain = statistics.fmean(r["attainment"] for r in rs)
        dropped = statistics.fmean(r["dropped"] for r in rs)
        cost = sum(r["cost"] for r in rs)
        recs = [x for r in rs for x in r["recovery"]]
        got = [x for x in recs if x is not None]
        median = f"{statistics.median(got):.0f} s" if got else "–"
        lines.append(
            f"| {p} | {per_req:.4f} | {100 * attain:.2f} % | {pooled(rs, 'early')} / {pooled(rs, 'late')} "
            f"| {100 * dropped:.2f} % | {cost:,.0f} "
            f"({cost / oracle_cost:.2f}) | {wins[p]} of {n} | {len(got)} of {len(recs)} | {median} |"
        )
    lines += ["", "Return per request by cluster (mean over its episodes):", ""]
    clusters = [c for c in TEMPLATES if any(r["cluster"] == c for r in rows)]
    lines += ["| policy | " + " | ".join(clusters) + " |", "|---|" + "---:|" * len(clusters)]
    for p in POLICIES:
        cells = []
        for c in clusters:
            sel = [r for r in by[p] if r["cluster"] == c]
            cells.append(f"{statistics.fmean(r['return'] / max(1, r['requests']) for r in sel):.4f}")
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _bundled(jobs: int) -> list[str]:
    """Every policy and the agent on the bundled scenarios as they are (the policies section's runs)."""
    reward = RewardConfig()
    lines = [
        "| scenario | policy | return per request | in SLO | dropped | cost (× oracle) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name in BUNDLED:
        t0 = time.perf_counter()
        results = run_policies(load_bundled(name), POLICIES, jobs=jobs)
        print(f"   bundled {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        oracle = next(r for r in results if r.policy == "oracle")
        oracle_cost = sum(oracle.cost.values()) or 1.0
        for r in results:
            s = summarize(r)
            lines.append(
                f"| {name} | {r.policy} | {episode_return(r, reward) / max(1, s['requests']):.4f} "
                f"| {100 * s['attainment']:.2f} % | {100 * s['tiers']['dropped']:.2f} % "
                f"| {s['cost']:,.0f} ({s['cost'] / oracle_cost:.2f}) |"
            )
    return [*lines, ""]


def _speed(trace: str | None) -> list[str]:
    """Environment steps per second (wall and CPU) with the trained agent deciding, per cluster."""
    params = load_agent()
    lines = [
        "| cluster | episodes | steps | steps per second (wall) | steps per CPU second | "
        "simulated requests per CPU second |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for template in TEMPLATES:
        env = make_env(template, trace_path=trace, trace_range_s=(0.0, 2400.0) if trace else None)
        steps = requests = 0
        wall0, cpu0 = time.perf_counter(), time.process_time()
        for seed in (2000, 2001):
            obs, _ = env.reset(seed=seed)
            controller = Controller(env.unwrapped.scenario, params)
            while True:
                action = np.asarray(controller.targets(obs["variants"], obs["inventory"]), dtype=np.int64)
                obs, _, terminated, truncated, info = env.step(action)
                steps += 1
                if terminated or truncated:
                    requests += info["episode"]["requests"]
                    break
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        lines.append(
            f"| {template} | 2 | {steps} | {steps / wall:.1f} | {steps / cpu:.1f} | {requests / cpu:,.0f} |"
        )
    return lines


def _training() -> list[str]:
    params = load_agent()
    t = params.training
    if not t:
        return ["The shipped agent carries no training record.", ""]
    weights = ", ".join(f"{n} {w:+.3f}" for n, w in zip(PARAMETERS, params.weights, strict=True))
    hist = t.get("history", [])
    last = hist[-1] if hist else {}
    return [
        f"Trained by `{t.get('command', '?')}`: {t.get('method', '?')}, {t.get('iterations')} iterations of "
        f"{t.get('population')} candidates (+ the mean) × {len(t.get('templates', []))} episodes, "
        f"{t.get('episodes')} episodes of {t.get('episode_duration_s')} s in all; "
        f"{t.get('wall_s')} s wall, {t.get('episode_cpu_s')} s CPU in episodes, {t.get('workers')} worker "
        f"processes. Fitness (return per request) of the mean in its last iteration: "
        f"{last.get('mean_fitness', '–')}. Weights: {weights}.",
        "",
    ]


def run(jobs: int = JOBS, episodes: int = EPISODES, trace: str | None = None, bundled: bool = True) -> str:
    trace_path = trace if trace is not None else (str(TRACE) if TRACE.exists() else None)
    started = time.perf_counter()
    held = _episodes(trace_path, episodes)
    rows = _evaluate(held, jobs)
    seeds = [r for r in rows if r["kind"] == "seeds"]
    traced = [r for r in rows if r["kind"] == "trace"]
    on_bundled = _bundled(jobs) if bundled else []
    speed = _speed(trace_path)
    wall = time.perf_counter() - started
    reward = RewardConfig()
    out = [
        "## Learning environment: a trained agent against the policies",
        "",
        "The Gymnasium environment `VariantAutoscaler-v0` (docs/learning-env.md) over the four bundled "
        "clusters. Held-out episodes: each cluster's episodes drawn from seeds "
        f"{SEEDS_FROM}–{SEEDS_FROM + episodes - 1} (random traffic shape and level, faults: a node lost "
        "and/or a node slowed; training draws from another stream), and one 20-minute episode per cluster "
        "replaying the trace's last 20 minutes "
        f"(`{Path(trace_path).name if trace_path else 'no trace'}`, never seen in training). Every policy "
        "runs every episode through `simulate` over the same requests. Return = Σ tier values (meets "
        f"{reward.tier_values[0]:g}, minor {reward.tier_values[1]:g}, severe {reward.tier_values[2]:g}, "
        f"dropped {reward.tier_values[3]:g}) − {reward.cost_weight:g} × cost; per request, averaged over "
        "the episodes. *Best return in*: episodes where the policy had the highest return per request "
        "(the oracle included). *Recovered*: faults after which the per-minute share within SLO came back "
        "within 5 points of its level over the 10 minutes before, for 3 minutes in a row. *In SLO, first 5 "
        "min / after*: the share within SLO of all the episodes' requests arriving in their first five "
        "minutes, and of the rest: `static` and `oracle` begin each episode at their own plan with their "
        "replicas serving, the others at the episode's initial replicas (often below the load), waiting "
        "the start-up time for more (docs/learning-env.md, reading the held-out comparison).",
        "",
        f"Command: `{COMMAND}` ({jobs} worker processes; {wall:.0f} s wall). The machine was shared with "
        "other jobs: wall times and speeds are inflated.",
        "",
        "### Held-out episodes",
        "",
        *(_table(seeds, f"Held-out seeds ({len(seeds) // len(POLICIES)} episodes)") if seeds else []),
        *(_table(traced, "Held-out trace window (the trace's last 20 minutes)") if traced else []),
        *(
            [
                "### On the bundled scenarios",
                "",
                "The four bundled scenarios as they are (hours long, the policies section's runs; "
                "longer than any training episode):",
                "",
                *on_bundled,
            ]
            if on_bundled
            else []
        ),
        "### Environment speed",
        "",
        "Two training-distribution episodes per cluster, the trained agent deciding every 60 s (one step per "
        "decision; the simulation between decisions dominates):",
        "",
        *speed,
        "",
        "### The trained agent",
        "",
        *_training(),
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--episodes", type=int, default=EPISODES)
    parser.add_argument("--trace", default=None)
    parser.add_argument("--no-bundled", action="store_true")
    args = parser.parse_args(argv)
    print(run(args.jobs, args.episodes, args.trace, bundled=not args.no_bundled))
    return 0


if __name__ == "__main__":
    sys.exit(main())
