"""SLO accounting and the JSON report of one or several runs.

Every request is judged against its model's service-class SLO (TTFT and mean ITL, in ms):

* **meets** — TTFT ≤ SLO and mean ITL ≤ SLO;
* **minor** violation — not meets, but both within ``MINOR_FACTOR`` (1.5) × their SLO;
* **severe** violation — served, but TTFT or mean ITL beyond 1.5 × its SLO;
* **dropped** — never served: the client timed out without a first token (at the gateway or in a
  queue), the pod serving it died or was deleted, or the server rejected it.

A request's mean ITL is ``(finish − first token) / (output tokens − 1)``; one-token outputs have none
and meet the ITL SLO. Shares are of all requests that arrived, dropped ones included. Latency
percentiles are over served requests only (they would be undefined for dropped ones), so read them
with the dropped share.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from variant_autoscaler.sim.simulator import DROP_KILLED, DROP_NONE, DROP_REJECTED, DROP_TIMEOUT, RunResult

__all__ = [
    "MINOR_FACTOR",
    "TIER_DROPPED",
    "TIER_MEETS",
    "TIER_MINOR",
    "TIER_SEVERE",
    "build_report",
    "classify",
    "summarize",
    "write_report",
]

MINOR_FACTOR = 1.5
TIER_MEETS, TIER_MINOR, TIER_SEVERE, TIER_DROPPED = 0, 1, 2, 3
_TIER_NAMES = ("meets", "minor", "severe", "dropped")

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def _slo_arrays(result: RunResult) -> tuple[FloatArray, FloatArray]:
    models = result.scenario.model_by_id
    ttft = np.array([models[m].slo_ttft_ms / 1000.0 for m in result.models], dtype=np.float64)
    itl = np.array([models[m].slo_itl_ms / 1000.0 for m in result.models], dtype=np.float64)
    return ttft[result.model_idx], itl[result.model_idx]


def classify(result: RunResult) -> IntArray:
    """The tier (``TIER_*``) of every request of a run."""
    slo_ttft, slo_itl = _slo_arrays(result)
    served = result.dropped == DROP_NONE
    ttft = np.where(served, result.ttft_s, np.inf)
    itl = np.where(served, result.itl_s, np.inf)
    worst = np.maximum(ttft / slo_ttft, itl / slo_itl)
    tiers = np.full(len(worst), TIER_SEVERE, dtype=np.int64)
    tiers[worst <= MINOR_FACTOR] = TIER_MINOR
    tiers[worst <= 1.0] = TIER_MEETS
    tiers[~served] = TIER_DROPPED
    return tiers


def _pct(values: FloatArray, q: float) -> float | None:
    finite = values[np.isfinite(values)]
    if len(finite) == 0:
        return None
    return float(np.percentile(finite, q))


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000.0, 3)


def _share(mask: npt.NDArray[np.bool_], total: int) -> float:
    return float(mask.sum()) / total if total else 1.0


def _block(result: RunResult, tiers: IntArray, select: npt.NDArray[np.bool_]) -> dict[str, Any]:
    n = int(select.sum())
    slo_ttft, slo_itl = _slo_arrays(result)
    served = (result.dropped == DROP_NONE) & select
    ttft_ok = served & (result.ttft_s <= slo_ttft)
    itl_ok = served & (result.itl_s <= slo_itl)
    t = tiers[select]
    drops = result.dropped[select]
    return {
        "requests": n,
        "attainment": _share(t == TIER_MEETS, n),
        "ttft_attainment": _share(ttft_ok, n),
        "itl_attainment": _share(itl_ok, n),
        "tiers": {name: _share(t == code, n) for code, name in enumerate(_TIER_NAMES)},
        "dropped": {
            "timeout": int((drops == DROP_TIMEOUT).sum()),
            "killed": int((drops == DROP_KILLED).sum()),
            "rejected": int((drops == DROP_REJECTED).sum()),
        },
        "latency_ms": {
            "ttft_p50": _ms(_pct(result.ttft_s[served], 50)),
            "ttft_p99": _ms(_pct(result.ttft_s[served], 99)),
            "itl_p50": _ms(_pct(result.itl_s[served], 50)),
            "itl_p99": _ms(_pct(result.itl_s[served], 99)),
        },
    }


def summarize(result: RunResult) -> dict[str, Any]:
    """The headline figures of one run (JSON-ready)."""
    sc = result.scenario
    tiers = classify(result)
    everything = np.ones(len(tiers), dtype=bool)
    summary = _block(result, tiers, everything)
    acc_of = {v.name: v.accelerator for v in sc.variants}
    gpu_hours: dict[str, float] = {}
    for var, gs in result.gpu_seconds.items():
        acc = acc_of[var]
        gpu_hours[acc] = gpu_hours.get(acc, 0.0) + gs / 3600.0
    per_model: dict[str, Any] = {}
    classes = sc.class_by_name
    for m, model in enumerate(result.models):
        spec = sc.model_by_id[model]
        block = _block(result, tiers, result.model_idx == m)
        block["service_class"] = spec.service_class
        block["priority"] = classes[spec.service_class].priority
        block["slo_ms"] = {"ttft": spec.slo_ttft_ms, "itl": spec.slo_itl_ms}
        block["slo_attainment"] = spec.slo_attainment
        per_model[model] = block
    ups = sum(result.scale_ups.values())
    downs = sum(result.scale_downs.values())
    summary.update(
        {
            "policy": result.policy,
            "cost": round(sum(result.cost.values()), 4),
            "cost_by_variant": {k: round(v, 4) for k, v in sorted(result.cost.items())},
            "gpu_hours": {k: round(v, 4) for k, v in sorted(gpu_hours.items())},
            "scaling_actions": {
                "total": ups + downs,
                "up": ups,
                "down": downs,
                "by_variant": {
                    v: {"up": result.scale_ups[v], "down": result.scale_downs[v]} for v in result.variants
                },
            },
            "per_model": per_model,
            "sim": {
                "simulated_s": sc.duration_s,
                "cpu_s": round(result.cpu_s, 3),
                "wall_s": round(result.wall_s, 3),
                "simulated_s_per_cpu_s": round(sc.duration_s / result.cpu_s, 1) if result.cpu_s > 0 else None,
                "events": result.events,
                "decisions": result.decisions,
            },
        }
    )
    return summary


def timeseries(result: RunResult) -> dict[str, Any]:
    """Per sample interval: load, replicas, cost, latency percentiles and attainment (JSON-ready)."""
    sc = result.scenario
    step = sc.settings.sample_interval_s
    n_bins = max(1, math.ceil(sc.duration_s / step))
    edges = np.arange(n_bins + 1) * step
    tiers = classify(result)
    load: dict[str, list[float]] = {}
    ttft50: dict[str, list[float | None]] = {}
    ttft99: dict[str, list[float | None]] = {}
    itl50: dict[str, list[float | None]] = {}
    itl99: dict[str, list[float | None]] = {}
    attain: dict[str, list[float | None]] = {}
    bins = np.clip(np.searchsorted(edges, result.arrival_s, side="right") - 1, 0, n_bins - 1)
    served = result.dropped == DROP_NONE
    for m, model in enumerate(result.models):
        idx = np.flatnonzero(result.model_idx == m)
        idx = idx[np.argsort(bins[idx], kind="stable")]
        cuts = np.searchsorted(bins[idx], np.arange(n_bins + 1), side="left")
        load[model] = [round(float(c) / step, 4) for c in np.diff(cuts)]
        rows: list[list[float | None]] = [[], [], [], [], []]
        for b in range(n_bins):
            chunk = idx[cuts[b] : cuts[b + 1]]
            ok = chunk[served[chunk]]
            ttft = result.ttft_s[ok]
            itl = result.itl_s[ok]
            rows[0].append(_ms(_pct(ttft, 50)))
            rows[1].append(_ms(_pct(ttft, 99)))
            rows[2].append(_ms(_pct(itl, 50)))
            rows[3].append(_ms(_pct(itl, 99)))
            total = len(chunk)
            rows[4].append(round(_share(tiers[chunk] == TIER_MEETS, total), 5) if total else None)
        ttft50[model], ttft99[model], itl50[model], itl99[model], attain[model] = rows
    series = result.series
    return {
        "t_s": [float(t) for t in edges[:-1]],
        "arrival_rps": load,
        "ttft_p50_ms": ttft50,
        "ttft_p99_ms": ttft99,
        "itl_p50_ms": itl50,
        "itl_p99_ms": itl99,
        "attainment": attain,
        "sample_t_s": series["t"],
        "desired_replicas": series["desired"],
        "ready_replicas": series["ready"],
        "allocated_replicas": series["allocated"],
        "cumulative_cost": [round(float(c), 4) for c in series["cost"]],  # type: ignore[attr-defined]
        "gateway_waiting": series["gateway_waiting"],
    }


def scenario_summary(result: RunResult) -> dict[str, Any]:
    sc = result.scenario
    return {
        "name": sc.name,
        "description": sc.description,
        "duration_s": sc.duration_s,
        "seed": sc.seed,
        "requests": len(result.arrival_s),
        "capacity": sc.capacity(),
        "models": [
            {
                "model": m.model_id,
                "service_class": m.service_class,
                "slo_ttft_ms": m.slo_ttft_ms,
                "slo_itl_ms": m.slo_itl_ms,
                "startup_s": m.startup_s,
            }
            for m in sc.models
        ],
        "variants": [{"name": v.name, "model": v.model, "accelerator": v.accelerator} for v in sc.variants],
        "failures": [
            {"at_s": f.at_s, "pool": f.pool, "count": f.count, "recover_s": f.recover_s} for f in sc.failures
        ],
    }


def build_report(results: Sequence[RunResult], *, with_timeseries: bool = True) -> dict[str, Any]:
    """The JSON report of several policies' runs over the same scenario."""
    if not results:
        raise ValueError("no runs to report")
    policies: dict[str, Any] = {}
    for result in results:
        entry = summarize(result)
        if with_timeseries:
            entry["timeseries"] = timeseries(result)
        policies[result.policy] = entry
    return {
        "definitions": {
            "meets": "TTFT <= SLO and mean ITL <= SLO",
            "minor": f"not meets, both <= {MINOR_FACTOR} x SLO",
            "severe": f"served, TTFT or mean ITL > {MINOR_FACTOR} x SLO",
            "dropped": "timed out without a first token, killed with its pod, or rejected",
            "cost": "sum over pods of accelerator units x unit cost x hours held (scheduled to released)",
        },
        "scenario": scenario_summary(results[0]),
        "policies": policies,
    }


def write_report(report: Mapping[str, Any], path: Path | str) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, sort_keys=False, allow_nan=False) + "\n")
    return out
