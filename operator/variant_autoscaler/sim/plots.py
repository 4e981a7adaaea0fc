"""PNG plots of a simulation report: load, replicas per variant, latency and cost over time.

matplotlib is optional (the ``plot`` extra): it is imported only when a plot is asked for, with the
non-interactive Agg backend. Plots are drawn from the JSON report, so a saved report can be plotted
later.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from variant_autoscaler.errors import ConfigError

__all__ = ["plot_report"]


def _pyplot() -> Any:
    try:
        import matplotlib  # noqa: PLC0415  optional: the plot extra
    except ImportError:
        raise ConfigError(
            "plots need matplotlib: pip install 'variant-autoscaler[plot]' (or leave out --plots)"
        ) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # noqa: PLC0415  optional, and after the backend is chosen

    return plt


def _hours(values: list[float]) -> list[float]:
    return [v / 3600.0 for v in values]


def plot_report(report: Mapping[str, Any], out_dir: Path | str, *, prefix: str = "") -> list[Path]:
    """Write ``load.png``, ``replicas.png``, ``latency.png`` and ``cost.png`` (each name prefixed by
    ``prefix``) to ``out_dir``; return their paths. The report must carry time series."""
    plt = _pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    policies: Mapping[str, Any] = report["policies"]
    if not policies or any("timeseries" not in p for p in policies.values()):
        raise ConfigError("the report has no time series to plot (run without --no-timeseries)")
    scenario = report["scenario"]
    title = scenario["name"]
    written: list[Path] = []
    first = next(iter(policies.values()))["timeseries"]

    # Load.
    fig, ax = plt.subplots(figsize=(10, 3.5))
    t = _hours(first["t_s"])
    for model, series in first["arrival_rps"].items():
        ax.plot(t, series, label=model, linewidth=1.2)
    ax.set_xlabel("time (h)")
    ax.set_ylabel("arrivals (req/s)")
    ax.set_title(f"{title}: offered load")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)
    written.append(_save(fig, out / f"{prefix}load.png", plt))

    # Replicas per variant (ready), one panel per variant.
    variants = [v["name"] for v in scenario["variants"]]
    fig, axes = plt.subplots(len(variants), 1, figsize=(10, 2.6 * len(variants)), sharex=True, squeeze=False)
    for ax, var in zip(axes[:, 0], variants, strict=True):
        for name, entry in policies.items():
            ts = entry["timeseries"]
            ax.step(
                _hours(ts["sample_t_s"]), ts["ready_replicas"][var], where="post", label=name, linewidth=1.1
            )
        ax.set_ylabel(f"{var}\nready replicas", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0, 0].set_title(f"{title}: ready replicas per variant")
    axes[0, 0].legend(loc="upper right", fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel("time (h)")
    written.append(_save(fig, out / f"{prefix}replicas.png", plt))

    # Latency: p99 TTFT and ITL per model, with the SLO.
    models = scenario["models"]
    fig, axes = plt.subplots(len(models), 2, figsize=(12, 2.8 * len(models)), sharex=True, squeeze=False)
    for row, model in enumerate(models):
        mid = model["model"]
        for col, (key, slo_key, label) in enumerate(
            (("ttft_p99_ms", "slo_ttft_ms", "p99 TTFT (ms)"), ("itl_p99_ms", "slo_itl_ms", "p99 ITL (ms)"))
        ):
            ax = axes[row, col]
            for name, entry in policies.items():
                ts = entry["timeseries"]
                values = [float("nan") if v is None else v for v in ts[key][mid]]
                ax.plot(_hours(ts["t_s"]), values, label=name, linewidth=1.0)
            ax.axhline(model[slo_key], color="black", linestyle="--", linewidth=0.8, label="SLO")
            ax.set_yscale("log")
            ax.set_ylabel(f"{mid}\n{label}", fontsize=8)
            ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=7, ncol=2)
    axes[0, 0].set_title(f"{title}: per-interval p99 latency")
    for col in range(2):
        axes[-1, col].set_xlabel("time (h)")
    written.append(_save(fig, out / f"{prefix}latency.png", plt))

    # Cumulative cost.
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for name, entry in policies.items():
        ts = entry["timeseries"]
        ax.plot(_hours(ts["sample_t_s"]), ts["cumulative_cost"], label=f"{name} ({entry['cost']:.0f})")
    ax.set_xlabel("time (h)")
    ax.set_ylabel("cumulative cost")
    ax.set_title(f"{title}: accelerator cost")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    written.append(_save(fig, out / f"{prefix}cost.png", plt))
    return written


def _save(fig: Any, path: Path, plt: Any) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
