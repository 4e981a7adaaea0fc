"""Run every benchmark and rewrite docs/benchmarks.md.

Each module in BENCHMARKS is a file in bench/ exposing ``run() -> str``: one markdown section with the
figures as measured and the command that reproduces them. ``python bench/run_all.py --only analyzer``
runs a subset.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# (bench/operator.py would shadow the standard library's `operator` for every script in bench/.)
BENCHMARKS: tuple[str, ...] = ("analyzer", "optimizer", "emulator", "fidelity", "operator_scale", "policies")


def _load(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"bench_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses (and pickling) look their module up there
    spec.loader.exec_module(module)
    return module


def _machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", type=Path, default=HERE.parent / "docs" / "benchmarks.md")
    parser.add_argument("--only", nargs="*", default=None, help="benchmark names to run")
    args = parser.parse_args(argv)
    names = [n for n in BENCHMARKS if (HERE / f"{n}.py").exists() and (args.only is None or n in args.only)]
    sections: list[str] = []
    for name in names:
        started = time.perf_counter()
        print(f"== bench/{name}.py", file=sys.stderr, flush=True)
        sections.append(_load(name).run().rstrip() + "\n")
        print(f"   done in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    header = (
        "# Benchmarks\n\n"
        "Written by `make bench` (`python bench/run_all.py`); every figure below was measured by the command "
        "shown with it, on the machine named here. Re-run to refresh.\n\n"
        f"- Date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}\n"
        f"- Machine: {_machine()}\n\n"
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(header + "\n".join(sections))
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
