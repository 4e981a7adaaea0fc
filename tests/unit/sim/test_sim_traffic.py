"""Traffic: rate profiles integrate to the expected counts, lengths, bursts and trace replay."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.traffic import (
    Arrivals,
    Constant,
    Diurnal,
    Empirical,
    FixedLength,
    FlashCrowd,
    GeneratedTraffic,
    LogNormalLength,
    Step,
    Sum,
    TraceTraffic,
    UniformLength,
    longer_than,
    read_trace,
    rng_for,
)

PROFILES = [
    Constant(3.0),
    Diurnal(low_rps=1.0, high_rps=9.0, period_s=3600.0, phase_s=600.0),
    Step(at_s=(0.0, 100.0, 700.0), rps=(1.0, 5.0, 2.0)),
    FlashCrowd(base_rps=2.0, extra_rps=10.0, start_s=500.0, rise_s=60.0, hold_s=300.0, decay_s=200.0),
    Sum((Constant(1.0), FlashCrowd(base_rps=0.0, extra_rps=5.0, start_s=100.0))),
]


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: type(p).__name__)
def test_cumulative_is_the_integral_of_the_rate(profile: object) -> None:
    t = np.linspace(0.0, 1800.0, 180_001)
    rate = profile.rate(t)  # type: ignore[attr-defined]
    numeric = np.concatenate(([0.0], np.cumsum((rate[1:] + rate[:-1]) / 2.0 * np.diff(t))))
    closed = profile.cumulative(t)  # type: ignore[attr-defined]
    # Step has jumps the trapezoid smears over one grid cell (0.01 s).
    assert np.max(np.abs(numeric - closed)) < 0.05


def test_closed_forms_by_hand() -> None:
    assert Constant(2.0).cumulative(np.array([10.0]))[0] == pytest.approx(20.0)
    # A whole period of a diurnal cycle averages (low + high) / 2.
    d = Diurnal(low_rps=1.0, high_rps=3.0, period_s=100.0, phase_s=30.0)
    assert d.cumulative(np.array([100.0]))[0] == pytest.approx(200.0)
    assert d.rate(np.array([30.0]))[0] == pytest.approx(1.0)  # trough at the phase
    assert d.rate(np.array([80.0]))[0] == pytest.approx(3.0)  # peak half a period later
    s = Step(at_s=(10.0, 20.0), rps=(1.0, 4.0))
    assert s.cumulative(np.array([5.0, 15.0, 30.0])).tolist() == pytest.approx([0.0, 5.0, 50.0])
    f = FlashCrowd(base_rps=1.0, extra_rps=10.0, start_s=100.0, rise_s=20.0, hold_s=30.0, decay_s=50.0)
    # Base over 200 s, the ramp (10·20/2), the plateau (10·30) and the full decay (10·50).
    assert f.cumulative(np.array([1e6]))[0] - 1e6 == pytest.approx(100.0 + 300.0 + 500.0, rel=1e-9)
    assert f.peak(1000.0) == pytest.approx(11.0)


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: type(p).__name__)
@pytest.mark.parametrize("burstiness", [1.0, 2.5, 0.5])
def test_arrival_counts_match_the_integrated_rate(profile: object, burstiness: float) -> None:
    duration = 1800.0
    traffic = GeneratedTraffic(profile, FixedLength(10), FixedLength(5), burstiness=burstiness)  # type: ignore[arg-type]
    expected = float(profile.cumulative(np.array([duration]))[0])  # type: ignore[attr-defined]
    counts = [len(traffic.arrivals(rng_for(seed, "m"), duration)) for seed in range(40)]
    mean = float(np.mean(counts))
    # The mean of 40 runs: its standard error is below sqrt(cv² · expected / 40); allow 5 of them.
    tol = 5.0 * math.sqrt(max(burstiness, 1.0) ** 2 * expected / 40.0)
    assert abs(mean - expected) < tol


def test_arrivals_follow_the_shape_of_the_rate() -> None:
    step = Step(at_s=(0.0, 1000.0), rps=(1.0, 9.0))
    arr = GeneratedTraffic(step, FixedLength(1), FixedLength(1)).arrivals(rng_for(1, "m"), 2000.0)
    before = int(np.sum(arr.times < 1000.0))
    after = len(arr) - before
    assert 850 < before < 1150
    assert 8600 < after < 9400
    assert np.all(np.diff(arr.times) >= 0.0)
    assert arr.times[-1] < 2000.0


def test_burstiness_changes_the_spread_of_gaps() -> None:
    def gap_cv(cv: float) -> float:
        arr = GeneratedTraffic(Constant(10.0), FixedLength(1), FixedLength(1), burstiness=cv).arrivals(
            rng_for(5, "m"), 3000.0
        )
        gaps = np.diff(arr.times)
        return float(np.std(gaps) / np.mean(gaps))

    assert gap_cv(1.0) == pytest.approx(1.0, abs=0.05)
    assert gap_cv(3.0) == pytest.approx(3.0, rel=0.15)
    assert gap_cv(0.5) == pytest.approx(0.5, rel=0.1)


def test_streams_are_reproducible_and_independent_per_model() -> None:
    traffic = GeneratedTraffic(Constant(5.0), UniformLength(1, 100), LogNormalLength(200.0, 1.0))
    a = traffic.arrivals(rng_for(9, "a"), 100.0)
    b = traffic.arrivals(rng_for(9, "a"), 100.0)
    c = traffic.arrivals(rng_for(9, "b"), 100.0)
    np.testing.assert_array_equal(a.times, b.times)
    np.testing.assert_array_equal(a.output_tokens, b.output_tokens)
    assert len(a) != len(c) or not np.array_equal(a.times, c.times)


def test_length_distributions() -> None:
    rng = np.random.default_rng(0)
    assert FixedLength(7).sample(rng, 3).tolist() == [7, 7, 7]
    u = UniformLength(2, 4).sample(rng, 10_000)
    assert set(u.tolist()) == {2, 3, 4}
    assert float(np.mean(u)) == pytest.approx(3.0, abs=0.05)
    ln = LogNormalLength(300.0, cv=1.0, low=1, high=100_000).sample(rng, 200_000)
    assert float(np.mean(ln)) == pytest.approx(300.0, rel=0.02)
    assert float(np.std(ln) / np.mean(ln)) == pytest.approx(1.0, rel=0.1)
    clipped = LogNormalLength(300.0, cv=2.0, low=10, high=500).sample(rng, 1000)
    assert clipped.min() >= 10 and clipped.max() <= 500
    e = Empirical((5, 6)).sample(rng, 1000)
    assert set(e.tolist()) == {5, 6}
    assert Empirical((5, 6)).mean() == 5.5


@pytest.mark.parametrize(
    "make",
    [
        lambda: Constant(-1.0),
        lambda: Diurnal(low_rps=5.0, high_rps=1.0),
        lambda: Step(at_s=(0.0, 0.0), rps=(1.0, 2.0)),
        lambda: Step(at_s=(), rps=()),
        lambda: FlashCrowd(base_rps=1.0, extra_rps=1.0, start_s=0.0, decay_s=0.0),
        lambda: FixedLength(0),
        lambda: UniformLength(5, 2),
        lambda: LogNormalLength(0.5),
        lambda: GeneratedTraffic(Constant(1.0), FixedLength(1), FixedLength(1), burstiness=0.0),
    ],
)
def test_invalid_traffic_is_rejected(make: object) -> None:
    with pytest.raises(ConfigError):
        make()  # type: ignore[operator]


def test_read_trace_with_numeric_timestamps(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("timestamp,input_tokens,output_tokens\n12.5,100,20\n10.0,50,0\n11,70,30\n\n")
    arr = read_trace(path)
    assert arr.times.tolist() == [0.0, 1.0, 2.5]
    assert arr.input_tokens.tolist() == [50, 70, 100]
    assert arr.output_tokens.tolist() == [1, 30, 20]  # zero output tokens count as one


def test_read_trace_azure_style(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
    )
    arr = read_trace(path)
    assert arr.times.tolist() == pytest.approx([0.0, 4.314579])
    assert arr.input_tokens.tolist() == [374, 396]
    assert arr.output_tokens.tolist() == [44, 109]


def test_read_trace_burstgpt_style_and_units(tmp_path: Path) -> None:
    path = tmp_path / "burst.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,GPT-4,1087,230,1317,Conversation log\n"
    )
    arr = read_trace(path)
    assert arr.times.tolist() == [0.0, 40.0]
    assert arr.input_tokens.tolist() == [472, 1087]
    ms = tmp_path / "ms.csv"
    ms.write_text("t_ms,in,out\n1000,1,2\n3500,3,4\n")
    arr2 = read_trace(ms, time_column="t_ms", input_column="in", output_column="out", time_unit_s=0.001)
    assert arr2.times.tolist() == [0.0, 2.5]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty"),
        ("a,b,c\n1,2,3\n", "no timestamp column"),
        ("timestamp,input_tokens,output_tokens\nnoon,1,2\n", "line 2"),
        ("timestamp,input_tokens,output_tokens\n1,x,2\n", "integers"),
        ("timestamp,input_tokens,output_tokens\n1,-1,2\n", ">= 0"),
        ("timestamp,input_tokens,output_tokens\n1,2\n", "columns"),
        ("timestamp,input_tokens,output_tokens\n1,1,1\n2023-01-01 00:00:00,1,1\n", "mix"),
    ],
)
def test_read_trace_errors_name_the_problem(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        read_trace(path)


def test_missing_trace_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read trace"):
        read_trace(tmp_path / "nope.csv")


def test_trace_replay_speedup_offset_and_cut() -> None:
    src = Arrivals(np.array([100.0, 110.0, 130.0]), np.array([1, 2, 3]), np.array([4, 5, 6]))
    t = TraceTraffic(src, speedup=2.0, offset_s=5.0)
    arr = t.arrivals(np.random.default_rng(0), duration=19.0)
    assert arr.times.tolist() == [5.0, 10.0]  # 5 + 30/2 = 20 is past the end
    assert arr.output_tokens.tolist() == [4, 5]
    assert len(Arrivals.empty()) == 0
    assert len(src.window(105.0, 200.0)) == 2


MOONCAKE = (
    '{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]}\n'
    '{"timestamp": 30535, "input_length": 6472, "output_length": 26, "hash_ids": [46, 52]}\n'
    "\n"
    '{"timestamp": 28000, "input_length": 100, "output_length": 0, "hash_ids": []}\n'
)


def test_read_a_json_lines_trace_in_mooncakes_format(tmp_path: Path) -> None:
    for name in ("trace.jsonl", "trace.txt"):  # by extension, or by content
        path = tmp_path / name
        path.write_text(MOONCAKE)
        arr = read_trace(path)
        assert arr.times.tolist() == pytest.approx([0.0, 0.518, 3.053])  # milliseconds by default
        assert arr.input_tokens.tolist() == [6955, 100, 6472]
        assert arr.output_tokens.tolist() == [52, 1, 26]
    seconds = read_trace(tmp_path / "trace.jsonl", time_unit_s=1.0)
    assert seconds.times[-1] == pytest.approx(3053.0)
    named = tmp_path / "named.jsonl"
    named.write_text('{"t": 1, "p": 2, "o": 3}\n{"t": 2, "p": 4, "o": 5}\n')
    picked = read_trace(named, time_column="t", input_column="p", output_column="o")
    assert picked.input_tokens.tolist() == [2, 4]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"timestamp": 1, "input_length": 2, "output_length": 3}\nnot json\n', "line 2: not a JSON object"),
        (
            '{"timestamp": 1, "input_length": 2, "output_length": 3}\n[1, 2]\n',
            "line 2: expected a JSON object",
        ),
        ('{"timestamp": 1, "input_length": 2}\n', "line 1 has no output-token field"),
        ('{"timestamp": 1, "input_length": 2, "output_length": 3}\n{"timestamp": 2}\n', "missing field"),
        ('{"timestamp": "soon", "input_length": 2, "output_length": 3}\n', "line 1"),
        ('{"timestamp": 1, "input_length": "many", "output_length": 3}\n', "integers"),
        ('{"timestamp": 1, "input_length": true, "output_length": 3}\n', "integers"),
    ],
)
def test_json_lines_errors_name_the_line_and_field(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        read_trace(path)


def test_a_binary_file_is_not_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(b"\xff\xfe\x00\x01" * 100)
    with pytest.raises(ConfigError, match="UTF-8"):
        read_trace(path)


def _counts(times: np.ndarray, width: float, span: float) -> np.ndarray:  # type: ignore[type-arg]
    return np.bincount((times // width).astype(int), minlength=int(span // width))[: int(span // width)]


def test_rate_scale_keeps_the_shape_without_compressing_time() -> None:
    rng = np.random.default_rng(1)
    # A rate that doubles half-way through an hour.
    times = np.sort(np.concatenate((rng.uniform(0, 1800, 3600), rng.uniform(1800, 3600, 7200))))
    src = Arrivals(times, rng.integers(1, 100, len(times)), rng.integers(1, 100, len(times)))
    base = _counts(TraceTraffic(src).arrivals(rng, 1e9).times, 600.0, 3600.0)
    for scale in (0.5, 2.0, 2.5):
        out = TraceTraffic(src, rate_scale=scale).arrivals(np.random.default_rng(2), 1e9)
        assert len(out) == pytest.approx(scale * len(src), rel=0.03)
        assert out.times[-1] <= times[-1] - times[0] + 1.0  # the span is kept: no compression
        scaled = _counts(out.times, 600.0, 3600.0)
        assert scaled / base == pytest.approx(np.full(6, scale), rel=0.1)  # the same shape, ×scale
        # Each request keeps its own lengths: every (input, output) pair comes from the trace.
        pairs = set(zip(src.input_tokens.tolist(), src.output_tokens.tolist(), strict=True))
        assert set(zip(out.input_tokens.tolist(), out.output_tokens.tolist(), strict=True)) <= pairs
    again = TraceTraffic(src, rate_scale=2.5).arrivals(np.random.default_rng(2), 1e9)
    assert (
        again.times.tolist()
        == TraceTraffic(src, rate_scale=2.5).arrivals(np.random.default_rng(2), 1e9).times.tolist()
    )
    with pytest.raises(ConfigError, match="rateScale"):
        TraceTraffic(src, rate_scale=0.0)


def test_trace_end_and_longer_than() -> None:
    src = Arrivals(np.array([10.0, 20.0, 50.0]), np.array([100, 30_000, 10]), np.array([10, 5_000, 1]))
    assert TraceTraffic(src, speedup=2.0, offset_s=5.0).end_s == pytest.approx(25.0)
    assert longer_than(src, 32_768) == 1 and longer_than(src, 11) == 2
