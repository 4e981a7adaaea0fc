"""WVA's gauges with WVA's names and labels, scrape-time (no stale series), leader-only, served over HTTP."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from variant_autoscaler.adapters.exporter import Exporter, VariantGauges


def _samples(exporter: Exporter) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(exporter.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _wva(name: str, ns: str, acc: str) -> tuple[tuple[str, str], ...]:
    return (("accelerator_type", acc), ("namespace", ns), ("variant_name", name))


def test_wva_gauges_and_ratio() -> None:
    leader = [True]
    exporter = Exporter(is_active=lambda: leader[0])
    exporter.decisions.replace(
        [
            VariantGauges("vllme", "llm-d-sim", "A100", "metrics", 5, 2, 90.0, 20.0, 120.0, 21.0),
            VariantGauges("cold", "llm-d-sim", "A100", "metrics", 3, 0),
            VariantGauges("patched", "team", "H100", "patch", 4, 4),
            VariantGauges("shadowed", "team", "H100", "shadow", 1, 4),
        ]
    )
    s = _samples(exporter)
    assert s[("inferno_desired_replicas", _wva("vllme", "llm-d-sim", "A100"))] == 5
    assert s[("inferno_current_replicas", _wva("vllme", "llm-d-sim", "A100"))] == 2
    assert s[("inferno_desired_ratio", _wva("vllme", "llm-d-sim", "A100"))] == 2.5
    assert s[("inferno_desired_ratio", _wva("cold", "llm-d-sim", "A100"))] == 3  # desired when current is 0
    # Only metrics-mode variants drive an HPA; every variant has our own gauge.
    assert ("inferno_desired_replicas", _wva("patched", "team", "H100")) not in s
    assert ("inferno_desired_replicas", _wva("shadowed", "team", "H100")) not in s
    shadow_key = (
        ("accelerator_type", "H100"),
        ("mode", "shadow"),
        ("namespace", "team"),
        ("variant_name", "shadowed"),
    )
    assert s[("variant_autoscaler_desired_replicas", shadow_key)] == 1
    pred = (("kind", "predicted"), ("namespace", "llm-d-sim"), ("variant_name", "vllme"))
    assert s[("variant_autoscaler_ttft_seconds", pred)] == 0.09
    # A deleted variant leaves no series; a standby exports no decisions at all.
    exporter.decisions.replace([VariantGauges("vllme", "llm-d-sim", "A100", "metrics", 5, 2)])
    assert ("inferno_desired_replicas", _wva("cold", "llm-d-sim", "A100")) not in _samples(exporter)
    leader[0] = False
    assert not any(name.startswith("inferno_desired") for name, _ in _samples(exporter))
    leader[0] = True
    assert ("inferno_desired_replicas", _wva("vllme", "llm-d-sim", "A100")) in _samples(exporter)


def test_decisions_rendered_once_per_decision_set() -> None:
    exporter = Exporter(is_active=lambda: True)
    exporter.decisions.replace([VariantGauges("a", "ns", "A100", "metrics", 2, 1)])
    first = exporter.decisions.render()
    assert exporter.decisions.render() is first  # served from the cache
    exporter.decisions.replace([VariantGauges("a", "ns", "A100", "metrics", 3, 1)])
    assert b'inferno_desired_replicas{accelerator_type="A100",namespace="ns",variant_name="a"} 3.0' in (
        exporter.decisions.render()
    )


def test_registries_are_isolated_and_own_metrics_exist() -> None:
    a, b = Exporter(is_active=lambda: True), Exporter(is_active=lambda: True)
    a.cycles.labels(result="ok").inc()
    a.set_optimizer_status("optimal")
    a.set_optimizer_status("infeasible")
    sa, sb = _samples(a), _samples(b)
    assert sa[("variant_autoscaler_cycles_total", (("result", "ok"),))] == 1
    assert ("variant_autoscaler_cycles_total", (("result", "ok"),)) not in sb
    assert sa[("variant_autoscaler_optimizer_status", (("status", "infeasible"),))] == 1
    assert ("variant_autoscaler_optimizer_status", (("status", "optimal"),)) not in sa


async def test_served_on_loopback() -> None:
    exporter = Exporter(is_active=lambda: True)
    exporter.decisions.replace([VariantGauges("v", "ns", "A100", "metrics", 2, 1)])
    port = await exporter.start("127.0.0.1", 0)
    try:
        async with httpx.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.1:{port}/metrics")
        assert response.status_code == 200
        assert (
            'inferno_desired_replicas{accelerator_type="A100",namespace="ns",variant_name="v"} 2.0'
            in response.text
        )
    finally:
        await exporter.stop()
