"""The tail model against the emulator's engine at a few points: p95 and p99 TTFT within 20 %.

The same property as ``bench/tail.py`` (which covers many more points and reports them), on a virtual
clock: one replica of ``vllm_emulator.engine.Engine`` serves seeded arrivals; the model is given the
arrival rate, the arrivals' index of dispersion and the length distributions.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.core.tail import RequestLengths, TailModel, TokenLengths, burstiness_from_times
from vllm_emulator.costmodel import from_profile
from vllm_emulator.engine import Engine, EngineConfig
from vllm_emulator.engine import Profile as EngineProfile
from vllm_emulator.engine_v1 import V1Config, V1Engine

A100 = ServiceParms(alpha=20.58, beta=0.41, gamma=20.58, delta=0.041)
REQUESTS = 15_000


def _ttft(parms: ServiceParms, batch: int, times: Any, ins: Any, outs: Any) -> Any:
    engine = Engine(
        EngineConfig(
            profile=EngineProfile(parms.alpha, parms.beta, parms.gamma, parms.delta),
            max_num_seqs=batch,
            kv_cache_tokens=1 << 22,
            max_model_len=1 << 20,
        )
    )
    seqs = []
    for i, t in enumerate(times.tolist()):
        engine.advance(t)
        seqs.append(engine.submit(i, int(ins[i]), int(outs[i]), t))
    engine.advance(math.inf)
    return np.array([(s.first_token_time - s.arrival_time) * 1000.0 for s in seqs[REQUESTS // 10 :]])


def _lognormal(rng: np.random.Generator, mean: float, low: int, high: int) -> Any:
    s2 = math.log1p(0.36)
    raw = rng.lognormal(math.log(mean) - s2 / 2, math.sqrt(s2), REQUESTS)
    return np.clip(np.rint(raw), low, high).astype(np.int64)


@pytest.mark.parametrize(
    ("batch", "lengths", "arrivals", "load"),
    [
        (64, "lognormal", "poisson", 0.5),  # the bundled scenarios' 8B model: TTFT is mostly prefill
        (64, "lognormal", "gamma", 0.5),  # bursty arrivals (gamma renewal, CV 2)
        (4, "fixed", "poisson", 0.8),  # fixed lengths, small batch: TTFT is mostly the wait for a slot
    ],
)
def test_predicted_p95_and_p99_ttft_are_within_20_percent(
    batch: int, lengths: str, arrivals: str, load: float
) -> None:
    rng = np.random.default_rng(7)
    if lengths == "lognormal":
        ins, outs = _lognormal(rng, 512, 1, 4096), _lognormal(rng, 256, 2, 2048)
    else:
        ins, outs = np.full(REQUESTS, 128), np.full(REQUESTS, 128)
    dist = RequestLengths(TokenLengths.from_samples(ins), TokenLengths.from_samples(outs))
    rate = load * TailModel(A100, batch, dist).rate_range[1]
    if arrivals == "poisson":
        times = np.cumsum(rng.exponential(1.0 / rate, REQUESTS))
    else:
        times = np.cumsum(rng.gamma(0.25, 1.0 / (0.25 * rate), REQUESTS))
    measured = _ttft(A100, batch, times, ins, outs)
    model = TailModel(A100, batch, dist, burstiness_from_times(times, (1.0, 2.0, 5.0, 10.0, 30.0)))
    observed_rate = min((REQUESTS - 1) / (times[-1] - times[0]), model.rate_range[1])
    for level in (0.95, 0.99):
        predicted = model.ttft_quantile(observed_rate, level)
        assert predicted == pytest.approx(float(np.quantile(measured, level)), rel=0.2), level


def _ttft_v1(parms: ServiceParms, batch: int, times: Any, ins: Any, outs: Any, context: int) -> Any:
    engine = V1Engine(
        V1Config(
            cost=from_profile(parms.alpha, parms.beta, parms.gamma, parms.delta, context_tokens=context),
            max_num_seqs=batch,
            max_num_batched_tokens=2048,
            num_gpu_blocks=(1 << 22) // 16,
            max_model_len=1 << 16,
            prefix_hit_ratio=0.0,
        )
    )
    seqs = []
    for i, t in enumerate(times.tolist()):
        engine.advance(t)
        seqs.append(engine.submit(i, int(ins[i]), int(outs[i]), t))
    engine.advance(math.inf)
    return np.array([(s.first_token_time - s.arrival_time) * 1000.0 for s in seqs[REQUESTS // 10 :]])


@pytest.mark.parametrize("batch", [64, 4])
def test_with_chunked_prefill_the_model_follows_the_v1_engine(batch: int) -> None:
    # vLLM V1 prefills a prompt inside one step beside the running decodes: a TTFT of tens of ms where
    # WVA's accounting (prefill at the whole batch's pace) says a second.
    rng = np.random.default_rng(7)
    ins, outs = _lognormal(rng, 512, 1, 4096), _lognormal(rng, 256, 2, 2048)
    dist = RequestLengths(TokenLengths.from_samples(ins), TokenLengths.from_samples(outs))
    model = TailModel(A100, batch, dist, chunked_prefill=True)
    rate = 0.5 * model.rate_range[1]
    times = np.cumsum(rng.exponential(1.0 / rate, REQUESTS))
    context = int(np.sum(outs * (ins + outs / 2.0)) / np.sum(outs))  # as the simulator configures V1
    measured = _ttft_v1(A100, batch, times, ins, outs, context)
    observed_rate = (REQUESTS - 1) / (times[-1] - times[0])
    for level in (0.95, 0.99):
        predicted = model.ttft_quantile(observed_rate, level)
        assert predicted == pytest.approx(float(np.quantile(measured, level)), rel=0.2), level
    batched = TailModel(A100, batch, dist).ttft_quantile(observed_rate, 0.99)
    assert batched > model.ttft_quantile(observed_rate, 0.99)


@pytest.mark.parametrize("load", [0.3, 0.7])
def test_chunked_ttft_counts_the_prompts_in_the_step_under_way(load: float) -> None:
    # An arrival on a V1 server waits for the step under way, which often carries another request's
    # prompt, and may share its own step with one: at 70 % load the p99 TTFT is about a fifth above the
    # "half a decode step + own step" of a server that only ever prefills alone.
    rng = np.random.default_rng(11)
    ins, outs = _lognormal(rng, 512, 1, 4096), _lognormal(rng, 256, 2, 2048)
    dist = RequestLengths(TokenLengths.from_samples(ins), TokenLengths.from_samples(outs))
    model = TailModel(A100, 64, dist, chunked_prefill=True)
    rate = load * model.rate_range[1]
    times = np.cumsum(rng.exponential(1.0 / rate, REQUESTS))
    context = int(np.sum(outs * (ins + outs / 2.0)) / np.sum(outs))
    measured = _ttft_v1(A100, 64, times, ins, outs, context)
    observed_rate = (REQUESTS - 1) / (times[-1] - times[0])
    for level in (0.95, 0.99):
        predicted = model.ttft_quantile(observed_rate, level)
        assert predicted == pytest.approx(float(np.quantile(measured, level)), rel=0.12), level


def test_chunked_ttft_under_arrivals_clustered_below_a_second() -> None:
    # Gamma gaps of CV 2 bunch arrivals within tens of ms: several prompts land in one step. The IDC is
    # measured over 1 s and more; below that the model follows the flat curve's power law, not a line to
    # 1 (which under-predicted this point's p95 and p99 by 37 % and 36 %).
    rng = np.random.default_rng(7)
    ins, outs = _lognormal(rng, 512, 1, 4096), _lognormal(rng, 256, 2, 2048)
    dist = RequestLengths(TokenLengths.from_samples(ins), TokenLengths.from_samples(outs))
    rate = 0.5 * TailModel(A100, 64, dist, chunked_prefill=True).rate_range[1]
    times = np.cumsum(rng.gamma(0.25, 1.0 / (0.25 * rate), REQUESTS))
    context = int(np.sum(outs * (ins + outs / 2.0)) / np.sum(outs))
    measured = _ttft_v1(A100, 64, times, ins, outs, context)
    bursts = burstiness_from_times(times, (1.0, 2.0, 5.0, 10.0, 30.0))
    model = TailModel(A100, 64, dist, bursts, chunked_prefill=True)
    observed_rate = (REQUESTS - 1) / (times[-1] - times[0])
    for level in (0.95, 0.99):
        predicted = model.ttft_quantile(observed_rate, level)
        assert predicted == pytest.approx(float(np.quantile(measured, level)), rel=0.2), level
