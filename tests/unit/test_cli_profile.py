"""``variant-autoscaler profile``: the sweep design, reading vLLM's /metrics, the fit, the entry it prints.

The sweep itself, against a real emulator process, is in tests/integration/test_profile_command.py.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client import generate_latest

from variant_autoscaler.cli import main
from variant_autoscaler.commands.profile import (
    Phase,
    PhaseResult,
    Sample,
    _max_batch,
    design_sweep,
    measure,
    parse_metrics,
    render_entry,
    render_report,
)
from variant_autoscaler.core.estimator import admission_batch, decode_batch
from variant_autoscaler.core.profiling import SweepPoint, fit_sweep
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.errors import ModelError
from vllm_emulator.engine import Engine, EngineConfig, Profile
from vllm_emulator.metrics import EmulatorMetrics, VllmCollector, build_registry

ROOT = Path(__file__).resolve().parents[2]
TRUE = ServiceParms(alpha=20.0, beta=0.4, gamma=25.0, delta=0.03)


def test_the_sweep_doubles_concurrency_with_a_short_and_a_long_prompt() -> None:
    phases = design_sweep(300.0, 64)
    assert [p.concurrency for p in phases[::2]] == [1, 2, 4, 8, 16, 32, 64]
    assert {p.prompt_tokens for p in phases} == {128, 1024}
    assert sum(p.seconds for p in phases) == pytest.approx(300.0)
    assert [p.concurrency for p in design_sweep(60.0, 12)[::2]] == [1, 2, 4, 8, 12]


def _metrics_text(model: str = "m/x") -> str:
    """/metrics of an emulator engine that served a few requests, in vLLM's format."""
    engine = Engine(EngineConfig(profile=Profile(20.0, 0.4, 25.0, 0.03), max_num_seqs=8))
    metrics = EmulatorMetrics(model, 8192)
    for i in range(6):
        engine.submit(i, 200, 20, now=0.01 * i)
    metrics.record(engine.advance(100.0))
    collector = VllmCollector(metrics, running=lambda: 3.0, waiting=lambda: 1.0, kv_usage=lambda: 0.1)
    return generate_latest(build_registry(collector)).decode()


def test_parse_metrics_reads_vllm_histograms_and_gauges() -> None:
    sample = parse_metrics(_metrics_text(), "m/x", t=5.0)
    assert sample.t == 5.0
    assert sample.itl is not None and sample.itl[1] == 6 * 19  # every gap after a first token
    assert sample.prefill is not None and sample.prefill[1] == 6
    assert sample.prompt == (1200.0, 6.0)
    assert sample.running == 3.0 and sample.waiting == 1.0
    assert sample.prefill_source == "vllm:request_prefill_time_seconds"
    assert sample.max_num_seqs is None  # vLLM does not export it
    other = parse_metrics(_metrics_text(), "another/model", t=5.0)
    assert other.itl is None and other.running is None


def test_parse_metrics_reads_max_num_seqs_from_an_info_metric() -> None:
    text = (
        _metrics_text()
        + '# TYPE vllm:scheduler_config_info gauge\nvllm:scheduler_config_info{max_num_seqs="96"} 1.0\n'
    )
    assert parse_metrics(text, "m/x", t=0.0).max_num_seqs == 96


def test_measure_uses_littles_law_and_the_gauge_polls() -> None:
    first = Sample(
        t=10.0, itl=(100.0, 1000.0), prefill=(5.0, 50.0), prompt=(6400.0, 50.0), running=4, waiting=0
    )
    last = Sample(
        t=20.0, itl=(140.0, 3000.0), prefill=(6.0, 90.0), prompt=(11520.0, 90.0), running=4, waiting=0
    )
    polls = [
        Sample(t=10.0 + i, itl=None, prefill=None, prompt=None, running=r, waiting=0)
        for i, r in enumerate((3, 5, 4, 4))
    ]
    point = measure(first, last, polls, Phase(4, 128, 12.0))
    assert point.running == pytest.approx((40.0 + 1.0) / 10.0)
    assert point.itl_ms == pytest.approx(20.0)
    assert point.prefill_ms == pytest.approx(25.0)
    assert point.prompt_tokens == pytest.approx(128.0)
    assert point.decode_tokens == 2000 and point.requests == 40
    assert point.dispersion == 1.0  # variance 0.5 over mean 4: steadier than Poisson


