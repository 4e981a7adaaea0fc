"""The one settings object of the operator process.

:class:`Settings` holds what is fixed for the life of a process: where the ConfigMaps live, ports,
leader election, logging and client tuning. It reads ``WVA_``-prefixed environment variables when it
is *constructed* (in ``variant-autoscaler run``), never at import. Decision-relevant knobs that an admin
may change at runtime live in the main ConfigMap instead (:mod:`variant_autoscaler.api.config`).

For drop-in compatibility with WVA's Deployment, the unprefixed ``PROMETHEUS_*`` variables and
``WVA_SCALE_TO_ZERO`` are accepted too; :meth:`Settings.config_env` hands them to the ConfigMap parser,
which applies WVA's precedence rules. So are WVA's later ``CONFIG_MAP_NAME``, ``SATURATION_CONFIG_MAP_NAME``,
``QUEUEING_MODEL_CONFIG_MAP_NAME``, ``CONTROLLER_INSTANCE`` and ``WATCH_NAMESPACE``.
"""

from __future__ import annotations

import os
import socket
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from variant_autoscaler.api.config import PROMETHEUS_KEYS
from variant_autoscaler.api.main_config_sources import MAIN_CONFIG_MAP_NAMES
from variant_autoscaler.api.queueing_config import QUEUEING_CONFIG_MAP_NAMES
from variant_autoscaler.api.saturation_config import SATURATION_CONFIG_MAP_NAMES
from variant_autoscaler.api.scale_to_zero_config import SCALE_TO_ZERO_CONFIG_MAP_NAMES

WVA_NAMESPACE = "workload-variant-autoscaler-system"
WVA_CONFIG_MAP = "workload-variant-autoscaler-variantautoscaling-config"


