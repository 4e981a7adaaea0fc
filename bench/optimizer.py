"""Optimizer benchmark: speed of limited and unlimited mode, scaling, and the MILP against WVA's greedy.

Deterministic (seeded) synthetic clusters: 8 accelerator types with WVA-like unit costs, 24 model
families of 1–70 B parameters whose decode/prefill parameters scale with model size and accelerator
speed, three service classes (Premium 1, Standard 5, Freemium 10), log-normal request rates. Candidates
come from the real analyzer (``size_allocation``).

Run ``python bench/optimizer.py`` (or ``python bench/run_all.py --only optimizer``); ``--quick`` runs a
smaller version for a smoke test.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import NamedTuple, ParamSpec, TypeVar

from variant_autoscaler.core.analyzer import SLO, Load
from variant_autoscaler.core.model import (
    AcceleratorType,
    OptimizerConfig,
    Plan,
    Profile,
    SaturationPolicy,
    ServiceParms,
    ServiceTarget,
    VariantInput,
)
from variant_autoscaler.core.optimizer import optimize, prepare, served_by_priority
from variant_autoscaler.sim.wva_greedy import plan_greedy

COMMAND = "python bench/run_all.py --only optimizer"
P = ParamSpec("P")
T = TypeVar("T")
Accel = tuple[str, str, float, float, int]  # name, device, unit cost, relative speed, memory (GB)

CATALOGUE: tuple[Accel, ...] = (
    ("L4", "NVIDIA-L4", 15.0, 0.5, 24),
    ("A10G", "NVIDIA-A10G", 20.0, 0.6, 24),
    ("G2", "Intel-Gaudi-2-96GB", 23.0, 0.9, 96),
    ("L40S", "NVIDIA-L40S", 32.0, 1.0, 48),
    ("A100-40", "NVIDIA-A100-SXM4-40GB", 35.0, 1.1, 40),
    ("A100", "NVIDIA-A100-PCIE-80GB", 40.0, 1.3, 80),
    ("MI300X", "AMD-MI300X-192GB", 65.0, 2.0, 192),
    ("H100", "NVIDIA-H100-80GB-HBM3", 100.0, 2.6, 80),
)
CLASSES = (
    ServiceTarget("Premium", 1, SLO(ttft=1000, itl=60)),
    ServiceTarget("Standard", 5, SLO(ttft=2000, itl=90)),
    ServiceTarget("Freemium", 10, SLO(ttft=3000, itl=150)),
)


class Instance(NamedTuple):
    variants: tuple[VariantInput, ...]
    accelerators: dict[str, AcceleratorType]
    capacity: dict[str, int]


def _families(rng: random.Random, count: int) -> list[tuple[float, float]]:
    return [(rng.choice((1.0, 3.0, 8.0, 13.0, 34.0, 70.0)), rng.uniform(0.8, 1.25)) for _ in range(count)]


def _profiles(
    rng: random.Random, size: float, quality: float, catalogue: Sequence[Accel]
) -> tuple[Profile, ...]:
    profiles = []
    for name, _, _, speed, memory in catalogue:
        count = 1
        while size * 2.4 > memory * count:
            count *= 2
        if count > 8:
            continue
        scale = max(size, 1.0) / 8.0 / speed / count**0.7 / quality
        alpha = 6.0 * scale * rng.uniform(0.95, 1.05)
        batch = 256 if size <= 8 else 128 if size <= 34 else 64
        profiles.append(Profile(name, count, batch, ServiceParms(alpha, alpha / 120.0, alpha, 0.002 * scale)))
    return tuple(profiles)


def make_variants(seed: int, count: int, catalogue: Sequence[Accel] = CATALOGUE) -> tuple[VariantInput, ...]:
    rng = random.Random(seed)
    families = _families(rng, 24)
    variants = []
    for i in range(count):
        size, quality = families[rng.randrange(len(families))]
        profiles = _profiles(rng, size, quality, catalogue)
        current = rng.choice(profiles)
        variants.append(
            VariantInput(
                name=f"variant-{i:05d}",
                namespace=f"team-{i % 7}",
                model_id=f"model-{i}",
                service=rng.choice(CLASSES),
                profiles=profiles,
                load=Load(rng.lognormvariate(4.0, 1.0), rng.randint(64, 2048), rng.randint(32, 512)),
                current_accelerator=current.accelerator,
                current_replicas=rng.randint(0, 4),
            )
        )
    return tuple(variants)


def accelerators_of(catalogue: Sequence[Accel] = CATALOGUE) -> dict[str, AcceleratorType]:
    return {name: AcceleratorType(name, device, cost) for name, device, cost, _, _ in catalogue}


def demand_capacity(
    plan: Plan, variants: Sequence[VariantInput], accelerators: dict[str, AcceleratorType]
) -> dict[str, int]:
    """Devices per type that the unlimited plan uses."""
    by_key = {v.key: v for v in variants}
    need = {a.device: 0 for a in accelerators.values()}
    for key, decision in plan.decisions.items():
        if decision.accelerator is None:
            continue
        profile = by_key[key].profile(decision.accelerator)
        assert profile is not None
        need[accelerators[decision.accelerator].device] += decision.replicas * profile.acc_count
    return need


def scaled_capacity(need: dict[str, int], fraction: float) -> dict[str, int]:
    """``fraction`` of the devices of each type that the unlimited plan uses (types it does not use: 0)."""
    return {device: int(fraction * count) for device, count in need.items()}


def _timed(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> tuple[T, float]:
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _fmt_gap(gap: float | None) -> str:
    return "–" if gap is None else f"{gap:.1e}"


def bench_limited(count: int, batches: int, policies: Sequence[SaturationPolicy]) -> list[str]:
    accelerators = accelerators_of()
    variants = make_variants(7, count)
    config = OptimizerConfig(batch_sizes=batches)
    prepared, analyzer_s = _timed(prepare, variants, accelerators, config)
    unlimited = optimize(variants, accelerators, config, prepared=prepared)
    need = demand_capacity(unlimited, variants, accelerators)
    capacity = scaled_capacity(need, 0.7)
    lines = [
        f"{count} variants × {len(accelerators)} accelerator types × {batches} batch sizes: "
        f"{prepared.sizings} sizings by the analyzer in **{analyzer_s:.2f} s** "
        f"({analyzer_s / max(prepared.sizings, 1) * 1e3:.2f} ms each). Capacity: 70 % of the devices the "
        f"unlimited plan uses ({sum(capacity.values())} of {sum(need.values())}).",
        "",
        _row(
            "policy",
            "MILP solve (s)",
            "analyzer + solve (s)",
            "status",
            "MIP gap",
            "solves",
            "load served",
            "cost",
        ),
        _row(*["---"] * 8),
    ]
    demand = sum(v.load.arrival_rate for v in variants if v.load is not None)
    for policy in policies:
        limited = replace(config, unlimited=False, saturation_policy=policy)
        plan, solve_s = _timed(optimize, variants, accelerators, limited, capacity, prepared=prepared)
        served = sum(d.served_rate for d in plan.decisions.values())
        lines.append(
            _row(
                policy.value,
                f"{solve_s:.2f}",
                f"{analyzer_s + solve_s:.2f}",
                plan.status,
                _fmt_gap(plan.mip_gap),
                plan.solves,
                f"{served / demand:.1%}",
                f"{plan.total_cost:,.0f}",
            )
        )
    return lines


def bench_unlimited(count: int) -> list[str]:
    accelerators = accelerators_of()
    lines = [
        _row("configuration", "sizings", "analyzer (s)", "selection (s)", "end to end (s)"),
        _row(*["---"] * 5),
    ]
    variants = make_variants(11, count)
    wva_like = tuple(replace(v, keep_accelerator=True) for v in variants)
    for label, vs, batches in (
        ("keep accelerator, batch fixed (WVA's controller)", wva_like, 1),
        ("all 8 accelerators, batch fixed", variants, 1),
        ("all 8 accelerators × 4 batch sizes", variants, 4),
    ):
        config = OptimizerConfig(batch_sizes=batches)
        prepared, analyzer_s = _timed(prepare, vs, accelerators, config)
        _, select_s = _timed(optimize, vs, accelerators, config, prepared=prepared)
        lines.append(
            _row(
                label,
                prepared.sizings,
                f"{analyzer_s:.2f}",
                f"{select_s:.3f}",
                f"{analyzer_s + select_s:.2f}",
            )
        )
    return lines


def bench_scaling(sizes: Sequence[int]) -> list[str]:
    accelerators = accelerators_of()
    lines = [
        _row(
            "variants",
            "sizings",
            "analyzer (s)",
            "MILP None (s)",
            "status",
            "MILP PriorityExhaustive (s)",
            "status",
        ),
        _row(*["---"] * 7),
    ]
    for count in sizes:
        variants = make_variants(3, count)
        config = OptimizerConfig(batch_sizes=1)
        prepared, analyzer_s = _timed(prepare, variants, accelerators, config)
        unlimited = optimize(variants, accelerators, config, prepared=prepared)
        capacity = scaled_capacity(demand_capacity(unlimited, variants, accelerators), 0.7)
        cells: list[object] = [count, prepared.sizings, f"{analyzer_s:.2f}"]
        for policy in (SaturationPolicy.NONE, SaturationPolicy.PRIORITY_EXHAUSTIVE):
            limited = replace(config, unlimited=False, saturation_policy=policy)
            plan, solve_s = _timed(optimize, variants, accelerators, limited, capacity, prepared=prepared)
            cells += [f"{solve_s:.2f}", f"{plan.status} ({_fmt_gap(plan.mip_gap)})"]
        lines.append(_row(*cells))
    return lines


class Comparison:
    """Tallies for one policy (a plain class: run_all.py loads this file without registering it)."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.milp_more: list[float] = []  # relative gain in weighted served load where the MILP serves more
        self.cheaper: list[float] = []  # relative cost saving where the served load ties
        self.ties = 0
        self.worse = 0
        self.milp_time: list[float] = []


