"""``variant-autoscaler profile``: measure a model's α β γ δ on a running vLLM, before deploying it.

The command drives a designed sweep against any OpenAI-compatible vLLM endpoint with the project's
load generator: phases that keep 1, 2, 4, … requests in flight (up to ``--max-concurrency``), each
with a short and a long prompt. In every phase it reads the server's ``/metrics`` at the start and
end of a measurement window (mean inter-token latency, mean prefill time, mean prompt length and the
time-average running batch, from vLLM's histograms) and polls the running/waiting gauges in between;
the load generator reports its own end-to-end timings. Both lines of the model are then fitted
(:mod:`variant_autoscaler.core.profiling`) and one entry of ``spec.modelProfile.accelerators`` is
printed on stdout, ready to paste; the fit report (per phase: measured, fitted, residual; R² per line;
client-side check) goes to stderr, and with ``--plot`` to a PNG as well.

``maxBatchSize``: ``--max-batch-size`` if given; else a ``max_num_seqs`` label on one of the server's
``vllm:*_info`` metrics; else the plateau of ``vllm:num_requests_running`` in a phase where requests
waited; else vLLM's default (256), said plainly on stderr.

Bounded: the whole sweep lasts ``--duration`` seconds (default 300), and never has more than
``--max-concurrency`` requests in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from variant_autoscaler import USER_AGENT
from variant_autoscaler.core.profiling import SweepFit, SweepPoint, fit_sweep
from variant_autoscaler.errors import CollectionError, ConfigError, ModelError
from vllm_emulator.distributions import parse_distribution
from vllm_emulator.errors import EmulatorError
from vllm_emulator.loadgen import LoadSpec, run_load

__all__ = ["Phase", "Sample", "design_sweep", "register", "render_entry", "run"]

DEFAULT_DURATION = 300.0
MIN_DURATION = 20.0
MAX_DURATION = 3600.0
DEFAULT_MAX_CONCURRENCY = 64
VLLM_DEFAULT_MAX_NUM_SEQS = 256
SHORT_PROMPT, LONG_PROMPT = 128, 1024
OUTPUT_TOKENS = "uniform:32:96"
SETTLE_FRACTION = 0.25
POLL_SECONDS = 0.25

_EXAMPLES = """\
example:
  variant-autoscaler profile --url http://vllm.example:8000 --model meta-llama/Llama-3.1-8B-Instruct \\
      --accelerator H100 --duration 300 > profile.yaml

The entry goes under spec.modelProfile.accelerators of a VariantAutoscaling. See docs/profiles.md.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``profile`` sub-command."""
    parser = subparsers.add_parser(
        "profile",
        help="measure a model's performance parameters (α β γ δ) on a running vLLM server",
        description=(
            "Drive a sweep of concurrency and prompt lengths against an OpenAI-compatible vLLM server, "
            "read its /metrics, fit the queueing model's decode and prefill lines, and print one "
            "modelProfile.accelerators entry (YAML or JSON) with a fit report on stderr."
        ),
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--url", required=True, help="server base URL, http://host:port (a /v1 suffix is fine)"
    )
    parser.add_argument("--model", required=True, help="model name the server serves")
    parser.add_argument(
        "--accelerator", required=True, help="accelerator name for the entry's acc (e.g. H100)"
    )
    parser.add_argument("--acc-count", type=int, default=1, help="accelerator units per replica (accCount)")
    parser.add_argument(
        "--duration",
        type=float,
        default=DEFAULT_DURATION,
        metavar="SECONDS",
        help=f"length of the whole sweep (default {DEFAULT_DURATION:.0f})",
    )
    parser.add_argument(
        "--max-concurrency",
        type=int,
        default=DEFAULT_MAX_CONCURRENCY,
        metavar="N",
        help=f"most requests in flight at any time (default {DEFAULT_MAX_CONCURRENCY})",
    )
    parser.add_argument(
        "--max-batch-size",
        type=int,
        default=None,
        metavar="N",
        help="the server's --max-num-seqs, when the server does not report it",
    )
    parser.add_argument("--metrics-url", default=None, help="the server's metrics (default: URL/metrics)")
    parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="format on stdout")
    parser.add_argument(
        "--plot", type=Path, default=None, metavar="FILE", help="also draw the fit (PNG; needs matplotlib)"
    )
    parser.add_argument(
        "--api-key", default=os.environ.get("OPENAI_API_KEY"), help="bearer token for the server"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the load generator")
    parser.set_defaults(func=run)  # fmt: skip


# ---- the sweep design ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Phase:
    """Keep ``concurrency`` requests of ``prompt_tokens`` prompt tokens in flight for ``seconds``."""

    concurrency: int
    prompt_tokens: int
    seconds: float


def design_sweep(duration: float, max_concurrency: int) -> list[Phase]:
    """Concurrency 1, 2, 4, … up to ``max_concurrency``, each with a short and a long prompt.

    The phases share ``duration`` evenly. Decode time is fitted across concurrencies; prefill across
    concurrency × prompt length, whose short-prompt, low-concurrency end pins γ.
    """
    levels = []
    c = 1
    while c < max_concurrency:
        levels.append(c)
        c *= 2
    levels.append(max_concurrency)
    phases = [(c, length) for c in levels for length in (SHORT_PROMPT, LONG_PROMPT)]
    each = duration / len(phases)
    return [Phase(c, length, each) for c, length in phases]


# ---- reading the server's metrics ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    """The server's cumulative histogram sums and counts, and its gauges, at one instant."""

    t: float
    itl: tuple[float, float] | None
    prefill: tuple[float, float] | None
    prompt: tuple[float, float] | None
    running: float | None
    waiting: float | None
    max_num_seqs: int | None = None
    prefill_source: str = ""


_ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
_PREFILL = ("vllm:request_prefill_time_seconds", "vllm:time_to_first_token_seconds")


def parse_metrics(text: str, model: str, t: float) -> Sample:
    """The quantities the sweep needs from one ``/metrics`` page, for ``model`` (summed over engines)."""
    sums: dict[str, float] = {}
    gauges: dict[str, float] = {}
    max_num_seqs: int | None = None
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise CollectionError(f"the server's /metrics is not in the Prometheus text format: {exc}") from exc
    for family in families:
        for s in family.samples:
            if s.labels.get("model_name", model) != model:
                continue
            if family.name.endswith("_info") and "max_num_seqs" in s.labels:
                with contextlib.suppress(ValueError):
                    max_num_seqs = int(float(s.labels["max_num_seqs"]))
            if s.name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
                gauges[s.name] = gauges.get(s.name, 0.0) + s.value
            elif s.name.endswith(("_sum", "_count")):
                sums[s.name] = sums.get(s.name, 0.0) + s.value

    def pair(names: Iterable[str]) -> tuple[tuple[float, float] | None, str]:
        for name in names:
            if f"{name}_sum" in sums and f"{name}_count" in sums:
                return (sums[f"{name}_sum"], sums[f"{name}_count"]), name
        return None, ""

    itl, _ = pair(_ITL)
    prefill, source = pair(_PREFILL)
    prompt, _ = pair(("vllm:request_prompt_tokens",))
    return Sample(
        t=t,
        itl=itl,
        prefill=prefill,
        prompt=prompt,
        running=gauges.get("vllm:num_requests_running"),
        waiting=gauges.get("vllm:num_requests_waiting"),
        max_num_seqs=max_num_seqs,
        prefill_source=source,
    )


