"""Replicas slower than their peers: a degraded node (a throttled GPU, a failing link), shown.

The autoscaler cannot move a pod off a slow node (placement is the scheduler's), and adding replicas
does not help their requests: a replica whose every step is half again as long misses an ITL target at
any batch. What it can do is say so. Per cycle, each pod's mean time in service per request is read
from the same windows as profile learning, by Little's law (the requests it held on average over the
requests it took per second), and compared with the median of the variant's *other* pods: a pod whose
requests spend at least :data:`SLOW_RATIO` times as long as its peers', while it takes no more than
:data:`LOAD_SLACK` times their request rate, is slow. Peers serve the same mix of requests, so the
comparison needs no profile; the load bound keeps a pod that is merely busier (uneven routing, long
sessions pinned to it) from being taken for a slow one. (A comparison of each pod's ITL with the decode
line at its batch was tried first and dropped: the learned line includes the slow pod's own windows, so
a pod decoding 1.5 times slower read 1.1-1.2 times its peers, and its peers sometimes more.)

A pod reported slow is back in line only once its ratio falls under :data:`RECOVERED_RATIO` in a cycle
that judges it (busier than its peers for a cycle, it stays listed), so the Events do not flap.
Measured on emulated replicas (``bench/profile_learning.py``'s six cases, 5 seeds, 10 minutes each,
load moving between 20 and 90 %, the profile-learning windows of every cycle): with all pods alike no
pod was ever reported (the largest ratio 1.30); with one pod's engine 1.5 times slower (all four step
costs) it was reported in all 30 runs, in the first cycle (28) or the second (2), never another pod, and
never reported back in line (its ratio 1.41-5.15 over the cycles).

Pure: the pod windows of :mod:`variant_autoscaler.core.estimator`, nothing else.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from variant_autoscaler.core.estimator import PodWindow

__all__ = [
    "LOAD_SLACK",
    "MIN_REQUESTS",
    "RECOVERED_RATIO",
    "SLOW_RATIO",
    "SlowReplica",
    "SlowReplicas",
    "from_status",
    "slow_replicas",
    "to_status",
]

#: A pod whose requests spend this many times as long in service as its peers' is reported slow.
SLOW_RATIO = 1.4
#: ... unless it takes more than this many times their request rate (then it is busier, not slower).
LOAD_SLACK = 1.25
#: A pod reported slow is back in line once its ratio falls below this (hysteresis: no flapping).
RECOVERED_RATIO = 1.2
#: Windows with fewer finished prefills than this are too few to judge a pod by.
MIN_REQUESTS = 20.0
#: At most this many slow pods are listed in the status (the slowest first).
LISTED = 10


@dataclass(frozen=True, slots=True)
class SlowReplica:
    """A pod whose requests spend ``ratio`` times as long in service as its peers': ``seconds`` on it
    against ``peers_seconds`` on the others (medians)."""

    pod: str
    ratio: float
    seconds: float
    peers_seconds: float

    def describe(self) -> str:
        return (
            f"pod {self.pod}: its requests spend {self.ratio:.2f}× as long in service as on its peers at "
            f"no more load ({self.seconds:.1f} s against {self.peers_seconds:.1f} s): its node may be "
            "degraded; more replicas do not help its requests (see docs/troubleshooting.md)"
        )


@dataclass(frozen=True, slots=True)
class SlowReplicas:
    """This cycle's verdict: the slow pods (slowest first), and each judged pod's ratio to its peers."""

    slow: tuple[SlowReplica, ...] = ()
    ratios: Mapping[str, float] = field(default_factory=dict)

    @property
    def judged(self) -> frozenset[str]:
        return frozenset(self.ratios)

    def recovered(self, pod: str) -> bool:
        """Whether ``pod``, reported slow before, was judged this cycle and is back in line."""
        ratio = self.ratios.get(pod)
        return ratio is not None and ratio < RECOVERED_RATIO


def slow_replicas(
    windows: Sequence[PodWindow], *, ratio: float = SLOW_RATIO, load_slack: float = LOAD_SLACK
) -> SlowReplicas:
    """The variant's pods whose requests spend at least ``ratio`` times as long in service as the
    median of the others', at no more than ``load_slack`` times their request rate; none judged when
    fewer than two pods finished enough requests to compare."""
    best: dict[str, PodWindow] = {}
    for w in windows:
        if (
            w.running is not None
            and math.isfinite(w.running)
            and w.running > 0
            and w.requests >= MIN_REQUESTS
            and w.seconds > 0
        ):
            known = best.get(w.pod)
            if known is None or w.requests > known.requests:
                best[w.pod] = w
    rates = {pod: w.requests / w.seconds for pod, w in best.items()}
    spent = {pod: float(w.running or 0.0) / rates[pod] for pod, w in best.items()}  # Little's law
    if len(spent) < 2:
        return SlowReplicas()
    out, ratios = [], {}
    for pod, mine in spent.items():
        others = [other for other in spent if other != pod]
        peers = statistics.median(spent[o] for o in others)
        if not peers > 0:
            continue
        ratios[pod] = mine / peers
        load = statistics.median(rates[o] for o in others)
        if mine >= ratio * peers and rates[pod] <= load_slack * load:
            out.append(SlowReplica(pod, mine / peers, mine, peers))
    return SlowReplicas(tuple(sorted(out, key=lambda s: (-s.ratio, s.pod))), ratios)


def to_status(
    verdict: SlowReplicas, stored: Sequence[Mapping[str, Any]], judged_at: str, keep_after: str
) -> list[dict[str, Any]] | None:
    """The ``status.learnedProfile.slowReplicas`` list (None: none, the key cleared): this cycle's slow
    pods; those listed before that were judged again and are not back in line (under
    :data:`RECOVERED_RATIO`: busier than their peers this cycle, say); and those not judged this cycle
    (idle, say) while they were last judged at ``keep_after`` or later (a pod gone longer is dropped)."""
    fresh = [
        {"pod": s.pod[:253], "ratio": f"{min(s.ratio, 999.0):.2f}",
         "serviceSeconds": f"{min(s.seconds, 1e9):.2f}", "judgedTime": judged_at}
        for s in verdict.slow
    ]  # fmt: skip
    found = {s.pod for s in verdict.slow}
    kept = []
    for e in stored:
        pod = str(e["pod"])
        if pod in found or verdict.recovered(pod):
            continue
        if pod in verdict.ratios:  # judged, still out of line: its newest figures
            ratio = verdict.ratios[pod]
            kept.append({**e, "ratio": f"{min(ratio, 999.0):.2f}", "judgedTime": judged_at})
        elif str(e.get("judgedTime") or "") >= keep_after:
            kept.append(dict(e))
    out = (fresh + kept)[:LISTED]
    return out or None


def from_status(stored: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The entries the stored status listed as slow (those with a pod name)."""
    listed = (stored or {}).get("slowReplicas")
    if not isinstance(listed, list):
        return []
    return [e for e in listed if isinstance(e, Mapping) and isinstance(e.get("pod"), str)]
