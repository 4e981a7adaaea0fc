"""A pure, clock-free discrete-event model of vLLM's V1 engine: token budget, chunked prefill, KV blocks.

Like :mod:`vllm_emulator.engine` (the ``wva`` engine), nothing here reads a clock, sleeps or does I/O:
time is a float the caller passes in, and :class:`V1Engine` has the same interface (``submit``,
``abort``, ``advance``, ``next_event_time``, ``num_generated``, ...), so the HTTP server and the
simulator drive either. What differs is the model, which follows vLLM's V1 scheduler rather than the
analyzer's accounting:

* **Steps.** The engine runs back-to-back steps (forward passes). A step's duration comes from a
  :class:`~vllm_emulator.costmodel.CostModel`: a fixed part, a part per scheduled token and a part per
  token of attention context. Scheduling happens at step boundaries only: a request arriving while a
  step runs waits for the next one.
* **Token budget.** Each step schedules at most ``max_num_batched_tokens`` tokens, shared by the
  decodes (one token each) and prefill chunks; at most ``max_num_seqs`` requests run at once.
  Running requests go first, in admission order, then waiting requests (FIFO) while budget, slots and
  KV blocks last. A prompt longer than the budget left is prefilled in chunks over several steps while
  the decodes go on (chunked prefill); its first token comes at the end of the step that computes its
  last prompt token. No waiting request is admitted in a step where a preemption happened.
* **KV blocks and preemption.** The KV cache holds ``num_gpu_blocks`` blocks of ``block_size`` tokens
  (:class:`~vllm_emulator.kvcache.BlockPool`); a request holds ``ceil(computed tokens / block_size)``
  blocks, allocated as its tokens are scheduled. When a step's allocation does not fit, the most
  recently admitted running request is preempted: its blocks are freed and it goes back to the head of
  the queue, to recompute its prompt and the tokens generated so far when readmitted (vLLM's
  recompute preemption).
* **Prefix cache.** A request may carry the keys of its prompt's full blocks (chained hashes, as
  vLLM's block hashes); at admission the longest cached prefix is reused (shared, not recomputed, at
  least one token always computed), and once the prompt is computed its blocks become cached for
  others. Freed prefix blocks stay cached until evicted (LRU). With ``prefix_hit_ratio`` set instead,
  that fraction of every prompt (whole blocks) counts as a hit, without content.
* **Noise and time scale** as in the ``wva`` engine: a log-normal factor of mean 1 on every step with
  ``noise > 0``; every duration divided by ``time_scale``.

Cost: a step that changes nothing but the context (no arrival, completion, preemption or prefill) is
a *plain* step; runs of plain steps form an arithmetic progression of durations and, without noise,
are crossed in O(1) whatever their number or the batch size (decodes are counted in aggregate: the
requests needing a new block at a boundary are those whose computed-token count is a multiple of the
block size, counted by residue). Arrivals, completions, chunks and preemptions cost O(log n) each.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from vllm_emulator.costmodel import CostModel
from vllm_emulator.engine import EngineOutput, SeqState, _EngineCore
from vllm_emulator.engine import Sequence as BaseSequence
from vllm_emulator.errors import ConfigError, EngineError
from vllm_emulator.kvcache import BlockPool

__all__ = ["V1Config", "V1Engine", "V1Output", "V1Sequence"]

_INF = math.inf


@dataclass(frozen=True, slots=True)
class V1Config:
    """Static configuration of one V1-like engine (one vLLM replica)."""

    cost: CostModel
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    block_size: int = 16
    num_gpu_blocks: int = 8192
    max_model_len: int = 8192
    enable_prefix_caching: bool = True
    prefix_hit_ratio: float | None = None
    """Fixed fraction of each prompt found in the prefix cache; None: match the requests' block keys."""
    noise: float = 0.0
    time_scale: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ConfigError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                f"({self.max_num_seqs}), as vLLM requires with chunked prefill"
            )
        if not 1 <= self.block_size <= 256:
            raise ConfigError(f"block_size must be in 1..256, got {self.block_size}")
        if self.max_model_len < 2:
            raise ConfigError(f"max_model_len must be >= 2, got {self.max_model_len}")
        if self.num_gpu_blocks * self.block_size < self.max_model_len:
            raise ConfigError(
                f"the KV cache ({self.num_gpu_blocks} blocks of {self.block_size} tokens) must hold at least "
                f"one sequence of max_model_len ({self.max_model_len}) tokens"
            )
        if self.prefix_hit_ratio is not None and not 0 <= self.prefix_hit_ratio <= 1:
            raise ConfigError(f"prefix_hit_ratio must be in [0, 1], got {self.prefix_hit_ratio!r}")
        if not math.isfinite(self.noise) or not 0 <= self.noise <= 10:
            raise ConfigError(f"noise must be in [0, 10], got {self.noise!r}")
        if not math.isfinite(self.time_scale) or self.time_scale <= 0:
            raise ConfigError(f"time_scale must be a finite number > 0, got {self.time_scale!r}")

    @property
    def kv_cache_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size


