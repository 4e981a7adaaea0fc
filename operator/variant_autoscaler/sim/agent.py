"""The trained baseline: a small parametric controller over the environment's features, and the adapter
that runs it in ``simulate`` as the ``agent`` policy (``--policies agent`` or ``agent:PATH``).

The agent decides per model, every ``interval_s`` (60 s), from the features of
:mod:`variant_autoscaler.sim.features` (the same numbers the Gymnasium environment observes):

1. the model's demand ``D`` (req/s routed to its variants, plus its gateway backlog over a minute) in
   units of the cheapest-per-request variant's capacity ``C`` (the analyzer's rate per replica within the
   SLOs): ``u = D / C`` replicas;
2. a target ``T = u · exp(h + q·queue + t·ttft + r·trend) + s·√u + b`` where ``queue`` is the queued
   requests per ready replica's batch, ``ttft`` the log of the observed TTFT over its SLO, ``trend``
   the relative change of ``u`` since the last decision; the eight weights are learned;
3. below the current capacity, only a learned fraction ``σ(d)`` of the gap is closed per decision
   (scale-down pace), above it at once;
4. replicas are laid out cheapest per request first within the healthy inventory, models by priority,
   each variant within ``[minReplicas, maxReplicas]``.

Its parameters are a JSON file (:data:`DEFAULT_AGENT` ships with the package, trained by
``python -m variant_autoscaler.sim.train``); evaluating it needs numpy only, not Gymnasium.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.features import Encoder, feature_index
from variant_autoscaler.sim.observe import Action, Observation
from variant_autoscaler.sim.policies import Policy
from variant_autoscaler.sim.scenario import Scenario

__all__ = [
    "AGENT_KIND",
    "DEFAULT_AGENT",
    "PARAMETERS",
    "AgentParams",
    "AgentPolicy",
    "Controller",
    "load_agent",
]

AGENT_KIND = "variant-autoscaler-agent"
DEFAULT_AGENT = "default.json"  # in variant_autoscaler/sim/agents/
PARAMETERS: tuple[str, ...] = (
    "headroom",  # h: log of the capacity multiplier
    "queue_gain",  # q
    "ttft_gain",  # t
    "trend_gain",  # r
    "sqrt_gain",  # s: square-root staffing (replicas per √replica of load)
    "bias",  # b: replicas added
    "down_pace",  # d: σ(d) of the gap to a lower target closed per decision
    "backlog_s",  # the gateway backlog counts as demand over this many seconds (× 60)
)
_F = {name: feature_index(name) for name in (
    "arrival_rps", "waiting", "gateway_waiting", "ready", "starting", "desired", "capacity_rps",
    "ttft_obs_ratio", "cost_per_hour", "units_per_replica", "max_replicas",
)}  # fmt: skip


@dataclass(frozen=True, slots=True)
class AgentParams:
    """The agent's weights (see :data:`PARAMETERS`), its decision interval, and how it was trained."""

    weights: tuple[float, ...]
    interval_s: float = 60.0
    training: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.weights) != len(PARAMETERS) or not all(math.isfinite(w) for w in self.weights):
            raise ConfigError(f"an agent needs {len(PARAMETERS)} finite weights ({', '.join(PARAMETERS)})")
        if not (self.interval_s > 0 and math.isfinite(self.interval_s)):
            raise ConfigError("an agent's interval must be a finite number of seconds > 0")

    @staticmethod
    def zero() -> AgentParams:
        return AgentParams(tuple(0.0 for _ in PARAMETERS))

    def to_json(self) -> str:
        doc = {
            "kind": AGENT_KIND,
            "version": 1,
            "interval_s": self.interval_s,
            "weights": {name: round(w, 6) for name, w in zip(PARAMETERS, self.weights, strict=True)},
            "training": dict(self.training),
        }
        return json.dumps(doc, indent=2) + "\n"

    @staticmethod
    def from_json(text: str, source: str = "agent") -> AgentParams:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{source}: not JSON ({exc.msg}, line {exc.lineno})") from None
        if not isinstance(doc, dict) or doc.get("kind") != AGENT_KIND:
            raise ConfigError(f"{source}: not an agent file (kind must be {AGENT_KIND!r})")
        weights = doc.get("weights")
        if not isinstance(weights, dict) or sorted(weights) != sorted(PARAMETERS):
            raise ConfigError(f"{source}: weights must name exactly {', '.join(PARAMETERS)}")
        try:
            values = tuple(float(weights[name]) for name in PARAMETERS)
            interval = float(doc.get("interval_s", 60.0))
        except (TypeError, ValueError):
            raise ConfigError(f"{source}: weights and interval_s must be numbers") from None
        training = doc.get("training", {})
        try:
            return AgentParams(values, interval, training if isinstance(training, dict) else {})
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None


def load_agent(path: str | Path | None = None) -> AgentParams:
    """An agent file; the shipped one (:data:`DEFAULT_AGENT`) without a path."""
    if path is None:
        text = resources.files("variant_autoscaler.sim.agents").joinpath(DEFAULT_AGENT).read_text("utf-8")
        return AgentParams.from_json(text, f"bundled agent {DEFAULT_AGENT}")
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read agent {p}: {exc.strerror or exc}") from None
    return AgentParams.from_json(text, str(p))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, x))))


