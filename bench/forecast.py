"""The rate forecast (``core.forecast``) on traces: coverage of its upper quantile, and what it costs.

At each planning interval the forecaster sees the rate of the interval just ended and forecasts the
largest per-interval rate over the next ``start-up + one interval``. For every decision whose horizon
lies within the series we compare with what came:

* **coverage**: the share of decisions whose forecast was at or above the horizon's realised peak (the
  target is the quantile's level);
* **over-provisioning**: mean forecast / mean realised peak − 1 (capacity planned beyond what the peak
  needed, before any headroom for burstiness within an interval);
* **shortfall when short**: how far below the realised peak the forecast was, on average, when it was.

Methods: *none* plans on the last interval's rate (what a reactive planner does); *Holt* is the point
forecast (Holt's trend on the log rate); *Holt q0.9* / *q0.95* add the empirical quantile of the
forecaster's own past errors. The first ``WARM`` decisions are left out (no error history yet).

Series: the Azure LLM inference trace (2023, conversation; CC BY 4.0) in 60 s and 15 s intervals, and
the arrivals the simulator draws for the bundled scenarios' models (per minute). Run:
``python bench/forecast.py``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from variant_autoscaler.core.forecast import ForecastConfig, ForecastState, forecast, update
from variant_autoscaler.sim.scenarios import load_bundled
from variant_autoscaler.sim.simulator import scenario_arrivals
from variant_autoscaler.sim.traffic import read_trace

HERE = Path(__file__).resolve().parent
TRACE = HERE.parent.parent / "shared" / "traces" / "azure-llm-inference-2023-conv.csv"
HORIZON_S = 240.0  # the bundled scenarios' 3-minute start-up plus a 60 s interval
WARM = 20


def _series() -> list[tuple[str, float, np.ndarray[Any, Any]]]:
    """(name, interval s, rates per interval)."""
    out = []
    times = read_trace(TRACE).times
    for interval in (60.0, 15.0):
        counts = np.bincount((times // interval).astype(int))[:-1]  # the last interval is partial
        out.append((f"Azure conv trace, {interval:g} s", interval, counts / interval))
    for scenario_name in ("diurnal", "flash-crowd", "node-failure"):
        scenario = load_bundled(scenario_name)
        arrivals = scenario_arrivals(scenario)
        for model, arr in arrivals.items():
            n = int(scenario.duration_s // 60)
            counts = np.bincount((arr.times // 60.0).astype(int), minlength=n)[:n]
            out.append((f"{scenario_name}: {model}", 60.0, counts / 60.0))
    return out


def _evaluate(
    rates: np.ndarray[Any, Any], interval: float, method: str
) -> tuple[float, float, float, int] | None:
    """(coverage, over-provisioning, mean shortfall when short, decisions) of one method."""
    quantile = {"Holt q0.9": 0.9, "Holt q0.95": 0.95}.get(method, 0.9)
    config = ForecastConfig(interval_s=interval, horizon_s=HORIZON_S, quantile=quantile, min_history=WARM)
    steps = config.steps
    state = ForecastState()
    planned: list[float] = []
    for r in rates.tolist():
        state = update(state, float(r), config)
        f = forecast(state, config)
        planned.append({"none": float(r), "Holt": f.point}.get(method, f.upper))
    covered, forecasts, peaks, short = [], [], [], []
    for i in range(WARM, len(rates) - steps):
        peak = float(rates[i + 1 : i + 1 + steps].max())
        if peak <= 0:
            continue
        covered.append(planned[i] >= peak)
        forecasts.append(planned[i])
        peaks.append(peak)
        if planned[i] < peak:
            short.append(1.0 - planned[i] / peak)
    if not covered:
        return None
    shortfall = float(np.mean(short)) if short else 0.0
    return float(np.mean(covered)), float(np.mean(forecasts) / np.mean(peaks) - 1.0), shortfall, len(covered)


def run() -> str:
    started = time.perf_counter()
    methods = ("none", "Holt", "Holt q0.9", "Holt q0.95")
    rows: list[str] = []
    totals: dict[str, list[tuple[float, float, int]]] = {m: [] for m in methods}
    for name, interval, rates in _series():
        for method in methods:
            found = _evaluate(rates, interval, method)
            if found is None:
                continue
            coverage, over, shortfall, n = found
            totals[method].append((coverage, over, n))
            rows.append(
                f"| {name} | {method} | {n} | {100 * coverage:.1f} % | {100 * over:+.1f} % "
                f"| {100 * shortfall:.1f} % |"
            )
    summary = []
    for method in methods:
        entries = totals[method]
        weight = sum(n for _, _, n in entries)
        cov = sum(c * n for c, _, n in entries) / weight
        over = sum(o * n for _, o, n in entries) / weight
        summary.append(f"| {method} | {weight} | {100 * cov:.1f} % | {100 * over:+.1f} % |")
    elapsed = time.perf_counter() - started
    return "\n".join(
        [
            "## Rate forecast: coverage and over-provisioning",
            "",
            f"Command: `python bench/forecast.py` ({elapsed:.1f} s). At each interval the forecaster "
            "(`ForecastConfig(interval_s=60, horizon_s=240, quantile=0.9)`, Holt's α 0.5, β 0.1 on the "
            "log rate) forecasts the largest per-interval rate "
            f"over the next {HORIZON_S:g} s (start-up 3 min + one interval); *coverage* is the share of "
            "decisions whose forecast reached the realised peak, *over-provisioning* the mean forecast over "
            "the mean realised peak, *short by* the mean gap when it fell short. The first "
            f"{WARM} decisions of each series are left out. *none* plans on the last interval's rate.",
            "",
            "| series | method | decisions | coverage | over-provisioning | short by (when short) |",
            "|---|---|---:|---:|---:|---:|",
            *rows,
            "",
            "All series together (weighted by decisions):",
            "",
            "| method | decisions | coverage | over-provisioning |",
            "|---|---:|---:|---:|",
            *summary,
            "",
        ]
    )


if __name__ == "__main__":
    print(run())
    sys.exit(0)
