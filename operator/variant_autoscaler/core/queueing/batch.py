"""Many servers at once with numpy: :class:`QueueBatch` and :func:`size_batch` (QueueAnalyzer's twin,
compared with it by the tests)."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from variant_autoscaler.core.queueing.scalar import QueueAnalyzer, _unreachable, cached_analyzer
from variant_autoscaler.core.queueing.server import (
    _FLAT_TOLERANCE,
    _LOG_SAFE,
    _MAX_ROOT_STEPS,
    EPSILON,
    MAX_BATCH_SIZE_LIMIT,
    MAX_QUEUE_SIZE_LIMIT,
    QUEUE_TO_BATCH_RATIO,
    STABILITY_SAFETY_FRACTION,
    TOLERANCE,
    AnalysisMetrics,
    RequestSize,
    ServiceParms,
    SizeResult,
    TargetPerf,
    _check_number,
    _FloatArray,
    _rate_error,
    _server,
    _slope_c1,
)
from variant_autoscaler.errors import InfeasibleError, ModelError

# ---- many servers at once -------------------------------------------------------------------------

#: QueueAnalyzer's arguments: ``(max_batch_size, max_queue_size, parms, request)``.
ServerInputs = tuple[int, int | None, ServiceParms, RequestSize]

_IntArray = npt.NDArray[np.intp]
_BoolArray = npt.NDArray[np.bool_]
Failure = ModelError | InfeasibleError

#: Servers with a larger batch are handed to QueueAnalyzer one by one (keeps the batch's arrays small).
_BATCH_MAX_N = 1024
#: The largest weight the batch's plain products may reach (e^_LOG_SAFE; see _LOG_SAFE). Servers whose
#: weights at the top of the rate range exceed it (very large batches only) go to QueueAnalyzer.
_LINEAR_SAFE = math.exp(_LOG_SAFE)
#: Rates per server on the batch's sizing grid (see _grid_points), and the gap below its top point.
_GRID_POINTS = 16
_GRID_TOP_GAP = 1e-4
#: The grid is solved for at most this many servers at a time (bounds the temporaries to a few MB).
_GRID_CHUNK = 4096
#: At the bottom of the rate range every λ/μ_b is at most ε = 1e-3, so the weight of state i is at most
#: 1e-3^i: states beyond the first 8 change no sum there by 1e-24 of its value.
_LOW_RATE_STATES = 8
#: Numbers below this are flushed to zero in the grid's powers (subnormal numbers are slow to multiply).
_TINY = 1e-280
#: The batch refines each root to this relative distance from its target: 100 times tighter than
#: QueueAnalyzer, so the batch's answer is the better approximation of the two (at one extra step or so).
_BATCH_ROOT_TOLERANCE = 1e-9


class _ServerArrays(NamedTuple):
    """The fields of :class:`_Server` for many servers, one array each (indexed by server)."""

    n: _FloatArray
    q: _FloatArray
    alpha: _FloatArray
    beta: _FloatArray
    gamma: _FloatArray
    delta: _FloatArray
    l_in: _FloatArray
    l_out: _FloatArray
    a: _FloatArray
    s: _FloatArray
    slope: _FloatArray
    c0: _FloatArray
    c1: _FloatArray
    inv_mu_1: _FloatArray
    inv_mu_n: _FloatArray
    lam_lo: _FloatArray
    lam_hi: _FloatArray


class _Fields(NamedTuple):
    """A solved point for many rows (like :data:`_Point`): λ and X in req/ms, times in ms."""

    xput: _FloatArray
    resp: _FloatArray
    wait: _FloatArray
    n_serv: _FloatArray
    prefill: _FloatArray
    ttft: _FloatArray
    itl: _FloatArray


#: Raw inputs (N, Q, α, β, γ, δ, L_in, L_out) standing in for an invalid server, so that its (unused)
#: array entries stay finite.
_PLACEHOLDER = (1, 0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0)
_Raw = tuple[int, int, float, float, float, float, float, float]


def _plain(value: object) -> bool:
    """A finite number >= 0 of exactly type float or int (no bool, no subclass): valid at a glance."""
    return (type(value) is float or type(value) is int) and 0.0 <= value < math.inf


def _plain_parms(parms: object) -> tuple[float, float, float, float] | None:
    if type(parms) is not ServiceParms:
        return None
    values = (parms.alpha, parms.beta, parms.gamma, parms.delta)
    if not all(_plain(v) for v in values):
        return None
    return float(values[0]), float(values[1]), float(values[2]), float(values[3])


def _plain_server(
    inputs: object, parms_seen: dict[int, tuple[float, float, float, float] | None]
) -> _Raw | None:
    """The raw numbers of a server whose inputs are valid at a glance (exact types, in range), or None:
    then :func:`_server` decides, and words the error. ``parms_seen`` caches parameter checks by object."""
    if type(inputs) is not tuple or len(inputs) != 4:
        return None
    n, q, parms, request = inputs
    if type(n) is not int or not 1 <= n <= MAX_BATCH_SIZE_LIMIT:
        return None
    if q is None:
        q = QUEUE_TO_BATCH_RATIO * n
    elif type(q) is not int or not 0 <= q <= MAX_QUEUE_SIZE_LIMIT:
        return None
    key = id(parms)
    if key in parms_seen:
        p = parms_seen[key]
    else:
        p = parms_seen[key] = _plain_parms(parms)
    if p is None or type(request) is not RequestSize:
        return None
    l_in, l_out = request.avg_input_tokens, request.avg_output_tokens
    if not (_plain(l_in) and _plain(l_out) and l_out >= 1.0):
        return None
    return n, q, p[0], p[1], p[2], p[3], float(l_in), float(l_out)


@dataclass(frozen=True, slots=True)
class BatchMetrics:
    """:class:`AnalysisMetrics` of many rows, one array per field (NaN where the row failed).

    ``failures[i]`` is None, or the error :meth:`QueueAnalyzer.analyze` would raise for row ``i``.
    """

    throughput: _FloatArray
    avg_resp_time: _FloatArray
    avg_wait_time: _FloatArray
    avg_num_in_serv: _FloatArray
    avg_prefill_time: _FloatArray
    ttft: _FloatArray
    itl: _FloatArray
    rho: _FloatArray
    max_rate: _FloatArray
    failures: tuple[Failure | None, ...]

    def __len__(self) -> int:
        return len(self.failures)

    def result(self, i: int) -> AnalysisMetrics | Failure:
        """Row ``i`` as QueueAnalyzer would give it: the metrics, or the error (not raised)."""
        failure = self.failures[i]
        if failure is not None:
            return failure
        return AnalysisMetrics(
            throughput=float(self.throughput[i]),
            avg_resp_time=float(self.avg_resp_time[i]),
            avg_wait_time=float(self.avg_wait_time[i]),
            avg_num_in_serv=float(self.avg_num_in_serv[i]),
            avg_prefill_time=float(self.avg_prefill_time[i]),
            ttft=float(self.ttft[i]),
            itl=float(self.itl[i]),
            rho=float(self.rho[i]),
            max_rate=float(self.max_rate[i]),
        )


@dataclass(frozen=True, slots=True)
class BatchSize:
    """:class:`SizeResult` of many rows, one array per field (NaN where the row failed).

    ``metrics`` are those at ``max_rate``; ``failures[i]`` is None, or the error
    :meth:`QueueAnalyzer.size` would raise for row ``i`` (:class:`InfeasibleError` for an unreachable
    target, :class:`ModelError` for an invalid server).
    """

    rate_target_ttft: _FloatArray
    rate_target_itl: _FloatArray
    rate_target_tps: _FloatArray
    max_rate: _FloatArray
    tps: _FloatArray
    metrics: BatchMetrics

    @property
    def failures(self) -> tuple[Failure | None, ...]:
        return self.metrics.failures

    def __len__(self) -> int:
        return len(self.metrics)

    def result(self, i: int) -> SizeResult | Failure:
        """Row ``i`` as QueueAnalyzer would give it: the result, or the error (not raised)."""
        metrics = self.metrics.result(i)
        if not isinstance(metrics, AnalysisMetrics):
            return metrics
        return SizeResult(
            rate_target_ttft=float(self.rate_target_ttft[i]),
            rate_target_itl=float(self.rate_target_itl[i]),
            rate_target_tps=float(self.rate_target_tps[i]),
            max_rate=float(self.max_rate[i]),
            metrics=metrics,
            ttft=metrics.ttft,
            itl=metrics.itl,
            tps=float(self.tps[i]),
        )


class QueueBatch:
    """Many servers analysed together: the vectorised twin of :class:`QueueAnalyzer`.

    ``servers[i]`` holds QueueAnalyzer's arguments ``(max_batch_size, max_queue_size, parms, request)``.
    An invalid server does not stop the others: ``errors[i]`` says why (the :class:`ModelError`
    QueueAnalyzer would raise) and every row asking about it fails with that error.

    :meth:`size` and :meth:`analyze` take *rows*: a server index per row, with targets or a rate per row.
    The model and WVA's sizing rules are QueueAnalyzer's; only the arithmetic is arranged for numpy:

    * servers are grouped by their batch size rounded up to a power of two. For each group the weights of
      the chain's first N + 1 states at the top of the rate range, ``W_i = Π_{b<=i} λmax/μ_b``, are
      computed once. At a rate λ the weights are ``W_i · t^i`` with ``t = λ/λmax``, so Horner's rule (a
      loop over the states, numpy over the rows) gives ``Σ w_i`` and ``Σ i·w_i`` for any rates at once,
      and one matrix product gives them on a grid of rates shared by the group. The queue tail uses
      QueueAnalyzer's closed forms;
    * sizing solves every server at the bottom of its rate range and on a grid of rates up to the top,
      applies WVA's end-point rules to all rows, brackets each root (TTFT and ITL rows together) between
      two grid points and refines all brackets with QueueAnalyzer's Chandrupatla steps, one pass per step
      over the rows still searching, to a relative 1e-9 of the target;
    * servers whose weights could overflow (batches of several hundred with a long prefill) or with a
      batch above 1024, and any row whose numbers come out non-finite, are handed to QueueAnalyzer, so
      the batch never answers differently in kind from the scalar path.

    The results equal QueueAnalyzer's to rounding, except the roots, which both find to within their
    tolerance of the target (here 1e-9, QueueAnalyzer 1e-7): where a root is well-conditioned the two
    rates agree to about 1e-7 relative.
    """

    __slots__ = (
        "_batched",
        "_coef",
        "_col",
        "_n_int",
        "_qn",
        "_servers",
        "_srv",
        "_valid",
        "_width",
        "errors",
    )

    def __init__(self, servers: Sequence[ServerInputs], *, checked: npt.ArrayLike | None = None) -> None:
        """``servers`` is kept as given (not copied). ``checked``, from a caller that has already checked
        the servers as QueueAnalyzer would (exact int and float types, in range), skips the checks: an
        array of shape (len(servers), 8), per server ``(N, Q, α, β, γ, δ, L_in, L_out)`` with Q given."""
        count = len(servers)
        self._servers = servers
        self.errors: list[str | None] = [None] * count
        if checked is None:
            raws: list[_Raw] = []
            parms_seen: dict[int, tuple[float, float, float, float] | None] = {}
            for i, inputs in enumerate(self._servers):
                raw = _plain_server(inputs, parms_seen)
                if raw is None:  # anything unusual: QueueAnalyzer's own checks decide
                    raw = self._check_server(i)
                raws.append(raw)
            table = np.fromiter(itertools.chain.from_iterable(raws), dtype=np.float64, count=count * 8)
        else:
            table = np.asarray(checked, dtype=np.float64)
            if table.shape != (count, 8):
                raise ModelError(f"{count} servers but numbers of shape {table.shape}")
        n, q, alpha, beta, gamma, delta, l_in, l_out = np.ascontiguousarray(table.reshape(count, 8).T)
        # _server's arithmetic, element by element (so the same numbers, to the last bit).
        with np.errstate(all="ignore"):
            has_input = l_in > 0.0
            steps = np.where(~has_input & (l_out == 1.0), 1.0, l_out - 1.0)
            a = np.where(has_input, gamma, 0.0) + steps * alpha
            s = np.where(has_input, delta * l_in, 0.0) + steps * beta
            for i in np.flatnonzero(~((a + s > 0.0) & (a + s * n < math.inf))).tolist():
                if self.errors[i] is None:
                    self._check_server(i)  # records the error
                    a[i], s[i] = 1.0, 0.0
            inv_mu_1 = a + s
            inv_mu_n = a / n + s
            self._srv = _ServerArrays(
                n=n,
                q=q,
                alpha=alpha,
                beta=beta,
                gamma=gamma,
                delta=delta,
                l_in=l_in,
                l_out=l_out,
                a=a,
                s=s,
                slope=delta * l_in,
                c0=gamma + alpha * (l_out - 1.0),
                c1=_slope_c1(gamma + alpha * (l_out - 1.0), delta * l_in + beta * (l_out - 1.0), n),
                inv_mu_1=inv_mu_1,
                inv_mu_n=inv_mu_n,
                lam_lo=EPSILON / inv_mu_1,
                lam_hi=(1.0 - EPSILON) / inv_mu_n,
            )
        self._n_int: _IntArray = self._srv.n.astype(np.intp)
        valid = np.array([e is None for e in self.errors], dtype=np.bool_).reshape(count)
        self._valid: _BoolArray = valid
        # Each server's group: its batch size rounded up to a power of two (0: QueueAnalyzer's).
        width = np.where(
            valid & (self._n_int <= _BATCH_MAX_N),
            np.left_shift(1, np.ceil(np.log2(np.maximum(self._n_int, 1))).astype(np.intp)),
            0,
        )
        self._col: _IntArray = np.zeros(count, dtype=np.intp)
        self._qn: _FloatArray = np.zeros(count)
        self._coef: dict[int, _FloatArray] = {}
        for w in np.unique(width[width > 0]).tolist():
            members = np.flatnonzero(width == w)
            coef = self._weights(members, w)
            safe = np.isfinite(coef).all(axis=0) & (coef.max(axis=0) <= _LINEAR_SAFE)
            if not safe.all():
                width[members[~safe]] = 0
                members, coef = members[safe], np.ascontiguousarray(coef[:, safe])
            if members.size:
                self._coef[w] = coef
                self._col[members] = np.arange(members.size)
                self._qn[members] = coef[self._n_int[members], np.arange(members.size)]
        self._width: _IntArray = width
        self._batched: _BoolArray = width > 0

    def _check_server(self, i: int) -> _Raw:
        """Server ``i`` through QueueAnalyzer's checks: its raw numbers, or the placeholder with the
        error recorded in ``errors``."""
        try:
            sv = _server(*self._servers[i])
        except ModelError as exc:
            self.errors[i] = str(exc)
        except TypeError as exc:  # not four inputs
            self.errors[i] = f"a server is (max_batch_size, max_queue_size, parms, request): {exc}"
        else:
            return sv.n, sv.q, sv.alpha, sv.beta, sv.gamma, sv.delta, sv.l_in, sv.l_out
        return _PLACEHOLDER

    def __len__(self) -> int:
        return len(self._servers)

    @property
    def rate_range(self) -> tuple[_FloatArray, _FloatArray]:
        """Per server, the ends of the rate range in req/s (as :attr:`QueueAnalyzer.rate_range`)."""
        return self._srv.lam_lo * 1000.0, self._srv.lam_hi * 1000.0

    def _weights(self, members: _IntArray, width: int) -> _FloatArray:
        """(width + 1, m): the weights W_0..W_width of each member at λmax (0 beyond its batch)."""
        srv = self._srv
        b = np.arange(1.0, width + 1.0)[:, None]
        coef = np.empty((width + 1, members.size))
        coef[0] = 1.0
        factors = coef[1:]  # built in place: λmax · (a/b + s), 0 beyond each member's batch
        np.divide(srv.a[members], b, out=factors)
        factors += srv.s[members]
        factors *= srv.lam_hi[members]
        factors[b > srv.n[members]] = 0.0
        np.cumprod(factors, axis=0, out=factors)
        return coef

    def _scalar(self, server: int) -> QueueAnalyzer:
        return cached_analyzer(*self._servers[server])

    def _failures(self, srv: _IntArray) -> list[Failure | None]:
        failures: list[Failure | None] = [None] * srv.size
        errors = self.errors
        for i in np.flatnonzero(~self._valid[srv]).tolist():
            failures[i] = ModelError(errors[int(srv[i])] or "invalid server")
        return failures

    def _rows(self, servers: npt.ArrayLike) -> _IntArray:
        srv = np.asarray(servers, dtype=np.intp).reshape(-1)
        if srv.size and (srv.min() < 0 or srv.max() >= len(self._servers)):
            raise ModelError(f"server index out of range 0..{len(self._servers) - 1}")
        return srv

    # ---- the chain at many (server, λ) rows ---------------------------------------------------

    def _block(self, w: int, servers: _IntArray, sel: _IntArray, states: int | None) -> _FloatArray:
        """The weights of group ``w`` for the rows ``sel`` of ``servers``: (states, len(sel))."""
        coef = self._coef[w]
        cols = self._col[servers[sel]]
        top = int(self._n_int[servers[sel]].max()) + 1
        if states is not None:
            top = min(top, states)
        if sel.size == coef.shape[1] and np.array_equal(cols, np.arange(sel.size)):
            return coef[:top]  # every member, in order: no copy
        return coef[:top, cols]

    def _evaluate(self, srv: _IntArray, lam: _FloatArray, states: int | None = None) -> _Fields:
        """Solve the chain at λ (req/ms; shape (k,)) for the batched servers ``srv`` (shape (k,)).

        ``states`` limits the head sums to the first states (for rates where the others are negligible).
        """
        t = lam / self._srv.lam_hi[srv]
        z = np.empty(t.shape)
        a = np.empty(t.shape)
        width = self._width[srv]
        for w in self._coef:
            sel = np.flatnonzero(width == w)
            if sel.size:
                z[sel], a[sel] = _horner(self._block(w, srv, sel, states), t[sel])
        return self._finish(srv, lam, t, (z, a))

    def _grid(self, srv: _IntArray, low: _Fields) -> tuple[_FloatArray, _FloatArray, _FloatArray]:
        """Rates (req/ms), TTFT and ITL of each server at the bottom of its range (row 0, given in
        ``low``) and on its grid (rows 1..R, :func:`_grid_points`), shape (R + 1, k); grid points below a
        server's range stand in for its bottom. The head sums of a whole group come from one matrix
        product."""
        shape = (_GRID_POINTS + 1, srv.size)
        xs, ttft, itl = np.empty(shape), np.empty(shape), np.empty(shape)
        xs[0], ttft[0], itl[0] = self._srv.lam_lo[srv], low.ttft, low.itl
        width = self._width[srv]
        for w in self._coef:
            group = np.flatnonzero(width == w)
            if group.size:
                for sel in np.array_split(group, -(-group.size // _GRID_CHUNK)):  # bounded temporaries
                    self._grid_part(srv, sel, w, low, (xs, ttft, itl))
        return xs, ttft, itl

    def _grid_part(
        self,
        srv: _IntArray,
        sel: _IntArray,
        w: int,
        low: _Fields,
        out: tuple[_FloatArray, _FloatArray, _FloatArray],
    ) -> None:
        """:meth:`_grid` for the rows ``sel`` of ``srv``, all in group ``w``, written into ``out``."""
        xs, ttft, itl = out
        servers = srv[sel]
        lam_lo, lam_hi = self._srv.lam_lo[servers], self._srv.lam_hi[servers]
        g = self._block(w, srv, sel, None)
        points = _grid_points(w)
        states = np.arange(g.shape[0], dtype=np.float64)[:, None]
        with np.errstate(under="ignore"):
            powers = points**states  # (states, R)
        powers[powers < _TINY] = 0.0  # no subnormal numbers in the product (they are slow)
        sums = (g.T @ np.hstack((powers, powers * states))).T  # (2R, len(sel))
        w_n = powers[self._n_int[servers]].T * self._qn[servers]
        t = np.broadcast_to(points[:, None], (_GRID_POINTS, sel.size))
        lam = t * lam_hi
        f = self._finish(servers, lam, t, (sums[:_GRID_POINTS], sums[_GRID_POINTS:]), w_n)
        below = lam <= lam_lo
        xs[1:, sel] = np.where(below, lam_lo, lam)
        ttft[1:, sel] = np.where(below, low.ttft[sel], f.ttft)
        itl[1:, sel] = np.where(below, low.itl[sel], f.itl)

    def _finish(
        self,
        srv: _IntArray,
        lam: _FloatArray,
        t: _FloatArray,
        sums: tuple[_FloatArray, _FloatArray],
        w_n: _FloatArray | None = None,
    ) -> _Fields:
        """QueueAnalyzer._solve from the head sums ``Σ w_i`` and ``Σ i·w_i``: the tail's closed forms and
        the outputs, for λ of shape (..., k). ``w_n``, the weight of state N, when already known."""
        c = self._srv
        n = c.n[srv]
        q = c.q[srv]
        z_head, a_head = sums
        with np.errstate(all="ignore"):
            # Powers as exp(x·log y) (numpy's exp and log are much faster than its power; the
            # difference, a few units of 1e-16 relative where the value matters, is below our tolerances).
            if w_n is None:
                w_n = np.log(t)
                w_n *= n
                np.exp(w_n, out=w_n)
                w_n *= self._qn[srv]
            r = lam * c.inv_mu_n[srv]
            r_q = np.log(r)
            r_q *= q
            np.exp(r_q, out=r_q)
            # QueueAnalyzer._solve's closed forms, in the same order of operations.
            omr = 1.0 - r
            w_r = w_n * r
            w_g1 = w_r * (1.0 - r_q) / omr
            w_g2 = w_r * (1.0 - r_q - q * r_q * omr) / (omr * omr)
            z = z_head + w_g1
            xput = lam * (1.0 - w_n * r_q / z)
            n_serv = (a_head + n * w_g1) / z
            serv = n_serv / xput
            wait = w_g2 / z / xput
            c1 = c.c1[srv]
            n_eff = (serv - c.c0[srv]) / c1
            np.copyto(n_eff, n_serv, where=~(c1 > 0.0))  # WVA divides by zero here; see _solve
            np.maximum(n_eff, 0.0, out=n_eff)
            np.minimum(n_eff, n, out=n_eff)
            prefill = c.slope[srv] * n_eff
            prefill += c.gamma[srv]
            np.copyto(prefill, 0.0, where=~(c.l_in[srv] > 0.0))
            itl = c.beta[srv] * n_eff
            itl += c.alpha[srv]
            serv += wait
        return _Fields(xput, serv, wait, n_serv, prefill, wait + prefill, itl)

    def _metrics(self, srv: _IntArray, f: _Fields, failures: list[Failure | None]) -> BatchMetrics:
        with np.errstate(all="ignore"):
            rho = np.minimum(np.maximum(f.n_serv / self._srv.n[srv], 0.0), 1.0)
        return BatchMetrics(
            throughput=f.xput * 1000.0,
            avg_resp_time=f.resp,
            avg_wait_time=f.wait,
            avg_num_in_serv=f.n_serv,
            avg_prefill_time=f.prefill,
            ttft=f.ttft,
            itl=f.itl,
            rho=rho,
            max_rate=self._srv.lam_hi[srv] * 1000.0,
            failures=tuple(failures),
        )

    # ---- analysis ------------------------------------------------------------------------------

    def analyze(self, servers: npt.ArrayLike, rates: npt.ArrayLike) -> BatchMetrics:
        """Row ``i``: ``analyze(rates[i])`` (req/s) of server ``servers[i]``."""
        srv = self._rows(servers)
        rate = np.asarray(rates, dtype=np.float64).reshape(-1)
        if rate.shape != srv.shape:
            raise ModelError(f"{srv.size} servers but {rate.size} rates")
        failures = self._failures(srv)
        rate_hi = self._srv.lam_hi[srv] * 1000.0
        in_range = np.isfinite(rate) & (rate > 0.0) & (rate <= rate_hi)
        ok = self._valid[srv] & in_range
        for i in np.flatnonzero(self._valid[srv] & ~in_range).tolist():
            failures[i] = ModelError(_rate_error(float(rate[i]), float(rate_hi[i])) or "invalid rate")
        fields = _Fields(*(np.full(srv.size, math.nan) for _ in _Fields._fields))
        rows = np.flatnonzero(ok & self._batched[srv])
        if rows.size:
            _put(fields, rows, self._evaluate(srv[rows], rate[rows] / 1000.0))
        for i in np.flatnonzero(ok & ~self._batched[srv]).tolist():
            _put(fields, i, self._scalar(int(srv[i]))._solve(float(rate[i]) / 1000.0)[1:])
        return self._metrics(srv, fields, failures)

    # ---- sizing --------------------------------------------------------------------------------

    def size(
        self, servers: npt.ArrayLike, ttft: npt.ArrayLike, itl: npt.ArrayLike, tps: npt.ArrayLike
    ) -> BatchSize:
        """Row ``i``: ``size(TargetPerf(ttft[i], itl[i], tps[i]))`` of server ``servers[i]``; targets in ms
        (TTFT, ITL) and tokens/s (TPS), finite and >= 0, 0 for none."""
        srv = self._rows(servers)
        k = srv.size
        targets = [np.asarray(x, dtype=np.float64).reshape(-1) for x in (ttft, itl, tps)]
        if any(x.shape != srv.shape for x in targets):
            raise ModelError(f"{k} servers but {[x.size for x in targets]} targets")
        if not all(bool(np.all(np.isfinite(x) & (x >= 0.0))) for x in targets):
            raise ModelError("targets must be finite numbers >= 0")
        ttft_t, itl_t, tps_t = targets
        c = self._srv
        lam_hi = c.lam_hi[srv]
        lam_ttft, lam_itl = lam_hi.copy(), lam_hi.copy()
        failures = self._failures(srv)
        failed = ~self._valid[srv]  # kept in step with failures
        scalar = ~failed & ~self._batched[srv]
        rows = np.flatnonzero(self._batched[srv] & ((ttft_t > 0.0) | (itl_t > 0.0)))
        if rows.size:
            self._search(
                srv,
                rows,
                targets=(ttft_t, itl_t),
                found=(lam_ttft, lam_itl),
                failures=(failures, failed),
                scalar=scalar,
            )
        lam_tps = np.where(tps_t > 0.0, lam_hi * (1.0 - STABILITY_SAFETY_FRACTION), lam_hi)
        lam_star = np.minimum(np.minimum(lam_ttft, lam_itl), lam_tps)
        out = np.stack((lam_ttft, lam_itl, lam_tps, lam_star)) * 1000.0
        fields = _Fields(*(np.full(k, math.nan) for _ in _Fields._fields))
        done = np.flatnonzero(~failed & ~scalar)
        if done.size:
            _put(fields, done, self._evaluate(srv[done], lam_star[done]))
        for i in np.flatnonzero(scalar).tolist():
            try:
                sized = self._scalar(int(srv[i])).size(
                    TargetPerf(float(ttft_t[i]), float(itl_t[i]), float(tps_t[i]))
                )
            except InfeasibleError as exc:
                failures[i] = exc
                failed[i] = True
                continue
            out[:, i] = (sized.rate_target_ttft, sized.rate_target_itl, sized.rate_target_tps, sized.max_rate)
            m = sized.metrics
            _put(
                fields,
                i,
                (
                    m.throughput / 1000.0,
                    m.avg_resp_time,
                    m.avg_wait_time,
                    m.avg_num_in_serv,
                    m.avg_prefill_time,
                    m.ttft,
                    m.itl,
                ),
            )
        out[:, failed] = math.nan
        for column in fields:
            column[failed] = math.nan
        metrics = self._metrics(srv, fields, failures)
        return BatchSize(
            rate_target_ttft=out[0],
            rate_target_itl=out[1],
            rate_target_tps=out[2],
            max_rate=out[3],
            tps=metrics.throughput * c.l_out[srv],
            metrics=metrics,
        )

    def _search(
        self,
        srv: _IntArray,
        rows: _IntArray,
        *,
        targets: tuple[_FloatArray, _FloatArray],
        found: tuple[_FloatArray, _FloatArray],
        failures: tuple[list[Failure | None], _BoolArray],
        scalar: _BoolArray,
    ) -> None:
        """The TTFT and ITL rates of ``rows`` (batched servers with a target): WVA's end-point rules,
        then the roots. Writes the rates into ``found``, unreachable targets into ``failures`` (the list of
        errors and the array of failed rows), and marks in ``scalar`` the rows to hand to QueueAnalyzer."""
        c = self._srv
        # Each server once: solved at the bottom of its range (states beyond the first few carry no
        # weight there) and on its grid, whose last point is the top of the range.
        servers, inverse = np.unique(srv[rows], return_inverse=True)
        low = self._evaluate(servers, c.lam_lo[servers], states=_LOW_RATE_STATES)
        grid = self._grid(servers, low)
        if servers.size == rows.size and np.array_equal(servers, srv[rows]):
            xs, *outputs = grid  # one row per server, in order (the common case): no copies
        else:
            xs, *outputs = (a[:, inverse] for a in grid)
        finite = np.isfinite(outputs[0]) & np.isfinite(outputs[1])
        broken: _BoolArray = ~np.all(finite, axis=0)
        scalar[rows[broken]] = True
        live: _BoolArray = ~broken
        searches: list[_IntArray] = []
        for field, label in enumerate(("TTFT", "ITL")):
            target, f = targets[field][rows], outputs[field]
            outcome = _classify_many(target, f[0], f[-1])
            asked = live & (target > 0.0)
            for i in np.flatnonzero(asked & (outcome >= _UNREACHABLE_FLAT)).tolist():
                flat = bool(outcome[i] == _UNREACHABLE_FLAT)
                failures[0][rows[i]] = InfeasibleError(
                    _unreachable(label, float(target[i]), float(f[0, i]), flat=flat)
                )
                failures[1][rows[i]] = True
                live[i] = False
            at_min = rows[asked & live & (outcome == -1)]
            found[field][at_min] = c.lam_lo[srv[at_min]]
            searches.append(np.flatnonzero(asked & live & (outcome == 0)))
        # A row unreachable on the other target needs no search (QueueAnalyzer stops at the first).
        parts = [idx[live[idx]] for idx in searches]
        idx = np.concatenate(parts)
        if not idx.size:
            return
        kind = np.concatenate([np.full(part.size, i) for i, part in enumerate(parts)])
        lam, ok = self._roots(
            srv[rows[idx]],
            kind,
            np.where(kind == 0, targets[0][rows[idx]], targets[1][rows[idx]]),
            xs[:, idx],
            np.where(kind == 0, outputs[0][:, idx], outputs[1][:, idx]),
        )
        for i in (0, 1):
            mine = (kind == i) & ok
            found[i][rows[idx[mine]]] = lam[mine]
        scalar[rows[idx[~ok]]] = True

    def _roots(
        self, srv: _IntArray, field: _IntArray, target: _FloatArray, xs: _FloatArray, fs: _FloatArray
    ) -> tuple[_FloatArray, _BoolArray]:
        """QueueAnalyzer._root for many rows at once: the rate (req/ms) where output ``field`` (0: TTFT,
        1: ITL) equals ``target``, from rates ``xs`` (P, r) in increasing order and their outputs ``fs``,
        which straddle it. Returns the rates and whether each search ended normally."""
        r = srv.size
        cols = np.arange(r)
        sign = np.where(fs[-1] > fs[0], 1.0, -1.0)
        k = np.argmax((fs - target) * sign > 0.0, axis=0)  # the first point past the target (>= 1)
        with np.errstate(all="ignore"):
            use_log = (fs[k - 1, cols] > 0.0) & (fs[k, cols] > 0.0)
            log_target = np.where(use_log, np.log(target), 0.0)

            def x_of(x: _FloatArray) -> _FloatArray:
                return np.where(use_log, np.log(x), x)

            def g_of(f: _FloatArray) -> _FloatArray:
                return np.where(use_log, (np.log(f) - log_target) * sign, (f - target) * sign)

            a, b = x_of(xs[k, cols]), x_of(xs[k - 1, cols])
            fa, fb = g_of(fs[k, cols]), g_of(fs[k - 1, cols])
            resolution = np.where(use_log, 1e-10, 1e-10 * xs[k, cols])
            tolerance = _BATCH_ROOT_TOLERANCE * np.abs(target)
            # The first step interpolates through a third point where that is safe, else the secant.
            j = np.where(k + 1 < xs.shape[0], k + 1, k - 2)
            third = ~use_log | (fs[j, cols] > 0.0)
            c = np.where(third, x_of(xs[j, cols]), a)
            fc = np.where(third, g_of(fs[j, cols]), fa)
            t = np.where(third, _chandrupatla_steps((a, fa), (b, fb), (c, fc)), math.nan)
            secant = np.clip(np.where(np.isfinite(fb), fa / (fa - fb), 0.5), 1e-9, 1.0 - 1e-9)
            t = np.where(np.isnan(t), secant, t)
        found = np.full(r, math.nan)
        ok = np.ones(r, dtype=np.bool_)
        active = cols
        for _ in range(_MAX_ROOT_STEPS):
            if not active.size:
                break
            ia, ib, ua = a[active], b[active], use_log[active]
            span = ib - ia
            with np.errstate(all="ignore"):
                floor = np.minimum(0.5 * resolution[active] / np.abs(span), 0.5)
                u = ia + np.minimum(np.maximum(t[active], floor), 1.0 - floor) * span
                lam = np.where(ua, np.exp(u), u)
            pts = self._evaluate(srv[active], lam)
            fx = np.where(field[active] == 0, pts.ttft, pts.itl)
            found[active] = lam
            bad = ~np.isfinite(fx)
            ok[active[bad]] = False
            tgt = target[active]
            met = np.abs(fx - tgt) <= tolerance[active]
            with np.errstate(all="ignore"):
                gx = np.where(
                    ua,
                    np.where(fx > 0.0, (np.log(fx) - log_target[active]) * sign[active], -math.inf),
                    (fx - tgt) * sign[active],
                )
            ifa, ifb = fa[active], fb[active]
            same = (gx > 0.0) == (ifa > 0.0)
            c[active] = np.where(same, ia, ib)
            fc[active] = np.where(same, ifa, ifb)
            b[active] = np.where(same, ib, ia)
            fb[active] = np.where(same, ifb, ifa)
            a[active], fa[active] = u, gx
            narrow = np.abs(b[active] - u) <= resolution[active]
            step = _chandrupatla_steps((u, gx), (b[active], fb[active]), (c[active], fc[active]))
            t[active] = np.where(np.isnan(step), 0.5, step)
            active = active[~(met | narrow | bad)]
        ok[active] = False  # never seen: the bracket reaches the resolution long before
        return found, ok


def _put(fields: _Fields, at: _IntArray | int, values: Sequence[float | _FloatArray]) -> None:
    for column, value in zip(fields, values, strict=True):
        column[at] = value


@functools.lru_cache(maxsize=32)
def _grid_points(width: int) -> _FloatArray:
    """The grid of a group of batch width ``width``, as fractions t = λ/λmax of the top of each range.

    Even in logit(t) from just below the lowest bottom of the group's ranges (t = ε/(1-ε)/width) to
    1 - 1e-4, then t = 1 (λmax): even in log(λ) at low rates and in log(1 - λ/λmax) near the top, where
    the queue grows fastest.
    """
    lowest = EPSILON / (1.0 - EPSILON) / width
    logit = np.linspace(
        math.log(lowest / (1.0 - lowest)), math.log((1.0 - _GRID_TOP_GAP) / _GRID_TOP_GAP), _GRID_POINTS - 1
    )
    points = np.append(1.0 / (1.0 + np.exp(-logit)), 1.0)
    points.flags.writeable = False
    return points


def _horner(coef: _FloatArray, t: _FloatArray) -> tuple[_FloatArray, _FloatArray]:
    """``p(t) = Σ_i coef[i]·t^i`` and ``t·p'(t)`` per column (``t`` broadcasts against ``coef[0]``)."""
    top = coef.shape[0] - 1
    p = np.empty(np.broadcast_shapes(t.shape, coef.shape[1:]))
    p[...] = coef[top]
    d = np.zeros_like(p)
    for i in range(top - 1, -1, -1):
        d *= t
        d += p
        p *= t
        p += coef[i]
    d *= t
    return p, d


