"""``variant-autoscaler min-gpus``: the fewest GPUs over time that serve a trace within its SLOs.

A "perfect system" lower bound to compare autoscalers against: scaling is instant and the future is
known, so each interval gets exactly the replicas its own requests need. The replicas come from the
tail model (:mod:`variant_autoscaler.core.tail`): per interval, the fewest replicas such that the
predicted share of requests over each target stays within its budget, given the rate of the
interval's busiest 30 s (``--peak-window``: a rate that changes within the interval is load, not
burstiness), the burstiness of its arrivals and the length distribution of its requests (both read
around the interval, from the trace itself). ``--verify`` replays the trace through the emulator's
engine with those replicas and reports the attainment measured.

Examples::

    variant-autoscaler min-gpus --trace azure_conv_2023.csv --alpha 10 --beta 0.2 --gamma 10 --delta 0.02 \\
        --max-batch-size 64 --ttft 2000 --itl 50 --attainment 99
    variant-autoscaler min-gpus --trace mooncake.jsonl ... --rate-scale 3 --interval 30 --json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from variant_autoscaler.core.analyzer import SLO
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.core.tail import (
    Burstiness,
    RequestLengths,
    TailModel,
    TailTargets,
    TokenLengths,
    burstiness_from_times,
)
from variant_autoscaler.errors import ConfigError, InfeasibleError, ModelError
from variant_autoscaler.sim.traffic import TraceTraffic, read_trace
from vllm_emulator.engine import Engine, EngineConfig
from vllm_emulator.engine import Profile as EngineProfile

__all__ = ["Interval", "min_replicas", "plan_trace", "register", "run"]

#: Windows (s) at which each interval's burstiness is measured.
BURST_WINDOWS = (1.0, 2.0, 5.0, 10.0, 30.0)


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "min-gpus",
        help="the fewest GPUs over time that serve a trace within its SLOs (a perfect-system lower bound)",
        description=(
            "For each interval of a request trace, the fewest replicas (and GPUs) of one model on one "
            "accelerator that keep the predicted share of requests within the SLOs, with instant scaling "
            "and perfect knowledge of the load: the lower bound an autoscaler can be compared against."
        ),
        epilog=__doc__.split("Examples::", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_argument_group("trace")
    src.add_argument("--trace", type=Path, required=True, help="CSV (with a header) or JSON-lines trace")
    src.add_argument("--time-unit", type=float, help="seconds per unit of numeric timestamps")
    src.add_argument("--speedup", type=float, default=1.0, help="replay this many times faster")
    src.add_argument("--rate-scale", type=float, default=1.0, help="multiply the rate, keeping the shape")
    src.add_argument("--seed", type=int, default=0, help="seed of --rate-scale's copies")
    model = p.add_argument_group("model on one accelerator (decode α + β·batch, prefill γ + δ·tokens·batch)")
    for name, text in (("alpha", "α"), ("beta", "β"), ("gamma", "γ"), ("delta", "δ")):
        model.add_argument(f"--{name}", type=float, required=True, metavar="MS", help=f"{text} (ms)")
    model.add_argument("--max-batch-size", type=int, required=True, metavar="N", help="batch size")
    model.add_argument("--acc-count", type=int, default=1, metavar="GPUS", help="GPUs per replica")
    model.add_argument("--kv-cache-tokens", type=int, metavar="TOKENS", help="KV cache of one replica")
    slo = p.add_argument_group("SLOs (ms; shares in percent)")
    slo.add_argument("--ttft", type=float, default=0.0, metavar="MS", help="time-to-first-token target")
    slo.add_argument("--itl", type=float, default=0.0, metavar="MS", help="inter-token latency target")
    slo.add_argument("--attainment", type=float, default=0.0, metavar="PCT", help="share within both")
    slo.add_argument("--ttft-percentile", type=float, default=0.0, metavar="P", help="TTFT percentile")
    slo.add_argument("--itl-percentile", type=float, default=0.0, metavar="P", help="ITL percentile")
    p.add_argument("--interval", type=float, default=60.0, metavar="S", help="resolution (default 60 s)")
    p.add_argument(
        "--context",
        type=float,
        default=300.0,
        metavar="S",
        help="burstiness and lengths are read over this window centred on each interval (default 300 s)",
    )
    p.add_argument(
        "--peak-window",
        type=float,
        default=30.0,
        metavar="S",
        help="plan each interval for its busiest stretch of this length (default 30 s)",
    )
    p.add_argument("--verify", action="store_true", help="replay the trace with those replicas and measure")
    p.add_argument("--json", action="store_true", help="write the result as JSON")
    p.set_defaults(func=run)


@dataclass(frozen=True, slots=True)
class Interval:
    """One interval of the plan: its start (s), requests, the rate planned for (req/s: its busiest
    stretch), the arrivals' IDC over one service time as one replica sees them, replicas and GPUs."""

    start_s: float
    requests: int
    rate: float
    idc: float
    replicas: int
    gpus: int


