"""Emulator settings from command-line flags and environment variables.

Precedence, highest first: a command-line flag; its ``VLLM_EMULATOR_<FLAG>`` environment variable
(``--max-num-seqs`` reads ``VLLM_EMULATOR_MAX_NUM_SEQS``); the WVA emulator's variable (so WVA's
manifests work unchanged); the default. ``--port`` also reads ``PORT``.

WVA variables and what they become:

==========================  ===========================================================================
``MODEL_NAME``              ``--model``
``DECODE_TIME`` (ms)        ``--alpha`` with ``--beta 0`` (WVA's per-token time does not depend on batch)
``PREFILL_TIME`` (ms)       ``--gamma`` with ``--delta 0`` (WVA declares it but never uses it)
``MAX_BATCH_SIZE``          ``--max-num-seqs``
``AVG_TOKENS``,             ``--output-tokens``: ``deterministic`` → ``fixed:AVG``; ``uniform`` →
``TOKENS_DISTRIBUTION``     ``uniform:1:2·AVG``; ``uniform-narrow`` → ``uniform:AVG/2:3·AVG/2``
``MEM_SIZE``, ``MODEL_SIZE``  ``--kv-cache-tokens`` = (0.8·MEM_SIZE − MODEL_SIZE) / KVC_PER_TOKEN
``KVC_PER_TOKEN`` (MB)      (WVA's defaults 80000, 25000 and 4 fill the ones not set)
``MAX_SEQ_LEN``             ``--max-model-len``
==========================  ===========================================================================

Engines (``--engine``): ``wva`` (the default) is the analyzer-accounting model of
:mod:`vllm_emulator.engine`, for WVA-parity tests; ``v1`` is the vLLM-V1-like scheduler of
:mod:`vllm_emulator.engine_v1`, whose step costs come from ``--step-*-ms``, else the ``--hardware``
preset, else the α, β, γ, δ profile (:func:`vllm_emulator.costmodel.from_profile`). ``--vllm-version``
picks the metric names (:mod:`vllm_emulator.metric_sets`).

Nothing reads the environment at import time: :func:`parse_args` takes it as an argument.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vllm_emulator import __version__
from vllm_emulator.costmodel import CostModel, from_profile, preset
from vllm_emulator.distributions import LengthDistribution, parse_distribution
from vllm_emulator.engine import EngineConfig, Profile
from vllm_emulator.engine_v1 import V1Config
from vllm_emulator.errors import ConfigError
from vllm_emulator.metric_sets import DEFAULT_VERSION, VERSIONS, cache_config_labels

__all__ = ["ENGINES", "ENV_PREFIX", "EmulatorConfig", "build_parser", "parse_args"]

ENGINES: tuple[str, ...] = ("wva", "v1")
_DEFAULT_KV_CACHE_TOKENS = 131_072

ENV_PREFIX = "VLLM_EMULATOR_"

# WVA's emulator defaults (tools/vllm-emulator): MB of GPU memory, model and KV per token.
_WVA_MEM_SIZE = 80_000.0
_WVA_MODEL_SIZE = 25_000.0
_WVA_KVC_PER_TOKEN = 4.0


@dataclass(frozen=True, slots=True)
class EmulatorConfig:
    """Everything the server needs; :attr:`engine` is the engine's part."""

    model: str
    host: str
    port: int
    engine: EngineConfig | V1Config
    output_tokens: LengthDistribution
    seed: int
    log_level: str = "info"
    vllm_version: str = DEFAULT_VERSION
    shutdown_delay: float = 0.0
    drain_timeout: float = 30.0
    header_timeout: float = 10.0

    @property
    def engine_kind(self) -> str:
        return "v1" if isinstance(self.engine, V1Config) else "wva"

    def cache_info(self) -> dict[str, str]:
        """``vllm:cache_config_info``'s labels (the wva engine counts KV in tokens: blocks of 1)."""
        e = self.engine
        if isinstance(e, V1Config):
            return cache_config_labels(
                self.vllm_version,
                block_size=e.block_size,
                num_gpu_blocks=e.num_gpu_blocks,
                enable_prefix_caching=e.enable_prefix_caching,
            )
        return cache_config_labels(
            self.vllm_version, block_size=1, num_gpu_blocks=e.kv_cache_tokens, enable_prefix_caching=False
        )

    def describe(self) -> str:
        e = self.engine
        if isinstance(e, V1Config):
            ratio = "content" if e.prefix_hit_ratio is None else f"{e.prefix_hit_ratio:g}"
            detail = (
                f"engine=v1 step_cost=({e.cost.describe()}) "
                f"max_num_batched_tokens={e.max_num_batched_tokens} "
                f"block_size={e.block_size} num_gpu_blocks={e.num_gpu_blocks} "
                f"prefix_caching={'on' if e.enable_prefix_caching else 'off'} prefix_hits={ratio}"
            )
        else:
            p = e.profile
            detail = (
                f"engine=wva alpha={p.alpha:g} beta={p.beta:g} gamma={p.gamma:g} delta={p.delta:g} "
                f"kv_cache_tokens={e.kv_cache_tokens}"
            )
        return (
            f"model={self.model!r} {detail} max_num_seqs={e.max_num_seqs} "
            f"max_model_len={e.max_model_len} output_tokens={self.output_tokens} noise={e.noise:g} "
            f"time_scale={e.time_scale:g} seed={self.seed} vllm_version={self.vllm_version}"
        )


