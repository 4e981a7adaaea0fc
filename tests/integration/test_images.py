"""The container images: pinned dependencies, and both images built and run with no registry.

``test_images_build_and_run`` runs ``hack/images/test.sh`` (what ``make images-test`` runs): a base image
made locally with debootstrap, both images built from the pinned wheels, then smoke-tested (non-root, OCI
labels, no compiler, ``--help``, the emulator's ``/health``, a completion and ``/metrics``). When no
container engine can run, the script says why in a banner and this test fails with it: it never passes
or skips quietly. It needs docker.io and debootstrap (``make images-deps``) and root for a private engine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "hack" / "images"
CONSTRAINTS = IMAGES / "constraints.txt"
ENGINE_UNAVAILABLE = 3  # hack/images/lib.sh


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep, f"constraints.txt: not an exact pin: {line!r}"
        pins[canonicalize_name(name)] = version
    return pins


def _runtime_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    names = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    return [Requirement(r) for r in names]


def test_constraints_pin_every_runtime_and_build_dependency() -> None:
    pins = _pins()
    stale = []
    for req in _runtime_requirements():
        if req.marker is not None and not req.marker.evaluate():
            continue
        version = pins.get(canonicalize_name(req.name))
        if version is None or not req.specifier.contains(version, prereleases=True):
            stale.append(f"{req} (pinned: {version})")
    assert not stale, (
        "hack/images/constraints.txt is out of date with pyproject.toml; run hack/images/lock.sh. "
        f"Not satisfied: {', '.join(stale)}"
    )


def test_dockerfiles_pin_the_default_base_by_digest_and_run_as_a_numeric_non_root_user() -> None:
    for dockerfile in (ROOT / "Dockerfile", ROOT / "emulator" / "Dockerfile"):
        text = dockerfile.read_text(encoding="utf-8")
        base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.MULTILINE)
        assert base is not None, f"{dockerfile}: no default BASE_IMAGE"
        assert re.fullmatch(r"python:3\.11[\w.-]*@sha256:[0-9a-f]{64}", base.group(1)), base.group(1)
        assert re.findall(r"^USER (\S+)$", text, re.MULTILINE) == ["65532:65532"], dockerfile
        # BuildKit-only syntax would break the classic builder CI uses (and a `# syntax=` line would
        # make BuildKit pull a frontend image from a registry).
        assert "--mount=" not in text
        assert not text.startswith("# syntax")


def test_emulator_image_pins_its_dependencies_at_the_locked_versions() -> None:
    text = (ROOT / "emulator" / "Dockerfile").read_text(encoding="utf-8")
    match = re.search(r'^ARG EMULATOR_REQUIREMENTS="([^"]*)"$', text, re.MULTILINE)
    assert match is not None
    pins = _pins()
    emulator = dict(item.split("==", 1) for item in match.group(1).split())
    assert {"aiohttp", "prometheus-client"} <= set(emulator)
    differ = {name: v for name, v in emulator.items() if pins.get(canonicalize_name(name)) != v}
    assert not differ, (
        f"emulator/Dockerfile disagrees with constraints.txt (run hack/images/lock.sh): {differ}"
    )


def test_images_build_and_run() -> None:
    missing = [tool for tool in ("docker", "debootstrap") if shutil.which(tool) is None]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} not installed: run `make images-deps` "
            "(hack/images/install-deps.sh: Debian's docker.io and debootstrap)"
        )
    env = dict(os.environ)
    env.setdefault("PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    result = subprocess.run(
        ["bash", str(IMAGES / "test.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    output = result.stdout + result.stderr
    print(output)  # shown by pytest on failure, and in CI logs with -s / -rA
    if result.returncode == ENGINE_UNAVAILABLE:
        banner = "\n".join(line for line in output.splitlines() if line.startswith("##"))
        pytest.fail(f"NO CONTAINER ENGINE: the images were neither built nor run.\n{banner}")
    assert result.returncode == 0, f"hack/images/test.sh failed ({result.returncode}):\n{output[-6000:]}"
    assert "all checks passed" in output
