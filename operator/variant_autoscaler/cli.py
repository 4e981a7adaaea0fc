"""The ``variant-autoscaler`` command: ``run``, ``analyze``, ``plan``, ``simulate``, ``min-gpus``,
``profile``.

Each sub-command lives in :mod:`variant_autoscaler.commands` as a module exposing
``register(subparsers)``, which adds its parser and sets ``func`` (``args -> exit code``). Only the
module of the command named is imported; ``--help``, ``--version`` and a command that does not exist
import them all (the start-up figures are in docs/design.md, "Imports and start-up time").

Bad input never ends in a traceback: a bad flag or value, and any :class:`VariantAutoscalerError` a
command raises, exit 2 with one line on stderr. Anything else is a bug: one line, exit 1 (the traceback
with ``VA_TRACEBACK=1``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from variant_autoscaler import __version__
from variant_autoscaler.errors import VariantAutoscalerError

COMMANDS: tuple[str, ...] = ("run", "analyze", "plan", "simulate", "min_gpus", "profile")


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (sub-command parsers are of the same class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {_one_line(message)} (see --help)\n")


_VERSION = f"variant-autoscaler {__version__}"  # what --version prints, with or without the parsers


def _one_line(message: object) -> str:
    return " ".join(str(message).split())


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with every sub-command, or only ``command``'s when it is one of :data:`COMMANDS`."""
    parser = _Parser(
        prog="variant-autoscaler",
        description="SLO- and cost-aware autoscaler for LLM inference servers on Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=_VERSION)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in (command,) if command in COMMANDS else COMMANDS:
        try:
            module = importlib.import_module(f"variant_autoscaler.commands.{name}")
        except ModuleNotFoundError as exc:  # a command not built yet in this checkout
            if exc.name != f"variant_autoscaler.commands.{name}":
                raise
            continue
        module.register(subparsers)
    return parser


def _module_of(command: str) -> str | None:
    """The module of a command as typed (``min-gpus`` is ``min_gpus``), or None."""
    module = command.replace("-", "_")
    return module if module in COMMANDS and command == module.replace("_", "-") else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:  # as argparse would print it, without importing every command's module
        print(_VERSION)
        return 0
    parser = build_parser(_module_of(argv[0]) if argv else None)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except VariantAutoscalerError as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("VA_TRACEBACK"):
            raise
        print(
            f"error: unexpected {type(exc).__name__}: {_one_line(exc)} "
            "(a bug: please report it; VA_TRACEBACK=1 shows where)",
            file=sys.stderr,
        )
        return 1
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
