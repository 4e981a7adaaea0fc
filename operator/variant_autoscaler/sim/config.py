"""Scenario files (YAML or JSON) for ``variant-autoscaler simulate``.

The format reuses WVA's shapes where they exist: the accelerators are the data of the
``accelerator-unit-costs`` ConfigMap, the service classes are the documents of
``service-classes-config`` and each model carries a VariantAutoscaling ``modelProfile``. See
docs/simulator.md for the full reference; ``variant-autoscaler simulate --dump-scenario NAME`` prints
a bundled scenario to start from.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from variant_autoscaler.api.documents import load_document
from variant_autoscaler.api.v1alpha1 import ModelProfile
from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim import traffic as tr
from variant_autoscaler.sim.scenario import (
    Accelerator,
    Failure,
    ModelSpec,
    NodePool,
    Profile,
    Scenario,
    ServerSpec,
    ServiceClass,
    SimSettings,
    Traffic,
    Variant,
)
from vllm_emulator.costmodel import preset

__all__ = ["load_scenario", "parse_duration", "parse_scenario"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: float | int | str) -> float:
    """Seconds from a number of seconds or a string such as ``"90s"``, ``"15m"``, ``"4h"``."""
    if isinstance(value, bool):
        raise ValueError("a duration must be a number of seconds or a string like '15m'")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration must be >= 0")
        return float(value)
    match = _DURATION.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a duration (a number with an optional unit ms, s, m, h, d)")
    return float(match.group(1)) * _UNIT[match.group(2) or "s"]


Duration = Annotated[float, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


def _dur(value: Any) -> Any:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return parse_duration(value)
    return value


class _Settings(_Strict):
    scrape_interval: Duration = Field(15.0, alias="scrapeInterval")
    rate_window: Duration = Field(60.0, alias="rateWindow")
    sample_interval: Duration = Field(60.0, alias="sampleInterval")
    request_timeout: Duration = Field(120.0, alias="requestTimeout")
    drain_grace: Duration = Field(30.0, alias="drainGrace")
    replica_tick: Duration = Field(1.0, alias="replicaTick")
    routing: Literal["least-loaded", "round-robin"] = "least-loaded"
    # The replicas' engine: v1 (vLLM V1's scheduler, the default) or wva (the analyzer's accounting).
    engine: Literal["v1", "wva"] = "v1"

    _durations = field_validator(
        "scrape_interval",
        "rate_window",
        "sample_interval",
        "request_timeout",
        "drain_grace",
        "replica_tick",
        mode="before",
    )(_dur)


class _AcceleratorCost(_Strict):
    device: str = Field(min_length=1)
    cost: float = Field(ge=0)


class _Pool(_Strict):
    name: str = Field(min_length=1)
    accelerator: str = Field(min_length=1)
    count: int = Field(ge=0)
    gpus: int = Field(ge=1)


class _ClassEntry(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)
    model: str = Field(min_length=1)
    slo_tpot: float = Field(alias="slo-tpot", gt=0)
    slo_ttft: float = Field(alias="slo-ttft", gt=0)
    # Ours: slo-ttft bounds this percentile of TTFT (0: the mean, as WVA); slo-tpot likewise; and the
    # share of requests within both. Each a percentage ("99" or "99%").
    slo_ttft_percentile: float = Field(0.0, alias="slo-ttft-percentile", ge=0, lt=100)
    slo_tpot_percentile: float = Field(0.0, alias="slo-tpot-percentile", ge=0, lt=100)
    slo_attainment: float = Field(0.0, alias="slo-attainment", ge=0, lt=100)

    @field_validator("slo_ttft_percentile", "slo_tpot_percentile", "slo_attainment", mode="before")
    @classmethod
    def _percent(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().endswith("%"):
            return value.strip()[:-1]
        return value


class _Class(_Strict):
    name: str = Field(min_length=1)
    priority: int = 100
    data: list[_ClassEntry] = Field(default_factory=list)

    @field_validator("priority")
    @classmethod
    def _clamp(cls, value: int) -> int:
        return value if 1 <= value <= 100 else 100  # WVA's rule for out-of-range priorities


class _Length(_Strict):
    fixed: int | None = Field(None, ge=1)
    uniform: tuple[int, int] | None = None
    lognormal: dict[str, float] | None = None  # mean, cv, min, max
    values: list[int] | None = None

    @model_validator(mode="after")
    def _one(self) -> _Length:
        given = [k for k in ("fixed", "uniform", "lognormal", "values") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("a length distribution is exactly one of fixed, uniform, lognormal, values")
        return self

    def build(self) -> tr.LengthDistribution:
        if self.fixed is not None:
            return tr.FixedLength(self.fixed)
        if self.uniform is not None:
            return tr.UniformLength(self.uniform[0], self.uniform[1])
        if self.lognormal is not None:
            spec = dict(self.lognormal)
            unknown = set(spec) - {"mean", "cv", "min", "max"}
            if unknown or "mean" not in spec:
                raise ConfigError("lognormal takes mean (required), cv, min, max")
            return tr.LogNormalLength(
                mean_tokens=spec["mean"],
                cv=spec.get("cv", 1.0),
                low=int(spec.get("min", 1)),
                high=int(spec.get("max", 8192)),
            )
        assert self.values is not None
        return tr.Empirical(tuple(self.values))


class _Rate(_Strict):
    constant: float | None = Field(None, ge=0)
    diurnal: dict[str, float | str] | None = None  # low, high, period, phase
    step: list[tuple[float | str, float]] | None = None  # [[at, rps], ...]
    flash: dict[str, float | str] | None = None  # base, extra, start, rise, hold, decay
    sum: list[_Rate] | None = None

    @model_validator(mode="after")
    def _one(self) -> _Rate:
        given = [k for k in ("constant", "diurnal", "step", "flash", "sum") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("a rate is exactly one of constant, diurnal, step, flash, sum")
        return self

    def build(self) -> tr.RateProfile:
        if self.constant is not None:
            return tr.Constant(self.constant)
        if self.diurnal is not None:
            d = _keys(self.diurnal, "diurnal", required=("low", "high"), optional=("period", "phase"))
            return tr.Diurnal(
                low_rps=float(d["low"]),
                high_rps=float(d["high"]),
                period_s=parse_duration(d.get("period", 86400.0)),
                phase_s=parse_duration(d.get("phase", 0.0)),
            )
        if self.step is not None:
            return tr.Step(
                tuple(parse_duration(a) for a, _ in self.step), tuple(float(r) for _, r in self.step)
            )
        if self.flash is not None:
            f = _keys(
                self.flash, "flash", required=("base", "extra", "start"), optional=("rise", "hold", "decay")
            )
            return tr.FlashCrowd(
                base_rps=float(f["base"]),
                extra_rps=float(f["extra"]),
                start_s=parse_duration(f["start"]),
                rise_s=parse_duration(f.get("rise", 60.0)),
                hold_s=parse_duration(f.get("hold", 600.0)),
                decay_s=parse_duration(f.get("decay", 300.0)),
            )
        assert self.sum is not None
        return tr.Sum(tuple(part.build() for part in self.sum))


def _keys(
    raw: dict[str, float | str], what: str, *, required: tuple[str, ...], optional: tuple[str, ...]
) -> dict[str, float | str]:
    missing = [k for k in required if k not in raw]
    unknown = sorted(set(raw) - set(required) - set(optional))
    if missing or unknown:
        raise ConfigError(
            f"{what} needs {', '.join(required)}"
            + (f" and may have {', '.join(optional)}" if optional else "")
            + (f"; missing {', '.join(missing)}" if missing else "")
            + (f"; unknown {', '.join(unknown)}" if unknown else "")
        )
    return raw


class _Trace(_Strict):
    path: str = Field(min_length=1)
    speedup: float = Field(1.0, gt=0)
    offset: Duration = 0.0
    time_column: str | None = Field(None, alias="timeColumn")
    input_column: str | None = Field(None, alias="inputColumn")
    output_column: str | None = Field(None, alias="outputColumn")
    # Seconds per unit of numeric timestamps; unset: 1 for CSV, 0.001 for JSON lines (Mooncake's ms).
    time_unit: float | None = Field(None, alias="timeUnit", gt=0)
    rate_scale: float = Field(1.0, alias="rateScale", gt=0, le=1000)
    scale_window: Duration = Field(60.0, alias="scaleWindow", gt=0)

    _d = field_validator("offset", "scale_window", mode="before")(_dur)


class _Traffic(_Strict):
    rate: _Rate | None = None
    input_tokens: _Length | None = Field(None, alias="inputTokens")
    output_tokens: _Length | None = Field(None, alias="outputTokens")
    burstiness: float = Field(1.0, gt=0)
    trace: _Trace | None = None

    @model_validator(mode="after")
    def _shape(self) -> _Traffic:
        if self.trace is not None:
            if self.rate is not None or self.input_tokens is not None or self.output_tokens is not None:
                raise ValueError("traffic is either a trace or rate + inputTokens + outputTokens, not both")
        elif self.rate is None or self.input_tokens is None or self.output_tokens is None:
            raise ValueError("generated traffic needs rate, inputTokens and outputTokens")
        return self

    def build(self, base: Path) -> Traffic:
        if self.trace is not None:
            t = self.trace
            path = Path(t.path)
            if not path.is_absolute():
                path = base / path
            arrivals = tr.read_trace(
                path,
                time_column=t.time_column,
                input_column=t.input_column,
                output_column=t.output_column,
                time_unit_s=t.time_unit,
            )
            return tr.TraceTraffic(
                arrivals,
                source=str(path),
                speedup=t.speedup,
                offset_s=t.offset,
                rate_scale=t.rate_scale,
                scale_window_s=t.scale_window,
            )
        assert self.rate is not None and self.input_tokens is not None and self.output_tokens is not None
        return tr.GeneratedTraffic(
            rate=self.rate.build(),
            input_tokens=self.input_tokens.build(),
            output_tokens=self.output_tokens.build(),
            burstiness=self.burstiness,
        )


class _Variant(_Strict):
    name: str = Field(min_length=1)
    accelerator: str = Field(min_length=1)
    replicas: int = Field(1, ge=0)
    min_replicas: int = Field(1, alias="minReplicas", ge=0)
    max_replicas: int | None = Field(None, alias="maxReplicas", ge=1)


class _StepCost(_Strict):
    fixed: float | None = Field(None, ge=0)
    token: float | None = Field(None, ge=0)
    context: float | None = Field(None, ge=0)


class _Server(_Strict):
    """One accelerator's server under the v1 engine (see ServerSpec)."""

    hardware: str | None = None
    step_cost: _StepCost | None = Field(None, alias="stepCostMs")
    max_num_batched_tokens: int | None = Field(None, alias="maxNumBatchedTokens", ge=1)
    block_size: int = Field(16, alias="blockSize", ge=1, le=256)
    prefix_hit_ratio: float = Field(0.0, alias="prefixHitRatio", ge=0, le=1)
    context_ref_tokens: int | None = Field(None, alias="contextRefTokens", ge=1)

    def build(self, engine: Literal["v1", "wva"], traffic: Traffic) -> ServerSpec:
        cost = self.step_cost or _StepCost()  # type: ignore[call-arg]
        if self.hardware is not None:
            try:
                preset(self.hardware)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        return ServerSpec(
            engine=engine,
            hardware=self.hardware,
            fixed_ms=cost.fixed,
            token_ms=cost.token,
            context_ms=cost.context,
            max_num_batched_tokens=self.max_num_batched_tokens,
            block_size=self.block_size,
            prefix_hit_ratio=self.prefix_hit_ratio,
            context_ref_tokens=self.context_ref_tokens or mean_context(traffic),
        )


