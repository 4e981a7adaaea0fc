"""Replicas that decode slower than their peers: a degraded node (a throttled GPU, a failing link), shown.

The autoscaler cannot move a pod off a slow node (placement is the scheduler's), and adding replicas
does not help their requests: a replica whose every step is half again as long misses an ITL target at
any batch. What it can do is say so. Per cycle, each pod's mean inter-token latency is compared with
what the variant's decode line (``α + β·b``, learned or written) gives at the batch that pod ran, and
that ratio with the median of the same ratio over the variant's *other* pods: a pod at least
:data:`SLOW_RATIO` times its peers' is slow. The peers, not the line alone, are the reference: a profile
that is off moves every pod's ratio alike, and a learned line includes the slow pod's own windows.

Pure: the pod windows of :mod:`variant_autoscaler.core.estimator`, nothing else.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from variant_autoscaler.core.estimator import PodWindow, decode_batch

__all__ = [
    "MIN_DECODE_TOKENS",
    "SLOW_RATIO",
    "SlowReplica",
    "SlowReplicas",
    "from_status",
    "slow_replicas",
    "to_status",
]

#: A pod whose decode steps are this many times its peers' (at the same batch) is reported slow.
SLOW_RATIO = 1.3
#: Windows with fewer decoded tokens than this are too few to judge a pod by.
MIN_DECODE_TOKENS = 200.0
#: At most this many slow pods are listed in the status (the slowest first).
LISTED = 10


@dataclass(frozen=True, slots=True)
class SlowReplica:
    """A pod that decodes ``ratio`` times slower than its peers: its mean ITL ``itl_ms`` against the
    ``expected_ms`` its peers' steps would give at its batch."""

    pod: str
    ratio: float
    itl_ms: float
    expected_ms: float

    def describe(self) -> str:
        return (
            f"pod {self.pod} decodes {self.ratio:.2f}× slower than its peers at the same batch (mean ITL "
            f"{self.itl_ms:.1f} ms where theirs would be {self.expected_ms:.1f} ms): its node may be "
            "degraded; more replicas do not help its requests (see docs/troubleshooting.md)"
        )


@dataclass(frozen=True, slots=True)
class SlowReplicas:
    """This cycle's verdict: the slow pods (slowest first) and every pod that could be judged."""

    slow: tuple[SlowReplica, ...] = ()
    judged: frozenset[str] = frozenset()


def slow_replicas(
    windows: Sequence[PodWindow],
    alpha: float | None,
    beta: float | None,
    max_batch: int | None,
    *,
    ratio: float = SLOW_RATIO,
) -> SlowReplicas:
    """The variant's pods that decode at least ``ratio`` times slower than the median of the others;
    none judged when fewer than two pods decoded enough to compare or the line is unknown."""
    if alpha is None or beta is None or not alpha + beta > 0:
        return SlowReplicas()
    best: dict[str, PodWindow] = {}
    for w in windows:
        if (
            w.itl_ms is not None
            and math.isfinite(w.itl_ms)
            and w.itl_ms > 0
            and w.running is not None
            and math.isfinite(w.running)
            and w.running > 0
            and w.decode_tokens >= MIN_DECODE_TOKENS
        ):
            known = best.get(w.pod)
            if known is None or w.decode_tokens > known.decode_tokens:
                best[w.pod] = w
    measured: dict[str, tuple[float, float]] = {}  # pod -> (ITL, the line's ITL at its batch)
    for pod, w in best.items():
        assert w.running is not None
        line = alpha + beta * decode_batch(w.running, max_batch, alpha, beta, w.dispersion)
        assert w.itl_ms is not None
        if line > 0:
            measured[pod] = (w.itl_ms, line)
    if len(measured) < 2:
        return SlowReplicas()
    relative = {pod: itl / line for pod, (itl, line) in measured.items()}
    out = []
    for pod, mine in relative.items():
        peers = statistics.median(r for other, r in relative.items() if other != pod)
        if peers > 0 and mine >= ratio * peers:
            itl, line = measured[pod]
            out.append(SlowReplica(pod, mine / peers, itl, line * peers))
    return SlowReplicas(tuple(sorted(out, key=lambda s: (-s.ratio, s.pod))), frozenset(measured))


def to_status(
    verdict: SlowReplicas, stored: Sequence[Mapping[str, Any]], judged_at: str, keep_after: str
) -> list[dict[str, Any]] | None:
    """The ``status.learnedProfile.slowReplicas`` list (None: none, the key cleared): this cycle's slow
    pods, and those listed before that could not be judged this cycle (idle, say) while they were last
    judged at ``keep_after`` or later (a pod gone for longer is dropped)."""
    fresh = [
        {"pod": s.pod[:253], "ratio": f"{min(s.ratio, 999.0):.2f}", "itlMs": f"{min(s.itl_ms, 1e9):.1f}",
         "judgedTime": judged_at}
        for s in verdict.slow
    ]  # fmt: skip
    kept = [
        dict(e)
        for e in stored
        if e["pod"] not in verdict.judged and str(e.get("judgedTime") or "") >= keep_after
    ]
    out = (fresh + kept)[:LISTED]
    return out or None


def from_status(stored: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The entries the stored status listed as slow (those with a pod name)."""
    listed = (stored or {}).get("slowReplicas")
    if not isinstance(listed, list):
        return []
    return [e for e in listed if isinstance(e, Mapping) and isinstance(e.get("pod"), str)]
