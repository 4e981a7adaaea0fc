"""The ``vllm-emulator`` process over HTTP: every endpoint, streaming, error bodies and the metrics."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from vllm_emulator.errors import EmulatorError
from vllm_emulator.metrics import (
    INTER_TOKEN_LATENCY_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TIME_TO_FIRST_TOKEN_BUCKETS,
    build_1_2_5_buckets,
)
from vllm_emulator.process import EmulatorProcess
from vllm_emulator.tokenizer import count_chat_tokens, count_tokens, generate_text

MODEL = "test/model-7b"
ALPHA, BETA, GAMMA, DELTA = 20.0, 1.0, 10.0, 0.1
SCALE = 20.0
# The wva engine (the default) with vLLM 0.11's names: the deprecated per-token latency name beside
# its replacement (test_emulator_v1.py and test_emulator_prometheus_versions.py cover the other sets).
ARGS = [
    "--model", MODEL, "--alpha", str(ALPHA), "--beta", str(BETA), "--gamma", str(GAMMA),
    "--delta", str(DELTA), "--max-num-seqs", "4", "--time-scale", str(SCALE), "--output-tokens", "fixed:6",
    "--max-model-len", "2048", "--kv-cache-tokens", "65536", "--vllm-version", "0.11",
]  # fmt: skip


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorProcess]:
    with EmulatorProcess(ARGS) as process:
        yield process


@pytest.fixture
def fresh() -> Iterator[EmulatorProcess]:
    """An emulator of its own, for tests that read absolute metric values."""
    with EmulatorProcess(ARGS) as process:
        yield process


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session


async def post(http: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with http.post(url, data=data, headers={"Content-Type": "application/json"}) as resp:
        return resp.status, await resp.json(content_type=None)


async def sse(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> list[Any]:
    """The data events of a streamed response ("[DONE]" kept as a string)."""
    events: list[Any] = []
    async with http.post(url, json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        buffer = b""
        async for chunk in resp.content.iter_any():
            buffer += chunk
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                assert event.startswith(b"data: ")
                data = event[6:].decode()
                events.append(data if data == "[DONE]" else json.loads(data))
        assert buffer == b""
    return events


async def scrape(http: aiohttp.ClientSession, base: str) -> dict[str, Any]:
    async with http.get(f"{base}/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = await resp.text()
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families: dict[str, Any], family: str, sample: str, **labels: str) -> float:
    for s in families[family].samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    raise KeyError((family, sample, labels))


# ------------------------------------------------------------------------------------------ endpoints


async def test_health_version_and_models(emulator: EmulatorProcess, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{emulator.url}/health") as resp:
        assert resp.status == 200
    async with http.get(f"{emulator.url}/version") as resp:
        assert "version" in await resp.json()
    async with http.get(f"{emulator.url}/v1/models") as resp:
        listing = await resp.json()
    assert listing["object"] == "list"
    assert [m["id"] for m in listing["data"]] == [MODEL]
    assert listing["data"][0]["max_model_len"] == 2048


async def test_completion_honours_max_tokens_and_counts_prompt_tokens(
    emulator: EmulatorProcess, http: aiohttp.ClientSession
) -> None:
    prompt = "Explain continuous batching in two short sentences, please."
    status, body = await post(
        http, f"{emulator.url}/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 9}
    )
    assert status == 200
    assert body["object"] == "text_completion" and body["model"] == MODEL
    assert body["id"].startswith("cmpl-")
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert count_tokens(choice["text"]) == 9
    assert body["usage"] == {
        "prompt_tokens": count_tokens(prompt),
        "completion_tokens": 9,
        "total_tokens": count_tokens(prompt) + 9,
    }
    assert body["usage"]["prompt_tokens"] < len(prompt)  # tokens, not characters


async def test_without_max_tokens_the_configured_distribution_decides(
    emulator: EmulatorProcess, http: aiohttp.ClientSession
) -> None:
    status, body = await post(http, f"{emulator.url}/v1/completions", {"model": MODEL, "prompt": [1, 2, 3]})
    assert status == 200
    assert body["usage"]["completion_tokens"] == 6 and body["usage"]["prompt_tokens"] == 3
    assert body["choices"][0]["finish_reason"] == "stop"


async def test_batched_prompts_get_one_choice_each(
    emulator: EmulatorProcess, http: aiohttp.ClientSession
) -> None:
    status, body = await post(
        http,
        f"{emulator.url}/v1/completions",
        {"model": MODEL, "prompt": ["one two", "three"], "max_tokens": 2},
    )
    assert status == 200
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}


async def test_chat_completion(emulator: EmulatorProcess, http: aiohttp.ClientSession) -> None:
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there!"}]
    status, body = await post(
        http, f"{emulator.url}/v1/chat/completions", {"model": MODEL, "messages": messages, "max_tokens": 4}
    )
    assert status == 200
    assert body["object"] == "chat.completion"
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant" and count_tokens(message["content"]) == 4
    assert body["usage"]["prompt_tokens"] == count_chat_tokens(messages)


async def test_streamed_completion_sends_a_chunk_per_token(
    emulator: EmulatorProcess, http: aiohttp.ClientSession
) -> None:
    events = await sse(
        http,
        f"{emulator.url}/v1/completions",
        {"model": MODEL, "prompt": "stream me", "max_tokens": 5, "stream": True,
         "stream_options": {"include_usage": True}},
    )  # fmt: skip
    assert events[-1] == "[DONE]"
    tokens = events[:-2]
    assert len(tokens) == 5
    assert all(e["object"] == "text_completion" and len(e["choices"]) == 1 for e in tokens)
    assert [e["choices"][0]["finish_reason"] for e in tokens] == [None] * 4 + ["length"]
    assert count_tokens("".join(e["choices"][0]["text"] for e in tokens)) == 5
    assert len({e["id"] for e in events[:-1]}) == 1
    usage = events[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5


async def test_streamed_chat_opens_with_the_role_and_omits_usage_unless_asked(
    emulator: EmulatorProcess, http: aiohttp.ClientSession
) -> None:
    events = await sse(
        http,
        f"{emulator.url}/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3, "stream": True},
    )
    assert events[-1] == "[DONE]"
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    contents = [e["choices"][0]["delta"]["content"] for e in events[1:-1]]
    assert len(contents) == 3 and all(count_tokens(c) == 1 for c in contents)
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert all("usage" not in e for e in events[:-1])


# ------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v1/completions", b"{broken", 400),
        ("/v1/completions", {"prompt": "x"}, 400),
        ("/v1/completions", {"model": MODEL}, 400),
        ("/v1/chat/completions", {"model": MODEL}, 400),
        ("/v1/completions", {"model": "no/such-model", "prompt": "x"}, 404),
        (
            "/v1/chat/completions",
            {"model": "no/such-model", "messages": [{"role": "user", "content": "x"}]},
            404,
        ),
        ("/v1/completions", {"model": MODEL, "prompt": generate_text(2000), "max_tokens": 100}, 400),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": -3}, 400),
    ],
)
async def test_errors_use_openais_error_body(
    emulator: EmulatorProcess, http: aiohttp.ClientSession, path: str, body: Any, status: int
) -> None:
    got, payload = await post(http, f"{emulator.url}{path}", body)
    assert got == status
    assert set(payload) == {"error"}
    assert set(payload["error"]) == {"message", "type", "param", "code"}
    assert payload["error"]["message"]


async def test_context_length_error_names_the_limit(
    emulator: EmulatorProcess, http: aiohttp.ClientSession
) -> None:
    _, payload = await post(
        http,
        f"{emulator.url}/v1/completions",
        {"model": MODEL, "prompt": generate_text(2000), "max_tokens": 100},
    )
    assert "maximum context length is 2048 tokens" in payload["error"]["message"]
    assert "2100" in payload["error"]["message"]


async def test_unknown_path_and_method(emulator: EmulatorProcess, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{emulator.url}/v1/nothing") as resp:
        assert resp.status == 404
        assert "error" in await resp.json()
    async with http.get(f"{emulator.url}/v1/completions") as resp:
        assert resp.status == 405
        assert "error" in await resp.json()


# ------------------------------------------------------------------------------------------ metrics


async def test_metric_names_labels_and_buckets(
    emulator: EmulatorProcess, http: aiohttp.ClientSession
) -> None:
    await post(http, f"{emulator.url}/v1/completions", {"model": MODEL, "prompt": "x y z", "max_tokens": 3})
    families = await scrape(http, emulator.url)
    for name in (
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens",
        "vllm:request_success", "vllm:time_to_first_token_seconds", "vllm:time_per_output_token_seconds",
        "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds", "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens",
    ):  # fmt: skip
        assert name in families, name
        assert all(s.labels["model_name"] == MODEL for s in families[name].samples), name

    def les(family: str) -> list[float]:
        return [float(s.labels["le"]) for s in families[family].samples if s.name.endswith("_bucket")]

    assert les("vllm:time_to_first_token_seconds") == [*TIME_TO_FIRST_TOKEN_BUCKETS, math.inf]
    assert les("vllm:inter_token_latency_seconds") == [*INTER_TOKEN_LATENCY_BUCKETS, math.inf]
    assert les("vllm:time_per_output_token_seconds") == [*INTER_TOKEN_LATENCY_BUCKETS, math.inf]
    assert les("vllm:e2e_request_latency_seconds") == [*REQUEST_LATENCY_BUCKETS, math.inf]
    assert les("vllm:request_prompt_tokens") == [*build_1_2_5_buckets(2048), math.inf]
    reasons = {
        s.labels["finished_reason"]
        for s in families["vllm:request_success"].samples
        if s.name.endswith("_total")
    }
    assert reasons == {"stop", "length", "abort"}


async def test_metric_values_match_what_was_served(
    fresh: EmulatorProcess, http: aiohttp.ClientSession
) -> None:
    prompt_tokens, output_tokens = 100, 11
    status, _ = await post(
        http,
        f"{fresh.url}/v1/completions",
        {"model": MODEL, "prompt": generate_text(prompt_tokens), "max_tokens": output_tokens},
    )
    assert status == 200
    families = await scrape(http, fresh.url)

    def v(family: str, sample: str, **labels: str) -> float:
        return value(families, family, sample, **labels)

    assert v("vllm:request_success", "vllm:request_success_total", finished_reason="length") == 1
    assert v("vllm:prompt_tokens", "vllm:prompt_tokens_total") == prompt_tokens
    assert v("vllm:generation_tokens", "vllm:generation_tokens_total") == output_tokens
    assert v("vllm:request_prompt_tokens", "vllm:request_prompt_tokens_sum") == prompt_tokens
    assert v("vllm:request_generation_tokens", "vllm:request_generation_tokens_sum") == output_tokens
    # One request on an idle engine: the latency model is exact, in emulated seconds divided by the scale.
    ttft = (GAMMA + DELTA * prompt_tokens * 1) / 1000 / SCALE
    itl = (ALPHA + BETA * 1) / 1000 / SCALE
    assert v("vllm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds_sum") == pytest.approx(
        ttft
    )
    assert (
        v("vllm:inter_token_latency_seconds", "vllm:inter_token_latency_seconds_count") == output_tokens - 1
    )
    assert v("vllm:inter_token_latency_seconds", "vllm:inter_token_latency_seconds_sum") == pytest.approx(
        (output_tokens - 1) * itl
    )
    assert v("vllm:time_per_output_token_seconds", "vllm:time_per_output_token_seconds_sum") == pytest.approx(
        (output_tokens - 1) * itl
    )
    assert v("vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_sum") == pytest.approx(
        ttft + (output_tokens - 1) * itl
    )
    assert v("vllm:request_queue_time_seconds", "vllm:request_queue_time_seconds_sum") == 0
    assert v("vllm:num_requests_running", "vllm:num_requests_running") == 0
    assert v("vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc") == 0


async def test_batch_limit_queues_requests(fresh: EmulatorProcess, http: aiohttp.ClientSession) -> None:
    body = {"model": MODEL, "prompt": "q", "max_tokens": 200}
    tasks = [asyncio.create_task(post(http, f"{fresh.url}/v1/completions", body)) for _ in range(8)]
    saw_queue = False
    while not all(t.done() for t in tasks):
        families = await scrape(http, fresh.url)
        running = value(families, "vllm:num_requests_running", "vllm:num_requests_running")
        waiting = value(families, "vllm:num_requests_waiting", "vllm:num_requests_waiting")
        assert running <= 4
        saw_queue = saw_queue or (running == 4 and waiting > 0)
        await asyncio.sleep(0.005)
    assert [t.result()[0] for t in tasks] == [200] * 8
    families = await scrape(http, fresh.url)
    assert (
        value(families, "vllm:request_success", "vllm:request_success_total", finished_reason="length") == 8
    )
    assert value(families, "vllm:request_queue_time_seconds", "vllm:request_queue_time_seconds_sum") > 0
    assert saw_queue


async def test_client_disconnect_aborts_the_request(
    fresh: EmulatorProcess, http: aiohttp.ClientSession
) -> None:
    body = {"model": MODEL, "prompt": "long", "max_tokens": 1500, "stream": True}
    async with http.post(f"{fresh.url}/v1/completions", json=body) as resp:
        await resp.content.readuntil(b"\n\n")  # the first token arrived; now hang up
    deadline = time.monotonic() + 30
    running = 1.0
    while time.monotonic() < deadline:
        families = await scrape(http, fresh.url)
        running = value(families, "vllm:num_requests_running", "vllm:num_requests_running")
        if not running:
            break
        await asyncio.sleep(0.05)
    assert running == 0  # the slot is free long before 1,500 tokens could have been generated
    # As vLLM: an aborted request is in no per-request metric, and its "abort" series stays at 0.
    assert value(families, "vllm:request_success", "vllm:request_success_total", finished_reason="abort") == 0
    assert value(families, "vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_count") == 0


# ------------------------------------------------------------------------------------------ process


async def test_wva_manifest_variables_are_honoured(http: aiohttp.ClientSession) -> None:
    env = {
        **os.environ,
        "MODEL_NAME": "default/default",
        "DECODE_TIME": "20",
        "MAX_BATCH_SIZE": "8",
        "AVG_TOKENS": "7",
        "TOKENS_DISTRIBUTION": "deterministic",
        "VLLM_EMULATOR_TIME_SCALE": "50",
    }
    with EmulatorProcess([], env=env) as process:
        async with http.get(f"{process.url}/v1/models") as resp:
            assert (await resp.json())["data"][0]["id"] == "default/default"
        status, body = await post(
            http, f"{process.url}/v1/chat/completions",
            {"model": "default/default", "messages": [{"role": "user", "content": "hi"}]},
        )  # fmt: skip
        assert status == 200 and body["usage"]["completion_tokens"] == 7
        families = await scrape(http, process.url)
        # DECODE_TIME is WVA's batch-independent per-token time: 20 ms per token, here 50x faster
        itl_sum = value(families, "vllm:inter_token_latency_seconds", "vllm:inter_token_latency_seconds_sum")
        assert itl_sum == pytest.approx(6 * 0.020 / 50)


def test_sigterm_stops_cleanly() -> None:
    with EmulatorProcess(ARGS) as process:
        assert process.process is not None
        process.process.send_signal(signal.SIGTERM)
        assert process.process.wait(timeout=15) == 0
        assert "stopped" in process.stderr_text()


def test_bad_configuration_exits_with_an_error() -> None:
    with pytest.raises(EmulatorError, match="time_scale"):
        EmulatorProcess(["--time-scale", "-1"], startup_timeout=15).start()
