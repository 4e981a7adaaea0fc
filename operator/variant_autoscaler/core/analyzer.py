"""Sizing of one variant on one accelerator: replicas, cost, predicted latency (WVA's ``CreateAllocation``).

Given a model's performance parameters on an accelerator, its maximum batch size, the observed load and
the service class's SLOs, :func:`size_allocation` finds the largest request rate one replica can take
while meeting the SLOs (:meth:`QueueAnalyzer.size`), the number of replicas the load needs, their cost,
and the TTFT/ITL each replica will see at its share of the load. :func:`size_allocations` does the same
for many candidates at once (the optimizer's path), with the same results.

Units follow WVA: the load's arrival rate is in requests per *minute*; SLO times in ms, TPS in tokens/s;
the returned ``max_rate_per_replica`` is in requests per *second*.
"""

from __future__ import annotations

import contextlib
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, overload

import numpy as np

from variant_autoscaler.core.queueing import (
    MAX_BATCH_SIZE_LIMIT,
    MAX_QUEUE_SIZE_LIMIT,
    QUEUE_TO_BATCH_RATIO,
    QueueAnalyzer,
    QueueBatch,
    RequestSize,
    ServerInputs,
    ServiceParms,
    TargetPerf,
    cached_analyzer,
)
from variant_autoscaler.errors import InfeasibleError, ModelError

__all__ = [
    "MAX_REPLICAS",
    "SIZING_MEMO_LIMIT",
    "SLO",
    "Load",
    "Sizing",
    "SizingOutcome",
    "SizingRequest",
    "Sizings",
    "clear_sizing_memo",
    "size_allocation",
    "size_allocations",
]

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
    """Service-level objectives: mean TTFT and ITL in ms, TPS in tokens/s; 0 means none.

    ``ttft_percentile`` (ours): 0 bounds the mean TTFT (WVA); in (0, 100) the TTFT target bounds that
    percentile of TTFT instead (``slo-ttft-percentile`` in a service class). ``itl_percentile`` (ours,
    ``slo-tpot-percentile``) does the same for the per-request mean ITL, and ``attainment`` (ours,
    ``slo-attainment``, in (0, 100)) asks that share of requests to meet *both* targets. Classes that set
    none of the three keep WVA's mean meaning; :mod:`variant_autoscaler.core.tail` sizes the others.
    """

    ttft: float = 0.0
    itl: float = 0.0
    tps: float = 0.0
    ttft_percentile: float = 0.0
    itl_percentile: float = 0.0
    attainment: float = 0.0

    @property
    def is_tail(self) -> bool:
        """Whether a target bounds a share of requests rather than a mean."""
        return self.ttft_percentile > 0 or self.itl_percentile > 0 or self.attainment > 0

    def describe(self) -> str:
        """The targets in words, e.g. ``ITL ≤ 24 ms, TTFT p99 ≤ 500 ms``."""
        parts = []
        if self.itl > 0:
            which = f" p{self.itl_percentile:g}" if self.itl_percentile > 0 else ""
            parts.append(f"ITL{which} ≤ {self.itl:g} ms")
        if self.ttft > 0:
            which = f" p{self.ttft_percentile:g}" if self.ttft_percentile > 0 else ""
            parts.append(f"TTFT{which} ≤ {self.ttft:g} ms")
        if self.tps > 0:
            parts.append(f"TPS ≥ {self.tps:g}")
        if self.attainment > 0:
            parts.append(f"{self.attainment:g} % of requests within both")
        return ", ".join(parts)


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


class _Checked(NamedTuple):
    """The validated inputs of one sizing (see :func:`_check`)."""

    unit_cost: float
    acc_count: int
    min_replicas: int
    arrival: float
    in_tokens: float
    out_tokens: float
    targets: TargetPerf