class V1Sequence(BaseSequence):
    """A request inside a :class:`V1Engine` (same public attributes as the ``wva`` engine's)."""

    __slots__ = ("_chunk", "_gconst", "_keys", "_nc", "_shared", "cached_tokens")

    def __init__(
        self,
        seq_no: int,
        request_id: Hashable,
        *,
        prompt_tokens: int,
        output_tokens: int,
        arrival_time: float,
        stop_reason: str,
        keys: Sequence[Hashable] | None,
    ) -> None:
        super().__init__(
            seq_no,
            request_id,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            arrival_time=arrival_time,
            stop_reason=stop_reason,
        )
        self._keys = keys
        self._nc = 0  # computed tokens (while not DECODING)
        self._chunk = 0  # tokens scheduled in the step in progress (PREFILLING)
        self._gconst = 0  # while DECODING: generated tokens = _gconst + completed steps
        self._shared: list[Hashable] = []  # keys of the shared prefix blocks it holds (its first blocks)
        self.cached_tokens = 0
        """Prompt tokens found in the prefix cache at the last admission."""


@dataclass(slots=True)
class V1Output(EngineOutput):
    """An :class:`~vllm_emulator.engine.EngineOutput` with what only the V1 engine knows.

    ``itl_runs`` holds runs of plain steps crossed at once: ``(first, increment, steps, count)``,
    meaning ``count`` inter-token gaps of each of ``first + i·increment`` for ``i < steps``.
    ``iteration_tokens`` holds ``(tokens, steps)``: per step, the prompt tokens of the requests that got
    their first token plus the tokens generated, as vLLM's ``vllm:iteration_tokens_total`` observes.
    """

    itl_runs: list[tuple[float, float, int, int]] = field(default_factory=list)
    iteration_tokens: list[tuple[int, int]] = field(default_factory=list)
    prefix_queries: int = 0
    prefix_hits: int = 0

    def __bool__(self) -> bool:
        return bool(
            self.first_tokens
            or self.finished
            or self.itl
            or self.itl_runs
            or self.generation_tokens
            or self.preemptions
            or self.steps
            or self.prefix_queries
        )


