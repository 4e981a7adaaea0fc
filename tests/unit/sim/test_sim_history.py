"""A scenario cut into the history an operator starts with and the run (``simulate --history``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.cluster import scenario_arrivals
from variant_autoscaler.sim.history import split_history
from variant_autoscaler.sim.optimizing import ours_policy
from variant_autoscaler.sim.runner import PolicyOptions, make_policy
from variant_autoscaler.sim.scenario import Failure
from variant_autoscaler.sim.scenarios import load_bundled


def test_the_history_is_the_first_intervals_rates_and_the_run_the_rest_from_zero() -> None:
    scenario = dataclasses.replace(load_bundled("flash-crowd"), duration_s=1800.0)
    arrivals = scenario_arrivals(scenario)
    split = split_history(scenario, arrivals, 610.0)  # whole minutes: 600 s
    assert split.history_s == 600.0 and split.scenario.duration_s == 1200.0
    for model, arr in arrivals.items():
        rates = split.history[model]
        assert len(rates) == 10
        first = arr.times < 600.0
        assert sum(rates) * 60.0 == pytest.approx(float(first.sum()))
        assert rates[0] * 60.0 == float((arr.times < 60.0).sum())
        later = split.arrivals[model]
        assert len(later) == len(arr) - int(first.sum())
        np.testing.assert_allclose(later.times, arr.times[~first] - 600.0)
        np.testing.assert_array_equal(later.input_tokens, arr.input_tokens[~first])


def test_failures_move_with_the_cut() -> None:
    base = load_bundled("node-failure")
    pool = base.failures[0].pool
    scenario = dataclasses.replace(
        base,
        failures=(
            Failure(at_s=100.0, pool=pool, recover_s=200.0),  # over before the operator starts: gone
            Failure(at_s=200.0, pool=pool, recover_s=900.0),  # still down at the cut: from the start
            Failure(at_s=3000.0, pool=pool),  # later: the same moment of the traffic
        ),
    )
    split = split_history(scenario, scenario_arrivals(scenario), 600.0)
    assert [(f.at_s, f.recover_s) for f in split.scenario.failures] == [(0.0, 300.0), (2400.0, None)]


def test_a_history_longer_than_the_scenario_or_under_one_interval_is_refused() -> None:
    scenario = dataclasses.replace(load_bundled("flash-crowd"), duration_s=600.0)
    arrivals = scenario_arrivals(scenario)
    for bad in (0.0, 30.0, 600.0, 900.0):
        with pytest.raises(ConfigError, match="history"):
            split_history(scenario, arrivals, bad)


def test_ours_learns_the_history_and_the_other_policies_ignore_it() -> None:
    scenario = dataclasses.replace(load_bundled("flash-crowd"), duration_s=1800.0)
    arrivals = scenario_arrivals(scenario)
    split = split_history(scenario, arrivals, 1500.0)
    options = PolicyOptions(forecast_history=split.history)
    warmed = make_policy("ours", split.scenario, split.arrivals, options)
    afresh = ours_policy(split.scenario)
    for model in split.history:
        assert warmed._forecasts[model].step == 25 and afresh._forecasts[model].step == 0
    ablation = make_policy("ours:tail/none/guard", split.scenario, split.arrivals, options)
    assert all(ablation._forecasts[m].step == 25 for m in split.history)
    assert make_policy("hpa-kv", split.scenario, split.arrivals, options).name == "hpa-kv"
