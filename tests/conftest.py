"""Shared pytest configuration.

In CI (``CI=true``) a skipped test fails the run: every tier must really run there, and a missing binary
or server must fail with a message that says how to get it rather than pass quietly.
"""

from __future__ import annotations

import os

import pytest

# Fixtures for tests that talk to Kubernetes (hack/localcluster; docs/local-cluster.md).
pytest_plugins = ["localcluster.pytest_plugin"]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("CI", "").lower() not in {"1", "true", "yes"}:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped:
        if reporter is not None:
            reporter.write_line(f"CI: {len(skipped)} test(s) skipped; skips are failures in CI", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_TIERS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with its tier from its directory (tests/<tier>/...)."""
    for item in items:
        parts = item.path.parts
        for tier in _TIERS:
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))
                break