#: Outcomes of :func:`_classify_many` beyond -1 / 0 / +1 (:func:`_classify`'s): the two unreachable cases.
_UNREACHABLE_FLAT = 2
_UNREACHABLE_LOW = 3


def _classify_many(target: _FloatArray, f_lo: _FloatArray, f_hi: _FloatArray) -> npt.NDArray[np.int8]:
    """:func:`_classify` for many rows (targets > 0): -1, 0, +1, or one of the two unreachable codes."""
    with np.errstate(all="ignore"):
        flat = np.abs(f_hi - f_lo) <= _FLAT_TOLERANCE * np.maximum(np.abs(f_lo), np.abs(f_hi))
        within_lo = (f_lo == target) | (np.abs((f_lo - target) / target) <= TOLERANCE)
        within_hi = (f_hi == target) | (np.abs((f_hi - target) / target) <= TOLERANCE)
    increasing = f_lo < f_hi
    below = np.where(increasing, target < f_lo, target > f_lo)
    above = np.where(increasing, target > f_hi, target < f_hi)
    return np.select(
        [flat & (target >= f_lo * (1.0 - TOLERANCE)), flat, within_lo, within_hi, below, above],
        [1, _UNREACHABLE_FLAT, -1, 1, _UNREACHABLE_LOW, 1],
        0,
    ).astype(np.int8)