class Controller:
    """The agent over one scenario's cluster: features in, replicas per variant out (module doc).
    Remembers each model's last load, so build one per run."""

    def __init__(self, scenario: Scenario, params: AgentParams) -> None:
        self.params = params
        self.scenario = scenario
        names = [v.name for v in scenario.variants]
        accs = [a.name for a in scenario.accelerators]
        models = scenario.model_by_id
        classes = scenario.class_by_name
        order = sorted(scenario.models, key=lambda m: (classes[m.service_class].priority, m.model_id))
        self._groups: list[list[int]] = [
            [i for i, v in enumerate(scenario.variants) if v.model == m.model_id] for m in order
        ]
        self._acc = [accs.index(v.accelerator) for v in scenario.variants]
        self._min = [v.min_replicas for v in scenario.variants]
        self._names = names
        self._prev: dict[int, float] = {}
        del models

    def targets(self, rows: npt.NDArray[np.float32], inventory: npt.NDArray[np.float32]) -> list[int]:
        """Replicas per variant (in the scenario's variant order)."""
        h, qg, tg, rg, sg, bias, down, backlog = self.params.weights
        backlog_s = 60.0 * math.exp(max(-5.0, min(5.0, backlog)))
        x = rows.astype(np.float64)
        avail = inventory[:, 1].astype(np.float64).copy()  # healthy units, shared by priority
        out = [int(x[i, _F["desired"]]) for i in range(len(self._names))]
        for gi, group in enumerate(self._groups):
            caps = [x[i, _F["capacity_rps"]] for i in group]
            usable = [i for i, c in zip(group, caps, strict=True) if c > 0]
            if not usable:
                continue  # the SLOs are out of reach everywhere: keep the replicas as they are
            # Cheapest per request first.
            usable.sort(key=lambda i: (x[i, _F["cost_per_hour"]] / x[i, _F["capacity_rps"]], i))
            ref = x[usable[0], _F["capacity_rps"]]
            demand = sum(x[i, _F["arrival_rps"]] for i in group)
            demand += x[group[0], _F["gateway_waiting"]] / backlog_s
            u = demand / ref
            ready = sum(x[i, _F["ready"]] for i in group)
            queued = sum(x[i, _F["waiting"]] for i in group) + x[group[0], _F["gateway_waiting"]]
            batch_ref = 64.0  # queue measured in batches of a typical size; the weight absorbs the scale
            queue = min(5.0, queued / (max(1.0, ready) * batch_ref))
            ttft = max((x[i, _F["ttft_obs_ratio"]] for i in group), default=0.0)
            ttft_term = max(-2.0, min(3.0, math.log(ttft))) if ttft > 0 else 0.0
            prev = self._prev.get(gi)
            trend = 0.0 if prev is None else max(-1.0, min(2.0, (u - prev) / max(prev, 1.0)))
            self._prev[gi] = u
            mult = math.exp(max(-3.0, min(3.0, h + qg * queue + tg * ttft_term + rg * trend)))
            target = max(0.0, u * mult + sg * math.sqrt(max(u, 0.0)) + bias)
            current = sum(x[i, _F["desired"]] * x[i, _F["capacity_rps"]] / ref for i in usable)
            if target < current:
                target = current - _sigmoid(down) * (current - target)
            remaining = target
            for i in usable:
                ratio = x[i, _F["capacity_rps"]] / ref
                units = max(1.0, x[i, _F["units_per_replica"]])
                room = int(min(x[i, _F["max_replicas"]], avail[self._acc[i]] // units))
                n = max(0, min(room, math.ceil(remaining / ratio - 1e-9)))
                n = max(n, self._min[i])
                out[i] = n
                remaining -= n * ratio
                avail[self._acc[i]] -= n * units
            for i in group:
                if i not in usable:
                    out[i] = max(self._min[i], 0)
        return out


class AgentPolicy(Policy):
    """A trained agent as a simulator policy (``simulate --policies agent`` or ``agent:PATH``)."""

    def __init__(
        self, scenario: Scenario, params: AgentParams, *, name: str = "agent", max_replicas: int = 32
    ) -> None:
        self.name = name
        self.interval_s = params.interval_s
        self.encoder = Encoder(scenario, max_replicas)
        self.controller = Controller(scenario, params)
        self._names = [v.name for v in scenario.variants]

    def decide(self, obs: Observation) -> Mapping[str, Action]:
        rows, inventory = self.encoder.encode(obs)
        targets = self.controller.targets(rows, inventory)
        return {
            name: Action(t)
            for name, t in zip(self._names, targets, strict=True)
            if t != obs.variants[name].desired
        }


def agent_targets_action(targets: Sequence[int]) -> npt.NDArray[np.int64]:
    """Targets as a ``target``-mode action of the environment."""
    return np.asarray(targets, dtype=np.int64)
