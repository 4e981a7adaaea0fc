"""The kopf handlers called directly: tuning, delegation to the engine, error mapping; the run command."""

from __future__ import annotations

import argparse
import inspect
from typing import Any

import kopf
import pytest

from variant_autoscaler import handlers
from variant_autoscaler.adapters.inventory import NodeGPUs
from variant_autoscaler.api.v1alpha1 import GROUP, PLURAL, VERSION
from variant_autoscaler.commands.run import register, settings_from_args
from variant_autoscaler.errors import ConfigError, VariantAutoscalerError
from variant_autoscaler.settings import Settings


class FakeEngine:
    def __init__(self, healthy: bool = True) -> None:
        self.healthy = healthy
        self.nodes: list[tuple[str | None, Any]] = []
        self.vas: list[tuple[str | None, Any]] = []

    def notify_va(self, event_type: str | None, body: Any) -> None:
        self.vas.append((event_type, body))

    def notify_node(self, event_type: str | None, body: Any) -> None:
        self.nodes.append((event_type, body))

    def health(self) -> dict[str, Any]:
        if not self.healthy:
            raise VariantAutoscalerError("no cycle has completed for 999s")
        return {"leader": True, "cycles": 3}


class FakeRuntime:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    def health(self) -> dict[str, Any]:
        return self.engine.health()


def _memo(engine: FakeEngine) -> kopf.Memo:
    memo = kopf.Memo()
    memo.runtime = FakeRuntime(engine)
    return memo


async def test_kopf_is_tuned_in_one_place() -> None:
    settings = kopf.OperatorSettings()
    await handlers.configure(settings=settings, memo=kopf.Memo(settings=Settings(kube_timeout_seconds=12)))
    assert settings.persistence.finalizer == "llmd.ai/variant-autoscaler"
    assert settings.posting.enabled is False
    assert settings.scanning.disabled is True
    assert settings.networking.request_timeout == 12
    assert settings.queueing.idle_timeout == 600
    # No diff base is built (ours are index and event handlers only): no per-event deep copy.
    body = kopf.Body({"metadata": {"name": "x"}, "spec": {"big": list(range(100))}})
    assert settings.persistence.diffbase_storage.build(body=body) == {}
    assert settings.persistence.diffbase_storage.fetch(body=body) is None


async def test_event_handlers_delegate_to_the_engine() -> None:
    engine = FakeEngine()
    memo = _memo(engine)
    body = kopf.Body({"metadata": {"name": "va", "namespace": "ns", "generation": 1}})
    await handlers.node_event(type="DELETED", body=body, memo=memo)
    assert engine.nodes == [("DELETED", body)]


async def test_the_node_index_holds_gpu_facts() -> None:
    ready = [{"type": "Ready", "status": "True"}]
    node = kopf.Body(
        {
            "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-PCIE-80GB"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": ready},
        }
    )
    assert await handlers.node_index(name="n1", body=node) == {
        "n1": NodeGPUs("n1", True, (("nvidia.com/gpu", "NVIDIA-A100-PCIE-80GB", 8),))
    }


def test_nodes_are_watched_only_when_asked() -> None:
    registry = kopf.OperatorRegistry()
    assert not registry._indexing.has_handlers(resource=_NODES)
    handlers.watch_nodes(registry)
    assert registry._indexing.has_handlers(resource=_NODES)
    assert registry._watching.has_handlers(resource=_NODES)
    # The default registry, as imported: nothing about nodes until run_operator asks (gpu_inventory).
    assert not kopf.get_default_registry()._indexing.has_handlers(resource=_NODES)


_NODES = kopf.Resource("", "v1", "nodes", namespaced=False)


def test_probe_reports_health_and_fails_permanently_when_cycles_stop() -> None:
    assert handlers.cycle_probe(memo=_memo(FakeEngine())) == {"leader": True, "cycles": 3}
    with pytest.raises(kopf.PermanentError, match="no cycle has completed"):
        handlers.cycle_probe(memo=_memo(FakeEngine(healthy=False)))


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["run", *argv])


def test_run_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WVA_NAMESPACES", "from-env")
    monkeypatch.setenv("WVA_METRICS_PORT", "9999")
    s = settings_from_args(_args("-n", "a", "-n", "b", "--metrics-port", "0", "--no-leader-election",
                                 "--log-format", "plain", "--identity", "me"))  # fmt: skip
    assert s.namespaces == ["a", "b"] and s.metrics_port == 0
    assert not s.leader_election and s.log_format == "plain" and s.identity == "me"
    everywhere = settings_from_args(_args("-A"))
    assert everywhere.namespaces == [] and everywhere.clusterwide and everywhere.metrics_port == 9999
    assert settings_from_args(_args()).namespaces == ["from-env"]


