"""One factory for performance profiles, in each shape the code takes them.

Defaults are WVA's end-to-end A100 profile (α = γ = 20.58 ms, β = 0.41 ms, δ = 0.041 ms), batch 64, one
GPU per replica; a test states only what it varies.
"""

from __future__ import annotations

from typing import Any

from variant_autoscaler.core.estimator import admission_batch, decode_batch
from variant_autoscaler.core.model import Profile
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.sim import scenario
from vllm_emulator import engine

__all__ = [
    "WVA_A100",
    "crd_accelerator",
    "engine_profile",
    "parms",
    "profile",
    "profile_window",
    "sim_profile",
]

WVA_A100 = ServiceParms(alpha=20.58, beta=0.41, gamma=20.58, delta=0.041)


def parms(
    alpha: float = 20.58, beta: float = 0.41, gamma: float = 20.58, delta: float = 0.041
) -> ServiceParms:
    return ServiceParms(alpha=alpha, beta=beta, gamma=gamma, delta=delta)


def profile(
    accelerator: str = "A100", *, batch: int = 64, count: int = 1, parms: ServiceParms = WVA_A100
) -> Profile:
    """The optimizer's profile of one model on one accelerator."""
    return Profile(accelerator=accelerator, acc_count=count, max_batch_size=batch, parms=parms)


def sim_profile(
    accelerator: str = "A100", *, batch: int = 64, count: int = 1, parms: ServiceParms = WVA_A100
) -> scenario.Profile:
    """A simulated model's profile on one accelerator."""
    return scenario.Profile(accelerator, count, batch, parms.alpha, parms.beta, parms.gamma, parms.delta)


def engine_profile(parms: ServiceParms = WVA_A100) -> engine.Profile:
    """The emulator engine's profile."""
    return engine.Profile(alpha=parms.alpha, beta=parms.beta, gamma=parms.gamma, delta=parms.delta)


def crd_accelerator(
    accelerator: str = "A100", *, batch: int = 64, count: int = 1, parms: ServiceParms = WVA_A100
) -> dict[str, Any]:
    """One ``spec.modelProfile.accelerators[]`` entry, as a VariantAutoscaling carries it."""
    return {
        "acc": accelerator,
        "accCount": count,
        "maxBatchSize": batch,
        "perfParms": {
            "decodeParms": {"alpha": repr(parms.alpha), "beta": repr(parms.beta)},
            "prefillParms": {"gamma": repr(parms.gamma), "delta": repr(parms.delta)},
        },
    }


def profile_window(
    truth: ServiceParms, running: float, *, prompt_tokens: float = 200.0, max_batch: int | None = None
) -> dict[str, float]:
    """A pod's answers to the profile learning's queries (adapters/profile_metrics.py) for a server with
    parameters ``truth`` that ran ``running`` requests on average through a steady window: mean
    inter-token latency at the batch a token sees, mean prefill time at the batch a request joins (the
    estimator's own relations, so a fit on such windows recovers ``truth``), 5 % of the time in prefill."""
    a, b = truth.alpha, truth.beta
    itl_ms = a + b * decode_batch(running, max_batch, a, b)
    prefill_ms = truth.gamma + truth.delta * prompt_tokens * admission_batch(running, max_batch, a, b)
    decoding, prefilling = 0.95 * running, 0.05 * running
    return {
        "itl_sum": decoding,
        "itl_count": decoding / (itl_ms / 1000.0),
        "prefill_sum": prefilling,
        "prefill_count": prefilling / (prefill_ms / 1000.0),
        "prompt_tokens": prompt_tokens,
        "running_avg": running,
        "running_var": running,
    }
