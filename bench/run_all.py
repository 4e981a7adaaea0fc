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
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# (bench/operator.py would shadow the standard library's `operator` for every script in bench/.)
BENCHMARKS: tuple[str, ...] = (
    "analyzer",
    "optimizer",
    "plan_file",
    "emulator",
    "fidelity",
    "tail",
    "forecast",
    "operator_scale",
    "policies",
    "warm_start",
    "profile_learning",
    "learning",
    "scale_from_zero",
)


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


def _block(name: str, body: str, when: str) -> str:
    """One benchmark's section between markers, stamped with when and where it was measured."""
    title, _, rest = body.strip().partition("\n")
    stamp = f"_Measured {when} on {_machine()}._"
    return f"<!-- bench:{name} -->\n{title}\n\n{stamp}\n{rest}\n<!-- /bench:{name} -->\n"


def _existing_blocks(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    found = re.finditer(r"<!-- bench:(\w+) -->\n.*?<!-- /bench:\1 -->\n", path.read_text(), re.DOTALL)
    return {m.group(1): m.group(0) for m in found}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", type=Path, default=HERE.parent / "docs" / "benchmarks.md")
    parser.add_argument(
        "--only", nargs="*", default=None, help="benchmark names to run (the other sections are kept)"
    )
    args = parser.parse_args(argv)
    names = [n for n in BENCHMARKS if (HERE / f"{n}.py").exists() and (args.only is None or n in args.only)]
    # With --only, the sections of the other benchmarks stay as they were measured.
    blocks = _existing_blocks(args.output) if args.only is not None else {}
    for name in names:
        started = time.perf_counter()
        print(f"== bench/{name}.py", file=sys.stderr, flush=True)
        body = _load(name).run()
        blocks[name] = _block(name, body, dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"))
        print(f"   done in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    header = (
        "# Benchmarks\n\n"
        "Written by `make bench` (`python bench/run_all.py`; `--only NAME` re-measures one section and keeps "
        "the others). Every figure below was measured by the command shown with it, on the machine and at "
        "the time named under each heading.\n\n"
    )
    ordered = [blocks[n] for n in BENCHMARKS if n in blocks]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(header + "\n".join(ordered))
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
