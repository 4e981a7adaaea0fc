"""The load generator's pure parts: rate schedules, arrival processes, latency statistics, CLI parsing."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from vllm_emulator.distributions import parse_distribution
from vllm_emulator.errors import ConfigError
from vllm_emulator.loadgen import (
    LatencyRecorder,
    LoadSpec,
    PromptSharing,
    arrival_times,
    build_parser,
    parse_schedule,
    spec_from_args,
)
from vllm_emulator.prompts import PromptBuilder
from vllm_emulator.tokenizer import count_tokens, tokenize


def test_rate_is_requests_per_minute() -> None:
    assert parse_schedule("120") == 120.0
    assert parse_schedule("[[120, 60], [30, 90]]") == ((120.0, 1.0), (30.0, 1.5))


@pytest.mark.parametrize(
    "text", ["", "fast", "-5", "[]", "[[1]]", "[[0, 60]]", "[[10, -1]]", '[["a", 1]]', "true"]
)
def test_bad_rates_are_rejected(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_schedule(text)


def test_deterministic_arrivals_are_evenly_spaced() -> None:
    times = list(arrival_times([(10.0, 2.0), (5.0, 0.0), (2.0, 1.0)], "deterministic", random.Random(0)))
    assert times[:3] == [0.0, 0.5, 1.0]
    assert len(times) == 20 + 2
    assert times[-2:] == [15.0, 16.0]


def test_poisson_arrivals_have_the_rate_and_exponential_gaps() -> None:
    times = list(arrival_times([(2000.0, 5.0)], "poisson", random.Random(1)))
    assert len(times) == pytest.approx(10_000, rel=0.03)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert statistics.fmean(gaps) == pytest.approx(0.2, rel=0.03)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, rel=0.05)
    assert times == sorted(times) and all(0 <= t < 2000 for t in times)


def test_latency_recorder_exact_percentiles() -> None:
    rec = LatencyRecorder()
    for v in range(1, 101):
        rec.add(v / 1000)
    stats = rec.stats()
    assert stats is not None
    assert stats.count == 100
    assert stats.mean_ms == pytest.approx(50.5)
    assert stats.p50_ms == pytest.approx(50.5)
    assert stats.p90_ms == pytest.approx(90.1)
    assert stats.p99_ms == pytest.approx(99.01)
    assert LatencyRecorder().stats() is None


def test_latency_recorder_bounded_memory_mode_is_close() -> None:
    rng = random.Random(5)
    values = [rng.expovariate(10.0) for _ in range(20_000)]
    exact, approx = LatencyRecorder(), LatencyRecorder(exact_limit=100)
    for v in values:
        exact.add(v)
        approx.add(v)
    for q in (0.5, 0.9, 0.99):
        assert approx.percentile(q) == pytest.approx(exact.percentile(q), rel=0.01)
    assert approx.sum == pytest.approx(exact.sum)


def test_cli_builds_the_spec() -> None:
    args = build_parser().parse_args(
        ["--url", "http://a:1/v1,http://b:2", "--url", "http://c:3", "--rate", "[[10, 60]]",
         "--mode", "deterministic", "--stream", "--input-tokens", "sharegpt",
         "--output-tokens", "uniform:1:9"]
    )  # fmt: skip
    spec = spec_from_args(args)
    assert spec.targets == ("http://a:1/v1", "http://b:2", "http://c:3")
    assert spec.schedule == ((10.0, 1.0),)
    assert spec.arrival == "deterministic" and spec.stream
    assert spec.output_tokens.mean == 5
    constant = spec_from_args(build_parser().parse_args(["--rate", "30", "--duration", "20"]))
    assert constant.schedule == ((20.0, 0.5),)
    assert spec_from_args(build_parser().parse_args(["--rps", "7"])).schedule == ((60.0, 7.0),)


@pytest.mark.parametrize(
    "argv",
    [
        ["--rate", "[[10, 60]]", "--duration", "5"],
        ["--rps", "-1"],
        ["--rps", "5", "--url", "https://secure:443"],
        ["--rps", "5", "--input-tokens", "zero"],
        ["--rps", "5", "--max-concurrency", "0"],
    ],
)
def test_cli_rejects_bad_combinations(argv: list[str]) -> None:
    with pytest.raises(ConfigError):
        spec_from_args(build_parser().parse_args(argv))


def test_spec_validation() -> None:
    with pytest.raises(ConfigError):
        LoadSpec(targets=(), schedule=((1.0, 1.0),))
    with pytest.raises(ConfigError):
        LoadSpec(targets=("http://x:1",), schedule=((1.0, 1.0),), arrival="bursty")
    assert LoadSpec(targets=("http://x:1",), schedule=((3.0, 1.0), (2.0, 0.0))).duration == 5.0


def test_prompts_have_exact_lengths_and_share_only_their_prefix() -> None:
    sharing = PromptSharing(parse_distribution("64"), groups=3, share=1.0)
    builder = PromptBuilder(sharing, seed=5)
    rng = random.Random(1)
    texts = [builder.text(rng, 100) for _ in range(200)]
    assert all(count_tokens(text) == 100 and shared == 64 for text, shared in texts)
    heads = {tokenize(text)[:64].__repr__() for text, _ in texts}
    assert 1 < len(heads) <= 3  # three system prompts, Zipf-popular
    tails = {text for text, _ in texts}
    assert len(tails) == 200  # the rest is unique
    short = builder.text(rng, 10)
    assert count_tokens(short[0]) == 10 and short[1] == 9  # a prefix never fills the whole prompt
    plain = PromptBuilder(None, seed=5)
    unique = [plain.text(rng, 50) for _ in range(100)]
    assert all(count_tokens(t) == 50 and s == 0 for t, s in unique) and len({t for t, _ in unique}) == 100
    with pytest.raises(ConfigError):
        PromptSharing(parse_distribution("8"), groups=0)


def test_cli_sets_prompt_sharing() -> None:
    argv = ["--rps", "1", "--shared-prefix-tokens", "uniform:100:300", "--prefix-groups", "5"]
    spec = spec_from_args(build_parser().parse_args([*argv, "--prefix-share", "0.8"]))
    assert spec.sharing is not None and spec.sharing.groups == 5 and spec.sharing.share == 0.8
    assert spec_from_args(build_parser().parse_args(["--rps", "1"])).sharing is None
