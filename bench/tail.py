"""The tail model against the emulator's engine: predicted vs measured p95/p99 TTFT, sizing for attainment.

Sections (``python bench/tail.py`` prints the markdown; ``make bench`` writes it to docs/benchmarks.md):

1. **Validation.** One replica of the emulator's engine on a virtual clock (no HTTP, no wall clock) serves
   Poisson, gamma-renewal (bursty), two-state MMPP (fast and slow switching) and trace arrivals with
   fixed or log-normal lengths; the measured p95/p99 TTFT (requests after the first 10 %) are compared
   with :class:`~variant_autoscaler.core.tail.TailModel`'s, which is given the arrival rate, the IDC of
   the arrivals (measured from them, as the operator measures counts) and the length distributions.
   The trace (Azure LLM inference 2023, conversation; CC BY 4.0) is predicted minute by minute, each
   minute with its own rate and the burstiness around it, and the minutes mixed by their requests.
2. **Sizing a long-context trace**: mean sizing (WVA's) against tail sizing for 99 % within both
   targets, loosening the TTFT target from 1 s to 5 s; each rate per replica is then served by one
   engine replica and the attainment measured.
3. **The perfect-system lower bound** (``variant-autoscaler min-gpus``) on the Azure trace, verified by
   replay.
4. **Speed** of one tail sizing (what the optimizer would call per candidate).

Another engine (e.g. a vLLM-V1-like one with chunked prefill) is validated by pointing
``BENCH_TAIL_ENGINE`` (or ``--engine``) at ``module:factory``, a callable taking ``(alpha, beta, gamma,
delta, max_num_seqs, kv_cache_tokens)`` and returning an object with the engine's ``submit(id, prompt,
output, now)`` and ``advance(now)``, whose sequences carry ``arrival_time``, ``first_token_time``,
``finish_time`` and ``output_tokens`` (the default is :func:`default_engine`).
``BENCH_TAIL_REQUESTS`` sets the arrivals per point (default 30000).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from variant_autoscaler.cli import main as cli_main
from variant_autoscaler.core.analyzer import SLO, Load, clear_sizing_memo, size_allocation
from variant_autoscaler.core.candidates import build_candidate_sets
from variant_autoscaler.core.model import AcceleratorType, Profile, ServiceTarget, VariantInput
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.core.tail import (
    Burstiness,
    RequestLengths,
    TailModel,
    TailTargets,
    TokenLengths,
    burstiness_from_times,
    clear_tail_memo,
    size_tail_allocation,
)
from variant_autoscaler.core.workload import Workload
from variant_autoscaler.errors import InfeasibleError
from variant_autoscaler.sim.traffic import Arrivals, TraceTraffic, read_trace
from vllm_emulator.costmodel import from_profile
from vllm_emulator.engine import Engine, EngineConfig
from vllm_emulator.engine import Profile as EngineProfile
from vllm_emulator.engine_v1 import V1Config, V1Engine

HERE = Path(__file__).resolve().parent
TRACE = HERE.parent.parent / "shared" / "traces" / "azure-llm-inference-2023-conv.csv"
CODE_TRACE = HERE / "traces" / "azure-llm-inference-2023-code.csv"  # shipped (CC BY 4.0, traces/README.md)
#: The code trace's replays: the share of the stream one replica of several receives (random routing).
CODE_SHARES = (0.1, 0.25, 0.5)
CODE_TARGETS = (1000.0, 50.0)  # TTFT and ITL targets (ms) whose shares over are compared
REQUESTS = int(os.environ.get("BENCH_TAIL_REQUESTS", "30000"))
ENGINE = os.environ.get("BENCH_TAIL_ENGINE", "")
TOLERANCE = 0.20
WINDOWS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)

A100 = ServiceParms(20.58, 0.41, 20.58, 0.041)  # WVA's e2e A100 profile; the bundled 8B model's
LARGE = ServiceParms(8.0, 0.05, 15.0, 0.002)
H100 = ServiceParms(10.0, 0.2, 10.0, 0.02)  # the bundled node-failure scenario's H100


def default_engine(alpha: float, beta: float, gamma: float, delta: float, max_num_seqs: int, kv: int) -> Any:
    """The emulator's engine (``vllm_emulator.engine.Engine``)."""
    config = EngineConfig(
        profile=EngineProfile(alpha, beta, gamma, delta),
        max_num_seqs=max_num_seqs,
        kv_cache_tokens=kv,
        max_model_len=min(kv, 1 << 20),
    )
    return Engine(config)