def _random_instance(seed: int) -> Instance:
    rng = random.Random(seed)
    catalogue = rng.sample(CATALOGUE, rng.randint(3, 6))
    variants = make_variants(seed, rng.randint(20, 60), catalogue)
    accelerators = accelerators_of(catalogue)
    unlimited = optimize(variants, accelerators, OptimizerConfig(batch_sizes=1))
    need = demand_capacity(unlimited, variants, accelerators)
    return Instance(variants, accelerators, scaled_capacity(need, rng.uniform(0.4, 1.1)))


def compare(instances: int, delayed: bool) -> list[Comparison]:
    results = {p: Comparison(p.value) for p in SaturationPolicy}
    for seed in range(instances):
        inst = _random_instance(1000 + seed)
        prepared = prepare(inst.variants, inst.accelerators, OptimizerConfig(batch_sizes=1))
        for policy in SaturationPolicy:
            config = OptimizerConfig(
                unlimited=False, saturation_policy=policy, delayed_best_effort=delayed, batch_sizes=1
            )
            milp, milp_s = _timed(
                optimize, inst.variants, inst.accelerators, config, inst.capacity, prepared=prepared
            )
            greedy = plan_greedy(inst.variants, inst.accelerators, config, inst.capacity, prepared=prepared)
            w_milp = served_by_priority(milp, inst.variants)[0]
            w_greedy = served_by_priority(greedy, inst.variants)[0]
            entry = results[policy]
            entry.milp_time.append(milp_s)
            tolerance = 1e-4 * max(w_greedy, 1e-9)
            if w_milp > w_greedy + tolerance:
                entry.milp_more.append((w_milp - w_greedy) / w_greedy if w_greedy else float("inf"))
            elif w_milp < w_greedy - tolerance:
                entry.worse += 1
            elif milp.total_cost < greedy.total_cost * (1 - 1e-6):
                entry.cheaper.append((greedy.total_cost - milp.total_cost) / greedy.total_cost)
            elif milp.total_cost > greedy.total_cost * (1 + 1e-4) + 1e-9:
                entry.worse += 1
            else:
                entry.ties += 1
    return list(results.values())


