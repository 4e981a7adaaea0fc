"""Run several policies over one scenario (optionally in parallel processes) with the same requests."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Literal

from variant_autoscaler.core.saturation import V1Params, V2Params
from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.agent import AgentPolicy, load_agent
from variant_autoscaler.sim.optimizing import OraclePolicy, ours_policy, peak_allocation, wva_policy
from variant_autoscaler.sim.policies import (
    HpaSettings,
    Policy,
    SaturationPolicy,
    StaticPolicy,
    ThresholdPolicy,
)
from variant_autoscaler.sim.replica import ServerFactory
from variant_autoscaler.sim.report import classify
from variant_autoscaler.sim.scenario import Scenario
from variant_autoscaler.sim.simulator import RunResult, scenario_arrivals, simulate
from variant_autoscaler.sim.traffic import Arrivals

__all__ = [
    "AGENTS",
    "ALIASES",
    "EXPERIMENTS",
    "POLICY_NAMES",
    "PolicyOptions",
    "checked_oracle",
    "make_policy",
    "make_policy_known",
    "run_policies",
]

POLICY_NAMES: tuple[str, ...] = (
    "static",
    "hpa-waiting",
    "hpa-kv",
    "wva-2025",
    "wva-saturation-v1",
    "wva-saturation-v2",
    "ours",
    "oracle",
)
#: Older names still accepted (``wva``: the 2025 WVA, the simulator's first WVA policy).
ALIASES: Mapping[str, str] = {"wva": "wva-2025"}
#: Planning attainments (percent) the checked oracle tries, from the class's own target outwards.
ORACLE_LEVELS: tuple[float, ...] = (99.99, 99.9, 99.5, 99.0, 98.0, 97.0, 95.0, 92.0, 90.0)


@dataclass(frozen=True, slots=True)
class PolicyOptions:
    """Tunables of the bundled policies (defaults: each policy's usual setup)."""

    hpa_waiting_threshold: float = 5.0
    hpa_kv_threshold: float = 0.5
    hpa_max_replicas: int = 64
    ours_interval_s: float = 60.0
    oracle_interval_s: float = 60.0
    # The checked oracle judges only the models of the highest-priority class (capacity-limited
    # scenarios, where the others cannot all be served); otherwise every model with an attainment target.
    oracle_first_priority: bool = False
    # Per model, one arrival rate (req/s) per interval before the run, oldest first: ours' forecasters
    # learn it first, as the operator's do from Prometheus (``FORECAST_HISTORY``; sim/history.py).
    forecast_history: Mapping[str, Sequence[float]] = field(default_factory=dict)
    extra: Mapping[str, Callable[[Scenario, Mapping[str, Arrivals]], Policy]] = field(default_factory=dict)


def make_policy(
    name: str, scenario: Scenario, arrivals: Mapping[str, Arrivals], options: PolicyOptions | None = None
) -> Policy:
    """A fresh policy by name (see :data:`POLICY_NAMES`)."""
    opts = options or PolicyOptions()
    if name in opts.extra:
        return opts.extra[name](scenario, arrivals)
    if name == "hpa-waiting":
        return ThresholdPolicy(
            HpaSettings(
                metric="waiting", threshold=opts.hpa_waiting_threshold, max_replicas=opts.hpa_max_replicas
            )
        )
    if name == "hpa-kv":
        return ThresholdPolicy(
            HpaSettings(metric="kv", threshold=opts.hpa_kv_threshold, max_replicas=opts.hpa_max_replicas)
        )

    if (tuned := _tuned(name)) is not None:
        return _tuned_policy(scenario, name, *tuned, opts=opts, arrivals=arrivals)
    if name == "static":
        return StaticPolicy(peak_allocation(scenario, arrivals))
    if name in ("wva-2025", *ALIASES):
        return wva_policy(scenario, name=name)
    if name in ("wva-saturation-v1", "wva-saturation-v2"):
        return SaturationPolicy(scenario, version="v1" if name.endswith("v1") else "v2", name=name)
    history = opts.forecast_history or None
    if name == "ours":
        return ours_policy(scenario, interval_s=opts.ours_interval_s, forecast_history=history)
    if (scale := _experiment_scale(name)) is not None:
        return ours_policy(
            scenario, interval_s=opts.ours_interval_s, slo_scale=scale, name=name, forecast_history=history
        )
    if name == "ours+trend":
        startup = max(m.startup_s for m in scenario.models)
        return ours_policy(
            scenario,
            interval_s=opts.ours_interval_s,
            forecast_s=startup + opts.ours_interval_s,
            name=name,
            forecast_history=history,
        )
    if name == "oracle":
        return OraclePolicy(scenario, interval_s=opts.oracle_interval_s)
    if _is_agent(name):
        return AgentPolicy(scenario, load_agent(name.partition(":")[2] or None), name=name)
    if (variant := _ablation(name)) is not None:
        sizing, forecast, guard = variant
        return ours_policy(
            scenario,
            interval_s=opts.ours_interval_s,
            name=name,
            sizing=sizing,
            forecast=forecast,
            guard=guard,
            forecast_history=history,
        )
    known = [*POLICY_NAMES, *EXPERIMENTS, *AGENTS, *sorted(opts.extra)]
    raise ConfigError(f"unknown policy {name!r} (known: {', '.join(known)})")


#: Baselines given more capacity by their own knob (to compare at equal attainment): ``static@1.5``
#: (the peak's rate times 1.5, an admin's headroom), ``hpa-kv@0.2`` (threshold per pod),
#: ``hpa-waiting@1``, ``wva-2025@0.5`` (plans for SLOs scaled by 0.5), ``wva-saturation-v1@0.4``
#: (kvCacheThreshold), ``wva-saturation-v2@0.5`` (scaleUpThreshold, with scaleDownBoundary at the same
#: ratio to it as by default).
TUNABLE: tuple[str, ...] = tuple(n for n in POLICY_NAMES if n not in ("ours", "oracle"))  # every baseline
#: Knobs that are a threshold per pod or a multiple (any value > 0); the others are ratios in (0, 1].
_UNBOUNDED: frozenset[str] = frozenset({"static", "hpa-waiting"})


def _tuned(name: str) -> tuple[str, float] | None:
    base, sep, raw = name.partition("@")
    if not sep or base not in TUNABLE:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"policy {name!r}: expected {base}@<number>") from None
    if not (0 < value < math.inf) or (base not in _UNBOUNDED and value > 1):
        raise ConfigError(f"policy {name!r}: the value must be in (0, 1] (static, hpa-waiting: > 0)")
    return base, value


