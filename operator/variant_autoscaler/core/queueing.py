"""Queueing model of one LLM inference server: WVA's state-dependent M/M/1/K analyzer, in float64.

The server is a birth-death chain over the number of requests in the system, ``0 .. K`` with
``K = max_batch_size + max_queue_size``. Requests arrive at rate λ (arrivals finding the system full are
lost). With ``n`` requests in service (``n <= N``, the maximum batch size) the batch completes requests at
``μ_n = n / (prefill(n) + D · decode(n))`` where

* ``prefill(b) = γ + δ · L_in · b`` (0 when there are no input tokens), ``decode(b) = α + β · b`` (ms),
* ``D = L_out - 1`` decode steps per request (1 when ``L_in == 0 and L_out == 1``).

Beyond ``N`` requests the extra ones wait and the rate stays ``μ_N``. From the stationary distribution we
get the throughput, the mean response, wait and service times, the mean number in service, and the
*effective concurrency* ``n_eff`` (the batch size that explains the mean service time), which gives
``TTFT = wait + prefill(n_eff)`` and ``ITL = decode(n_eff)``.

Units: public rates are requests per second, times are milliseconds; inside, λ and μ are requests per ms.

Implementation notes (see docs/analyzer.md):

* the weights of states ``0 .. N`` are running products ``Π λ/μ_j`` (a plain loop for small batches,
  numpy over the states for larger ones, log space only where the products could overflow); the
  geometric tail (states ``N+1 .. K``) uses closed forms, so the cost does not grow with the queue bound;
* the waiting time is computed directly from the queue tail (``Σ (i-N) p_i / X``), not as the
  difference ``T - S`` of two nearly equal numbers;
* :meth:`QueueAnalyzer.size` applies WVA's end-point rules, then finds each root with a handful of
  evaluations (a few probe rates, then Chandrupatla's method on log-rate/log-value) to a relative 1e-7,
  tighter than WVA's bisection (1e-6 on the target, up to 100 sequential steps).
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from variant_autoscaler.errors import InfeasibleError, ModelError

__all__ = [
    "EPSILON",
    "MAX_BATCH_SIZE_LIMIT",
    "MAX_QUEUE_SIZE_LIMIT",
    "QUEUE_TO_BATCH_RATIO",
    "STABILITY_SAFETY_FRACTION",
    "TOLERANCE",
    "AnalysisMetrics",
    "InfeasibleError",
    "ModelError",
    "QueueAnalyzer",
    "RequestSize",
    "ServiceParms",
    "SizeResult",
    "TargetPerf",
    "cached_analyzer",
]

#: Relative margin of the rate range: ``[μ_1 · ε, μ_N · (1 - ε)]`` (WVA's ``Epsilon``).
EPSILON = 0.001
#: With a TPS target the rate is held this fraction below the maximum (WVA's ``StabilitySafetyFraction``).
STABILITY_SAFETY_FRACTION = 0.1
#: Default queue bound, as a multiple of the maximum batch size (WVA's ``MaxQueueToBatchRatio``).
QUEUE_TO_BATCH_RATIO = 10
#: WVA's bisection stops once the function is within this relative distance of the target.
TOLERANCE = 1e-6
#: We stop our root refinement this much tighter than WVA, so our root is the better approximation.
_ROOT_TOLERANCE = 1e-7
#: A search function whose two ends differ by no more than this (relative) is treated as flat.
_FLAT_TOLERANCE = 1e-9
#: Upper bounds that keep the model's arrays of a sane size (a batch of 65536 is far beyond any server).
MAX_BATCH_SIZE_LIMIT = 65_536
MAX_QUEUE_SIZE_LIMIT = 10**9

_FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class ServiceParms:
    """Per-stage time parameters in ms: decode ``alpha + beta·b``, prefill ``gamma + delta·L_in·b``."""

    alpha: float
    beta: float
    gamma: float
    delta: float


@dataclass(frozen=True, slots=True)
class RequestSize:
    """Average number of input (prompt) and output (generated) tokens per request."""

    avg_input_tokens: float
    avg_output_tokens: float


@dataclass(frozen=True, slots=True)
class TargetPerf:
    """Performance targets: TTFT and ITL in ms (upper bounds), TPS in tokens/s; 0 means no target."""

    ttft: float = 0.0
    itl: float = 0.0
    tps: float = 0.0


@dataclass(frozen=True, slots=True)
class AnalysisMetrics:
    """Predicted steady-state behaviour of one server at one request rate.

    ``throughput`` and ``max_rate`` in requests/s (``max_rate`` is the top of the rate range), times in ms,
    ``avg_num_in_serv`` in requests, ``rho`` the mean batch occupancy ``avg_num_in_serv / N`` in [0, 1].
    """

    throughput: float
    avg_resp_time: float
    avg_wait_time: float
    avg_num_in_serv: float
    avg_prefill_time: float
    ttft: float
    itl: float
    rho: float
    max_rate: float


@dataclass(frozen=True, slots=True)
class SizeResult:
    """Largest request rate (req/s) meeting each target, the overall maximum, and the metrics there.

    ``ttft``, ``itl`` (ms) and ``tps`` (tokens/s) are the values achieved at ``max_rate``.
    """

    rate_target_ttft: float
    rate_target_itl: float
    rate_target_tps: float
    max_rate: float
    metrics: AnalysisMetrics
    ttft: float
    itl: float
    tps: float


def _check_number(name: str, value: object, minimum: float = 0.0) -> float:
    """``value`` as a float, or :class:`ModelError` unless it is a finite number >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ModelError(f"{name} must be a number, got {value!r}")
    if not minimum <= value < math.inf:
        raise ModelError(f"{name} must be a finite number >= {minimum:g}, got {value!r}")
    return float(value)


