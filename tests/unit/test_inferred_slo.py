"""WVA's ``sloMultiplier``: SLOs inferred from a profile load one replica to ``1 − 1/k`` of its capacity."""

from __future__ import annotations

import math

import pytest

from variant_autoscaler.core.analyzer import Load, size_allocation
from variant_autoscaler.core.inferred_slo import infer_slo
from variant_autoscaler.core.model import Profile
from variant_autoscaler.core.queueing import QueueAnalyzer, RequestSize, ServiceParms
from variant_autoscaler.errors import ModelError

A100 = Profile("A100", 1, 64, ServiceParms(alpha=20.58, beta=0.41, gamma=20.58, delta=0.041))
L40S = Profile("L40S", 1, 32, ServiceParms(alpha=34.0, beta=0.9, gamma=40.0, delta=0.09))


def _capacity(profile: Profile, lin: float, lout: float, batch: int | None = None) -> float:
    n = batch or profile.max_batch_size
    return QueueAnalyzer(n, None, profile.parms, RequestSize(lin, lout)).rate_range[1]


@pytest.mark.parametrize("profile", [A100, L40S], ids=lambda p: p.accelerator)
@pytest.mark.parametrize("k", [1.25, 2.0, 3.0, 10.0])
@pytest.mark.parametrize(("lin", "lout"), [(128.0, 64.0), (1024.0, 256.0)])
def test_sizing_to_the_inferred_slos_loads_each_replica_to_one_minus_one_over_k(
    profile: Profile, k: float, lin: float, lout: float
) -> None:
    inferred = infer_slo(profile, k, lin, lout)
    assert inferred.utilisation == pytest.approx(1 - 1 / k)
    assert inferred.slo.ttft > 0 and inferred.slo.itl > 0 and not inferred.slo.is_tail
    sized = size_allocation(
        accelerator=profile.accelerator,
        unit_cost=1.0,
        acc_count=1,
        parms=profile.parms,
        max_batch_size=profile.max_batch_size,
        load=Load(600.0, lin, lout),
        slo=inferred.slo,
    )
    share = sized.max_rate_per_replica / _capacity(profile, lin, lout)
    # Targets are rounded up to 3 significant digits: never below 1 - 1/k, and barely above it.
    assert 1 - 1 / k - 1e-6 <= share <= (1 - 1 / k) + 0.02
    assert sized.replicas == math.ceil(10.0 / sized.max_rate_per_replica)


def test_a_larger_k_allows_more_latency_and_the_servers_batch_is_used() -> None:
    loose, tight = infer_slo(A100, 10.0, 512, 256), infer_slo(A100, 1.5, 512, 256)
    assert loose.slo.ttft > tight.slo.ttft and loose.slo.itl > tight.slo.itl
    small = infer_slo(A100, 3.0, 512, 256, max_batch_size=8)
    assert small.slo.itl < infer_slo(A100, 3.0, 512, 256).slo.itl  # a smaller batch: shorter steps
    assert "67 % of what one A100 replica sustains" in infer_slo(A100, 3.0, 512, 256).describe()


@pytest.mark.parametrize(
    ("k", "lin", "lout", "message"),
    [
        (1.0, 512.0, 256.0, "greater than 1"),
        (math.nan, 512.0, 256.0, "greater than 1"),
        (3.0, 0.0, 256.0, "mean input length"),
        (3.0, 512.0, math.inf, "mean output length"),
    ],
)
def test_unusable_inputs_are_refused(k: float, lin: float, lout: float, message: str) -> None:
    with pytest.raises(ModelError, match=message):
        infer_slo(A100, k, lin, lout)
