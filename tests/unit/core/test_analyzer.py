"""Sizing of one variant on one accelerator (WVA's CreateAllocation, wva.md §5.7 and §9)."""

from __future__ import annotations

import math

import pytest

from variant_autoscaler.core.analyzer import SLO, Load, Sizing, size_allocation
from variant_autoscaler.core.queueing import QueueAnalyzer, RequestSize, ServiceParms, TargetPerf
from variant_autoscaler.errors import InfeasibleError, ModelError

# pkg/core/allocation_test.go: perf N=16, α=5, β=2, γ=10, δ=1.5, TTFT 100 / ITL 50, in 100 / out 200.
ALLOC_TEST = ServiceParms(alpha=5.0, beta=2.0, gamma=10.0, delta=1.5)
ALLOC_SLO = SLO(ttft=100.0, itl=50.0)
# internal/optimizer/optimizer_test.go: meta/llama0-70b on A100, Premium (ITL 80 / TTFT 500), cost 40.
LLAMA_A100 = ServiceParms(alpha=20.28, beta=0.72, gamma=0.0, delta=0.0)
BENCH = ServiceParms(alpha=20.58, beta=0.41, gamma=20.58, delta=0.041)


def allocate(**overrides: object) -> Sizing:
    kwargs: dict[str, object] = {
        "accelerator": "test-gpu",
        "unit_cost": 100.0,
        "acc_count": 1,
        "parms": ALLOC_TEST,
        "max_batch_size": 16,
        "load": Load(0.0, 100.0, 200.0),
        "slo": ALLOC_SLO,
        "min_replicas": 1,
    }
    kwargs.update(overrides)
    return size_allocation(**kwargs)  # type: ignore[arg-type]


# ---- zero load (zeroLoadAllocation) --------------------------------------------------------------


def test_zero_load_gives_min_replicas_with_idle_latencies() -> None:
    s = allocate()
    assert (s.accelerator, s.replicas, s.max_batch, s.cost) == ("test-gpu", 1, 16, 100.0)
    assert s.itl == pytest.approx(5.0 + 2.0)  # α + β
    assert s.ttft == pytest.approx(10.0 + 1.5)  # γ + δ
    assert s.rho == 0.0
    # MaxArrvRatePerReplica = 16 / (10 + 1.5 + 5 + 2·16) = 0.3298969 req/ms; MaxRPM = 19793.814.
    assert s.max_rate_per_replica == pytest.approx(329.8969, rel=1e-6)
    assert s.max_rate_per_replica * 60 == pytest.approx(19793.814, rel=1e-6)


def test_zero_load_with_no_minimum_is_an_empty_allocation() -> None:
    assert allocate(min_replicas=0) == Sizing(
        accelerator="",
        replicas=0,
        max_batch=0,
        cost=0.0,
        itl=0.0,
        ttft=0.0,
        rho=0.0,
        max_rate_per_replica=0.0,
    )


def test_zero_load_with_two_minimum_replicas() -> None:
    s = allocate(min_replicas=2)
    assert (s.accelerator, s.replicas, s.max_batch, s.cost) == ("test-gpu", 2, 16, 200.0)


def test_zero_load_uses_the_server_batch_and_accelerator_count() -> None:
    s = allocate(max_batch_size=8, unit_cost=50.0, acc_count=2)
    assert (s.replicas, s.max_batch, s.cost) == (1, 8, 100.0)


def test_no_output_tokens_counts_as_zero_load() -> None:
    s = allocate(load=Load(600.0, 100.0, 0.0), min_replicas=3)
    assert (s.replicas, s.cost, s.rho) == (3, 300.0, 0.0)


# ---- loaded ----------------------------------------------------------------------------------------


def test_unreachable_slo_is_infeasible() -> None:
    """allocation_test.go: 1200 req/min with TTFT 1 ms / ITL 0.1 ms has no allocation."""
    with pytest.raises(InfeasibleError, match="unreachable"):
        allocate(load=Load(1200.0, 100.0, 200.0), slo=SLO(ttft=1.0, itl=0.1))


def test_itl_target_message() -> None:
    with pytest.raises(
        InfeasibleError, match=r"^ITL target 24 ms unreachable: 26\.\d+ ms at the lowest rate$"
    ):
        size_allocation(
            accelerator="A100",
            unit_cost=1.0,
            acc_count=1,
            parms=ServiceParms(alpha=25.5, beta=0.6, gamma=10.0, delta=0.01),
            max_batch_size=64,
            load=Load(60.0, 128.0, 128.0),
            slo=SLO(ttft=1000.0, itl=24.0),
        )


def test_optimizer_test_case_gives_43_replicas() -> None:
    """optimizer_test.go: 20 req/s, 20 in / 200 out tokens, N=4: upstream gives 43 replicas, cost 1720."""
    s = size_allocation(
        accelerator="A100",
        unit_cost=40.0,
        acc_count=1,
        parms=LLAMA_A100,
        max_batch_size=4,
        load=Load(1200.0, 20.0, 200.0),
        slo=SLO(ttft=500.0, itl=80.0),
    )
    assert (s.accelerator, s.replicas, s.max_batch, s.cost) == ("A100", 43, 4, 1720.0)
    assert s.itl == pytest.approx(22.3, abs=0.05)
    assert s.ttft == pytest.approx(496.4, abs=0.5)
    # rateStar: one replica's throughput under the SLO (the TTFT target binds).
    qa = QueueAnalyzer(4, 40, LLAMA_A100, RequestSize(20.0, 200.0))
    assert s.max_rate_per_replica == pytest.approx(qa.size(TargetPerf(500.0, 80.0)).metrics.throughput)
    assert s.max_rate_per_replica == pytest.approx(0.46595168, rel=1e-4)