def _pct(values: list[float]) -> str:
    if not values:
        return "–"
    return f"{statistics.median(values):.1%} / {max(values):.1%}"


def bench_compare(instances: int) -> list[str]:
    lines = [
        _row(
            "policy",
            "best effort",
            "MILP serves more",
            "gain: median / max",
            "same load, MILP cheaper",
            "saving: median / max",
            "ties",
            "MILP worse",
            "MILP time: median / max (s)",
        ),
        _row(*["---"] * 9),
    ]
    for delayed in (False, True):
        for c in compare(instances, delayed):
            lines.append(
                _row(
                    c.policy,
                    "delayed" if delayed else "per class",
                    f"{len(c.milp_more)} / {instances}",
                    _pct(c.milp_more),
                    f"{len(c.cheaper)} / {instances}",
                    _pct(c.cheaper),
                    c.ties,
                    c.worse,
                    f"{statistics.median(c.milp_time):.2f} / {max(c.milp_time):.2f}",
                )
            )
    return lines


def run(quick: bool = False) -> str:
    big = 200 if quick else 1000
    instances = 10 if quick else 100
    sizes = (10, 50, 100) if quick else (10, 100, 500, 1000, 2000, 5000)
    out = [
        "## Optimizer",
        "",
        f"Reproduce: `{COMMAND}` (synthetic, seeded clusters: 8 accelerator types, 24 model families, "
        "3 service classes; candidates from the real analyzer). MIP gap 1e-4, time limit 10 s per plan.",
        "",
        "### Limited mode at scale",
        "",
        *bench_limited(big, 4, (SaturationPolicy.NONE, SaturationPolicy.PRIORITY_EXHAUSTIVE)),
        "",
        f"### Unlimited mode, {big} variants",
        "",
        *bench_unlimited(big),
        "",
        "### How the MILP's time grows (limited mode, batch fixed, capacity 70 %)",
        "",
        *bench_scaling(sizes),
        "",
        f"### MILP against WVA's greedy ({instances} random capacity-limited instances per row)",
        "",
        "Each instance: 20–60 variants, 3–6 accelerator types, capacity 40–110 % of what the unlimited plan "
        "uses; both solvers see the same candidates (batch fixed at the profile's, as WVA). *Served* is the "
        "priority-weighted served load (weight 1/priority); *gain* is relative to the greedy's; *saving* is "
        "the relative cost difference when both serve the same load.",
        "",
        *bench_compare(instances),
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    args = parser.parse_args(argv)
    print(run(quick=args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
