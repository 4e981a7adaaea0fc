"""``vllm-loadgen``'s HTTP: a small keep-alive HTTP/1.1 client on asyncio streams, one pool per target.

Several times cheaper per request than a general-purpose client, which is what lets one generator
process offer thousands of requests per second.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from vllm_emulator.errors import ConfigError, EmulatorError

__all__ = [
    "Connection",
    "HttpError",
    "LoadGenError",
    "Response",
    "Target",
    "get_json",
    "raw_chunks",
    "split_url",
]


class LoadGenError(EmulatorError):
    """A load-generator failure that is not a single request's error (e.g. no model to target)."""


class HttpError(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def split_url(url: str) -> tuple[str, int, str]:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ConfigError(f"target URL must be http://host[:port][/v1], got {url!r}")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return parts.hostname, parts.port or 80, path


class Response:
    __slots__ = ("chunked", "keep_alive", "length", "status")

    def __init__(self, status: int, length: int | None, chunked: bool, keep_alive: bool) -> None:
        self.status = status
        self.length = length
        self.chunked = chunked
        self.keep_alive = keep_alive


class Connection:
    __slots__ = ("reader", "reused", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reused = False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()

    async def head(self) -> Response:
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.split(b"\r\n")
        status_line = lines[0].split(b" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
            raise HttpError("bad_response")
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
        return Response(status, length, chunked, keep_alive)

    async def body(self, response: Response) -> bytes:
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


class Target:
    """A server and its idle keep-alive connections."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.host, self.port, self.prefix = split_url(url)
        self.idle: list[Connection] = []

    async def connect(self) -> Connection:
        while self.idle:
            conn = self.idle.pop()
            if not conn.writer.is_closing() and not conn.reader.at_eof():
                conn.reused = True
                return conn
            conn.close()
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        except OSError:
            raise HttpError("connect") from None
        return Connection(reader, writer)

    def release(self, conn: Connection, keep_alive: bool) -> None:
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


async def get_json(target: Target, path: str, limit_s: float) -> Any:
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


async def raw_chunks(conn: Connection, response: Response) -> AsyncIterator[bytes]:
    remaining = response.length
    while remaining is None or remaining > 0:
        data = await conn.reader.read(65536 if remaining is None else min(65536, remaining))
        if not data:
            return
        if remaining is not None:
            remaining -= len(data)
        yield data
