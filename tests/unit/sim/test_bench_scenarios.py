"""The policy benchmark's scenario files that replay shipped traces parse, and the traces are whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from variant_autoscaler.api.documents import load_document
from variant_autoscaler.sim.config import parse_scenario
from variant_autoscaler.sim.traffic import read_trace

BENCH = Path(__file__).resolve().parents[3] / "bench"


def test_the_code_trace_is_shipped_whole_with_its_attribution() -> None:
    arrivals = read_trace(BENCH / "traces" / "azure-llm-inference-2023-code.csv")
    assert len(arrivals) == 8819
    assert np.all(np.diff(arrivals.times) >= 0.0)
    assert 57.0 < arrivals.times[-1] / 60.0 < 57.5
    assert 2040 < float(np.mean(arrivals.input_tokens)) < 2055
    readme = (BENCH / "traces" / "README.md").read_text(encoding="utf-8")
    assert "CC BY 4.0" in readme and "Azure Public Dataset" in readme


def test_the_azure_code_scenario_replays_the_shipped_trace() -> None:
    path = BENCH / "scenarios" / "azure-code.yaml"
    scenario = parse_scenario(
        load_document(path.read_text(encoding="utf-8"), source=str(path)), base_dir=path.parent
    )
    assert scenario.name == "azure-code"
    assert [m.model_id for m in scenario.models] == ["meta/llama-3.1-8b"]
    assert scenario.duration_s == 57 * 60.0
