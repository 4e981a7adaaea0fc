"""The ``variant-autoscaler analyze`` command, human and batch (``--json``) forms."""

from __future__ import annotations

import io
import json
import sys
from typing import Any

import pytest

from variant_autoscaler.cli import main
from variant_autoscaler.core.queueing import QueueAnalyzer, RequestSize, ServiceParms, TargetPerf

MODEL_ARGS = [
    "--alpha",
    "20.58",
    "--beta",
    "0.41",
    "--gamma",
    "20.58",
    "--delta",
    "0.041",
    "--max-batch-size",
    "64",
    "--input-tokens",
    "512",
    "--output-tokens",
    "256",
]
BENCH = QueueAnalyzer(64, None, ServiceParms(20.58, 0.41, 20.58, 0.041), RequestSize(512, 256))
CASE: dict[str, Any] = {
    "alpha": 20.58,
    "beta": 0.41,
    "gamma": 20.58,
    "delta": 0.041,
    "maxBatchSize": 64,
    "avgInputTokens": 512,
    "avgOutputTokens": 256,
    "requestRate": 3,
    "targetTTFT": 500,
    "targetITL": 40,
}


def g4(value: float) -> str:
    return f"{value:.4g}"


def run_batch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdin: str
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(["analyze", "--json"])
    out = capsys.readouterr()
    return code, out.out, out.err


def strict_json(text: str) -> Any:
    def reject(name: str) -> None:
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=reject)


# ---- human form -----------------------------------------------------------------------------------


def test_human_form_prints_metrics_and_max_rate(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", *MODEL_ARGS, "--rate", "3", "--ttft", "500", "--itl", "40"]) == 0
    out = capsys.readouterr().out
    m = BENCH.analyze(3.0)
    s = BENCH.size(TargetPerf(ttft=500.0, itl=40.0))
    assert "At 3 req/s per replica" in out
    assert f"TTFT                  {g4(m.ttft)} ms" in out
    assert f"ITL                   {g4(m.itl)} ms" in out
    assert "Max rate per replica under TTFT <= 500 ms, ITL <= 40 ms" in out
    assert f"meeting TTFT          {g4(s.rate_target_ttft)} req/s" in out
    assert f"meeting ITL           {g4(s.rate_target_itl)} req/s" in out
    assert f"max rate              {g4(s.max_rate)} req/s" in out
    assert g4(s.max_rate) == "2.684"  # the TTFT target binds
    assert f"{g4(BENCH.rate_range[0])} .. {g4(BENCH.rate_range[1])} req/s" in out


def test_human_form_without_rate_or_targets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", *MODEL_ARGS]) == 0
    out = capsys.readouterr().out
    assert "At " not in out
    assert "Max rate per replica (no targets)" in out
    assert f"max rate              {g4(BENCH.rate_range[1])} req/s" in out


def test_human_form_reports_unreachable_targets_and_rates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", *MODEL_ARGS, "--rate", "30", "--ttft", "10"]) == 0
    out = capsys.readouterr().out
    assert "not analysable: rate=30 req/s exceeds the max allowed rate" in out
    assert "none: TTFT target 10 ms unreachable: 41.59 ms at the lowest rate" in out


def test_human_form_with_tps_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", *MODEL_ARGS, "--tps", "500"]) == 0
    out = capsys.readouterr().out
    assert "under TPS >= 500 tokens/s" in out
    assert f"stability cap (TPS)   {g4(BENCH.rate_range[1] * 0.9)} req/s" in out


def test_human_form_needs_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "--alpha", "1", "--rate", "3"])
    assert exc.value.code == 2
    assert "the model needs --beta, --gamma, --delta, --max-batch-size" in capsys.readouterr().err


def test_human_form_invalid_model_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    args = [a if a != "64" else "0" for a in MODEL_ARGS]
    assert main(["analyze", *args]) == 2
    assert "error: maxBatchSize must be between 1 and" in capsys.readouterr().err


def test_help_shows_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    out = capsys.readouterr().out
    assert "variant-autoscaler analyze --json" in out and "--max-batch-size" in out


# ---- batch form -----------------------------------------------------------------------------------


def test_batch_form_matches_the_analyzer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_batch(monkeypatch, capsys, json.dumps([CASE]))
    assert code == 0
    [result] = strict_json(out)
    assert list(result) == ["error", "rateRange", "analysis", "size"]
    assert result["error"] is None
    assert result["rateRange"] == list(BENCH.rate_range)
    m = BENCH.analyze(3.0)
    assert result["analysis"] == {
        "error": None,
        "throughput": m.throughput,
        "avgRespTime": m.avg_resp_time,
        "avgWaitTime": m.avg_wait_time,
        "avgNumInServ": m.avg_num_in_serv,
        "avgPrefillTime": m.avg_prefill_time,
        "ttft": m.ttft,
        "itl": m.itl,
        "rho": m.rho,
        "maxRate": m.max_rate,
    }
    s = BENCH.size(TargetPerf(ttft=500.0, itl=40.0))
    assert result["size"] == {
        "error": None,
        "rateTargetTTFT": s.rate_target_ttft,
        "rateTargetITL": s.rate_target_itl,
        "rateTargetTPS": s.rate_target_tps,
        "maxRate": s.max_rate,
        "throughput": s.metrics.throughput,
        "ttft": s.ttft,
        "itl": s.itl,
        "tps": s.tps,
    }