def _chandrupatla_steps(
    pa: tuple[_FloatArray, _FloatArray],
    pb: tuple[_FloatArray, _FloatArray],
    pc: tuple[_FloatArray, _FloatArray],
) -> _FloatArray:
    """Chandrupatla's inverse quadratic step (as in :meth:`QueueAnalyzer._root`) for many rows: the fraction
    of ``b - a`` to step from ``a``, NaN where the points do not make it safe."""
    (a, fa), (b, fb), (c, fc) = pa, pb, pc
    with np.errstate(all="ignore"):
        xi = (a - b) / (c - b)
        phi = (fa - fb) / (fc - fb)
        t = fa / (fb - fa) * fc / (fb - fc) + (c - a) / (b - a) * fa / (fc - fa) * fb / (fc - fb)
        safe = (
            (c != a)
            & (c != b)
            & (fc != fa)
            & (fc != fb)
            & (fa != fb)
            & (phi * phi < xi)
            & ((1.0 - phi) * (1.0 - phi) < 1.0 - xi)
        )
    return np.where(safe, np.clip(t, 1e-9, 1.0 - 1e-9), math.nan)


def size_batch(servers: Sequence[ServerInputs], targets: Sequence[TargetPerf]) -> list[SizeResult | Failure]:
    """``QueueAnalyzer(*servers[i]).size(targets[i])`` for every ``i``, vectorised (:class:`QueueBatch`).

    Identical servers are solved once. Each entry is the result, or the error the scalar call would
    raise (returned, not raised). Not memoised (see :func:`QueueAnalyzer.size` / :func:`cached_analyzer`).
    """
    if len(servers) != len(targets):
        raise ModelError(f"{len(servers)} servers but {len(targets)} target sets")
    unique: dict[ServerInputs, int] = {}
    index = [unique.setdefault(s, len(unique)) for s in servers]
    batch = QueueBatch(list(unique))
    bad_targets: dict[int, ModelError] = {}
    values = np.zeros((3, len(targets)))
    for i, tp in enumerate(targets):
        try:
            if not isinstance(tp, TargetPerf):
                raise ModelError(f"targets must be TargetPerf, got {type(tp).__name__}")
            values[:, i] = (
                _check_number("TTFT target", tp.ttft),
                _check_number("ITL target", tp.itl),
                _check_number("TPS target", tp.tps),
            )
        except ModelError as exc:
            bad_targets[i] = exc
    sized = batch.size(index, values[0], values[1], values[2])
    out: list[SizeResult | Failure] = []
    for i in range(len(targets)):
        result = sized.result(i)
        if i in bad_targets and not isinstance(result, ModelError):
            result = bad_targets[i]
        out.append(result)
    return out
