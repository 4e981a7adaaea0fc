"""SLO tiers, summaries and the JSON report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from variant_autoscaler.sim.plots import plot_report
from variant_autoscaler.sim.policies import StaticPolicy
from variant_autoscaler.sim.report import (
    TIER_DROPPED,
    TIER_MEETS,
    TIER_MINOR,
    TIER_SEVERE,
    build_report,
    classify,
    summarize,
    write_report,
)
from variant_autoscaler.sim.simulator import DROP_KILLED, DROP_NONE, DROP_TIMEOUT, RunResult, simulate
from vatesting.sim import fake_factory, one_model


def result(ttft: list[float], itl: list[float], dropped: list[int]) -> RunResult:
    n = len(ttft)
    sc = one_model([float(i) for i in range(n)], slo_ttft_ms=200.0, slo_itl_ms=20.0, duration=60.0)
    return RunResult(
        policy="p",
        scenario=sc,
        variants=("v",),
        models=("m",),
        arrival_s=np.arange(n, dtype=np.float64),
        model_idx=np.zeros(n, dtype=np.int64),
        variant_idx=np.zeros(n, dtype=np.int64),
        input_tokens=np.full(n, 100, dtype=np.int64),
        output_tokens=np.full(n, 11, dtype=np.int64),
        ttft_s=np.asarray(ttft, dtype=np.float64),
        itl_s=np.asarray(itl, dtype=np.float64),
        dropped=np.asarray(dropped, dtype=np.int64),
        gpu_seconds={"v": 7200.0},
        cost={"v": 80.0},
        scale_ups={"v": 2},
        scale_downs={"v": 1},
        series={
            "t": [0.0],
            "desired": {"v": [1]},
            "ready": {"v": [1]},
            "allocated": {"v": [1]},
            "cost": [0.0],
            "gateway_waiting": {"m": [0]},
        },
        decisions=4,
        events=100,
        cpu_s=2.0,
        wall_s=2.5,
    )


def test_tiers_by_hand() -> None:
    nan = float("nan")
    r = result(
        ttft=[0.1, 0.2, 0.25, 0.1, 0.31, 0.1, nan, nan],
        itl=[0.01, 0.02, 0.01, 0.029, 0.01, 0.031, nan, nan],
        dropped=[DROP_NONE] * 6 + [DROP_TIMEOUT, DROP_KILLED],
    )
    # 0.2 s and 20 ms are exactly on the SLO (meets); 0.25 / 29 ms are within 1.5x (minor);
    # 0.31 s and 31 ms are beyond 1.5x (severe); the last two were dropped.
    assert classify(r).tolist() == [
        TIER_MEETS,
        TIER_MEETS,
        TIER_MINOR,
        TIER_MINOR,
        TIER_SEVERE,
        TIER_SEVERE,
        TIER_DROPPED,
        TIER_DROPPED,
    ]


def test_summary_fields() -> None:
    nan = float("nan")
    r = result(
        ttft=[0.1, 0.35, 0.1, nan], itl=[0.01, 0.01, 0.05, nan], dropped=[DROP_NONE] * 3 + [DROP_TIMEOUT]
    )
    s = summarize(r)
    assert s["policy"] == "p" and s["requests"] == 4
    assert s["attainment"] == pytest.approx(0.25)
    assert s["ttft_attainment"] == pytest.approx(0.5)  # dropped requests miss both SLOs
    assert s["itl_attainment"] == pytest.approx(0.5)
    assert s["tiers"] == {"meets": 0.25, "minor": 0.0, "severe": 0.5, "dropped": 0.25}
    assert s["dropped"] == {"timeout": 1, "killed": 0, "rejected": 0}
    assert s["latency_ms"]["ttft_p50"] == pytest.approx(100.0)
    assert s["cost"] == 80.0 and s["gpu_hours"] == {"A100": 2.0}
    assert s["scaling_actions"] == {"total": 3, "up": 2, "down": 1, "by_variant": {"v": {"up": 2, "down": 1}}}
    assert s["per_model"]["m"]["priority"] == 1 and s["per_model"]["m"]["slo_ms"] == {
        "ttft": 200.0,
        "itl": 20.0,
    }
    assert s["sim"]["simulated_s_per_cpu_s"] == 30.0  # 60 s simulated in 2 s of CPU


def test_report_from_a_run_is_valid_json(tmp_path: Path) -> None:
    times = [0.5 + k for k in range(50)]
    sc = one_model(times, replicas=1, duration=60.0)
    r = simulate(sc, StaticPolicy({"v": 1}), server_factory=fake_factory())
    report = build_report([r])
    assert set(report) == {"definitions", "scenario", "policies"}
    entry = report["policies"]["static"]
    ts = entry["timeseries"]
    assert len(ts["t_s"]) == 6  # 60 s at 10 s per sample
    assert sum(ts["arrival_rps"]["m"]) * 10.0 == pytest.approx(50.0)
    assert ts["ready_replicas"]["v"][0] == 1
    assert entry["attainment"] == 1.0
    path = write_report(report, tmp_path / "out" / "r.json")
    assert json.loads(path.read_text())["scenario"]["requests"] == 50
    slim = build_report([r], with_timeseries=False)
    assert "timeseries" not in slim["policies"]["static"]
    with pytest.raises(ValueError):
        build_report([])


def test_plots_are_written(tmp_path: Path) -> None:
    times = [0.5 + k for k in range(30)]
    sc = one_model(times, replicas=1, duration=40.0)
    r = simulate(sc, StaticPolicy({"v": 1}), server_factory=fake_factory())
    paths = plot_report(build_report([r]), tmp_path)
    assert sorted(p.name for p in paths) == ["cost.png", "latency.png", "load.png", "replicas.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
