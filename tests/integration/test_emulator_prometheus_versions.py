"""The operator's collector reads ITL from what each vLLM version exports, through a real Prometheus.

Two real emulator processes with the V1 engine, one exporting vLLM 0.10's metric set (only
``vllm:time_per_output_token_seconds``, and the ``gpu_`` names), one the current set (only
``vllm:inter_token_latency_seconds``), scraped by a real Prometheus, loaded by the real load generator;
the operator's :class:`~variant_autoscaler.adapters.prometheus.Collector` must read a real ITL for both
with its fixed query set, and name no series as absent. (The e2e suite runs the current set end to end.)
"""

from __future__ import annotations

import asyncio
import time

from localcluster import PrometheusServer, wait_for
from variant_autoscaler.adapters.prometheus import QUERIES_PER_CYCLE, Collector, PrometheusClient
from variant_autoscaler.api.config import PrometheusConfig
from vllm_emulator.distributions import parse_distribution
from vllm_emulator.loadgen import LoadSpec, run_load
from vllm_emulator.process import EmulatorProcess

SCALE = 10.0
FIXED, TOKEN = 20.0, 0.5  # ms: the decode step at batch b is FIXED + TOKEN·b (no context part)
V1 = [
    "--engine", "v1", "--time-scale", str(SCALE), "--step-fixed-ms", str(FIXED), "--step-token-ms",
    str(TOKEN), "--step-context-ms", "0", "--max-num-seqs", "8",
]  # fmt: skip
OLD, NEW = "old/vllm-0.10", "new/vllm-0.12"


def _present(server: PrometheusServer, series: str, model: str) -> bool:
    return bool(server.query(f'{series}{{model_name="{model}"}}'))


async def test_itl_is_read_from_the_old_and_the_new_name(prometheus: PrometheusServer) -> None:
    with (
        EmulatorProcess([*V1, "--model", OLD, "--vllm-version", "0.10"]) as old,
        EmulatorProcess([*V1, "--model", NEW, "--vllm-version", "0.12"]) as new,
    ):
        prometheus.add_targets("emulators", [e.url.removeprefix("http://") for e in (old, new)])
        wait_for(
            lambda: (
                _present(prometheus, "vllm:num_requests_running", OLD)
                and _present(prometheus, "vllm:num_requests_running", NEW)
            ),
            timeout=60,
            what="both emulators scraped",
        )

        def load(url: str) -> LoadSpec:
            return LoadSpec(
                targets=(url,),
                schedule=((12.0, 4.0),),
                input_tokens=parse_distribution("64"),
                output_tokens=parse_distribution("32"),
            )

        summaries = await asyncio.gather(run_load(load(old.url)), run_load(load(new.url)))
        assert all(s.completed > 20 and s.errors == 0 for s in summaries)
        # Each emulator exports only its version's names.
        assert _present(prometheus, "vllm:time_per_output_token_seconds_count", OLD)
        assert not _present(prometheus, "vllm:inter_token_latency_seconds_count", OLD)
        assert _present(prometheus, "vllm:gpu_cache_usage_perc", OLD)
        assert _present(prometheus, "vllm:inter_token_latency_seconds_count", NEW)
        assert not _present(prometheus, "vllm:time_per_output_token_seconds_count", NEW)
        assert not _present(prometheus, "vllm:gpu_cache_usage_perc", NEW)

        client = PrometheusClient(PrometheusConfig(base_url=prometheus.url), backoff=0.1)
        try:
            await asyncio.sleep(3.0)  # one more scrape after the last request
            snapshot = await Collector(client).collect(now=time.time(), window_seconds=20.0)
        finally:
            await client.aclose()
    assert snapshot.queries == QUERIES_PER_CYCLE
    for model in (OLD, NEW):
        lookup = snapshot.lookup(model, "")
        assert lookup.state == "ok", lookup.message
        assert lookup.message == "vLLM metrics are available and up to date"
        assert lookup.metrics is not None and lookup.metrics.absent == ()
        # At most 8 requests decode together: the step lasts FIXED + TOKEN·b ms of emulated time.
        itl_ms = lookup.metrics.itl_ms * SCALE
        assert FIXED + TOKEN <= itl_ms <= FIXED + TOKEN * 8 + 1.0, (model, itl_ms)