def _tuned_policy(
    scenario: Scenario,
    name: str,
    base: str,
    value: float,
    *,
    opts: PolicyOptions,
    arrivals: Mapping[str, Arrivals],
) -> Policy:
    if base == "static":
        return StaticPolicy(peak_allocation(scenario, arrivals, headroom=value), name=name)
    if base in ("hpa-waiting", "hpa-kv"):
        metric: Literal["waiting", "kv"] = "waiting" if base == "hpa-waiting" else "kv"
        return ThresholdPolicy(
            HpaSettings(metric=metric, threshold=value, max_replicas=opts.hpa_max_replicas), name=name
        )
    if base == "wva-2025":
        return wva_policy(scenario, name=name, slo_scale=value)
    if base == "wva-saturation-v1":
        return SaturationPolicy(scenario, version="v1", name=name, v1=V1Params(kv_cache_threshold=value))
    default = V2Params()
    down = value * default.scale_down_boundary / default.scale_up_threshold
    return SaturationPolicy(
        scenario, version="v2", name=name, v2=V2Params(scale_up_threshold=value, scale_down_boundary=down)
    )


def _experiment_scale(name: str) -> float | None:
    """``ours@0.6``: an experiment, ours planning against SLOs scaled by 0.6 (judged by the real ones)."""
    prefix, sep, value = name.partition("@")
    if prefix != "ours" or not sep:
        return None
    try:
        scale = float(value)
    except ValueError:
        raise ConfigError(f"policy {name!r}: expected ours@<SLO scale>, e.g. ours@0.6") from None
    if not 0 < scale <= 1:
        raise ConfigError(f"policy {name!r}: the SLO scale must be in (0, 1]")
    return scale


