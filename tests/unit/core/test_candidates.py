"""Candidate allocations: batch sizes, accelerator choice and rejections with reasons."""

from __future__ import annotations

import pytest

from variant_autoscaler.core.analyzer import SLO, Load, size_allocation
from variant_autoscaler.core.candidates import Candidate, CandidateSet, batch_sizes, build_candidates
from variant_autoscaler.core.model import AcceleratorType, ServiceParms, ServiceTarget, VariantInput
from vatesting.profiles import profile

E2E = {
    "A100": ServiceParms(20.58, 0.41, 20.58, 0.041),
    "MI300X": ServiceParms(0.77, 0.15, 0.77, 0.15),
    "G2": ServiceParms(17.15, 0.34, 17.15, 0.34),
}
ACCS = {
    "A100": AcceleratorType("A100", "NVIDIA-A100-PCIE-80GB", 40.0),
    "MI300X": AcceleratorType("MI300X", "AMD-MI300X-192GB", 65.0, multiplicity=2),
    "G2": AcceleratorType("G2", "Intel-Gaudi-2-96GB", 23.0),
}


def e2e_variant(**kwargs: object) -> VariantInput:
    profiles = tuple(
        profile(acc, batch=16, count=2 if acc == "MI300X" else 1, parms=parms) for acc, parms in E2E.items()
    )
    fields: dict[str, object] = {
        "service": ServiceTarget("Premium", 1, SLO(ttft=500, itl=24)),
        "profiles": profiles,
        "load": Load(120.0, 100, 128),
    }
    fields.update(kwargs)
    return VariantInput("v", "ns", "default/default", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("top", "count", "expected"),
    [
        (256, 4, (256, 128, 64, 32)),
        (4, 4, (4, 2, 1)),
        (6, 3, (6, 3, 1)),
        (1, 4, (1,)),
        (16, 1, (16,)),
        (0, 4, ()),
    ],
)
def test_batch_sizes_halve_from_the_profile_value(top: int, count: int, expected: tuple[int, ...]) -> None:
    assert batch_sizes(top, count) == expected


def test_every_profiled_accelerator_and_batch_is_sized() -> None:
    cset = build_candidates(e2e_variant(), ACCS, batch_count=3, sizer=size_allocation)
    assert cset.sizings == 9
    sized = {(c.accelerator, c.batch) for c in cset.candidates} | {
        (r.accelerator, r.batch) for r in cset.rejections
    }
    assert sized == {(a, b) for a in E2E for b in (16, 8, 4)}
    for c in cset.candidates:
        expected = size_allocation(
            accelerator=c.accelerator,
            unit_cost=ACCS[c.accelerator].cost,
            acc_count=2 if c.accelerator == "MI300X" else 1,
            parms=E2E[c.accelerator],
            max_batch_size=c.batch,
            load=Load(120.0, 100, 128),
            slo=SLO(ttft=500, itl=24),
        )
        assert (c.replicas, c.rate_per_replica) == (expected.replicas, expected.max_rate_per_replica)
        assert c.cost == pytest.approx(expected.cost)
        assert c.itl <= 24.0 and c.ttft <= 500.0
    mi300x = next(c for c in cset.candidates if c.accelerator == "MI300X")
    assert (mi300x.units_per_replica, mi300x.cost_per_replica, mi300x.device) == (
        4,
        130.0,
        "AMD-MI300X-192GB",
    )


def test_unreachable_slo_is_a_rejection_with_the_analyzers_reason() -> None:
    v = e2e_variant(service=ServiceTarget("Tight", 1, SLO(itl=18)))
    cset = build_candidates(v, ACCS, batch_count=1, sizer=size_allocation)
    rejected = {r.accelerator: r.reason for r in cset.rejections}
    assert rejected.get("A100")
    assert {c.accelerator for c in cset.candidates} == {"MI300X", "G2"}
    assert cset.rejection_summary().startswith("A100: ")


def test_keep_accelerator_sizes_only_the_current_one() -> None:
    cset = build_candidates(
        e2e_variant(current_accelerator="G2", keep_accelerator=True),
        ACCS,
        batch_count=2,
        sizer=size_allocation,
    )
    assert {c.accelerator for c in cset.candidates} == {"G2"}
    assert cset.sizings == 2


def test_keep_accelerator_without_a_profile_for_it_has_no_candidates() -> None:
    cset = build_candidates(
        e2e_variant(current_accelerator="H100", keep_accelerator=True),
        ACCS,
        batch_count=1,
        sizer=size_allocation,
    )
    assert cset.candidates == ()
    assert "keepAccelerator" in cset.rejection_summary()


def test_unknown_accelerator_is_rejected_without_sizing() -> None:
    cset = build_candidates(e2e_variant(), {"G2": ACCS["G2"]}, batch_count=1, sizer=size_allocation)
    assert cset.sizings == 1
    assert {r.accelerator: r.reason for r in cset.rejections} == {
        "A100": "not listed in accelerator-unit-costs",
        "MI300X": "not listed in accelerator-unit-costs",
    }


def test_best_per_accelerator_prefers_the_fastest_then_the_larger_batch() -> None:
    def c(acc: str, batch: int, rate: float) -> Candidate:
        return Candidate(acc, "d", batch, 1, 1, 1.0, rate, 1.0, 1.0, 0.1)

    cset = CandidateSet("k", (c("B", 8, 1.0), c("B", 4, 2.0), c("A", 8, 1.0), c("A", 4, 1.0)), ())
    assert [(x.accelerator, x.batch) for x in cset.best_per_accelerator()] == [("A", 8), ("B", 4)]
