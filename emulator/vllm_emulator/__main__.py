"""``vllm-emulator``: run the emulated vLLM server (``python -m vllm_emulator --help``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence

from vllm_emulator.config import parse_args
from vllm_emulator.errors import ConfigError
from vllm_emulator.server import serve

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_args(argv, os.environ)
    except ConfigError as exc:
        print(f"vllm-emulator: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=getattr(logging, config.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    log = logging.getLogger("vllm_emulator")

    def ready(host: str, port: int) -> None:
        # The first line on stdout says where it listens (tests and scripts read it; port 0 picks one).
        print(f"vllm-emulator listening on http://{host}:{port}", flush=True)
        log.info("serving %s", config.describe())

    async def run() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()

        def first_then_cancel() -> None:
            # The first SIGTERM/SIGINT drains (as vLLM behind a Service); a second one stops at once.
            if stop.is_set():
                task.cancel()
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, first_then_cancel)
        await serve(config, ready=ready, stop=stop)

    with contextlib.suppress(asyncio.CancelledError, KeyboardInterrupt):
        asyncio.run(run())
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