def _check(
    *,
    unit_cost: float,
    acc_count: int,
    parms: ServiceParms,
    max_batch_size: int,
    load: Load,
    slo: SLO,
    min_replicas: int,
    max_queue_size: int | None,
) -> _Checked:
    """The checks :func:`size_allocation` makes before the queueing model; :class:`ModelError` naming the
    first invalid field."""
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
        _number("TTFT SLO", slo.ttft),
        _number("ITL SLO", slo.itl),
        _number("TPS SLO", slo.tps),
        _number("TTFT percentile", slo.ttft_percentile),
    )
    if not isinstance(parms, ServiceParms):
        raise ModelError(f"service parameters must be ServiceParms, got {type(parms).__name__}")
    if arrival == 0.0 or out_tokens == 0.0:
        for name in ("alpha", "beta", "gamma", "delta"):  # the analyzer checks them otherwise
            _number(name, getattr(parms, name))
    return _Checked(unit_cost, acc_count, min_replicas, arrival, in_tokens, out_tokens, targets)


def _total_rate(checked: _Checked) -> float:
    """The load to serve, req/s: the arrival rate, or the TPS SLO in requests when there is one."""
    tps = checked.targets.tps
    return checked.arrival / 60.0 if tps == 0.0 else tps / checked.out_tokens


