"""The one root error class of variant-autoscaler and its families.

Adapters translate library errors into these; handlers translate these into kopf's retry protocol;
the engine records per-variant failures in status conditions and Events.
"""

from __future__ import annotations


class VariantAutoscalerError(Exception):
    """Root of every error raised by variant-autoscaler."""


class ConfigError(VariantAutoscalerError, ValueError):
    """Invalid settings, ConfigMap content or VariantAutoscaling spec."""


class ModelError(VariantAutoscalerError, ValueError):
    """Invalid inputs to the queueing model or analyzer (e.g. negative rates, empty batch)."""


class InfeasibleError(VariantAutoscalerError):
    """No allocation meets the targets (an SLO is unreachable, or capacity is exhausted)."""


class CollectionError(VariantAutoscalerError):
    """Metrics could not be collected (Prometheus unreachable, query failed, series missing or stale)."""


class KubeError(VariantAutoscalerError):
    """A Kubernetes API call failed."""


class ConflictError(KubeError):
    """A write lost an optimistic-concurrency race (HTTP 409); retry with a fresh read."""
