"""The simulated ``ours`` gets the batch ceiling the operator derives from ``vllm:cache_config_info``:
what its V1 replicas' KV cache holds; the baselines (WVA, the oracle, static) do not read it."""

from __future__ import annotations

from variant_autoscaler.core.kvcache import KVCache, batch_ceiling
from variant_autoscaler.planner import PlanOutcome
from variant_autoscaler.sim.optimizing import ModelLoad, OraclePolicy, ours_policy
from variant_autoscaler.sim.replica import replica_kv_caches
from variant_autoscaler.sim.scenarios import load_bundled

GRANITE, LLAMA = "granite-13b-l40s", "llama-8b-a100"


def test_the_replicas_kv_cache_is_what_they_would_export() -> None:
    scenario = load_bundled("diurnal")
    # kvCacheTokens {L40S: 40960} and {A100: 65536}, in blocks of 16 tokens.
    assert replica_kv_caches(scenario) == {GRANITE: KVCache(2560, 16), LLAMA: KVCache(4096, 16)}


def test_ours_plans_with_the_ceiling_the_oracle_without() -> None:
    scenario = load_bundled("diurnal")
    loads = {
        "meta/llama-3.1-8b": ModelLoad(600.0, 512.0, 256.0),
        "ibm/granite-13b": ModelLoad(300.0, 1024.0, 256.0),
    }
    current = {GRANITE: 1, LLAMA: 1}
    ceiling = batch_ceiling(KVCache(2560, 16), 1024.0, 256.0)
    assert ceiling is not None and ceiling.batch < 32  # granite's profile batch

    def batches(outcome: PlanOutcome) -> dict[str, int | None]:
        return {key[1]: d.max_batch for key, d in outcome.decisions.items()}

    ours = ours_policy(scenario).plan(loads, current, scenario.capacity())
    # Llama's cache holds its profile's batch of 64.
    assert batches(ours) == {GRANITE: ceiling.batch, LLAMA: 64}
    assert "by the KV cache" in next(d.reason for k, d in ours.decisions.items() if k[1] == GRANITE)
    oracle = OraclePolicy(scenario)._inner.plan(loads, current, scenario.capacity())
    assert batches(oracle) == {GRANITE: 32, LLAMA: 64}
