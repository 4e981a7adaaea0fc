"""The trained agent: its parameter file, its decisions on hand-made features, and its place in
``simulate`` next to the other policies."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from variant_autoscaler.cli import main
from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.agent import PARAMETERS, AgentParams, AgentPolicy, Controller, load_agent
from variant_autoscaler.sim.features import FEATURES, feature_index
from variant_autoscaler.sim.runner import make_policy, run_policies
from variant_autoscaler.sim.scenarios import load_bundled
from variant_autoscaler.sim.simulator import scenario_arrivals


def rows(**columns: list[float]) -> np.ndarray:
    n = len(next(iter(columns.values())))
    out = np.zeros((n, len(FEATURES)), dtype=np.float32)
    for name, values in columns.items():
        out[:, feature_index(name)] = values
    return out


def params(**weights: float) -> AgentParams:
    return AgentParams(tuple(weights.get(name, 0.0) for name in PARAMETERS))


def test_the_shipped_agent_loads_and_round_trips(tmp_path: Path) -> None:
    shipped = load_agent()
    assert len(shipped.weights) == len(PARAMETERS)
    path = tmp_path / "a.json"
    path.write_text(shipped.to_json())
    assert load_agent(path).weights == pytest.approx(shipped.weights, abs=1e-6)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ('{"kind": "x"}', "not an agent file"),
        ('{"kind": "variant-autoscaler-agent", "weights": {"headroom": 1}}', "weights must name"),
    ],
)
def test_a_bad_agent_file_is_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_agent(path)


def test_the_agent_sizes_for_demand_over_the_analyzers_capacity() -> None:
    sc = load_bundled("flash-crowd")
    # 10 req/s over replicas that take 2 req/s each within the SLOs: 5 replicas; headroom e^0.2.
    c = Controller(sc, params(headroom=0.2, down_pace=40.0))
    x = rows(arrival_rps=[10.0], capacity_rps=[2.0], desired=[2], ready=[2], cost_per_hour=[40.0],
             units_per_replica=[1.0], max_replicas=[32.0])  # fmt: skip
    inventory = np.array([[22.0, 24.0]], dtype=np.float32)
    assert c.targets(x, inventory) == [math.ceil(5 * math.exp(0.2))]
    # The load halves: with a pace of σ(40) ≈ 1 the whole gap is closed at once.
    x[0, feature_index("arrival_rps")] = 5.0
    x[0, feature_index("desired")] = 7
    assert c.targets(x, inventory) == [math.ceil(2.5 * math.exp(0.2))]


def test_the_agent_scales_down_at_its_learned_pace() -> None:
    sc = load_bundled("flash-crowd")
    c = Controller(sc, params(down_pace=0.0))  # σ(0): half the gap per decision
    x = rows(arrival_rps=[2.0], capacity_rps=[2.0], desired=[9], cost_per_hour=[40.0],
             units_per_replica=[1.0], max_replicas=[32.0])  # fmt: skip
    assert c.targets(x, np.array([[15.0, 24.0]], dtype=np.float32)) == [5]  # 9 - (9 - 1) / 2


def test_the_agent_fills_the_cheapest_variant_then_the_next_within_the_inventory() -> None:
    sc = load_bundled("node-failure")  # A100 (cost 40, 2 req/s) and H100 (cost 100, 4 req/s)
    c = Controller(sc, params())
    x = rows(arrival_rps=[12.0, 0.0], capacity_rps=[2.0, 4.0], desired=[4, 0], cost_per_hour=[40.0, 100.0],
             units_per_replica=[1.0, 1.0], max_replicas=[32.0, 32.0])  # fmt: skip
    # 6 A100 replicas wanted, only 4 healthy A100 units: the rest (2 A100-replicas = 1 H100) on H100.
    assert c.targets(x, np.array([[0.0, 4.0], [8.0, 8.0]], dtype=np.float32)) == [4, 1]


def test_the_agent_serves_the_higher_priority_first_when_gpus_are_short() -> None:
    sc = load_bundled("scarce")  # llama (priority 1) and granite (priority 10) share 8 A100s
    c = Controller(sc, params())
    x = rows(arrival_rps=[12.0, 8.0], capacity_rps=[2.0, 2.0], desired=[4, 4], cost_per_hour=[40.0, 40.0],
             units_per_replica=[1.0, 1.0], max_replicas=[32.0, 32.0])  # fmt: skip
    assert c.targets(x, np.array([[0.0, 8.0]], dtype=np.float32)) == [6, 2]


def test_the_agent_runs_in_simulate_as_a_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sc = dataclasses.replace(load_bundled("flash-crowd"), duration_s=900.0)
    policy = make_policy("agent", sc, scenario_arrivals(sc))
    assert isinstance(policy, AgentPolicy) and policy.interval_s == 60.0
    (result,) = run_policies(sc, ["agent"])
    assert result.decisions == 14 and result.policy == "agent"
    path = tmp_path / "agent.json"
    path.write_text(params(headroom=0.5).to_json())
    out = tmp_path / "report.json"
    code = main(["simulate", "--scenario", "flash-crowd", "--duration", "10m", "--policies",
                 f"ours,agent:{path}", "-o", str(out)])  # fmt: skip
    assert code == 0
    report = json.loads(out.read_text())
    assert list(report["policies"]) == ["ours", f"agent:{path}"]
    capsys.readouterr()


def test_simulate_exits_2_on_a_missing_agent_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--scenario", "flash-crowd", "--policies", "agent:/no/such.json"]) == 2
    assert "cannot read agent" in capsys.readouterr().err
