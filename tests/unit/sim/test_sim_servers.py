"""Which engine the simulated replicas run, and how a scenario file configures it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from test_sim_config import minimal

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.config import parse_scenario
from variant_autoscaler.sim.replica import EngineServer, v1_config
from variant_autoscaler.sim.scenario import Profile, ServerSpec
from variant_autoscaler.sim.scenarios import BUNDLED, load_bundled
from vllm_emulator.costmodel import PRESETS, from_profile
from vllm_emulator.engine import Engine
from vllm_emulator.engine_v1 import V1Engine


def _with(settings: dict[str, Any] | None = None, servers: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = copy.deepcopy(minimal())
    if settings is not None:
        doc["settings"] = settings
    if servers is not None:
        doc["models"][0]["servers"] = servers
    return doc


def test_scenario_files_default_to_the_v1_engine_calibrated_on_their_traffic() -> None:
    profile = parse_scenario(_with()).models[0].profiles[0]
    assert profile.server is not None and profile.server.engine == "v1"
    # fixed 128 in, uniform 10..20 out: the decode-step-weighted mean context is 128 + E[L²]/(2·E[L])
    assert profile.server.context_ref_tokens in range(135, 137)
    assert isinstance(EngineServer(profile, 4, seed=0)._engine, V1Engine)
    config = v1_config(profile, profile.server, 4, seed=0)
    assert config.cost == from_profile(
        20.58, 0.41, 20.58, 0.041, context_tokens=profile.server.context_ref_tokens
    )
    assert config.max_num_batched_tokens == 2048 and config.num_gpu_blocks == 131_072 // 16


def test_the_wva_engine_stays_a_scenario_setting_and_the_python_default() -> None:
    profile = parse_scenario(_with(settings={"engine": "wva"})).models[0].profiles[0]
    assert profile.server is not None and profile.server.engine == "wva"
    assert isinstance(EngineServer(profile, 4, seed=0)._engine, Engine)
    bare = Profile("A100", 1, 4, 10.0, 0.1, 10.0, 0.01)  # server=None: what the Python API builds
    assert isinstance(EngineServer(bare, 4, seed=0)._engine, Engine)


def test_servers_take_a_preset_and_overrides() -> None:
    servers = {
        "A100": {
            "hardware": "llama-3.1-8b/a100-80gb",
            "stepCostMs": {"fixed": 9.0},
            "maxNumBatchedTokens": 4096,
            "blockSize": 32,
            "prefixHitRatio": 0.25,
            "contextRefTokens": 500,
        }
    }
    profile = parse_scenario(_with(servers=servers)).models[0].profiles[0]
    assert profile.server == ServerSpec(
        hardware="llama-3.1-8b/a100-80gb",
        fixed_ms=9.0,
        max_num_batched_tokens=4096,
        block_size=32,
        prefix_hit_ratio=0.25,
        context_ref_tokens=500,
    )
    config = v1_config(profile, profile.server, 4, seed=0)
    preset = PRESETS["llama-3.1-8b/a100-80gb"]
    assert config.cost.fixed_ms == 9.0 and config.cost.token_ms == preset.cost.token_ms
    assert (
        config.block_size == 32 and config.prefix_hit_ratio == 0.25 and config.max_num_batched_tokens == 4096
    )


@pytest.mark.parametrize(
    ("settings", "servers", "message"),
    [
        ({"engine": "v2"}, None, "engine"),
        (None, {"H100": {"hardware": "llama-3.1-8b/h100-80gb"}}, "servers names no profile"),
        (None, {"A100": {"hardware": "nothing/here"}}, "unknown hardware preset"),
        (None, {"A100": {"prefixHitRatio": 2}}, "prefixHitRatio"),
    ],
)
def test_bad_server_settings_name_the_field(
    settings: dict[str, Any] | None, servers: dict[str, Any] | None, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_scenario(_with(settings=settings, servers=servers))


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_scenarios_run_the_v1_engine(name: str) -> None:
    for model in load_bundled(name).models:
        for profile in model.profiles:
            assert profile.server is not None and profile.server.engine == "v1"
