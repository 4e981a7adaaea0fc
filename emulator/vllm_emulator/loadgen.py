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

Prompts (:mod:`vllm_emulator.prompts`) are unique, and with ``--shared-prefix-tokens`` a share of them
open with one of a few shared prefixes (system prompts), so a server's prefix cache has something to
hit. HTTP (:mod:`vllm_emulator.loadgen_http`) is a small keep-alive HTTP/1.1 client on asyncio
streams; the measurements are :mod:`vllm_emulator.loadgen_stats`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_emulator.distributions import LengthDistribution, parse_distribution
from vllm_emulator.errors import ConfigError
from vllm_emulator.loadgen_http import (
    Connection,
    HttpError,
    LoadGenError,
    Target,
    get_json,
    raw_chunks,
    split_url,
)
from vllm_emulator.loadgen_stats import LatencyRecorder, LatencyStats, LoadSummary, RequestRecord
from vllm_emulator.prompts import PromptBuilder, PromptSharing
from vllm_emulator.tokenizer import CHAT_MESSAGE_OVERHEAD, CHAT_PROMPT_OVERHEAD

__all__ = [
    "LatencyRecorder",
    "LatencyStats",
    "LoadGenError",
    "LoadGenerator",
    "LoadSpec",
    "LoadSummary",
    "PromptSharing",
    "RequestRecord",
    "main",
    "parse_schedule",
    "run_load",
]


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
    sharing: PromptSharing | None = None
    """Shared prompt prefixes (system prompts); None: every prompt unique from its first token."""

    def __post_init__(self) -> None:
        if not self.targets:
            raise ConfigError("at least one target URL is needed")
        for url in self.targets:
            split_url(url)
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
        self._prompts = PromptBuilder(spec.sharing, spec.seed)
        self._targets = [Target(url) for url in spec.targets]
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
            listing = await get_json(self._targets[0], "/v1/models", self.spec.request_timeout)
            return str(listing["data"][0]["id"])
        except (HttpError, OSError, TimeoutError, ValueError, KeyError, IndexError, TypeError) as exc:
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
        payload: dict[str, Any] = {"model": self._model, "max_tokens": n_out}
        if spec.endpoint == "chat":
            path = "/v1/chat/completions"
            content_tokens = max(1, n_in - CHAT_MESSAGE_OVERHEAD - CHAT_PROMPT_OVERHEAD)
            payload["messages"] = [{"role": "user", "content": self._prompts.text(rng, content_tokens)[0]}]
        else:
            path = "/v1/completions"
            payload["prompt"] = self._prompts.text(rng, n_in)[0]
        if spec.stream:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        return path, json.dumps(payload, separators=(",", ":")).encode()

    def _pick_target(self) -> Target:
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

    async def _attempt(self, target: Target, path: str, body: bytes, record: RequestRecord) -> None:
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
        except HttpError as exc:
            self._error(exc.kind, record)
        except (OSError, ValueError, asyncio.LimitOverrunError):
            self._error("protocol", record)

    async def _exchange(
        self, target: Target, conn: Connection, path: str, body: bytes, record: RequestRecord
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
        chunks = conn.chunks() if response.chunked else raw_chunks(conn, response)
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
    parser.add_argument(
        "--shared-prefix-tokens",
        default=None,
        help="length distribution of the shared prompt prefixes (system prompts); default: no sharing",
    )
    parser.add_argument("--prefix-groups", type=int, default=4, help="number of distinct shared prefixes")
    parser.add_argument(
        "--prefix-share",
        type=float,
        default=1.0,
        help="fraction of the requests that open with a shared prefix",
    )
    parser.add_argument(
        "--prefix-zipf",
        type=float,
        default=1.0,
        help="popularity of the prefixes: the k-th is chosen ~ 1/k^zipf",
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
        sharing=(
            PromptSharing(
                parse_distribution(args.shared_prefix_tokens),
                groups=args.prefix_groups,
                share=args.prefix_share,
                zipf=args.prefix_zipf,
            )
            if args.shared_prefix_tokens
            else None
        ),
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
