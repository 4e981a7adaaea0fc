"""What a simulation runs: the cluster (accelerators, nodes), the models with their variants and
traffic, the failures, and the simulation's own settings.

These are plain frozen dataclasses; :mod:`variant_autoscaler.sim.config` parses scenario files into
them and :mod:`variant_autoscaler.sim.scenarios` builds the bundled ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.traffic import GeneratedTraffic, TraceTraffic

Traffic = GeneratedTraffic | TraceTraffic
Routing = Literal["least-loaded", "round-robin"]
EngineKind = Literal["v1", "wva"]

__all__ = [
    "Accelerator",
    "EngineKind",
    "Failure",
    "ModelSpec",
    "NodePool",
    "Profile",
    "Routing",
    "Scenario",
    "ServerSpec",
    "ServiceClass",
    "SimSettings",
    "Traffic",
    "Variant",
]


@dataclass(frozen=True, slots=True)
class Accelerator:
    """An accelerator type, as in WVA's ``accelerator-unit-costs`` ConfigMap."""

    name: str  # the key, e.g. "A100"
    device: str  # the node label's product string, e.g. "NVIDIA-A100-PCIE-80GB"
    unit_cost: float  # cost of one unit for one hour (WVA: cents per hour)

    def __post_init__(self) -> None:
        if not self.name or not self.device:
            raise ConfigError("an accelerator needs a name and a device")
        if not math.isfinite(self.unit_cost) or self.unit_cost < 0:
            raise ConfigError(f"accelerator {self.name}: unit cost must be >= 0")


@dataclass(frozen=True, slots=True)
class NodePool:
    """``count`` identical nodes, each with ``gpus`` units of one accelerator."""

    name: str
    accelerator: str
    count: int
    gpus: int

    def __post_init__(self) -> None:
        if self.count < 0 or self.gpus < 1:
            raise ConfigError(f"node pool {self.name}: count must be >= 0 and gpus >= 1")


