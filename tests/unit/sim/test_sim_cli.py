"""The ``variant-autoscaler simulate`` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from variant_autoscaler.cli import main
from variant_autoscaler.sim.runner import EXPERIMENTS, POLICY_NAMES
from variant_autoscaler.sim.scenarios import BUNDLED


def small_file(tmp_path: Path) -> Path:
    text = yaml.safe_load(
        """
name: cli-small
duration: 3m
seed: 5
accelerators: {A100: {device: NVIDIA-A100-PCIE-80GB, cost: "40.00"}}
nodes: [{name: a100, accelerator: A100, count: 1, gpus: 4}]
serviceClasses:
  - {name: Premium, priority: 1, data: [{model: m1, slo-tpot: 50, slo-ttft: 1000}]}
models:
  - modelID: m1
    startup: 30s
    modelProfile:
      accelerators:
        - acc: A100
          accCount: 1
          maxBatchSize: 16
          perfParms:
            decodeParms: {alpha: "20.58", beta: "0.41"}
            prefillParms: {gamma: "20.58", delta: "0.041"}
    traffic:
      rate: {constant: 2}
      inputTokens: {fixed: 128}
      outputTokens: {fixed: 32}
    variants: [{name: v1, accelerator: A100, replicas: 1}]
"""
    )
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(text))
    return path


def test_simulate_writes_report_and_prints_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    code = main(
        [
            "simulate",
            "-f",
            str(small_file(tmp_path)),
            "--policies",
            "static,hpa-kv,wva",
            "-o",
            str(out),
            "--format",
            "json",
            "--duration",
            "2m",
        ]
    )
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert list(printed["policies"]) == ["static", "hpa-kv", "wva"]
    assert printed["scenario"]["duration_s"] == 120.0
    assert "timeseries" not in printed["policies"]["wva"]
    saved = json.loads(out.read_text())
    assert "timeseries" in saved["policies"]["static"]
    for entry in saved["policies"].values():
        assert 0.0 <= entry["attainment"] <= 1.0
        assert entry["cost"] > 0


def test_simulate_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["simulate", "-f", str(small_file(tmp_path)), "--policies", "hpa-waiting", "--seed", "9"]) == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("scenario cli-small:")
    assert "hpa-waiting" in out and "sim-s/cpu-s" in out


def test_list_and_dump(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--list-scenarios"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in BUNDLED)
    assert main(["simulate", "--dump-scenario", "scarce"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["name"] == "scarce"


def test_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate"]) == 2
    assert "give a scenario" in capsys.readouterr().err
    assert main(["simulate", "-f", str(small_file(tmp_path)), "--policies", "magic"]) == 2
    assert "unknown policy 'magic'" in capsys.readouterr().err
    assert main(["simulate", "-f", str(small_file(tmp_path)), "--duration", "soon"]) == 2
    assert "--duration" in capsys.readouterr().err


def test_history_runs_the_rest_and_warms_ours(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    path = str(small_file(tmp_path))
    args = ["simulate", "-f", path, "--policies", "ours,static", "--history", "1m", "-o", str(out)]
    assert main([*args, "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert "the first 60 s of the traffic are history" in captured.err
    assert "remaining 2 min" in captured.err
    report = json.loads(out.read_text())
    assert report["scenario"]["duration_s"] == 120.0 and report["scenario"]["history_s"] == 60.0
    assert set(report["policies"]) == {"ours", "static"}
    refusals = (("5m", "shorter than the scenario"), ("10s", "at least one"), ("soon", "not a duration"))
    for bad, says in refusals:
        assert main(["simulate", "-f", path, "--policies", "ours", "--history", bad]) == 2
        err = capsys.readouterr().err
        assert "--history" in err and says in err and "Traceback" not in err, err


def test_unknown_policies_name_every_valid_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", str(small_file(tmp_path)), "--policies", "ours,magic"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert all(name in err for name in (*POLICY_NAMES, *EXPERIMENTS))
    assert main(["simulate", "-f", str(small_file(tmp_path)), "--policies", ","]) == 2
    assert "name at least one" in capsys.readouterr().err


def _trace_scenario(tmp_path: Path, lines: list[str], **model: object) -> Path:
    (tmp_path / "trace.jsonl").write_text("".join(lines))
    doc = yaml.safe_load(small_file(tmp_path).read_text())
    doc["models"][0]["traffic"] = {"trace": {"path": "trace.jsonl"}}
    doc["models"][0].update(model)
    path = tmp_path / "trace.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_over_long_requests_and_a_short_trace_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [
        f'{{"timestamp": {1000 * i}, "input_length": {9000 if i % 5 == 0 else 300}, "output_length": 20}}\n'
        for i in range(60)
    ]
    path = _trace_scenario(tmp_path, lines, maxModelLen=8192)
    out = tmp_path / "report.json"
    code = main(["simulate", "-f", str(path), "--policies", "static", "--format", "json", "-o", str(out)])
    assert code == 0
    err = capsys.readouterr().err
    assert "12 of 60 requests" in err and "8,192 tokens" in err and "dropped as rejected" in err
    assert "its trace ends at 59 s of the 3 min run" in err
    report = json.loads(out.read_text())
    assert report["policies"]["static"]["dropped"]["rejected"] == 12


def test_a_malformed_json_lines_trace_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _trace_scenario(tmp_path, ['{"timestamp": 0, "input_length": 3, "output_length": 2}\n', "oops\n"])
    assert main(["simulate", "-f", str(path), "--policies", "static"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "line 2: not a JSON object" in err
