"""Start, track and stop the cluster's processes, by process id only.

Every process gets its own session (so its process group id is its pid) and a pidfile in
``<state>/pids/<name>.json`` recording the pid *and* the kernel's start time of that pid, so a later
``cluster-down`` never signals an unrelated process that happens to reuse the number. When the harness runs
inside a test session the children are also tied to it with ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: if the
test process dies (even by SIGKILL), the kernel kills them.

PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, so start processes from a thread that
lives as long as the cluster (pytest's main thread, the CLI's main thread).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localcluster.errors import ComponentFailedError

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A ``preexec_fn`` that asks the kernel to SIGKILL the child when its parent thread exits."""

    def setup() -> None:  # runs in the child between fork and exec
        if _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            os._exit(126)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(126)

    return setup


def proc_start_time(pid: int) -> int | None:
    """The start time (clock ticks since boot) of ``pid``, or None if no such process is alive."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    if fields[0] == "Z":  # a zombie has already exited
        return None
    return int(fields[19])


@dataclass(frozen=True)
class PidRecord:
    """What a pidfile holds."""

    name: str
    pid: int
    start_time: int
    argv: tuple[str, ...]

    def is_running(self) -> bool:
        return proc_start_time(self.pid) == self.start_time

    def to_json(self) -> str:
        return json.dumps(
            {"name": self.name, "pid": self.pid, "start_time": self.start_time, "argv": self.argv}
        )

    @classmethod
    def from_file(cls, path: Path) -> PidRecord | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(str(data["name"]), int(data["pid"]), int(data["start_time"]), tuple(data["argv"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def signal_record(record: PidRecord, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group of a still-running recorded process (never to a reused pid)."""
    if not record.is_running():
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(record.pid, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(record.pid, sig)


def terminate_record(record: PidRecord, timeout: float = 10.0) -> None:
    """SIGTERM a recorded process group, then SIGKILL it if it is still there after ``timeout``."""
    signal_record(record, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while record.is_running() and time.monotonic() < deadline:
        time.sleep(0.05)
    if record.is_running():
        signal_record(record, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while record.is_running() and time.monotonic() < deadline:
            time.sleep(0.05)


def stop_from_pidfiles(pid_dir: Path, timeout: float = 10.0) -> list[str]:
    """Stop every process recorded in ``pid_dir`` (newest first); returns the names that were running."""
    if not pid_dir.is_dir():
        return []
    records: list[tuple[float, Path, PidRecord]] = []
    for path in pid_dir.glob("*.json"):
        record = PidRecord.from_file(path)
        if record is not None:
            records.append((path.stat().st_mtime, path, record))
    stopped: list[str] = []
    for _, path, record in sorted(records, key=lambda item: item[0], reverse=True):
        if record.is_running():
            stopped.append(record.name)
            terminate_record(record, timeout)
        path.unlink(missing_ok=True)
    return stopped


@dataclass
class ManagedProcess:
    """A running child process with its log file and pidfile."""

    name: str
    argv: tuple[str, ...]
    popen: subprocess.Popen[bytes]
    log_path: Path
    pidfile: Path
    record: PidRecord

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def failure(self, what: str) -> ComponentFailedError:
        """An error describing ``what`` went wrong, with the tail of the component's log."""
        status = f"exited with {self.popen.returncode}" if self.popen.poll() is not None else "still running"
        return ComponentFailedError(
            f"{self.name}: {what} ({status}); log {self.log_path}:\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL after ``timeout``; reap it and remove its pidfile."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10.0)
        else:
            # The leader is gone; anything left in its group (it has its own session) goes too.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signal.SIGKILL)
        self.pidfile.unlink(missing_ok=True)


@dataclass
class Supervisor:
    """Starts processes into ``state_dir`` (logs/ and pids/) and stops them all, newest first."""

    state_dir: Path
    die_with_parent: bool = True
    processes: dict[str, ManagedProcess] = field(default_factory=dict)

    @property
    def pid_dir(self) -> Path:
        return self.state_dir / "pids"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> ManagedProcess:
        """Start ``argv`` as ``name`` (unique among running processes); output goes to ``logs/<name>.log``."""
        if name in self.processes and self.processes[name].alive():
            raise ValueError(f"a process named {name!r} is already running")
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=die_with_parent(os.getpid()) if self.die_with_parent else None,  # noqa: PLW1509
            )
        start_time = proc_start_time(popen.pid)
        record = PidRecord(name, popen.pid, start_time if start_time is not None else -1, tuple(argv))
        pidfile = self.pid_dir / f"{name}.json"
        tmp = pidfile.with_suffix(".tmp")
        tmp.write_text(record.to_json(), encoding="utf-8")
        tmp.replace(pidfile)
        process = ManagedProcess(name, tuple(argv), popen, log_path, pidfile, record)
        self.processes[name] = process
        return process

    def stop(self, name: str, timeout: float = 10.0) -> None:
        process = self.processes.pop(name, None)
        if process is not None:
            process.stop(timeout)

    def stop_all(self, timeout: float = 10.0) -> None:
        for name in reversed(list(self.processes)):
            self.stop(name, timeout)
        # Anything recorded by a process we did not start ourselves (e.g. the pod runner's emulators).
        stop_from_pidfiles(self.pid_dir, timeout)


def wait_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    process: ManagedProcess | None = None,
    interval: float = 0.1,
) -> None:
    """Poll ``check`` until it returns True; fail early if ``process`` dies, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return
        if process is not None and not process.alive():
            raise process.failure(f"exited while waiting for {what}")
        if time.monotonic() > deadline:
            if process is not None:
                raise process.failure(f"timed out after {timeout:.0f}s waiting for {what}")
            raise ComponentFailedError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
