"""The operator's per-object state ConfigMap (adapters/state_store.py): keys, one write only when the data
changed, create then replace, and the size bound."""

from __future__ import annotations

import json

from variant_autoscaler.adapters.state_store import StateStore, entry_key
from vatesting.fakes import OPERATOR_NS, FakeKube

NAME = "variant-autoscaler-learned-profiles"


def _weight(entry: object) -> float:
    return float(entry["w"]) if isinstance(entry, dict) else 0.0


def test_entry_keys_are_valid_and_bounded() -> None:
    assert entry_key("ns", "HorizontalPodAutoscaler", "a-hpa") == "ns.HorizontalPodAutoscaler.a-hpa"
    long = entry_key("n" * 63, "ScaledObject", "x" * 253)
    assert len(long) <= 253 and long.startswith("n" * 63 + ".ScaledObject.")
    assert long != entry_key("n" * 63, "ScaledObject", "y" * 253)


async def test_created_once_then_replaced_only_when_changed() -> None:
    kube = FakeKube()
    store = StateStore(kube.client(), OPERATOR_NS, NAME)
    assert store.load(None) == {}
    assert await store.save({}, weight=_weight) is False  # nothing to keep: no ConfigMap made
    assert await store.save({"a": {"w": 1}}, weight=_weight) is True
    assert await store.save({"a": {"w": 1}}, weight=_weight) is False
    assert await store.save({"a": {"w": 2}, "b": {"w": 1}}, weight=_weight) is True
    stored = kube.get("configmaps", OPERATOR_NS, NAME)
    assert {k: json.loads(v) for k, v in stored["data"].items()} == {"a": {"w": 2}, "b": {"w": 1}}
    assert (kube.writes("POST", "/configmaps"), kube.writes("PUT", "/configmaps/")) == (1, 1)
    # A new process reads it back from the listed object; unreadable entries are dropped.
    stored["data"]["junk"] = "not json"
    again = StateStore(kube.client(), OPERATOR_NS, NAME)
    assert again.load(stored) == {"a": {"w": 2}, "b": {"w": 1}}


async def test_a_replace_after_someone_else_wrote_re_reads_and_retries() -> None:
    kube = FakeKube()
    store = StateStore(kube.client(), OPERATOR_NS, NAME)
    await store.save({"a": {"w": 1}}, weight=_weight)
    kube.get("configmaps", OPERATOR_NS, NAME)["metadata"]["resourceVersion"] = "999"
    assert await store.save({"a": {"w": 3}}, weight=_weight) is True
    assert json.loads(kube.get("configmaps", OPERATOR_NS, NAME)["data"]["a"]) == {"w": 3}


async def test_past_the_size_bound_the_entries_worth_least_are_left_out() -> None:
    kube = FakeKube()
    store = StateStore(kube.client(), OPERATOR_NS, NAME, max_bytes=100)
    entries = {f"k{i}": {"w": i, "pad": "x" * 20} for i in range(5)}
    assert await store.save(entries, weight=_weight) is True
    kept = kube.get("configmaps", OPERATOR_NS, NAME)["data"]
    assert sorted(kept) == ["k3", "k4"] and store.left_out == 3
