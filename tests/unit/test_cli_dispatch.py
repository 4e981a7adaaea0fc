"""The CLI builds only the parser of the command named (its start-up then imports only that command's
module); ``--help`` and a command that does not exist see every command."""

from __future__ import annotations

import argparse

import pytest

from variant_autoscaler import __version__
from variant_autoscaler.cli import COMMANDS, _module_of, build_parser, main

pytestmark = pytest.mark.unit


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(action.choices)


def test_a_command_as_typed_names_its_module() -> None:
    assert _module_of("min-gpus") == "min_gpus"
    assert _module_of("plan") == "plan"
    assert _module_of("min_gpus") is None  # not a command as typed
    assert _module_of("--help") is None
    assert _module_of("nope") is None


def test_the_parser_holds_the_command_named_or_all() -> None:
    everything = _commands(build_parser())
    assert everything == {name.replace("_", "-") for name in COMMANDS}
    assert _commands(build_parser("min_gpus")) == {"min-gpus"}
    assert _commands(build_parser("nope")) == everything


def test_a_mistyped_command_is_told_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["min_gpus"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    for name in COMMANDS:
        assert repr(name.replace("_", "-")) in err


def test_version_is_answered_alone_and_as_argparse_would(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    alone = capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == alone == f"variant-autoscaler {__version__}\n"
