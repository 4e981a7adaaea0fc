"""``variant-autoscaler profile`` against a real emulator process whose parameters it is not told."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from vllm_emulator.process import EmulatorProcess

MODEL = "prof/model"
SCALE = 20.0
TRUE = {"alpha": 14.0, "beta": 0.3, "gamma": 25.0, "delta": 0.02}
MAX_NUM_SEQS = 16


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorProcess]:
    args = [
        "--model",
        MODEL,
        "--noise",
        "0.1",
        "--time-scale",
        str(SCALE),
        "--max-num-seqs",
        str(MAX_NUM_SEQS),
    ]
    args += ["--seed", "5", "--log-level", "warning"]
    for name, value in TRUE.items():
        args += [f"--{name}", str(value)]
    with EmulatorProcess(args) as process:
        yield process


def profile(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "variant_autoscaler.cli", "profile", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_profile_measures_each_parameter_within_5_percent(emulator: EmulatorProcess, tmp_path: Path) -> None:
    plot = tmp_path / "fit.png"
    proc = profile(
        "--url", f"{emulator.url}/v1", "--model", MODEL, "--accelerator", "L4", "--duration", "40",
        "--max-concurrency", "32", "--plot", str(plot),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    entry = yaml.safe_load(proc.stdout)
    assert entry["acc"] == "L4"
    assert entry["accCount"] == 1
    # The sweep went past 16 in flight: requests waited while the batch stayed at 16.
    assert entry["maxBatchSize"] == MAX_NUM_SEQS
    parms = {**entry["perfParms"]["decodeParms"], **entry["perfParms"]["prefillParms"]}
    assert set(parms) == set(TRUE)
    for name, true in TRUE.items():
        assert isinstance(parms[name], str)  # the CRD's map of decimal strings
        measured = float(parms[name]) * SCALE  # every emulated duration is divided by the time scale
        assert abs(measured - true) <= 0.05 * true, (name, measured, true, proc.stderr)
    # progress and the fit report on stderr; the plot written
    assert "[profile] phase 1/12" in proc.stderr
    assert "R² =" in proc.stderr and "resid" in proc.stderr
    assert plot.stat().st_size > 10_000


def test_json_output_is_the_same_entry_shape(emulator: EmulatorProcess) -> None:
    proc = profile(
        "--url", emulator.url, "--model", MODEL, "--accelerator", "L4", "--duration", "20",
        "--max-concurrency", "4", "--max-batch-size", "16", "--acc-count", "2", "-o", "json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)
    assert entry["accCount"] == 2
    assert entry["maxBatchSize"] == 16
    assert "from --max-batch-size" in proc.stderr
    assert set(entry["perfParms"]["decodeParms"]) == {"alpha", "beta"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "ftp://x", "--model", "m", "--accelerator", "A"], "--url must be http://"),
        (["--url", "http://127.0.0.1:9", "--model", "m", "--accelerator", "A", "--duration", "5"],
         "--duration"),
        (["--url", "http://127.0.0.1:9", "--model", "m", "--accelerator", "A", "--max-concurrency", "1"],
         "--max-concurrency"),
        (["--url", "http://127.0.0.1:9", "--model", "m", "--accelerator", "A"], "cannot read"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_with_one_line(args: list[str], message: str) -> None:
    proc = profile(*args, timeout=60)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert message in lines[0]
    assert "Traceback" not in proc.stderr


def test_a_model_the_server_does_not_serve_exits_2(emulator: EmulatorProcess) -> None:
    proc = profile("--url", emulator.url, "--model", "not/served", "--accelerator", "A", "--duration", "20")
    assert proc.returncode == 2
    assert "model_name='not/served'" in proc.stderr
    assert "Traceback" not in proc.stderr
