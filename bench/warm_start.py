"""Benchmark: a new forecaster warmed from its model's history, against one that starts afresh.

The operator warms a forecaster that has no state to resume (a first install, a migration from WVA, a
new VA on a model already serving) from the model's past rate in Prometheus (``FORECAST_HISTORY``,
engine/ahead.py: one range query). Without it the forecaster spends its first twenty horizons on one
fixed margin (+35 %) for every quantile, and the scale-down window of a new model stays at five minutes.

Each of the policy benchmark's six scenarios is cut in two: its first ``HISTORY_MIN`` minutes are the
history (what Prometheus recorded before the operator started), the rest is the run
(``sim.history.split_history``, as ``simulate --history`` cuts it; a node lost later is lost at the same
moment of the traffic). ``ours`` runs the
rest twice over the same requests, from the scenario's initial replicas: afresh, and with each model's
forecaster warmed from the history's per-minute arrival rates (what the operator's range query of the
arrival counter reads). The checked oracle of the same rest is the reference. The simulator warms the
forecaster with the same core function the operator does (``core.forecast.replay``).

Run: ``python bench/warm_start.py`` (this section only, to stdout) or
``python bench/run_all.py --only warm_start``.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from policies import SCARCE, SCENARIOS, _judged, _load
from variant_autoscaler.sim.cluster import scenario_arrivals
from variant_autoscaler.sim.history import split_history
from variant_autoscaler.sim.optimizing import ours_policy
from variant_autoscaler.sim.report import build_report
from variant_autoscaler.sim.runner import PolicyOptions, checked_oracle
from variant_autoscaler.sim.simulator import simulate

#: Minutes of each scenario taken as history: before the crowd (flash-crowd, 60 min in) and the lost
#: node (node-failure, 50 min in); an hour of the four-hour diurnal cycle; a third of the one-hour trace.
HISTORY_MIN: dict[str, int] = {
    "diurnal": 60,
    "flash-crowd": 30,
    "scarce": 30,
    "node-failure": 20,
    "azure-conv": 20,
    "azure-conv-x4": 20,
    "azure-code": 20,
}


def _one(name: str) -> dict[str, Any] | None:
    scenario = _load(name)
    if scenario is None:
        return None
    split = split_history(scenario, scenario_arrivals(scenario), 60.0 * HISTORY_MIN[name])
    rest, later, history = split.scenario, split.arrivals, split.history
    started = time.process_time()
    report = build_report(
        [
            checked_oracle(rest, later, PolicyOptions(oracle_first_priority=name in SCARCE)),
            simulate(rest, ours_policy(rest, name="afresh"), arrivals=later),
            simulate(rest, ours_policy(rest, name="warmed", forecast_history=history), arrivals=later),
        ],
        with_timeseries=False,
    )
    row: dict[str, Any] = {
        "name": name,
        "history_min": HISTORY_MIN[name],
        "rest_min": rest.duration_s / 60.0,
        "requests": int(sum(len(a) for a in later.values())),
        "cpu_s": time.process_time() - started,
    }
    for arm in ("oracle", "afresh", "warmed"):
        row[arm] = (float(report["policies"][arm]["cost"]), _judged(report, name, arm))
    return row


def run(jobs: int = 2) -> str:
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        rows = [r for r in pool.map(_one, SCENARIOS) if r is not None]
    wall = time.perf_counter() - started
    lines = [
        "## A new forecaster warmed from its model's history",
        "",
        f"Command: `python bench/run_all.py --only warm_start` ({wall:.0f} s wall, 2 worker processes). "
        "Each scenario of the policy benchmark is cut in two: its first minutes are the history "
        "(what Prometheus recorded before the operator started: a first install, a migration from WVA), "
        "the rest is the run, from the scenario's initial replicas. `ours` runs the rest twice over the "
        "same requests: with each forecaster *afresh* (`FORECAST_HISTORY=0`: the warm-up's one +35 % "
        "margin for twenty horizons, and the five-minute scale-down window until then), and *warmed* "
        "from the history's per-minute arrival rates (the default: what the operator's one range query "
        "reads). The share within SLO (scarce: of the first-priority class) and the cost against the "
        "checked oracle of the same rest.",
        "",
        "| scenario | history | run | requests | oracle | ours afresh | ours warmed | warmed vs afresh |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        base = r["oracle"][0]

        def cell(arm: str, base: float = base, r: dict[str, Any] = r) -> str:
            cost, att = r[arm]
            return f"{100 * att:.2f} % at {cost / base:.2f}×"

        change = r["warmed"][0] / r["afresh"][0] - 1.0
        lines.append(
            f"| {r['name']} | {r['history_min']} min | {r['rest_min']:.0f} min | {r['requests']:,} "
            f"| {100 * r['oracle'][1]:.2f} % | {cell('afresh')} | {cell('warmed')} "
            f"| {100 * change:+.1f} % cost |"
        )
    cheaper = [r for r in rows if r["warmed"][0] < r["afresh"][0]]
    dearer = [r for r in rows if r["warmed"][0] > r["afresh"][0]]
    worst = max(rows, key=lambda r: r["afresh"][1] - r["warmed"][1])
    lines += [
        "",
        f"Warmed, ours is cheaper in {len(cheaper)} of {len(rows)} scenarios "
        f"({', '.join(r['name'] for r in cheaper) or 'none'})"
        + (f" and dearer in {', '.join(r['name'] for r in dearer)}" if dearer else "")
        + f"; the largest fall in attainment is {100 * (worst['afresh'][1] - worst['warmed'][1]):.2f} points "
        f"({worst['name']}). CPU per scenario (the oracle's checked runs and both of ours): "
        + ", ".join(f"{r['name']} {r['cpu_s']:.0f} s" for r in rows)
        + ".",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
