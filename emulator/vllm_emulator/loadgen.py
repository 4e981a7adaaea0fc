"""``vllm-loadgen``: an open-loop load generator for OpenAI-compatible servers (the emulator or vLLM).

Arrivals follow a rate schedule (Poisson or evenly spaced), each request's prompt and output lengths
are drawn from token-length distributions (:mod:`vllm_emulator.distributions`), in-flight requests are
capped (arrivals over the cap are dropped and counted), and the run stops by itself: after the last
arrival it waits at most ``drain_timeout`` seconds for the requests still in flight.

Rates: ``--rate`` takes requests per **minute**, as WVA's load generator does: a number (constant
rate for ``--duration`` seconds) or a schedule ``'[[120, 60], [120, 80]]'`` (pairs of duration in
seconds and requests per minute). ``--rps`` takes a constant rate in requests per second.

Progress goes to stderr; at the end a JSON summary goes to stdout: achieved rate, errors, drops,
client-side TTFT and inter-token latency (streaming only) and end-to-end latency (mean, p50, p90,
p99, in milliseconds).

The same run is available in-process for tests and demos::

    summary = await run_load(LoadSpec(targets=("http://127.0.0.1:8000",), schedule=((30.0, 5.0),)))

HTTP is spoken by a small keep-alive HTTP/1.1 client on asyncio streams (one pool of connections per
target), which is several times cheaper per request than a general-purpose client.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import contextlib
import json
import math
import os
import random
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from vllm_emulator.distributions import LengthDistribution, parse_distribution
from vllm_emulator.errors import ConfigError, EmulatorError
from vllm_emulator.tokenizer import CHAT_MESSAGE_OVERHEAD, CHAT_PROMPT_OVERHEAD, generate_text

__all__ = [
    "LatencyStats",
    "LoadGenerator",
    "LoadSpec",
    "LoadSummary",
    "RequestRecord",
    "main",
    "parse_schedule",
    "run_load",
]


class LoadGenError(EmulatorError):
    """A load-generator failure that is not a single request's error (e.g. no model to target)."""


# ---------------------------------------------------------------------------------------------- spec


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """One load run. ``schedule`` holds ``(duration_seconds, requests_per_second)`` segments."""

    targets: tuple[str, ...]
    schedule: tuple[tuple[float, float], ...]
    model: str | None = None
    """Model name to send; ``None`` asks the first target's ``/v1/models``."""
    arrival: str = "poisson"
    input_tokens: LengthDistribution = field(default_factory=lambda: parse_distribution("128"))
    output_tokens: LengthDistribution = field(default_factory=lambda: parse_distribution("128"))
    stream: bool = False
    endpoint: str = "completions"
    max_concurrency: int = 1024
    seed: int = 0
    request_timeout: float = 300.0
    drain_timeout: float = 60.0
    api_key: str | None = None

    def __post_init__(self) -> None:
        if not self.targets:
            raise ConfigError("at least one target URL is needed")
        for url in self.targets:
            _split_url(url)
        if not self.schedule:
            raise ConfigError("the rate schedule is empty")
        for duration, rate in self.schedule:
            if not (math.isfinite(duration) and duration > 0 and math.isfinite(rate) and rate >= 0):
                raise ConfigError(
                    f"bad schedule segment ({duration}, {rate}): need duration > 0 and rate >= 0"
                )
        if self.arrival not in {"poisson", "deterministic"}:
            raise ConfigError(f"arrival must be poisson or deterministic, got {self.arrival!r}")
        if self.endpoint not in {"completions", "chat"}:
            raise ConfigError(f"endpoint must be completions or chat, got {self.endpoint!r}")
        if self.max_concurrency < 1:
            raise ConfigError("max_concurrency must be >= 1")
        if not self.request_timeout > 0 or not self.drain_timeout >= 0:
            raise ConfigError("request_timeout must be > 0 and drain_timeout >= 0")

    @property
    def duration(self) -> float:
        return sum(d for d, _ in self.schedule)