EXPERIMENTS: tuple[str, ...] = (
    "ours+trend",
    "ours@<scale>",
    "ours:<sizing>/<forecast>/<guard>",
    "oracle-cheapest",
    "<baseline>@<value>",
)
AGENTS: tuple[str, ...] = ("agent", "agent:<file>")


def _is_agent(name: str) -> bool:
    """``agent``: the trained agent shipped with the simulator; ``agent:PATH``: an agent file."""
    return name == "agent" or (name.startswith("agent:") and len(name) > len("agent:"))


_SIZINGS = ("tail", "mean")
_FORECASTS = ("none", "point", "quantile")
_GUARDS = {"guard": True, "noguard": False}


def _ablation(name: str) -> tuple[Literal["tail", "mean"], Literal["none", "point", "quantile"], bool] | None:
    """``ours:tail/quantile/guard``: ours with one choice per part (the ablation): sizing ``tail`` or
    ``mean``, forecast ``none``, ``point`` or ``quantile``, ``guard`` or ``noguard``."""
    prefix, sep, rest = name.partition(":")
    if prefix != "ours" or not sep:
        return None
    parts = rest.split("/")
    if len(parts) != 3 or parts[0] not in _SIZINGS or parts[1] not in _FORECASTS or parts[2] not in _GUARDS:
        raise ConfigError(
            f"policy {name!r}: expected ours:<{'|'.join(_SIZINGS)}>/<{'|'.join(_FORECASTS)}>/<guard|noguard>"
        )
    sizing: Literal["tail", "mean"] = "tail" if parts[0] == "tail" else "mean"
    forecast: Literal["none", "point", "quantile"] = (
        "none" if parts[1] == "none" else "point" if parts[1] == "point" else "quantile"
    )
    return sizing, forecast, _GUARDS[parts[2]]


def make_policy_known(name: str, options: PolicyOptions | None = None) -> bool:
    """Whether ``name`` is a policy :func:`make_policy` builds (a bundled one, an experiment, or an
    extra of ``options``); a malformed experiment raises its own ConfigError."""
    return _known(name, options)


def _known(name: str, options: PolicyOptions | None) -> bool:
    if name in POLICY_NAMES or name in ALIASES or name == "ours+trend":
        return True
    if _is_agent(name):
        return True
    if options is not None and name in options.extra:
        return True
    if name.startswith("ours:"):
        return _ablation(name) is not None
    if name == "oracle-cheapest" or _tuned(name) is not None:
        return True
    return _experiment_scale(name) is not None


def _attainments(result: RunResult) -> dict[str, float]:
    """Per model, the share of its requests within its SLO."""
    meets = classify(result) == 0
    out: dict[str, float] = {}
    for m, model in enumerate(result.models):
        select = result.model_idx == m
        n = int(select.sum())
        out[model] = float(meets[select].sum()) / n if n else 1.0
    return out


