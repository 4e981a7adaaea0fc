"""``requirements.lock``: what ``make install`` installs is pinned, covers pyproject, and agrees with the
images' pins (``make lock`` writes both from one resolution)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.unit


def _pins(path: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep, f"{path.name}: not an exact pin: {line!r}"
        pins[canonicalize_name(name)] = version
    return pins


def test_the_lock_pins_every_dependency_and_dev_tool() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    wanted = [
        *project["project"]["dependencies"],
        *project["project"]["optional-dependencies"]["dev"],
        *project["build-system"]["requires"],
    ]
    pins = _pins(ROOT / "requirements.lock")
    stale = []
    for req in map(Requirement, wanted):
        if req.marker is not None and not req.marker.evaluate():
            continue
        version = pins.get(canonicalize_name(req.name))
        if version is None or not req.specifier.contains(version, prereleases=True):
            stale.append(f"{req} (locked: {version})")
    assert not stale, f"requirements.lock is out of date with pyproject.toml; run `make lock`: {stale}"


def test_the_images_install_the_locked_versions() -> None:
    lock = _pins(ROOT / "requirements.lock")
    images = _pins(ROOT / "hack" / "images" / "constraints.txt")
    differ = {name: (pin, lock.get(name)) for name, pin in images.items() if lock.get(name) != pin}
    assert not differ, f"the images' constraints.txt disagrees with requirements.lock (`make lock`): {differ}"


def test_make_install_uses_the_lock() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "--constraint requirements.lock" in makefile
