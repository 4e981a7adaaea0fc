"""The allocation MILP, solved with ``scipy.optimize.milp`` (HiGHS).

Decision units are either one variant, or a *pool*: the variants of one model that share its load.

For a single variant ``v`` with load ``λ`` (req/s), weight ``w`` (its priority's weight) and options
``c`` (one accelerator and batch size each; ``R_c`` replicas serve the whole load, each replica
sustains ``μ_c`` req/s within the SLOs and occupies ``u_c`` devices at price ``k_c``):

* ``y_c ∈ {0,1}``: run the full allocation ``R_c`` on ``c`` (serves ``min(λ, R_c μ_c)``);
* ``q_c ∈ {0,1}``, ``p_c ∈ {0..R_c-1}``, ``p_c ≤ (R_c-1) q_c``: run only ``p_c`` replicas on ``c``
  (serves ``μ_c p_c``; only when the saturation policy allows partial allocations);
* ``Σ_c y_c + q_c ≤ 1``: one accelerator and batch size per variant.

For a pool ``u`` with total load ``Λ``: per member and option ``y ∈ {0,1}``, ``x ∈ {0..X}`` replicas,
``x ≤ X y``, ``x ≥ max(min_replicas, 1) y``, one option per member, and a served rate ``S ≤ Λ``,
``S ≤ Σ μ x`` (the router splits the model's load so that no replica takes more than ``μ``).

Capacity: per device type, ``Σ u_c · replicas ≤ free devices``.

Two solves, lexicographic:

1. **served**: maximise ``Σ w · served`` (priority-weighted served load, req/s);
2. **cost**: minimise ``Σ k_c · replicas`` keeping every unit's served load at least what solve 1 gave
   it (a unit fully served stays fully served). Fixing the per-unit levels, rather than only the total,
   keeps the second solve small and fast; the cost is minimal for that distribution of service.

Both stop at the relative MIP gap given (default 1e-4); a time limit returns the best solution found.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from variant_autoscaler.core.candidates import Candidate

if TYPE_CHECKING:
    from scipy import sparse

# scipy.optimize is imported where a MILP is solved, not with this module: it costs about 45 MB of
# memory, which an operator that never solves one (unlimited mode without shared loads) does not need.

__all__ = ["MemberResult", "MilpMember", "MilpResult", "MilpUnit", "UnitResult", "solve_allocation"]

#: What a replica the stabilisation keeps costs a pool's plan, as a share of its price (MilpMember.kept).
KEPT_SHARE = 0.05
_SERVED_TOLERANCE = 1e-7  # relative slack when a later solve must keep a served level
_MIN_PHASE_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class MilpMember:
    """One variant inside a unit, with its options (one per accelerator, the best batch size)."""

    key: str
    options: tuple[Candidate, ...]
    min_replicas: int = 1
    max_replicas: int | None = None
    # Replicas the scale-down stabilisation keeps running on the accelerator ``kept_on`` whatever the
    # plan says (pool members): they are paid for anyway, so the cost solve charges a pool's member
    # KEPT_SHARE of the price for each of them and the whole price only for replicas beyond them.
    kept: int = 0
    kept_on: str | None = None


@dataclass(frozen=True, slots=True)
class MilpUnit:
    """A single variant (one member) or a pool of variants sharing one load of ``demand`` req/s."""

    key: str
    members: tuple[MilpMember, ...]
    demand: float
    weight: float
    pooled: bool = False


@dataclass(frozen=True, slots=True)
class MemberResult:
    key: str
    option: Candidate | None
    replicas: int
    full: bool


@dataclass(frozen=True, slots=True)
class UnitResult:
    key: str
    served: float  # req/s within the SLOs
    members: tuple[MemberResult, ...]


@dataclass(frozen=True, slots=True)
class MilpResult:
    units: Mapping[str, UnitResult]
    status: str  # "optimal" (within the gap) or "feasible" (a limit stopped a solve)
    gap: float | None
    solves: int


def _cap(replicas: int, maximum: int | None) -> int:
    return replicas if maximum is None else min(replicas, maximum)


class _Model:
    """Sparse model builder: variables with bounds, rows with ranges, two objective vectors."""

    def __init__(self) -> None:
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.integral: list[int] = []
        self.served: list[float] = []  # weighted served coefficient
        self.cost: list[float] = []
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.row_lo: list[float] = []
        self.row_hi: list[float] = []

    def var(self, lb: float, ub: float, *, integral: bool, served: float = 0.0, cost: float = 0.0) -> int:
        self.lb.append(lb)
        self.ub.append(ub)
        self.integral.append(1 if integral else 0)
        self.served.append(served)
        self.cost.append(cost)
        return len(self.lb) - 1

    def row(self, terms: Sequence[tuple[int, float]], lo: float, hi: float) -> int:
        index = len(self.row_lo)
        for col, val in terms:
            self.rows.append(index)
            self.cols.append(col)
            self.vals.append(val)
        self.row_lo.append(lo)
        self.row_hi.append(hi)
        return index

    def matrix(self) -> sparse.csr_array:
        from scipy import sparse  # noqa: PLC0415  scipy: +0.3 s on `--help`

        return sparse.csr_array(
            (np.asarray(self.vals, dtype=float), (np.asarray(self.rows), np.asarray(self.cols))),
            shape=(len(self.row_lo), len(self.lb)),
        )


@dataclass(slots=True)
class _SingleVars:
    unit: MilpUnit
    full: list[tuple[int, Candidate, int, float]]  # (y, option, replicas, served req/s)
    partial: list[tuple[int, int, Candidate]]  # (q, p, option)


@dataclass(slots=True)
class _PoolVars:
    unit: MilpUnit
    served: int
    members: list[list[tuple[int, int, Candidate]]]  # per member: (y, x, option)


def _build(
    units: Sequence[MilpUnit],
    capacity: Mapping[str, int] | None,
    *,
    allow_partial: bool,
    presence_hard: bool,
) -> tuple[_Model, list[_SingleVars | _PoolVars], dict[str, list[tuple[int, float]]]]:
    model = _Model()
    layout: list[_SingleVars | _PoolVars] = []
    device_terms: dict[str, list[tuple[int, float]]] = {}

    def use(device: str, col: int, units_: float) -> None:
        device_terms.setdefault(device, []).append((col, units_))

    for unit in units:
        if not unit.pooled:
            (member,) = unit.members
            single = _SingleVars(unit, [], [])
            choice: list[tuple[int, float]] = []
            floor = max(member.min_replicas, 1)
            for option in member.options:
                replicas = _cap(option.replicas, member.max_replicas)
                served = min(unit.demand, replicas * option.rate_per_replica)
                y = model.var(
                    0,
                    1,
                    integral=True,
                    served=unit.weight * served,
                    cost=replicas * option.cost_per_replica,
                )
                use(option.device, y, replicas * option.units_per_replica)
                choice.append((y, 1.0))
                single.full.append((y, option, replicas, served))
                if allow_partial and replicas - 1 >= floor:
                    q = model.var(0, 1, integral=True)
                    p = model.var(
                        0,
                        replicas - 1,
                        integral=True,
                        served=unit.weight * option.rate_per_replica,
                        cost=option.cost_per_replica,
                    )
                    model.row([(p, 1.0), (q, -(replicas - 1.0))], -math.inf, 0.0)
                    if floor > 1:
                        model.row([(p, 1.0), (q, -float(floor))], 0.0, math.inf)
                    use(option.device, p, option.units_per_replica)
                    choice.append((q, 1.0))
                    single.partial.append((q, p, option))
            model.row(choice, -math.inf, 1.0)
            layout.append(single)
            continue
        served_col = model.var(0.0, unit.demand, integral=False, served=unit.weight)
        pool = _PoolVars(unit, served_col, [])
        coverage: list[tuple[int, float]] = [(served_col, 1.0)]
        for member in unit.members:
            member_vars: list[tuple[int, int, Candidate]] = []
            choice = []
            floor = max(member.min_replicas, 1)
            for option in member.options:
                needed = math.ceil(unit.demand / option.rate_per_replica - 1e-9) if unit.demand > 0 else 0
                top = _cap(max(needed, floor), member.max_replicas)
                y = model.var(0, 1, integral=True)
                kept = (
                    member.kept if member.kept_on is not None and option.accelerator == member.kept_on else 0
                )
                if kept > 0:
                    # Replicas up to ``kept`` run anyway: each costs KEPT_SHARE of its price (of two plans
                    # equal beyond them the smaller wins, so the stabilisation still ends); beyond: all.
                    x = model.var(0, top, integral=True, cost=KEPT_SHARE * option.cost_per_replica)
                    beyond = model.var(0.0, float(top), integral=False, cost=option.cost_per_replica)
                    model.row([(beyond, 1.0), (x, -1.0)], -float(kept), math.inf)
                else:
                    x = model.var(0, top, integral=True, cost=option.cost_per_replica)
                model.row([(x, 1.0), (y, -float(top))], -math.inf, 0.0)
                model.row([(x, 1.0), (y, -float(floor))], 0.0, math.inf)
                use(option.device, x, option.units_per_replica)
                coverage.append((x, -option.rate_per_replica))
                choice.append((y, 1.0))
                member_vars.append((y, x, option))
            if choice:
                hard = presence_hard and member.min_replicas >= 1
                model.row(choice, 1.0 if hard else -math.inf, 1.0)
            pool.members.append(member_vars)
        model.row(coverage, -math.inf, 0.0)
        layout.append(pool)

    if capacity is not None:
        for device in sorted(device_terms):
            model.row(device_terms[device], -math.inf, float(max(capacity.get(device, 0), 0)))
    return model, layout, device_terms


def _solve(
    model: _Model,
    objective: npt.NDArray[np.float64],
    *,
    extra: Sequence[Any],
    ub: npt.NDArray[np.float64],
    gap: float,
    time_limit: float,
) -> tuple[npt.NDArray[np.float64] | None, int, float | None]:
    from scipy.optimize import Bounds, LinearConstraint, milp  # noqa: PLC0415  scipy: +0.3 s on `--help`

    constraints = [LinearConstraint(model.matrix(), np.asarray(model.row_lo), np.asarray(model.row_hi))]
    constraints.extend(extra)
    result = milp(
        objective,
        integrality=np.asarray(model.integral),
        bounds=Bounds(np.asarray(model.lb, dtype=float), ub),
        constraints=constraints,
        options={"mip_rel_gap": gap, "time_limit": max(time_limit, 0.01), "presolve": True},
    )
    x = None if result.x is None else np.asarray(result.x, dtype=float)
    mip_gap = getattr(result, "mip_gap", None)
    return x, int(result.status), (None if mip_gap is None else float(mip_gap))


def _extract(layout: Sequence[_SingleVars | _PoolVars], x: npt.NDArray[np.float64]) -> dict[str, UnitResult]:
    results: dict[str, UnitResult] = {}
    for entry in layout:
        if isinstance(entry, _SingleVars):
            (member,) = entry.unit.members
            chosen = MemberResult(member.key, None, 0, False)
            served = 0.0
            for y, option, replicas, full_served in entry.full:
                if x[y] > 0.5:
                    chosen = MemberResult(member.key, option, replicas, True)
                    served = full_served
            for q, p, option in entry.partial:
                count = round(x[p])
                if x[q] > 0.5 and count >= 1:
                    chosen = MemberResult(member.key, option, count, False)
                    served = count * option.rate_per_replica
            results[entry.unit.key] = UnitResult(entry.unit.key, served, (chosen,))
            continue
        members: list[MemberResult] = []
        capacity_rate = 0.0
        for member, member_vars in zip(entry.unit.members, entry.members, strict=True):
            picked = MemberResult(member.key, None, 0, False)
            for y, xv, option in member_vars:
                count = round(x[xv])
                if x[y] > 0.5 and count >= 1:
                    picked = MemberResult(member.key, option, count, True)
                    capacity_rate += count * option.rate_per_replica
            members.append(picked)
        served = min(entry.unit.demand, capacity_rate)
        results[entry.unit.key] = UnitResult(entry.unit.key, served, tuple(members))
    return results


def _level_rows(
    model: _Model,
    layout: Sequence[_SingleVars | _PoolVars],
    results: Mapping[str, UnitResult],
    ub: npt.NDArray[np.float64],
) -> Any:  # a scipy LinearConstraint, or None
    """Rows keeping each unit's served load; units fully served keep a full allocation."""
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    for entry in layout:
        served = results[entry.unit.key].served
        if served <= 0.0:
            continue
        if isinstance(entry, _SingleVars):
            full = any(m.full for m in results[entry.unit.key].members)
            if full:
                for q, p, _ in entry.partial:
                    ub[q] = 0.0
                    ub[p] = 0.0
            terms = [(y, s) for y, _, _, s in entry.full]
            if not full:
                terms += [(p, o.rate_per_replica) for _, p, o in entry.partial]
        else:
            terms = [(entry.served, 1.0)]
        index = len(lo)
        for col, val in terms:
            rows.append(index)
            cols.append(col)
            vals.append(val)
        lo.append(served * (1.0 - _SERVED_TOLERANCE) - 1e-9)
    if not lo:
        return None
    from scipy import sparse  # noqa: PLC0415  scipy: +0.3 s on `--help`
    from scipy.optimize import LinearConstraint  # noqa: PLC0415  as above

    matrix = sparse.csr_array((vals, (rows, cols)), shape=(len(lo), len(model.lb)))
    return LinearConstraint(matrix, np.asarray(lo), np.full(len(lo), np.inf))


