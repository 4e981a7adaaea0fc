"""Token-length distribution specs."""

from __future__ import annotations

import random
import statistics

import pytest

from vllm_emulator.distributions import parse_distribution
from vllm_emulator.errors import ConfigError


def samples(spec: str, n: int = 20_000, seed: int = 3) -> list[int]:
    dist = parse_distribution(spec)
    rng = random.Random(seed)
    return [dist.sample(rng) for _ in range(n)]


def test_fixed() -> None:
    assert set(samples("128", 100)) == {128}
    assert set(samples("fixed:7", 100)) == {7}
    assert parse_distribution("fixed:7").mean == 7


def test_uniform_is_inclusive_and_centred() -> None:
    values = samples("uniform:10:20")
    assert min(values) == 10 and max(values) == 20
    assert statistics.fmean(values) == pytest.approx(15, rel=0.01)
    assert parse_distribution("uniform:10:20").mean == 15


@pytest.mark.parametrize("spec", ["exponential:50", "lognormal:200:0.5", "sharegpt:300", "sharegpt"])
def test_long_tailed_distributions_have_the_requested_mean(spec: str) -> None:
    values = samples(spec, 60_000)
    assert min(values) >= 1
    mean = parse_distribution(spec).mean
    assert statistics.fmean(values) == pytest.approx(mean, rel=0.05)


def test_sharegpt_is_long_tailed() -> None:
    values = sorted(samples("sharegpt", 60_000))
    median, p99 = values[len(values) // 2], values[int(len(values) * 0.99)]
    assert p99 > 6 * median


def test_exponential_is_geometric_with_cv_near_one() -> None:
    values = samples("exponential:100", 60_000)
    cv = statistics.pstdev(values) / statistics.fmean(values)
    assert cv == pytest.approx(1.0, abs=0.05)


def test_same_seed_same_values() -> None:
    assert samples("sharegpt", 100, seed=1) == samples("sharegpt", 100, seed=1)
    assert samples("sharegpt", 100, seed=1) != samples("sharegpt", 100, seed=2)


@pytest.mark.parametrize(
    "spec",
    ["", "0", "fixed:0", "fixed:1.5", "uniform:5", "uniform:9:3", "uniform:0:3", "exponential:0.5",
     "lognormal:10", "lognormal:10:0", "sharegpt:1:2", "pareto:3", "abc", "fixed:nan", "fixed:x"],
)  # fmt: skip
def test_bad_specs_are_rejected(spec: str) -> None:
    with pytest.raises(ConfigError):
        parse_distribution(spec)
