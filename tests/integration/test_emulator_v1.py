"""The ``vllm-emulator`` process with the V1-like engine: step costs, chunks, prefix cache, preemption."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from vllm_emulator.distributions import parse_distribution
from vllm_emulator.loadgen import LoadSpec, PromptSharing, run_load
from vllm_emulator.process import EmulatorProcess
from vllm_emulator.tokenizer import generate_text

MODEL = "test/v1"
SCALE = 20.0
FIXED, TOKEN = 10.0, 0.05  # ms; no context part, so single-request timings are exact
V1 = [
    "--engine", "v1", "--model", MODEL, "--time-scale", str(SCALE), "--step-fixed-ms", str(FIXED),
    "--step-token-ms", str(TOKEN), "--step-context-ms", "0", "--max-model-len", "2048",
]  # fmt: skip


def scrape(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families: dict[str, Any], sample: str, **labels: str) -> float:
    for family in families.values():
        for s in family.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise KeyError(sample)


def complete(url: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens}).encode()
    request = urllib.request.Request(
        f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as resp:
        result: dict[str, Any] = json.loads(resp.read())
    return result


def test_a_prompt_over_the_token_budget_is_prefilled_in_chunks() -> None:
    prompt, out, budget = 200, 11, 64
    with EmulatorProcess([*V1, "--max-num-batched-tokens", str(budget), "--max-num-seqs", "8"]) as emulator:
        assert complete(emulator.url, generate_text(prompt), out)["usage"]["completion_tokens"] == out
        m = scrape(emulator.url)
    # chunks of 64, 64, 64, 8 tokens, then ten decode steps of one token
    chunks = [64, 64, 64, 8]
    ttft = sum(FIXED + TOKEN * c for c in chunks) / 1000 / SCALE
    itl = (FIXED + TOKEN) / 1000 / SCALE
    assert value(m, "vllm:time_to_first_token_seconds_sum") == pytest.approx(ttft)
    assert value(m, "vllm:request_prefill_time_seconds_sum") == pytest.approx(ttft)
    assert value(m, "vllm:inter_token_latency_seconds_count") == out - 1
    assert value(m, "vllm:inter_token_latency_seconds_sum") == pytest.approx((out - 1) * itl)
    # vLLM's iteration tokens: prompt tokens counted in the step that yields the first token
    assert value(m, "vllm:iteration_tokens_total_count") == len(chunks) + out - 1
    assert value(m, "vllm:iteration_tokens_total_sum") == prompt + out
    assert value(m, "vllm:iteration_tokens_total_bucket", le="1.0") == len(chunks) - 1 + out - 1
    assert "vllm:time_per_output_token_seconds" not in m  # 0.12, the default, hides it


async def test_shared_prefixes_hit_the_cache_and_a_small_cache_preempts() -> None:
    args = [*V1, "--max-num-seqs", "16", "--num-gpu-blocks-override", "160", "--max-model-len", "1024"]
    args += ["--time-scale", "5"]  # long enough requests to crowd the cache
    with EmulatorProcess(args) as emulator:
        shared = LoadSpec(
            targets=(emulator.url,),
            schedule=((6.0, 25.0),),
            input_tokens=parse_distribution("300"),
            output_tokens=parse_distribution("uniform:50:400"),
            sharing=PromptSharing(parse_distribution("256"), groups=2),
            seed=3,
        )
        summary = await run_load(shared)
        assert summary.completed == summary.sent > 100 and summary.errors == 0
        m = scrape(emulator.url)
    queries = value(m, "vllm:prefix_cache_queries_total")
    hits = value(m, "vllm:prefix_cache_hits_total")
    # Every prompt is 300 tokens, 256 of them one of two shared prefixes: 16 full blocks hit once cached,
    # unless a preemption or eviction lost them meanwhile.
    assert queries >= 300 * summary.completed
    assert 0.5 * 256 / 300 < hits / queries <= 256 / 300
    assert value(m, "vllm:num_preemptions_total") > 0  # 160 blocks of 16 tokens for 16 long requests
    info = m["vllm:cache_config_info"].samples[0].labels
    assert info["num_gpu_blocks"] == "160" and info["block_size"] == "16" and "model_name" not in info


async def test_unique_prompts_never_hit() -> None:
    with EmulatorProcess([*V1, "--max-num-seqs", "8"]) as emulator:
        spec = LoadSpec(
            targets=(emulator.url,),
            schedule=((2.0, 20.0),),
            input_tokens=parse_distribution("64"),
            output_tokens=parse_distribution("4"),
            endpoint="chat",
        )
        summary = await run_load(spec)
        m = scrape(emulator.url)
    assert summary.completed > 10
    assert value(m, "vllm:prefix_cache_queries_total") == 64 * summary.completed
    assert value(m, "vllm:prefix_cache_hits_total") == 0
