"""Loopback ports and small HTTP(S) probes used to wait for components."""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
from pathlib import Path
from urllib.parse import urlsplit

LOOPBACK = "127.0.0.1"

_lock = threading.Lock()
_handed_out: set[int] = set()


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1, never the same one twice in this process."""
    with _lock:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((LOOPBACK, 0))
                port = int(sock.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise RuntimeError("could not find a free loopback port")


def tcp_open(port: int, host: str = LOOPBACK, timeout: float = 0.2) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


def ssl_context(
    ca_file: Path | None = None,
    cert_file: Path | None = None,
    key_file: Path | None = None,
    *,
    verify: bool = True,
) -> ssl.SSLContext:
    """A client TLS context trusting ``ca_file`` (or nothing, when ``verify`` is False)."""
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_file is not None:
        context.load_cert_chain(str(cert_file), str(key_file) if key_file else None)
    return context


def http_get(
    url: str, context: ssl.SSLContext | None = None, timeout: float = 2.0
) -> tuple[int, bytes] | None:
    """GET ``url``; returns (status, body), or None when the server is not reachable yet."""
    parts = urlsplit(url)
    host = parts.hostname or LOOPBACK
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(host, parts.port, timeout=timeout, context=context)
    else:
        connection = http.client.HTTPConnection(host, parts.port, timeout=timeout)
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    result = http_get(url, context)
    return result is not None and result[0] == 200