class _Server:
    """The server's metrics endpoint."""

    def __init__(self, url: str, model: str, api_key: str | None) -> None:
        self._errors: tuple[type[Exception], ...] = (httpx.HTTPError,)
        self.url = url
        self.model = model
        headers = {"User-Agent": USER_AGENT}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.AsyncClient(timeout=10.0, headers=headers)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def sample(self) -> Sample:
        try:
            response = await self._client.get(self.url)
        except self._errors as exc:
            raise CollectionError(f"cannot read {self.url}: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise CollectionError(f"{self.url} answered HTTP {response.status_code}")
        return parse_metrics(response.text, self.model, time.monotonic())


# ---- running a phase ---------------------------------------------------------------------------------


@dataclass
class PhaseResult:
    phase: Phase
    point: SweepPoint
    running_max: float
    waited: bool
    completed: int
    errors: int
    error_kinds: dict[str, int] = field(default_factory=dict)


def _delta(a: tuple[float, float] | None, b: tuple[float, float] | None) -> tuple[float, float] | None:
    if a is None or b is None:
        return None
    return b[0] - a[0], b[1] - a[1]


def measure(first: Sample, last: Sample, polls: list[Sample], phase: Phase) -> SweepPoint:
    """One phase's operating point from two ``/metrics`` samples and the gauge polls between them."""
    span = last.t - first.t
    itl, pre, prm = (
        _delta(first.itl, last.itl),
        _delta(first.prefill, last.prefill),
        _delta(first.prompt, last.prompt),
    )
    gauge = [s.running for s in polls if s.running is not None]
    if itl is not None and pre is not None and span > 0:
        running = (itl[0] + pre[0]) / span  # Little's law: decoding + prefilling, on average
    else:
        running = statistics.fmean(gauge) if gauge else 0.0
    dispersion = 1.0
    if len(gauge) >= 3 and statistics.fmean(gauge) > 0:
        dispersion = max(statistics.pvariance(gauge) / statistics.fmean(gauge), 1.0)
    return SweepPoint(
        concurrency=phase.concurrency,
        prompt_tokens=prm[0] / prm[1] if prm and prm[1] > 0 else float(phase.prompt_tokens),
        running=running,
        dispersion=dispersion,
        itl_ms=1000.0 * itl[0] / itl[1] if itl and itl[1] > 0 else None,
        decode_tokens=itl[1] if itl else 0.0,
        prefill_ms=1000.0 * pre[0] / pre[1] if pre and pre[1] > 0 else None,
        requests=pre[1] if pre else 0.0,
    )  # fmt: skip


async def run_phase(
    server: _Server, target: str, model: str, phase: Phase, *, seed: int, api_key: str | None
) -> PhaseResult:
    """Keep the phase's concurrency in flight; measure after a settling time until its end."""
    settle = SETTLE_FRACTION * phase.seconds
    # Arrivals well above what the server can take, capped at the concurrency: a closed loop.
    rate = max(100.0, 20.0 * phase.concurrency)
    spec = LoadSpec(
        targets=(target,),
        schedule=((phase.seconds, rate),),
        model=model,
        arrival="deterministic",
        input_tokens=parse_distribution(str(phase.prompt_tokens)),
        output_tokens=parse_distribution(OUTPUT_TOKENS),
        max_concurrency=phase.concurrency,
        seed=seed,
        request_timeout=max(phase.seconds, 30.0),
        drain_timeout=0.0,
        api_key=api_key,
    )
    e2e: list[float] = []
    outputs: list[int] = []

    def on_request(record: Any) -> None:
        if record.error is None and record.e2e_s is not None:
            e2e.append(1000.0 * record.e2e_s)
            outputs.append(record.output_tokens)

    load = asyncio.create_task(run_load(spec, on_request=on_request))
    started = time.monotonic()
    polls: list[Sample] = []
    try:
        await asyncio.sleep(settle)
        first = await server.sample()
        polls.append(first)
        end = started + phase.seconds * 0.97
        while (left := end - time.monotonic()) > 0:
            await asyncio.sleep(min(POLL_SECONDS, left))
            polls.append(await server.sample())
        last = polls[-1]
        summary = await load
    except BaseException:
        load.cancel()
        with contextlib.suppress(asyncio.CancelledError, EmulatorError):
            await load
        raise
    point = replace(
        measure(first, last, polls, phase),
        e2e_ms=statistics.fmean(e2e) if e2e else None,
        output_tokens=statistics.fmean(outputs) if outputs else None,
    )
    running = [s.running for s in polls if s.running is not None]
    return PhaseResult(
        phase=phase,
        point=point,
        running_max=max(running, default=0.0),
        waited=any((s.waiting or 0.0) > 0 for s in polls),
        completed=summary.completed,
        errors=summary.errors,
        error_kinds=dict(summary.error_kinds),
    )


# ---- the command --------------------------------------------------------------------------------------


def _urls(url: str, metrics_url: str | None) -> tuple[str, str]:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ConfigError(f"--url must be http://host[:port][/v1], got {url!r}")
    base = url.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    if metrics_url is not None:
        m = urlsplit(metrics_url)
        if m.scheme not in ("http", "https") or not m.hostname:
            raise ConfigError(f"--metrics-url must be an http(s) URL, got {metrics_url!r}")
        return base, metrics_url
    return base, base + "/metrics"


def _check(args: argparse.Namespace) -> None:
    if not args.model.strip():
        raise ConfigError("--model must not be empty")
    if not args.accelerator.strip():
        raise ConfigError("--accelerator must not be empty")
    if args.acc_count < 1:
        raise ConfigError(f"--acc-count must be >= 1, got {args.acc_count}")
    if not (math.isfinite(args.duration) and MIN_DURATION <= args.duration <= MAX_DURATION):
        raise ConfigError(
            f"--duration must be between {MIN_DURATION:.0f} and {MAX_DURATION:.0f} seconds, "
            f"got {args.duration}"
        )
    if not 2 <= args.max_concurrency <= 4096:
        raise ConfigError(f"--max-concurrency must be between 2 and 4096, got {args.max_concurrency}")
    if args.max_batch_size is not None and args.max_batch_size < 1:
        raise ConfigError(f"--max-batch-size must be >= 1, got {args.max_batch_size}")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``variant-autoscaler profile``; returns the exit code."""
    _check(args)
    target, metrics_url = _urls(args.url, args.metrics_url)

    def progress(line: str) -> None:
        print(f"[profile] {line}", file=sys.stderr, flush=True)

    try:
        results, reported = asyncio.run(_sweep(args, target, metrics_url, progress))
    except KeyboardInterrupt:
        return 130
    max_batch, batch_source = _max_batch(args.max_batch_size, reported, results)
    try:
        fit = fit_sweep([r.point for r in results], max_batch)
    except ModelError as exc:
        raise ModelError(f"cannot fit the profile: {exc}") from None
    sys.stderr.write(render_report(results, fit, max_batch, batch_source))
    entry = render_entry(args.accelerator, args.acc_count, max_batch, fit)
    if args.output == "json":
        sys.stdout.write(json.dumps(entry, indent=2) + "\n")
    else:
        sys.stdout.write(
            f"# variant-autoscaler profile of {args.model} on {args.accelerator}: R² decode "
            f"{fit.decode.r2:.4f}, prefill {fit.prefill.r2:.4f}; maxBatchSize {batch_source}\n"
        )
        sys.stdout.write(yaml.safe_dump(entry, sort_keys=False))
    if args.plot is not None:
        plot_fit(args.plot, results, fit, title=f"{args.model} on {args.accelerator}")
        progress(f"plot written to {args.plot}")
    return 0


async def _sweep(
    args: argparse.Namespace, target: str, metrics_url: str, progress: Callable[[str], None]
) -> tuple[list[PhaseResult], int | None]:
    server = _Server(metrics_url, args.model, args.api_key)
    try:
        first = await server.sample()
        if first.itl is None:
            raise CollectionError(
                f"{metrics_url} has no vllm:inter_token_latency_seconds (or time_per_output_token) "
                f"series for model_name={args.model!r}: is it a vLLM server serving that model?"
            )
        if first.prefill_source and first.prefill_source != _PREFILL[0]:
            progress("no vllm:request_prefill_time_seconds: prefill read from TTFT (includes queueing)")
        phases = design_sweep(args.duration, args.max_concurrency)
        results: list[PhaseResult] = []
        deadline = time.monotonic() + args.duration + 60.0
        for i, phase in enumerate(phases, start=1):
            if time.monotonic() > deadline:
                progress("time is up: stopping the sweep early")
                break
            result = await run_phase(
                server, target, args.model, phase, seed=args.seed + i, api_key=args.api_key
            )
            results.append(result)
            p = result.point
            progress(
                f"phase {i}/{len(phases)}: {phase.concurrency} in flight, "
                f"prompt {p.prompt_tokens:.0f} tokens: "
                f"batch {p.running:.2f}, ITL {_ms(p.itl_ms)}, prefill {_ms(p.prefill_ms)}, "
                f"{result.completed} done, {result.errors} errors"
            )  # fmt: skip
            if i == 1 and result.completed == 0:
                kinds = ", ".join(f"{k}: {v}" for k, v in sorted(result.error_kinds.items())) or "none"
                raise CollectionError(
                    f"no request to {target} completed in the first phase (errors: {kinds})"
                )
        return results, first.max_num_seqs
    except EmulatorError as exc:
        raise CollectionError(f"load generation failed: {exc}") from None
    finally:
        await server.aclose()


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g} ms"


def _max_batch(flag: int | None, reported: int | None, results: list[PhaseResult]) -> tuple[int, str]:
    if flag is not None:
        return flag, "from --max-batch-size"
    if reported is not None:
        return reported, "reported by the server"
    waited = [r.running_max for r in results if r.waited and r.running_max > 0]
    if waited:
        observed = round(max(r.running_max for r in results))
        return observed, "observed (requests waited while the batch stayed at this size)"
    print(
        f"[profile] the server reports no maximum batch and no phase filled it: maxBatchSize is vLLM's "
        f"default {VLLM_DEFAULT_MAX_NUM_SEQS}; pass --max-batch-size if the server runs another "
        f"--max-num-seqs",
        file=sys.stderr,
    )
    return VLLM_DEFAULT_MAX_NUM_SEQS, f"assumed: vLLM's default {VLLM_DEFAULT_MAX_NUM_SEQS}"


def _number(value: float) -> str:
    return f"{value:.4g}"


def render_entry(accelerator: str, acc_count: int, max_batch: int, fit: SweepFit) -> dict[str, Any]:
    """One ``modelProfile.accelerators`` entry in the CRD's shape (parameters as decimal strings)."""
    p = fit.parms
    return {
        "acc": accelerator,
        "accCount": acc_count,
        "maxBatchSize": max_batch,
        "perfParms": {
            "decodeParms": {"alpha": _number(p.alpha), "beta": _number(p.beta)},
            "prefillParms": {"gamma": _number(p.gamma), "delta": _number(p.delta)},
        },
    }


def render_report(results: list[PhaseResult], fit: SweepFit, max_batch: int, batch_source: str) -> str:
    """The fit report: parameters with standard errors, R², and every phase's point and residual."""
    p, d, f = fit.parms, fit.decode.solution, fit.prefill.solution
    lines = [
        "Fit (times in ms):",
        f"  decode  ITL = α + β·batch            α = {p.alpha:.4g} ± {d.intercept_se or 0:.2g}, "
        f"β = {p.beta:.4g} ± {d.slope_se or 0:.2g}, R² = {fit.decode.r2:.4f}",
        f"  prefill = γ + δ·prompt·batch         γ = {p.gamma:.4g} ± {f.intercept_se or 0:.2g}, "
        f"δ = {p.delta:.4g} ± {f.slope_se or 0:.2g}, R² = {fit.prefill.r2:.4f}",
        f"  maxBatchSize {max_batch} ({batch_source})",
        "",
        f"  {'in flight':>9} {'prompt':>7} {'batch':>7} {'ITL':>8} {'fit':>8} {'resid':>7} "
        f"{'prefill':>8} {'fit':>8} {'resid':>7} {'e2e client':>10} {'model':>8}",
    ]
    dec = dict(zip(fit.decode_phases, zip(fit.decode.points, fit.decode.residuals, strict=True), strict=True))
    pre = dict(
        zip(fit.prefill_phases, zip(fit.prefill.points, fit.prefill.residuals, strict=True), strict=True)
    )
    for i, r in enumerate(results):
        pt = r.point
        cells = [f"  {r.phase.concurrency:>9} {pt.prompt_tokens:>7.0f} {pt.running:>7.2f}"]
        if i in dec:
            point, res = dec[i]
            cells.append(f"{point.y:>8.2f} {point.y / (1 + res):>8.2f} {100 * res:>6.1f}%")
        else:
            cells.append(f"{'-':>8} {'-':>8} {'-':>7}")
        if i in pre:
            point, res = pre[i]
            cells.append(f"{point.y:>8.1f} {point.y / (1 + res):>8.1f} {100 * res:>6.1f}%")
        else:
            cells.append(f"{'-':>8} {'-':>8} {'-':>7}")
        predicted = fit.predicted_e2e_ms(pt)
        cells.append(f"{_ms(pt.e2e_ms):>10} {_ms(predicted):>8}")
        lines.append(" ".join(cells))
    lines.append("")
    return "\n".join(lines)


def plot_fit(path: Path, results: list[PhaseResult], fit: SweepFit, *, title: str) -> None:
    """Both lines with their points (needs matplotlib, the ``plot`` extra)."""
    try:
        import matplotlib  # noqa: PLC0415  optional: the plot extra
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'variant-autoscaler[plot]'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # noqa: PLC0415  optional, and after the backend is chosen

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, line, label, xlabel in (
        (ax1, fit.decode, "ITL (ms)", "batch (sequences)"),
        (ax2, fit.prefill, "prefill (ms)", "prompt tokens × batch"),
    ):
        xs = [pt.x for pt in line.points]
        ys = [pt.y for pt in line.points]
        ax.scatter(xs, ys, s=18, label="measured")
        s = line.solution
        if s.slope is not None:
            top = max(xs) * 1.05
            ax.plot(
                [0, top],
                [s.intercept, s.intercept + s.slope * top],
                color="C1",
                label=f"fit, R² {line.r2:.4f}",
            )
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise ConfigError(f"cannot write the plot to {path}: {exc}") from None
    finally:
        plt.close(fig)
