"""Pieces of the emulator's server that need no socket: off-loop parsing, the header deadline."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from vllm_emulator.config import parse_args
from vllm_emulator.connections import MAX_HEADER_BYTES, HeaderDeadline
from vllm_emulator.protocol import ParsedRequest
from vllm_emulator.server import EmulatorServer

pytestmark = pytest.mark.unit


async def test_a_large_body_is_parsed_off_the_event_loop() -> None:
    """Parsing (tokenising) a large body blocks a worker thread, never the loop: here the parse waits
    for an event only the loop can set, so it would wait out its timeout if it ran on the loop."""
    server = EmulatorServer(parse_args(["--model", "m"], {}))
    loop_ran = threading.Event()

    def parse(raw: bytes, model: str, max_len: int, block: int) -> Any:
        assert loop_ran.wait(5.0), "the event loop was blocked while the body was parsed"
        return ParsedRequest("completion", model, (1,), None, False, False)

    async def loop_work() -> None:
        await asyncio.sleep(0)
        loop_ran.set()

    parsed, _ = await asyncio.gather(server._parse(parse, b"x" * (1024 * 1024)), loop_work())
    assert parsed.prompt_tokens == (1,)


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False
        self.protocol: Any = None

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol


class _Handler(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = b""
        self.made = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made = True

    def data_received(self, data: bytes) -> None:
        self.data += data


async def test_headers_complete_in_pieces_are_handed_over_whole() -> None:
    handler = _Handler()
    guard = HeaderDeadline(lambda: handler, timeout=5.0)
    transport = _Transport()
    guard.connection_made(transport)
    for piece in (b"GET /health HTTP/1.1\r", b"\nHost: x\r\n\r", b"\n", b"body"):
        guard.data_received(piece)
    assert handler.made and transport.protocol is handler and not transport.closed
    assert handler.data == b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nbody"


async def test_slow_or_oversized_headers_close_the_connection() -> None:
    slow = _Transport()
    guard = HeaderDeadline(_Handler, timeout=0.05)
    guard.connection_made(slow)
    guard.data_received(b"GET / HTTP/1.1\r\n")
    await asyncio.sleep(0.2)
    assert slow.closed and slow.protocol is None
    big = _Transport()
    guard = HeaderDeadline(_Handler, timeout=5.0)
    guard.connection_made(big)
    guard.data_received(b"X" * (MAX_HEADER_BYTES + 1))
    assert big.closed
    guard.connection_lost(None)  # the timer is cancelled with the connection
