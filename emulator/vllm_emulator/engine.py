"""A pure, clock-free discrete-event model of a continuous-batching LLM server (vLLM-like).

Nothing here reads a clock, sleeps, spawns a thread or touches asyncio: time is a float (seconds) the
caller passes in. The HTTP server drives an :class:`Engine` with the event loop's monotonic clock; a
simulator can drive many engines with a virtual clock and advance them by hours in one call.

Usage::

    engine = Engine(EngineConfig(profile=Profile(alpha=20.58, beta=0.41, gamma=20.58, delta=0.041)))
    seq = engine.submit("req-1", prompt_tokens=128, output_tokens=64, now=0.0)
    while (t := engine.next_event_time()) is not None:
        out = engine.advance(t)          # or any later time: everything due until then is processed
        for done in out.finished: ...    # seq.first_token_time, seq.finish_time, ...

Model (all profile times in milliseconds, ``b`` = number of running sequences, prefilling ones included):

* **Admission.** Requests wait in a FIFO queue. The head is admitted as soon as the batch has a free
  slot (``max_num_seqs``) and the KV cache has room for its prompt, its first output token and one
  more token for every running decoder (a one-step watermark). Admission happens at once when a
  request arrives to an engine with room, and otherwise whenever a slot or KV space is freed.
* **Prefill.** An admitted sequence spends ``prefill(L, b) = γ + δ·L·b`` (``L`` = prompt tokens plus,
  after a preemption, the tokens generated so far, which are recomputed; ``b`` counts the sequence
  itself) and then emits one token (its first token, or the next one after a preemption). Prefill runs
  on the sequence's own clock, overlapping the decode steps of the others, the way chunked prefill
  piggy-backs prompt chunks on decode iterations; it does not stretch the others' steps, because the
  profile's α, β (fitted on measured ITL) already include that interference. A sequence that has
  finished its prefill joins the decode steps at the next step boundary.
* **Decode steps (iterations).** While at least one sequence is decoding, the engine runs back-to-back
  decode steps of ``decode(b) = α + β·b``; ``b`` is fixed when the step starts and includes sequences
  that are still prefilling (they hold a slot, as in the analyzer's ``n``). Every decoding sequence
  emits one token at the end of each step. A *mixed* iteration, one that runs while some sequences
  are in prefill, therefore lasts ``decode(b)``; the prefilling sequences' own ``prefill(L, b)`` runs
  concurrently. With this choice a request served at a steady batch size ``n`` sees
  ``TTFT = wait + prefill(L_in, n)``, ``ITL = decode(n)`` and a service time of
  ``prefill(L_in, n) + (L_out − 1)·decode(n)``, exactly the analyzer's per-request accounting and
  service rate ``μ_n`` (its ``n_eff``); the only systematic extra is that the first decode token waits
  for the step boundary (on average half a step, spread over ``L_out − 1`` gaps).
* **KV cache and preemption.** The cache holds ``kv_cache_tokens`` tokens (token granularity). Before
  each step, every decoder needs room for one more token; while it does not fit, the most recently
  admitted running sequence is preempted (vLLM's recompute preemption: its KV is freed and it goes
  back to the head of the queue). No new request is admitted at a boundary where a preemption
  happened.
* **Noise.** With ``noise > 0`` every step and prefill duration is multiplied by an independent
  log-normal factor of mean 1 and coefficient of variation ``noise``, drawn from a seeded RNG.
* **Time scale.** Every duration is divided by ``time_scale``: an engine with ``time_scale = s``
  behaves exactly like one whose four profile parameters are divided by ``s``.

Cost: events (arrivals, first tokens, completions, preemptions) cost O(log n); a decode step costs O(1)
whatever the batch size, and without noise a run of identical steps (no arrival, completion or
preemption in between) is crossed in one O(1) jump, so an idle or steady engine advances by hours at
almost no cost.
"""

from __future__ import annotations

import enum
import heapq
import math
import random
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from vllm_emulator.errors import ConfigError, EngineError

__all__ = [
    "Engine",
    "EngineConfig",
    "EngineOutput",
    "Profile",
    "SeqState",
    "Sequence",
]

_INF = math.inf


