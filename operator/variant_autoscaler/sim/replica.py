"""One simulated replica (an inference server pod): one of the emulator's engines driven by the
simulator's virtual clock.

The simulator talks to replicas through :class:`Server`; :func:`engine_server` builds one backed by
the engine the profile's :class:`~variant_autoscaler.sim.scenario.ServerSpec` names (the same engines
the HTTP emulator runs, without HTTP): :mod:`vllm_emulator.engine_v1` (vLLM V1's scheduler, what
scenario files get by default) or :mod:`vllm_emulator.engine` (the analyzer's accounting, ``wva``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

from variant_autoscaler.sim.scenario import Profile, ServerSpec
from vllm_emulator.costmodel import CostModel, from_profile, preset
from vllm_emulator.engine import Engine, EngineConfig, SeqState
from vllm_emulator.engine import Profile as EngineProfile
from vllm_emulator.engine import Sequence as EngineSequence
from vllm_emulator.engine_v1 import V1Config, V1Engine

__all__ = [
    "DEFAULT_KV_CACHE_TOKENS",
    "Completion",
    "EngineServer",
    "Server",
    "ServerFactory",
    "engine_server",
    "max_model_len",
    "v1_config",
]

DEFAULT_KV_CACHE_TOKENS = 131_072
"""KV cache of a replica whose profile does not say (the emulator engine's default)."""
MAX_MODEL_LEN = 32_768
"""Longest request (prompt + output) a replica accepts unless its profile says (``maxModelLen``),
capped by its KV cache."""


def max_model_len(profile: Profile) -> int:
    """The longest request a replica of ``profile`` accepts: its ``maxModelLen`` (default
    :data:`MAX_MODEL_LEN`), capped by its KV cache."""
    kv = profile.kv_cache_tokens or DEFAULT_KV_CACHE_TOKENS
    return min(profile.max_model_len or MAX_MODEL_LEN, kv)


class Completion(NamedTuple):
    rid: int
    first_token_s: float
    finish_s: float


class Server(Protocol):
    """A replica as the simulator drives it. Times are simulated seconds; ``now`` never decreases."""

    def submit(self, rid: int, now: float, input_tokens: int, output_tokens: int) -> bool:
        """Hand a request to the replica at ``now``; False if the replica rejects it (too long)."""
        ...

    def advance(self, now: float) -> list[Completion]:
        """Run the replica up to ``now``; return the requests that finished by then."""
        ...

    def next_event_time(self) -> float:
        """When something next happens inside the replica (``math.inf`` when idle). The simulator
        wakes a busy replica at this time or after its tick, whichever is later."""
        ...

    def expire(self, now: float, arrival: Sequence[float], timeout: float) -> list[int]:
        """Abort the requests that have produced no token yet and arrived (``arrival[rid]``) at or
        before ``now - timeout``: their clients have given up. Return their ids."""
        ...

    def in_flight(self) -> list[int]:
        """Ids of every request submitted and not finished (running or waiting)."""
        ...

    @property
    def num_running(self) -> int: ...

    @property
    def num_waiting(self) -> int: ...

    @property
    def kv_usage(self) -> float:
        """Fraction of the KV cache in use (0–1), vLLM's ``kv_cache_usage_perc``."""
        ...


ServerFactory = Callable[[Profile, int, int], Server]
"""``factory(profile, max_batch, seed) -> Server``."""


def token_budget(server: ServerSpec, max_batch: int) -> int:
    """The tokens one step of a V1 replica holds (``--max-num-batched-tokens``): the server's setting,
    else its hardware preset's, else vLLM's 2048; never below the batch (vLLM requires it)."""
    chosen = preset(server.hardware) if server.hardware else None
    budget = server.max_num_batched_tokens or (chosen.max_num_batched_tokens if chosen else 2048)
    return max(budget, max_batch)


def v1_config(profile: Profile, server: ServerSpec, max_batch: int, seed: int) -> V1Config:
    """The V1 engine configuration of a replica: step costs, token budget and KV blocks."""
    chosen = preset(server.hardware) if server.hardware else None
    base = (
        chosen.cost
        if chosen is not None
        else from_profile(
            profile.alpha,
            profile.beta,
            profile.gamma,
            profile.delta,
            context_tokens=server.context_ref_tokens,
        )
    )
    cost = CostModel(
        fixed_ms=base.fixed_ms if server.fixed_ms is None else server.fixed_ms,
        token_ms=base.token_ms if server.token_ms is None else server.token_ms,
        context_ms=base.context_ms if server.context_ms is None else server.context_ms,
    )
    kv = profile.kv_cache_tokens or (chosen.kv_cache_tokens if chosen else DEFAULT_KV_CACHE_TOKENS)
    blocks = kv // server.block_size
    return V1Config(
        cost=cost,
        max_num_seqs=max_batch,
        max_num_batched_tokens=token_budget(server, max_batch),
        block_size=server.block_size,
        num_gpu_blocks=blocks,
        max_model_len=min(profile.max_model_len or MAX_MODEL_LEN, blocks * server.block_size),
        prefix_hit_ratio=server.prefix_hit_ratio,
        seed=seed,
    )


class EngineServer:
    """A :class:`Server` backed by an emulator engine (V1-like or wva, see the module doc).

    The engine reports every event; this adapter keeps the request ids, turns finished sequences
    into :class:`Completion` records, and implements client time-outs with the engine's ``abort``.
    """

    __slots__ = ("_engine", "_fifo", "_live", "_min_prompt")

    def __init__(self, profile: Profile, max_batch: int, seed: int, start_time: float = 0.0) -> None:
        server = profile.server
        self._engine: Engine | V1Engine
        if server is not None and server.engine == "v1":
            self._engine = V1Engine(v1_config(profile, server, max_batch, seed), start_time=start_time)
            self._min_prompt = 1  # a V1 step computes at least one prompt token
        else:
            kv = profile.kv_cache_tokens or DEFAULT_KV_CACHE_TOKENS
            config = EngineConfig(
                profile=EngineProfile(
                    alpha=profile.alpha, beta=profile.beta, gamma=profile.gamma, delta=profile.delta
                ),
                max_num_seqs=max_batch,
                kv_cache_tokens=kv,
                max_model_len=max_model_len(profile),
                seed=seed,
            )
            self._engine = Engine(config, start_time=start_time)
            self._min_prompt = 0
        self._live: dict[int, EngineSequence] = {}
        self._fifo: deque[int] = deque()  # submission order, for time-outs

    def submit(self, rid: int, now: float, input_tokens: int, output_tokens: int) -> bool:
        input_tokens = max(input_tokens, self._min_prompt)
        if input_tokens + output_tokens > self._engine.config.max_model_len:
            return False
        self._live[rid] = self._engine.submit(rid, input_tokens, output_tokens, now)
        self._fifo.append(rid)
        return True

    def advance(self, now: float) -> list[Completion]:
        out = self._engine.advance(now)
        if not out.finished:
            return []
        done: list[Completion] = []
        live = self._live
        for seq in out.finished:
            rid = seq.request_id
            assert isinstance(rid, int)
            if seq.finish_reason == "abort":
                continue  # already accounted for by expire()
            del live[rid]
            first = seq.first_token_time
            finish = seq.finish_time
            assert first is not None and finish is not None
            done.append(Completion(rid, first, finish))
        return done

    def next_event_time(self) -> float:
        when = self._engine.next_event_time()
        return math.inf if when is None else when

    def expire(self, now: float, arrival: Sequence[float], timeout: float) -> list[int]:
        cutoff = now - timeout
        fifo = self._fifo
        live = self._live
        expired: list[int] = []
        # Drop finished ids from the front, then walk the ids that arrived before the cutoff.
        while fifo and fifo[0] not in live:
            fifo.popleft()
        for rid in fifo:  # only the engine and `live` change below, never `fifo`
            if arrival[rid] > cutoff:
                break
            seq = live.get(rid)
            if seq is None or seq.first_token_time is not None or seq.state is SeqState.FINISHED:
                continue
            self._engine.abort(seq, now)
            del live[rid]
            expired.append(rid)
        return expired

    def in_flight(self) -> list[int]:
        return list(self._live)

    @property
    def num_running(self) -> int:
        return self._engine.num_running

    @property
    def num_waiting(self) -> int:
        return self._engine.num_waiting

    @property
    def kv_usage(self) -> float:
        return self._engine.kv_cache_usage


def engine_server(profile: Profile, max_batch: int, seed: int) -> Server:
    """The default :data:`ServerFactory`: an emulator engine per replica, as ``profile.server`` says."""
    return EngineServer(profile, max_batch, seed)
