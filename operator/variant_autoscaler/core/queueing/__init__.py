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

from variant_autoscaler.core.queueing.batch import (
    BatchMetrics,
    BatchSize,
    QueueBatch,
    ServerInputs,
    size_batch,
)
from variant_autoscaler.core.queueing.scalar import QueueAnalyzer, cached_analyzer
from variant_autoscaler.core.queueing.server import (
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
)
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