@dataclass(frozen=True, slots=True)
class Profile:
    """Iteration-time parameters in milliseconds, as in the VariantAutoscaling CR's ``perfParms``.

    ``decode(b) = alpha + beta·b`` and ``prefill(tokens, b) = gamma + delta·tokens·b`` (0 for 0 tokens).
    """

    alpha: float
    beta: float
    gamma: float
    delta: float

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "gamma", "delta"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"profile {name} must be a finite number >= 0, got {value!r}")
        if self.alpha + self.beta <= 0:
            raise ConfigError("profile alpha + beta must be > 0: a decode step must take some time")

    def decode_ms(self, batch: float) -> float:
        """Duration in ms of one decode step over ``batch`` sequences."""
        return self.alpha + self.beta * batch

    def prefill_ms(self, tokens: float, batch: float) -> float:
        """Duration in ms of the prefill of ``tokens`` prompt tokens at batch size ``batch``."""
        if tokens <= 0:
            return 0.0
        return self.gamma + self.delta * tokens * batch


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Static configuration of one engine (one vLLM replica)."""

    profile: Profile
    max_num_seqs: int = 256
    """Maximum number of running sequences (vLLM's ``--max-num-seqs``; WVA's ``maxBatchSize``)."""
    kv_cache_tokens: int = 131_072
    """KV-cache capacity in tokens."""
    max_model_len: int = 8_192
    """Maximum prompt + output tokens of one request."""
    noise: float = 0.0
    """Coefficient of variation of the log-normal factor applied to every duration (0 = none)."""
    time_scale: float = 1.0
    """Every duration is divided by this factor."""
    seed: int = 0
    """Seed of the noise RNG."""

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ConfigError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_model_len < 2:
            raise ConfigError(f"max_model_len must be >= 2, got {self.max_model_len}")
        if self.kv_cache_tokens < self.max_model_len:
            raise ConfigError(
                f"the KV cache ({self.kv_cache_tokens} tokens) must hold at least one sequence of "
                f"max_model_len ({self.max_model_len}) tokens; lower max_model_len or raise the cache size"
            )
        if not math.isfinite(self.noise) or not 0 <= self.noise <= 10:
            raise ConfigError(f"noise must be in [0, 10], got {self.noise!r}")
        if not math.isfinite(self.time_scale) or self.time_scale <= 0:
            raise ConfigError(f"time_scale must be a finite number > 0, got {self.time_scale!r}")


class SeqState(enum.Enum):
    WAITING = "waiting"
    PREFILLING = "prefilling"
    JOINING = "joining"
    """Prefill done; joins the decode steps at the next step boundary."""
    DECODING = "decoding"
    FINISHED = "finished"


class Sequence:
    """One request inside the engine. Read its attributes; never set them (the engine owns them).

    Timestamps are engine times in seconds (``None`` until the event happens):
    ``arrival_time`` (submit), ``scheduled_time`` (first admission, as vLLM's ``scheduled_ts``),
    ``first_token_time``, ``last_token_time`` (see :meth:`Engine.last_token_time` while decoding) and
    ``finish_time``. ``finish_reason`` is ``"length"``, ``"stop"`` or ``"abort"`` once finished.
    ``admitted_batch``: the batch size ``b`` its (last) prefill was timed at, itself included (``None``
    until admitted, and on the V1 engine, whose prefills run in steps): what vLLM does not export, kept
    so that a benchmark can tell how much an estimator working from vLLM's metrics loses by not knowing it.
    """

    __slots__ = (
        "_epoch",
        "_gen",
        "_join_base",
        "_kv_const",
        "_stop_reason",
        "admitted_batch",
        "arrival_time",
        "finish_reason",
        "finish_time",
        "first_token_time",
        "last_token_time",
        "num_preemptions",
        "output_tokens",
        "prompt_tokens",
        "request_id",
        "scheduled_time",
        "seq_no",
        "state",
    )

    def __init__(
        self,
        seq_no: int,
        request_id: Hashable,
        *,
        prompt_tokens: int,
        output_tokens: int,
        arrival_time: float,
        stop_reason: str,
    ) -> None:
        self.seq_no = seq_no
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.arrival_time = arrival_time
        self.scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.last_token_time: float | None = None
        self.finish_time: float | None = None
        self.finish_reason: str | None = None
        self.num_preemptions = 0
        self.admitted_batch: int | None = None
        self.state = SeqState.WAITING
        self._stop_reason = stop_reason
        self._gen = 0  # tokens generated (while DECODING: at the time it joined)
        self._join_base = 0  # completed-step count when it started decoding
        self._kv_const = 0  # prompt + _gen - _join_base while DECODING
        self._epoch = 0  # invalidates stale heap entries

    def __repr__(self) -> str:
        return (
            f"Sequence({self.request_id!r}, state={self.state.value}, prompt={self.prompt_tokens}, "
            f"output={self.output_tokens})"
        )


@dataclass(slots=True)
class EngineOutput:
    """What happened since the previous :meth:`Engine.advance` call.

    ``itl`` holds inter-token gaps as ``(seconds, count)`` pairs: every token after a sequence's
    first one contributes one gap (the time since that sequence's previous token), as vLLM's
    ``vllm:inter_token_latency_seconds`` does.
    """

    first_tokens: list[Sequence] = field(default_factory=list)
    finished: list[Sequence] = field(default_factory=list)
    itl: list[tuple[float, int]] = field(default_factory=list)
    generation_tokens: int = 0
    preemptions: int = 0
    steps: int = 0

    def __bool__(self) -> bool:
        return bool(
            self.first_tokens or self.finished or self.itl or self.generation_tokens or self.preemptions
        )


_Seq = TypeVar("_Seq", bound="Sequence")
_Out = TypeVar("_Out", bound="EngineOutput")


class _EngineCore(Generic[_Seq, _Out]):
    """What both engine models share: the queue and batch views vLLM's gauges read, preemption by
    recompute of the most recently admitted sequence, finishing, and the noise of a duration.

    A subclass sets ``_now``, ``_running`` (admission order), ``_waiting`` (FIFO, preempted ones at the
    head), ``_waiting_aborted``, ``_steps``, ``_out``, ``_rng`` and ``_sigma``, and implements
    ``_release(seq)`` (take it out of the batch, free its KV) and ``last_token_time(seq)``.
    """

    _now: float
    _running: dict[int, _Seq]
    _waiting: deque[_Seq]
    _waiting_aborted: int
    _steps: int
    _out: _Out
    _rng: random.Random
    _sigma: float

    @property
    def now(self) -> float:
        """The engine's current time: the latest ``now`` it was given."""
        return self._now

    @property
    def num_running(self) -> int:
        """Sequences holding a batch slot (prefilling or decoding), as ``vllm:num_requests_running``."""
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        """Sequences in the FIFO queue (including preempted ones), as ``vllm:num_requests_waiting``."""
        return len(self._waiting) - self._waiting_aborted

    @property
    def completed_steps(self) -> int:
        """Number of steps completed so far."""
        return self._steps

    def last_token_time(self, seq: _Seq) -> float | None:
        raise NotImplementedError

    def _release(self, seq: _Seq) -> None:
        raise NotImplementedError

    def _preempt_last(self, t: float) -> None:
        """vLLM's recompute preemption of the most recently admitted sequence: back to the queue's head."""
        seq = next(reversed(self._running.values()))
        seq.last_token_time = self.last_token_time(seq)
        self._release(seq)
        seq.state = SeqState.WAITING
        seq.num_preemptions += 1
        self._out.preemptions += 1
        self._waiting.appendleft(seq)

    def _finish(self, seq: _Seq, t: float, reason: str) -> None:
        seq.state = SeqState.FINISHED
        seq.finish_time = t
        seq.finish_reason = reason
        self._out.finished.append(seq)

    def _noise_factor(self) -> float:
        sigma = self._sigma
        return self._rng.lognormvariate(-0.5 * sigma * sigma, sigma)


class Engine(_EngineCore[Sequence, EngineOutput]):
    """Continuous-batching engine: FIFO queue, bounded batch, KV cache with preemption (see module doc).

    The engine's time starts at ``start_time`` and only moves forward: every method taking ``now``
    first processes everything due up to ``now`` (the results go to the next :meth:`advance` output).
    """

    def __init__(self, config: EngineConfig, *, start_time: float = 0.0) -> None:
        self.config = config
        self._profile = config.profile
        self._unit = 1.0 / (1000.0 * config.time_scale)  # ms of profile time -> engine seconds
        self._rng = random.Random(config.seed)
        self._sigma = math.sqrt(math.log1p(config.noise * config.noise)) if config.noise > 0 else 0.0
        self._now = start_time
        self._seq_counter = 0
        self._waiting: deque[Sequence] = deque()
        self._waiting_aborted = 0  # aborted sequences still in _waiting (removed lazily, at the head)
        self._running: dict[int, Sequence] = {}  # admission order; LIFO victim = last item
        self._joining: list[Sequence] = []
        self._prefill_heap: list[tuple[float, int, int, Sequence]] = []  # (end, seq_no, epoch, seq)
        self._finish_heap: list[tuple[int, int, int, Sequence]] = []  # (finish_step, seq_no, epoch, seq)
        # decode-step state
        self._steps = 0  # completed decode steps (G)
        self._n_dec = 0  # sequences taking part in the current step
        self._step_joiners: list[Sequence] = []  # sequences in their first step
        self._step_end = _INF  # end of the step in progress, inf when none
        self._step_dur = 0.0
        self._anchor_time = start_time  # step ends are anchor_time + (G - anchor_steps)·step_dur
        self._anchor_steps = 0
        self._last_step_end = start_time
        # KV accounting: used = dec_const + n_dec·(G + in_progress) + other
        self._kv_dec_const = 0
        self._kv_other = 0
        self._out = EngineOutput()

    # ------------------------------------------------------------------ public API

    @property
    def kv_cache_usage(self) -> float:
        """Fraction (0–1) of the KV cache in use, as ``vllm:kv_cache_usage_perc``."""
        return self._kv_used() / self.config.kv_cache_tokens

    def submit(
        self,
        request_id: Hashable,
        prompt_tokens: int,
        output_tokens: int,
        now: float,
        *,
        stop_reason: str = "length",
    ) -> Sequence:
        """Queue a request arriving at ``now`` that will generate exactly ``output_tokens`` tokens.

        ``stop_reason`` is the finish reason reported when it completes (``"length"`` when the caller
        asked for that many tokens, ``"stop"`` when the length stands for an end-of-sequence token).
        Raises :class:`EngineError` if the request can never be served (``prompt + output`` above
        ``max_model_len``) or if ``now`` is before the engine's time.
        """
        if prompt_tokens < 0 or output_tokens < 1:
            raise EngineError(
                f"need prompt_tokens >= 0 and output_tokens >= 1, got {prompt_tokens}, {output_tokens}"
            )
        if prompt_tokens + output_tokens > self.config.max_model_len:
            raise EngineError(
                f"prompt ({prompt_tokens}) + output ({output_tokens}) tokens exceed max_model_len "
                f"({self.config.max_model_len})"
            )
        self._process(now)
        self._seq_counter += 1
        seq = Sequence(
            self._seq_counter,
            request_id,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            arrival_time=now,
            stop_reason=stop_reason,
        )
        self._waiting.append(seq)
        if len(self._waiting) - self._waiting_aborted == 1:
            self._admit(now)
        return seq

    def abort(self, seq: Sequence, now: float) -> None:
        """Remove a sequence that has not finished (a client went away); it finishes as ``"abort"``."""
        self._process(now)
        state = seq.state
        if state is SeqState.FINISHED:
            return
        if state is SeqState.WAITING:
            self._waiting_aborted += 1  # left in the deque; _admit drops it when it reaches the head
            self._finish(seq, now, "abort")
            if len(self._running) < self.config.max_num_seqs:
                self._admit(now)
            return
        seq.last_token_time = self.last_token_time(seq)
        self._release(seq)
        self._finish(seq, now, "abort")
        self._admit(now)

    def next_event_time(self) -> float | None:
        """Time of the next internal event (a step end or a prefill end), or ``None`` when idle."""
        t = self._step_end
        top = self._peek_prefill()
        if top is not None and top < t:
            t = top
        return None if t == _INF else t

    def advance(self, now: float) -> EngineOutput:
        """Process every event due at or before ``now`` and return what happened since the last call."""
        self._process(now)
        out, self._out = self._out, EngineOutput()
        return out

    def num_generated(self, seq: Sequence) -> int:
        """Tokens generated so far by ``seq`` (all of them once it has finished)."""
        if seq.state is SeqState.DECODING:
            return seq._gen + self._steps - seq._join_base
        return seq._gen

    def last_token_time(self, seq: Sequence) -> float | None:
        """Time of the latest token of ``seq`` (``None`` before its first token)."""
        if seq.state is SeqState.DECODING and self._steps > seq._join_base:
            return self._last_step_end
        return seq.last_token_time

    # ------------------------------------------------------------------ event loop

    def _process(self, now: float) -> None:
        if now < self._now:
            raise EngineError(f"time went backwards: now={now!r} < engine time {self._now!r}")
        while True:
            step_end = self._step_end
            prefill_end = self._peek_prefill()
            if prefill_end is not None and prefill_end <= step_end:
                if prefill_end > now:
                    break
                self._end_prefill()
            else:
                if step_end > now or step_end == _INF:
                    break
                if not self._fast_forward(now, prefill_end):
                    self._end_step()
        self._now = now

    def _peek_prefill(self) -> float | None:
        heap = self._prefill_heap
        while heap:
            end, _, epoch, seq = heap[0]
            if epoch == seq._epoch and seq.state is SeqState.PREFILLING:
                return end
            heapq.heappop(heap)
        return None

    def _end_prefill(self) -> None:
        t, _, _, seq = heapq.heappop(self._prefill_heap)
        seq._gen += 1
        out = self._out
        out.generation_tokens += 1
        if seq.first_token_time is None:
            seq.first_token_time = t
            out.first_tokens.append(seq)
        else:
            assert seq.last_token_time is not None
            out.itl.append((t - seq.last_token_time, 1))
        seq.last_token_time = t
        if seq._gen >= seq.output_tokens:
            self._kv_other -= seq.prompt_tokens + seq._gen
            del self._running[seq.seq_no]
            self._finish(seq, t, seq._stop_reason)
            self._admit(t)
            return
        seq.state = SeqState.JOINING
        self._joining.append(seq)
        if self._step_end == _INF:
            self._start_step(t, contiguous=False)

    def _end_step(self) -> None:
        t = self._step_end
        self._steps += 1
        steps = self._steps
        self._last_step_end = t
        out = self._out
        n = self._n_dec
        out.steps += 1
        out.generation_tokens += n
        regular = n
        for seq in self._step_joiners:
            if seq.state is SeqState.DECODING:
                assert seq.last_token_time is not None
                out.itl.append((t - seq.last_token_time, 1))
                regular -= 1
        if regular > 0:
            out.itl.append((self._step_dur, regular))
        heap = self._finish_heap
        while heap and heap[0][0] <= steps:
            _, _, epoch, seq = heapq.heappop(heap)
            if epoch != seq._epoch or seq.state is not SeqState.DECODING:
                continue
            seq.last_token_time = t
            self._release(seq)
            self._finish(seq, t, seq._stop_reason)
        self._step_end = _INF
        self._start_step(t, contiguous=True)

    def _fast_forward(self, now: float, prefill_end: float | None) -> bool:
        """Cross a run of identical steps in O(1); False when the next step end needs the full path.

        Only without noise, when nothing can change at the boundaries being crossed: no joiner in the
        current step or waiting to join, nobody admissible, no completion and no preemption.
        """
        if self._sigma > 0 or self._step_joiners or self._joining:
            return False
        if len(self._waiting) > self._waiting_aborted and len(self._running) < self.config.max_num_seqs:
            return False
        n = self._n_dec
        if n == 0:
            return False
        heap = self._finish_heap
        while heap and (heap[0][2] != heap[0][3]._epoch or heap[0][3].state is not SeqState.DECODING):
            heapq.heappop(heap)
        g = self._steps
        # Steps g+1 .. g+m end here and the step g+m+1 starts identical; the full path handles the rest.
        m = (heap[0][0] - 1 - g) if heap else 1 << 62
        room = self.config.kv_cache_tokens - self._kv_dec_const - self._kv_other
        m = min(m, room // n - g - 1)  # boundary after step g+j needs dec_const + n·(g+j+1) + other <= cap
        dur = self._step_dur
        limit = now if prefill_end is None else min(now, prefill_end)
        # step k (k > g) ends at anchor + (k - anchor_steps)·dur; require the end of step g+m < limit
        if limit != _INF:
            span = (limit - self._anchor_time) / dur - (g - self._anchor_steps)
            m = min(m, math.ceil(span) - 1)
        while m >= 1 and self._anchor_time + (g + m - self._anchor_steps) * dur >= limit:
            m -= 1
        if m < 2:
            return False
        self._steps = g + m
        self._last_step_end = self._anchor_time + (g + m - self._anchor_steps) * dur
        self._step_end = self._anchor_time + (g + m + 1 - self._anchor_steps) * dur
        out = self._out
        out.steps += m
        out.generation_tokens += n * m
        out.itl.append((dur, n * m))
        return True

    def _start_step(self, t: float, *, contiguous: bool) -> None:
        """Start a decode step at ``t`` with the joiners; preempt if KV is short; admit if possible."""
        g = self._steps
        joiners = self._joining
        if joiners:
            self._joining = []
            for seq in joiners:
                seq.state = SeqState.DECODING
                seq._join_base = g
                seq._kv_const = seq.prompt_tokens + seq._gen - g
                seq._epoch += 1
                self._kv_other -= seq.prompt_tokens + seq._gen
                self._kv_dec_const += seq._kv_const
                self._n_dec += 1
                heapq.heappush(
                    self._finish_heap, (g + seq.output_tokens - seq._gen, seq.seq_no, seq._epoch, seq)
                )
            self._step_joiners = joiners
        elif self._step_joiners:
            self._step_joiners = []
        cap = self.config.kv_cache_tokens
        preempted = False
        while self._n_dec > 0 and self._kv_dec_const + self._n_dec * (g + 1) + self._kv_other > cap:
            self._preempt_last(t)
            preempted = True
        if not preempted or not self._running:
            self._admit(t)
        if self._n_dec == 0:
            self._step_end = _INF
            return
        dur = self._profile.decode_ms(len(self._running)) * self._unit
        if self._sigma > 0:
            dur *= self._noise_factor()
        if not (contiguous and dur == self._step_dur and self._sigma == 0):
            self._anchor_time = t
            self._anchor_steps = g
        self._step_dur = dur
        self._step_end = self._anchor_time + (g + 1 - self._anchor_steps) * dur

    # ------------------------------------------------------------------ admission, release, preemption

    def _kv_used(self) -> int:
        in_progress = 1 if self._step_end != _INF else 0
        return self._kv_dec_const + self._n_dec * (self._steps + in_progress) + self._kv_other

    def _admit(self, t: float) -> None:
        waiting = self._waiting
        running = self._running
        max_seqs = self.config.max_num_seqs
        cap = self.config.kv_cache_tokens
        while waiting:
            seq = waiting[0]
            if seq.state is SeqState.FINISHED:  # aborted while waiting
                waiting.popleft()
                self._waiting_aborted -= 1
                continue
            if len(running) >= max_seqs:
                break
            need = seq.prompt_tokens + seq._gen + 1
            if self._kv_used() + need + self._n_dec + len(self._joining) > cap and running:
                break
            waiting.popleft()
            running[seq.seq_no] = seq
            self._kv_other += need
            if seq.scheduled_time is None:
                seq.scheduled_time = t
            seq.state = SeqState.PREFILLING
            seq._epoch += 1
            seq.admitted_batch = len(running)
            dur = self._profile.prefill_ms(seq.prompt_tokens + seq._gen, len(running)) * self._unit
            if self._sigma > 0:
                dur *= self._noise_factor()
            heapq.heappush(self._prefill_heap, (t + dur, seq.seq_no, seq._epoch, seq))

    def _release(self, seq: Sequence) -> None:
        """Take a running/joining sequence out of the batch and free its KV (not its tokens)."""
        state = seq.state
        if state is SeqState.DECODING:
            seq._gen = self.num_generated(seq)
            self._n_dec -= 1
            self._kv_dec_const -= seq._kv_const
        elif state is SeqState.PREFILLING:
            self._kv_other -= seq.prompt_tokens + seq._gen + 1
        elif state is SeqState.JOINING:
            self._joining.remove(seq)
            self._kv_other -= seq.prompt_tokens + seq._gen
        seq._epoch += 1
        del self._running[seq.seq_no]