class V1Engine(_EngineCore[V1Sequence, V1Output]):
    """vLLM-V1-like continuous batching (see the module doc). Time only moves forward."""

    def __init__(self, config: V1Config, *, start_time: float = 0.0) -> None:
        self.config = config
        self._cost = config.cost
        self._unit = 1.0 / (1000.0 * config.time_scale)
        self._rng = random.Random(config.seed)
        self._sigma = math.sqrt(math.log1p(config.noise * config.noise)) if config.noise > 0 else 0.0
        self._bs = config.block_size
        self._budget = config.max_num_batched_tokens
        self._hash_mode = config.enable_prefix_caching and config.prefix_hit_ratio is None
        self._ratio = config.prefix_hit_ratio if config.enable_prefix_caching else None
        self._pool = BlockPool(config.num_gpu_blocks)
        self._now = start_time
        self._seq_counter = 0
        self._waiting: deque[V1Sequence] = deque()
        self._waiting_aborted = 0
        self._running: dict[int, V1Sequence] = {}  # admission order; preemption victim = last
        # Decodes in aggregate: generated = _gconst + steps; computed = prompt + generated - 1.
        self._n_dec = 0
        self._ctx_const = 0  # sum over decodes of (prompt + _gconst): context = ctx_const + n·steps
        self._residues = [0] * self._bs  # decodes by (prompt + _gconst - 1) mod block_size
        self._finish_heap: list[tuple[int, int, int, V1Sequence]] = []  # (finish step, seq_no, epoch)
        # The step in progress.
        self._steps = 0
        self._step_end = _INF
        self._step_prefills: list[V1Sequence] = []
        self._step_plain = False  # only decodes, same set as the previous step
        self._last_step_end = start_time
        self._last_step_start = start_time
        self._changed = True  # the decode set changed since the step in progress was planned
        # Plain steps after the anchor step a: step a+i lasts dur + inc·(i-1), ends at
        # anchor_time + i·dur + inc·i(i-1)/2.
        self._anchor_time = start_time
        self._anchor_steps = 0
        self._anchor_dur = 0.0
        self._anchor_inc = 0.0
        self._out = V1Output()

    # ------------------------------------------------------------------ public API

    @property
    def kv_cache_usage(self) -> float:
        return self._pool.usage()

    def submit(
        self,
        request_id: Hashable,
        prompt_tokens: int,
        output_tokens: int,
        now: float,
        *,
        stop_reason: str = "length",
        prefix_keys: Sequence[Hashable] | None = None,
    ) -> V1Sequence:
        """Queue a request arriving at ``now``; ``prefix_keys`` are its prompt's full-block keys."""
        if prompt_tokens < 1 or output_tokens < 1:
            raise EngineError(
                f"need prompt_tokens >= 1 and output_tokens >= 1, got {prompt_tokens}, {output_tokens}"
            )
        if prompt_tokens + output_tokens > self.config.max_model_len:
            raise EngineError(
                f"prompt ({prompt_tokens}) + output ({output_tokens}) tokens exceed max_model_len "
                f"({self.config.max_model_len})"
            )
        self._process(now)
        self._seq_counter += 1
        keys = prefix_keys if self._hash_mode else None
        seq = V1Sequence(
            self._seq_counter,
            request_id,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            arrival_time=now,
            stop_reason=stop_reason,
            keys=keys,
        )
        self._waiting.append(seq)
        if self._step_end == _INF:
            self._schedule(now)
        return seq

    def abort(self, seq: BaseSequence, now: float) -> None:
        """Remove a request that has not finished; it finishes as ``"abort"``."""
        assert isinstance(seq, V1Sequence)
        self._process(now)
        state = seq.state
        if state is SeqState.FINISHED:
            return
        if state is SeqState.WAITING:
            self._waiting_aborted += 1
            self._finish(seq, now, "abort")
            return
        seq.last_token_time = self.last_token_time(seq)
        self._release(seq)
        self._finish(seq, now, "abort")
        if self._step_end == _INF:
            self._schedule(now)

    def next_event_time(self) -> float | None:
        """End of the step in progress, or None when idle."""
        return None if self._step_end == _INF else self._step_end

    def advance(self, now: float) -> V1Output:
        """Process every step ending at or before ``now``; return what happened since the last call."""
        self._process(now)
        out, self._out = self._out, V1Output()
        return out

    def num_generated(self, seq: BaseSequence) -> int:
        assert isinstance(seq, V1Sequence)
        if seq.state is SeqState.DECODING:
            return seq._gconst + self._steps
        return seq._gen

    def last_token_time(self, seq: BaseSequence) -> float | None:
        if seq.state is SeqState.DECODING:
            return self._last_step_end
        return seq.last_token_time

    # ------------------------------------------------------------------ event loop

    def _process(self, now: float) -> None:
        if now < self._now:
            raise EngineError(f"time went backwards: now={now!r} < engine time {self._now!r}")
        while self._step_end <= now and self._step_end != _INF:
            if not self._fast_forward(now):
                self._end_step()
        self._now = now

    def _step_time(self, k: int) -> float:
        """End of step ``k`` of the plain run anchored at ``_anchor_steps``."""
        i = k - self._anchor_steps
        return self._anchor_time + i * self._anchor_dur + self._anchor_inc * (i * (i - 1) // 2)

    def _end_step(self) -> None:
        t = self._step_end
        self._step_end = _INF  # the step is over: releases below free what it allocated, no more
        g = self._steps + 1
        self._steps = g
        self._last_step_end = t
        out = self._out
        n = self._n_dec
        out.steps += 1
        generated = n
        prompt_done = 0
        if n:
            prev = self._last_step_start
            out.itl.append((t - prev, n))
        prefills = self._step_prefills
        if prefills:
            self._step_prefills = []
            for seq in prefills:
                seq._nc += seq._chunk
                seq._chunk = 0
                if seq._nc < seq.prompt_tokens + seq._gen:
                    continue  # a partial prefill: more chunks in the next steps
                seq._gen += 1
                generated += 1
                if seq.first_token_time is None:
                    seq.first_token_time = t
                    out.first_tokens.append(seq)
                    prompt_done += seq.prompt_tokens
                else:
                    assert seq.last_token_time is not None
                    out.itl.append((t - seq.last_token_time, 1))
                seq.last_token_time = t
                if self._hash_mode and seq._keys:
                    self._register(seq)
                if seq._gen >= seq.output_tokens:
                    self._release(seq)
                    self._finish(seq, t, seq._stop_reason)
                else:
                    self._join(seq, g)
        heap = self._finish_heap
        while heap and heap[0][0] <= g:
            _, _, epoch, seq = heapq.heappop(heap)
            if epoch != seq._epoch or seq.state is not SeqState.DECODING:
                continue
            seq.last_token_time = t
            self._release(seq)
            self._finish(seq, t, seq._stop_reason)
        out.generation_tokens += generated
        out.iteration_tokens.append((prompt_done + generated, 1))
        self._schedule(t)

    def _fast_forward(self, now: float) -> bool:
        """Cross a run of plain steps in O(1); False when the next boundary needs the full path.

        Plain: no noise, only decodes in the step in progress and in the ones crossed, nobody
        admissible, no completion and no block shortage at the boundaries crossed.
        """
        if self._sigma > 0 or not self._step_plain or self._step_prefills or self._changed:
            return False
        n = self._n_dec
        if n == 0 or self._admissible():
            return False
        g = self._steps
        heap = self._finish_heap
        while heap and (heap[0][2] != heap[0][3]._epoch or heap[0][3].state is not SeqState.DECODING):
            heapq.heappop(heap)
        # Cross steps g+1 .. g+m; step g+m+1 then starts like them.
        m = (heap[0][0] - 1 - g) if heap else 1 << 62
        if m < 2:
            return False
        m = min(m, self._steps_within(now, g))
        if m < 2:
            return False
        m, blocks = self._blocks_within(g, m)
        if m < 2:
            return False
        self._pool.allocate(blocks)
        inc = self._anchor_inc
        first = self._anchor_dur + inc * (g - self._anchor_steps)  # duration of step g+1
        self._steps = g + m
        self._last_step_end = self._step_time(g + m)
        self._last_step_start = self._last_step_end  # the start of step g+m+1
        self._step_end = self._step_time(g + m + 1)
        out = self._out
        out.steps += m
        out.generation_tokens += n * m
        out.itl_runs.append((first, inc, m, n))
        out.iteration_tokens.append((n, m))
        return True

    def _steps_within(self, now: float, g: int) -> int:
        """How many steps from g+1 on end at or before ``now`` (by the anchored formula)."""
        dur, inc = self._anchor_dur, self._anchor_inc
        span = now - self._anchor_time
        if span == _INF:
            return 1 << 62
        if inc > 0:
            a = inc / 2.0
            b = dur - a
            x = int((-b + math.sqrt(b * b + 4.0 * a * span)) / (2.0 * a))
        else:
            x = int(span / dur)
        m = x - (g - self._anchor_steps)
        while m >= 1 and self._step_time(g + m) > now:
            m -= 1
        while self._step_time(g + m + 1) <= now:
            m += 1
        return m

    def _blocks_within(self, g: int, m: int) -> tuple[int, int]:
        """Shrink ``m`` so the blocks the steps g+2 .. g+m+1 allocate fit; return (m, blocks)."""
        bs = self._bs
        residues = self._residues
        n = self._n_dec
        free = self._pool.free

        def needed(j: int) -> int:  # blocks allocated at the start of the steps after g+1 .. g+j
            full, part = divmod(j, bs)
            total = full * n
            for k in range(1, part + 1):
                total += residues[(-(g + k)) % bs]
            return total

        if needed(m) <= free:
            return m, needed(m)
        full = min(m // bs, free // n) if n else m // bs
        lo = full * bs  # needed(lo) = full·n <= free
        hi = min(m, lo + bs)
        while lo < hi:  # the largest j in [lo, hi] with needed(j) <= free
            mid = (lo + hi + 1) // 2
            if needed(mid) <= free:
                lo = mid
            else:
                hi = mid - 1
        return lo, needed(lo)

    # ------------------------------------------------------------------ scheduling

    def _admissible(self) -> bool:
        """Whether the head of the queue could be admitted at the next boundary."""
        waiting = self._waiting
        while waiting and waiting[0].state is SeqState.FINISHED:
            waiting.popleft()
            self._waiting_aborted -= 1
        if not waiting or len(self._running) >= self.config.max_num_seqs:
            return False
        budget = self._budget - self._n_dec
        if budget <= 0:
            return False
        seq = waiting[0]
        hit_blocks, from_free, _ = self._prefix_hit(seq)
        total = seq.prompt_tokens + seq._gen
        chunk = min(total - hit_blocks * self._bs, budget)
        return self._new_blocks(seq, hit_blocks, chunk) + from_free <= self._pool.free

    def _prefix_hit(self, seq: V1Sequence) -> tuple[int, int, int]:
        """(blocks hit, of which free in the cache, tokens queried) for admitting ``seq`` now."""
        total = seq.prompt_tokens + seq._gen
        limit = (total - 1) // self._bs  # at least one token is always computed
        if self._hash_mode:
            keys = seq._keys
            if not keys:
                return 0, 0, total
            hit = self._pool.longest_prefix(keys, limit)
            return hit, self._pool.free_among(keys[:hit]), total
        if self._ratio is None:
            return 0, 0, 0  # prefix caching off: nothing queried
        return min(int(self._ratio * seq.prompt_tokens) // self._bs, limit), 0, total

    def _new_blocks(self, seq: V1Sequence, hit_blocks: int, chunk: int) -> int:
        """Blocks to allocate for admitting ``seq`` with ``hit_blocks`` cached and a first chunk."""
        bs = self._bs
        blocks = -(-(hit_blocks * bs + chunk) // bs)
        return blocks - hit_blocks if self._hash_mode else blocks

    def _schedule(self, t: float) -> None:
        """Plan the step starting at ``t``: decodes, the partial prefill, then admissions."""
        g = self._steps
        pool = self._pool
        bs = self._bs
        preempted = False
        # 1. The running requests, in admission order: decodes (one token each) then the partial prefill
        #    (always the last admitted). Preempt from the tail while their blocks do not fit.
        while True:
            need = self._residues[(-g) % bs] if self._n_dec else 0
            partial = self._tail_partial()
            chunk = 0
            if partial is not None:
                chunk = min(partial.prompt_tokens + partial._gen - partial._nc, self._budget - self._n_dec)
                need += -(-(partial._nc + chunk) // bs) - -(-partial._nc // bs)
            if need <= pool.free or not self._running:
                break
            self._preempt_last(t)
            preempted = True
        pool.allocate(need)
        prefills: list[V1Sequence] = []
        tokens = self._n_dec
        context = self._ctx_const + self._n_dec * g
        if partial is not None and chunk > 0:
            partial._chunk = chunk
            prefills.append(partial)
            tokens += chunk
            context += partial._nc + chunk
        # 2. Waiting requests, FIFO, while budget, slots and blocks last (not after a preemption).
        budget = self._budget - tokens
        if not preempted:
            waiting = self._waiting
            running = self._running
            max_seqs = self.config.max_num_seqs
            while waiting and budget > 0:
                seq = waiting[0]
                if seq.state is SeqState.FINISHED:
                    waiting.popleft()
                    self._waiting_aborted -= 1
                    continue
                if len(running) >= max_seqs:
                    break
                hit_blocks, from_free, queried = self._prefix_hit(seq)
                cached = hit_blocks * bs
                total = seq.prompt_tokens + seq._gen
                chunk = min(total - cached, budget)
                blocks = self._new_blocks(seq, hit_blocks, chunk)
                if blocks + from_free > pool.free:
                    break
                waiting.popleft()
                if self._hash_mode and hit_blocks:
                    assert seq._keys is not None
                    shared = list(seq._keys[:hit_blocks])
                    pool.acquire(shared)
                    seq._shared = shared
                pool.allocate(blocks)
                self._out.prefix_queries += queried
                self._out.prefix_hits += cached
                seq.cached_tokens = cached
                seq._nc = cached
                seq._chunk = chunk
                seq.state = SeqState.PREFILLING
                seq._epoch += 1
                if seq.scheduled_time is None:
                    seq.scheduled_time = t
                running[seq.seq_no] = seq
                prefills.append(seq)
                tokens += chunk
                context += cached + chunk
                budget -= chunk
        self._step_prefills = prefills
        if tokens == 0:
            self._step_end = _INF
            self._step_plain = False
            self._changed = True
            return
        plain = not prefills and not self._changed and self._sigma == 0 and self._step_plain
        self._last_step_start = t
        if plain and self._anchor_steps <= g:
            self._step_end = self._step_time(g + 1)
        else:
            dur = self._cost.step_ms(tokens, context) * self._unit
            if self._sigma > 0:
                dur *= self._noise_factor()
            self._anchor_time = t
            self._anchor_steps = g
            self._anchor_dur = dur
            self._anchor_inc = self._cost.context_ms * self._n_dec * self._unit
            self._step_end = t + dur
        # The next step can continue this one's progression if nothing but the context changes.
        self._step_plain = not prefills
        self._changed = False

    def _tail_partial(self) -> V1Sequence | None:
        if not self._running:
            return None
        seq = next(reversed(self._running.values()))
        return seq if seq.state is SeqState.PREFILLING else None

    # ------------------------------------------------------------------ joining, release, preemption

    def _join(self, seq: V1Sequence, g: int) -> None:
        """A request whose prefill is done decodes from the next step on."""
        seq.state = SeqState.DECODING
        seq._gconst = seq._gen - g
        seq._epoch += 1
        self._n_dec += 1
        self._ctx_const += seq.prompt_tokens + seq._gconst
        self._residues[(seq.prompt_tokens + seq._gconst - 1) % self._bs] += 1
        heapq.heappush(self._finish_heap, (g + seq.output_tokens - seq._gen, seq.seq_no, seq._epoch, seq))
        self._changed = True

    def _register(self, seq: V1Sequence) -> None:
        """Once its prompt is computed, a request's full prompt blocks become cached prefix blocks."""
        keys = seq._keys
        assert keys is not None
        shared = seq._shared
        limit = min(len(keys), seq.prompt_tokens // self._bs)
        pool = self._pool
        for i in range(len(shared), limit):
            if not pool.register(keys[i]):
                break
            shared.append(keys[i])

    def _release(self, seq: V1Sequence) -> None:
        """Take a running request out of the batch and free its blocks (not its tokens)."""
        state = seq.state
        in_step = self._step_end != _INF
        if state is SeqState.DECODING:
            g = self._steps
            seq._gen = seq._gconst + g
            computed = seq.prompt_tokens + seq._gen - 1 + (1 if in_step else 0)
            self._n_dec -= 1
            self._ctx_const -= seq.prompt_tokens + seq._gconst
            self._residues[(seq.prompt_tokens + seq._gconst - 1) % self._bs] -= 1
            self._changed = True
        else:  # PREFILLING: computed tokens plus the chunk of the step in progress, if any
            computed = seq._nc + seq._chunk
            if seq._chunk and seq in self._step_prefills:
                self._step_prefills.remove(seq)
            seq._chunk = 0
        blocks = -(-computed // self._bs)
        shared = seq._shared
        self._pool.release(blocks - len(shared))
        if shared:
            self._pool.drop(shared[::-1])  # the tail first, so the head of a prefix is evicted last
            seq._shared = []
        seq._nc = 0
        seq._epoch += 1
        del self._running[seq.seq_no]
