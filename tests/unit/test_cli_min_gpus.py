"""``variant-autoscaler min-gpus``: the fewest GPUs over time that serve a trace within its SLOs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from variant_autoscaler.cli import main
from variant_autoscaler.commands.min_gpus import min_replicas
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.core.tail import Burstiness, RequestLengths, TailModel, TailTargets, TokenLengths

PROFILE = ["--alpha", "10", "--beta", "0.2", "--gamma", "10", "--delta", "0.02", "--max-batch-size", "32"]


def _trace(tmp_path: Path) -> Path:
    """Ten minutes of Poisson arrivals whose rate steps from 2 to 8 req/s and back (CSV, seconds)."""
    rng = np.random.default_rng(3)
    rows, t = [], 0.0
    while True:
        rate = 8.0 if 200 <= t < 400 else 2.0
        t += rng.exponential(1.0 / rate)
        if t >= 599.0:
            break
        rows.append(f"{t:.4f},{int(rng.integers(100, 1500))},{int(rng.integers(20, 400))}")
    path = tmp_path / "trace.csv"
    path.write_text("timestamp,input_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    return path


def test_plan_follows_the_load_and_replay_meets_the_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["min-gpus", "--trace", str(_trace(tmp_path)), *PROFILE, "--acc-count", "2"]
    argv += ["--ttft", "1500", "--itl", "40", "--attainment", "99", "--verify", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    gpus = [p["gpus"] for p in result["intervals"]]
    replicas = [p["replicas"] for p in result["intervals"]]
    assert len(gpus) == 10 and gpus == [2 * r for r in replicas]
    assert max(replicas[3:6]) > max(replicas[:2])  # the busy minutes need more
    assert result["gpu_hours"] == pytest.approx(sum(gpus) / 60.0)
    assert result["gpu_hours"] <= result["static_peak_gpu_hours"]
    assert result["verified"]["within_both"] >= 0.99


def test_table_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "min-gpus",
        "--trace",
        str(_trace(tmp_path)),
        *PROFILE,
        "--ttft",
        "1500",
        "--ttft-percentile",
        "99",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Minimal GPUs: peak" in out and "TTFT ≤ 1500 ms for 99 %" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--ttft", "1500"], "as shares of requests"),
        (["--ttft", "1500", "--attainment", "120"], "--attainment"),
        (["--ttft", "5", "--attainment", "99"], "no plan: tail targets unreachable"),
        (["--ttft", "1500", "--attainment", "99", "--interval", "0"], "--interval"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["min-gpus", "--trace", str(_trace(tmp_path)), *PROFILE, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_a_missing_trace_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            ["min-gpus", "--trace", str(tmp_path / "none.csv"), *PROFILE, "--ttft", "1", "--attainment", "99"]
        )
        == 2
    )
    assert "cannot read trace" in capsys.readouterr().err


def test_min_replicas_is_the_fewest_that_fit() -> None:
    parms = ServiceParms(10.0, 0.2, 10.0, 0.02)
    lengths = RequestLengths(TokenLengths.lognormal(800, 0.7), TokenLengths.lognormal(200, 0.7))
    bursts = Burstiness((1.0, 10.0), (2.0, 4.0), rate=30.0)
    targets = TailTargets(ttft=1500.0, itl=40.0, joint_miss=0.01)
    n = min_replicas(30.0, parms=parms, max_batch=32, lengths=lengths, burstiness=bursts, targets=targets)

    def fits(k: int) -> bool:  # each replica's share, with the stream's burstiness thinned to it
        share = 30.0 / k
        shares = TailModel(parms, 32, lengths, bursts).predict(share, targets)
        return shares.ttft_miss + shares.itl_miss <= 0.01 * (1 + 1e-6)

    assert fits(n) and not fits(n - 1)
    assert (
        min_replicas(0.0, parms=parms, max_batch=32, lengths=lengths, burstiness=bursts, targets=targets) == 0
    )
