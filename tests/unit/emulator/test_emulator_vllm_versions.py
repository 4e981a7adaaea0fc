"""The engine flags, step-cost presets and the metric sets of each vLLM version."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from vllm_emulator.config import parse_args
from vllm_emulator.costmodel import PRESETS, from_profile, preset
from vllm_emulator.engine import EngineOutput
from vllm_emulator.engine_v1 import V1Config, V1Engine
from vllm_emulator.errors import ConfigError
from vllm_emulator.metric_sets import DEFAULT_VERSION, VERSIONS, families_for
from vllm_emulator.metrics import (
    ITERATION_TOKENS_BUCKETS,
    EmulatorMetrics,
    Histogram,
    VllmCollector,
    build_registry,
)

ITL = "vllm:inter_token_latency_seconds"
TPOT = "vllm:time_per_output_token_seconds"
GPU_NAMES = ("vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_hits")
ALWAYS = (
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:num_preemptions", "vllm:prompt_tokens",
    "vllm:generation_tokens", "vllm:request_success", "vllm:iteration_tokens_total",
    "vllm:time_to_first_token_seconds", "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds", "vllm:cache_config_info",
)  # fmt: skip


def _exposition(version: str, engine: str = "v1") -> dict[str, object]:
    cfg = parse_args(["--engine", engine, "--vllm-version", version, "--max-num-seqs", "4"], {})
    metrics = EmulatorMetrics("org/m", cfg.engine.max_model_len)
    registry = build_registry(
        VllmCollector(
            metrics,
            running=lambda: 1,
            waiting=lambda: 0,
            kv_usage=lambda: 0.5,
            version=version,
            cache_info=cfg.cache_info(),
        )
    )
    return {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}


@pytest.mark.parametrize("version", VERSIONS)
def test_each_version_exports_only_its_families(version: str) -> None:
    families = _exposition(version)
    for name in ALWAYS:
        assert name in families, name
    assert (ITL in families) == (version != "0.10")
    assert (TPOT in families) == (version != "0.12")
    for name in GPU_NAMES:
        assert (name in families) == (version == "0.10"), name
    assert ("vllm:request_time_per_output_token_seconds" in families) == (version != "0.10")
    assert ("vllm:engine_sleep_state" in families) == (version == "0.12")
    assert len({f.name for f in families_for(version)}) == len(families_for(version))
    if version == "0.11":
        assert "DEPRECATED" in families[TPOT].documentation  # type: ignore[attr-defined]


def test_the_default_version_is_the_newest() -> None:
    assert DEFAULT_VERSION == VERSIONS[-1] == parse_args([], {}).vllm_version


@pytest.mark.parametrize("engine", ["v1", "wva"])
def test_cache_config_info_carries_the_cache_fields_and_no_model_name(engine: str) -> None:
    info = _exposition("0.12", engine)["vllm:cache_config_info"]
    (sample,) = info.samples  # type: ignore[attr-defined]
    labels = sample.labels
    assert "model_name" not in labels and labels["engine"] == "0" and sample.value == 1.0
    if engine == "v1":
        assert labels["block_size"] == "16" and labels["num_gpu_blocks"] == str(131_072 // 16)
        assert labels["enable_prefix_caching"] == "True"
    else:  # tokens, not blocks
        assert labels["block_size"] == "1" and labels["num_gpu_blocks"] == "131072"
    with pytest.raises(ValueError):
        VllmCollector(
            EmulatorMetrics("m", 10),
            running=lambda: 0,
            waiting=lambda: 0,
            kv_usage=lambda: 0,
            cache_info={"model_name": "m", "engine": "0"},
        )


def test_a_run_of_growing_gaps_is_bucketed_as_its_observations_one_by_one() -> None:
    bounds = [0.01, 0.025, 0.05, 0.075, 0.1]
    run, single = Histogram(bounds), Histogram(bounds)
    run.observe_run(0.008, 0.0007, 120, 3)
    for i in range(120):
        single.observe(0.008 + i * 0.0007, 3)
    assert run.buckets() == single.buckets()
    assert run.count == single.count and run.sum == pytest.approx(single.sum)


def test_iteration_tokens_of_the_wva_engine_keep_the_sum_and_the_step_count() -> None:
    metrics = EmulatorMetrics("m", 8192)
    metrics.record(EngineOutput(generation_tokens=30, steps=0))  # prefills before any decode step
    metrics.record(EngineOutput(generation_tokens=40, steps=10))
    assert metrics.iteration_tokens.count == 10 and metrics.iteration_tokens.sum == pytest.approx(70)
    assert ITERATION_TOKENS_BUCKETS[0] == 1 and ITERATION_TOKENS_BUCKETS[-1] == 16384


def test_engine_flags() -> None:
    assert parse_args([], {}).engine_kind == "wva"
    cfg = parse_args(["--engine", "v1", "--hardware", "llama-3.1-8b/h100-80gb"], {})
    engine = cfg.engine
    assert isinstance(engine, V1Config) and cfg.engine_kind == "v1"
    assert engine.cost == PRESETS["llama-3.1-8b/h100-80gb"].cost
    assert engine.max_num_batched_tokens == 8192 and engine.num_gpu_blocks == 440_000 // 16
    argv = ["--engine", "v1", "--hardware", "llama-3.1-8b/a100-40gb", "--step-fixed-ms", "7"]
    argv += ["--block-size", "32", "--num-gpu-blocks-override", "900", "--max-num-batched-tokens", "4096"]
    argv += ["--prefix-hit-ratio", "0.3", "--prefix-caching", "off"]
    custom = parse_args(argv, {}).engine
    assert isinstance(custom, V1Config)
    assert (
        custom.cost.fixed_ms == 7.0
        and custom.cost.token_ms == PRESETS["llama-3.1-8b/a100-40gb"].cost.token_ms
    )
    assert (custom.block_size, custom.num_gpu_blocks, custom.max_num_batched_tokens) == (32, 900, 4096)
    assert custom.prefix_hit_ratio == 0.3 and not custom.enable_prefix_caching
    derived = parse_args(["--engine", "v1"], {"VLLM_EMULATOR_CONTEXT_REF_TOKENS": "100"}).engine
    assert isinstance(derived, V1Config)
    assert derived.cost == from_profile(20.58, 0.41, 20.58, 0.041, context_tokens=100)
    assert "engine=v1" in parse_args(["--engine", "v1"], {}).describe()


@pytest.mark.parametrize(
    "argv",
    [
        ["--engine", "v2"],
        ["--vllm-version", "0.9"],
        ["--engine", "v1", "--hardware", "llama-9000/tpu"],
        ["--engine", "v1", "--prefix-caching", "maybe"],
        ["--engine", "v1", "--prefix-hit-ratio", "2"],
        ["--engine", "v1", "--num-gpu-blocks-override", "10"],
    ],
)
def test_bad_engine_flags_are_rejected(argv: list[str]) -> None:
    with pytest.raises(ConfigError):
        parse_args(argv, {})


def test_a_profile_maps_onto_step_costs() -> None:
    cost = from_profile(20.0, 0.5, 30.0, 0.1, context_tokens=200)
    assert (cost.fixed_ms, cost.token_ms) == (20.0, 0.1) and cost.context_ms == pytest.approx(0.4 / 200)
    # decode at the reference context is the profile's decode(b)
    assert cost.fixed_ms + 8 * (cost.token_ms + 200 * cost.context_ms) == pytest.approx(20.0 + 0.5 * 8)
    assert from_profile(0.0, 0.0, 5.0, 0.0).fixed_ms == 5.0
    with pytest.raises(ConfigError):
        from_profile(1, 1, 1, 1, context_tokens=0)
    with pytest.raises(ConfigError):
        preset("nothing")
    for p in PRESETS.values():
        assert p.source and p.max_num_batched_tokens in (2048, 8192)


def test_a_preset_engine_reproduces_its_published_single_request_decode_time() -> None:
    # Llama-3.1-8B on H100: one request decodes at about 6.5 ms per token (the preset's source).
    engine = V1Engine(V1Config(cost=preset("llama-3.1-8b/h100-80gb").cost, num_gpu_blocks=4096))
    seq = engine.submit("a", 256, 129, now=0.0)
    engine.advance(1e6)
    assert seq.finish_time is not None and seq.first_token_time is not None
    itl_ms = 1000 * (seq.finish_time - seq.first_token_time) / 128
    assert 6.0 < itl_ms < 7.0