def _default_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Settings(BaseSettings):
    """Process settings; every field can be set as ``WVA_<FIELD>`` in the environment."""

    # populate_by_name: a field with an environment alias (operator_namespace, conflict_retries, ...) can
    # still be given by its name, as `variant-autoscaler run`'s flags do; extra="ignore" would drop it.
    model_config = SettingsConfigDict(env_prefix="WVA_", extra="ignore", frozen=True, populate_by_name=True)

    # Scope: the namespaces whose VariantAutoscalings are served; empty means cluster-wide. WVA's
    # WATCH_NAMESPACE (one namespace) sets it too.
    namespaces: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias=AliasChoices("WVA_NAMESPACES", "WATCH_NAMESPACE")
    )
    # Only VAs (and annotated HPAs/ScaledObjects) labelled wva.llmd.ai/controller-instance=<this> are
    # managed, and their metrics carry controller_instance=<this>; unset: every one (WVA's rule).
    controller_instance: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        validation_alias=AliasChoices("WVA_CONTROLLER_INSTANCE", "CONTROLLER_INSTANCE"),
    )
    # Watch the nodes' GPUs (cluster-scoped; limited mode needs them). Off for a namespaced install with
    # Roles only (deploy/namespaced).
    gpu_inventory: bool = True

    # Where the three ConfigMaps live (WVA hard-codes its namespace; ours is configurable).
    operator_namespace: str = Field(
        default=WVA_NAMESPACE,
        validation_alias=AliasChoices("WVA_OPERATOR_NAMESPACE", "POD_NAMESPACE"),
    )
    # The main ConfigMap. Unset: every name WVA gave it is read (main_config_sources); set (here or as
    # WVA's CONFIG_MAP_NAME): only this one.
    config_map_name: str = Field(
        default=WVA_CONFIG_MAP, validation_alias=AliasChoices("WVA_CONFIG_MAP_NAME", "CONFIG_MAP_NAME")
    )
    # A file of main-config settings (config.yaml's YAML, or a ConfigMap manifest), read at start-up; it
    # wins over the ConfigMaps and loses to the environment.
    config_file: str | None = None
    # The saturation and queueing-model ConfigMaps. Unset: the first found of every name WVA gave each;
    # set (here or as WVA's SATURATION_CONFIG_MAP_NAME / QUEUEING_MODEL_CONFIG_MAP_NAME, which its Helm
    # chart sets to release-prefixed names): only this one. The saturation name is also the one read in
    # each namespace holding variants (namespace-local configuration), as WVA reads it.
    saturation_config_map_name: str | None = Field(
        default=None,
        max_length=253,
        validation_alias=AliasChoices("WVA_SATURATION_CONFIG_MAP_NAME", "SATURATION_CONFIG_MAP_NAME"),
    )
    queueing_config_map_name: str | None = Field(
        default=None,
        max_length=253,
        validation_alias=AliasChoices("WVA_QUEUEING_CONFIG_MAP_NAME", "QUEUEING_MODEL_CONFIG_MAP_NAME"),
    )
    accelerator_costs_config_map: str = "accelerator-unit-costs"
    service_classes_config_map: str = "service-classes-config"

    # The per-variant gauge families for HPAs and KEDA: WVA's first (inferno_*) and later (wva_*) names;
    # both by default, so that every generation's HPAs, ScaledObjects and dashboards find theirs.
    emit_inferno_metrics: bool = True
    emit_wva_metrics: bool = True

    # Our metrics endpoint (WVA's inferno_* gauges and the operator's own metrics) and the liveness probe.
    metrics_host: str = "0.0.0.0"  # a pod listens on its pod IP
    metrics_port: int = Field(default=8080, ge=0, le=65535)
    # Secure metrics (docs/security.md): HTTPS with this certificate and key (PEM files, e.g. a mounted
    # kubernetes.io/tls Secret), answered only to callers whose token the API server authenticates and who
    # may `get` the non-resource URL /metrics.
    metrics_secure: bool = False
    metrics_cert_file: str | None = None
    metrics_key_file: str | None = None
    health_host: str = "0.0.0.0"
    health_port: int = Field(default=8081, ge=0, le=65535)
    # The probe fails when no cycle has completed for this long; 0 means 3 intervals + 60 s.
    liveness_max_cycle_age_seconds: float = Field(default=0.0, ge=0)

    # One active replica: a coordination.k8s.io Lease in the operator namespace.
    leader_election: bool = True
    lease_name: str = "variant-autoscaler-leader"
    lease_duration_seconds: float = Field(default=15.0, gt=0)
    renew_deadline_seconds: float = Field(default=10.0, gt=0)
    retry_period_seconds: float = Field(default=2.0, gt=0)
    identity: str = Field(default_factory=_default_identity)

    # Who keeps the VariantAutoscalings in memory: our informer, or a kopf index (slower at scale; kept
    # so that bench/operator_scale.py can measure both: docs/design.md, "kopf and what is custom").
    va_watch: Literal["informer", "kopf"] = "informer"

    # The cycle: wait this long after a change before running, to coalesce bursts of events.
    debounce_seconds: float = Field(default=2.0, ge=0)
    # Concurrent Kubernetes API writes within one cycle.
    kube_concurrency: int = Field(default=16, ge=1)
    kube_timeout_seconds: float = Field(default=30.0, gt=0)
    # Re-reads after a 409 (a status write, or a scale patch whose target changed only its status).
    conflict_retries: int = Field(
        default=5, ge=0, validation_alias=AliasChoices("WVA_CONFLICT_RETRIES", "WVA_STATUS_CONFLICT_RETRIES")
    )

    # The scale-from-zero loop's period: one query of the inference gateway's queues per tick, and only
    # while some variant is at zero replicas (engine/zero.py).
    scale_from_zero_interval_seconds: float = Field(default=0.5, gt=0)

    # Learn every variant's α β γ δ online from its pods' vLLM metrics (docs/profiles.md): seven PromQL
    # queries per cycle. Off: the spec's modelProfile sizes a variant, saturation one without it.
    profile_learning: bool = True
    # Where what annotated HPAs and ScaledObjects (no status of their own) would keep in a status is
    # kept, in the operator namespace: their learned profiles and their models' forecasts.
    learned_profiles_config_map: str = Field(
        default="variant-autoscaler-learned-profiles", min_length=1, max_length=253
    )

    prometheus_timeout_seconds: float = Field(default=10.0, gt=0)
    prometheus_retries: int = Field(default=2, ge=0)
    # The most one Prometheus answer may hold: a body past it fails the cycle's collection (a proxy or a
    # misconfigured query streaming without end must not exhaust the operator's memory).
    prometheus_max_response_bytes: int = Field(default=16 * 1024 * 1024, ge=64 * 1024)

    log_format: Literal["json", "plain"] = "json"
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", validation_alias=AliasChoices("WVA_LOG_LEVEL", "LOG_LEVEL")
    )

    # WVA-compatible environment overrides (unprefixed names, as WVA's Deployment sets them).
    prometheus_base_url: str | None = Field(
        default=None, validation_alias=AliasChoices("WVA_PROMETHEUS_BASE_URL", "PROMETHEUS_BASE_URL")
    )
    prometheus_tls_insecure_skip_verify: str | None = Field(
        default=None, validation_alias=AliasChoices("PROMETHEUS_TLS_INSECURE_SKIP_VERIFY")
    )
    prometheus_ca_cert_path: str | None = Field(
        default=None, validation_alias=AliasChoices("PROMETHEUS_CA_CERT_PATH")
    )
    prometheus_client_cert_path: str | None = Field(
        default=None, validation_alias=AliasChoices("PROMETHEUS_CLIENT_CERT_PATH")
    )
    prometheus_client_key_path: str | None = Field(
        default=None, validation_alias=AliasChoices("PROMETHEUS_CLIENT_KEY_PATH")
    )
    prometheus_server_name: str | None = Field(
        default=None, validation_alias=AliasChoices("PROMETHEUS_SERVER_NAME")
    )
    prometheus_bearer_token: str | None = Field(
        default=None, validation_alias=AliasChoices("PROMETHEUS_BEARER_TOKEN")
    )
    prometheus_token_path: str | None = Field(
        default=None, validation_alias=AliasChoices("PROMETHEUS_TOKEN_PATH")
    )
    prometheus_allow_token_over_http: str | None = Field(
        default=None, validation_alias=AliasChoices("PROMETHEUS_ALLOW_TOKEN_OVER_HTTP")
    )
    scale_to_zero: str | None = Field(default=None, validation_alias=AliasChoices("WVA_SCALE_TO_ZERO"))

    @field_validator("namespaces", mode="before")
    @classmethod
    def _split_namespaces(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator(
        "controller_instance", "saturation_config_map_name", "queueing_config_map_name", mode="before"
    )
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        # WVA treats CONTROLLER_INSTANCE="" (and an empty ConfigMap name) as unset.
        if isinstance(value, str):
            return value.strip() or None
        return value

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    @property
    def config_map_names(self) -> tuple[str, str, str]:
        return (self.config_map_name, self.accelerator_costs_config_map, self.service_classes_config_map)

    @property
    def main_config_map_names(self) -> tuple[str, ...]:
        """The main ConfigMap's names to read, weakest first: only the one named, when one is."""
        if "config_map_name" in self.model_fields_set:
            return (self.config_map_name,)
        return MAIN_CONFIG_MAP_NAMES

    @property
    def saturation_config_map_names(self) -> tuple[str, ...]:
        """The saturation ConfigMap's names to look for, the first found read: only the one named."""
        named = self.saturation_config_map_name
        return (named,) if named else SATURATION_CONFIG_MAP_NAMES

    @property
    def queueing_config_map_names(self) -> tuple[str, ...]:
        """The queueing-model ConfigMap's names to look for, the first found read: only the one named."""
        named = self.queueing_config_map_name
        return (named,) if named else QUEUEING_CONFIG_MAP_NAMES

    @property
    def local_config_map_names(self) -> tuple[str, str]:
        """The saturation and scale-to-zero ConfigMaps a namespace may hold for its own variants (the
        newest name of each, or the saturation ConfigMap's name when one is set, as WVA reads them)."""
        return (self.saturation_config_map_names[0], SCALE_TO_ZERO_CONFIG_MAP_NAMES[0])

    @property
    def wva_config_map_names(self) -> tuple[str, ...]:
        """Every ConfigMap of any WVA generation the operator reads (its namespace): to watch them all."""
        return tuple(
            dict.fromkeys(
                (
                    *self.main_config_map_names,
                    self.accelerator_costs_config_map,
                    self.service_classes_config_map,
                    *self.saturation_config_map_names,
                    *SCALE_TO_ZERO_CONFIG_MAP_NAMES,
                    *self.queueing_config_map_names,
                )
            )
        )

    def config_env(self) -> dict[str, str]:
        """The WVA-compatible overrides, keyed by WVA's names, for :func:`parse_main_config`."""
        values = {
            "PROMETHEUS_BASE_URL": self.prometheus_base_url,
            "PROMETHEUS_TLS_INSECURE_SKIP_VERIFY": self.prometheus_tls_insecure_skip_verify,
            "PROMETHEUS_CA_CERT_PATH": self.prometheus_ca_cert_path,
            "PROMETHEUS_CLIENT_CERT_PATH": self.prometheus_client_cert_path,
            "PROMETHEUS_CLIENT_KEY_PATH": self.prometheus_client_key_path,
            "PROMETHEUS_SERVER_NAME": self.prometheus_server_name,
            "PROMETHEUS_BEARER_TOKEN": self.prometheus_bearer_token,
            "PROMETHEUS_TOKEN_PATH": self.prometheus_token_path,
            "PROMETHEUS_ALLOW_TOKEN_OVER_HTTP": self.prometheus_allow_token_over_http,
            "WVA_SCALE_TO_ZERO": self.scale_to_zero,
        }
        assert set(PROMETHEUS_KEYS) <= set(values)
        return {key: value for key, value in values.items() if value is not None}

    def max_cycle_age(self, interval_seconds: float) -> float:
        """How old the last completed cycle may be before the liveness probe fails."""
        if self.liveness_max_cycle_age_seconds > 0:
            return self.liveness_max_cycle_age_seconds
        return 3 * interval_seconds + 60.0
