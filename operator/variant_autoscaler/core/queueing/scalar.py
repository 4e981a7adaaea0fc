"""The analyzer of one server: :class:`QueueAnalyzer` (the reference; see the package doc)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from variant_autoscaler.core.queueing.server import (
    _FLAT_TOLERANCE,
    _ITL,
    _LAM,
    _LOG_SAFE,
    _MAX_ROOT_STEPS,
    _NSERV,
    _PREFILL,
    _PROBE_HIGH,
    _PROBE_LOW,
    _PY_LOOP_LIMIT,
    _RESP,
    _ROOT_TOLERANCE,
    _TTFT,
    _WAIT,
    _XPUT,
    STABILITY_SAFETY_FRACTION,
    TOLERANCE,
    AnalysisMetrics,
    RequestSize,
    ServiceParms,
    SizeResult,
    TargetPerf,
    _check_number,
    _FloatArray,
    _Point,
    _rate_error,
    _server,
    _within,
)
from variant_autoscaler.errors import InfeasibleError, ModelError


class QueueAnalyzer:
    """Analyzer of one inference server (one model on one accelerator with a fixed maximum batch size).

    Immutable once built, so instances may be shared (see :func:`cached_analyzer`); the results of
    :meth:`size` are memoised per instance (a few dozen target sets at most).
    """

    __slots__ = (
        "_a",
        "_alpha",
        "_beta",
        "_c0",
        "_c1",
        "_c_n",
        "_gamma",
        "_horner",
        "_idx1",
        "_inv_mu",
        "_inv_mu_list",
        "_inv_mu_n",
        "_l_in",
        "_l_out",
        "_lam_hi",
        "_lam_lo",
        "_log_mu_prod",
        "_moments",
        "_n_float",
        "_prefill_slope",
        "_q_float",
        "_s",
        "_size_memo",
        "max_batch_size",
        "max_queue_size",
        "parms",
        "rate_range",
        "request",
    )

    _SIZE_MEMO_LIMIT = 32

    rate_range: tuple[float, float]

    def __init__(
        self,
        max_batch_size: int,
        max_queue_size: int | None,
        parms: ServiceParms,
        request: RequestSize,
    ) -> None:
        # One unpacking of the derived constants (a sizing of a small batch is a few dozen µs, this a few).
        (
            n_max,
            self.max_queue_size,
            self._alpha,
            self._beta,
            self._gamma,
            _,
            self._l_in,
            self._l_out,
            a,
            s,
            self._prefill_slope,
            self._c0,
            self._c1,
            inv_mu_1,
            inv_mu_n,
            lam_lo,
            lam_hi,
        ) = _server(max_batch_size, max_queue_size, parms, request)
        self.max_batch_size = n_max
        self._n_float = float(n_max)
        self._q_float = float(self.max_queue_size)
        self.parms = parms
        self.request = request
        self._inv_mu_n = inv_mu_n
        self._lam_lo = lam_lo
        self._lam_hi = lam_hi
        self.rate_range = (lam_lo * 1000.0, lam_hi * 1000.0)
        self._size_memo: dict[tuple[float, float, float, float], SizeResult | str] = {}  # oldest first
        # Head of the chain: state i <= N has weight w_i = Π_{j<=i} λ/μ_j (w_0 = 1). Small batches use a
        # plain loop (Horner's rule below, or the running product of 1/μ_j); the numpy forms are built on
        # first use (at once for larger batches).
        self._a, self._s = a, s
        self._inv_mu_list: list[float] | None = None
        self._horner: list[tuple[float, float]] | None = None
        self._c_n = 0.0
        self._inv_mu: _FloatArray | None = None
        self._idx1: _FloatArray | None = None
        self._moments: _FloatArray | None = None
        self._log_mu_prod: _FloatArray | None = None
        if n_max <= _PY_LOOP_LIMIT:
            # w_i = c_i·λ^i with c_i = Π_{j<=i} 1/μ_j, so Σ w_i and Σ i·w_i are polynomials in λ, evaluated
            # by Horner's rule (two multiply-adds per state, against three products and two sums). 1/μ_j
            # lies between 1/μ_N and 1/μ_1, so c_i lies between min(1, (1/μ_N)^N) and max(1, (1/μ_1)^N):
            # coefficients far from the float limits use Horner's rule, others the running product.
            try:  # powers rather than logarithms: builtin calls cost more than arithmetic here
                safe = inv_mu_1**n_max < 1e250 and inv_mu_n**n_max > 1e-250
            except OverflowError:
                safe = False
            if safe:
                horner: list[tuple[float, float]] = []
                c = 1.0
                for b in range(1, n_max):
                    c *= a / b + s
                    horner.append((c, b * c))
                horner.reverse()
                self._horner = horner
                self._c_n = c * inv_mu_n
            else:
                self._inv_mu_list = [a / b + s for b in range(1, n_max + 1)]
        else:
            inv_mu = self._numpy_arrays()[0]
            # The weights grow with λ, so those at λmax bound them all; plain products are used unless
            # they could overflow there, in which case the weights are computed in log space.
            if n_max * math.log(inv_mu_1 / inv_mu_n) > _LOG_SAFE:
                log_inv_mu = np.log(inv_mu)
                if float(np.cumsum(math.log(lam_hi) + log_inv_mu).max()) > _LOG_SAFE:
                    self._log_mu_prod = np.cumsum(-log_inv_mu)

    def _numpy_arrays(self) -> tuple[_FloatArray, _FloatArray, _FloatArray]:
        """1/μ_b and b for b = 1..N, and the (N, 2) matrix giving Σ w_i and Σ i·w_i in one product."""
        if self._inv_mu is None or self._idx1 is None or self._moments is None:
            self._idx1 = np.arange(1.0, self.max_batch_size + 1.0)
            self._inv_mu = self._a / self._idx1 + self._s
            self._moments = np.stack((np.ones(self.max_batch_size), self._idx1), axis=1)
        return self._inv_mu, self._idx1, self._moments

    def __repr__(self) -> str:
        return (
            f"QueueAnalyzer(max_batch_size={self.max_batch_size}, max_queue_size={self.max_queue_size}, "
            f"parms={self.parms!r}, request={self.request!r})"
        )

    # ---- per-stage times -------------------------------------------------------------------------

    def prefill_time(self, batch: float) -> float:
        """Prefill time (ms) of one request in a batch of ``batch``; 0 without input tokens."""
        return self._gamma + self._prefill_slope * batch if self._l_in > 0.0 else 0.0

    def decode_time(self, batch: float) -> float:
        """Time (ms) of one decode step (one output token) in a batch of ``batch``."""
        return self._alpha + self._beta * batch

    # ---- the chain ---------------------------------------------------------------------------------

    def _head(self, lam: float) -> tuple[float, float, float]:
        """For one λ: Σ_{i<=N} w_i, Σ i·w_i and w_N, the weights scaled by one common factor."""
        if self._horner is not None:
            z = c_n = self._c_n
            a = self.max_batch_size * c_n
            for c, ic in self._horner:
                z = z * lam + c
                a = a * lam + ic
            return 1.0 + z * lam, a * lam, c_n * lam**self.max_batch_size
        if self._inv_mu_list is not None:
            w = z = 1.0
            a = i = 0.0
            for inv_mu_b in self._inv_mu_list:
                i += 1.0
                w *= lam * inv_mu_b
                z += w
                a += i * w
            return z, a, w
        inv_mu, idx1, moments = self._numpy_arrays()
        if self._log_mu_prod is None:
            ws = np.multiply.accumulate(lam * inv_mu)
            z, a = (ws @ moments).tolist()
            return 1.0 + z, a, ws.item(-1)
        log_w = math.log(lam) * idx1 - self._log_mu_prod
        top = max(log_w.max().item(), 0.0)
        ws = np.exp(log_w - top)
        z, a = (ws @ moments).tolist()
        return math.exp(-top) + z, a, ws.item(-1)

    def _solve(self, lam: float) -> _Point:
        """Solve the chain at one arrival rate λ (req/ms)."""
        # N and Q as floats: arithmetic and comparisons of two floats take the interpreter's fast paths.
        n_max = self._n_float
        horner = self._horner
        if horner is not None:  # _head's polynomials, inlined: this is the innermost call of a sizing
            z_head = c_n = self._c_n
            a_head = n_max * c_n
            for c, ic in horner:
                z_head = z_head * lam + c
                a_head = a_head * lam + ic
            z_head = 1.0 + z_head * lam
            a_head *= lam
            w_n = c_n * lam**n_max
        else:
            z_head, a_head, w_n = self._head(lam)
        q = self._q_float
        # Geometric tail, states N+j for j = 1..Q: weight w_N·r^j with r = λ/μ_N < 1 on the rate range.
        r = lam * self._inv_mu_n
        r_q = r**q
        omr = 1.0 - r
        w_r = w_n * r
        w_g1 = w_r * (1.0 - r_q) / omr  # w_N Σ r^j
        w_g2 = w_r * (1.0 - r_q - q * r_q * omr) / (omr * omr)  # w_N Σ j·r^j
        z = z_head + w_g1
        xput = lam * (1.0 - w_n * r_q / z)  # X = λ (1 - p_K)
        n_serv = (a_head + n_max * w_g1) / z  # Σ_{i<=N} i·p_i + N·Σ_{i>N} p_i
        serv = n_serv / xput
        wait = w_g2 / z / xput  # Σ_{i>N} (i-N)·p_i / X, without the cancellation of T - S
        # Effective concurrency as WVA: the batch size that explains the mean service time, within
        # [0, N]. Where the service time does not depend on the batch (c1 = 0) WVA divides by zero; we
        # use L_serv. (Conditionals rather than min/max: this is the innermost call of a sizing.)
        c1 = self._c1
        n_eff = (serv - self._c0) / c1 if c1 > 0.0 else n_serv
        if n_eff < 0.0:
            n_eff = 0.0
        elif n_eff > n_max:
            n_eff = n_max
        prefill = self._gamma + self._prefill_slope * n_eff if self._l_in > 0.0 else 0.0
        return (
            lam,
            xput,
            serv + wait,
            wait,
            n_serv,
            prefill,
            wait + prefill,
            self._alpha + self._beta * n_eff,
        )

    def state_probabilities(self, rate: float) -> _FloatArray:
        """Stationary probabilities of 0..K requests in the system at ``rate`` req/s (K+1 values)."""
        lam = self._check_rate(rate) / 1000.0
        if self.max_queue_size > 10_000_000:
            raise ModelError("state_probabilities() is limited to queues of at most 10 million requests")
        inv_mu, idx1, _ = self._numpy_arrays()
        if self._log_mu_prod is None:
            head = np.concatenate(([1.0], np.cumprod(lam * inv_mu)))
        else:
            log_w = np.concatenate(([0.0], math.log(lam) * idx1 - self._log_mu_prod))
            head = np.exp(log_w - log_w.max())
        tail = head[-1] * (lam * self._inv_mu_n) ** np.arange(1.0, self.max_queue_size + 1.0)
        p = np.concatenate((head, tail))
        return p / p.sum()  # type: ignore[no-any-return]

    # ---- analysis ----------------------------------------------------------------------------------

    def _check_rate(self, rate: float) -> float:
        if isinstance(rate, bool) or not isinstance(rate, int | float):
            raise ModelError(f"invalid request rate {rate!r}")
        error = _rate_error(rate, self.rate_range[1])
        if error is not None:
            raise ModelError(error)
        return float(rate)

    def _metrics(self, pt: _Point) -> AnalysisMetrics:
        n_serv = pt[_NSERV]
        rho = n_serv / self.max_batch_size
        return tuple.__new__(  # the fields in order (faster than the named tuple's own __new__)
            AnalysisMetrics,
            (
                pt[_XPUT] * 1000.0,  # throughput
                pt[_RESP],  # avg_resp_time
                pt[_WAIT],  # avg_wait_time
                n_serv,  # avg_num_in_serv
                pt[_PREFILL],  # avg_prefill_time
                pt[_TTFT],  # ttft
                pt[_ITL],  # itl
                0.0 if rho < 0.0 else (1.0 if rho > 1.0 else rho),  # rho
                self.rate_range[1],  # max_rate
            ),
        )

    def analyze(self, rate: float) -> AnalysisMetrics:
        """Predicted metrics at ``rate`` req/s; :class:`ModelError` unless ``0 < rate <= max rate``."""
        return self._metrics(self._solve(self._check_rate(rate) / 1000.0))

    # ---- sizing ------------------------------------------------------------------------------------

    def size(self, targets: TargetPerf) -> SizeResult:
        """Largest rate per replica meeting every positive target, with WVA's semantics.

        A target of 0 is ignored. A TTFT or ITL target already missed at the lowest rate raises
        :class:`InfeasibleError`; one still met at the highest rate gives the highest rate. A TPS target
        caps the rate at 90 % of the highest rate (its value is not used here, as in WVA).
        """
        if type(targets) is not TargetPerf and not isinstance(targets, TargetPerf):
            raise ModelError(f"targets must be TargetPerf, got {type(targets).__name__}")
        # Keyed by the values (hashing a plain tuple is cheaper than the dataclass's __hash__).
        key = (targets.ttft, targets.itl, targets.tps, targets.ttft_percentile)
        memo = self._size_memo.get(key)
        if memo is None:
            memo = self._size(targets)
            self._size_memo[key] = memo
            if len(self._size_memo) > self._SIZE_MEMO_LIMIT:
                del self._size_memo[next(iter(self._size_memo))]
        if isinstance(memo, str):
            raise InfeasibleError(memo)
        return memo

    def _size(self, targets: TargetPerf) -> SizeResult | str:
        ttft_target, itl_target, tps_target = targets.ttft, targets.itl, targets.tps
        percentile = targets.ttft_percentile
        if not (  # the checks below, at a glance, for the common case
            type(ttft_target) is float
            and type(itl_target) is float
            and type(tps_target) is float
            and percentile == 0.0
            and 0.0 <= ttft_target < math.inf
            and 0.0 <= itl_target < math.inf
            and 0.0 <= tps_target < math.inf
        ):
            ttft_target = _check_number("TTFT target", ttft_target)
            itl_target = _check_number("ITL target", itl_target)
            tps_target = _check_number("TPS target", tps_target)
            percentile = _check_percentile(percentile)
        lam_hi = self._lam_hi
        lam_ttft = lam_itl = lam_hi
        points: list[_Point] = []  # every solved point, in increasing rate
        at_rate: dict[float, _Point] = {}  # the points of the rates found, for the final metrics
        # ITL = α + β·n_eff with 0 <= n_eff <= N: a target of at least α + β·N is met at every rate, which
        # WVA's end-point rules turn into the top of the range, so that search needs no point at all.
        if itl_target >= self._alpha + self._beta * self.max_batch_size:
            itl_target = -1.0  # met everywhere: λmax, as below, without solving
        if ttft_target > 0.0 or itl_target > 0.0:
            # Two rates inside the range, shared by the searches, and the ends only where WVA's end-point
            # rules need them: both outputs grow with the rate, so an end whose outcome the inner points
            # already decide (clearly below, or clearly above, the target) is never solved.
            mu_n = 1.0 / self._inv_mu_n
            solve = self._solve
            points = [solve(_PROBE_LOW * mu_n), solve(_PROBE_HIGH * mu_n)]
            low = high = None
            for field, label, target in ((_TTFT, "TTFT", ttft_target), (_ITL, "ITL", itl_target)):
                if target <= 0.0:
                    continue
                if field == _TTFT and percentile > 0.0:
                    found = self._percentile_rate(target, percentile)
                    if isinstance(found, str):
                        return found
                    lam_ttft = found
                    continue
                f_low, f_high = points[0][field], points[-1][field]
                # An inner point flat with the other end says nothing of the curve beyond it.
                # (The cheap tests first: _flat and _within, exactly, where they could be true.)
                larger = f_high if f_high > f_low else f_low
                flat = (f_high - f_low <= _FLAT_TOLERANCE * larger or larger <= 0.0) and _flat(f_low, f_high)
                need_low = flat or not (f_low < target and (target - f_low) / target > TOLERANCE)
                need_high = flat or not (f_high > target and (f_high - target) / target > TOLERANCE)
                if need_low and low is None:
                    low = solve(self._lam_lo)
                    points.insert(0, low)
                if need_high and high is None:
                    high = solve(lam_hi)
                    points.append(high)
                # The ends, or inner points standing in for them with the same outcome (see above); where
                # the first and last points clearly straddle the target, the end-point rules say "a root
                # inside" without asking.
                outcome = (
                    _classify(label, target, points[0][field], points[-1][field])
                    if need_low or need_high
                    else 0
                )
                if isinstance(outcome, str):
                    return outcome
                if outcome < 0:
                    lam = self._lam_lo
                    if low is not None:
                        at_rate[lam] = low
                elif outcome > 0:
                    lam = lam_hi
                    if high is not None:
                        at_rate[lam] = high
                else:
                    pt = self._root(field, target, points)
                    lam = pt[0]
                    at_rate[lam] = pt
                if field == _TTFT:
                    lam_ttft = lam
                else:
                    lam_itl = lam
        lam_tps = lam_hi * (1.0 - STABILITY_SAFETY_FRACTION) if tps_target > 0.0 else lam_hi
        lam_star = lam_ttft if lam_ttft < lam_itl else lam_itl  # min(), without the call
        lam_star = lam_tps if lam_tps < lam_star else lam_star
        point = at_rate.get(lam_star)
        if point is None:
            point = self._solve(lam_star)
        metrics = self._metrics(point)
        return tuple.__new__(  # the fields in order
            SizeResult,
            (
                lam_ttft * 1000.0,  # rate_target_ttft
                lam_itl * 1000.0,  # rate_target_itl
                lam_tps * 1000.0,  # rate_target_tps
                lam_star * 1000.0,  # max_rate
                metrics,
                metrics.ttft,
                metrics.itl,
                metrics.throughput * self._l_out,  # tps
                (  # ttft_at_percentile
                    self._ttft_quantile(point, percentile / 100.0)
                    if percentile > 0.0 and ttft_target > 0.0
                    else None
                ),
            ),
        )

    # ---- the distribution of the wait (percentile targets, ours) -------------------------------

    def _wait_tail(self, pt: _Point) -> Callable[[float], float]:
        """``t ↦ P(W > t)`` (t in ms) for an admitted request at the solved point ``pt``.

        An arrival admitted with ``i >= N`` requests in the system waits for ``i - N + 1`` completions,
        each at the full-batch rate μ_N (memoryless service, as in the chain): an Erlang wait. With the
        geometric queue ``p_{N+m} = p_N r^m`` (``r = λ/μ_N``, ``m < Q``) the mixture sums in closed form:
        ``P(W > t) = p_N / ((1 - p_K)(1 - r)) · [e^{-x(1-r)} Q(Q, x r) - r^Q Q(Q, x)]`` with ``x = μ_N t``
        and ``Q(a, y)`` the regularized upper incomplete gamma function. At ``t = 0`` it is the
        probability of finding the batch full.
        """
        from scipy.special import gammaincc  # noqa: PLC0415  +0.15 s on `analyze`; percentiles only

        q = self.max_queue_size
        lam = pt[_LAM]
        z_head, _, w_n = self._head(lam)
        r = lam * self._inv_mu_n
        r_q = r**q
        omr = 1.0 - r
        z = z_head + w_n * r * (1.0 - r_q) / omr
        scale = (w_n / z) / ((1.0 - w_n * r_q / z) * omr)
        mu_n = 1.0 / self._inv_mu_n

        def tail(t: float) -> float:
            if q == 0:
                return 0.0
            x = mu_n * max(t, 0.0)
            value = scale * (math.exp(-x * omr) * float(gammaincc(q, x * r)) - r_q * float(gammaincc(q, x)))
            return min(max(value, 0.0), 1.0)

        return tail

    def _ttft_quantile(self, pt: _Point, level: float) -> float:
        """The ``level`` quantile (0..1) of TTFT = wait + prefill at the solved point ``pt`` (ms)."""
        tail = self._wait_tail(pt)
        miss = 1.0 - level
        if tail(0.0) <= miss:
            return pt[_PREFILL]
        lo, hi = 0.0, max(pt[_WAIT], self._inv_mu_n)
        while tail(hi) > miss:
            lo, hi = hi, hi * 2.0
        while hi - lo > 1e-9 * hi:  # bisection to a relative 1e-9 (about 30 steps)
            mid = 0.5 * (lo + hi)
            if tail(mid) > miss:
                lo = mid
            else:
                hi = mid
        return pt[_PREFILL] + hi

    def ttft_percentile(self, rate: float, percentile: float) -> float:
        """The ``percentile`` (0 < p < 100) of TTFT (ms) of admitted requests at ``rate`` req/s."""
        level = _check_percentile(percentile)
        if level <= 0.0:
            raise ModelError("percentile must be in (0, 100)")
        return self._ttft_quantile(self._solve(self._check_rate(rate) / 1000.0), level / 100.0)

    def _percentile_rate(self, target: float, percentile: float) -> float | str:
        """The largest λ (req/ms) in the rate range where that percentile of TTFT is within ``target``,
        or why there is none. The share of admitted requests over the target grows with λ.

        TTFT is compared with the target allowing for rounding (a relative 1e-9): where TTFT does not
        depend on the rate (the prefill of a batch of one), rounding alone would otherwise decide.
        """
        miss = 1.0 - percentile / 100.0
        limit = target * (1.0 + _FLAT_TOLERANCE)

        def excess(lam: float) -> float:  # P(TTFT > target) - miss
            pt = self._solve(lam)
            return self._wait_tail(pt)(limit - pt[_PREFILL]) - miss if limit >= pt[_PREFILL] else 1.0

        lo, hi = self._lam_lo, self._lam_hi
        if excess(lo) > 0.0:
            at_lo = self._ttft_quantile(self._solve(lo), percentile / 100.0)
            return f"TTFT p{percentile:g} target {target:g} ms unreachable: {at_lo:.4g} ms at the lowest rate"
        if excess(hi) <= 0.0:
            return hi
        # Bisection on log λ to a relative 1e-7 of λ: the root is where the excess changes sign.
        a, b = math.log(lo), math.log(hi)
        while b - a > 1e-7:
            mid = 0.5 * (a + b)
            if excess(math.exp(mid)) <= 0.0:
                a = mid
            else:
                b = mid
        return math.exp(a)

    def _root(self, field: int, target: float, points: list[_Point]) -> _Point:
        """The solved point strictly inside the rate range where output ``field`` equals ``target``.

        ``points`` are solved points in increasing rate whose outputs straddle the target (the ends of
        the range, or inner points standing in for them); the points solved here are added to it, so that
        a second search starts from a tighter bracket. The root is bracketed between two neighbours and
        refined by Chandrupatla's method (inverse quadratic interpolation, bisection when that is not
        trusted) until the output is within ``_ROOT_TOLERANCE`` (relative) of the target or the bracket
        is 1e-10 wide (relative). Where the output is positive the search runs in coordinates in which
        the curve is close to a straight line, so that interpolation lands close to the root:

        * TTFT against ``-log(μ_N - λ)``, as ``log(TTFT)``: queueing delay grows like a power of the
          distance to saturation;
        * ITL against λ, as ``-1/ITL``: ITL = α + β·n_eff approaches its ceiling α + β·N like a hyperbola.

        On the issue's cases and the benchmark's candidates these take 4.5 and 3.3 steps per root on
        average, against 5.3 and 4.8 on log(rate) and log(output).
        """
        log, exp, solve = math.log, math.exp, self._solve
        sign = 1.0 if points[-1][field] > points[0][field] else -1.0
        k = 1
        while (points[k][field] - target) * sign <= 0.0:
            k += 1
        lam_a, f_a = points[k][0], points[k][field]
        lam_b, f_b = points[k - 1][0], points[k - 1][field]
        # mode 0: x = λ, g = output - target; 1 (TTFT): x = -log(μ_N - λ), g = log(output / target);
        # 2 (ITL): x = λ, g = 1/target - 1/output. g is multiplied by sign, so that it grows with x.
        mode = (1 if field == _TTFT else 2) if f_b > 0.0 and f_a > 0.0 else 0
        mu_n = 1.0 / self._inv_mu_n
        log_target = log(target) if mode == 1 else 0.0
        inv_target = 1.0 / target if mode == 2 else 0.0
        a, fa = _root_coordinates(mode, (lam_a, f_a), target, mu_n, sign)
        b, fb = _root_coordinates(mode, (lam_b, f_b), target, mu_n, sign)
        tolerance = _ROOT_TOLERANCE * abs(target)
        # Chandrupatla (1997): a is the latest point, b the other end of the bracket, c the previous a.
        # The first step interpolates through a third known point where that is safe, else the secant.
        j = k + 1 if k + 1 < len(points) else k - 2
        if j >= 0 and (mode == 0 or points[j][field] > 0.0):
            c, fc = _root_coordinates(mode, (points[j][0], points[j][field]), target, mu_n, sign)
        else:
            c, fc = a, fa
        # Where interpolation is not trusted: the secant at first, kept inside the bracket, then bisection.
        fallback = fa / (fa - fb) if math.isfinite(fb) else 0.5
        # The resolution: a bracket 1e-10 wide relative to the rate, in x (taken at the lower end, the
        # smaller one). Steps keep at least half of it from a (so that the bracket keeps shrinking), and
        # 1e-9 of the bracket from either end; the first bound matters below this width only.
        lam_low = min(lam_a, lam_b)
        resolution = 1e-10 * lam_low / (mu_n - lam_low) if mode == 1 else 1e-10 * lam_low
        narrow = 0.5 * resolution / 1e-9
        solved: list[_Point] = []
        for _ in range(_MAX_ROOT_STEPS):
            # Chandrupatla's inverse quadratic step from a towards b, as a fraction t of b - a (inlined:
            # this loop is most of the cost of a sizing). Points that coincide (in x or g) make a division
            # by zero or fail the test: then the fallback.
            width = b - a
            t = fallback
            try:
                xi = (a - b) / (c - b)
                phi = (fa - fb) / (fc - fb)
                if phi * phi < xi and (1.0 - phi) * (1.0 - phi) < 1.0 - xi:
                    t = fa / (fb - fa) * fc / (fb - fc) + (c - a) / width * fa / (fc - fa) * fb / (fc - fb)
            except ZeroDivisionError:
                pass
            # (Comparisons rather than abs/min/max: a builtin call costs several float operations.)
            if -narrow < width < narrow:
                floor = 0.5 * resolution / (width if width > 0.0 else -width)
                if floor > 0.5:  # noqa: PLR1730 - see above
                    floor = 0.5
            else:
                floor = 1e-9
            t = floor if t < floor else (1.0 - floor if t > 1.0 - floor else t)
            u = a + t * width
            lam = mu_n - exp(-u) if mode == 1 else u
            pt = solve(lam)
            solved.append(pt)
            fx = pt[field]
            if -tolerance <= fx - target <= tolerance:
                break
            if mode == 0 or fx <= 0.0:
                gx = _root_coordinates(mode, (lam, fx), target, mu_n, sign)[1]
            elif mode == 1:  # _root_coordinates, inlined for the common cases
                gx = (log(fx) - log_target) * sign
            else:
                gx = (inv_target - 1.0 / fx) * sign
            if (gx > 0.0) == (fa > 0.0):
                c, fc = a, fa
            else:
                c, fc = b, fb
                b, fb = a, fa
            a, fa = u, gx
            fallback = 0.5
            if -resolution <= b - a <= resolution:
                break
        else:  # pragma: no cover - the bracket reaches the resolution long before
            solved.sort(key=lambda pt: abs(pt[field] - target), reverse=True)  # the best one last
        last = solved[-1]
        solved.sort()
        points[k:k] = solved  # all inside the bracket (points k-1 and k): the list stays in rate order
        return last


def _root_coordinates(
    mode: int, point: tuple[float, float], target: float, mu_n: float, sign: float
) -> tuple[float, float]:
    """``(x, g)`` of a solved ``(λ, output)`` in the coordinates of :meth:`QueueAnalyzer._root`'s
    ``mode``; g is multiplied by ``sign``."""
    lam, f = point
    if mode == 0:
        return lam, (f - target) * sign
    x = -math.log(mu_n - lam) if mode == 1 else lam
    if f <= 0.0:
        return x, -math.inf * sign
    # (The same expressions as the root loop's inlined forms, so that every point rounds alike.)
    return x, (math.log(f) - math.log(target) if mode == 1 else 1.0 / target - 1.0 / f) * sign


def _check_percentile(value: object) -> float:
    """A TTFT percentile target: 0 (none, the mean) or a number in (0, 100)."""
    p = _check_number("TTFT percentile", value)
    if p != 0.0 and not 0.0 < p < 100.0:
        raise ModelError(f"TTFT percentile must be 0 (the mean) or between 0 and 100, got {p:g}")
    return p


def _classify(label: str, target: float, f_lo: float, f_hi: float) -> int | str:
    """WVA's end-point rules for one search: -1 (the root is λmin), +1 (take λmax), 0 (a root inside),
    or the reason the target is unreachable.

    A flat function (equal ends, e.g. ITL with β = 0 or a batch of 1) is met at every rate or at none; WVA
    calls every such target "below" (infeasible) unless float32 noise says otherwise. See docs/analyzer.md.
    """
    if _flat(f_lo, f_hi):
        if target >= f_lo * (1.0 - TOLERANCE):
            return 1
        return _unreachable(label, target, f_lo, flat=True)
    if _within(f_lo, target, TOLERANCE):
        return -1
    if _within(f_hi, target, TOLERANCE):
        return 1
    increasing = f_lo < f_hi
    if (increasing and target < f_lo) or (not increasing and target > f_lo):
        return _unreachable(label, target, f_lo, flat=False)
    if (increasing and target > f_hi) or (not increasing and target < f_hi):
        return 1
    return 0


def _flat(f_lo: float, f_hi: float) -> bool:
    """Whether a search function with these values at the ends of the range is flat (to rounding)."""
    return abs(f_hi - f_lo) <= _FLAT_TOLERANCE * max(abs(f_lo), abs(f_hi))


def _unreachable(label: str, target: float, f_lo: float, *, flat: bool) -> str:
    where = "at every rate (it does not depend on the load)" if flat else "at the lowest rate"
    return f"{label} target {target:g} ms unreachable: {f_lo:.4g} ms {where}"


@functools.lru_cache(maxsize=4096)
def cached_analyzer(
    max_batch_size: int, max_queue_size: int | None, parms: ServiceParms, request: RequestSize
) -> QueueAnalyzer:
    """A shared :class:`QueueAnalyzer` for these inputs (bounded LRU), whose :meth:`~QueueAnalyzer.size`
    results are memoised too: re-sizing the same candidates every cycle costs two dictionary lookups."""
    return QueueAnalyzer(max_batch_size, max_queue_size, parms, request)
