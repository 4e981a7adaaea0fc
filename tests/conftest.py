"""Shared pytest configuration.

In CI (``CI=true``) a skipped test fails the run: every tier must really run there, and a missing binary
or server must fail with a message that says how to get it rather than pass quietly.

The end-to-end tier (the full local cluster under load, many minutes) runs only with ``--with-e2e``, as
in kopf's own suite: ``make test`` and ``make e2e`` pass it; a bare ``pytest`` deselects it (and says
so), it never skips it.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

# Property tests run the same examples every time (a run's result depends on the code only, on any
# machine); HYPOTHESIS_PROFILE=explore draws new ones on each run and keeps what fails in .hypothesis/.
settings.register_profile("deterministic", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

# Fixtures for tests that talk to Kubernetes (hack/localcluster; docs/local-cluster.md).
pytest_plugins = ["localcluster.pytest_plugin"]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _CI:
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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--with-e2e",
        action="store_true",
        default=False,
        help="also run the end-to-end tier (tests/e2e: the full local cluster under load)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with its tier from its directory (tests/<tier>/...); without ``--with-e2e`` the
    end-to-end tier is deselected."""
    e2e: list[pytest.Item] = []
    for item in items:
        parts = item.path.parts
        for tier in _TIERS:
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))
                if tier == "e2e":
                    e2e.append(item)
                break
    if e2e and not config.getoption("--with-e2e"):
        config.hook.pytest_deselected(items=e2e)
        items[:] = [item for item in items if item not in e2e]
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"{len(e2e)} end-to-end test(s) deselected: pass --with-e2e to run them")
