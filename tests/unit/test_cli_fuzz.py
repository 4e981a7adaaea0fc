"""Fuzzing the commands (hypothesis): whatever the input, a command exits 0, or 2 with exactly one line on
stderr and no traceback — never a crash, never a bug's exit 1."""

from __future__ import annotations

import copy
import io
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from variant_autoscaler.cli import main

pytestmark = pytest.mark.unit

PLAN = yaml.safe_load((Path(__file__).parent / "data" / "plan" / "limited.yaml").read_text())
FUZZ = settings(
    max_examples=int(os.environ.get("VA_FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

numbers = st.one_of(
    st.integers(min_value=-(2**40), max_value=2**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "-3", "0", "1e308", "1e-320", "", "x", "0x10", "1_000", "١٢"]),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _run(capfd: pytest.CaptureFixture[str], argv: Sequence[str]) -> tuple[int, str]:
    capfd.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own exit for a bad flag
        code = int(exc.code or 0)
    return code, capfd.readouterr().err


def _check(code: int, err: str) -> None:
    assert "Traceback" not in err
    assert code in (0, 2), f"exit {code}: {err}"
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, err
        assert "error" in lines[0]


ANALYZE_FLAGS = (
    "--alpha",
    "--beta",
    "--gamma",
    "--delta",
    "--max-batch-size",
    "--max-queue-size",
    "--input-tokens",
    "--output-tokens",
    "--rate",
    "--ttft",
    "--itl",
    "--tps",
    "--ttft-percentile",
)
VALID = {
    "--alpha": "20.58",
    "--beta": "0.41",
    "--gamma": "20.58",
    "--delta": "0.041",
    "--max-batch-size": "16",
    "--input-tokens": "128",
    "--output-tokens": "64",
}


@FUZZ
@given(changes=st.dictionaries(st.sampled_from(ANALYZE_FLAGS), numbers, max_size=4))
def test_analyze_flags(capfd: pytest.CaptureFixture[str], changes: dict[str, str]) -> None:
    args = {**VALID, **changes}
    argv = ["analyze"] + [f"{flag}={value}" for flag, value in args.items()]
    _check(*_run(capfd, argv))


@FUZZ
@given(
    cases=st.one_of(
        json_values.map(json.dumps),
        st.lists(json_values, max_size=3).map(json.dumps),
        st.binary(max_size=64).map(lambda b: b.decode("latin-1")),
        st.integers(min_value=1, max_value=50_000).map(lambda n: "[" * n + "]" * n),
    )
)
def test_analyze_json(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, cases: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(cases))
    _check(*_run(capfd, ["analyze", "--json"]))


def _mutate(document: Any, path: Sequence[int], value: Any) -> Any:
    """Replace the node reached by walking ``path`` (indices into each level's keys/items) by ``value``."""
    doc = copy.deepcopy(document)
    node, parent, key = doc, None, None
    for step in path:
        if isinstance(node, dict) and node:
            parent, key = node, sorted(node)[step % len(node)]
        elif isinstance(node, list) and node:
            parent, key = node, step % len(node)
        else:
            break
        node = parent[key]
    if parent is None:
        return value
    parent[key] = value
    return doc


@FUZZ
@given(
    path=st.lists(st.integers(min_value=0, max_value=20), min_size=1, max_size=6),
    value=json_values,
    form=st.sampled_from(["json", "yaml"]),
)
def test_plan_files(
    capfd: pytest.CaptureFixture[str],
    tmp_path_factory: pytest.TempPathFactory,
    path: list[int],
    value: Any,
    form: str,
) -> None:
    document = _mutate(PLAN, path, value)
    file = tmp_path_factory.mktemp("plan") / f"plan.{form}"
    file.write_text(json.dumps(document) if form == "json" else yaml.safe_dump(document))
    _check(*_run(capfd, ["plan", "-f", str(file), "-o", "json"]))


@FUZZ
@given(raw=st.binary(max_size=200))
def test_plan_files_of_any_bytes(
    capfd: pytest.CaptureFixture[str], tmp_path_factory: pytest.TempPathFactory, raw: bytes
) -> None:
    file = tmp_path_factory.mktemp("plan") / "plan.yaml"
    file.write_bytes(raw)
    _check(*_run(capfd, ["plan", "-f", str(file)]))


def test_the_known_bad_inputs(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The cases found by probing (issue 22), each exiting 2 with one line."""
    base = ["analyze", *(f"{k}={v}" for k, v in VALID.items())]
    for bad in ("--rate=-3", "--rate=nan", "--rate=inf", "--ttft=nan", "--ttft-percentile=200"):
        code, err = _run(capfd, [*base, bad])
        assert code == 2, bad
        _check(code, err)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    code, err = _run(capfd, ["plan", "-f", str(deep)])
    assert code == 2
    _check(code, err)


# --- simulate, min-gpus, profile -----------------------------------------------------------------------

TRACE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
SCENARIO: dict[str, Any] = {
    "name": "fuzz",
    "duration": "2m",
    "seed": 1,
    "accelerators": {"A100": {"device": "NVIDIA-A100-PCIE-80GB", "cost": "40.00"}},
    "nodes": [{"name": "a", "accelerator": "A100", "count": 1, "gpus": 4}],
    "serviceClasses": [
        {"name": "Premium", "priority": 1, "data": [{"model": "m", "slo-tpot": 50, "slo-ttft": 1000}]}
    ],
    "models": [
        {
            "modelID": "m",
            "modelProfile": {
                "accelerators": [
                    {
                        "acc": "A100",
                        "accCount": 1,
                        "maxBatchSize": 64,
                        "perfParms": {
                            "decodeParms": {"alpha": "20.58", "beta": "0.41"},
                            "prefillParms": {"gamma": "20.58", "delta": "0.041"},
                        },
                    }
                ]
            },
            "traffic": {"rate": {"constant": 1}, "inputTokens": 128, "outputTokens": 32},
            "variants": [{"name": "v", "accelerator": "A100", "replicas": 1}],
        }
    ],
}


@FUZZ
@given(
    path=st.lists(st.integers(min_value=0, max_value=20), min_size=1, max_size=7),
    value=json_values,
    form=st.sampled_from(["json", "yaml"]),
)
def test_simulate_scenarios(
    capfd: pytest.CaptureFixture[str],
    tmp_path_factory: pytest.TempPathFactory,
    path: list[int],
    value: Any,
    form: str,
) -> None:
    document = _mutate(SCENARIO, path, value)
    file = tmp_path_factory.mktemp("sim") / f"scenario.{form}"
    file.write_text(json.dumps(document) if form == "json" else yaml.safe_dump(document))
    _check(*_run(capfd, ["simulate", "-f", str(file), "--policies", "static", "--no-timeseries"]))


trace_lines = st.lists(
    st.tuples(
        st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.text(max_size=6)),
        st.one_of(st.integers(-5, 10**12).map(str), st.text(max_size=6)),
        st.one_of(st.integers(-5, 10**6).map(str), st.text(max_size=6)),
    ).map(",".join),
    max_size=6,
)


@FUZZ
@given(lines=trace_lines, raw=st.binary(max_size=40), jsonl=st.booleans())
def test_traces_for_simulate_and_min_gpus(
    capfd: pytest.CaptureFixture[str],
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[str],
    raw: bytes,
    jsonl: bool,
) -> None:
    folder = tmp_path_factory.mktemp("trace")
    trace = folder / ("trace.jsonl" if jsonl else "trace.csv")
    trace.write_bytes(TRACE_HEADER.encode() + "\n".join(lines).encode() + b"\n" + raw)
    scenario = copy.deepcopy(SCENARIO)
    scenario["models"][0]["traffic"] = {"trace": {"path": str(trace)}}
    file = folder / "scenario.json"
    file.write_text(json.dumps(scenario))
    _check(*_run(capfd, ["simulate", "-f", str(file), "--policies", "static", "--no-timeseries"]))
    model = ["--alpha", "20.58", "--beta", "0.41", "--gamma", "20.58", "--delta", "0.041"]
    _check(
        *_run(capfd, ["min-gpus", "--trace", str(trace), *model, "--max-batch-size", "64", "--ttft", "1000"])
    )


@FUZZ
@given(
    changes=st.dictionaries(
        st.sampled_from(
            [
                "--interval",
                "--speedup",
                "--rate-scale",
                "--ttft",
                "--itl",
                "--attainment",
                "--alpha",
                "--max-batch-size",
            ]
        ),
        numbers,
        max_size=3,
    )
)
def test_min_gpus_flags(
    capfd: pytest.CaptureFixture[str], tmp_path_factory: pytest.TempPathFactory, changes: dict[str, str]
) -> None:
    trace = tmp_path_factory.mktemp("trace") / "trace.csv"
    trace.write_text(TRACE_HEADER + "".join(f"{t}.0,128,32\n" for t in range(0, 120, 2)))
    flags = {
        "--alpha": "20.58", "--beta": "0.41", "--gamma": "20.58", "--delta": "0.041",
        "--max-batch-size": "64", "--ttft": "1000", **changes,
    }  # fmt: skip
    _check(*_run(capfd, ["min-gpus", "--trace", str(trace), *(f"{k}={v}" for k, v in flags.items())]))


@FUZZ
@given(
    changes=st.dictionaries(
        st.sampled_from(["--duration", "--max-concurrency", "--max-batch-size", "--acc-count", "--url"]),
        numbers,
        max_size=3,
    )
)
def test_profile_flags(capfd: pytest.CaptureFixture[str], changes: dict[str, str]) -> None:
    # Nothing listens on port 9 (discard): a sweep that gets that far fails to reach the server.
    flags = {
        "--url": "http://127.0.0.1:9",
        "--model": "m",
        "--accelerator": "A100",
        "--duration": "1",
        **changes,
    }
    _check(*_run(capfd, ["profile", *(f"{k}={v}" for k, v in flags.items())]))


def test_the_known_bad_simulator_inputs(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Issue 22's cases: a header-only trace, NaN timestamps, non-UTF-8 bytes, an oversized CSV field,
    an absurd duration — each exits 2 with one line."""
    cases = {
        "header-only": TRACE_HEADER,
        "nan": TRACE_HEADER + "nan,10,10\n",
        "inf": TRACE_HEADER + "inf,10,10\n",
        "binary": "\udcff",
        "big-field": TRACE_HEADER + "1.0," + "9" * 200_000 + ",3\n",
    }
    for name, text in cases.items():
        trace = tmp_path / f"{name}.csv"
        trace.write_bytes(text.encode("utf-8", "surrogateescape"))
        scenario = copy.deepcopy(SCENARIO)
        scenario["models"][0]["traffic"] = {"trace": {"path": str(trace)}}
        file = tmp_path / f"{name}.json"
        file.write_text(json.dumps(scenario))
        code, err = _run(capfd, ["simulate", "-f", str(file), "--policies", "static"])
        assert code == 2, (name, err)
        _check(code, err)
    code, err = _run(
        capfd, ["simulate", "--scenario", "diurnal", "--duration", "100000d", "--policies", "static"]
    )
    assert code == 2
    _check(code, err)
