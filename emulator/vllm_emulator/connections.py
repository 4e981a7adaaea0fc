"""A deadline for a new connection's request headers (aiohttp's server has none).

Without it, a client that opens connections and sends its headers a byte at a time holds each
connection (and its buffers) for as long as it likes: a thousand of them starve the server. The
:class:`HeaderDeadline` protocol sits in front of aiohttp's per-connection handler: it buffers what
arrives until the end of the first request's headers, then hands the connection and the bytes to the
handler and steps aside (every later byte goes straight to it). A connection that has not sent its
headers within the deadline, or sends more than :data:`MAX_HEADER_BYTES` before their end, is closed.
Later requests on a kept-alive connection are bounded by aiohttp's keep-alive timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_HEADER_BYTES", "HeaderDeadline"]

MAX_HEADER_BYTES = 64 * 1024
_END_OF_HEADERS = b"\r\n\r\n"


class HeaderDeadline(asyncio.Protocol):
    """One connection: buffered until its first request's headers are complete, then the handler's."""

    def __init__(self, handler_factory: Callable[[], Any], timeout: float) -> None:
        self._factory = handler_factory
        self._timeout = timeout
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._timer: asyncio.TimerHandle | None = None
        self._handler: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._timer = asyncio.get_running_loop().call_later(self._timeout, self._expire)

    def data_received(self, data: bytes) -> None:
        if self._handler is not None:
            self._handler.data_received(data)
            return
        searched_from = max(0, len(self._buffer) - len(_END_OF_HEADERS) + 1)
        self._buffer += data
        if self._buffer.find(_END_OF_HEADERS, searched_from) >= 0:
            self._hand_over()
        elif len(self._buffer) > MAX_HEADER_BYTES:
            self._close()

    def eof_received(self) -> bool | None:
        if self._handler is not None:
            result: bool | None = self._handler.eof_received()
            return result
        self._close()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if self._handler is not None:
            self._handler.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._handler is not None:
            self._handler.pause_writing()

    def resume_writing(self) -> None:
        if self._handler is not None:
            self._handler.resume_writing()

    def _hand_over(self) -> None:
        self._cancel_timer()
        assert self._transport is not None
        # The handler becomes the transport's protocol: no hop through this object for the rest.
        self._handler = self._factory()
        self._transport.set_protocol(self._handler)
        self._handler.connection_made(self._transport)
        data, self._buffer = bytes(self._buffer), bytearray()
        self._handler.data_received(data)

    def _expire(self) -> None:
        self._timer = None
        if self._handler is None:
            self._close()

    def _close(self) -> None:
        self._cancel_timer()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