def solve_allocation(
    units: Sequence[MilpUnit],
    capacity: Mapping[str, int] | None,
    *,
    allow_partial: bool,
    presence_hard: bool,
    gap: float,
    time_limit: float,
    clock: Callable[[], float] | None = None,
) -> MilpResult:
    """Solve the served-then-cost MILP over ``units`` (see the module docstring).

    ``capacity`` maps device types to free devices (``None``: unlimited). ``presence_hard`` makes
    every pool member with ``min_replicas >= 1`` run (only safe without capacity limits).
    """
    if not units:
        return MilpResult({}, "optimal", 0.0, 0)
    started = clock() if clock is not None else 0.0

    def remaining() -> float:
        if clock is None:
            return time_limit
        return max(time_limit - (clock() - started), _MIN_PHASE_SECONDS)

    model, layout, _ = _build(units, capacity, allow_partial=allow_partial, presence_hard=presence_hard)
    served = np.asarray(model.served, dtype=float)
    cost = np.asarray(model.cost, dtype=float)
    ub = np.asarray(model.ub, dtype=float)
    statuses: list[int] = []
    gaps: list[float] = []

    x_served, status, mip_gap = _solve(
        model, -served, extra=(), ub=ub.copy(), gap=gap, time_limit=remaining()
    )
    statuses.append(status)
    if mip_gap is not None:
        gaps.append(mip_gap)
    if x_served is None:  # nothing found in time: allocate nothing rather than guess
        x_served = np.zeros(len(model.lb))
        statuses.append(1)
    first = _extract(layout, x_served)

    ub_cost = ub.copy()
    levels = _level_rows(model, layout, first, ub_cost)
    x_cost, status, mip_gap = _solve(
        model,
        cost,
        extra=() if levels is None else (levels,),
        ub=ub_cost,
        gap=gap,
        time_limit=remaining(),
    )
    statuses.append(status)
    final = first
    if x_cost is not None:
        candidate = _extract(layout, x_cost)
        if sum(r.served * u.weight for r, u in zip(candidate.values(), units, strict=True)) >= sum(
            r.served * u.weight for r, u in zip(first.values(), units, strict=True)
        ) * (1.0 - 1e-6):
            final = candidate
            if mip_gap is not None:
                gaps.append(mip_gap)
    status_text = "optimal" if all(s == 0 for s in statuses) else "feasible"
    return MilpResult(final, status_text, max(gaps) if gaps else None, 2)