def min_replicas(
    rate: float,
    *,
    parms: ServiceParms,
    max_batch: int,
    lengths: RequestLengths,
    burstiness: Burstiness,
    targets: TailTargets,
    kv_cache_tokens: int | None = None,
    limit: int = 100_000,
) -> int:
    """The fewest replicas whose even shares of ``rate`` (req/s) each meet ``targets``. The model reads
    the stream's burstiness thinned to whatever rate it analyses, so the largest rate per replica does
    not depend on the count and the answer is ``ceil(rate / max rate per replica)``."""
    if rate <= 0:
        return 0
    model = TailModel(parms, max_batch, lengths, burstiness, kv_cache_tokens=kv_cache_tokens)
    needed = math.ceil(rate / model.max_rate(targets).max_rate - 1e-9)
    if needed > limit:
        raise InfeasibleError(f"{rate:.4g} req/s needs more than {limit:,} replicas")
    return max(needed, 1)


def plan_trace(
    times: np.ndarray[Any, Any],
    inputs: np.ndarray[Any, Any],
    outputs: np.ndarray[Any, Any],
    *,
    parms: ServiceParms,
    max_batch: int,
    acc_count: int,
    targets: TailTargets,
    interval_s: float,
    context_s: float,
    peak_s: float = 30.0,
    kv_cache_tokens: int | None = None,
) -> list[Interval]:
    """The replicas of every interval of a trace (arrival times in s from 0, sorted; token counts), each
    planned for the rate of its busiest ``peak_s`` stretch."""
    if len(times) == 0:
        return []
    count = max(1, math.ceil((float(times[-1]) + 1e-9) / interval_s))
    plan: list[Interval] = []
    for k in range(count):
        start, end = k * interval_s, (k + 1) * interval_s
        lo, hi = np.searchsorted(times, [start, end])
        n = int(hi - lo)
        # The busiest stretch of peak_s within the interval: a rate that changes within the interval
        # is load, not burstiness (the tail model covers bursts shorter than that).
        edges = np.arange(start, end + 1e-9, min(peak_s, interval_s))
        counts = np.diff(np.searchsorted(times, edges))
        widths = np.diff(edges)
        rate = float(np.max(counts / widths)) if len(counts) else n / interval_s
        if n == 0:
            plan.append(Interval(start, 0, 0.0, 1.0, 0, 0))
            continue
        mid = (start + end) / 2.0
        c_lo, c_hi = np.searchsorted(times, [mid - context_s / 2.0, mid + context_s / 2.0])
        around = slice(int(c_lo), int(c_hi))
        lengths = RequestLengths(
            TokenLengths.from_samples(inputs[around]),
            TokenLengths.from_samples(np.maximum(outputs[around], 1)),
        )
        bursts = burstiness_from_times(times[around], BURST_WINDOWS)
        # The burstiness of the interval's own stream, at the interval's rate.
        bursts = Burstiness(bursts.windows_s, bursts.idc, rate)
        replicas = min_replicas(
            rate,
            parms=parms,
            max_batch=max_batch,
            lengths=lengths,
            burstiness=bursts,
            targets=targets,
            kv_cache_tokens=kv_cache_tokens,
        )
        idc = TailModel(parms, max_batch, lengths, bursts).arrival_idc(rate / replicas)
        plan.append(Interval(start, n, rate, idc, replicas, replicas * acc_count))
    return plan


