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
  tighter than WVA's bisection (1e-6 on the target, up to 100 sequential steps);
* :class:`QueueBatch` (and :func:`size_batch`) does the same for many servers at once with numpy: the
  chain at many (server, rate) rows per pass, all the root searches refined together. QueueAnalyzer
  stays the reference; the tests compare the two.
"""

from __future__ import annotations

import functools
import itertools
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

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
    "BatchMetrics",
    "BatchSize",
    "InfeasibleError",
    "ModelError",
    "QueueAnalyzer",
    "QueueBatch",
    "RequestSize",
    "ServerInputs",
    "ServiceParms",
    "SizeResult",
    "TargetPerf",
    "cached_analyzer",
    "size_batch",
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
    """Performance targets: TTFT and ITL in ms (upper bounds), TPS in tokens/s; 0 means no target.

    ``ttft_percentile`` (ours): 0 means the TTFT target bounds the mean TTFT (WVA's meaning); a value in
    (0, 100) makes it bound that percentile of the TTFT of admitted requests instead (see
    :meth:`QueueAnalyzer.ttft_percentile`).
    """

    ttft: float = 0.0
    itl: float = 0.0
    tps: float = 0.0
    ttft_percentile: float = 0.0


class AnalysisMetrics(NamedTuple):
    """Predicted steady-state behaviour of one server at one request rate.

    ``throughput`` and ``max_rate`` in requests/s (``max_rate`` is the top of the rate range), times in ms,
    ``avg_num_in_serv`` in requests, ``rho`` the mean batch occupancy ``avg_num_in_serv / N`` in [0, 1].
    An immutable named tuple rather than a frozen dataclass: a sizing builds one, and a frozen dataclass
    takes five times as long to build.
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


class SizeResult(NamedTuple):
    """Largest request rate (req/s) meeting each target, the overall maximum, and the metrics there.

    ``ttft``, ``itl`` (ms) and ``tps`` (tokens/s) are the values achieved at ``max_rate``; with a TTFT
    percentile target, ``ttft_at_percentile`` is that percentile of TTFT there (else None). Immutable
    (a named tuple, like :class:`AnalysisMetrics`): results are memoised and shared.
    """

    rate_target_ttft: float
    rate_target_itl: float
    rate_target_tps: float
    max_rate: float
    metrics: AnalysisMetrics
    ttft: float
    itl: float
    tps: float
    ttft_at_percentile: float | None = None


def _check_number(name: str, value: object, minimum: float = 0.0) -> float:
    """``value`` as a float, or :class:`ModelError` unless it is a finite number >= ``minimum``."""
    if type(value) is float and minimum <= value < math.inf:
        return value  # the common case, without the slower checks below
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ModelError(f"{name} must be a number, got {value!r}")
    if not minimum <= value < math.inf or value > sys.float_info.max:
        raise ModelError(f"{name} must be a finite number >= {minimum:g}, got {value!r}")
    return float(value)


def _check_int(name: str, value: object, minimum: int, maximum: int) -> int:
    if type(value) is int and minimum <= value <= maximum:
        return value  # the common case, without the slower checks
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelError(f"{name} must be an integer, got {value!r}")
    if not minimum <= value <= maximum:
        raise ModelError(f"{name} must be between {minimum} and {maximum}, got {value}")
    return value


def _rate_error(rate: float, max_rate: float) -> str | None:
    """Why ``rate`` (req/s) cannot be analysed on a server whose range ends at ``max_rate``, or None."""
    if not math.isfinite(rate):
        return f"invalid request rate {rate!r}"
    if rate <= 0.0:
        return f"invalid request rate {rate:g} req/s: must be > 0"
    if rate > max_rate:
        return f"rate={rate:g} req/s exceeds the max allowed rate {max_rate:g} req/s"
    return None


def _within(value: float, target: float, tolerance: float) -> bool:
    """WVA's ``WithinTolerance``: equal, or relatively within ``tolerance`` of a non-zero target."""
    if value == target:
        return True
    if target == 0.0 or tolerance < 0.0:
        return False
    return abs((value - target) / target) <= tolerance


# A solved point: (λ, X, T, W, L_serv, prefill, TTFT, ITL), λ and X in req/ms, times in ms.
_Point = tuple[float, float, float, float, float, float, float, float]
_LAM, _XPUT, _RESP, _WAIT, _NSERV, _PREFILL, _TTFT, _ITL = range(8)

#: Batch sizes up to this solve a single rate with a plain Python loop (cheaper than numpy calls).
_PY_LOOP_LIMIT = 32
#: Largest log-weight for which plain products are used: e^600 leaves room for the sums over 65537 states
#: and the queue tail (a factor below 1e12) before reaching the float maximum (about e^709).
_LOG_SAFE = 600.0
#: Safety bound on the refinement steps of one root search (about 10 are typical, 30 the worst seen).
_MAX_ROOT_STEPS = 100
#: Rates probed before the root searches, as fractions of μ_N (the ends of the range only where needed).
_PROBE_LOW, _PROBE_HIGH = 0.3, 0.7


class _Server(NamedTuple):
    """The validated inputs of one server and the constants derived from them (times in ms, λ in req/ms)."""

    n: int  # maximum batch size N
    q: int  # maximum queue size Q
    alpha: float
    beta: float
    gamma: float
    delta: float
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
    if type(max_batch_size) is int and 1 <= max_batch_size <= MAX_BATCH_SIZE_LIMIT:
        n_max = max_batch_size  # the common case, without the call
    else:
        n_max = _check_int("maxBatchSize", max_batch_size, 1, MAX_BATCH_SIZE_LIMIT)
    if max_queue_size is None:
        q_max = QUEUE_TO_BATCH_RATIO * n_max
    else:
        q_max = _check_int("maxQueueSize", max_queue_size, 0, MAX_QUEUE_SIZE_LIMIT)
    if type(parms) is not ServiceParms and not isinstance(parms, ServiceParms):
        raise ModelError(f"service parameters must be ServiceParms, got {type(parms).__name__}")
    if type(request) is not RequestSize and not isinstance(request, RequestSize):
        raise ModelError(f"request size must be RequestSize, got {type(request).__name__}")
    alpha, beta, gamma, delta = parms.alpha, parms.beta, parms.gamma, parms.delta
    l_in, l_out = request.avg_input_tokens, request.avg_output_tokens
    inf = math.inf
    # Token counts are often whole numbers; valid ones become floats here, anything else is left to the
    # checks below (whose messages quote the value as given).
    if type(l_in) is int and type(l_out) is int and 0 <= l_in < 1 << 62 and 1 <= l_out < 1 << 62:
        l_in, l_out = float(l_in), float(l_out)
    if not (  # the checks below, at a glance, for the common case (floats in range)
        type(alpha) is float
        and type(beta) is float
        and type(gamma) is float
        and type(delta) is float
        and type(l_in) is float
        and type(l_out) is float
        and 0.0 <= alpha < inf
        and 0.0 <= beta < inf
        and 0.0 <= gamma < inf
        and 0.0 <= delta < inf
        and 0.0 <= l_in < inf
        and 1.0 <= l_out < inf
    ):
        alpha = _check_number("alpha", alpha)
        beta = _check_number("beta", beta)
        gamma = _check_number("gamma", gamma)
        delta = _check_number("delta", delta)
        l_in = _check_number("avgInputTokens", l_in)
        l_out = _check_number("avgOutputTokens", l_out, 1.0)

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
    # tuple.__new__ takes the fields as one tuple, in order: faster than the named tuple's __new__.
    return tuple.__new__(
        _Server,
        (
            n_max,
            q_max,
            alpha,
            beta,
            gamma,
            delta,
            l_in,
            l_out,
            a,
            s,
            delta * l_in,  # slope
            gamma + alpha * (l_out - 1.0),  # c0
            _slope_c1(gamma + alpha * (l_out - 1.0), delta * l_in + beta * (l_out - 1.0), n_max),  # c1
            inv_mu_1,
            inv_mu_n,
            EPSILON / inv_mu_1,  # lam_lo
            (1.0 - EPSILON) / inv_mu_n,  # lam_hi
        ),
    )


_C1_RESOLUTION = 1e-9


def _slope_c1(c0: Any, c1: Any, n_max: Any) -> Any:
    """The service time's growth per request in the batch, ``c1`` of ``S = c0 + c1·n_eff``; 0 where it
    is lost in the rounding of ``S`` (e.g. 1 + 1e-16 output tokens and no prefill slope), so that
    ``n_eff = (S − c0)/c1`` never divides rounding noise by a negligible slope (the case WVA divides
    0 by 0, handled by taking the mean number in service)."""
    negligible = c1 * n_max <= _C1_RESOLUTION * (abs(c0) + c1 * n_max)
    if isinstance(negligible, np.ndarray):
        return np.where(negligible, 0.0, c1)
    return 0.0 if negligible else c1


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
        from scipy.special import gammaincc  # only for percentile targets

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