@dataclass(frozen=True, slots=True)
class _Option:
    flag: str
    type: type
    default: object
    help: str
    wva: str | None = None


_OPTIONS: tuple[_Option, ...] = (
    _Option(
        "model", str, "default/default", "model name served and used as the model_name label", "MODEL_NAME"
    ),
    _Option("host", str, "0.0.0.0", "address to bind"),
    _Option("port", int, 8000, "port to listen on (also read from PORT)"),
    _Option("alpha", float, 20.58, "decode time per step, fixed part, ms: decode(b) = alpha + beta*b"),
    _Option("beta", float, 0.41, "decode time per step, per sequence in the batch, ms"),
    _Option("gamma", float, 20.58, "prefill time, fixed part, ms: prefill(L, b) = gamma + delta*L*b"),
    _Option("delta", float, 0.041, "prefill time per prompt token per sequence in the batch, ms"),
    _Option("max-num-seqs", int, 256, "maximum batch size (running sequences)", "MAX_BATCH_SIZE"),
    _Option(
        "kv-cache-tokens", int, None, f"KV-cache capacity in tokens (default {_DEFAULT_KV_CACHE_TOKENS})"
    ),
    _Option("max-model-len", int, 8_192, "maximum prompt + output tokens per request", "MAX_SEQ_LEN"),
    _Option(
        "output-tokens",
        str,
        "128",
        "output-length distribution when a request has no max_tokens (fixed:N, uniform:LO:HI, "
        "exponential:MEAN, lognormal:MEAN:SIGMA, sharegpt[:MEAN])",
    ),
    _Option(
        "noise", float, 0.0, "coefficient of variation of the random factor on every duration (0 = none)"
    ),
    _Option(
        "time-scale", float, 1.0, "run the clock this many times faster (every duration is divided by it)"
    ),
    _Option("seed", int, 0, "seed of the random generators (noise, output lengths)"),
    _Option(
        "engine", str, "wva", "engine model: wva (the analyzer's accounting) or v1 (vLLM V1's scheduler)"
    ),
    _Option(
        "vllm-version",
        str,
        DEFAULT_VERSION,
        f"metric names and labels of this vLLM version ({', '.join(VERSIONS)})",
    ),
    _Option(
        "max-num-batched-tokens",
        int,
        None,
        "v1: token budget per step (default: the hardware preset's, else 2048, vLLM's below 70 GiB)",
    ),
    _Option("block-size", int, 16, "v1: KV-cache block size in tokens"),
    _Option(
        "num-gpu-blocks-override", int, None, "v1: KV-cache blocks (default: kv-cache-tokens / block-size)"
    ),
    _Option(
        "prefix-caching", str, "on", "v1: prefix caching on or off (vLLM's --[no-]enable-prefix-caching)"
    ),
    _Option(
        "prefix-hit-ratio",
        float,
        None,
        "v1: this fraction of every prompt is a prefix-cache hit (default: match the prompts' content)",
    ),
    _Option("hardware", str, "", "v1: model x GPU preset for the step costs (e.g. llama-3.1-8b/h100-80gb)"),
    _Option("step-fixed-ms", float, None, "v1: step time, fixed part, ms (overrides the preset/profile)"),
    _Option("step-token-ms", float, None, "v1: step time per batched token, ms"),
    _Option("step-context-ms", float, None, "v1: step time per token of attention context, ms"),
    _Option(
        "context-ref-tokens",
        int,
        256,
        "v1 without a preset: context length at which the step costs reproduce the alpha..delta profile",
    ),
    _Option("log-level", str, "info", "logging level: debug, info, warning, error"),
    _Option(
        "shutdown-delay",
        float,
        0.0,
        "on SIGTERM, seconds to keep accepting requests (reporting /health 503) while the endpoint is "
        "withdrawn, before the listener closes (what a preStop sleep gives a pod behind a Service; the "
        "demo's and e2e's pods set 5)",
    ),
    _Option(
        "drain-timeout",
        float,
        30.0,
        "on SIGTERM, seconds to let requests in flight finish after the listener closed",
    ),
    _Option(
        "header-timeout",
        float,
        10.0,
        "seconds a new connection has to send its request headers before it is closed",
    ),
)