def _synthetic(max_batch: int | None, noise: float = 0.0) -> list[SweepPoint]:
    rng = random.Random(4)
    points = []
    for c in (1, 2, 4, 8, 16, 32):
        for prompt in (128.0, 1024.0):
            running = 0.9 * min(c, max_batch or c)
            cap = min(c, max_batch) if max_batch else c
            xd = decode_batch(running, cap, TRUE.alpha, TRUE.beta)
            xp = prompt * admission_batch(running, cap, TRUE.alpha, TRUE.beta)
            f = rng.lognormvariate(0, noise) if noise else 1.0
            points.append(
                SweepPoint(
                    concurrency=c,
                    prompt_tokens=prompt,
                    running=running,
                    dispersion=1.0,
                    itl_ms=(TRUE.alpha + TRUE.beta * xd) * f,
                    decode_tokens=2000.0,
                    prefill_ms=(TRUE.gamma + TRUE.delta * xp) / f,
                    requests=50.0,
                    e2e_ms=900.0,
                    output_tokens=40.0,
                )
            )
    return points


def test_fit_sweep_recovers_the_parameters() -> None:
    fit = fit_sweep(_synthetic(16), 16)
    for name in ("alpha", "beta", "gamma", "delta"):
        assert getattr(fit.parms, name) == pytest.approx(getattr(TRUE, name), rel=1e-3)
    assert fit.decode.r2 > 0.999 and fit.prefill.r2 > 0.999
    noisy = fit_sweep(_synthetic(16, noise=0.01), 16)  # 1 % noise on twelve points
    for name, tolerance in (("alpha", 0.03), ("beta", 0.08), ("gamma", 0.03), ("delta", 0.03)):
        assert getattr(noisy.parms, name) == pytest.approx(getattr(TRUE, name), rel=tolerance)
    predicted = fit.predicted_e2e_ms(_synthetic(16)[0])
    assert predicted is not None and predicted > TRUE.gamma


def test_fit_sweep_needs_two_batch_sizes() -> None:
    one = [p for p in _synthetic(None) if p.concurrency == 4]
    with pytest.raises(ModelError, match="fewer than two batch sizes"):
        fit_sweep(one, None)
    no_prefill = [replace(p, prefill_ms=None) for p in _synthetic(None)]
    with pytest.raises(ModelError, match="prefill"):
        fit_sweep(no_prefill, None)


def _crd_accelerator_schema() -> dict[str, Any]:
    crd = yaml.safe_load((ROOT / "crds" / "llmd.ai_variantautoscalings.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    schema: dict[str, Any] = spec["properties"]["modelProfile"]["properties"]["accelerators"]["items"]
    return schema


def test_the_entry_is_valid_for_the_crd_and_parses_back() -> None:
    fit = fit_sweep(_synthetic(16), 16)
    entry = render_entry("H100", 2, 16, fit)
    jsonschema.validate(entry, _crd_accelerator_schema())
    assert entry["acc"] == "H100" and entry["accCount"] == 2 and entry["maxBatchSize"] == 16
    decode = entry["perfParms"]["decodeParms"]
    assert float(decode["alpha"]) == pytest.approx(TRUE.alpha, rel=1e-3)
    # round-trips through YAML as the strings the CRD wants
    assert yaml.safe_load(yaml.safe_dump(entry)) == entry


def _result(c: int, running_max: float, waited: bool) -> PhaseResult:
    point = _synthetic(None)[0]
    return PhaseResult(Phase(c, 128, 10.0), point, running_max, waited, completed=10, errors=0)


def test_max_batch_size_sources(capsys: pytest.CaptureFixture[str]) -> None:
    assert _max_batch(32, 64, []) == (32, "from --max-batch-size")
    assert _max_batch(None, 64, []) == (64, "reported by the server")
    size, source = _max_batch(None, None, [_result(8, 8, False), _result(32, 16, True)])
    assert size == 16 and source.startswith("observed")
    size, source = _max_batch(None, None, [_result(8, 8, False)])
    assert size == 256 and "assumed" in source
    assert "pass --max-batch-size" in capsys.readouterr().err


def test_the_report_lists_every_phase_with_residuals() -> None:
    points = _synthetic(16)
    fit = fit_sweep(points, 16)
    results = [
        PhaseResult(Phase(p.concurrency, int(p.prompt_tokens), 10.0), p, p.running, False, 10, 0)
        for p in points
    ]
    report = render_report(results, fit, 16, "observed")
    assert report.count("\n") >= len(points) + 5
    assert "R² =" in report and "maxBatchSize 16 (observed)" in report


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "http://h:1", "--model", " ", "--accelerator", "A"], "--model must not be empty"),
        (["--url", "http://h:1", "--model", "m", "--accelerator", "A", "--acc-count", "0"], "--acc-count"),
        (
            ["--url", "http://h:1", "--model", "m", "--accelerator", "A", "--max-batch-size", "0"],
            "--max-batch-size",
        ),
        (
            ["--url", "http://h:1", "--model", "m", "--accelerator", "A", "--metrics-url", "x"],
            "--metrics-url",
        ),
        (["--url", "h:1", "--model", "m", "--accelerator", "A"], "--url"),
    ],
)
def test_invalid_input_is_one_line_and_exit_2(
    capfd: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["profile", *args]) == 2
    _, err = capfd.readouterr()
    assert err.count("\n") == 1 and message in err
