"""The tail model's inputs from Prometheus: the queries, and reading their results."""

from __future__ import annotations

import math

import pytest

from variant_autoscaler.adapters.burstiness import (
    MIN_DIFFERENCES,
    build_tail_queries,
    collect_tail_inputs,
    min_differences,
    read_tail_inputs,
)
from variant_autoscaler.adapters.prometheus import Sample
from variant_autoscaler.errors import ModelError


def _s(model: str, value: float, **labels: str) -> Sample:
    return Sample(labels={"model_name": model, "namespace": "ns", **labels}, value=value, timestamp=0.0)


def test_one_query_per_quantity_grouped_by_model_and_namespace() -> None:
    queries = build_tail_queries(lookback_s=600.0, windows_s=(30.0, 120.0))
    assert set(queries) == {
        "rate", "idc:30s", "idc:2m",
        "input:buckets", "input:sum", "input:count", "output:buckets", "output:sum", "output:count",
    }  # fmt: skip
    assert "by (model_name, namespace, le)" in queries["input:buckets"]
    idc = queries["idc:30s"]
    assert "[10m:30s]" in idc and "offset 30s" in idc and "vllm:request_success_total[30s]" in idc
    # The look-back's differences but one (20 windows of 30 s in 10 minutes), or none; at least four.
    assert "count_over_time" in idc and idc.endswith(">= 19)") and queries["idc:2m"].endswith(">= 4)")
    assert min_differences(600.0, 30.0) == 19 and min_differences(120.0, 30.0) == MIN_DIFFERENCES
    # The rate the IDC is read at: the mean count of the shortest window over the same points, per second.
    assert queries["rate"].startswith("avg_over_time(") and queries["rate"].endswith("[10m:30s]) / 30")
    other = build_tail_queries(counter="inference_extension_scheduler_attempts_total")
    assert "inference_extension_scheduler_attempts_total" in other["rate"]
    with pytest.raises(ModelError, match="look-back"):
        build_tail_queries(lookback_s=60.0, windows_s=(30.0,))


def _results() -> dict[str, list[Sample]]:
    return {
        "rate": [_s("m", 5.0), _s("idle", 0.0)],
        "idc:2m": [_s("m", 6.0)],
        "idc:30s": [_s("m", 2.0), _s("other", math.nan)],
        "input:buckets": [
            _s("m", 10.0, le="100"), _s("m", 40.0, le="1000"), _s("m", 39.0, le="500"),
            _s("m", 50.0, le="+Inf"),
        ],
        "input:sum": [_s("m", 40_000.0)],
        "input:count": [_s("m", 50.0)],
        "output:buckets": [_s("m", 20.0, le="100"), _s("m", 50.0, le="+Inf")],
        "output:sum": [_s("m", 5_000.0)],
        "output:count": [_s("m", 50.0)],
    }  # fmt: skip


def test_reading_burstiness_and_lengths() -> None:
    found = read_tail_inputs(_results())
    m = found[("m", "ns")]
    assert m.burstiness is not None
    assert m.burstiness.windows_s == (30.0, 120.0)  # sorted by window, whatever the order of the keys
    assert m.burstiness.idc == (2.0, 6.0) and m.burstiness.rate == 5.0
    assert m.lengths is not None
    assert m.lengths.input.mean == pytest.approx(800.0)  # the +Inf bucket ends where the mean says
    assert m.lengths.output.mean == pytest.approx(100.0)
    # A window read as NaN, or a rate of 0, is left out: a model with nothing usable is not there (the
    # caller then assumes Poisson arrivals and exponential lengths).
    assert ("other", "ns") not in found and ("idle", "ns") not in found


async def test_collect_runs_every_query_on_the_client() -> None:
    results = _results()
    asked: list[str] = []

    class Client:
        async def query(self, promql: str) -> list[Sample]:
            asked.append(promql)
            name = next(k for k, q in build_tail_queries(windows_s=(30.0, 120.0)).items() if q == promql)
            return results.get(name, [])

    found = await collect_tail_inputs(Client(), windows_s=(30.0, 120.0))
    assert len(asked) == len(build_tail_queries(windows_s=(30.0, 120.0)))
    assert found[("m", "ns")].burstiness is not None
