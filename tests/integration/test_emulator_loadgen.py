"""``vllm-loadgen`` (CLI and Python API) against real emulator processes."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from vllm_emulator.distributions import parse_distribution
from vllm_emulator.loadgen import LoadSpec, run_load
from vllm_emulator.process import EmulatorProcess

MODEL = "lg/model"
FAST = ["--model", MODEL, "--time-scale", "50", "--max-num-seqs", "16"]


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorProcess]:
    with EmulatorProcess(FAST) as process:
        yield process


def metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        (
            s.name,
            tuple(sorted((k, v) for k, v in s.labels.items() if k not in {"model_name", "engine"})),
        ): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def successes(url: str, reason: str = "length") -> float:
    return metrics(url)[("vllm:request_success_total", (("finished_reason", reason),))]


def loadgen(*args: str, timeout: float = 120) -> tuple[int, dict[str, object], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_emulator.loadgen", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    summary = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, summary, proc.stderr


def test_cli_streaming_run_reports_client_side_latencies() -> None:
    with EmulatorProcess(FAST) as emulator:
        code, summary, stderr = loadgen(
            "--url", f"{emulator.url}/v1", "--rps", "40", "--duration", "2", "--stream",
            "--input-tokens", "64", "--output-tokens", "12", "--progress-interval", "0.5", "--seed", "3",
        )  # fmt: skip
        served = successes(emulator.url)
    assert code == 0, stderr
    sent = summary["sent"]
    assert isinstance(sent, int) and 40 <= sent <= 130  # Poisson count around 80
    assert summary["completed"] == sent == served
    assert summary["errors"] == summary["dropped"] == summary["unfinished"] == 0
    assert summary["prompt_tokens"] == 64 * sent
    assert summary["completion_tokens"] == 12 * sent
    ttft, itl, e2e = summary["ttft_ms"], summary["itl_ms"], summary["e2e_ms"]
    assert isinstance(ttft, dict) and isinstance(itl, dict) and isinstance(e2e, dict)
    assert ttft["count"] == sent and itl["count"] == 11 * sent and e2e["count"] == sent
    assert 0 < ttft["mean"] < e2e["mean"]
    assert ttft["p50"] <= ttft["p90"] <= ttft["p99"]
    assert "[vllm-loadgen]" in stderr and "done" in stderr


def test_cli_wva_rate_schedule_in_requests_per_minute(emulator: EmulatorProcess) -> None:
    before = successes(emulator.url)
    code, summary, stderr = loadgen(
        "--url", emulator.url, "--rate", "[[1, 600], [1, 1200]]", "--mode", "deterministic",
        "--input-tokens", "8", "--output-tokens", "2", "--progress-interval", "0",
    )  # fmt: skip
    assert code == 0, stderr
    # 10 req/s for 1 s then 20 req/s for 1 s, evenly spaced: exactly 30 requests
    assert summary["scheduled"] == summary["sent"] == summary["completed"] == 30
    assert successes(emulator.url) - before == 30
    assert summary["ttft_ms"] is None and summary["itl_ms"] is None  # not streamed


async def test_python_api_chat_endpoint(emulator: EmulatorProcess) -> None:
    spec = LoadSpec(
        targets=(emulator.url,),
        schedule=((1.0, 30.0),),
        arrival="deterministic",
        endpoint="chat",
        stream=True,
        input_tokens=parse_distribution("40"),
        output_tokens=parse_distribution("uniform:2:6"),
        seed=11,
    )
    summary = await run_load(spec)
    assert summary.sent == summary.completed == 30
    assert summary.prompt_tokens == 40 * 30  # the chat template's tokens are part of the 40
    assert 2 * 30 <= summary.completion_tokens <= 6 * 30
    assert summary.ttft is not None and summary.itl is not None
    assert summary.achieved_rate > 0
    assert summary.to_dict()["completed"] == 30


async def test_several_targets_share_the_load_round_robin() -> None:
    with EmulatorProcess(FAST) as a, EmulatorProcess(FAST) as b:
        spec = LoadSpec(
            targets=(a.url, b.url),
            schedule=((1.0, 40.0),),
            arrival="deterministic",
            input_tokens=parse_distribution("8"),
            output_tokens=parse_distribution("2"),
            model=MODEL,
        )
        summary = await run_load(spec)
        assert summary.completed == 40
        assert successes(a.url) == successes(b.url) == 20


@pytest.mark.parametrize("drain", [0.5, 0.0])  # 0: cancel at once (500-token outputs take ~10 s)
async def test_concurrency_cap_drops_arrivals_and_drain_stops_the_run(drain: float) -> None:
    # A slow server (real time, long outputs): the cap is reached and the last requests cannot finish.
    with EmulatorProcess(["--model", MODEL, "--max-num-seqs", "2"]) as slow:
        spec = LoadSpec(
            targets=(slow.url,),
            schedule=((0.5, 40.0),),
            arrival="deterministic",
            input_tokens=parse_distribution("8"),
            output_tokens=parse_distribution("500"),
            max_concurrency=3,
            drain_timeout=drain,
        )
        summary = await run_load(spec)
        assert summary.scheduled == 20
        assert summary.sent == 3 and summary.dropped == 17
        assert summary.unfinished == 3 and summary.completed == 0
        assert summary.scheduled == summary.sent + summary.dropped

        # the generator hung up: the emulator aborts the requests (2 running, 1 waiting) and, as vLLM,
        # counts them nowhere
        def in_flight() -> float:
            found = metrics(slow.url)
            return found[("vllm:num_requests_running", ())] + found[("vllm:num_requests_waiting", ())]

        for _ in range(600):  # up to 30 s
            if in_flight() == 0:
                break
            await asyncio.sleep(0.05)
        assert in_flight() == 0
        assert successes(slow.url, "abort") == successes(slow.url, "length") == 0


async def test_errors_are_counted_by_kind(emulator: EmulatorProcess) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    spec = LoadSpec(
        targets=(emulator.url, f"http://127.0.0.1:{closed_port}"),
        schedule=((1.0, 10.0),),
        arrival="deterministic",
        model="not/served",
        input_tokens=parse_distribution("4"),
        output_tokens=parse_distribution("2"),
    )
    summary = await run_load(spec)
    assert summary.completed == 0
    assert summary.errors == summary.sent == 10
    assert summary.error_kinds == {"http_404": 5, "connect": 5}


def test_cli_fails_without_a_reachable_server() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, summary, stderr = loadgen("--url", f"http://127.0.0.1:{port}", "--rps", "1", "--duration", "1")
    assert code == 1 and summary == {}
    assert "cannot read the model" in stderr
