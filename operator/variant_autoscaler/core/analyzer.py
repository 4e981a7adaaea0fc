"""Sizing of one variant on one accelerator: replicas, cost, predicted latency (WVA's ``CreateAllocation``).

Given a model's performance parameters on an accelerator, its maximum batch size, the observed load and
the service class's SLOs, :func:`size_allocation` finds the largest request rate one replica can take
while meeting the SLOs (:meth:`QueueAnalyzer.size`), the number of replicas the load needs, their cost,
and the TTFT/ITL each replica will see at its share of the load.

Units follow WVA: the load's arrival rate is in requests per *minute*; SLO times in ms, TPS in tokens/s;
the returned ``max_rate_per_replica`` is in requests per *second*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from variant_autoscaler.core.queueing import (
    QueueAnalyzer,
    RequestSize,
    ServiceParms,
    TargetPerf,
    cached_analyzer,
)
from variant_autoscaler.errors import InfeasibleError, ModelError

__all__ = ["MAX_REPLICAS", "SLO", "Load", "Sizing", "size_allocation"]

#: More replicas than this for one variant is treated as infeasible rather than computed.
MAX_REPLICAS = 1_000_000


@dataclass(frozen=True, slots=True)
class Load:
    """Observed load on a variant: arrival rate in requests per minute, average tokens per request."""

    arrival_rate: float
    avg_input_tokens: float
    avg_output_tokens: float


@dataclass(frozen=True, slots=True)
class SLO:
    """Service-level objectives: mean TTFT and ITL in ms, TPS in tokens/s; 0 means none."""

    ttft: float = 0.0
    itl: float = 0.0
    tps: float = 0.0


@dataclass(frozen=True, slots=True)
class Sizing:
    """One candidate allocation: ``replicas`` servers of batch ``max_batch`` on ``accelerator``.

    ``cost`` is ``unit_cost × acc_count × replicas``; ``itl``, ``ttft`` (ms) and ``rho`` (batch occupancy)
    are predicted for one replica at its share of the load; ``max_rate_per_replica`` (req/s) is the
    throughput one replica sustains under the SLOs (WVA's rateStar).
    """

    accelerator: str
    replicas: int
    max_batch: int
    cost: float
    itl: float
    ttft: float
    rho: float
    max_rate_per_replica: float


def _number(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < math.inf:
        raise ModelError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelError(f"{name} must be an integer, got {value!r}")
    return value


def size_allocation(
    *,
    accelerator: str,
    unit_cost: float,
    acc_count: int,
    parms: ServiceParms,
    max_batch_size: int,
    load: Load,
    slo: SLO,
    min_replicas: int = 1,
    max_queue_size: int | None = None,
    memo: bool = True,
) -> Sizing:
    """Size one variant on one accelerator, as WVA's ``CreateAllocation`` does.

    * Zero load (arrival rate 0, or no output tokens): ``min_replicas`` replicas with the zero-load
      figures (ITL ``α + β``, TTFT ``γ + δ``); with ``min_replicas == 0`` an empty allocation
      (``accelerator=""``, 0 replicas, batch 0, cost 0).
    * Otherwise ``replicas = max(ceil(total_rate / rate_star), min_replicas)`` where ``rate_star`` is the
      throughput of one replica at the largest rate meeting the SLOs and ``total_rate`` is the arrival
      rate in req/s, or ``slo.tps / avg_output_tokens`` when a TPS SLO is set.

    ``acc_count`` below 1 counts as 1 (as in WVA). ``memo`` (default) reuses a shared analyzer and its
    sizing results for identical inputs (bounded LRU), which makes re-sizing unchanged candidates cheap.

    Raises :class:`~variant_autoscaler.errors.InfeasibleError` (with a readable reason) when no rate
    meets the SLOs, :class:`~variant_autoscaler.errors.ModelError` for invalid inputs.
    """
    unit_cost = _number("unit cost", unit_cost)
    _count("maximum batch size", max_batch_size)  # also keeps 8.0 or True from hitting the cache as 8 or 1
    if max_queue_size is not None:
        _count("maximum queue size", max_queue_size)
    acc_count = max(_count("accelerator count", acc_count), 1)
    min_replicas = _count("minimum replicas", min_replicas)
    if min_replicas < 0:
        raise ModelError(f"minimum replicas must be >= 0, got {min_replicas}")
    arrival = _number("arrival rate", load.arrival_rate)
    in_tokens = _number("average input tokens", load.avg_input_tokens)
    out_tokens = _number("average output tokens", load.avg_output_tokens)
    targets = TargetPerf(
        _number("TTFT SLO", slo.ttft), _number("ITL SLO", slo.itl), _number("TPS SLO", slo.tps)
    )
    if not isinstance(parms, ServiceParms):
        raise ModelError(f"service parameters must be ServiceParms, got {type(parms).__name__}")

    if arrival == 0.0 or out_tokens == 0.0:
        for name in ("alpha", "beta", "gamma", "delta"):  # the analyzer checks them otherwise
            _number(name, getattr(parms, name))
        return _zero_load(
            accelerator=accelerator,
            unit_cost=unit_cost,
            acc_count=acc_count,
            parms=parms,
            max_batch_size=max_batch_size,
            min_replicas=min_replicas,
        )

    request = RequestSize(in_tokens, out_tokens)
    if memo:
        analyzer = cached_analyzer(max_batch_size, max_queue_size, parms, request)
    else:
        analyzer = QueueAnalyzer(max_batch_size, max_queue_size, parms, request)
    rate_star = analyzer.size(targets).metrics.throughput  # req/s one replica sustains under the SLOs
    total_rate = arrival / 60.0 if targets.tps == 0.0 else targets.tps / out_tokens
    needed = total_rate / rate_star
    if not needed <= MAX_REPLICAS:
        raise InfeasibleError(
            f"the load of {total_rate:.4g} req/s needs {needed:.3g} replicas of {rate_star:.4g} req/s each"
        )
    # At least one replica: the load is not zero (only a denormal arrival rate could round it to 0 here).
    replicas = max(math.ceil(needed), min_replicas, 1)
    per_replica = analyzer.analyze(min(total_rate / replicas, analyzer.rate_range[1]))
    return Sizing(
        accelerator=accelerator,
        replicas=replicas,
        max_batch=max_batch_size,
        cost=unit_cost * acc_count * replicas,
        itl=per_replica.itl,
        ttft=per_replica.avg_wait_time + per_replica.avg_prefill_time,
        rho=per_replica.rho,
        max_rate_per_replica=rate_star,
    )


def _zero_load(
    *,
    accelerator: str,
    unit_cost: float,
    acc_count: int,
    parms: ServiceParms,
    max_batch_size: int,
    min_replicas: int,
) -> Sizing:
    """WVA's ``zeroLoadAllocation``: the minimum replicas, with latencies of an idle server."""
    if min_replicas == 0:
        return Sizing(
            accelerator="",
            replicas=0,
            max_batch=0,
            cost=0.0,
            itl=0.0,
            ttft=0.0,
            rho=0.0,
            max_rate_per_replica=0.0,
        )
    batch = _count("maximum batch size", max_batch_size)
    if batch < 1:
        raise ModelError(f"maximum batch size must be >= 1, got {batch}")
    prefill = parms.gamma + parms.delta
    max_serv_time = prefill + parms.alpha + parms.beta * batch
    if not max_serv_time > 0.0:
        raise ModelError("the service time is zero for these parameters (alpha, beta, gamma, delta all 0)")
    return Sizing(
        accelerator=accelerator,
        replicas=min_replicas,
        max_batch=batch,
        cost=unit_cost * acc_count * min_replicas,
        itl=parms.alpha + parms.beta,
        ttft=prefill,
        rho=0.0,
        max_rate_per_replica=batch / max_serv_time * 1000.0,
    )