def parse_schedule(text: str) -> tuple[tuple[float, float], ...] | float:
    """Parse ``--rate``: a number of requests per minute, or ``[[seconds, rpm], ...]``.

    Returns the constant rate in requests per **minute** for a number, or the schedule converted to
    ``(seconds, requests per second)`` segments.
    """
    text = text.strip()
    try:
        value = json.loads(text)
    except ValueError:
        raise ConfigError(
            f"--rate must be a number or a JSON list of [seconds, rpm] pairs, got {text!r}"
        ) from None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"--rate must be >= 0, got {text!r}")
        return float(value)
    if not isinstance(value, list) or not value:
        raise ConfigError(f"--rate schedule must be a non-empty list of [seconds, rpm] pairs, got {text!r}")
    segments: list[tuple[float, float]] = []
    for item in value:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in item)
        ):
            raise ConfigError(f"every --rate schedule entry must be [seconds, rpm], got {item!r}")
        seconds, rpm = float(item[0]), float(item[1])
        if not (math.isfinite(seconds) and seconds > 0 and math.isfinite(rpm) and rpm >= 0):
            raise ConfigError(f"schedule entry {item!r}: need seconds > 0 and rpm >= 0")
        segments.append((seconds, rpm / 60.0))
    return tuple(segments)


def arrival_times(
    schedule: Sequence[tuple[float, float]], arrival: str, rng: random.Random
) -> Iterator[float]:
    """Arrival offsets (seconds from the start) for a schedule of ``(duration, req/s)`` segments."""
    start = 0.0
    for duration, rate in schedule:
        end = start + duration
        if rate > 0:
            if arrival == "deterministic":
                gap = 1.0 / rate
                k = 0
                while (t := start + k * gap) < end:
                    yield t
                    k += 1
            else:
                t = start + rng.expovariate(rate)
                while t < end:
                    yield t
                    t += rng.expovariate(rate)
        start = end


# ---------------------------------------------------------------------------------------------- stats


class LatencyRecorder:
    """Mean and percentiles of a stream of durations (seconds) in bounded memory.

    Up to ``exact_limit`` samples are kept and percentiles are exact (linear interpolation); past
    that, they come from a log-bucketed histogram with 0.25 % relative resolution.
    """

    _RATIO = 1.005
    _MIN = 1e-7

    def __init__(self, exact_limit: int = 200_000) -> None:
        self.count = 0
        self.sum = 0.0
        self._limit = exact_limit
        self._samples: array.array[float] | None = array.array("d")
        self._log_ratio = math.log(self._RATIO)
        self._buckets: dict[int, int] = {}

    def add(self, value: float) -> None:
        self.count += 1
        self.sum += value
        index = int(math.log(max(value, self._MIN) / self._MIN) / self._log_ratio)
        self._buckets[index] = self._buckets.get(index, 0) + 1
        samples = self._samples
        if samples is not None:
            if len(samples) < self._limit:
                samples.append(value)
            else:
                self._samples = None

    def percentile(self, q: float) -> float:
        if self.count == 0:
            return math.nan
        samples = self._samples
        if samples is not None:
            ordered = sorted(samples)
            pos = (len(ordered) - 1) * q
            lo = math.floor(pos)
            hi = min(lo + 1, len(ordered) - 1)
            return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
        rank = q * (self.count - 1)
        seen = 0
        for index in sorted(self._buckets):
            seen += self._buckets[index]
            if seen > rank:
                return float(self._MIN * self._RATIO ** (index + 0.5))
        return math.nan  # pragma: no cover - unreachable: the ranks add up to count

    def stats(self) -> LatencyStats | None:
        if self.count == 0:
            return None
        return LatencyStats(
            count=self.count,
            mean_ms=1000.0 * self.sum / self.count,
            p50_ms=1000.0 * self.percentile(0.50),
            p90_ms=1000.0 * self.percentile(0.90),
            p99_ms=1000.0 * self.percentile(0.99),
        )


