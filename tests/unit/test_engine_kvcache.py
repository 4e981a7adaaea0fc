"""The engine with the KV-cache signals, through the real collector against the fake Prometheus: each
pod's cache caps the variant's batch, its preemptions hold scale-downs and raise KVCachePressure."""

from __future__ import annotations

from vatesting.fakes import NS, VA, Harness

MODEL = "default/default"
POD = f"{VA}-7d4f8b9c6d-00000"


async def test_a_small_kv_cache_caps_the_batch_while_its_pods_preempt_and_the_reason_says_so() -> None:
    h = Harness()
    h.add_va(replicas=1)
    h.load(60.0)  # 100 prompt and 128 output tokens per request
    # 20 blocks of 16 tokens: about one sequence of 235 tokens (the profile's maxBatchSize is 4). No
    # preemptions yet: the batch the server runs evidently fits, nothing is capped.
    h.prom.set_pod(MODEL, NS, POD, kv=0.5, blocks=20, block_size=16, preemptions=0.0)
    await h.engine.run_cycle()
    desired = h.status()["desiredOptimizedAlloc"]
    assert desired["maxBatch"] == 4 and "KV cache" not in desired["reason"]
    assert h.conditions()["KVCachePressure"]["status"] == "False"
    assert h.status()["currentAlloc"]["load"]["preemptionRate"] == "0.00"
    # It preempts: capped, and still capped in a quiet window while KVCachePressure holds.
    h.advance(60.0)
    h.prom.set_pod(MODEL, NS, POD, kv=1.0, blocks=20, block_size=16, preemptions=0.2)
    await h.engine.run_cycle()
    desired = h.status()["desiredOptimizedAlloc"]
    assert desired["maxBatch"] == 1
    assert "batch capped at 1 (not 4) by the KV cache: 320 tokens per replica" in desired["reason"]
    h.advance(60.0)
    h.prom.set_pod(MODEL, NS, POD, kv=0.5, blocks=20, block_size=16, preemptions=0.0)
    await h.engine.run_cycle()
    assert h.conditions()["KVCachePressure"]["status"] == "True"
    assert h.status()["desiredOptimizedAlloc"]["maxBatch"] == 1
    # Once the condition has cleared (ten minutes without preemptions; the plan reads the condition the
    # previous cycle left), the server's batch again.
    h.advance(600.0)
    await h.engine.run_cycle()
    assert h.conditions()["KVCachePressure"]["status"] == "False"
    h.advance(60.0)
    await h.engine.run_cycle()
    assert h.status()["desiredOptimizedAlloc"]["maxBatch"] == 4


async def test_preempting_pods_are_not_scaled_down_and_the_admin_is_told() -> None:
    h = Harness()
    h.add_va(replicas=5)
    h.load(6.0)  # a trickle: the model asks for fewer replicas than the five running
    h.prom.set_pod(MODEL, NS, POD, kv=1.0, preemptions=0.5)
    await h.engine.run_cycle()
    status = h.status()
    assert status["desiredOptimizedAlloc"]["numReplicas"] == 5
    assert "held at 5: its pods preempt 30 requests/min" in status["desiredOptimizedAlloc"]["reason"]
    assert status["currentAlloc"]["load"]["preemptionRate"] == "30.00"
    assert h.conditions()["KVCachePressure"]["reason"] == "Preempting"
    warned = [e for e in h.kube.events() if e["reason"] == "KVCachePressure"]
    assert len(warned) == 1 and warned[0]["type"] == "Warning"
    # No more preemptions: the scale-down goes through, no second warning; the condition clears once
    # it has stood for ten minutes.
    h.advance(60.0)
    h.prom.set_pod(MODEL, NS, POD, kv=0.3, preemptions=0.0)
    await h.engine.run_cycle()
    assert h.status()["desiredOptimizedAlloc"]["numReplicas"] < 5
    assert h.conditions()["KVCachePressure"]["status"] == "True"
    h.advance(600.0)
    await h.engine.run_cycle()
    assert h.conditions()["KVCachePressure"]["status"] == "False"
    assert len([e for e in h.kube.events() if e["reason"] == "KVCachePressure"]) == 1