def v1_engine(
    alpha: float,
    beta: float,
    gamma: float,
    delta: float,
    max_num_seqs: int,
    kv: int,
    *,
    context_tokens: int = 640,
) -> Any:
    """The emulator's vLLM-V1-like engine (``vllm_emulator.engine_v1``: chunked prefill, a 2,048-token
    step budget, KV blocks), its step costs matching the profile at the requests' mean context, as the
    simulator configures it; no prefix-cache hits."""
    return V1Engine(
        V1Config(
            cost=from_profile(alpha, beta, gamma, delta, context_tokens=context_tokens),
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max(2048, max_num_seqs),
            num_gpu_blocks=kv // 16,
            max_model_len=min(kv, 1 << 16),
            prefix_hit_ratio=0.0,
        )
    )


def _factory(spec: str) -> Callable[..., Any]:
    if not spec:
        return default_engine
    if spec == "v1":
        return v1_engine
    module, _, name = spec.partition(":")
    found: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return found


def serve(
    factory: Callable[..., Any],
    parms: ServiceParms,
    batch: int,
    times: np.ndarray[Any, Any],
    ins: np.ndarray[Any, Any],
    outs: np.ndarray[Any, Any],
    kv: int = 1 << 22,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """One replica serving every request: (arrival, TTFT ms, mean ITL ms) of each, in arrival order."""
    extra: dict[str, int] = {}
    if factory is v1_engine:  # its step costs match the profile at the requests' mean context
        extra["context_tokens"] = max(1, round(float(np.sum(outs * (ins + outs / 2.0)) / np.sum(outs))))
    engine = factory(parms.alpha, parms.beta, parms.gamma, parms.delta, batch, kv, **extra)
    seqs = []
    for i, t in enumerate(times.tolist()):
        engine.advance(t)
        seqs.append(engine.submit(i, int(ins[i]), int(outs[i]), t))
    engine.advance(math.inf)
    arrival = np.array([s.arrival_time for s in seqs])
    ttft = np.array([(s.first_token_time - s.arrival_time) * 1000.0 for s in seqs])
    itl = np.array(
        [
            (s.finish_time - s.first_token_time) * 1000.0 / (s.output_tokens - 1)
            if s.output_tokens > 1
            else 0.0
            for s in seqs
        ]
    )
    return arrival, ttft, itl


# ---- arrivals and lengths ------------------------------------------------------------------------


def poisson(rng: np.random.Generator, rate: float, n: int) -> np.ndarray[Any, Any]:
    return np.cumsum(rng.exponential(1.0 / rate, n))


def gamma_renewal(rng: np.random.Generator, rate: float, n: int, cv: float = 2.0) -> np.ndarray[Any, Any]:
    k = 1.0 / cv**2
    return np.cumsum(rng.gamma(k, 1.0 / (k * rate), n))


def mmpp(rng: np.random.Generator, rate: float, n: int, dwell: float) -> np.ndarray[Any, Any]:
    """Two states of equal mean dwell time, at 0.4× and 1.6× the mean rate."""
    rates = (0.4 * rate, 1.6 * rate)
    out: list[float] = []
    t, state = 0.0, 0
    while len(out) < n:
        end = t + rng.exponential(dwell)
        while True:
            t += rng.exponential(1.0 / rates[state])
            if t > end:
                t = end
                break
            out.append(t)
        state = 1 - state
    return np.array(out[:n])


ARRIVALS: dict[str, Callable[[np.random.Generator, float, int], np.ndarray[Any, Any]]] = {
    "Poisson": poisson,
    "gamma renewal, CV 2": gamma_renewal,
    "MMPP ×0.4/×1.6, 2 s dwell": lambda rng, rate, n: mmpp(rng, rate, n, 2.0),
    "MMPP ×0.4/×1.6, 20 s dwell": lambda rng, rate, n: mmpp(rng, rate, n, 20.0),
}


def lognormal(
    rng: np.random.Generator, mean: float, cv: float, low: int, high: int, n: int
) -> np.ndarray[Any, Any]:
    s2 = math.log1p(cv * cv)
    raw = rng.lognormal(math.log(mean) - s2 / 2.0, math.sqrt(s2), n)
    return np.clip(np.rint(raw), low, high).astype(np.int64)


@dataclass(frozen=True)
class Case:
    name: str
    parms: ServiceParms
    batch: int
    lengths: str  # "lognormal" (512/256, CV 0.6) or "fixed:<in>/<out>"
    arrivals: tuple[str, ...]
    loads: tuple[float, ...]


CASES = (
    Case("8B on A100, batch 64, log-normal lengths", A100, 64, "lognormal", tuple(ARRIVALS), (0.3, 0.5, 0.7)),
    Case("large batch (N=64), fixed 256/128", LARGE, 64, "fixed:256/128", tuple(ARRIVALS)[:2], (0.9, 0.95)),
    Case("WVA e2e A100 (N=4), fixed 128/128", A100, 4, "fixed:128/128", tuple(ARRIVALS)[:2], (0.5, 0.8)),
)


def _lengths(
    spec: str, rng: np.random.Generator, n: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    if spec == "lognormal":
        return lognormal(rng, 512, 0.6, 1, 4096, n), lognormal(rng, 256, 0.6, 2, 2048, n)
    fin, fout = spec.split(":")[1].split("/")
    return np.full(n, int(fin)), np.full(n, int(fout))


@dataclass(frozen=True)
class Row:
    case: str
    arrivals: str
    load: float
    rate: float
    idc: float
    measured: tuple[float, float]
    predicted: tuple[float, float]
    itl: tuple[float, float]  # p99 of the per-request mean ITL: measured, predicted

    def within(self) -> bool:
        return all(abs(p - m) <= TOLERANCE * m for p, m in zip(self.predicted, self.measured, strict=True))


def validate(factory: Callable[..., Any]) -> list[Row]:
    """Every case of :data:`CASES` on ``factory``'s engine; the model prefills chunked for the V1
    engine, at the batch's pace (WVA's accounting) otherwise."""
    chunked = factory is v1_engine
    rows: list[Row] = []
    for case in CASES:
        for name in case.arrivals:
            for load in case.loads:
                rng = np.random.default_rng(7)
                ins, outs = _lengths(case.lengths, rng, REQUESTS)
                lengths = RequestLengths(TokenLengths.from_samples(ins), TokenLengths.from_samples(outs))
                capacity = TailModel(case.parms, case.batch, lengths, chunked_prefill=chunked).rate_range[1]
                times = ARRIVALS[name](rng, load * capacity, REQUESTS)
                _, ttft, itl = serve(factory, case.parms, case.batch, times, ins, outs)
                measured = ttft[REQUESTS // 10 :]
                rate = (len(times) - 1) / (times[-1] - times[0])
                model = TailModel(
                    case.parms,
                    case.batch,
                    lengths,
                    burstiness_from_times(times, WINDOWS),
                    chunked_prefill=chunked,
                )
                rate = min(rate, model.rate_range[1])
                rows.append(
                    Row(
                        case.name,
                        name,
                        load,
                        rate,
                        model.arrival_idc(rate),
                        (float(np.quantile(measured, 0.95)), float(np.quantile(measured, 0.99))),
                        (model.ttft_quantile(rate, 0.95), model.ttft_quantile(rate, 0.99)),
                        (float(np.quantile(itl[REQUESTS // 10 :], 0.99)), model.itl_quantile(rate, 0.99)),
                    )
                )
    return rows


def read_azure() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    arrivals = read_trace(TRACE)
    return arrivals.times, arrivals.input_tokens, np.maximum(arrivals.output_tokens, 2)


def replayed(
    times: np.ndarray[Any, Any], ins: np.ndarray[Any, Any], outs: np.ndarray[Any, Any], scale: float
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """A trace at ``scale`` times its rate, as the simulator's ``rateScale`` replays it (seed 3): its
    arrival times, prompt and output tokens (at least two, so that every request has an ITL)."""
    arr = TraceTraffic(Arrivals(times, ins, outs), rate_scale=scale).arrivals(
        np.random.default_rng(3), math.inf
    )
    return arr.times, arr.input_tokens, np.maximum(arr.output_tokens, 2)


def minute_models(
    parms: ServiceParms,
    t: np.ndarray[Any, Any],
    ins: np.ndarray[Any, Any],
    outs: np.ndarray[Any, Any],
    chunked: bool,
) -> list[tuple[int, TailModel, float]]:
    """A replayed trace predicted minute by minute, after the first 10 % of its requests: per minute its
    requests, the model (batch 64, the trace's lengths, the burstiness of the five minutes around it over
    1–30 s windows) and its rate."""
    lengths = RequestLengths(TokenLengths.from_samples(ins), TokenLengths.from_samples(outs))
    minutes = (t[len(t) // 10 :] // 60).astype(int)
    parts = []
    for m in np.unique(minutes):
        around = (t >= (m - 2) * 60) & (t < (m + 3) * 60)
        n = int(np.sum(minutes == m))
        model = TailModel(
            parms, 64, lengths, burstiness_from_times(t[around], WINDOWS[:5]), chunked_prefill=chunked
        )
        parts.append((n, model, min(n / 60.0, model.rate_range[1])))
    return parts


def trace_rows(
    factory: Callable[..., Any],
) -> list[tuple[float, float, float, list[tuple[float, float, float]]]]:
    """The Azure trace at rate scales ×0.8 (thinned) and ×1 (as recorded), as the simulator's
    ``rateScale`` replays it, on the H100 profile, batch 64: (scale, mean rate, peak-minute load,
    [(level, measured, predicted)])."""
    times, ins, outs = read_azure()
    chunked = factory is v1_engine
    out = []
    for scale in (0.8, 1.0):
        t, i, o = replayed(times, ins, outs, scale)
        _, ttft, _ = serve(factory, H100, 64, t, i, o)
        warm = len(t) // 10
        parts = minute_models(H100, t, i, o, chunked)
        total = sum(n for n, _, _ in parts)

        def share(x: float, parts: list[tuple[int, TailModel, float]] = parts, total: int = total) -> float:
            return sum(n * m.predict(r, TailTargets(ttft=x)).ttft_miss for n, m, r in parts) / total

        levels = []
        for level in (0.95, 0.99):
            lo, hi = 1.0, 1e6
            for _ in range(50):
                mid = math.sqrt(lo * hi)
                lo, hi = (mid, hi) if share(mid) > 1 - level else (lo, mid)
            levels.append((level, float(np.quantile(ttft[warm:], level)), hi))
        capacity = parts[0][1].rate_range[1]
        peak = max(r for _, _, r in parts) / capacity
        out.append((scale, len(t) / t[-1], peak, levels))
    return out


@dataclass(frozen=True)
class CodeRow:
    share: float
    rate: float
    ttft: tuple[tuple[float, float], ...]  # (measured, predicted) at p95, p99
    itl: tuple[float, float]  # p99 of the per-request mean ITL: measured, predicted
    over: tuple[tuple[float, float], ...]  # share over the TTFT and the ITL target: measured, predicted


def code_rows(factory: Callable[..., Any] = v1_engine) -> list[CodeRow]:
    """The Azure code trace (2023; CC BY 4.0) on one A100 replica (batch 64) receiving a share of it at
    random (as one of several replicas behind a random router), minute by minute as :func:`trace_rows`
    predicts the conversation trace: each minute its own rate, the burstiness of the five minutes
    around it (1–30 s windows), the trace's lengths."""
    arrivals = read_trace(CODE_TRACE)
    times, ins, outs = arrivals.times, arrivals.input_tokens, np.maximum(arrivals.output_tokens, 2)
    chunked = factory is v1_engine
    out: list[CodeRow] = []
    for share in CODE_SHARES:
        t, i, o = replayed(times, ins, outs, share)
        _, ttft, itl = serve(factory, A100, 64, t, i, o)
        warm = len(t) // 10
        parts = minute_models(A100, t, i, o, chunked)

        def mixed(
            targets: TailTargets, parts: list[tuple[int, TailModel, float]] = parts
        ) -> tuple[float, float]:
            shares = [(n, m.predict(r, targets)) for n, m, r in parts]
            total = sum(n for n, _ in shares)
            return (
                sum(n * p.ttft_miss for n, p in shares) / total,
                sum(n * p.itl_miss for n, p in shares) / total,
            )

        def level(which: int, q: float) -> float:
            lo, hi = 1.0, 1e6
            for _ in range(50):
                mid = math.sqrt(lo * hi)
                over = mixed(TailTargets(ttft=mid) if which == 0 else TailTargets(itl=mid))[which]
                lo, hi = (mid, hi) if over > 1 - q else (lo, mid)
            return hi

        ttft_w, itl_w = ttft[warm:], itl[warm:]
        predicted = mixed(TailTargets(ttft=CODE_TARGETS[0], itl=CODE_TARGETS[1]))
        out.append(
            CodeRow(
                share,
                len(t) / t[-1],
                tuple((float(np.quantile(ttft_w, q)), level(0, q)) for q in (0.95, 0.99)),
                (float(np.quantile(itl_w, 0.99)), level(1, 0.99)),
                (
                    (float(np.mean(ttft_w > CODE_TARGETS[0])), predicted[0]),
                    (float(np.mean(itl_w > CODE_TARGETS[1])), predicted[1]),
                ),
            )
        )
    return out


def sizing_rows(factory: Callable[..., Any]) -> list[tuple[str, float, float, float, float]]:
    """Mean vs tail sizing on the Azure trace's lengths, A100 profile, batch 64, KV cache 65,536 tokens:
    (sizing, TTFT target, rate per replica, measured share within both targets, measured p99 TTFT)."""
    _, ins, outs = read_azure()
    kv = 65_536
    keep = ins + outs <= kv
    ins, outs = ins[keep], outs[keep]
    lengths = RequestLengths(TokenLengths.from_samples(ins), TokenLengths.from_samples(outs))
    load = Load(60.0, float(ins.mean()), float(outs.mean()))
    rows = []
    for ttft in (1000.0, 5000.0):
        for label, slo in (
            ("mean (WVA)", SLO(ttft=ttft, itl=50.0)),
            ("tail, 99 %", SLO(ttft=ttft, itl=50.0, attainment=99.0)),
        ):
            try:
                if slo.is_tail:
                    rate = size_tail_allocation(
                        accelerator="A100",
                        unit_cost=40.0,
                        acc_count=1,
                        parms=A100,
                        max_batch_size=64,
                        load=load,
                        slo=slo,
                        lengths=lengths,
                        kv_cache_tokens=kv,
                    ).max_rate_per_replica
                else:
                    rate = size_allocation(
                        accelerator="A100",
                        unit_cost=40.0,
                        acc_count=1,
                        parms=A100,
                        max_batch_size=64,
                        load=load,
                        slo=slo,
                    ).max_rate_per_replica
            except InfeasibleError:
                rows.append((label, ttft, math.nan, math.nan, math.nan))
                continue
            rng = np.random.default_rng(11)
            pick = rng.integers(0, len(ins), REQUESTS)
            times = poisson(rng, rate, REQUESTS)
            _, t, i = serve(factory, A100, 64, times, ins[pick], outs[pick], kv=kv)
            t, i = t[REQUESTS // 10 :], i[REQUESTS // 10 :]
            within = float(np.mean((t <= ttft) & (i <= 50.0)))
            rows.append((label, ttft, rate, within, float(np.quantile(t, 0.99))))
    return rows  # fmt: skip


def min_gpus_rows() -> list[tuple[str, dict[str, Any]]]:
    """``variant-autoscaler min-gpus --verify`` on the Azure trace (H100 profile, batch 64)."""
    rows = []
    for ttft in ("2000", "5000"):
        argv = [
            "min-gpus", "--trace", str(TRACE), "--alpha", "10", "--beta", "0.2", "--gamma", "10",
            "--delta", "0.02", "--max-batch-size", "64", "--ttft", ttft, "--itl", "50",
            "--attainment", "99", "--verify", "--json",
        ]  # fmt: skip
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            cli_main(argv)
        rows.append((" ".join(argv), json.loads(buffer.getvalue())))
    return rows


def speed_rows() -> list[tuple[int, float, float, float]]:
    """(batch, tail sizing ms, the same prefilled chunked, mean sizing ms): one cold sizing, median of
    repeated calls."""
    lengths = RequestLengths(
        TokenLengths.lognormal(512, 0.6, high=4096), TokenLengths.lognormal(256, 0.6, high=2048)
    )
    bursts = Burstiness((1.0, 5.0, 15.0, 60.0), (1.2, 2.0, 3.0, 5.0), rate=20.0)
    targets = TailTargets(ttft=1000.0, itl=50.0, joint_miss=0.01)
    out = []
    for n in (8, 64, 256):
        tail, chunked, mean = [], [], []
        for _ in range(15):
            t0 = time.perf_counter()
            TailModel(A100, n, lengths, bursts).max_rate(targets)
            tail.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            TailModel(A100, n, lengths, bursts, chunked_prefill=True).max_rate(targets)
            chunked.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            size_allocation(
                accelerator="A100", unit_cost=40.0, acc_count=1, parms=A100, max_batch_size=n,
                load=Load(600.0, 512.0, 256.0), slo=SLO(ttft=1000.0, itl=50.0), memo=False,
            )  # fmt: skip
            mean.append(time.perf_counter() - t0)
        ms = [1000 * float(np.median(x)) for x in (tail, chunked, mean)]
        out.append((n, ms[0], ms[1], ms[2]))
    return out


PLAN_VARIANTS = 1000
PLAN_FAMILIES = 24
PLAN_ACCELERATORS = 8


def plan_rows() -> list[tuple[str, int, float]]:
    """(path, candidates, seconds): the optimizer's candidate sizing for many variants of attainment
    classes (seeded: 24 model families, each with its own lengths and burstiness, on 8 accelerators,
    1,000 variants), cold, in the next cycle with the traffic unchanged, and in one where every family's
    workload moved by about 1 %; against the same candidates on means (the analyzer's batch, cold)."""
    rng = np.random.default_rng(5)
    accs = {
        f"ACC{k}": AcceleratorType(f"ACC{k}", f"DEV{k}", float(rng.uniform(10, 100)))
        for k in range(PLAN_ACCELERATORS)
    }
    families = []
    for _ in range(PLAN_FAMILIES):
        scale = float(rng.uniform(0.5, 2.0))
        profiles = tuple(
            Profile(
                name,
                1,
                64,
                ServiceParms(
                    *(float(x) * scale * float(rng.uniform(0.5, 1.5)) for x in (20.58, 0.41, 20.58, 0.041))
                ),
            )
            for name in accs
        )
        lengths = RequestLengths(
            TokenLengths.lognormal(float(rng.uniform(200, 1500)), 0.6, high=8192),
            TokenLengths.lognormal(float(rng.uniform(100, 400)), 0.6, high=2048),
        )
        bursts = Burstiness((30.0, 60.0, 120.0), tuple(float(x) for x in rng.uniform(1.0, 4.0, 3)), 20.0)
        families.append((profiles, Workload(lengths, bursts)))

    def variants(shift: float, tail: bool) -> list[tuple[VariantInput, None]]:
        slo = SLO(ttft=2000.0, itl=80.0, attainment=99.0) if tail else SLO(ttft=2000.0, itl=80.0)
        out = []
        for i in range(PLAN_VARIANTS):
            profiles, work = families[i % PLAN_FAMILIES]
            assert work.lengths is not None and work.burstiness is not None
            moved = Workload(
                RequestLengths(
                    TokenLengths(
                        tuple(v * shift for v in work.lengths.input.values), work.lengths.input.levels
                    ),
                    work.lengths.output,
                ),
                Burstiness(work.burstiness.windows_s, work.burstiness.idc, work.burstiness.rate * shift),
            ).rounded()
            out.append(
                (
                    VariantInput(
                        f"v{i}", "ns", f"m{i % PLAN_FAMILIES}", ServiceTarget("Premium", 1, slo), profiles,
                        Load(float(rng.uniform(60, 1200)), 512.0, 256.0), workload=moved,
                    ),
                    None,
                )
            )  # fmt: skip
        return out

    def timed(jobs: list[tuple[VariantInput, None]]) -> tuple[int, float]:
        t0 = time.perf_counter()
        sets = build_candidate_sets(jobs, accs, batch_count=1)
        return sum(s.sizings for s in sets), time.perf_counter() - t0

    clear_tail_memo()
    rows = []
    n, cold = timed(variants(1.0, True))
    rows.append(("tail, cold", n, cold))
    n, warm = timed(variants(1.0, True))
    rows.append(("tail, the next cycle (traffic unchanged)", n, warm))
    n, moved = timed(variants(1.01, True))
    rows.append(("tail, the next cycle (every workload moved by 1 %)", n, moved))
    clear_sizing_memo()
    n, mean = timed(variants(1.0, False))
    rows.append(("mean (the analyzer's batch), cold", n, mean))
    return rows


def _validation_table(rows: list[Row]) -> list[str]:
    lines = [
        "| profile and lengths | arrivals | load | IDC | p95 measured | p95 predicted | p99 measured "
        "| p99 predicted | within 20 % | ITL p99 measured / predicted |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        (m95, m99), (p95, p99) = r.measured, r.predicted
        lines.append(
            f"| {r.case} | {r.arrivals} | {r.load:.0%} | {r.idc:.2f} | {m95:,.0f} "
            f"| {p95:,.0f} ({(p95 - m95) / m95:+.0%}) | {m99:,.0f} | {p99:,.0f} ({(p99 - m99) / m99:+.0%}) "
            f"| {'yes' if r.within() else '**no**'} | {r.itl[0]:.1f} / {r.itl[1]:.1f} |"
        )
    return lines


def run(engine: str = ENGINE) -> str:
    factory = _factory(engine)
    started = time.perf_counter()
    rows = validate(factory)
    v1_rows = validate(v1_engine) if factory is default_engine else []
    traces = trace_rows(factory)
    v1_traces = trace_rows(v1_engine) if factory is default_engine else []
    code = code_rows()
    sizing = sizing_rows(factory)
    lower = min_gpus_rows()
    speed = speed_rows()
    plans = plan_rows()
    elapsed = time.perf_counter() - started
    which = f"`{engine}`" if engine else "the emulator's engine (`vllm_emulator.engine.Engine`)"
    lines = [
        "## Tail latency: predicted vs measured, and sizing for attainment",
        "",
        f"Command: `python bench/tail.py` ({elapsed:.0f} s; `BENCH_TAIL_REQUESTS={REQUESTS}` arrivals per "
        f"point, seed 7). Measured on {which} on a virtual clock: one replica, every request served (no "
        "queue bound), the first 10 % left out. Predicted by `core.tail.TailModel` from the arrival rate, "
        "the arrivals' index of dispersion (measured from the arrival times over 1–60 s windows, as the "
        "operator measures counts) and the length distributions. Target: p95 and p99 TTFT within 20 % of "
        "the measured. Another engine: `python bench/tail.py --engine module:factory` (see the script).",
        "",
        "### Validation: p95 / p99 TTFT (ms)",
        "",
        "Load = arrival rate / the model's top rate μ_N. IDC = the index of dispersion one replica's "
        "arrivals show over one service time at a full batch (1 for Poisson).",
        "",
    ]
    lines += _validation_table(rows)
    ok = sum(r.within() for r in rows)
    lines += [
        "",
        f"{ok} of {len(rows)} points within 20 % at both p95 and p99. The ITL column is the p99 of the "
        "per-request mean ITL (`(finish − first token) / (output tokens − 1)`, as the simulator judges "
        "it) against the model's, which takes the batch a request in service sees at one instant.",
        "",
    ]
    if v1_rows:
        ok = sum(r.within() for r in v1_rows)
        lines += [
            "### Validation on the vLLM-V1-like engine (chunked prefill)",
            "",
            "The same points on `vllm_emulator.engine_v1` (the simulator's default engine: a 2,048-token "
            "step budget, chunked prefill, step costs matching the profile at the requests' mean context), "
            "predicted with `chunked_prefill=True` and the engine's budget: a prompt is prefilled in the "
            "steps, beside the running decodes, after the rest of the step under way (which may carry a "
            "chunk of another prompt) and with any prompt arriving in the same step, over as many steps "
            "as the budget left beside the decodes needs (`core/chunked.py`; WVA's accounting, above, "
            "prefills at the pace of the whole batch, `γ + δ·L·(i + 1)`, which on this engine "
            "over-predicts TTFT by ten times at a batch of 64).",
            "",
            *_validation_table(v1_rows),
            "",
            f"{ok} of {len(v1_rows)} points within 20 % at both p95 and p99.",
            "",
        ]
    lines += [
        "### The Azure LLM inference trace (2023, conversation; CC BY 4.0), minute by minute",
        "",
        "H100 profile of the bundled node-failure scenario (α 10, β 0.2, γ 10, δ 0.02 ms), batch 64; the "
        "trace as recorded and at 0.8× its rate (thinned at random, the simulator's `rateScale`). Each "
        "minute is predicted with its own rate, the burstiness of the five minutes around it and the "
        "trace's lengths; the minutes are mixed by their requests. Served by "
        + ("the engine above and by the V1-like engine (predicted chunked)." if v1_traces else f"{which}."),
        "",
        "| engine | rate scale | mean req/s | busiest minute's load | p95 measured | p95 predicted "
        "| p99 measured | p99 predicted | within 20 % |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    engines = [("as above", traces), ("V1-like, chunked", v1_traces)] if v1_traces else [("as above", traces)]
    for engine_name, rows_of in engines:
        for scale, rate, peak, levels in rows_of:
            (_, m95, p95), (_, m99, p99) = levels
            within = abs(p95 - m95) <= TOLERANCE * m95 and abs(p99 - m99) <= TOLERANCE * m99
            lines.append(
                f"| {engine_name} | {scale:g}× | {rate:.2f} | {peak:.0%} | {m95:,.0f} "
                f"| {p95:,.0f} ({(p95 - m95) / m95:+.0%}) | {m99:,.0f} "
                f"| {p99:,.0f} ({(p99 - m99) / m99:+.0%}) | {'yes' if within else '**no**'} |"
            )
    lines += [
        "",
        "### The Azure LLM inference trace (2023, code; CC BY 4.0): clumped arrivals, short outputs",
        "",
        "The code-completion hour of the same dataset (shipped in `bench/traces/`): 2.6 req/s on average, "
        "in clumps (IDC 13 over 1 s, 160 over 60 s; minutes at 8–10 req/s between silent ones), prompts of "
        "2,048 tokens on average (p99 7,436), outputs of 28. One replica of the A100 profile, batch 64, on "
        "the V1-like engine (a 2,048-token step budget), receiving a share of the trace at random, as one "
        "of several replicas behind a random router; predicted minute by minute as above (chunked). Also "
        f"the shares of requests over a TTFT of {CODE_TARGETS[0]:,.0f} ms and over a mean ITL of "
        f"{CODE_TARGETS[1]:g} ms, measured / predicted: what sizing for 99 % within both has to get right.",
        "",
        "| share of the trace | req/s | p95 TTFT measured / predicted | p99 TTFT measured / predicted "
        "| p99 ITL measured / predicted | over the TTFT target | over the ITL target |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in code:
        (m95, p95), (m99, p99) = row.ttft
        (mt, pt), (mi, pi) = row.over
        lines.append(
            f"| {row.share:g} | {row.rate:.2f} | {m95:,.0f} / {p95:,.0f} ({(p95 - m95) / m95:+.0%}) "
            f"| {m99:,.0f} / {p99:,.0f} ({(p99 - m99) / m99:+.0%}) "
            f"| {row.itl[0]:.1f} / {row.itl[1]:.1f} | {mt:.2%} / {pt:.2%} | {mi:.2%} / {pi:.2%} |"
        )
    lines += [
        "",
        "Short outputs next to a clump of long prompts are what miss the ITL target: a request's few "
        "decode steps carry chunks of the prompts that arrived behind it (`core/neighbours.py`, "
        "`core/chunked.py`), each such step 104 ms on this profile against a 21 ms decode step.",
        "",
        "### Sizing a long-context trace: mean vs tail",
        "",
        "The Azure trace's prompt and output lengths (mean 1,155 / 211 tokens, p99 4,142 prompt tokens) "
        "on the A100 profile, batch 64, a KV cache of 65,536 tokens, ITL target 50 ms. *Mean* sizes the "
        "rate per replica so that the mean TTFT and ITL meet the targets (WVA); *tail* so that 99 % of "
        "requests meet both. Each rate is then served by one engine replica (Poisson arrivals, lengths "
        "drawn from the trace) and the share of requests within both targets measured.",
        "",
        "| sizing | TTFT target | rate per replica (req/s) | within both, measured "
        "| p99 TTFT measured (ms) |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, ttft, rate, within, p99 in sizing:
        if math.isnan(rate):
            lines.append(f"| {label} | {ttft:,.0f} ms | infeasible | — | — |")
        else:
            lines.append(f"| {label} | {ttft:,.0f} ms | {rate:.3f} | {100 * within:.2f} % | {p99:,.0f} |")
    lines += [
        "",
        "### The perfect-system lower bound on the Azure trace",
        "",
        "`variant-autoscaler min-gpus` (one model on the H100 profile, batch 64, ITL ≤ 50 ms, 99 % within "
        "both targets, 60 s intervals, instant scaling), verified by replaying the trace through the "
        "engine with those replicas (least-loaded routing):",
        "",
        "| TTFT target | GPU-hours | peak GPUs | mean GPUs | static pool for the peak (GPU-h) "
        "| measured within both |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for argv, result in lower:
        ttft = argv.split("--ttft ")[1].split()[0]
        v = result["verified"]
        lines.append(
            f"| {int(ttft):,} ms | {result['gpu_hours']:.2f} | {result['peak_gpus']} "
            f"| {result['mean_gpus']:.2f} | {result['static_peak_gpu_hours']:.2f} "
            f"| {100 * v['within_both']:.2f} % |"
        )
    shown = lower[0][0].replace(str(TRACE), "../shared/traces/azure-llm-inference-2023-conv.csv")
    lines += [
        "",
        f"Command: `variant-autoscaler {shown}`.",
        "",
        "### Speed of one sizing",
        "",
        "`TailModel(...).max_rate(...)` for TTFT 1 s and ITL 50 ms with 99 % within both (log-normal "
        "lengths, a bursty stream), prefilled at the batch's pace and chunked (`chunked_prefill=True`, "
        "2,048 tokens a step), against the mean sizing `size_allocation(..., memo=False)`; the median "
        "of 15 calls, on a machine shared with other jobs (the figures are inflated by its load).",
        "",
        "| batch | tail sizing | tail sizing, chunked | mean sizing |",
        "|---:|---:|---:|---:|",
    ]
    for n, tail, chunked, mean in speed:
        lines.append(f"| {n} | {tail:.2f} ms | {chunked:.2f} ms | {mean:.3f} ms |")
    lines += [
        "",
        "### Many candidates at once (the planner's path)",
        "",
        f"The candidate sizing of one plan: {PLAN_VARIANTS:,} variants of attainment classes (seeded: "
        f"{PLAN_FAMILIES} model families, each with its own length distribution and burstiness, on "
        f"{PLAN_ACCELERATORS} accelerators, one batch size), through `build_candidate_sets` as the optimizer "
        "calls it. The tail path sizes each distinct server (model, accelerator, batch, workload as the "
        "planner rounds it, targets) once, remembers it for later cycles, and evaluates the model once per "
        "server at all its variants' rates. Variants of one family share a server, as variants of one model "
        "do in a cluster.",
        "",
        "| path | candidates | time | per candidate |",
        "|---|---:|---:|---:|",
    ]
    for label, n, seconds in plans:
        lines.append(f"| {label} | {n:,} | {seconds:.2f} s | {1e6 * seconds / max(n, 1):.0f} µs |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engine", default=ENGINE, help="module:factory of another engine (see above)")
    args = parser.parse_args(argv)
    print(run(args.engine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