@dataclass(frozen=True, slots=True)
class LatencyStats:
    count: int
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float

    def to_dict(self) -> dict[str, float]:
        return {
            "count": self.count,
            "mean": round(self.mean_ms, 4),
            "p50": round(self.p50_ms, 4),
            "p90": round(self.p90_ms, 4),
            "p99": round(self.p99_ms, 4),
        }


@dataclass(slots=True)
class LoadSummary:
    """The result of a run. Rates are per second of the run's wall-clock duration."""

    duration_s: float
    sent: int
    completed: int
    errors: int
    dropped: int
    unfinished: int
    prompt_tokens: int
    completion_tokens: int
    error_kinds: dict[str, int]
    ttft: LatencyStats | None
    itl: LatencyStats | None
    e2e: LatencyStats | None
    scheduled: int = 0
    window_s: float = 0.0
    """Length of the arrival schedule (the run lasts longer by the drain)."""

    @property
    def offered_rate(self) -> float:
        """Requests sent per second."""
        return self.sent / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def achieved_rate(self) -> float:
        """Requests completed successfully per second."""
        return self.completed / self.duration_s if self.duration_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        def stats(s: LatencyStats | None) -> dict[str, float] | None:
            return None if s is None else s.to_dict()

        return {
            "duration_s": round(self.duration_s, 3),
            "window_s": round(self.window_s, 3),
            "scheduled": self.scheduled,
            "sent": self.sent,
            "completed": self.completed,
            "errors": self.errors,
            "dropped": self.dropped,
            "unfinished": self.unfinished,
            "offered_rate": round(self.offered_rate, 3),
            "achieved_rate": round(self.achieved_rate, 3),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "error_kinds": dict(sorted(self.error_kinds.items())),
            "ttft_ms": stats(self.ttft),
            "itl_ms": stats(self.itl),
            "e2e_ms": stats(self.e2e),
        }


@dataclass(slots=True)
class RequestRecord:
    """One request as the generator saw it, handed to ``on_request`` when it ends.

    For per-request analyses the summary cannot give, such as the share of requests that met a TTFT and
    an ITL target, or which target served what. Times are in seconds; ``sent_at`` counts from the start
    of the run. ``ttft_s`` and ``itl_s`` (the mean gap between this request's tokens) need streaming.
    """

    target: str
    sent_at: float
    error: str | None = None
    """Error kind (as in ``error_kinds``); ``"unfinished"`` if the drain cut it off; None: completed."""
    ttft_s: float | None = None
    itl_s: float | None = None
    e2e_s: float | None = None
    output_tokens: int = 0


# ---------------------------------------------------------------------------------------------- HTTP


