"""Throughput of one ``vllm-emulator`` process and of ``vllm-loadgen``.

* Emulator: one process pinned to one CPU, ``--time-scale 1000`` (a 21 ms decode step lasts 21 µs),
  16-token prompts and 4-token outputs, driven by ``vllm-loadgen`` (pinned to another CPU) at rising
  offered rates, non-streamed and streamed, with each engine (``wva``, and ``v1`` with its prefix cache
  hashing every prompt). Reported: completions per second counted by the emulator itself
  (``vllm:request_success_total``) over the arrival window, and the emulator's CPU use.
* Load generator: ``vllm-loadgen`` against a stub HTTP server that answers every request at once
  (so the generator is the bottleneck), at rising offered rates. Reported: requests sent and
  completed per second, and the generator's CPU use.

Run: ``python bench/emulator.py`` (prints the markdown section), or ``make bench``.
Figures depend on the machine and on what else runs on it; the section names the CPU count.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from vllm_emulator.process import EmulatorProcess

SECONDS = float(os.environ.get("BENCH_EMULATOR_SECONDS", "8"))
EMULATOR_RATES = (1000, 1500, 2000, 3000)
STREAM_RATES = (500, 1000)
LOADGEN_RATES = (2000, 3000, 4000)
COMMAND = "python bench/emulator.py"


def _cpus() -> tuple[int | None, int | None]:
    """Two distinct CPUs for the server and the client, when the machine has them."""
    if not hasattr(os, "sched_getaffinity"):
        return None, None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None
    return cpus[0], cpus[1]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def _successes(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:request_success_total{") and 'finished_reason="abort"' not in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _loadgen_command(url: str, rps: float, *, stream: bool, cpu: int | None) -> list[str]:
    command = [
        sys.executable, "-m", "vllm_emulator.loadgen", "--url", url, "--rps", str(rps),
        "--duration", str(SECONDS), "--input-tokens", "16", "--output-tokens", "4",
        "--max-concurrency", "2048", "--progress-interval", "0", "--drain-timeout", "10",
        "--request-timeout", "30",
    ]  # fmt: skip
    if stream:
        command.append("--stream")
    if cpu is not None and Path("/usr/bin/taskset").exists():
        command = ["taskset", "-c", str(cpu), *command]
    return command


def _emulator_point(rps: float, *, stream: bool, engine: str = "wva") -> dict[str, float]:
    server_cpu, client_cpu = _cpus()
    args = ["--time-scale", "1000", "--max-num-seqs", "256", "--output-tokens", "4", "--engine", engine]
    with EmulatorProcess(args, cpu=server_cpu) as emulator:
        assert emulator.process is not None
        pid = emulator.process.pid
        start_cpu, start_count = _cpu_seconds(pid), _successes(emulator.url)
        client = subprocess.Popen(
            _loadgen_command(emulator.url, rps, stream=stream, cpu=client_cpu),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        # The arrival window, after the generator's start-up: count completions inside it only.
        time.sleep(1.0 + 0.2 * SECONDS)
        t0, c0, cpu0 = time.monotonic(), _successes(emulator.url), _cpu_seconds(pid)
        time.sleep(0.6 * SECONDS)
        t1, c1, cpu1 = time.monotonic(), _successes(emulator.url), _cpu_seconds(pid)
        out, _ = client.communicate(timeout=SECONDS + 120)
        summary = json.loads(out)
        total_cpu = _cpu_seconds(pid) - start_cpu
        total = _successes(emulator.url) - start_count
    return {
        "offered": rps,
        "completed_per_s": (c1 - c0) / (t1 - t0),
        "cpu_util": (cpu1 - cpu0) / (t1 - t0),
        "cpu_ms_per_request": 1000.0 * total_cpu / total if total else float("nan"),
        "errors": summary["errors"] + summary["dropped"] + summary["unfinished"],
        "sent": summary["sent"],
    }


# ------------------------------------------------------------------------------------------- stub server

_STUB_BODY = json.dumps(
    {
        "id": "cmpl-stub",
        "object": "text_completion",
        "created": 0,
        "model": "stub",
        "choices": [{"index": 0, "text": " a b c d", "logprobs": None, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 16, "completion_tokens": 4, "total_tokens": 20},
    }
).encode()
_STUB_MODELS = json.dumps({"object": "list", "data": [{"id": "stub", "object": "model"}]}).encode()


class _StubProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive server answering every request with a canned completion."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].lower()
            length = 0
            marker = head.find(b"content-length:")
            if marker >= 0:
                length = int(head[marker + 15 :].split(b"\r\n", 1)[0])
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            body = _STUB_MODELS if head.startswith(b"get /v1/models") else _STUB_BODY
            self.buffer = self.buffer[end:]
            assert self.transport is not None
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )


async def _stub_main() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_StubProtocol, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


def _loadgen_point(rps: float) -> dict[str, float]:
    server_cpu, client_cpu = _cpus()
    command = [sys.executable, str(Path(__file__).resolve()), "--stub"]
    if server_cpu is not None and Path("/usr/bin/taskset").exists():
        command = ["taskset", "-c", str(server_cpu), *command]
    stub = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert stub.stdout is not None
        line = stub.stdout.readline()
        url = line.strip().rsplit(" ", 1)[1]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        client = subprocess.run(
            _loadgen_command(url, rps, stream=False, cpu=client_cpu),
            capture_output=True,
            text=True,
            timeout=SECONDS + 120,
            check=True,
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        stub.terminate()
        stub.wait(10)
    summary = json.loads(client.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    window = summary["window_s"]
    return {
        "offered": rps,
        "sent_per_s": summary["sent"] / window,
        "completed_per_s": summary["completed"] / window,
        "errors": summary["errors"] + summary["dropped"] + summary["unfinished"],
        "cpu_util": cpu / wall,
    }


def run() -> str:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    lines = [
        "## Emulator and load-generator throughput",
        "",
        f"Command: `{COMMAND}` ({SECONDS:g} s per point; `BENCH_EMULATOR_SECONDS` changes it). "
        f"{cpus} CPUs visible; the server and the client are pinned to different CPUs when there are two.",
        "",
        "### One emulator process (one core), 16-token prompts, 4-token outputs, `--time-scale 1000`",
        "",
        "Completions per second are counted by the emulator (`vllm:request_success_total`) over the middle "
        "of the arrival window; CPU is the emulator process's own (user + system) over the same window.",
        "",
        "| engine | mode | offered req/s | completed req/s | emulator CPU (cores) | CPU ms / request "
        "| errors+drops |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for engine in ("wva", "v1"):
        for stream, rates in ((False, EMULATOR_RATES), (True, STREAM_RATES)):
            for rps in rates:
                p = _emulator_point(rps, stream=stream, engine=engine)
                lines.append(
                    f"| {engine} | {'stream' if stream else 'plain'} | {p['offered']:.0f} | "
                    f"{p['completed_per_s']:.0f} | {p['cpu_util']:.2f} | {p['cpu_ms_per_request']:.3f} | "
                    f"{p['errors']:.0f} |"
                )
    lines += [
        "",
        "### `vllm-loadgen` against a stub server that answers at once",
        "",
        "| offered req/s | sent req/s | completed req/s | loadgen CPU (cores) | errors+drops |",
        "|---:|---:|---:|---:|---:|",
    ]
    for rps in LOADGEN_RATES:
        p = _loadgen_point(rps)
        lines.append(
            f"| {p['offered']:.0f} | {p['sent_per_s']:.0f} | {p['completed_per_s']:.0f} | "
            f"{p['cpu_util']:.2f} | {p['errors']:.0f} |"
        )
    lines += [
        "",
        "An emulator using less than one core while completing the offered rate has headroom: its capacity "
        "is roughly `completed / CPU`. The same holds for the generator.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--stub"]:
        asyncio.run(_stub_main())
    else:
        print(run())
