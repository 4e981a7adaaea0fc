"""The demo's PNG: load, replicas and latency of every variant over time (matplotlib)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

__all__ = ["Sample", "plot"]


@dataclass(frozen=True)
class Sample:
    """One variant at one moment (seconds since the load started)."""

    t: float
    offered_rpm: float
    observed_rpm: float | None
    replicas: int | None
    desired: int | None
    ttft_predicted: float | None
    ttft_measured: float | None
    itl_predicted: float | None
    itl_measured: float | None
    # Attainment classes: the rate the operator planned for (status.forecast.plannedRate, req/min) and
    # the burst guard's scale-ups so far (inferno_replica_scaling_total{reason="guard"}).
    forecast_rpm: float | None = None
    guard_scalings: float | None = None


def _series(samples: Sequence[Sample], attr: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for s in samples:
        value = getattr(s, attr)
        if value is not None:
            xs.append(s.t)
            ys.append(float(value))
    return xs, ys


def _guard_times(samples: Sequence[Sample]) -> list[float]:
    """The sample times at which the guard's count of scale-ups went up."""
    out: list[float] = []
    last: float | None = None
    for s in samples:
        if s.guard_scalings is None:
            continue
        if last is not None and s.guard_scalings > last:
            out.append(s.t)
        last = s.guard_scalings
    return out


def _at(samples: Sequence[Sample], t: float, attr: str) -> float:
    value = next((getattr(s, attr) for s in samples if s.t == t), None)
    return float(value) if value is not None else 0.0


def plot(
    path: Path,
    series: Mapping[str, Sequence[Sample]],
    slos: Mapping[str, tuple[float, float]],
    title: str,
) -> None:
    """Write the figure: one colour per variant; solid = measured/actual, dashed = predicted/desired."""
    # A Figure of its own, not pyplot's: no backend to choose, nothing kept open (savefig renders PNG
    # with Agg).
    fig = Figure(figsize=(11, 11), constrained_layout=True)
    axes = fig.subplots(4, 1, sharex=True)
    load_ax, replica_ax, ttft_ax, itl_ax = axes
    colours = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (name, samples) in enumerate(series.items()):
        colour = colours[index % len(colours)]
        load_ax.step(*_series(samples, "offered_rpm"), where="post", color=colour, label=f"{name}: sent")
        load_ax.plot(
            *_series(samples, "observed_rpm"),
            color=colour,
            linestyle=":",
            label=f"{name}: seen by the operator",
        )
        replica_ax.step(*_series(samples, "replicas"), where="post", color=colour, label=f"{name}: running")
        replica_ax.step(
            *_series(samples, "desired"), where="post", color=colour, linestyle="--", label=f"{name}: desired"
        )
        forecast = _series(samples, "forecast_rpm")
        if forecast[0]:
            load_ax.plot(*forecast, color=colour, linestyle="--", label=f"{name}: forecast planned for")
        guarded = _guard_times(samples)
        if guarded:
            heights = [_at(samples, t, "replicas") for t in guarded]
            replica_ax.scatter(
                guarded, heights, color=colour, marker="^", s=40, zorder=3, label=f"{name}: burst guard"
            )
        ttft_ax.plot(*_series(samples, "ttft_measured"), color=colour, label=f"{name}: measured")
        ttft_ax.plot(
            *_series(samples, "ttft_predicted"), color=colour, linestyle="--", label=f"{name}: predicted"
        )
        itl_ax.plot(*_series(samples, "itl_measured"), color=colour, label=f"{name}: measured")
        itl_ax.plot(
            *_series(samples, "itl_predicted"), color=colour, linestyle="--", label=f"{name}: predicted"
        )
        ttft_slo, itl_slo = slos[name]
        ttft_ax.axhline(ttft_slo, color=colour, linestyle=":", linewidth=1)
        itl_ax.axhline(itl_slo, color=colour, linestyle=":", linewidth=1)
    load_ax.set_ylabel("load (req/min)")
    replica_ax.set_ylabel("replicas")
    replica_ax.yaxis.get_major_locator().set_params(integer=True)
    ttft_ax.set_ylabel("mean TTFT (ms, log)")
    ttft_ax.set_yscale("log")
    itl_ax.set_ylabel("mean ITL (ms)")
    itl_ax.set_xlabel("time since the load started (s)")
    ttft_ax.set_title(
        "latency measured at the load generator (20 s window) vs predicted; dotted: SLO",
        fontsize=9,
        loc="left",
    )
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", ncols=2)
    fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