def _env_name(flag: str) -> str:
    return ENV_PREFIX + flag.upper().replace("-", "_")


def _convert(option: _Option, raw: str, source: str) -> object:
    try:
        value = option.type(raw)
    except ValueError:
        raise ConfigError(f"{source}={raw!r} is not a valid {option.type.__name__}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{source}={raw!r} must be finite")
    return value


def _wva_defaults(env: Mapping[str, str]) -> dict[str, object]:
    """Defaults derived from WVA's emulator variables (only those that are set)."""
    out: dict[str, object] = {}

    def number(name: str) -> float | None:
        raw = env.get(name)
        if raw is None or raw.strip() == "":
            return None
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{name}={raw!r} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{name}={raw!r} must be a finite number >= 0")
        return value

    if env.get("MODEL_NAME"):
        out["model"] = env["MODEL_NAME"]
    decode = number("DECODE_TIME")
    if decode is not None:
        out["alpha"], out["beta"] = decode, 0.0
    prefill = number("PREFILL_TIME")
    if prefill is not None:
        out["gamma"], out["delta"] = prefill, 0.0
    batch = number("MAX_BATCH_SIZE")
    if batch is not None:
        out["max_num_seqs"] = int(batch)
    seq_len = number("MAX_SEQ_LEN")
    if seq_len is not None:
        out["max_model_len"] = int(seq_len)
    mem, size, per_token = number("MEM_SIZE"), number("MODEL_SIZE"), number("KVC_PER_TOKEN")
    if mem is not None or size is not None or per_token is not None:
        mem = _WVA_MEM_SIZE if mem is None else mem
        size = _WVA_MODEL_SIZE if size is None else size
        per_token = _WVA_KVC_PER_TOKEN if per_token is None else per_token
        if per_token <= 0:
            raise ConfigError("KVC_PER_TOKEN must be > 0")
        tokens = int((0.8 * mem - size) / per_token)
        if tokens < 1:
            raise ConfigError(
                f"MEM_SIZE={mem:g}, MODEL_SIZE={size:g} leave no room for the KV cache "
                "(0.8*MEM_SIZE - MODEL_SIZE <= 0)"
            )
        out["kv_cache_tokens"] = tokens
    avg = number("AVG_TOKENS")
    kind = env.get("TOKENS_DISTRIBUTION", "").strip().lower()
    if avg is not None or kind:
        mean = max(1, int(avg if avg is not None else 100))
        if kind in {"", "uniform"}:
            out["output_tokens"] = f"uniform:1:{2 * mean}"
        elif kind == "uniform-narrow":
            out["output_tokens"] = f"uniform:{max(1, mean // 2)}:{max(1, (3 * mean) // 2)}"
        elif kind == "deterministic":
            out["output_tokens"] = f"fixed:{mean}"
        else:
            raise ConfigError(
                f"TOKENS_DISTRIBUTION={kind!r}: expected uniform, uniform-narrow or deterministic"
            )
    return out


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    """The ``vllm-emulator`` argument parser, its defaults resolved from ``env``."""
    parser = argparse.ArgumentParser(
        prog="vllm-emulator",
        description=(
            "An OpenAI-compatible stand-in for vLLM with a continuous-batching latency model and vLLM's "
            f"Prometheus metrics. Every flag can also be set with {ENV_PREFIX}<FLAG> (e.g. "
            f"{ENV_PREFIX}MAX_NUM_SEQS); WVA's emulator variables (MODEL_NAME, DECODE_TIME, MAX_BATCH_SIZE, "
            "...) are accepted too."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    wva = _wva_defaults(env)
    for option in _OPTIONS:
        dest = option.flag.replace("-", "_")
        default = option.default
        if dest in wva:
            default = wva[dest]
        if option.flag == "port" and env.get("PORT"):
            default = _convert(option, env["PORT"], "PORT")
        env_name = _env_name(option.flag)
        if env.get(env_name):
            default = _convert(option, env[env_name], env_name)
        names = [f"--{option.flag}"]
        if option.flag == "max-num-seqs":
            names.append("--max-batch-size")
        parser.add_argument(*names, dest=dest, type=option.type, default=default, help=option.help)
    return parser


def parse_args(argv: Sequence[str] | None, env: Mapping[str, str]) -> EmulatorConfig:
    """Parse flags and environment into a validated :class:`EmulatorConfig` (raises ConfigError)."""
    parser = build_parser(env)
    args = parser.parse_args(argv)
    if not 0 <= args.port < 65536:
        raise ConfigError(f"port must be in 0..65535 (0 picks a free one), got {args.port}")
    if not args.model:
        raise ConfigError("the model name must not be empty")
    if args.log_level.lower() not in {"debug", "info", "warning", "error"}:
        raise ConfigError(f"log level must be debug, info, warning or error, got {args.log_level!r}")
    for flag in ("shutdown_delay", "drain_timeout"):
        if not 0 <= getattr(args, flag) < 3600:
            raise ConfigError(f"{flag.replace('_', '-')} must be in [0, 3600) seconds")
    if not 0 < args.header_timeout < 3600:
        raise ConfigError("header-timeout must be in (0, 3600) seconds")
    if args.engine not in ENGINES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINES)}, got {args.engine!r}")
    if args.vllm_version not in VERSIONS:
        raise ConfigError(f"vllm-version must be one of {', '.join(VERSIONS)}, got {args.vllm_version!r}")
    engine = _v1_config(args) if args.engine == "v1" else _wva_config(args)
    return EmulatorConfig(
        model=args.model,
        host=args.host,
        port=args.port,
        engine=engine,
        output_tokens=parse_distribution(args.output_tokens),
        seed=args.seed,
        log_level=args.log_level.lower(),
        vllm_version=args.vllm_version,
        shutdown_delay=args.shutdown_delay,
        drain_timeout=args.drain_timeout,
        header_timeout=args.header_timeout,
    )


