"""Run several policies over one scenario (optionally in parallel processes) with the same requests."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.policies import HpaSettings, Policy, StaticPolicy, ThresholdPolicy
from variant_autoscaler.sim.scenario import Scenario
from variant_autoscaler.sim.simulator import RunResult, scenario_arrivals, simulate
from variant_autoscaler.sim.traffic import Arrivals

__all__ = [
    "AGENTS",
    "EXPERIMENTS",
    "POLICY_NAMES",
    "PolicyOptions",
    "make_policy",
    "make_policy_known",
    "run_policies",
]

POLICY_NAMES: tuple[str, ...] = ("static", "hpa-waiting", "hpa-kv", "wva", "ours", "oracle")


@dataclass(frozen=True, slots=True)
class PolicyOptions:
    """Tunables of the bundled policies (defaults: each policy's usual setup)."""

    hpa_waiting_threshold: float = 5.0
    hpa_kv_threshold: float = 0.5
    hpa_max_replicas: int = 64
    ours_interval_s: float = 60.0
    oracle_interval_s: float = 60.0
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
    from variant_autoscaler.sim.optimizing import OraclePolicy, ours_policy, peak_allocation, wva_policy

    if name == "static":
        return StaticPolicy(peak_allocation(scenario, arrivals))
    if name == "wva":
        return wva_policy(scenario)
    if name == "ours":
        return ours_policy(scenario, interval_s=opts.ours_interval_s)
    if (scale := _experiment_scale(name)) is not None:
        return ours_policy(scenario, interval_s=opts.ours_interval_s, slo_scale=scale, name=name)
    if name == "ours+trend":
        startup = max(m.startup_s for m in scenario.models)
        return ours_policy(
            scenario, interval_s=opts.ours_interval_s, forecast_s=startup + opts.ours_interval_s, name=name
        )
    if name == "oracle":
        return OraclePolicy(scenario, interval_s=opts.oracle_interval_s)
    if _is_agent(name):
        from variant_autoscaler.sim.agent import AgentPolicy, load_agent

        return AgentPolicy(scenario, load_agent(name.partition(":")[2] or None), name=name)
    known = [*POLICY_NAMES, *EXPERIMENTS, *AGENTS, *sorted(opts.extra)]
    raise ConfigError(f"unknown policy {name!r} (known: {', '.join(known)})")


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


EXPERIMENTS: tuple[str, ...] = ("ours+trend", "ours@<scale>")
AGENTS: tuple[str, ...] = ("agent", "agent:<file>")


def _is_agent(name: str) -> bool:
    """``agent``: the trained agent shipped with the simulator; ``agent:PATH``: an agent file."""
    return name == "agent" or (name.startswith("agent:") and len(name) > len("agent:"))


def make_policy_known(name: str, options: PolicyOptions | None = None) -> bool:
    """Whether ``name`` is a policy :func:`make_policy` builds (a bundled one, an experiment, or an
    extra of ``options``); a malformed experiment raises its own ConfigError."""
    return _known(name, options)


def _known(name: str, options: PolicyOptions | None) -> bool:
    if name in POLICY_NAMES or name == "ours+trend" or (options is not None and name in options.extra):
        return True
    if _is_agent(name):
        return True
    return _experiment_scale(name) is not None


def _run_one(scenario: Scenario, name: str, options: PolicyOptions | None) -> RunResult:
    arrivals = scenario_arrivals(scenario)
    return simulate(scenario, make_policy(name, scenario, arrivals, options), arrivals=arrivals)


def run_policies(
    scenario: Scenario,
    names: Sequence[str],
    *,
    jobs: int = 1,
    options: PolicyOptions | None = None,
) -> list[RunResult]:
    """Run each named policy over ``scenario``; all runs see the same requests (same seed).

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
        arrivals = scenario_arrivals(scenario)
        return [
            simulate(scenario, make_policy(n, scenario, arrivals, options), arrivals=arrivals) for n in names
        ]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_run_one, scenario, n, options) for n in names]
        return [f.result() for f in futures]
