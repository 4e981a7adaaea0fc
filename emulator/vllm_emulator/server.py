"""The emulator's HTTP server: OpenAI-compatible endpoints, ``/health`` and ``/metrics`` on aiohttp.

The :class:`~vllm_emulator.engine.Engine` runs on the event loop's monotonic clock: engine time is
``loop.time()``. One timer callback, always armed for the engine's next event, advances the engine
and hands what happened to the waiting handlers (a future per non-streamed request, an event per
stream) and to the metrics. A request's submission and a scrape first advance the engine to "now",
so nothing is delivered late because the timer had not fired yet.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions`` (both streaming or not),
``GET /v1/models``, ``GET /health``, ``GET /version``, ``GET /metrics``.

Bad input never costs more than it must: a body over :func:`~vllm_emulator.protocol.max_body_bytes` is
refused (413) before it is read, a large body is parsed and tokenised in a worker thread (the event loop
keeps serving), a connection gets :attr:`EmulatorConfig.header_timeout` to send its headers, and every
error is an OpenAI error body. On SIGTERM the server drains as a pod behind a Service does: ``/health``
answers 503 at once, requests are still served for ``shutdown_delay`` (while the endpoint is withdrawn),
then the listener closes and the requests in flight finish (up to ``drain_timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from vllm_emulator import __version__
from vllm_emulator.config import EmulatorConfig
from vllm_emulator.connections import HeaderDeadline
from vllm_emulator.engine import Engine, EngineOutput, SeqState, Sequence
from vllm_emulator.engine_v1 import V1Config, V1Engine
from vllm_emulator.metrics import EmulatorMetrics, VllmCollector, build_registry
from vllm_emulator.protocol import (
    ApiError,
    ChunkEncoder,
    ParsedRequest,
    chat_body,
    completion_body,
    error_body,
    max_body_bytes,
    parse_chat,
    parse_completion,
)
from vllm_emulator.tokenizer import generate_text, generate_tokens

__all__ = ["EmulatorServer", "serve"]

log = logging.getLogger("vllm_emulator")

_JSON = "application/json"
# Bodies above this are parsed in a worker thread: tokenising ~1 MB takes tens of ms of CPU.
_THREAD_PARSE_BYTES = 64 * 1024


@dataclass(slots=True)
class _Stream:
    seq: Sequence
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sent: int = 0


def build_engine(config: EmulatorConfig, start_time: float) -> Engine | V1Engine:
    """The engine ``config`` asks for (``--engine``), its clock starting at ``start_time``."""
    if isinstance(config.engine, V1Config):
        return V1Engine(config.engine, start_time=start_time)
    return Engine(config.engine, start_time=start_time)


class EmulatorServer:
    """One emulated vLLM replica: the engine, its driver, the metrics and the aiohttp application."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self._loop: asyncio.AbstractEventLoop | None = None
        self.engine = build_engine(config, 0.0)
        e = config.engine
        # Prompts are hashed into prefix keys only when the V1 engine matches them by content.
        self._block_size = (
            e.block_size
            if isinstance(e, V1Config) and e.enable_prefix_caching and e.prefix_hit_ratio is None
            else 0
        )
        self.metrics = EmulatorMetrics(config.model, config.engine.max_model_len)
        self.registry = build_registry(
            VllmCollector(
                self.metrics,
                running=lambda: self.engine.num_running,
                waiting=lambda: self.engine.num_waiting,
                kv_usage=lambda: self.engine.kv_cache_usage,
                before_collect=self._flush,
                version=config.vllm_version,
                cache_info=config.cache_info(),
            )
        )
        self._rng = random.Random(config.seed)
        self._futures: dict[int, asyncio.Future[None]] = {}
        self._streams: dict[int, _Stream] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when = 0.0
        self._closing = False
        self.draining = False  # SIGTERM received: /health says 503, requests are still served
        self.idle = asyncio.Event()  # set when the last request in flight finishes
        self._started = int(time.time())
        self.app = self._build_app()

    # ------------------------------------------------------------------ application

    def _build_app(self) -> web.Application:
        app = web.Application(
            middlewares=[_error_middleware],
            client_max_size=max_body_bytes(self.config.engine.max_model_len),
        )
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/metrics", self.metrics_endpoint)
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def _on_startup(self, _app: web.Application) -> None:
        self._loop = asyncio.get_running_loop()
        self.engine = build_engine(self.config, self._loop.time())

    async def _on_shutdown(self, _app: web.Application) -> None:
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for fut in self._futures.values():
            if not fut.done():
                fut.cancel()
        for stream in self._streams.values():
            stream.wake.set()

    # ------------------------------------------------------------------ engine driver

    def _now(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    def _flush(self) -> None:
        """Advance the engine to now and deliver the output; re-arm the timer."""
        if self._loop is None:
            return
        self._deliver(self.engine.advance(self._loop.time()))
        self._arm()

    def _arm(self) -> None:
        assert self._loop is not None
        when = self.engine.next_event_time()
        timer = self._timer
        if when is None:
            if timer is not None:
                timer.cancel()
                self._timer = None
            return
        if timer is not None:
            if self._timer_when == when:
                return
            timer.cancel()
        self._timer_when = when
        self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._flush()

    def _deliver(self, out: EngineOutput) -> None:
        if not out:
            return
        self.metrics.record(out)
        for seq in out.finished:
            fut = self._futures.pop(seq.seq_no, None)
            if fut is not None and not fut.done():
                fut.set_result(None)
        if self._streams:
            engine = self.engine
            for stream in self._streams.values():
                seq = stream.seq
                if seq.state is SeqState.FINISHED or engine.num_generated(seq) > stream.sent:
                    stream.wake.set()

    def _sample_output(self, prompt_tokens: int, max_tokens: int | None) -> tuple[int, str]:
        if max_tokens is not None:
            return max_tokens, "length"
        room = self.config.engine.max_model_len - prompt_tokens
        wanted = self.config.output_tokens.sample(self._rng)
        if wanted >= room:
            return room, "length"
        return wanted, "stop"

    def _submit(
        self, request_id: str, prompt_tokens: int, max_tokens: int | None, keys: tuple[int, ...] | None = None
    ) -> Sequence:
        n, reason = self._sample_output(prompt_tokens, max_tokens)
        now = self._now()
        engine = self.engine
        if isinstance(engine, V1Engine):
            seq: Sequence = engine.submit(
                request_id, prompt_tokens, n, now, stop_reason=reason, prefix_keys=keys
            )
        else:
            seq = engine.submit(request_id, prompt_tokens, n, now, stop_reason=reason)
        self._deliver(self.engine.advance(now))
        self._arm()
        return seq

    def _abort(self, seq: Sequence) -> None:
        if seq.state is SeqState.FINISHED or self._loop is None:
            return
        self.engine.abort(seq, self._now())
        self._flush()

    # ------------------------------------------------------------------ handlers

    @property
    def in_flight(self) -> int:
        return len(self._futures) + len(self._streams)

    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(status=503 if self.draining else 200)

    async def version(self, _request: web.Request) -> web.Response:
        return web.json_response({"version": f"vllm-emulator {__version__}"})

    async def models(self, _request: web.Request) -> web.Response:
        model = self.config.model
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": model,
                        "object": "model",
                        "created": self._started,
                        "owned_by": "vllm",
                        "root": model,
                        "parent": None,
                        "max_model_len": self.config.engine.max_model_len,
                    }
                ],
            }
        )

    async def metrics_endpoint(self, _request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        parsed = await self._parse(parse_completion, await request.read())
        return await self._serve(request, parsed, f"cmpl-{uuid.uuid4().hex}")

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        parsed = await self._parse(parse_chat, await request.read())
        return await self._serve(request, parsed, f"chatcmpl-{uuid.uuid4().hex}")

    async def _parse(
        self, parse: Callable[[bytes, str, int, int], ParsedRequest], raw: bytes
    ) -> ParsedRequest:
        args = (raw, self.config.model, self.config.engine.max_model_len, self._block_size)
        if len(raw) > _THREAD_PARSE_BYTES:
            return await asyncio.to_thread(parse, *args)
        return parse(*args)

    async def _serve(
        self, request: web.Request, parsed: ParsedRequest, request_id: str
    ) -> web.StreamResponse:
        if parsed.stream:
            return await self._serve_stream(request, parsed, request_id)
        keys = parsed.prompt_keys or (None,) * len(parsed.prompt_tokens)
        seqs = [
            self._submit(request_id, count, parsed.max_tokens, key)
            for count, key in zip(parsed.prompt_tokens, keys, strict=True)
        ]
        try:
            for seq in seqs:
                if seq.state is not SeqState.FINISHED:
                    fut = self._loop_future()
                    self._futures[seq.seq_no] = fut
                    await fut
        finally:
            for seq in seqs:
                self._futures.pop(seq.seq_no, None)
                self._abort(seq)
            self._settled()
        for _ in seqs:
            self.metrics.request_params(parsed.max_tokens)
        created = int(time.time())
        prompt = sum(parsed.prompt_tokens)
        completion = sum(seq.output_tokens for seq in seqs)
        if parsed.kind == "chat":
            seq = seqs[0]
            body = chat_body(
                request_id,
                created=created,
                model=parsed.model,
                text=generate_text(seq.output_tokens, seq.seq_no),
                reason=seq.finish_reason or "length",
                prompt=prompt,
                completion=completion,
            )
        else:
            choices = [(generate_text(s.output_tokens, s.seq_no), s.finish_reason or "length") for s in seqs]
            body = completion_body(
                request_id,
                created=created,
                model=parsed.model,
                choices=choices,
                prompt=prompt,
                completion=completion,
            )
        return web.Response(text=json.dumps(body), content_type=_JSON)

    def _loop_future(self) -> asyncio.Future[None]:
        assert self._loop is not None
        return self._loop.create_future()

    async def _serve_stream(
        self, request: web.Request, parsed: ParsedRequest, request_id: str
    ) -> web.StreamResponse:
        prompt = parsed.prompt_tokens[0]
        seq = self._submit(
            request_id, prompt, parsed.max_tokens, parsed.prompt_keys[0] if parsed.prompt_keys else None
        )
        stream = _Stream(seq)
        self._streams[seq.seq_no] = stream
        encoder = ChunkEncoder(parsed.kind, request_id, int(time.time()), parsed.model, prompt)
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        try:
            await response.prepare(request)
            words = generate_tokens(seq.output_tokens, seq.seq_no)
            engine = self.engine
            while True:
                finished = seq.state is SeqState.FINISHED
                n = seq.output_tokens if finished else engine.num_generated(seq)
                if n > stream.sent:
                    parts: list[str] = []
                    if stream.sent == 0 and parsed.kind == "chat":
                        parts.append(encoder.role())
                    last = seq.output_tokens
                    for i in range(stream.sent, n):
                        parts.append(encoder.token(words[i], seq.finish_reason if i + 1 == last else None))
                    stream.sent = n
                    await response.write("".join(parts).encode())
                if finished:
                    break
                stream.wake.clear()
                await stream.wake.wait()
                if self._closing:
                    raise web.HTTPServiceUnavailable(reason="the server is shutting down")
            self.metrics.request_params(parsed.max_tokens)
            tail = encoder.usage(seq.output_tokens) if parsed.include_usage else ""
            await response.write((tail + encoder.done()).encode())
            await response.write_eof()
        finally:
            self._streams.pop(seq.seq_no, None)
            self._abort(seq)
            self._settled()
        return response

    def _settled(self) -> None:
        if not self.in_flight:
            self.idle.set()
        else:
            self.idle.clear()


@web.middleware
async def _error_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return web.json_response(exc.body(), status=exc.status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        body: dict[str, Any] = error_body(exc.reason, "invalid_request_error", None, exc.status)
        return web.json_response(
            body, status=exc.status, headers={k: v for k, v in exc.headers.items() if k == "Allow"}
        )
    except (asyncio.CancelledError, ConnectionError):
        raise
    except Exception:
        # A bug, not the client's fault: logged with its traceback, answered as OpenAI would.
        log.exception("unexpected error serving %s %s", request.method, request.path)
        return web.json_response(error_body("internal server error", "internal_error", None, 500), status=500)


async def serve(
    config: EmulatorConfig,
    *,
    ready: Callable[[str, int], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run the server until cancelled, or until ``stop`` is set and it has drained (see the module doc);
    ``ready(host, port)`` is called once it listens."""
    server = EmulatorServer(config)
    runner = web.AppRunner(server.app, handler_cancellation=True, access_log=None, keepalive_timeout=75.0)
    await runner.setup()
    loop = asyncio.get_running_loop()
    handlers = runner.server
    assert handlers is not None
    listener = await loop.create_server(
        lambda: HeaderDeadline(handlers, config.header_timeout),
        config.host,
        config.port,
        backlog=2048,
        reuse_address=True,
    )
    try:
        host, port = config.host, config.port
        for sock in listener.sockets:
            address = sock.getsockname()
            if isinstance(address, tuple) and len(address) >= 2:
                host, port = str(address[0]), int(address[1])
                break
        if ready is not None:
            ready(host, port)
        with contextlib.suppress(asyncio.CancelledError):
            await (stop or asyncio.Event()).wait()
            await _drain(server, listener, config)
    finally:
        listener.close()
        await runner.cleanup()


async def _drain(server: EmulatorServer, listener: asyncio.Server, config: EmulatorConfig) -> None:
    server.draining = True
    log.info(
        "draining: serving for %gs more, then finishing %d request(s) in flight",
        config.shutdown_delay,
        server.in_flight,
    )
    await asyncio.sleep(config.shutdown_delay)
    listener.close()  # no new connections; open ones (and their requests) go on
    if server.in_flight:
        server.idle.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.idle.wait(), config.drain_timeout)
    if server.in_flight:
        log.warning("drain timeout: %d request(s) still in flight are cut off", server.in_flight)
