"""``variant-autoscaler analyze``: capacity planning with the queueing model.

Two forms:

* human: the model on the command line, a readable table on stdout — the predicted metrics at
  ``--rate`` and the largest rate one replica sustains under ``--ttft`` / ``--itl`` / ``--tps``;
* batch (``--json``): a JSON array of cases on stdin, a JSON array of results (same order) on stdout.
  An invalid case gets its ``error`` and does not stop the others.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, TextIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from variant_autoscaler.commands.arguments import number
from variant_autoscaler.core.queueing import (
    AnalysisMetrics,
    QueueAnalyzer,
    RequestSize,
    ServiceParms,
    SizeResult,
    TargetPerf,
)
from variant_autoscaler.errors import InfeasibleError, ModelError

_EXAMPLES = """\
examples:
  # one model on one accelerator: metrics at 3 req/s and the max rate per replica under the SLOs
  variant-autoscaler analyze --alpha 20.58 --beta 0.41 --gamma 20.58 --delta 0.041 \\
      --max-batch-size 64 --input-tokens 512 --output-tokens 256 --rate 3 --ttft 500 --itl 40

  # many cases at once (JSON array in, JSON array out)
  echo '[{"alpha": 20.58, "beta": 0.41, "gamma": 20.58, "delta": 0.041, "maxBatchSize": 64,
          "avgInputTokens": 512, "avgOutputTokens": 256, "requestRate": 3,
          "targetTTFT": 500, "targetITL": 40}]' | variant-autoscaler analyze --json