def _targets(args: argparse.Namespace) -> TailTargets:
    slo = SLO(
        ttft=args.ttft,
        itl=args.itl,
        ttft_percentile=args.ttft_percentile,
        itl_percentile=args.itl_percentile,
        attainment=args.attainment,
    )
    for name, value in (("--attainment", args.attainment), ("--ttft-percentile", args.ttft_percentile)):
        if not 0 <= value < 100:
            raise ConfigError(f"{name} must be a percentage in [0, 100), got {value:g}")
    if not 0 <= args.itl_percentile < 100:
        raise ConfigError(f"--itl-percentile must be a percentage in [0, 100), got {args.itl_percentile:g}")
    targets = TailTargets.from_slo(slo)
    if not targets.is_tail:
        raise ConfigError(
            "give the SLOs as shares of requests: --ttft and/or --itl with --attainment (e.g. 99), "
            "or with --ttft-percentile / --itl-percentile"
        )
    return targets


def run(args: argparse.Namespace) -> int:
    for name in ("interval", "context", "speedup", "rate_scale", "peak_window"):
        if not getattr(args, name) > 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be > 0")
    if args.acc_count < 1 or args.max_batch_size < 1:
        raise ConfigError("--acc-count and --max-batch-size must be >= 1")
    targets = _targets(args)
    parms = ServiceParms(args.alpha, args.beta, args.gamma, args.delta)
    raw = read_trace(args.trace, time_unit_s=args.time_unit)
    if len(raw) == 0:
        raise ConfigError(f"trace {args.trace} has no requests")
    replay = TraceTraffic(raw, source=str(args.trace), speedup=args.speedup, rate_scale=args.rate_scale)
    arrivals = replay.arrivals(np.random.default_rng(args.seed), math.inf)
    try:
        plan = plan_trace(
            arrivals.times,
            arrivals.input_tokens,
            arrivals.output_tokens,
            parms=parms,
            max_batch=args.max_batch_size,
            acc_count=args.acc_count,
            targets=targets,
            interval_s=args.interval,
            context_s=args.context,
            peak_s=args.peak_window,
            kv_cache_tokens=args.kv_cache_tokens,
        )
    except (InfeasibleError, ModelError) as exc:
        raise ConfigError(f"no plan: {exc}") from None
    verified: dict[str, float] | None = None
    if args.verify:
        verified = verify(arrivals, plan, parms, args, targets)
    result = _result(args, arrivals.times, plan, targets, verified)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        sys.stdout.write(_table(result))
    return 0


def verify(
    arrivals: Any, plan: list[Interval], parms: ServiceParms, args: argparse.Namespace, targets: TailTargets
) -> dict[str, float]:
    """Replay the trace through the emulator's engine with each interval's replicas ready at once
    (least-loaded routing; replicas taken away finish what they hold): the shares measured."""
    kv = args.kv_cache_tokens or 1 << 22
    config = EngineConfig(
        profile=EngineProfile(parms.alpha, parms.beta, parms.gamma, parms.delta),
        max_num_seqs=args.max_batch_size,
        kv_cache_tokens=kv,
        max_model_len=kv,
    )
    engines: list[Engine] = []
    seqs = []
    times, ins, outs = arrivals.times, arrivals.input_tokens, arrivals.output_tokens
    rejected = 0
    for k, step in enumerate(plan):
        start, end = k * args.interval, (k + 1) * args.interval
        while len(engines) < step.replicas:
            engines.append(Engine(config, start_time=start))
        active = engines[: max(step.replicas, 1)] if engines else []
        lo, hi = np.searchsorted(times, [start, end])
        for i in range(int(lo), int(hi)):
            t = float(times[i])
            if int(ins[i]) + int(outs[i]) > kv or not active:
                rejected += 1
                continue
            for e in active:
                e.advance(t)
            target = min(active, key=lambda e: e.num_running + e.num_waiting)
            seqs.append(target.submit(i, int(ins[i]), int(outs[i]), t))
    for e in engines:
        e.advance(math.inf)
    total = len(seqs) + rejected
    latencies = np.array([_latencies(s) for s in seqs]).reshape(-1, 2)
    ttft, itl = latencies[:, 0], latencies[:, 1]
    ttft_ok = ttft <= targets.ttft if targets.ttft > 0 else np.ones(len(seqs), dtype=bool)
    itl_ok = itl <= targets.itl if targets.itl > 0 else np.ones(len(seqs), dtype=bool)
    return {
        "requests": float(total),
        "within_both": float(np.sum(ttft_ok & itl_ok)) / total if total else 1.0,
        "ttft_within": float(np.sum(ttft_ok)) / total if total else 1.0,
        "itl_within": float(np.sum(itl_ok)) / total if total else 1.0,
        "rejected": float(rejected),
        "ttft_p99_ms": float(np.quantile(ttft, 0.99)) if len(ttft) else 0.0,
    }