class _HttpError(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _split_url(url: str) -> tuple[str, int, str]:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ConfigError(f"target URL must be http://host[:port][/v1], got {url!r}")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return parts.hostname, parts.port or 80, path


class _Response:
    __slots__ = ("chunked", "keep_alive", "length", "status")

    def __init__(self, status: int, length: int | None, chunked: bool, keep_alive: bool) -> None:
        self.status = status
        self.length = length
        self.chunked = chunked
        self.keep_alive = keep_alive


class _Connection:
    __slots__ = ("reader", "reused", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reused = False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()

    async def head(self) -> _Response:
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.split(b"\r\n")
        status_line = lines[0].split(b" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
            raise _HttpError("bad_response")
        status = int(status_line[1])
        length: int | None = None
        chunked = False
        keep_alive = status_line[0] == b"HTTP/1.1"
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                continue
            key = name.strip().lower()
            if key == b"content-length":
                length = int(value.strip())
            elif key == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif key == b"connection":
                token = value.strip().lower()
                if token == b"close":
                    keep_alive = False
                elif token == b"keep-alive":
                    keep_alive = True
        if length is None and not chunked:
            keep_alive = False
        return _Response(status, length, chunked, keep_alive)

    async def body(self, response: _Response) -> bytes:
        if response.chunked:
            return b"".join([chunk async for chunk in self.chunks()])
        if response.length is not None:
            return await self.reader.readexactly(response.length)
        return await self.reader.read()

    async def chunks(self) -> AsyncIterator[bytes]:
        reader = self.reader
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                return
            data = await reader.readexactly(size + 2)
            yield data[:-2]


class _Target:
    """A server and its idle keep-alive connections."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.host, self.port, self.prefix = _split_url(url)
        self.idle: list[_Connection] = []

    async def connect(self) -> _Connection:
        while self.idle:
            conn = self.idle.pop()
            if not conn.writer.is_closing() and not conn.reader.at_eof():
                conn.reused = True
                return conn
            conn.close()
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        except OSError:
            raise _HttpError("connect") from None
        return _Connection(reader, writer)

    def release(self, conn: _Connection, keep_alive: bool) -> None:
        if keep_alive and not conn.writer.is_closing():
            self.idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()

    def request_bytes(self, method: str, path: str, body: bytes, api_key: str | None) -> bytes:
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        head = (
            f"{method} {self.prefix}{path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{auth}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body


async def _get_json(target: _Target, path: str, limit_s: float) -> Any:
    async with asyncio.timeout(limit_s):
        conn = await target.connect()
        try:
            conn.writer.write(target.request_bytes("GET", path, b"", None))
            response = await conn.head()
            body = await conn.body(response)
        except BaseException:
            conn.close()
            raise
        target.release(conn, response.keep_alive)
    if response.status != 200:
        raise LoadGenError(f"GET {target.url}{path} answered HTTP {response.status}")
    return json.loads(body)


# ---------------------------------------------------------------------------------------------- run


class LoadGenerator:
    """Runs one :class:`LoadSpec`; :meth:`run` returns the :class:`LoadSummary`."""

    def __init__(self, spec: LoadSpec, *, progress: Callable[[str], None] | None = None,
                 progress_interval: float = 5.0,
                 on_request: Callable[[RequestRecord], None] | None = None) -> None:  # fmt: skip
        self.spec = spec
        self._on_request = on_request
        self._progress = progress
        self._progress_interval = progress_interval
        self._rng = random.Random(spec.seed)
        self._targets = [_Target(url) for url in spec.targets]
        self._next_target = 0
        self._model = spec.model or ""
        self.sent = 0
        self.completed = 0
        self.errors = 0
        self.dropped = 0
        self.scheduled = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.error_kinds: dict[str, int] = {}
        self.ttft = LatencyRecorder()
        self.itl = LatencyRecorder()
        self.e2e = LatencyRecorder()
        self._inflight: set[asyncio.Task[None]] = set()
        self._started = 0.0

    async def run(self) -> LoadSummary:
        loop = asyncio.get_running_loop()
        if not self._model:
            self._model = await self._discover_model()
        progress_task = asyncio.create_task(self._report()) if self._progress else None
        self._started = loop.time()
        try:
            await self._arrivals(loop)
            unfinished = await self._drain()
        finally:
            if progress_task is not None:
                progress_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await progress_task
            for target in self._targets:
                target.close()
        duration = loop.time() - self._started
        summary = LoadSummary(
            duration_s=duration,
            sent=self.sent,
            completed=self.completed,
            errors=self.errors,
            dropped=self.dropped,
            unfinished=unfinished,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            error_kinds=dict(self.error_kinds),
            ttft=self.ttft.stats(),
            itl=self.itl.stats(),
            e2e=self.e2e.stats(),
            scheduled=self.scheduled,
            window_s=self.spec.duration,
        )
        if self._progress:
            self._progress(self._progress_line(loop.time()) + " done")
        return summary

    async def _discover_model(self) -> str:
        try:
            listing = await _get_json(self._targets[0], "/v1/models", self.spec.request_timeout)
            return str(listing["data"][0]["id"])
        except (_HttpError, OSError, TimeoutError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise LoadGenError(
                f"cannot read the model from {self.spec.targets[0]}/v1/models: {exc!r}"
            ) from None

    async def _arrivals(self, loop: asyncio.AbstractEventLoop) -> None:
        spec = self.spec
        start = self._started
        cap = spec.max_concurrency
        burst = 0
        for offset in arrival_times(spec.schedule, spec.arrival, self._rng):
            delay = start + offset - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
                burst = 0
            else:
                burst += 1
                if burst >= 64:  # behind schedule: still let responses in now and then
                    burst = 0
                    await asyncio.sleep(0)
            self.scheduled += 1
            if len(self._inflight) >= cap:
                self.dropped += 1
                continue
            task = loop.create_task(self._one())
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
        end = start + spec.duration
        if (rest := end - loop.time()) > 0:
            await asyncio.sleep(rest)

    async def _drain(self) -> int:
        if not self._inflight:
            return 0
        pending = set(self._inflight)
        # 0: do not wait, cancel what is still in flight (it used to mean "wait without limit").
        _, still = await asyncio.wait(pending, timeout=self.spec.drain_timeout)
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still)
        return len(still)

    def _error(self, kind: str, record: RequestRecord) -> None:
        self.errors += 1
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1
        record.error = kind

    def _body(self) -> tuple[str, bytes]:
        spec = self.spec
        rng = self._rng
        n_in = spec.input_tokens.sample(rng)
        n_out = spec.output_tokens.sample(rng)
        offset = rng.randrange(1 << 16)
        payload: dict[str, Any] = {"model": self._model, "max_tokens": n_out}
        if spec.endpoint == "chat":
            path = "/v1/chat/completions"
            content_tokens = max(1, n_in - CHAT_MESSAGE_OVERHEAD - CHAT_PROMPT_OVERHEAD)
            payload["messages"] = [{"role": "user", "content": generate_text(content_tokens, offset)}]
        else:
            path = "/v1/completions"
            payload["prompt"] = generate_text(n_in, offset)
        if spec.stream:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        return path, json.dumps(payload, separators=(",", ":")).encode()

    def _pick_target(self) -> _Target:
        target = self._targets[self._next_target]
        self._next_target = (self._next_target + 1) % len(self._targets)
        return target

    async def _one(self) -> None:
        path, body = self._body()
        target = self._pick_target()
        self.sent += 1
        record = RequestRecord(target.url, asyncio.get_running_loop().time() - self._started)
        try:
            await self._attempt(target, path, body, record)
        except asyncio.CancelledError:
            record.error = "unfinished"
            raise
        finally:
            if self._on_request is not None:
                self._on_request(record)

    async def _attempt(self, target: _Target, path: str, body: bytes, record: RequestRecord) -> None:
        try:
            async with asyncio.timeout(self.spec.request_timeout):
                for attempt in (0, 1):
                    conn = await target.connect()
                    try:
                        await self._exchange(target, conn, path, body, record)
                        return
                    except (ConnectionError, asyncio.IncompleteReadError) as exc:
                        conn.close()
                        # A kept-alive connection the server closed while idle: retry once on a new one.
                        if attempt == 0 and conn.reused and not getattr(exc, "partial", b""):
                            continue
                        self._error("connection", record)
                        return
                    except BaseException:
                        conn.close()
                        raise
        except TimeoutError:
            self._error("timeout", record)
        except _HttpError as exc:
            self._error(exc.kind, record)
        except (OSError, ValueError, asyncio.LimitOverrunError):
            self._error("protocol", record)

    async def _exchange(
        self, target: _Target, conn: _Connection, path: str, body: bytes, record: RequestRecord
    ) -> None:
        loop = asyncio.get_running_loop()
        sent_at = loop.time()
        conn.writer.write(target.request_bytes("POST", path, body, self.spec.api_key))
        response = await conn.head()
        if response.status != 200:
            await conn.body(response)
            target.release(conn, response.keep_alive)
            self._error(f"http_{response.status}", record)
            return
        if not self.spec.stream:
            data = await conn.body(response)
            done_at = loop.time()
            target.release(conn, response.keep_alive)
            try:
                usage = json.loads(data)["usage"]
                self.prompt_tokens += int(usage["prompt_tokens"])
                self.completion_tokens += int(usage["completion_tokens"])
            except (ValueError, KeyError, TypeError):
                self._error("bad_body", record)
                return
            self.e2e.add(done_at - sent_at)
            self.completed += 1
            record.e2e_s = done_at - sent_at
            record.output_tokens = int(usage["completion_tokens"])
            return
        first: float | None = None
        last = 0.0
        tokens = 0
        buffer = b""
        finished = False
        chunks = conn.chunks() if response.chunked else _raw_chunks(conn, response)
        async for chunk in chunks:
            now = loop.time()
            buffer += chunk
            while (cut := buffer.find(b"\n\n")) >= 0:
                event, buffer = buffer[:cut], buffer[cut + 2 :]
                if not event.startswith(b"data:"):
                    continue
                data = event[5:].strip()
                if data == b"[DONE]":
                    finished = True
                    continue
                message = json.loads(data)
                usage = message.get("usage")
                if usage:
                    self.prompt_tokens += int(usage.get("prompt_tokens", 0))
                choices = message.get("choices") or ()
                if choices and _has_content(choices[0]):
                    tokens += 1
                    if first is None:
                        first = now
                        self.ttft.add(now - sent_at)
                    else:
                        self.itl.add(now - last)
                    last = now
        done_at = loop.time()
        target.release(conn, response.keep_alive and response.chunked)
        if not finished:
            self._error("truncated_stream", record)
            return
        self.completion_tokens += tokens
        self.e2e.add(done_at - sent_at)
        self.completed += 1
        record.e2e_s = done_at - sent_at
        record.output_tokens = tokens
        if first is not None:
            record.ttft_s = first - sent_at
            if tokens > 1:
                record.itl_s = (last - first) / (tokens - 1)

    def _progress_line(self, now: float) -> str:
        elapsed = now - self._started
        rate = self.completed / elapsed if elapsed > 0 else 0.0
        return (
            f"[vllm-loadgen] t={elapsed:7.1f}s sent={self.sent} completed={self.completed} "
            f"errors={self.errors} dropped={self.dropped} in_flight={len(self._inflight)} "
            f"completed/s={rate:.2f}"
        )

    async def _report(self) -> None:
        assert self._progress is not None
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._progress_interval)
            self._progress(self._progress_line(loop.time()))


def _has_content(choice: Any) -> bool:
    if not isinstance(choice, dict):
        return False
    text = choice.get("text")
    if text:
        return True
    delta = choice.get("delta")
    return isinstance(delta, dict) and bool(delta.get("content"))


async def _raw_chunks(conn: _Connection, response: _Response) -> AsyncIterator[bytes]:
    remaining = response.length
    while remaining is None or remaining > 0:
        data = await conn.reader.read(65536 if remaining is None else min(65536, remaining))
        if not data:
            return
        if remaining is not None:
            remaining -= len(data)
        yield data


async def run_load(
    spec: LoadSpec,
    *,
    progress: Callable[[str], None] | None = None,
    progress_interval: float = 5.0,
    on_request: Callable[[RequestRecord], None] | None = None,
) -> LoadSummary:
    """Run ``spec`` and return its summary (the in-process API of ``vllm-loadgen``).

    ``on_request`` is called with a :class:`RequestRecord` as each request ends.
    """
    generator = LoadGenerator(
        spec, progress=progress, progress_interval=progress_interval, on_request=on_request
    )
    return await generator.run()


# ---------------------------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-loadgen",
        description=(
            "Open-loop load generator for OpenAI-compatible LLM servers. Progress goes to stderr, a JSON "
            "summary to stdout."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--url",
        action="append",
        dest="urls",
        metavar="URL",
        help="target base URL, http://host:port (a trailing /v1 is accepted); repeat or comma-separate "
        "for several targets, used round-robin (default: http://localhost:8000)",
    )
    parser.add_argument("--model", default=None, help="model name (default: the first target's /v1/models)")
    rate = parser.add_mutually_exclusive_group(required=True)
    rate.add_argument(
        "--rate",
        help="requests per MINUTE: a number, or a schedule '[[seconds, rpm], ...]' (WVA's form)",
    )
    rate.add_argument("--rps", type=float, help="constant rate in requests per second")
    parser.add_argument(
        "--duration", type=float, default=None, help="seconds to run at a constant rate (default 60)"
    )
    parser.add_argument(
        "--arrival",
        "--mode",
        dest="arrival",
        choices=("poisson", "deterministic"),
        default="poisson",
        help="inter-arrival times: exponential (Poisson process) or evenly spaced",
    )
    parser.add_argument(
        "--input-tokens",
        default="128",
        help="prompt-length distribution (e.g. 128, uniform:64:256, sharegpt)",
    )
    parser.add_argument(
        "--output-tokens", default="128", help="output-length distribution, sent as max_tokens"
    )
    parser.add_argument(
        "--stream", action="store_true", help="stream responses (needed for client-side TTFT and ITL)"
    )
    parser.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    parser.add_argument(
        "--max-concurrency",
        type=int,
        default=1024,
        help="cap on requests in flight; arrivals over it are dropped",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--request-timeout", type=float, default=300.0, help="seconds before one request counts as an error"
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=60.0,
        help="seconds to wait for in-flight requests after the last arrival",
    )
    parser.add_argument(
        "--progress-interval", type=float, default=5.0, help="seconds between progress lines (0: none)"
    )
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="sent as a bearer token")
    parser.add_argument("--output", default=None, help="also write the JSON summary to this file")
    return parser  # fmt: skip


def spec_from_args(args: argparse.Namespace) -> LoadSpec:
    urls: list[str] = []
    for item in args.urls or ["http://localhost:8000"]:
        urls.extend(u.strip() for u in item.split(",") if u.strip())
    if args.rps is not None:
        if not math.isfinite(args.rps) or args.rps < 0:
            raise ConfigError(f"--rps must be >= 0, got {args.rps}")
        schedule: tuple[tuple[float, float], ...] = ((args.duration or 60.0, args.rps),)
    else:
        parsed = parse_schedule(args.rate)
        if isinstance(parsed, float):
            schedule = ((args.duration or 60.0, parsed / 60.0),)
        else:
            if args.duration is not None:
                raise ConfigError(
                    "--duration cannot be combined with a --rate schedule (it sets the duration)"
                )
            schedule = parsed
    return LoadSpec(
        targets=tuple(urls),
        schedule=schedule,
        model=args.model,
        arrival=args.arrival,
        input_tokens=parse_distribution(args.input_tokens),
        output_tokens=parse_distribution(args.output_tokens),
        stream=args.stream,
        endpoint=args.endpoint,
        max_concurrency=args.max_concurrency,
        seed=args.seed,
        request_timeout=args.request_timeout,
        drain_timeout=args.drain_timeout,
        api_key=args.api_key,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        spec = spec_from_args(args)
    except ConfigError as exc:
        parser.error(str(exc))

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    interval = args.progress_interval
    try:
        summary = asyncio.run(
            run_load(spec, progress=progress if interval > 0 else None, progress_interval=interval or 5.0)
        )
    except LoadGenError as exc:
        print(f"vllm-loadgen: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    text = json.dumps(summary.to_dict(), indent=2)
    print(text, flush=True)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    return 0 if summary.completed > 0 or summary.scheduled == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