Times are in ms, rates in requests/s per replica, TPS in tokens/s. See docs/analyzer.md.
"""

_MODEL_FLAGS = ("alpha", "beta", "gamma", "delta", "max_batch_size", "input_tokens", "output_tokens")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``analyze`` sub-command."""
    parser = subparsers.add_parser(
        "analyze",
        help="predict latency and size one replica with the queueing model",
        description=(
            "Predict TTFT, ITL and throughput of one inference server (a model on an accelerator) at a "
            "request rate, and the largest rate one replica sustains under TTFT/ITL/TPS targets, with "
            "the same queueing model the autoscaler uses."
        ),
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model = parser.add_argument_group(
        "model (decode time α + β·batch, prefill time γ + δ·input tokens·batch)"
    )
    model.add_argument("--alpha", type=number(), metavar="MS", help="decode time base α (ms)")
    model.add_argument("--beta", type=number(), metavar="MS", help="decode time per batched request β (ms)")
    model.add_argument("--gamma", type=number(), metavar="MS", help="prefill time base γ (ms)")
    model.add_argument(
        "--delta", type=number(), metavar="MS", help="prefill time per input token per request δ (ms)"
    )
    model.add_argument("--max-batch-size", type=int, metavar="N", help="maximum batch size of the server")
    model.add_argument(
        "--max-queue-size",
        type=int,
        metavar="Q",
        help="maximum queued requests (default: 10 × max batch size)",
    )
    model.add_argument(
        "--input-tokens", type=number(), metavar="TOKENS", help="average input tokens per request"
    )
    model.add_argument(
        "--output-tokens", type=number(), metavar="TOKENS", help="average output tokens per request"
    )
    load = parser.add_argument_group("load and targets (a target of 0 or left out is ignored)")
    load.add_argument(
        "--rate", type=number(above=True), metavar="REQ/S", help="request rate per replica to analyse"
    )
    load.add_argument(
        "--ttft", type=number(), default=0.0, metavar="MS", help="target mean time to first token"
    )
    load.add_argument(
        "--itl", type=number(), default=0.0, metavar="MS", help="target mean inter-token latency"
    )
    load.add_argument("--tps", type=number(), default=0.0, metavar="TOKENS/S", help="target token throughput")
    load.add_argument(
        "--ttft-percentile",
        type=number(below=100.0),
        default=0.0,
        metavar="P",
        help="make --ttft bound this percentile of TTFT (e.g. 99) instead of its mean",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="batch mode: read a JSON array of cases on stdin, write a JSON array of results",
    )
    parser.set_defaults(func=run, analyze_parser=parser)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``variant-autoscaler analyze``; returns the exit code."""
    if args.json:
        return run_batch(sys.stdin, sys.stdout, sys.stderr)
    missing = [f"--{name.replace('_', '-')}" for name in _MODEL_FLAGS if getattr(args, name) is None]
    if missing:
        args.analyze_parser.error(f"the model needs {', '.join(missing)} (or use --json)")
    analyzer = QueueAnalyzer(
        args.max_batch_size,
        args.max_queue_size,
        ServiceParms(args.alpha, args.beta, args.gamma, args.delta),
        RequestSize(args.input_tokens, args.output_tokens),
    )
    targets = TargetPerf(ttft=args.ttft, itl=args.itl, tps=args.tps, ttft_percentile=args.ttft_percentile)
    sys.stdout.write(render_table(analyzer, args.rate, targets))
    return 0


# ---- human form ----------------------------------------------------------------------------------


def _num(value: float) -> str:
    return f"{value:.4g}"


def render_table(analyzer: QueueAnalyzer, rate: float | None, targets: TargetPerf) -> str:
    """The readable report of the human form."""
    parms, request = analyzer.parms, analyzer.request
    lo, hi = analyzer.rate_range
    lines = [
        f"Model      decode {_num(parms.alpha)} + {_num(parms.beta)}·batch ms, "
        f"prefill {_num(parms.gamma)} + {_num(parms.delta)}·tokens·batch ms",
        f"Server     max batch {analyzer.max_batch_size}, max queue {analyzer.max_queue_size}",
        f"Requests   {_num(request.avg_input_tokens)} input / "
        f"{_num(request.avg_output_tokens)} output tokens on average",
        f"Rates      {_num(lo)} .. {_num(hi)} req/s per replica (model range)",
        "",
    ]
    if rate is not None:
        lines.append(f"At {_num(rate)} req/s per replica")
        try:
            metrics = analyzer.analyze(rate)
        except ModelError as exc:
            lines.append(f"  not analysable: {exc}")
        else:
            lines.extend(_metric_rows(metrics))
            if targets.ttft_percentile > 0:
                p = targets.ttft_percentile
                lines.append(_row(f"TTFT p{p:g}", f"{_num(analyzer.ttft_percentile(rate, p))} ms"))
        lines.append("")
    ttft_name = f"TTFT p{targets.ttft_percentile:g}" if targets.ttft_percentile > 0 else "TTFT"
    wanted = [
        f"{name} <= {_num(value)} {unit}"
        for name, value, unit in ((ttft_name, targets.ttft, "ms"), ("ITL", targets.itl, "ms"))
        if value > 0
    ]
    if targets.tps > 0:
        wanted.append(f"TPS >= {_num(targets.tps)} tokens/s")
    lines.append("Max rate per replica" + (f" under {', '.join(wanted)}" if wanted else " (no targets)"))
    try:
        size = analyzer.size(targets)
    except (InfeasibleError, ModelError) as exc:
        lines.append(f"  none: {exc}")
    else:
        lines.extend(_size_rows(size, targets))
    return "\n".join(lines) + "\n"


def _row(label: str, value: str) -> str:
    return f"  {label:<22}{value}"


def _metric_rows(m: AnalysisMetrics) -> list[str]:
    return [
        _row("throughput", f"{_num(m.throughput)} req/s"),
        _row(
            "TTFT",
            f"{_num(m.ttft)} ms  (queueing {_num(m.avg_wait_time)} + prefill {_num(m.avg_prefill_time)})",
        ),
        _row("ITL", f"{_num(m.itl)} ms"),
        _row("response time", f"{_num(m.avg_resp_time)} ms"),
        _row("requests in batch", f"{_num(m.avg_num_in_serv)}  (utilisation {m.rho:.1%})"),
    ]


def _size_rows(s: SizeResult, targets: TargetPerf) -> list[str]:
    rows = []
    if targets.ttft > 0:
        rows.append(_row("meeting TTFT", f"{_num(s.rate_target_ttft)} req/s"))
    if targets.itl > 0:
        rows.append(_row("meeting ITL", f"{_num(s.rate_target_itl)} req/s"))
    if targets.tps > 0:
        rows.append(_row("stability cap (TPS)", f"{_num(s.rate_target_tps)} req/s"))
    rows += [
        _row("max rate", f"{_num(s.max_rate)} req/s  (throughput {_num(s.metrics.throughput)} req/s)"),
        _row("at that rate", f"TTFT {_num(s.ttft)} ms, ITL {_num(s.itl)} ms, {_num(s.tps)} tokens/s"),
    ]
    if s.ttft_at_percentile is not None:
        rows.append(_row("", f"TTFT p{targets.ttft_percentile:g} {_num(s.ttft_at_percentile)} ms"))
    return rows


# ---- batch form ----------------------------------------------------------------------------------


class AnalyzeCase(BaseModel):
    """One case of ``analyze --json`` (keys as in WVA: ms, req/s, tokens/s)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    alpha: float
    beta: float
    gamma: float
    delta: float
    max_batch_size: int = Field(alias="maxBatchSize")
    max_queue_size: int | None = Field(default=None, alias="maxQueueSize")
    avg_input_tokens: float = Field(alias="avgInputTokens")
    avg_output_tokens: float = Field(alias="avgOutputTokens")
    request_rate: float | None = Field(default=None, alias="requestRate")
    target_ttft: float = Field(default=0.0, alias="targetTTFT")
    target_itl: float = Field(default=0.0, alias="targetITL")
    target_tps: float = Field(default=0.0, alias="targetTPS")
    # Ours: make targetTTFT bound this percentile of TTFT instead of its mean.
    target_ttft_percentile: float = Field(default=0.0, alias="targetTTFTPercentile")


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "case"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def analyze_case(raw: object) -> dict[str, Any]:
    """The result object for one batch case (never raises for bad input)."""
    result: dict[str, Any] = {"error": None, "rateRange": None, "analysis": None, "size": None}
    if not isinstance(raw, dict):
        result["error"] = f"a case must be a JSON object, got {type(raw).__name__}"
        return result
    try:
        case = AnalyzeCase.model_validate(raw)
    except ValidationError as exc:
        result["error"] = _validation_message(exc)
        return result
    try:
        analyzer = QueueAnalyzer(
            case.max_batch_size,
            case.max_queue_size,
            ServiceParms(case.alpha, case.beta, case.gamma, case.delta),
            RequestSize(case.avg_input_tokens, case.avg_output_tokens),
        )
    except ModelError as exc:
        result["error"] = str(exc)
        return result
    result["rateRange"] = list(analyzer.rate_range)
    targets = TargetPerf(case.target_ttft, case.target_itl, case.target_tps, case.target_ttft_percentile)
    if case.request_rate is not None:
        result["analysis"] = _analysis(analyzer, case.request_rate, targets)
    result["size"] = _size(analyzer, targets)
    return result


_ANALYSIS_KEYS = (
    "throughput",
    "avgRespTime",
    "avgWaitTime",
    "avgNumInServ",
    "avgPrefillTime",
    "ttft",
    "itl",
    "rho",
    "maxRate",
)
_SIZE_KEYS = (
    "rateTargetTTFT",
    "rateTargetITL",
    "rateTargetTPS",
    "maxRate",
    "throughput",
    "ttft",
    "itl",
    "tps",
)


def _analysis(analyzer: QueueAnalyzer, rate: float, targets: TargetPerf) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    try:
        m = analyzer.analyze(rate)
        if targets.ttft_percentile > 0:  # ours, only when a percentile is asked for
            extra["ttftAtPercentile"] = _finite(analyzer.ttft_percentile(rate, targets.ttft_percentile))
    except ModelError as exc:
        return {"error": str(exc)} | dict.fromkeys(_ANALYSIS_KEYS) | dict.fromkeys(extra)
    values = (
        m.throughput,
        m.avg_resp_time,
        m.avg_wait_time,
        m.avg_num_in_serv,
        m.avg_prefill_time,
        m.ttft,
        m.itl,
        m.rho,
        m.max_rate,
    )
    return {"error": None} | {k: _finite(v) for k, v in zip(_ANALYSIS_KEYS, values, strict=True)} | extra


def _size(analyzer: QueueAnalyzer, targets: TargetPerf) -> dict[str, Any]:
    try:
        s = analyzer.size(targets)
    except (InfeasibleError, ModelError) as exc:
        return {"error": str(exc)} | dict.fromkeys(_SIZE_KEYS)
    values = (
        s.rate_target_ttft,
        s.rate_target_itl,
        s.rate_target_tps,
        s.max_rate,
        s.metrics.throughput,
        s.ttft,
        s.itl,
        s.tps,
    )
    out = {"error": None} | {k: _finite(v) for k, v in zip(_SIZE_KEYS, values, strict=True)}
    if s.ttft_at_percentile is not None:
        out["ttftAtPercentile"] = _finite(s.ttft_at_percentile)
    return out


def run_batch(stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """``analyze --json``: JSON array of cases in, JSON array of results out; 2 if the input is unusable."""
    try:
        cases = json.loads(stdin.read())
    except json.JSONDecodeError as exc:
        stderr.write(f"error: stdin is not valid JSON: {exc}\n")
        return 2
    except UnicodeDecodeError:
        stderr.write("error: stdin is not UTF-8 text\n")
        return 2
    except RecursionError:
        stderr.write("error: stdin is nested too deeply to be read\n")
        return 2
    if not isinstance(cases, list):
        stderr.write("error: stdin must hold a JSON array of cases\n")
        return 2
    results = [analyze_case(case) for case in cases]
    json.dump(results, stdout, indent=2, allow_nan=False)
    stdout.write("\n")
    return 0
