"""Start and stop ``vllm-emulator`` processes from Python (tests, demos, benchmarks).

::

    with EmulatorProcess(["--time-scale", "10", "--max-num-seqs", "8"]) as emulator:
        print(emulator.url)          # http://127.0.0.1:<free port>

The process binds ``127.0.0.1`` on a port the kernel picks (``--port 0``) and reports it on its
first stdout line; :class:`EmulatorProcess` waits for that line, and stops the process (SIGTERM,
then SIGKILL) on exit.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from types import TracebackType

from vllm_emulator.errors import EmulatorError

__all__ = ["EmulatorProcess"]

_READY = re.compile(rb"listening on http://(?P<host>[^\s:]+):(?P<port>\d+)")


class EmulatorProcess:
    """A ``vllm-emulator`` child process listening on 127.0.0.1 (see the module doc)."""

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 30.0,
        cpu: int | None = None,
    ) -> None:
        self.args = list(args)
        self.env = dict(os.environ if env is None else env)
        self.startup_timeout = startup_timeout
        self.cpu = cpu
        self.process: subprocess.Popen[bytes] | None = None
        self._stderr: tempfile._TemporaryFileWrapper[bytes] | None = None
        self.host = "127.0.0.1"
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> EmulatorProcess:
        command = [sys.executable, "-m", "vllm_emulator", "--host", "127.0.0.1", "--port", "0", *self.args]
        cpu = self.cpu

        def pin() -> None:  # pragma: no cover - runs in the child
            if cpu is not None and hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(0, {cpu})

        self._stderr = tempfile.NamedTemporaryFile(prefix="vllm-emulator-", suffix=".log")  # noqa: SIM115
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=self.env,
            preexec_fn=pin if cpu is not None else None,  # noqa: PLW1509 - only sets CPU affinity
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + self.startup_timeout
        buffer = b""
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while (left := deadline - time.monotonic()) > 0:
                if not selector.select(left):
                    continue
                chunk = os.read(self.process.stdout.fileno(), 4096)
                if not chunk:
                    break
                buffer += chunk
                match = _READY.search(buffer)
                if match:
                    self.host = match["host"].decode()
                    self.port = int(match["port"])
                    return self
        self.stop()
        err = self.stderr_text()[-2000:]
        self._close_log()
        raise EmulatorError(f"vllm-emulator did not start within {self.startup_timeout:g} s: {err}")

    def stop(self, timeout: float = 10.0) -> int | None:
        """Stop the process (SIGTERM, then SIGKILL after ``timeout``); returns its exit code."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout is not None:
            process.stdout.close()
        return process.returncode

    def stderr_text(self) -> str:
        """What the process wrote to stderr so far."""
        if self._stderr is None:
            return ""
        with open(self._stderr.name, "rb") as handle:
            return handle.read().decode(errors="replace")

    def __enter__(self) -> EmulatorProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        self._close_log()

    def _close_log(self) -> None:
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
