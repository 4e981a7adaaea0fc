"""The emulator process against bad and hostile input, and its drain on SIGTERM (issue 22).

Malformed bodies (deep nesting included) get OpenAI 400s, a body no valid request can need gets a 413
before it is read, prompt lists are capped, a slow-headers client is cut off, a large body does not stall
the event loop, and SIGTERM drains: ``/health`` says 503 at once, requests are still served for the
shutdown delay, the requests in flight finish, and the process exits 0.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from vllm_emulator.process import EmulatorProcess
from vllm_emulator.protocol import MAX_PROMPTS, max_body_bytes

MODEL = "test/robust"
MAX_MODEL_LEN = 4096
ARGS = [
    "--model", MODEL, "--alpha", "20", "--beta", "1", "--gamma", "10", "--delta", "0.01",
    "--max-num-seqs", "8", "--time-scale", "10", "--output-tokens", "fixed:8",
    "--max-model-len", str(MAX_MODEL_LEN), "--header-timeout", "1",
]  # fmt: skip


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorProcess]:
    with EmulatorProcess(ARGS) as process:
        yield process


async def _post(url: str, data: bytes) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http,
        http.post(url, data=data, headers={"Content-Type": "application/json"}) as resp,
    ):
        return resp.status, await resp.json(content_type=None)


def _completion(prompt: Any, **extra: Any) -> bytes:
    return json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": 4, **extra}).encode()


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
        (b'{"model": "' + MODEL.encode() + b'", "prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400, ""),
        (b"\xff\xfe not json", 400, "malformed JSON"),
        (_completion(["x"] * (MAX_PROMPTS + 1)), 400, f"at most {MAX_PROMPTS} prompts"),
        (b'{"model": "x"' + b" " * (max_body_bytes(MAX_MODEL_LEN) + 10) + b"}", 413, ""),
    ],
)
async def test_bad_bodies_get_openai_errors(
    emulator: EmulatorProcess, body: bytes, status: int, needle: str
) -> None:
    code, answer = await _post(f"{emulator.url}/v1/completions", body)
    assert code == status
    assert set(answer["error"]) == {"message", "type", "param", "code"}
    assert needle in answer["error"]["message"]
    # ... and the server goes on serving.
    ok, _ = await _post(f"{emulator.url}/v1/completions", _completion("hello"))
    assert ok == 200


def test_a_client_that_never_finishes_its_headers_is_cut_off(emulator: EmulatorProcess) -> None:
    with socket.create_connection((emulator.host, emulator.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # headers never end
        sock.settimeout(10)
        started = time.monotonic()
        assert sock.recv(1024) == b""  # closed by the server (header timeout 1 s), not by us
        assert time.monotonic() - started < 9


async def test_the_largest_bodies_a_valid_request_needs_are_served(emulator: EmulatorProcess) -> None:
    """The body cap leaves room for many long prompts (tokenised in a worker thread: see the unit
    test test_a_large_body_is_parsed_off_the_event_loop)."""
    words = " ".join(["hello"] * (MAX_MODEL_LEN - 16))
    body = _completion([words] * 40)
    assert len(body) < max_body_bytes(MAX_MODEL_LEN)
    code, answer = await _post(f"{emulator.url}/v1/completions", body)
    assert code == 200 and len(answer["choices"]) == 40


async def test_sigterm_drains_like_a_pod_behind_a_service() -> None:
    args = [*ARGS, "--shutdown-delay", "2", "--drain-timeout", "20", "--time-scale", "1"]
    with EmulatorProcess(args) as emulator:
        assert emulator.process is not None
        url = emulator.url
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            # ~2 s of decoding at time scale 1: in flight when the signal comes.
            slow = asyncio.create_task(_post(f"{url}/v1/completions", _completion("go", max_tokens=80)))
            await asyncio.sleep(0.3)
            emulator.process.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.3)
            async with http.get(f"{url}/health") as resp:
                assert resp.status == 503  # withdrawn from the endpoints at once
            during, _ = await _post(f"{url}/v1/completions", _completion("late but routed"))
            assert during == 200  # still served during the shutdown delay
            code, answer = await slow
            assert code == 200 and answer["usage"]["completion_tokens"] == 80
        assert emulator.process.wait(30) == 0
