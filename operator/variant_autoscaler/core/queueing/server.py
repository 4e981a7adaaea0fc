"""The queueing model's inputs and results, and one server's constants (shared by the scalar analyzer and
its numpy twin); the model itself is described in :mod:`variant_autoscaler.core.queueing`."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from variant_autoscaler.errors import ModelError

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
