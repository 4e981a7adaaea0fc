"""Pinned component versions (``hack/versions.env``) and where their binaries live.

``hack/versions.env`` is the single source of truth for versions; ``hack/build-bins.sh`` builds into the
same cache layout this module computes, so the two never disagree.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from localcluster.errors import MissingBinaryError

HACK_DIR = Path(__file__).resolve().parent.parent
VERSIONS_FILE = HACK_DIR / "versions.env"

_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=([^\s#]*)\s*(?:#.*)?$")
_BUILD_HINT = "run `make cluster-bins` (it builds the Go components into the cache and installs Prometheus)"


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """Parse the ``KEY=value`` lines of ``versions.env`` (comments and blank lines ignored)."""
    values: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise ValueError(f"{path}:{number}: expected KEY=value, got {raw!r}")
        values[match.group(1)] = match.group(2)
    return values


def cache_dir() -> Path:
    """The cache root shared with ``hack/build-bins.sh`` (``VA_CACHE_DIR`` overrides it)."""
    explicit = os.environ.get("VA_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "variant-autoscaler"


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of every executable the cluster runs."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kwok: Path
    prometheus_adapter: Path
    prometheus: Path

    @classmethod
    def locate(cls, versions: dict[str, str] | None = None, root: Path | None = None) -> Binaries:
        """Compute the paths without checking that they exist (see :meth:`require`)."""
        v = versions if versions is not None else read_versions()
        bin_root = (root if root is not None else cache_dir()) / "bin"
        kube = bin_root / f"kubernetes-{v['KUBERNETES_VERSION']}"
        return cls(
            etcd=_etcd_path(bin_root / f"etcd-{v['ETCD_VERSION']}" / "etcd", v["ETCD_MIN_VERSION"]),
            kube_apiserver=kube / "kube-apiserver",
            kube_controller_manager=kube / "kube-controller-manager",
            kube_scheduler=kube / "kube-scheduler",
            kubectl=kube / "kubectl",
            kwok=bin_root / f"kwok-{v['KWOK_VERSION']}" / "kwok",
            prometheus_adapter=bin_root
            / f"prometheus-adapter-{v['PROMETHEUS_ADAPTER_VERSION']}"
            / "prometheus-adapter",
            prometheus=_prometheus_path(),
        )

    def require(self, *names: str) -> None:
        """Raise :class:`MissingBinaryError` naming every missing executable among ``names``."""
        missing = [
            f"{name} ({getattr(self, name)})" for name in names if not _is_executable(getattr(self, name))
        ]
        if missing:
            raise MissingBinaryError(f"missing cluster binaries: {', '.join(missing)}; {_BUILD_HINT}")


def _prometheus_path() -> Path:
    explicit = os.environ.get("VA_PROMETHEUS_BIN")
    if explicit:
        return Path(explicit)
    found = shutil.which("prometheus")
    return Path(found) if found else Path("/usr/bin/prometheus")


def _etcd_path(built: Path, min_version: str) -> Path:
    """``VA_ETCD_BIN``, else Debian's etcd if recent enough (unless ``VA_ETCD_SOURCE=go``), else ``built``."""
    explicit = os.environ.get("VA_ETCD_BIN")
    if explicit:
        return Path(explicit)
    if os.environ.get("VA_ETCD_SOURCE", "debian") != "go":
        found = shutil.which("etcd")
        if found and _version_at_least(_etcd_version(found), min_version):
            return Path(found)
    return built


@functools.cache
def _etcd_version(binary: str) -> str | None:
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except OSError:
        return None
    match = re.search(r"etcd Version: (\d+(?:\.\d+)*)", out)
    return match.group(1) if match else None


def _version_at_least(version: str | None, minimum: str) -> bool:
    if version is None:
        return False
    return tuple(int(p) for p in version.split(".")) >= tuple(int(p) for p in minimum.split("."))


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)