def _check_int(name: str, value: object, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelError(f"{name} must be an integer, got {value!r}")
    if not minimum <= value <= maximum:
        raise ModelError(f"{name} must be between {minimum} and {maximum}, got {value}")
    return value


def _within(value: float, target: float, tolerance: float) -> bool:
    """WVA's ``WithinTolerance``: equal, or relatively within ``tolerance`` of a non-zero target."""
    if value == target:
        return True
    if target == 0.0 or tolerance < 0.0:
        return False
    return abs((value - target) / target) <= tolerance


# A solved point: (λ, X, T, W, L_serv, prefill, TTFT, ITL), λ and X in req/ms, times in ms.
_Point = tuple[float, float, float, float, float, float, float, float]
_XPUT, _RESP, _WAIT, _NSERV, _PREFILL, _TTFT, _ITL = range(1, 8)

#: Batch sizes up to this solve a single rate with a plain Python loop (cheaper than numpy calls).
_PY_LOOP_LIMIT = 32
#: Largest log-weight for which plain products are used: e^600 leaves room for the sums over 65537 states
#: and the queue tail (a factor below 1e12) before reaching the float maximum (about e^709).
_LOG_SAFE = 600.0
#: Safety bound on the refinement steps of one root search (about 10 are typical, 30 the worst seen).
_MAX_ROOT_STEPS = 100
#: Rates probed before the root searches, as fractions of μ_N, besides both ends of the rate range.
_PROBES = (0.3, 0.7)


class _Server(NamedTuple):
    """The validated inputs of one server and the constants derived from them (times in ms, λ in req/ms)."""

    n: int  # maximum batch size N
    q: int  # maximum queue size Q
    alpha: float
    beta: float
    gamma: float
    l_in: float
    l_out: float
    a: float  # a request's service time in a batch of b is a + s·b, so 1/μ_b = a/b + s
    s: float
    slope: float  # δ·L_in, the prefill time per request in the batch
    c0: float  # n_eff = (S - c0) / c1, exactly as WVA writes it (γ subtracted even without input tokens)
    c1: float
    inv_mu_1: float
    inv_mu_n: float
    lam_lo: float  # the rate range, [μ_1·ε, μ_N·(1 - ε)]
    lam_hi: float


def _server(
    max_batch_size: int, max_queue_size: int | None, parms: ServiceParms, request: RequestSize
) -> _Server:
    """Check one server's inputs (:class:`ModelError` naming the field) and derive its constants."""
    n_max = _check_int("maxBatchSize", max_batch_size, 1, MAX_BATCH_SIZE_LIMIT)
    if max_queue_size is None:
        max_queue_size = QUEUE_TO_BATCH_RATIO * n_max
    q_max = _check_int("maxQueueSize", max_queue_size, 0, MAX_QUEUE_SIZE_LIMIT)
    if not isinstance(parms, ServiceParms):
        raise ModelError(f"service parameters must be ServiceParms, got {type(parms).__name__}")
    if not isinstance(request, RequestSize):
        raise ModelError(f"request size must be RequestSize, got {type(request).__name__}")
    alpha = _check_number("alpha", parms.alpha)
    beta = _check_number("beta", parms.beta)
    gamma = _check_number("gamma", parms.gamma)
    delta = _check_number("delta", parms.delta)
    l_in = _check_number("avgInputTokens", request.avg_input_tokens)
    l_out = _check_number("avgOutputTokens", request.avg_output_tokens, 1.0)

    # Decode steps per request: one per output token after the first (one if decode-only, 1 token).
    steps = 1.0 if (l_in == 0.0 and l_out == 1.0) else l_out - 1.0
    # A request's service time when the batch holds b requests is a + s·b (ms), so μ_b = b / (a + s·b)
    # is non-decreasing in b and μ_N is the largest service rate.
    a = (gamma if l_in > 0.0 else 0.0) + steps * alpha
    s = (delta * l_in if l_in > 0.0 else 0.0) + steps * beta
    if not (a + s > 0.0 and a + s * n_max < math.inf):
        raise ModelError(
            "the service time is zero or not finite for these parameters and token counts "
            f"(alpha={alpha:g}, beta={beta:g}, gamma={gamma:g}, delta={delta:g}, "
            f"input={l_in:g}, output={l_out:g} tokens)"
        )
    inv_mu_1 = a + s  # 1/μ_1 (ms)
    inv_mu_n = a / n_max + s  # 1/μ_N (ms)
    return _Server(
        n=n_max,
        q=q_max,
        alpha=alpha,
        beta=beta,
        gamma=gamma,
        l_in=l_in,
        l_out=l_out,
        a=a,
        s=s,
        slope=delta * l_in,
        c0=gamma + alpha * (l_out - 1.0),
        c1=delta * l_in + beta * (l_out - 1.0),
        inv_mu_1=inv_mu_1,
        inv_mu_n=inv_mu_n,
        lam_lo=EPSILON / inv_mu_1,
        lam_hi=(1.0 - EPSILON) / inv_mu_n,
    )


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
        "_gamma",
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
        "_prefill_slope",
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
        server = _server(max_batch_size, max_queue_size, parms, request)
        n_max = server.n
        self.max_batch_size = n_max
        self.max_queue_size = server.q
        self.parms = parms
        self.request = request
        self._alpha, self._beta, self._gamma = server.alpha, server.beta, server.gamma
        self._l_in, self._l_out = server.l_in, server.l_out
        self._prefill_slope = server.slope
        self._inv_mu_n = server.inv_mu_n
        self._lam_lo = server.lam_lo
        self._lam_hi = server.lam_hi
        self.rate_range = (self._lam_lo * 1000.0, self._lam_hi * 1000.0)
        self._c0, self._c1 = server.c0, server.c1
        self._size_memo: OrderedDict[TargetPerf, SizeResult | str] = OrderedDict()
        # Head of the chain: state i <= N has weight w_i = Π_{j<=i} λ/μ_j (w_0 = 1). Small batches use a
        # plain loop over this list; the numpy forms are built on first use (at once for larger batches).
        a, s = server.a, server.s
        self._a, self._s = a, s
        self._inv_mu_list: list[float] | None = None
        self._inv_mu: _FloatArray | None = None
        self._idx1: _FloatArray | None = None
        self._moments: _FloatArray | None = None
        self._log_mu_prod: _FloatArray | None = None
        if n_max <= _PY_LOOP_LIMIT:
            self._inv_mu_list = [a / b + s for b in range(1, n_max + 1)]
        else:
            inv_mu = self._numpy_arrays()[0]
            # The weights grow with λ, so those at λmax bound them all; plain products are used unless
            # they could overflow there, in which case the weights are computed in log space.
            if n_max * math.log(server.inv_mu_1 / server.inv_mu_n) > _LOG_SAFE:
                log_inv_mu = np.log(inv_mu)
                if float(np.cumsum(math.log(self._lam_hi) + log_inv_mu).max()) > _LOG_SAFE:
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
        z_head, a_head, w_n = self._head(lam)
        n_max = self.max_batch_size
        q = self.max_queue_size
        # Geometric tail, states N+j for j = 1..Q: weight w_N·r^j with r = λ/μ_N < 1 on the rate range.
        r = lam * self._inv_mu_n
        r_q = r**q
        omr = 1.0 - r
        w_g1 = w_n * r * (1.0 - r_q) / omr  # w_N Σ r^j
        w_g2 = w_n * r * (1.0 - r_q - q * r_q * omr) / (omr * omr)  # w_N Σ j·r^j
        z = z_head + w_g1
        xput = lam * (1.0 - w_n * r_q / z)  # X = λ (1 - p_K)
        n_serv = (a_head + n_max * w_g1) / z  # Σ_{i<=N} i·p_i + N·Σ_{i>N} p_i
        serv = n_serv / xput
        wait = w_g2 / z / xput  # Σ_{i>N} (i-N)·p_i / X, without the cancellation of T - S
        # Effective concurrency as WVA: the batch size that explains the mean service time. Where the
        # service time does not depend on the batch (c1 = 0) WVA divides by zero; we use L_serv.
        n_eff = (serv - self._c0) / self._c1 if self._c1 > 0.0 else n_serv
        n_eff = min(max(n_eff, 0.0), float(n_max))
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
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate):
            raise ModelError(f"invalid request rate {rate!r}")
        if rate <= 0.0:
            raise ModelError(f"invalid request rate {rate:g} req/s: must be > 0")
        if rate > self.rate_range[1]:
            raise ModelError(f"rate={rate:g} req/s exceeds the max allowed rate {self.rate_range[1]:g} req/s")
        return float(rate)

    def _metrics(self, pt: _Point) -> AnalysisMetrics:
        n_serv = pt[_NSERV]
        return AnalysisMetrics(
            throughput=pt[_XPUT] * 1000.0,
            avg_resp_time=pt[_RESP],
            avg_wait_time=pt[_WAIT],
            avg_num_in_serv=n_serv,
            avg_prefill_time=pt[_PREFILL],
            ttft=pt[_TTFT],
            itl=pt[_ITL],
            rho=min(max(n_serv / self.max_batch_size, 0.0), 1.0),
            max_rate=self.rate_range[1],
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
        memo = self._size_memo.get(targets)
        if memo is None:
            if not isinstance(targets, TargetPerf):
                raise ModelError(f"targets must be TargetPerf, got {type(targets).__name__}")
            memo = self._size(targets)
            self._size_memo[targets] = memo
            if len(self._size_memo) > self._SIZE_MEMO_LIMIT:
                self._size_memo.popitem(last=False)
        if isinstance(memo, str):
            raise InfeasibleError(memo)
        return memo

    def _size(self, targets: TargetPerf) -> SizeResult | str:
        ttft_target = _check_number("TTFT target", targets.ttft)
        itl_target = _check_number("ITL target", targets.itl)
        tps_target = _check_number("TPS target", targets.tps)
        lam_hi = self._lam_hi
        lam_ttft = lam_itl = lam_hi
        points: list[_Point] = []  # every solved point, to reuse for the final metrics
        if ttft_target > 0.0 or itl_target > 0.0:
            # Both ends (WVA's end-point rules need them) and a few rates in between, shared by the searches.
            mu_n = 1.0 / self._inv_mu_n
            points = [
                self._solve(self._lam_lo),
                *(self._solve(t * mu_n) for t in _PROBES),
                self._solve(lam_hi),
            ]
            for field, label, target in ((_TTFT, "TTFT", ttft_target), (_ITL, "ITL", itl_target)):
                if target <= 0.0:
                    continue
                outcome = _classify(label, target, points[0][field], points[-1][field])
                if isinstance(outcome, str):
                    return outcome
                if outcome < 0:
                    lam = self._lam_lo
                elif outcome > 0:
                    lam = lam_hi
                else:
                    lam = self._root(field, target, points)[0]
                if field == _TTFT:
                    lam_ttft = lam
                else:
                    lam_itl = lam
        lam_tps = lam_hi * (1.0 - STABILITY_SAFETY_FRACTION) if tps_target > 0.0 else lam_hi
        lam_star = min(lam_ttft, lam_itl, lam_tps)
        point = next((pt for pt in points if pt[0] == lam_star), None) or self._solve(lam_star)
        metrics = self._metrics(point)
        return SizeResult(
            rate_target_ttft=lam_ttft * 1000.0,
            rate_target_itl=lam_itl * 1000.0,
            rate_target_tps=lam_tps * 1000.0,
            max_rate=lam_star * 1000.0,
            metrics=metrics,
            ttft=metrics.ttft,
            itl=metrics.itl,
            tps=metrics.throughput * self._l_out,
        )

    def _root(self, field: int, target: float, points: list[_Point]) -> _Point:
        """The solved point strictly inside the rate range where output ``field`` equals ``target``.

        ``points`` are solved points in increasing rate, the first and last at the ends of the range,
        whose outputs straddle the target; the points solved here are added to it, so that a second search
        starts from a tighter bracket. The root is bracketed between two neighbours and refined by
        Chandrupatla's method (inverse quadratic interpolation, bisection when that is not trusted) until
        the output is within ``_ROOT_TOLERANCE`` (relative) of the target or the bracket is 1e-10 wide
        (relative). Where the output is positive this runs on log(rate) and log(output): queueing delay
        grows like a power of the rate, which is close to a straight line there.
        """
        fs = [pt[field] for pt in points]
        sign = 1.0 if fs[-1] > fs[0] else -1.0
        k = 1
        while (fs[k] - target) * sign <= 0.0:
            k += 1
        log = math.log
        use_log = fs[k - 1] > 0.0 and fs[k] > 0.0
        if use_log:
            log_target = log(target)
            a, b = log(points[k][0]), log(points[k - 1][0])
            fa, fb = (log(fs[k]) - log_target) * sign, (log(fs[k - 1]) - log_target) * sign
            resolution = 1e-10
        else:
            log_target = 0.0
            a, b = points[k][0], points[k - 1][0]
            fa, fb = (fs[k] - target) * sign, (fs[k - 1] - target) * sign
            resolution = 1e-10 * a
        tolerance = _ROOT_TOLERANCE * abs(target)
        # Chandrupatla (1997): a is the latest point, b the other end of the bracket, c the previous a.
        # The first step interpolates through a third known point where that is safe, else the secant.
        j = k + 1 if k + 1 < len(points) else k - 2
        if j >= 0 and fs[j] > 0.0 if use_log else j >= 0:
            c = log(points[j][0]) if use_log else points[j][0]
            fc = (log(fs[j]) - log_target) * sign if use_log else (fs[j] - target) * sign
            t = _chandrupatla_step((a, fa), (b, fb), (c, fc))
        else:
            c, fc = a, fa
            t = math.nan
        if math.isnan(t):
            t = fa / (fa - fb) if math.isfinite(fb) else 0.5
            t = min(max(t, 1e-9), 1.0 - 1e-9)
        solved: list[_Point] = []
        for _ in range(_MAX_ROOT_STEPS):
            # Never step less than half the resolution from a, so that the bracket keeps shrinking.
            floor = min(0.5 * resolution / abs(b - a), 0.5)
            u = a + min(max(t, floor), 1.0 - floor) * (b - a)
            pt = self._solve(math.exp(u) if use_log else u)
            solved.append(pt)
            fx = pt[field]
            if abs(fx - target) <= tolerance:
                break
            if use_log:
                gx = (log(fx) - log_target) * sign if fx > 0.0 else -math.inf
            else:
                gx = (fx - target) * sign
            if (gx > 0.0) == (fa > 0.0):
                c, fc = a, fa
            else:
                c, fc = b, fb
                b, fb = a, fa
            a, fa = u, gx
            if abs(b - a) <= resolution:
                break
            t = _chandrupatla_step((a, fa), (b, fb), (c, fc))
            if math.isnan(t):
                t = 0.5
        else:  # pragma: no cover - the bracket reaches the resolution long before
            solved.sort(key=lambda pt: abs(pt[field] - target), reverse=True)  # the best one last
        points.extend(solved)
        points.sort()
        return solved[-1]


def _chandrupatla_step(pa: tuple[float, float], pb: tuple[float, float], pc: tuple[float, float]) -> float:
    """Chandrupatla's inverse quadratic step from ``a`` towards ``b`` (as a fraction of ``b - a``), given
    the points ``(x, g(x))`` a, b, c, or NaN where they do not make it safe (then bisect)."""
    (a, fa), (b, fb), (c, fc) = pa, pb, pc
    if c in (a, b) or fc in (fa, fb) or fa == fb:
        return math.nan
    xi = (a - b) / (c - b)
    phi = (fa - fb) / (fc - fb)
    if not (phi * phi < xi and (1.0 - phi) * (1.0 - phi) < 1.0 - xi):
        return math.nan
    t = fa / (fb - fa) * fc / (fb - fc) + (c - a) / (b - a) * fa / (fc - fa) * fb / (fc - fb)
    return min(max(t, 1e-9), 1.0 - 1e-9)


def _classify(label: str, target: float, f_lo: float, f_hi: float) -> int | str:
    """WVA's end-point rules for one search: -1 (the root is λmin), +1 (take λmax), 0 (a root inside),
    or the reason the target is unreachable.

    A flat function (equal ends, e.g. ITL with β = 0 or a batch of 1) is met at every rate or at none; WVA
    calls every such target "below" (infeasible) unless float32 noise says otherwise. See docs/analyzer.md.
    """
    if abs(f_hi - f_lo) <= _FLAT_TOLERANCE * max(abs(f_lo), abs(f_hi)):
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
