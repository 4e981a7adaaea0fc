"""Guards for the source layout: ``operator/`` is a source root, never a package."""

from __future__ import annotations

import importlib
import operator
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.unit


def test_operator_dir_is_not_a_package() -> None:
    assert not (ROOT / "operator" / "__init__.py").exists(), (
        "operator/__init__.py would shadow the standard library's `operator`; operator/ is a source root"
    )


def test_stdlib_operator_is_not_shadowed() -> None:
    assert operator.__spec__ is not None
    assert operator.__spec__.origin is not None
    assert "site-packages" not in operator.__spec__.origin
    assert Path(operator.__spec__.origin).parent != ROOT / "operator"
    assert operator.add(2, 3) == 5
    assert "operator" in sys.stdlib_module_names


def test_packages_import() -> None:
    va = importlib.import_module("variant_autoscaler")
    emu = importlib.import_module("vllm_emulator")
    assert va.__version__
    assert emu.__version__


def test_modules_keep_to_one_job() -> None:
    """No module of the operator or the emulator grows past 900 lines (split it by job instead)."""
    long = {
        str(path.relative_to(ROOT)): n
        for package in (ROOT / "operator" / "variant_autoscaler", ROOT / "emulator" / "vllm_emulator")
        for path in package.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > 900
    }
    assert not long, f"modules over 900 lines: {long}"