def checked_oracle(
    scenario: Scenario,
    arrivals: Mapping[str, Arrivals],
    options: PolicyOptions | None = None,
    *,
    loosen: bool = False,
    server_factory: ServerFactory | None = None,
) -> RunResult:
    """The oracle as a lower bound that means something, checked by simulation.

    The oracle plans each interval with the tail model for the load that will arrive in it: the
    fewest replicas the model says keep the classes' attainment in that interval. The simulation then
    measures what that allocation attains; where the model was optimistic and the run misses a
    target, the planning attainment is tightened step by step (:data:`ORACLE_LEVELS`) until it does.
    With ``loosen`` (``oracle-cheapest``) it is also loosened while the run still meets every target:
    the cheapest allocation the simulation shows meeting the targets over the whole run, which may let
    single intervals fall below them. When no level meets the targets (capacity), the run with the
    highest attainment stands. The level chosen and the levels tried are in ``series["notes"]``.
    Scenarios without attainment targets: one run.
    """
    opts = options or PolicyOptions()
    tail = [m for m in scenario.models if m.tail_slo and m.slo_attainment > 0]
    if not tail:
        policy = OraclePolicy(scenario, interval_s=opts.oracle_interval_s)
        return simulate(scenario, policy, server_factory, arrivals=arrivals)
    if opts.oracle_first_priority:
        top = min(scenario.class_by_name[m.service_class].priority for m in tail)
        tail = [m for m in tail if scenario.class_by_name[m.service_class].priority == top]
    stated = max(m.slo_attainment for m in tail)
    tried: list[dict[str, float]] = []

    def run(level: float) -> tuple[RunResult, bool, float]:
        policy = OraclePolicy(scenario, interval_s=opts.oracle_interval_s, planning_attainment=level)
        result = simulate(scenario, policy, server_factory, arrivals=arrivals)
        got = _attainments(result)
        worst = min(got[m.model_id] - m.slo_attainment / 100.0 for m in tail)
        tried.append({"planning_attainment": level, "cost": round(sum(result.cost.values()), 4)})
        return result, worst >= 0.0, worst

    levels = sorted({*ORACLE_LEVELS, stated}, reverse=True)
    at = levels.index(stated)
    best, ok, worst = run(stated)
    chosen = stated
    if ok and loosen:
        for level in levels[at + 1 :]:
            result, ok, _ = run(level)
            if not ok:
                break
            best, chosen = result, level
    elif not ok:
        best_worst = worst
        for level in reversed(levels[:at]):
            result, ok, worst = run(level)
            if ok:
                best, chosen = result, level
                break
            if worst > best_worst:
                best, chosen, best_worst = result, level, worst
    notes = {"planning_attainment": chosen, "tried": tried}
    name = "oracle-cheapest" if loosen else "oracle"
    return replace(best, policy=name, series={**best.series, "notes": notes})


def _run(
    scenario: Scenario, name: str, arrivals: Mapping[str, Arrivals], options: PolicyOptions | None
) -> RunResult:
    if name in ("oracle", "oracle-cheapest"):
        return checked_oracle(scenario, arrivals, options, loosen=name == "oracle-cheapest")
    return simulate(scenario, make_policy(name, scenario, arrivals, options), arrivals=arrivals)


def _run_one(
    scenario: Scenario, name: str, options: PolicyOptions | None, arrivals: Mapping[str, Arrivals] | None
) -> RunResult:
    return _run(scenario, name, arrivals if arrivals is not None else scenario_arrivals(scenario), options)


def run_policies(
    scenario: Scenario,
    names: Sequence[str],
    *,
    jobs: int = 1,
    options: PolicyOptions | None = None,
    arrivals: Mapping[str, Arrivals] | None = None,
) -> list[RunResult]:
    """Run each named policy over ``scenario``; all runs see the same requests (same seed, or
    ``arrivals`` where given: a scenario's run after its history, sim/history.py).

    Names are those of :data:`POLICY_NAMES`, ``ours@<scale>`` experiments, trained agents (``agent``,
    ``agent:PATH``), or ``options.extra`` keys.

    ``jobs > 1`` runs policies in that many worker processes (results in the order of ``names``).
    """
    if not names:
        raise ConfigError("no policy to run")
    unknown = [n for n in names if not _known(n, options)]
    if unknown:
        known = [*POLICY_NAMES, *EXPERIMENTS, *AGENTS, *sorted(options.extra if options else ())]
        raise ConfigError(f"unknown policy {unknown[0]!r} (known: {', '.join(known)})")
    workers = max(1, min(jobs, len(names), os.cpu_count() or 1))
    if workers == 1 or (options is not None and options.extra):
        given = arrivals if arrivals is not None else scenario_arrivals(scenario)
        return [_run(scenario, n, given, options) for n in names]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_run_one, scenario, n, options, arrivals) for n in names]
        return [f.result() for f in futures]