def _too_many(total_rate: float, rate_star: float, needed: float) -> InfeasibleError:
    return InfeasibleError(
        f"the load of {total_rate:.4g} req/s needs {needed:.3g} replicas of {rate_star:.4g} req/s each"
    )


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
    :func:`size_allocations` sizes many candidates at once, with the same results.

    Raises :class:`~variant_autoscaler.errors.InfeasibleError` (with a readable reason) when no rate
    meets the SLOs, :class:`~variant_autoscaler.errors.ModelError` for invalid inputs.
    """
    checked = _check(
        unit_cost=unit_cost,
        acc_count=acc_count,
        parms=parms,
        max_batch_size=max_batch_size,
        load=load,
        slo=slo,
        min_replicas=min_replicas,
        max_queue_size=max_queue_size,
    )
    if checked.arrival == 0.0 or checked.out_tokens == 0.0:
        return _zero_load(
            accelerator=accelerator,
            unit_cost=checked.unit_cost,
            acc_count=checked.acc_count,
            parms=parms,
            max_batch_size=max_batch_size,
            min_replicas=checked.min_replicas,
        )

    request = RequestSize(checked.in_tokens, checked.out_tokens)
    if memo:
        analyzer = cached_analyzer(max_batch_size, max_queue_size, parms, request)
    else:
        analyzer = QueueAnalyzer(max_batch_size, max_queue_size, parms, request)
    rate_star = analyzer.size(checked.targets).metrics.throughput  # req/s one replica sustains under the SLOs
    total_rate = _total_rate(checked)
    needed = total_rate / rate_star
    if not needed <= MAX_REPLICAS:
        raise _too_many(total_rate, rate_star, needed)
    # At least one replica: the load is not zero (only a denormal arrival rate could round it to 0 here).
    replicas = max(math.ceil(needed), checked.min_replicas, 1)
    per_replica = analyzer.analyze(min(total_rate / replicas, analyzer.rate_range[1]))
    return Sizing(
        accelerator=accelerator,
        replicas=replicas,
        max_batch=max_batch_size,
        cost=checked.unit_cost * checked.acc_count * replicas,
        itl=per_replica.itl,
        ttft=per_replica.avg_wait_time + per_replica.avg_prefill_time,
        rho=per_replica.rho,
        max_rate_per_replica=rate_star,
    )


# ---- many candidates at once ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SizingRequest:
    """The arguments of one :func:`size_allocation` call, for :func:`size_allocations`."""

    accelerator: str
    unit_cost: float
    acc_count: int
    parms: ServiceParms
    max_batch_size: int
    load: Load
    slo: SLO
    min_replicas: int = 1
    max_queue_size: int | None = None

    def sized(self, *, memo: bool = True) -> SizingOutcome:
        """This request by :func:`size_allocation` itself: the sizing, or the error (returned)."""
        try:
            return size_allocation(
                accelerator=self.accelerator,
                unit_cost=self.unit_cost,
                acc_count=self.acc_count,
                parms=self.parms,
                max_batch_size=self.max_batch_size,
                load=self.load,
                slo=self.slo,
                min_replicas=self.min_replicas,
                max_queue_size=self.max_queue_size,
                memo=memo,
            )
        except (InfeasibleError, ModelError) as exc:
            return exc


#: What :func:`size_allocations` gives for one request: the sizing, or the error (returned, not raised).
SizingOutcome = Sizing | InfeasibleError | ModelError

#: Sizings remembered by :func:`size_allocations` (the largest rate per replica, or why there is none).
SIZING_MEMO_LIMIT = 65_536
_SizeKey = tuple[float | int | None, ...]  # (Q, α, β, γ, δ, L_in, L_out, TTFT, ITL, TPS, N)


class _SizingMemo:
    """A bounded LRU of (server, targets) → rate per replica (req/s) or the reason it is infeasible."""

    __slots__ = ("_entries", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: OrderedDict[_SizeKey, float | str] = OrderedDict()

    def get(self, key: _SizeKey) -> float | str | None:
        value = self._entries.get(key)
        if value is not None:
            with contextlib.suppress(KeyError):  # evicted meanwhile by another thread: still a hit
                self._entries.move_to_end(key)
        return value

    def update(self, items: Sequence[tuple[_SizeKey, float | str]]) -> None:
        entries = self._entries
        entries.update(items)  # new keys (those just sized were not here), so at the recent end
        while len(entries) > self.limit:
            entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


_MEMO = _SizingMemo(SIZING_MEMO_LIMIT)


def clear_sizing_memo() -> None:
    """Forget what :func:`size_allocations` and :func:`size_allocation` remember (benchmarks use it)."""
    _MEMO.clear()
    cached_analyzer.cache_clear()


def size_allocations(requests: Sequence[SizingRequest], *, memo: bool = True) -> Sizings:
    """:func:`size_allocation` for every request, vectorised: entry ``i`` is ``requests[i]``'s sizing, or
    the :class:`InfeasibleError` / :class:`ModelError` that call would raise (returned, not raised).

    The results are :func:`size_allocation`'s: replica counts and costs by the same arithmetic, the
    rates from :class:`~variant_autoscaler.core.queueing.QueueBatch` (equal to the scalar path's to
    about 1e-7 where the root is well-conditioned, so a replica count can differ only where the load is
    within that of a whole multiple of the rate per replica). Requests that share a server and targets
    (variants of one model with the same profile, load and SLOs) are sized once. Requests with zero
    load, or with any input that is not plainly valid, are handed to :func:`size_allocation` itself, so
    errors and their messages are identical.

    ``memo`` (default) remembers the rate per replica of up to :data:`SIZING_MEMO_LIMIT` (server,
    targets) pairs, so unchanged candidates skip the search in the next cycle; the replica counts and the
    per-replica analysis are always computed afresh.
    """
    outcomes: list[SizingOutcome | None] = [None] * len(requests)
    servers: dict[_ServerKey, int] = {}  # server key → index in the batch
    numbers: list[float] = []  # the servers as QueueBatch's checked numbers, 8 per server
    sizes: dict[_SizeKey, int] = {}  # (server, targets) key → row of the batch's sizing
    # Per request on the batched path (columns of plain numbers: they cost the garbage collector
    # nothing): its index, server, sizing row, cost of one replica, minimum replicas, load (req/s).
    index: list[int] = []
    server_of: list[int] = []
    row_of: list[int] = []
    replica_cost: list[float] = []
    minimum: list[int] = []
    total: list[float] = []
    servers_view = _Servers(requests)
    # Consecutive requests often differ only in their batch size (one accelerator's candidates): what
    # they share is checked once, while the next request has the same objects.
    last: SizingRequest | None = None
    head: _Head | None = None
    seen: dict[int, tuple[float, ...] | None] = {}  # the requests keep these objects alive
    for i, req in enumerate(requests):
        if not (
            last is not None
            and req.load is last.load
            and req.slo is last.slo
            and req.parms is last.parms
            and req.unit_cost is last.unit_cost
            and req.acc_count is last.acc_count
            and req.min_replicas is last.min_replicas
            and req.max_queue_size is last.max_queue_size
        ):
            head = _head(req, seen)
        last = req
        n = req.max_batch_size
        if head is None or type(n) is not int or not 1 <= n <= MAX_BATCH_SIZE_LIMIT:
            # Zero load, or anything unusual: size_allocation itself decides (and words the error).
            outcomes[i] = req.sized(memo=memo)
            continue
        server_key = (*head.server, n)
        s = servers.get(server_key)
        if s is None:
            s = servers[server_key] = len(servers_view)
            servers_view.add(i, head.request)
            numbers += (n, QUEUE_TO_BATCH_RATIO * n if head.queue is None else head.queue, *head.numbers)
        size_key = (*head.size, n)
        row = sizes.get(size_key)
        if row is None:
            row = sizes[size_key] = len(sizes)
        index.append(i)
        server_of.append(s)
        row_of.append(row)
        replica_cost.append(head.replica_cost)
        minimum.append(head.min_replicas)
        total.append(head.total_rate)
    if not index:
        return Sizings(requests, outcomes)

    # Checked here as QueueAnalyzer would (see _head), so the batch skips its own checks.
    batch = QueueBatch(servers_view, checked=np.array(numbers).reshape(-1, 8))
    keys = list(sizes)
    size_server = [0] * len(keys)
    for s, row in zip(server_of, row_of, strict=True):
        size_server[row] = s
    rate_star, reasons = _rates(batch, keys, size_server, memo=memo)

    # Replicas as size_allocation counts them (the same float64 operations), then one analysis per
    # request at its share of the load.
    star = np.array(rate_star)[row_of]
    demand = np.array(total)
    with np.errstate(all="ignore"):
        needed = demand / star
    sized = needed <= MAX_REPLICAS  # False for the rows without a rate
    replicas = np.maximum(np.maximum(np.ceil(np.where(sized, needed, 0.0)), np.array(minimum)), 1.0)
    rates = np.minimum(demand / replicas, batch.rate_range[1][server_of])
    for k in np.flatnonzero(~sized).tolist():
        i, s, row = index[k], server_of[k], row_of[k]
        error = batch.errors[s]
        if error is not None:
            outcomes[i] = ModelError(error)
        elif row in reasons:
            outcomes[i] = InfeasibleError(reasons[row])
        else:
            outcomes[i] = _too_many(total[k], rate_star[row], float(needed[k]))
    live = np.flatnonzero(sized)
    per_replica = batch.analyze(np.array(server_of)[live], rates[live])
    columns = (
        replicas[live].astype(np.int64).tolist(),
        (np.array(replica_cost)[live] * replicas[live]).tolist(),  # unit cost × count × replicas
        per_replica.itl.tolist(),
        (per_replica.avg_wait_time + per_replica.avg_prefill_time).tolist(),
        per_replica.rho.tolist(),
        star[live].tolist(),
    )
    slot: dict[int, int] = {}
    failures = per_replica.failures
    for j, k in enumerate(live.tolist()):
        if failures[j] is None:
            slot[index[k]] = j
        else:
            outcomes[index[k]] = failures[j]
    return Sizings(requests, outcomes, slot, columns)


#: A server as the batch's key: (Q, α, β, γ, δ, L_in, L_out, N), the numbers as floats.
_ServerKey = tuple[float | int | None, ...]


class _Head(NamedTuple):
    """What a request shares with the next ones when they differ only in batch size, checked."""

    queue: int | None
    numbers: tuple[float, ...]  # (α, β, γ, δ, L_in, L_out)
    server: tuple[float | int | None, ...]  # the server's key without N: (Q, α, β, γ, δ, L_in, L_out)
    size: tuple[float | int | None, ...]  # and the targets: (..., TTFT, ITL, TPS)
    request: RequestSize
    replica_cost: float
    min_replicas: int
    total_rate: float  # req/s


def _head(req: SizingRequest, seen: dict[int, tuple[float, ...] | None]) -> _Head | None:
    """The checked shared part of a request with load whose inputs are valid at a glance (exact types,
    in range); None for zero load or anything unusual (then size_allocation decides). ``seen``
    remembers the checks of loads, SLOs and parameters by object (for one call)."""
    load = _plain_fields(req.load, Load, _LOAD, seen)
    slo = _plain_fields(req.slo, SLO, _SLO, seen)
    if slo is not None and slo[3] != 0.0:
        return None  # a TTFT percentile target: the scalar analyzer sizes it (the batch knows means only)
    parms = _plain_fields(req.parms, ServiceParms, _PARMS, seen)
    q, acc_count, min_replicas = req.max_queue_size, req.acc_count, req.min_replicas
    if (
        load is None
        or slo is None
        or parms is None
        or not load[0] > 0.0  # zero load
        or not load[2] >= 1.0  # no output tokens (zero load), or too few for the model
        or (q is not None and (type(q) is not int or not 0 <= q <= MAX_QUEUE_SIZE_LIMIT))
        or type(acc_count) is not int
        or type(min_replicas) is not int
        or min_replicas < 0
        or not _plain(req.unit_cost)
    ):
        return None
    numbers = (*parms, load[1], load[2])
    server = (q, *numbers)
    return _Head(
        queue=q,
        numbers=numbers,
        server=server,
        size=(*server, *slo[:3]),  # (no percentile here: see above)
        request=RequestSize(load[1], load[2]),
        replica_cost=float(req.unit_cost) * max(acc_count, 1),
        min_replicas=min_replicas,
        total_rate=load[0] / 60.0 if slo[2] == 0.0 else slo[2] / load[2],
    )


_LOAD = ("arrival_rate", "avg_input_tokens", "avg_output_tokens")
_SLO = ("ttft", "itl", "tps", "ttft_percentile")
_PARMS = ("alpha", "beta", "gamma", "delta")


def _plain(value: object) -> bool:
    """A finite number >= 0 of exactly type float or int (no bool, no subclass): valid at a glance."""
    return (type(value) is float or type(value) is int) and 0.0 <= value < math.inf


def _plain_fields(
    obj: object, kind: type, names: tuple[str, ...], seen: dict[int, tuple[float, ...] | None]
) -> tuple[float, ...] | None:
    """The fields ``names`` of ``obj`` as floats, if ``obj`` is exactly a ``kind`` whose fields are all
    plain numbers; else None. ``seen`` remembers the answers by object (for one call)."""
    key = id(obj)
    if key in seen:
        return seen[key]
    values: tuple[float, ...] | None = None
    if type(obj) is kind:
        fields = [getattr(obj, name) for name in names]
        if all(map(_plain, fields)):
            values = tuple(map(float, fields))
    seen[key] = values
    return values


def _rates(
    batch: QueueBatch, keys: list[_SizeKey], servers: list[int], *, memo: bool
) -> tuple[list[float], dict[int, str]]:
    """Per (server, targets) key, whose server is ``servers[row]`` in ``batch``: the rate one replica
    sustains (req/s, WVA's rateStar), or the reason there is none; from the memo where it has them, else
    sized by ``batch`` in one call. Keys of invalid servers get neither (see ``batch.errors``)."""
    rate_star = [math.nan] * len(keys)
    reasons: dict[int, str] = {}
    missing: list[int] = []
    if not memo or not len(_MEMO):
        missing = list(range(len(keys)))
    for row, key in enumerate(keys if memo and len(_MEMO) else ()):
        known = _MEMO.get(key)
        if known is None:
            missing.append(row)
        elif isinstance(known, str):
            reasons[row] = known
        else:
            rate_star[row] = known
    if not missing:
        return rate_star, reasons
    targets = np.array([keys[row][-4:-1] for row in missing], dtype=np.float64).reshape(len(missing), 3)
    sized = batch.size([servers[row] for row in missing], targets[:, 0], targets[:, 1], targets[:, 2])
    throughput = sized.metrics.throughput.tolist()
    learned: list[tuple[_SizeKey, float | str]] = []
    for k, row in enumerate(missing):
        failure = sized.failures[k]
        if isinstance(failure, InfeasibleError):
            reasons[row] = str(failure)
            learned.append((keys[row], reasons[row]))
        elif failure is None:
            rate_star[row] = throughput[k]
            learned.append((keys[row], throughput[k]))
    if memo:
        _MEMO.update(learned)
    return rate_star, reasons


#: A batched sizing's numbers: replicas, cost, ITL, TTFT, rho, rate per replica (see :class:`Sizing`).
_Numbers = tuple[int, float, float, float, float, float]
_Columns = tuple[list[int], list[float], list[float], list[float], list[float], list[float]]


class Sizings(Sequence[SizingOutcome]):
    """What :func:`size_allocations` returns: entry ``i`` is request ``i``'s :class:`Sizing`, or the
    error explaining why there is none (returned, not raised).

    The batch keeps its numbers in columns and builds each Sizing when it is read; :meth:`numbers`
    gives them without building it (what the candidate builder reads, for tens of thousands).
    """

    __slots__ = ("_columns", "_outcomes", "_requests", "_slot")

    def __init__(
        self,
        requests: Sequence[SizingRequest],
        outcomes: list[SizingOutcome | None],
        slot: dict[int, int] | None = None,
        columns: _Columns | None = None,
    ) -> None:
        """``outcomes[i]`` is request ``i``'s outcome, or None when its numbers are in ``columns`` at
        ``slot[i]``."""
        self._requests = requests
        self._outcomes = outcomes
        self._slot = slot or {}
        self._columns: _Columns = columns or ([], [], [], [], [], [])
        missing = [i for i, o in enumerate(outcomes) if o is None and i not in self._slot]
        if len(outcomes) != len(requests) or missing:  # pragma: no cover - an internal error
            raise AssertionError(f"requests left without an outcome: {missing[:5]}")

    def __len__(self) -> int:
        return len(self._outcomes)

    @overload
    def __getitem__(self, i: int) -> SizingOutcome: ...
    @overload
    def __getitem__(self, i: slice) -> list[SizingOutcome]: ...
    def __getitem__(self, i: int | slice) -> SizingOutcome | list[SizingOutcome]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        outcome = self._outcomes[i]
        if outcome is not None:
            return outcome
        i %= len(self)
        replicas, cost, itl, ttft, rho, rate = self._row(i)
        request = self._requests[i]
        return Sizing(request.accelerator, replicas, request.max_batch_size, cost, itl, ttft, rho, rate)

    def _row(self, i: int) -> _Numbers:
        k = self._slot[i]
        replicas, cost, itl, ttft, rho, rate = self._columns
        return replicas[k], cost[k], itl[k], ttft[k], rho[k], rate[k]

    def numbers(self, i: int) -> _Numbers | InfeasibleError | ModelError:
        """Entry ``i`` as ``(replicas, cost, itl, ttft, rho, max_rate_per_replica)``, or its error."""
        outcome = self._outcomes[i]
        if outcome is None:
            return self._row(i)
        if isinstance(outcome, Sizing):
            return (
                outcome.replicas,
                outcome.cost,
                outcome.itl,
                outcome.ttft,
                outcome.rho,
                outcome.max_rate_per_replica,
            )
        return outcome

    def __repr__(self) -> str:
        return f"Sizings({list(self)!r})"


class _Servers(Sequence[ServerInputs]):
    """The batch's servers, each built from the request that first named it when it is read (only
    for the few servers QueueBatch hands to QueueAnalyzer), so that the batch keeps no tuple per server."""

    __slots__ = ("_first", "_requests", "_sizes")

    def __init__(self, requests: Sequence[SizingRequest]) -> None:
        self._requests = requests
        self._first: list[int] = []
        self._sizes: list[RequestSize] = []

    def add(self, request: int, size: RequestSize) -> None:
        self._first.append(request)
        self._sizes.append(size)

    def __len__(self) -> int:
        return len(self._first)

    @overload
    def __getitem__(self, i: int) -> ServerInputs: ...
    @overload
    def __getitem__(self, i: slice) -> list[ServerInputs]: ...
    def __getitem__(self, i: int | slice) -> ServerInputs | list[ServerInputs]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        req = self._requests[self._first[i]]
        return req.max_batch_size, req.max_queue_size, req.parms, self._sizes[i]


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