def test_replicas_cost_and_per_replica_latency() -> None:
    load = Load(arrival_rate=600.0, avg_input_tokens=512.0, avg_output_tokens=256.0)  # 10 req/s
    slo = SLO(ttft=500.0, itl=40.0)
    s = size_allocation(
        accelerator="H100", unit_cost=3.0, acc_count=2, parms=BENCH, max_batch_size=64, load=load, slo=slo
    )
    qa = QueueAnalyzer(64, 640, BENCH, RequestSize(512.0, 256.0))
    rate_star = qa.size(TargetPerf(500.0, 40.0)).metrics.throughput
    assert s.replicas == math.ceil(10.0 / rate_star) == 4
    assert s.cost == 3.0 * 2 * 4
    per_replica = qa.analyze(10.0 / 4)
    assert (s.itl, s.ttft, s.rho) == pytest.approx((per_replica.itl, per_replica.ttft, per_replica.rho))
    assert s.ttft <= 500.0 and s.itl <= 40.0


def test_min_replicas_is_a_floor() -> None:
    base = {"accelerator": "H100", "unit_cost": 1.0, "acc_count": 1, "parms": BENCH, "max_batch_size": 64}
    load, slo = Load(60.0, 512.0, 256.0), SLO(ttft=500.0, itl=40.0)
    assert size_allocation(**base, load=load, slo=slo, min_replicas=0).replicas == 1  # type: ignore[arg-type]
    s = size_allocation(**base, load=load, slo=slo, min_replicas=5)  # type: ignore[arg-type]
    assert s.replicas == 5 and s.cost == 5.0
    per_replica = QueueAnalyzer(64, None, BENCH, RequestSize(512.0, 256.0)).analyze(1.0 / 5)
    assert s.itl == pytest.approx(per_replica.itl)


def test_tps_slo_replaces_the_observed_load() -> None:
    """With a TPS SLO, WVA sizes for TPS / output tokens requests/s, at 90 % of the top rate."""
    base = {"accelerator": "H100", "unit_cost": 1.0, "acc_count": 1, "parms": BENCH, "max_batch_size": 64}
    s = size_allocation(**base, load=Load(6.0, 512.0, 256.0), slo=SLO(tps=5120.0))  # type: ignore[arg-type]
    qa = QueueAnalyzer(64, None, BENCH, RequestSize(512.0, 256.0))
    rate_star = qa.analyze(qa.rate_range[1] * 0.9).throughput
    assert s.max_rate_per_replica == pytest.approx(rate_star)
    assert s.replicas == math.ceil(20.0 / rate_star)


def test_accelerator_count_below_one_counts_as_one() -> None:
    assert allocate(acc_count=0).cost == 100.0


@pytest.mark.parametrize(
    "overrides",
    [
        {"unit_cost": -1.0},
        {"unit_cost": math.nan},
        {"min_replicas": -1},
        {"load": Load(-1.0, 100.0, 200.0)},
        {"load": Load(60.0, -1.0, 200.0)},
        {"load": Load(60.0, 100.0, 0.5)},
        {"load": Load(math.inf, 100.0, 200.0)},
        {"slo": SLO(ttft=-1.0)},
        {"parms": ServiceParms(-1.0, 0.0, 0.0, 0.0)},
        {"max_batch_size": 0, "load": Load(60.0, 100.0, 200.0)},
    ],
)
def test_invalid_inputs(overrides: dict[str, object]) -> None:
    with pytest.raises(ModelError):
        allocate(**overrides)


def test_memoised_and_cold_paths_agree() -> None:
    kwargs: dict[str, object] = {
        "accelerator": "H100",
        "unit_cost": 1.0,
        "acc_count": 1,
        "parms": BENCH,
        "max_batch_size": 64,
        "load": Load(600.0, 512.0, 256.0),
        "slo": SLO(ttft=500.0, itl=40.0),
    }
    assert size_allocation(**kwargs) == size_allocation(**kwargs, memo=False)  # type: ignore[arg-type]
    assert size_allocation(**kwargs) == size_allocation(**kwargs)  # type: ignore[arg-type]


def test_absurd_replica_counts_are_infeasible() -> None:
    """A load needing more than MAX_REPLICAS replicas is reported, not computed (WVA overflows int32)."""
    with pytest.raises(InfeasibleError, match=r"needs .* replicas"):
        allocate(load=Load(1e12, 100.0, 200.0), slo=SLO())


@pytest.mark.parametrize("batch", [16.0, True])
def test_batch_size_must_be_an_integer_even_when_cached(batch: object) -> None:
    allocate(load=Load(60.0, 100.0, 200.0), slo=SLO(), max_batch_size=16)  # warm the cache with 16
    with pytest.raises(ModelError, match="integer"):
        allocate(load=Load(60.0, 100.0, 200.0), slo=SLO(), max_batch_size=batch)