def _latencies(seq: Any) -> tuple[float, float]:
    """TTFT and mean ITL (ms) of a finished engine sequence."""
    first, finish = seq.first_token_time, seq.finish_time
    assert first is not None and finish is not None
    gaps = seq.output_tokens - 1
    return (first - seq.arrival_time) * 1000.0, (finish - first) * 1000.0 / gaps if gaps > 0 else 0.0


def _result(
    args: argparse.Namespace,
    times: np.ndarray[Any, Any],
    plan: list[Interval],
    targets: TailTargets,
    verified: dict[str, float] | None,
) -> dict[str, Any]:
    span = float(times[-1]) if len(times) else 0.0
    gpus = [p.gpus for p in plan]
    hours = sum(g * args.interval for g in gpus) / 3600.0
    return {
        "trace": str(args.trace),
        "requests": len(times),
        "span_s": span,
        "slo": targets.describe(),
        "interval_s": args.interval,
        "gpu_hours": hours,
        "peak_gpus": max(gpus, default=0),
        "mean_gpus": float(np.mean(gpus)) if gpus else 0.0,
        "static_peak_gpu_hours": max(gpus, default=0) * len(gpus) * args.interval / 3600.0,
        "intervals": [
            {
                "start_s": p.start_s,
                "requests": p.requests,
                "rate": round(p.rate, 6),
                "idc": round(p.idc, 4),
                "replicas": p.replicas,
                "gpus": p.gpus,
            }
            for p in plan
        ],
        "verified": verified,
    }


def _table(result: dict[str, Any]) -> str:
    lines = [
        f"Trace      {result['trace']}: {result['requests']:,} requests over {result['span_s'] / 60:.1f} min",
        f"SLO        {result['slo']}",
        "",
        f"{'start':>8} {'requests':>9} {'req/s':>8} {'IDC':>6} {'replicas':>9} {'GPUs':>6}",
    ]
    for p in result["intervals"]:
        lines.append(
            f"{p['start_s'] / 60:>6.1f} m {p['requests']:>9,} {p['rate']:>8.3f} {p['idc']:>6.2f} "
            f"{p['replicas']:>9} {p['gpus']:>6}"
        )
    lines += [
        "",
        f"Minimal GPUs: peak {result['peak_gpus']}, mean {result['mean_gpus']:.2f}, "
        f"{result['gpu_hours']:.2f} GPU-hours (a static pool sized for the peak: "
        f"{result['static_peak_gpu_hours']:.2f} GPU-hours)",
    ]
    v = result["verified"]
    if v is not None:
        lines.append(
            f"Verified by replay (the emulator's engine, instant scaling, least-loaded routing): "
            f"{100 * v['within_both']:.2f} % of {int(v['requests']):,} requests within the targets "
            f"(TTFT {100 * v['ttft_within']:.2f} %, ITL {100 * v['itl_within']:.2f} %, "
            f"{int(v['rejected'])} rejected as too long)"
        )
    return "\n".join(lines) + "\n"
