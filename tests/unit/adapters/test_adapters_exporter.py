"""WVA's gauges with WVA's names and labels (inferno_* and, from v0.5, wva_* with the scaling counter),
scrape-time (no stale series), leader-only, served over HTTP; either family can be turned off."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from variant_autoscaler.adapters.exporter import Exporter, VariantGauges
from variant_autoscaler.settings import Settings


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


# --- WVA v0.5+'s wva_* family beside inferno_* ---------------------------------------------------------


def _labels(name: str, ns: str, acc: str, **extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"accelerator_type": acc, "namespace": ns, "variant_name": name, **extra}.items()))


def _names(exporter: Exporter) -> set[str]:
    return {name for name, _ in _samples(exporter)}


def test_wva_family_mirrors_inferno_for_metrics_mode_variants() -> None:
    exporter = Exporter(is_active=lambda: True)
    exporter.decisions.replace(
        [
            VariantGauges("vllme", "llm-d-sim", "A100", "metrics", 5, 2),
            VariantGauges("patched", "team", "H100", "patch", 4, 4),
        ]
    )
    s = _samples(exporter)
    for suffix, value in (("desired_replicas", 5), ("current_replicas", 2), ("desired_ratio", 2.5)):
        assert s[(f"wva_{suffix}", _labels("vllme", "llm-d-sim", "A100"))] == value
        assert s[(f"inferno_{suffix}", _labels("vllme", "llm-d-sim", "A100"))] == value
    assert ("wva_desired_replicas", _labels("patched", "team", "H100")) not in s


def test_controller_instance_labels_the_wva_family_only() -> None:
    exporter = Exporter(is_active=lambda: True)
    exporter.decisions.configure(controller_instance="team-a")
    exporter.decisions.replace([VariantGauges("v", "ns", "A100", "metrics", 3, 3)])
    s = _samples(exporter)
    assert s[("wva_desired_replicas", _labels("v", "ns", "A100", controller_instance="team-a"))] == 3
    assert s[("inferno_desired_replicas", _labels("v", "ns", "A100"))] == 3  # WVA 2025-10 had no such label


def test_scaling_counter_counts_decision_changes_by_direction_and_reason() -> None:
    exporter = Exporter(is_active=lambda: True)
    d = exporter.decisions
    d.replace([VariantGauges("v", "ns", "A100", "metrics", 2, 2)])
    assert "wva_replica_scaling_total" not in _names(exporter)  # a first decision is not a change
    d.replace([VariantGauges("v", "ns", "A100", "metrics", 4, 2, scaling_reason="saturation-v1")])
    d.replace([VariantGauges("v", "ns", "A100", "metrics", 5, 4, scaling_reason="saturation-v1")])
    d.replace([VariantGauges("v", "ns", "A100", "metrics", 5, 5)])  # unchanged
    d.replace([VariantGauges("v", "ns", "A100", "metrics", 3, 5)])
    s = _samples(exporter)
    up = _labels("v", "ns", "A100", direction="up", reason="saturation-v1")
    down = _labels("v", "ns", "A100", direction="down", reason="optimizer")
    assert s[("wva_replica_scaling_total", up)] == 2
    assert s[("wva_replica_scaling_total", down)] == 1
    # the series go with the variant
    d.replace([VariantGauges("other", "ns", "A100", "metrics", 1, 1)])
    assert "wva_replica_scaling_total" not in _names(exporter)


def test_either_family_can_be_turned_off_and_both_are_on_by_default() -> None:
    settings = Settings()
    assert settings.emit_inferno_metrics and settings.emit_wva_metrics
    exporter = Exporter(is_active=lambda: True)
    exporter.decisions.replace([VariantGauges("v", "ns", "A100", "metrics", 2, 1)])
    assert {"inferno_desired_replicas", "wva_desired_replicas"} <= _names(exporter)
    exporter.decisions.configure(inferno=False)
    names = _names(exporter)
    assert "wva_desired_replicas" in names and not any(n.startswith("inferno_") for n in names)
    exporter.decisions.configure(wva=False)
    names = _names(exporter)
    assert "inferno_desired_replicas" in names and not any(n.startswith("wva_") for n in names)
    # our own per-variant gauge stays either way
    assert "variant_autoscaler_desired_replicas" in names


def test_standby_exports_neither_family() -> None:
    exporter = Exporter(is_active=lambda: False)
    exporter.decisions.replace([VariantGauges("v", "ns", "A100", "metrics", 2, 1)])
    assert not any(n.startswith(("wva_", "inferno_desired")) for n in _names(exporter))
