"""Errors raised by the local cluster harness."""

from __future__ import annotations


class LocalClusterError(RuntimeError):
    """Root of every error the harness raises."""


class MissingBinaryError(LocalClusterError):
    """A component binary is not built or not installed; the message says how to get it."""


class ComponentFailedError(LocalClusterError):
    """A component exited or did not become ready in time; the message points at its log."""
