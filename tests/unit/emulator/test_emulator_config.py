"""Flags, VLLM_EMULATOR_* variables and WVA's emulator variables."""

from __future__ import annotations

import pytest

from vllm_emulator.config import parse_args
from vllm_emulator.errors import ConfigError


def test_defaults() -> None:
    cfg = parse_args([], {})
    p = cfg.engine.profile
    assert (p.alpha, p.beta, p.gamma, p.delta) == (20.58, 0.41, 20.58, 0.041)
    assert cfg.model == "default/default" and cfg.port == 8000
    assert cfg.engine.max_num_seqs == 256 and cfg.engine.time_scale == 1.0
    assert str(cfg.output_tokens) == "128"


def test_flag_beats_env_beats_wva_variable() -> None:
    env = {"MAX_BATCH_SIZE": "8", "VLLM_EMULATOR_MAX_NUM_SEQS": "16"}
    assert parse_args([], {"MAX_BATCH_SIZE": "8"}).engine.max_num_seqs == 8
    assert parse_args([], env).engine.max_num_seqs == 16
    assert parse_args(["--max-num-seqs", "32"], env).engine.max_num_seqs == 32
    assert parse_args(["--max-batch-size", "4"], env).engine.max_num_seqs == 4


def test_port_from_port_variable_and_prefixed_variable() -> None:
    assert parse_args([], {"PORT": "80"}).port == 80
    assert parse_args([], {"PORT": "80", "VLLM_EMULATOR_PORT": "9000"}).port == 9000
    assert parse_args(["--port", "0"], {"PORT": "80"}).port == 0


def test_wva_emulator_variables_map_onto_ours() -> None:
    env = {
        "MODEL_NAME": "default/default",
        "DECODE_TIME": "20",
        "PREFILL_TIME": "20",
        "MAX_BATCH_SIZE": "8",
        "AVG_TOKENS": "128",
        "TOKENS_DISTRIBUTION": "deterministic",
        "MEM_SIZE": "80000",
        "MODEL_SIZE": "25000",
        "KVC_PER_TOKEN": "4",
        "MAX_SEQ_LEN": "2048",
    }
    cfg = parse_args([], env)
    p = cfg.engine.profile
    assert (p.alpha, p.beta, p.gamma, p.delta) == (20.0, 0.0, 20.0, 0.0)
    assert cfg.engine.max_num_seqs == 8
    assert cfg.engine.kv_cache_tokens == 9750  # (0.8*80000 - 25000) / 4
    assert cfg.engine.max_model_len == 2048
    assert str(cfg.output_tokens) == "fixed:128"


@pytest.mark.parametrize(
    ("kind", "spec"),
    [("uniform", "uniform:1:200"), ("uniform-narrow", "uniform:50:150"), ("deterministic", "fixed:100")],
)
def test_wva_token_distributions(kind: str, spec: str) -> None:
    assert str(parse_args([], {"AVG_TOKENS": "100", "TOKENS_DISTRIBUTION": kind}).output_tokens) == spec


def test_our_profile_variables_override_wva_decode_time() -> None:
    cfg = parse_args([], {"DECODE_TIME": "50", "VLLM_EMULATOR_BETA": "0.5"})
    assert (cfg.engine.profile.alpha, cfg.engine.profile.beta) == (50.0, 0.5)


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        ([], {"DECODE_TIME": "fast"}),
        ([], {"TOKENS_DISTRIBUTION": "bimodal"}),
        ([], {"MEM_SIZE": "10000"}),  # 0.8*10000 - 25000 < 0
        ([], {"VLLM_EMULATOR_TIME_SCALE": "abc"}),
        (["--time-scale", "0"], {}),
        (["--kv-cache-tokens", "100"], {}),  # smaller than max-model-len
        (["--output-tokens", "uniform:9:1"], {}),
        (["--log-level", "loud"], {}),
        (["--port", "70000"], {}),
        (["--model", ""], {}),
    ],
)
def test_bad_configuration_is_rejected(argv: list[str], env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        parse_args(argv, env)