def mean_context(traffic: Traffic) -> int:
    """The attention context of a decoding request of this traffic, averaged over decode steps.

    A request with ``L_in`` prompt and ``L_out`` output tokens decodes ``L_out`` steps at a mean context
    of ``L_in + L_out/2``; weighting each request by its steps gives the context a batch sees on average,
    the context at which a hand profile fitted on this traffic is right. Estimated from 20,000 requests
    (fixed seed) of generated traffic, from the trace itself otherwise.
    """
    if isinstance(traffic, tr.TraceTraffic):
        src = traffic.arrivals_in_trace
        l_in, l_out = src.input_tokens.astype(np.float64), src.output_tokens.astype(np.float64)
    else:
        rng = np.random.default_rng(0)
        l_in = traffic.input_tokens.sample(rng, 20_000).astype(np.float64)
        l_out = traffic.output_tokens.sample(rng, 20_000).astype(np.float64)
    if len(l_out) == 0 or float(l_out.sum()) <= 0:
        return 256
    return max(1, round(float((l_out * (l_in + l_out / 2.0)).sum() / l_out.sum())))


class _Model(_Strict):
    model_id: str = Field(alias="modelID", min_length=1)
    service_class: str | None = Field(None, alias="serviceClass")
    startup: Duration = 120.0
    share_load: bool = Field(True, alias="shareLoad")
    model_profile: ModelProfile = Field(alias="modelProfile")
    kv_cache_tokens: dict[str, int] = Field(default_factory=dict, alias="kvCacheTokens")
    # vLLM's --max-model-len: the longest request (prompt + output) a replica accepts.
    max_model_len: int | None = Field(None, alias="maxModelLen", ge=2)
    servers: dict[str, _Server] = Field(default_factory=dict)
    traffic: _Traffic
    variants: list[_Variant] = Field(min_length=1)

    _d = field_validator("startup", mode="before")(_dur)