def test_batch_form_keeps_order_and_isolates_invalid_cases(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = [
        {**CASE, "maxBatchSize": 8},
        {"alpha": 1.0},  # missing keys
        5,  # not an object
        {**CASE, "targetTtft": 5},  # misspelt key
        {**CASE, "maxBatchSize": 0},  # model error
        {**CASE, "alpha": "fast"},  # wrong type
        {**CASE, "requestRate": 1000},  # above the range: analysis error only
        {**CASE, "requestRate": -1},
        {**CASE, "targetITL": 1},  # unreachable: size error only
        {**CASE, "targetTTFT": -5},
        {k: v for k, v in CASE.items() if k != "requestRate"},  # no analysis asked
        {**CASE, "maxBatchSize": 16, "maxQueueSize": 0, "requestRate": 2},
    ]
    code, out, _ = run_batch(monkeypatch, capsys, json.dumps(cases))
    assert code == 0
    results = strict_json(out)
    assert len(results) == len(cases)
    ok = results[0]
    small = QueueAnalyzer(8, None, ServiceParms(20.58, 0.41, 20.58, 0.041), RequestSize(512, 256))
    assert ok["error"] is None and ok["rateRange"] == list(small.rate_range)
    assert "beta: Field required" in results[1]["error"]
    assert results[2]["error"] == "a case must be a JSON object, got int"
    assert "targetTtft: Extra inputs are not permitted" in results[3]["error"]
    assert "maxBatchSize must be between 1" in results[4]["error"]
    assert "alpha: Input should be a valid number" in results[5]["error"]
    for bad in results[1:6]:
        assert (bad["rateRange"], bad["analysis"], bad["size"]) == (None, None, None)
    assert "exceeds the max allowed rate" in results[6]["analysis"]["error"]
    assert results[6]["analysis"]["ttft"] is None and results[6]["size"]["error"] is None
    assert "invalid request rate" in results[7]["analysis"]["error"]
    assert results[8]["size"]["error"] == "ITL target 1 ms unreachable: 20.99 ms at the lowest rate"
    assert results[8]["size"]["maxRate"] is None and results[8]["analysis"]["error"] is None
    assert "TTFT target must be a finite number >= 0" in results[9]["size"]["error"]
    assert results[10]["analysis"] is None and results[10]["size"]["error"] is None
    no_queue = QueueAnalyzer(16, 0, ServiceParms(20.58, 0.41, 20.58, 0.041), RequestSize(512, 256))
    assert results[11]["analysis"]["throughput"] == no_queue.analyze(2.0).throughput


def test_batch_form_non_finite_inputs_are_case_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_batch(
        monkeypatch,
        capsys,
        '[{"alpha": NaN, "beta": 0.41, "gamma": 1, "delta": 0.01, '
        '"maxBatchSize": 8, "avgInputTokens": 10, "avgOutputTokens": 10}]',
    )
    assert code == 0
    [result] = strict_json(out)
    assert "alpha must be a finite number" in result["error"]


@pytest.mark.parametrize(
    ("stdin", "message"), [("{not json", "not valid JSON"), ('{"alpha": 1}', "JSON array")]
)
def test_batch_form_rejects_unusable_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdin: str, message: str
) -> None:
    code, out, err = run_batch(monkeypatch, capsys, stdin)
    assert code == 2 and out == "" and message in err


def test_batch_form_empty_array(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_batch(monkeypatch, capsys, "[]")
    assert code == 0 and strict_json(out) == []


def test_a_ttft_percentile_target_in_both_forms(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    targets = TargetPerf(ttft=500.0, itl=40.0, ttft_percentile=99)
    size = BENCH.size(targets)
    args = ["--rate", "3", "--ttft", "500", "--itl", "40", "--ttft-percentile", "99"]
    assert main(["analyze", *MODEL_ARGS, *args]) == 0
    out = capsys.readouterr().out
    assert "under TTFT p99 <= 500 ms, ITL <= 40 ms" in out
    assert f"TTFT p99              {g4(BENCH.ttft_percentile(3.0, 99))} ms" in out
    assert f"max rate              {g4(size.max_rate)} req/s" in out
    code, text, _ = run_batch(monkeypatch, capsys, json.dumps([CASE | {"targetTTFTPercentile": 99}]))
    assert code == 0
    [result] = strict_json(text)
    assert result["analysis"]["ttftAtPercentile"] == BENCH.ttft_percentile(3.0, 99)
    assert result["size"]["maxRate"] == size.max_rate
    assert result["size"]["ttftAtPercentile"] == size.ttft_at_percentile
    code, text, _ = run_batch(monkeypatch, capsys, json.dumps([CASE | {"targetTTFTPercentile": 100}]))
    [result] = strict_json(text)
    assert "percentile" in result["size"]["error"]
