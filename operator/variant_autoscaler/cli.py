"""The ``variant-autoscaler`` command: ``run``, ``analyze``, ``plan``, ``simulate``.

Each sub-command lives in :mod:`variant_autoscaler.commands` as a module exposing
``register(subparsers)``, which adds its parser and sets ``func`` (``args -> exit code``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from variant_autoscaler import __version__
from variant_autoscaler.errors import VariantAutoscalerError

COMMANDS: tuple[str, ...] = ("run", "analyze", "plan", "simulate")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="variant-autoscaler",
        description="SLO- and cost-aware autoscaler for LLM inference servers on Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"variant_autoscaler.commands.{name}")
        except ModuleNotFoundError as exc:  # a command not built yet in this checkout
            if exc.name != f"variant_autoscaler.commands.{name}":
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except VariantAutoscalerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