class _Failure(_Strict):
    at: Duration
    pool: str = Field(min_length=1)
    count: int = Field(1, ge=1)
    recover: Duration | None = None
    # Degraded rather than lost: the nodes' replicas run this many times slower (a finite factor > 1).
    slowdown: float | None = Field(None, gt=1, allow_inf_nan=False)

    _d = field_validator("at", "recover", mode="before")(_dur)


class _File(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    duration: Duration
    seed: int = 0
    settings: _Settings = Field(default_factory=_Settings)  # type: ignore[arg-type]
    accelerators: dict[str, _AcceleratorCost] = Field(min_length=1)
    nodes: list[_Pool] = Field(min_length=1)
    service_classes: list[_Class] = Field(alias="serviceClasses", min_length=1)
    models: list[_Model] = Field(min_length=1)
    failures: list[_Failure] = Field(default_factory=list)

    _d = field_validator("duration", mode="before")(_dur)


_DEFAULT_SERVER = _Server()  # type: ignore[call-arg]


def _find_class(model: _Model, classes: list[_Class]) -> tuple[_Class, _ClassEntry]:
    for cls in classes:
        for entry in cls.data:
            if entry.model == model.model_id and (model.service_class in (None, cls.name)):
                return cls, entry
    where = f" in service class {model.service_class!r}" if model.service_class else ""
    raise ConfigError(f"model {model.model_id}: no service-class entry (slo-ttft, slo-tpot){where}")


def parse_scenario(data: Any, *, base_dir: Path | str = ".") -> Scenario:
    """Build a :class:`Scenario` from parsed YAML/JSON; errors name the offending field."""
    try:
        doc = _File.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"scenario: {where}: {first['msg']}") from None
    base = Path(base_dir)
    engine = doc.settings.engine
    accelerators = tuple(Accelerator(name, a.device, a.cost) for name, a in sorted(doc.accelerators.items()))
    pools = tuple(NodePool(p.name, p.accelerator, p.count, p.gpus) for p in doc.nodes)
    classes = tuple(ServiceClass(c.name, c.priority) for c in doc.service_classes)
    models: list[ModelSpec] = []
    variants: list[Variant] = []
    for m in doc.models:
        cls, entry = _find_class(m, doc.service_classes)
        traffic = m.traffic.build(base)
        profiles: list[Profile] = []
        for acc in m.model_profile.accelerators:
            try:
                parms = acc.perf_parms
                profiles.append(
                    Profile(
                        accelerator=acc.acc,
                        acc_count=acc.acc_count,
                        max_batch_size=acc.max_batch_size,
                        alpha=parms.alpha,
                        beta=parms.beta,
                        gamma=parms.gamma,
                        delta=parms.delta,
                        kv_cache_tokens=m.kv_cache_tokens.get(acc.acc),
                        max_model_len=m.max_model_len,
                        server=m.servers.get(acc.acc, _DEFAULT_SERVER).build(engine, traffic),
                    )
                )
            except ValueError as exc:
                raise ConfigError(f"model {m.model_id}: profile {acc.acc}: {exc}") from None
        unknown_kv = sorted(set(m.kv_cache_tokens) - {p.accelerator for p in profiles})
        if unknown_kv:
            raise ConfigError(f"model {m.model_id}: kvCacheTokens names no profile: {', '.join(unknown_kv)}")
        unknown_servers = sorted(set(m.servers) - {p.accelerator for p in profiles})
        if unknown_servers:
            raise ConfigError(f"model {m.model_id}: servers names no profile: {', '.join(unknown_servers)}")
        models.append(
            ModelSpec(
                model_id=m.model_id,
                service_class=cls.name,
                slo_ttft_ms=entry.slo_ttft,
                slo_itl_ms=entry.slo_tpot,
                slo_ttft_percentile=entry.slo_ttft_percentile,
                slo_itl_percentile=entry.slo_tpot_percentile,
                slo_attainment=entry.slo_attainment,
                profiles=tuple(profiles),
                traffic=traffic,
                startup_s=m.startup,
                share_load=m.share_load,
            )
        )
        for v in m.variants:
            variants.append(
                Variant(
                    name=v.name,
                    model=m.model_id,
                    accelerator=v.accelerator,
                    initial_replicas=v.replicas,
                    min_replicas=v.min_replicas,
                    max_replicas=v.max_replicas,
                )
            )
    s = doc.settings
    settings = SimSettings(
        scrape_interval_s=s.scrape_interval,
        rate_window_s=s.rate_window,
        sample_interval_s=s.sample_interval,
        request_timeout_s=s.request_timeout,
        drain_grace_s=s.drain_grace,
        routing=s.routing,
        replica_tick_s=s.replica_tick,
    )
    failures = tuple(Failure(f.at, f.pool, f.count, f.recover, f.slowdown) for f in doc.failures)
    return Scenario(
        name=doc.name,
        description=doc.description,
        duration_s=doc.duration,
        seed=doc.seed,
        accelerators=accelerators,
        pools=pools,
        classes=classes,
        models=tuple(models),
        variants=tuple(variants),
        failures=failures,
        settings=settings,
    )


def load_scenario(path: Path | str) -> Scenario:
    """Read a scenario file (``.json``, or YAML otherwise)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read scenario {p}: {exc.strerror or exc}") from None
    return parse_scenario(load_document(text, source=f"scenario {p}"), base_dir=p.parent)