def _wva_config(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(
        profile=Profile(alpha=args.alpha, beta=args.beta, gamma=args.gamma, delta=args.delta),
        max_num_seqs=args.max_num_seqs,
        kv_cache_tokens=args.kv_cache_tokens or _DEFAULT_KV_CACHE_TOKENS,
        max_model_len=args.max_model_len,
        noise=args.noise,
        time_scale=args.time_scale,
        seed=args.seed,
    )


def _v1_config(args: argparse.Namespace) -> V1Config:
    chosen = preset(args.hardware) if args.hardware else None
    if chosen is not None:
        base = chosen.cost
    else:
        Profile(alpha=args.alpha, beta=args.beta, gamma=args.gamma, delta=args.delta)  # validates
        base = from_profile(
            args.alpha, args.beta, args.gamma, args.delta, context_tokens=args.context_ref_tokens
        )
    cost = CostModel(
        fixed_ms=base.fixed_ms if args.step_fixed_ms is None else args.step_fixed_ms,
        token_ms=base.token_ms if args.step_token_ms is None else args.step_token_ms,
        context_ms=base.context_ms if args.step_context_ms is None else args.step_context_ms,
    )
    kv_tokens = args.kv_cache_tokens or (chosen.kv_cache_tokens if chosen else _DEFAULT_KV_CACHE_TOKENS)
    if args.block_size < 1:
        raise ConfigError(f"block-size must be >= 1, got {args.block_size}")
    blocks = args.num_gpu_blocks_override or kv_tokens // args.block_size
    budget = args.max_num_batched_tokens or (chosen.max_num_batched_tokens if chosen else 2048)
    caching = args.prefix_caching.strip().lower()
    if caching not in {"on", "off"}:
        raise ConfigError(f"prefix-caching must be on or off, got {args.prefix_caching!r}")
    return V1Config(
        cost=cost,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=max(budget, args.max_num_seqs) if not args.max_num_batched_tokens else budget,
        block_size=args.block_size,
        num_gpu_blocks=blocks,
        max_model_len=args.max_model_len,
        enable_prefix_caching=caching == "on",
        prefix_hit_ratio=args.prefix_hit_ratio,
        noise=args.noise,
        time_scale=args.time_scale,
        seed=args.seed,
    )