def test_every_run_flag_reaches_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # Fields with an environment alias (WVA_OPERATOR_NAMESPACE or POD_NAMESPACE, LOG_LEVEL) must still
    # take the flag: the settings ignore unknown names, so a flag set by field name could vanish.
    monkeypatch.setenv("POD_NAMESPACE", "from-env")
    flags = ["--operator-namespace", "ops", "--metrics-host", "127.0.0.2", "--health-host", "127.0.0.3"]
    s = settings_from_args(_args(*flags, "--health-port", "0", "--log-level", "debug"))
    assert s.operator_namespace == "ops" and s.log_level == "debug"
    assert (s.metrics_host, s.health_host, s.health_port) == ("127.0.0.2", "127.0.0.3", 0)
    assert settings_from_args(_args()).operator_namespace == "from-env"


def test_bad_settings_are_config_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WVA_KUBE_CONCURRENCY", "0")
    with pytest.raises(ConfigError, match="kube_concurrency"):
        settings_from_args(_args())


def test_watch_event_handlers_are_coroutines() -> None:
    # kopf runs plain functions in a thread pool: one hop per watch event, per status write per cycle.

    for handler in (
        handlers.node_index,
        handlers.node_event,
        handlers.variant_autoscalings,
        handlers.va_event,
    ):
        assert inspect.iscoroutinefunction(handler), handler.__name__


class _StartedRuntime:
    """What Runtime.start returns, as far as startup looks at it."""

    def __init__(self, secure: bool) -> None:
        self.exporter = type("E", (), {"secure": secure})()
        self.stopped = False

    async def stop(self) -> None:
        self.stopped = True


@pytest.mark.parametrize("served_securely", [True, False])
async def test_secure_metrics_fail_closed(monkeypatch: pytest.MonkeyPatch, served_securely: bool) -> None:
    """WVA_METRICS_SECURE with /metrics served in the clear stops the operator rather than serve it."""
    started = _StartedRuntime(secure=served_securely)

    async def start(cfg: Settings, **_: Any) -> _StartedRuntime:
        return started

    monkeypatch.setattr(handlers.Runtime, "start", start)
    monkeypatch.setattr(handlers.gc, "freeze", lambda: None)
    memo = kopf.Memo(settings=Settings(metrics_secure=True))
    if served_securely:
        await handlers.startup(settings=kopf.OperatorSettings(), memo=memo)
        assert memo.runtime is started and not started.stopped
    else:
        with pytest.raises(kopf.PermanentError, match="WVA_METRICS_SECURE"):
            await handlers.startup(settings=kopf.OperatorSettings(), memo=memo)
        assert started.stopped


async def test_cleanup_without_a_runtime_does_nothing() -> None:
    await handlers.cleanup(memo=kopf.Memo())  # startup failed before building it


def test_probe_reports_leadership() -> None:
    assert handlers.cycle_probe(memo=_memo(FakeEngine()))["leader"] is True


async def test_the_kopf_va_index_keeps_slim_bodies_by_namespace_and_name() -> None:
    # Only with WVA_VA_WATCH=kopf: the alternative to the informer that the scale benchmark measures.
    body = kopf.Body(
        {
            "metadata": {
                "name": "va",
                "namespace": "ns",
                "generation": 2,
                "managedFields": [{"manager": "x"}],
            },
            "spec": {"modelID": "m"},
        }
    )
    indexed = await handlers.variant_autoscalings(namespace="ns", name="va", body=body)
    assert indexed == {("ns", "va"): {"metadata": {"name": "va", "namespace": "ns", "generation": 2},
                                      "spec": {"modelID": "m"}}}  # fmt: skip


async def test_kopf_va_events_reach_the_engine() -> None:
    engine = FakeEngine()
    body = kopf.Body({"metadata": {"name": "va", "namespace": "ns", "generation": 1}})
    await handlers.va_event(type="MODIFIED", body=body, memo=_memo(engine))
    assert engine.vas == [("MODIFIED", body)]


def test_vas_are_watched_through_kopf_only_when_asked() -> None:
    # By default the informer keeps them (kopf's per-event cost at scale: docs/design.md); watch_vas
    # registers a kopf index and an event handler instead, for the benchmark (WVA_VA_WATCH=kopf).
    registry = kopf.OperatorRegistry()
    handlers.watch_vas(registry)
    assert registry._indexing.has_handlers(resource=_VAS)
    assert registry._watching.has_handlers(resource=_VAS)
    assert not kopf.get_default_registry()._indexing.has_handlers(resource=_VAS)
    assert not kopf.get_default_registry()._watching.has_handlers(resource=_VAS)


_VAS = kopf.Resource(GROUP, VERSION, PLURAL, namespaced=True)
