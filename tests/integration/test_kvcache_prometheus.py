"""The KV-cache signals end to end through a real Prometheus: a real emulator process (V1 engine, a
small KV cache) preempts under load; the operator's collector reads its cache size from
``vllm:cache_config_info`` and its preemption rate with the fixed query set, and the planner caps the
variant's batch at what that cache holds for the measured lengths, while the pure decision holds any
scale-down and raises KVCachePressure."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import UTC, datetime

from localcluster import PrometheusServer, wait_for
from variant_autoscaler.adapters.prometheus import QUERIES_PER_CYCLE, Collector, PrometheusClient
from variant_autoscaler.api.config import PrometheusConfig
from variant_autoscaler.core import status as st
from variant_autoscaler.core.decision import DecisionInputs, MetricsView, TargetView, decide, report
from variant_autoscaler.core.kvcache import KVCache, batch_ceiling
from variant_autoscaler.planner import (
    ObservedLoad,
    OptimizerPlanner,
    PlannedVariant,
)
from vatesting.planning import plan_request
from vatesting.profiles import profile
from vllm_emulator.distributions import parse_distribution
from vllm_emulator.loadgen import LoadSpec, run_load
from vllm_emulator.process import EmulatorProcess

MODEL, NAMESPACE, POD = "default/default", "kv-test", "small-7d4f8b9c6d-00000"
BLOCKS, BLOCK_SIZE = 160, 16  # 2560 tokens: a handful of 300-token prompts with their outputs
EMULATOR = [
    "--engine", "v1", "--model", MODEL, "--time-scale", "5", "--step-fixed-ms", "10",
    "--step-token-ms", "0.05", "--step-context-ms", "0", "--max-model-len", "1024",
    "--max-num-seqs", "32", "--num-gpu-blocks-override", str(BLOCKS), "--block-size", str(BLOCK_SIZE),
]  # fmt: skip


async def test_the_collector_reads_the_cache_and_preemptions_and_the_plan_is_capped(
    prometheus: PrometheusServer,
) -> None:
    with EmulatorProcess(EMULATOR) as emulator:
        # As Kubernetes service discovery labels a pod's series.
        prometheus.add_targets(
            "kv", [emulator.url.removeprefix("http://")], {"namespace": NAMESPACE, "pod": POD}
        )
        wait_for(
            lambda: bool(prometheus.query(f'vllm:cache_config_info{{pod="{POD}"}}')),
            timeout=60,
            what="the emulator scraped",
        )
        spec = LoadSpec(
            targets=(emulator.url,),
            schedule=((6.0, 12.0),),
            input_tokens=parse_distribution("300"),
            output_tokens=parse_distribution("uniform:50:400"),
            seed=5,
        )
        summary = await run_load(spec)
        assert summary.completed > 40 and summary.errors == 0
        await asyncio.sleep(3.0)  # one more scrape after the last request
        client = PrometheusClient(PrometheusConfig(base_url=prometheus.url), backoff=0.1)
        try:
            snapshot = await Collector(client).collect(now=time.time(), window_seconds=30.0)
        finally:
            await client.aclose()
    assert snapshot.queries == QUERIES_PER_CYCLE
    lookup = snapshot.lookup(MODEL, NAMESPACE)
    assert lookup.state == "ok", lookup.message
    metrics = lookup.metrics
    assert metrics is not None and metrics.avg_input_tokens > 0 and metrics.avg_output_tokens > 0
    (pod,) = snapshot.pods(MODEL, NAMESPACE)
    assert pod.pod == POD and pod.kv_cache == KVCache(BLOCKS, BLOCK_SIZE)
    assert pod.preemption_rate is not None and pod.preemption_rate > 0  # 160 blocks for 32 sequences

    # Its pods preempt: the planner sizes the variant with what the cache holds, not the profile's
    # batch of 64.
    load = ObservedLoad(metrics.arrival_rate * 60.0, metrics.avg_input_tokens, metrics.avg_output_tokens)
    variant = PlannedVariant(
        key=(NAMESPACE, "small"),
        model_id=MODEL,
        profiles=(profile("A100", batch=64),),
        accelerator="A100",
        current_replicas=2,
        load=load,
        min_replicas=1,
        max_replicas=None,
        kv_cache=pod.kv_cache,
        kv_pressure=pod.preemption_rate > 0,  # as the engine sets it from the pods' preemptions
    )
    outcome = OptimizerPlanner().plan(plan_request(variant))
    plan = outcome.decisions[variant.key]
    ceiling = batch_ceiling(pod.kv_cache, load.avg_input_tokens, load.avg_output_tokens)
    assert ceiling is not None and ceiling.batch < 64
    assert plan.max_batch == ceiling.batch
    assert f"batch capped at {ceiling.batch} (not 64) by the KV cache" in plan.reason

    # The preemptions read are evidence: a scale-down below the two replicas running is held.
    inputs = DecisionInputs(
        now=datetime.now(UTC),
        namespace=NAMESPACE,
        name="small",
        uid="uid",
        generation=1,
        previous={},
        mode="metrics",
        accelerator="A100",
        target=TargetView("Deployment", "small", 2, 2, 2),
        metrics=MetricsView("ok", lookup.message, metrics.newest_sample, metrics.arrival_rate),
        plan=replace(plan, replicas=1),
        preemption_rate=pod.preemption_rate,
    )
    decision = decide(inputs)
    assert decision.policy.replicas == 2 and "kv-pressure" in decision.policy.limited_by
    rep = report(decision)
    assert [e.reason for e in rep.events].count(st.KV_CACHE_PRESSURE) == 1
    assert float(rep.status["currentAlloc"]["load"]["preemptionRate"]) > 0
