"""The planner caps a variant's batch by what its replicas' KV cache holds (core/kvcache.py) while its
pods are under KV pressure: on its current accelerator only, said in the reason; an unknown cache, or no
pressure, changes nothing."""

from __future__ import annotations

from dataclasses import replace

from variant_autoscaler.core.kvcache import KVCache, batch_ceiling
from variant_autoscaler.planner import (
    ObservedLoad,
    OptimizerPlanner,
    PlannedVariant,
    PlanOutcome,
    _kv_capped,
)
from vatesting.fakes import NS
from vatesting.planning import plan_request
from vatesting.profiles import profile

LOAD = ObservedLoad(1200.0, 500.0, 200.0)
SMALL = KVCache(num_gpu_blocks=500, block_size=16)  # 8000 tokens: about ten sequences of 700


def _variant(**kw: object) -> PlannedVariant:
    base = PlannedVariant(
        key=(NS, "v"),
        model_id="default/default",  # the Premium class of the shipped ConfigMap
        profiles=(profile("A100", batch=64), profile("MI300X", batch=64)),
        accelerator="A100",
        current_replicas=1,
        load=LOAD,
        min_replicas=1,
        max_replicas=None,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def _plan(v: PlannedVariant) -> PlanOutcome:
    return OptimizerPlanner().plan(plan_request(v))


def test_the_batch_is_capped_by_the_kv_cache_and_the_reason_says_so() -> None:
    free = _plan(_variant()).decisions[(NS, "v")]
    capped = _plan(_variant(kv_cache=SMALL, kv_pressure=True)).decisions[(NS, "v")]
    ceiling = batch_ceiling(SMALL, LOAD.avg_input_tokens, LOAD.avg_output_tokens)
    assert ceiling is not None and ceiling.batch < 64
    assert free.max_batch == 64 and capped.max_batch == ceiling.batch
    note = f"batch capped at {ceiling.batch} (not 64) by the KV cache: 8000 tokens per replica"
    assert note in capped.reason
    # Fewer sequences per replica: more replicas for the same load.
    assert capped.replicas > free.replicas


def test_no_pressure_unknown_or_ample_capacity_changes_nothing() -> None:
    free = _plan(_variant()).decisions[(NS, "v")]
    # Pods that do not preempt evidently hold the batch they run: the average ceiling is not applied.
    assert _plan(_variant(kv_cache=SMALL)).decisions[(NS, "v")] == free
    for cache in (None, KVCache(num_gpu_blocks=100_000, block_size=16)):
        assert _plan(_variant(kv_cache=cache, kv_pressure=True)).decisions[(NS, "v")] == free
    # No lengths measured (no traffic in the window): no ceiling either.
    idle = ObservedLoad(0.0, 0.0, 0.0)
    assert (
        _plan(_variant(load=idle, kv_cache=SMALL, kv_pressure=True)).decisions[(NS, "v")]
        == _plan(_variant(load=idle)).decisions[(NS, "v")]
    )


def test_the_servers_max_num_seqs_is_capped_too_on_the_current_accelerator_only() -> None:
    # The server runs --max-num-seqs 32 (the operator may not change it); another accelerator has
    # another cache, so there the server's 32 stays.
    v = _variant(kv_cache=SMALL, kv_pressure=True, max_batch=32, keep_accelerator=False)
    ceiling = batch_ceiling(SMALL, LOAD.avg_input_tokens, LOAD.avg_output_tokens)
    assert ceiling is not None
    profiles, override, note = _kv_capped(v)
    assert {p.accelerator: p.max_batch_size for p in profiles} == {"A100": ceiling.batch, "MI300X": 32}
    assert override is None and note is not None and note[0] == "A100"
    d = _plan(v).decisions[(NS, "v")]
    assert d.max_batch == (ceiling.batch if d.accelerator == "A100" else 32)
    assert ("by the KV cache" in d.reason) == (d.accelerator == "A100")
    # Not capped (the cache holds the server's batch): the override passes through as it was.
    ample = _variant(kv_cache=KVCache(num_gpu_blocks=100_000, block_size=16), kv_pressure=True, max_batch=32)
    assert _kv_capped(ample) == (ample.profiles, 32, None)