@dataclass(frozen=True, slots=True)
class ServiceClass:
    """A service class: a name and a priority (1 is the highest, as in WVA)."""

    name: str
    priority: int

    def __post_init__(self) -> None:
        if not 1 <= self.priority <= 100:
            raise ConfigError(f"service class {self.name}: priority must be in [1, 100]")


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """How the simulated inference server behaves: the ground truth a profile only approximates.

    ``engine`` is the emulator engine each replica runs: ``v1`` (vLLM V1's scheduler: token budget,
    chunked prefill, KV blocks, preemption, prefix cache) or ``wva`` (the analyzer's own accounting).
    For ``v1`` the step costs come from ``fixed_ms``/``token_ms``/``context_ms`` where given, else the
    ``hardware`` preset (``vllm_emulator.costmodel.PRESETS``), else the profile's α, β, γ, δ at
    ``context_ref_tokens`` tokens of context. Simulated requests have no content, so prefix-cache hits
    are a fixed ``prefix_hit_ratio`` of every prompt.
    """

    engine: EngineKind = "v1"
    hardware: str | None = None
    fixed_ms: float | None = None
    token_ms: float | None = None
    context_ms: float | None = None
    max_num_batched_tokens: int | None = None
    block_size: int = 16
    prefix_hit_ratio: float = 0.0
    context_ref_tokens: int = 256

    def __post_init__(self) -> None:
        if self.engine not in ("v1", "wva"):
            raise ConfigError(f"server engine must be v1 or wva, got {self.engine!r}")
        for name in ("fixed_ms", "token_ms", "context_ms"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ConfigError(f"server {name} must be a finite number >= 0")
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < 1:
            raise ConfigError("server maxNumBatchedTokens must be >= 1")
        if not 1 <= self.block_size <= 256:
            raise ConfigError("server blockSize must be in 1..256")
        if not 0.0 <= self.prefix_hit_ratio <= 1.0:
            raise ConfigError("server prefixHitRatio must be in [0, 1]")
        if self.context_ref_tokens < 1:
            raise ConfigError("server contextRefTokens must be >= 1")


@dataclass(frozen=True, slots=True)
class Profile:
    """Performance of a model on one accelerator (a VA ``modelProfile`` entry), in ms."""

    accelerator: str
    acc_count: int
    max_batch_size: int
    alpha: float
    beta: float
    gamma: float
    delta: float
    # KV cache size of one replica in tokens; None means "large enough for max_batch_size requests".
    kv_cache_tokens: int | None = None
    # Longest request (prompt + output) a replica accepts (vLLM's --max-model-len); None: the default.
    max_model_len: int | None = None
    # The server each replica runs; None: the wva engine with this profile (the Python API's default;
    # scenario files default to the v1 engine, see sim/config.py).
    server: ServerSpec | None = None

    def __post_init__(self) -> None:
        if self.acc_count < 1 or self.max_batch_size < 1:
            raise ConfigError(f"profile {self.accelerator}: accCount and maxBatchSize must be >= 1")
        for name in ("alpha", "beta", "gamma", "delta"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"profile {self.accelerator}: {name} must be a finite number >= 0")
        if self.kv_cache_tokens is not None and self.kv_cache_tokens < 1:
            raise ConfigError(f"profile {self.accelerator}: kv_cache_tokens must be >= 1")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ConfigError(f"profile {self.accelerator}: max_model_len must be >= 2")


@dataclass(frozen=True, slots=True)
class Variant:
    """One Deployment serving a model on one accelerator type (one VariantAutoscaling)."""

    name: str
    model: str
    accelerator: str
    initial_replicas: int = 1
    min_replicas: int = 1
    max_replicas: int | None = None

    def __post_init__(self) -> None:
        if self.initial_replicas < 0 or self.min_replicas < 0:
            raise ConfigError(f"variant {self.name}: replicas must be >= 0")
        if self.max_replicas is not None and self.max_replicas < max(1, self.min_replicas):
            raise ConfigError(f"variant {self.name}: max_replicas must be >= max(1, min_replicas)")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model: its SLOs (WVA service-class entry), its profiles, its start-up time and its traffic."""

    model_id: str
    service_class: str
    slo_ttft_ms: float
    slo_itl_ms: float
    profiles: tuple[Profile, ...]
    traffic: Traffic
    startup_s: float = 120.0
    # The optimizer may split this model's load across its variants (our opt-in; WVA never does).
    share_load: bool = True
    # The class's slo-ttft-percentile (ours): slo_ttft_ms bounds this percentile; 0 the mean (WVA).
    slo_ttft_percentile: float = 0.0
    # slo-tpot-percentile: slo_itl_ms bounds this percentile of the per-request mean ITL; 0 the mean.
    slo_itl_percentile: float = 0.0
    # slo-attainment: this share (percent) of requests within both targets; 0: none (the mean, WVA).
    slo_attainment: float = 0.0

    def __post_init__(self) -> None:
        if not self.slo_ttft_ms > 0 or not self.slo_itl_ms > 0:
            raise ConfigError(f"model {self.model_id}: SLOs must be > 0 ms")
        for name in ("slo_ttft_percentile", "slo_itl_percentile", "slo_attainment"):
            value = getattr(self, name)
            if not (value == 0.0 or 0.0 < value < 100.0):
                raise ConfigError(f"model {self.model_id}: {name} must be 0 or in (0, 100), got {value:g}")
        if not self.profiles:
            raise ConfigError(f"model {self.model_id}: needs at least one profile")
        if self.startup_s < 0:
            raise ConfigError(f"model {self.model_id}: startup_s must be >= 0")

    @property
    def tail_slo(self) -> bool:
        """Whether the class states its targets as shares of requests (attainment or percentiles)."""
        return self.slo_attainment > 0 or self.slo_ttft_percentile > 0 or self.slo_itl_percentile > 0

    def profile(self, accelerator: str) -> Profile:
        for prof in self.profiles:
            if prof.accelerator == accelerator:
                return prof
        raise ConfigError(f"model {self.model_id} has no profile for accelerator {accelerator!r}")


@dataclass(frozen=True, slots=True)
class Failure:
    """``count`` nodes of ``pool`` are lost at ``at_s`` (their pods die); back at ``recover_s`` if set.

    With ``slowdown`` the nodes are not lost but degraded: their replicas run ``slowdown`` times slower
    (every iteration takes that much longer) until ``recover_s``.
    """

    at_s: float
    pool: str
    count: int = 1
    recover_s: float | None = None
    slowdown: float | None = None

    def __post_init__(self) -> None:
        if self.at_s < 0 or self.count < 1:
            raise ConfigError("a failure needs at_s >= 0 and count >= 1")
        if self.slowdown is not None and not (self.slowdown > 1 and math.isfinite(self.slowdown)):
            raise ConfigError("a failure's slowdown must be a finite factor > 1")
        if self.recover_s is not None and self.recover_s <= self.at_s:
            raise ConfigError("a failure's recover_s must be after at_s")


@dataclass(frozen=True, slots=True)
class SimSettings:
    """How the simulated cluster and its observers behave."""

    scrape_interval_s: float = 15.0  # Prometheus scrape period
    rate_window_s: float = 60.0  # the [1m] of rate(...) queries
    sample_interval_s: float = 60.0  # time-series resolution of the report
    request_timeout_s: float = 120.0  # a client gives up if no first token by then (dropped)
    drain_grace_s: float = 30.0  # terminationGracePeriodSeconds of a deleted pod
    routing: Routing = "least-loaded"
    # A busy replica is looked at (its finished requests collected) at least this often; the router's
    # view of outstanding requests is at most this stale. Latencies are exact whatever the value.
    replica_tick_s: float = 1.0

    def __post_init__(self) -> None:
        for name in (
            "scrape_interval_s",
            "rate_window_s",
            "sample_interval_s",
            "request_timeout_s",
            "replica_tick_s",
        ):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0")
        if self.drain_grace_s < 0:
            raise ConfigError("drain_grace_s must be >= 0")
        if self.rate_window_s < 2 * self.scrape_interval_s:
            raise ConfigError("rate_window_s must cover at least two scrapes")


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything one simulation needs, except the policy."""

    name: str
    duration_s: float
    seed: int
    accelerators: tuple[Accelerator, ...]
    pools: tuple[NodePool, ...]
    classes: tuple[ServiceClass, ...]
    models: tuple[ModelSpec, ...]
    variants: tuple[Variant, ...]
    failures: tuple[Failure, ...] = ()
    settings: SimSettings = field(default_factory=SimSettings)
    description: str = ""

    def __post_init__(self) -> None:
        if not self.duration_s > 0:
            raise ConfigError("duration_s must be > 0")
        _unique("accelerator", [a.name for a in self.accelerators])
        _unique("node pool", [p.name for p in self.pools])
        _unique("service class", [c.name for c in self.classes])
        _unique("model", [m.model_id for m in self.models])
        _unique("variant", [v.name for v in self.variants])
        accs = {a.name for a in self.accelerators}
        classes = {c.name for c in self.classes}
        models = {m.model_id: m for m in self.models}
        for pool in self.pools:
            if pool.accelerator not in accs:
                raise ConfigError(f"node pool {pool.name}: unknown accelerator {pool.accelerator!r}")
        for model in self.models:
            if model.service_class not in classes:
                raise ConfigError(f"model {model.model_id}: unknown service class {model.service_class!r}")
            for prof in model.profiles:
                if prof.accelerator not in accs:
                    raise ConfigError(f"model {model.model_id}: unknown accelerator {prof.accelerator!r}")
        for var in self.variants:
            if var.model not in models:
                raise ConfigError(f"variant {var.name}: unknown model {var.model!r}")
            models[var.model].profile(var.accelerator)  # raises if missing
        served = {v.model for v in self.variants}
        for model in self.models:
            if model.model_id not in served:
                raise ConfigError(f"model {model.model_id} has no variant")
        pools = {p.name: p for p in self.pools}
        for fail in self.failures:
            if fail.pool not in pools:
                raise ConfigError(f"failure: unknown node pool {fail.pool!r}")
            if fail.count > pools[fail.pool].count:
                raise ConfigError(f"failure: pool {fail.pool} has only {pools[fail.pool].count} nodes")

    # Lookups -----------------------------------------------------------------------------------------
    @property
    def accelerator_by_name(self) -> Mapping[str, Accelerator]:
        return {a.name: a for a in self.accelerators}

    @property
    def model_by_id(self) -> Mapping[str, ModelSpec]:
        return {m.model_id: m for m in self.models}

    @property
    def class_by_name(self) -> Mapping[str, ServiceClass]:
        return {c.name: c for c in self.classes}

    def capacity(self) -> dict[str, int]:
        """Accelerator units per accelerator name with every node healthy."""
        total: dict[str, int] = {a.name: 0 for a in self.accelerators}
        for pool in self.pools:
            total[pool.accelerator] += pool.count * pool.gpus
        return total


def _unique(what: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if not name:
            raise ConfigError(f"a {what} needs a name")
        if name in seen:
            raise ConfigError(f"{what} {name!r} is defined twice")
        seen.add(name)
