"""The pure core: queueing model, analyzer, optimizer, policy and status.

Nothing in this package performs I/O, reads a clock or imports kopf, Kubernetes or HTTP libraries
(enforced by an import-linter contract in pyproject.toml).
"""
