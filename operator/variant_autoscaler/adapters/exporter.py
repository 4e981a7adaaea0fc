"""The operator's metrics endpoint: WVA's ``inferno_*`` gauges and the operator's own metrics.

The per-variant series come from a collector over the latest decisions (replaced as a whole each cycle),
so a deleted variant leaves no stale series behind. Their text is rendered once per decision set and
leadership state and then served as is: with hundreds of variants, rendering thousands of series on
every scrape cost tens of milliseconds of the event loop's time. The operator's own metrics live on a
private :class:`~prometheus_client.CollectorRegistry`; a small aiohttp server serves both.

``inferno_desired_replicas``, ``inferno_current_replicas`` and ``inferno_desired_ratio`` keep WVA's names
and labels (``variant_name``, ``namespace``, ``accelerator_type``), so WVA's prometheus-adapter rule and
HPA sample work unchanged. WVA v0.5 renamed them ``wva_desired_replicas``, ``wva_current_replicas`` and
``wva_desired_ratio`` (same labels, plus ``controller_instance`` when the process has one) and added the
counter ``wva_replica_scaling_total{direction,reason}``: both families are exported, from the same
values, so every generation's HPAs, ScaledObjects and dashboards find theirs (either can be turned off).
The gauges are exported for variants in ``metrics`` actuation mode only, and only while this process is
the leader: a standby or a shadow-mode variant must not drive an HPA.

``wva_replica_scaling_total`` counts the changes of each variant's decision from one cycle's set of
gauges to the next (``direction`` ``up`` or ``down``, ``reason`` what decided), for every variant whatever
its mode; its series go with the variant.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from variant_autoscaler.core.decision import Gauges

if TYPE_CHECKING:
    from variant_autoscaler.adapters.metrics_auth import MetricsSecurity

logger = logging.getLogger(__name__)

WVA_LABELS: tuple[str, ...] = ("variant_name", "namespace", "accelerator_type")
CONTROLLER_INSTANCE_LABEL = "controller_instance"


# The exported view of one variant's latest decision: the pure decision's gauges, as they are.
VariantGauges = Gauges


_ScalingKey = tuple[str, str, str, str, str]  # variant_name, namespace, accelerator_type, direction, reason


class DecisionCollector(Collector):
    """Scrape-time series over the latest decisions."""

    def __init__(
        self,
        is_active: Callable[[], bool],
        *,
        controller_instance: str | None = None,
        inferno: bool = True,
        wva: bool = True,
    ) -> None:
        self._is_active = is_active
        self._variants: tuple[VariantGauges, ...] = ()
        self._rendered: tuple[tuple[VariantGauges, ...], bool, bytes] | None = None
        self._scalings: dict[_ScalingKey, int] = {}
        self.configure(controller_instance=controller_instance, inferno=inferno, wva=wva)
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(self)

    def configure(
        self, *, controller_instance: str | None = None, inferno: bool = True, wva: bool = True
    ) -> None:
        """Which families to export (settings ``emit_inferno_metrics``/``emit_wva_metrics``) and the
        ``controller_instance`` label of the ``wva_*`` series (setting ``controller_instance``)."""
        self._instance = controller_instance or None
        self._inferno = inferno
        self._wva = wva
        self._rendered = None

    def replace(self, variants: Iterable[VariantGauges]) -> None:
        new = tuple(variants)
        before = {(v.namespace, v.variant_name): v.desired_replicas for v in self._variants}
        present = {(v.namespace, v.variant_name) for v in new}
        self._scalings = {k: n for k, n in self._scalings.items() if (k[1], k[0]) in present}
        for v in new:
            old = before.get((v.namespace, v.variant_name))
            if old is not None and old != v.desired_replicas:
                direction = "up" if v.desired_replicas > old else "down"
                key = (v.variant_name, v.namespace, v.accelerator, direction, v.scaling_reason)
                self._scalings[key] = self._scalings.get(key, 0) + 1
        self._variants = new

    def render(self) -> bytes:
        """The exposition text of :meth:`collect`, rendered again only when it can have changed."""
        variants, active = self._variants, self._is_active()
        cached = self._rendered
        if cached is not None and cached[0] is variants and cached[1] == active:
            return cached[2]
        text = generate_latest(self._registry)
        self._rendered = (variants, active, text)
        return text

    @property
    def variants(self) -> Sequence[VariantGauges]:
        return self._variants

    def describe(self) -> Iterable[Metric]:
        return []  # series depend on state; nothing to pre-declare

    def _families(self, prefix: str, labels: Sequence[str]) -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily(
                f"{prefix}_desired_replicas", "Replicas the autoscaler wants for the variant.", labels=labels
            ),
            GaugeMetricFamily(
                f"{prefix}_current_replicas", "Replicas of the variant running now.", labels=labels
            ),
            GaugeMetricFamily(
                f"{prefix}_desired_ratio",
                "Desired over current replicas (desired when none run).",
                labels=labels,
            ),
        )

    def collect(self) -> Iterator[Metric]:
        if not self._is_active():
            return
        extra = [CONTROLLER_INSTANCE_LABEL] if self._instance else []
        instance = [self._instance] if self._instance else []
        desired, current, ratio = self._families("inferno", WVA_LABELS)
        wva_families = self._families("wva", [*WVA_LABELS, *extra])
        scalings = CounterMetricFamily(
            "wva_replica_scaling",
            "Changes of the variant's decision, by direction and by what decided.",
            labels=[*WVA_LABELS, "direction", "reason", *extra],
        )
        for (name, namespace, acc, direction, reason), count in sorted(self._scalings.items()):
            scalings.add_metric([name, namespace, acc, direction, reason, *instance], count)
        ours = GaugeMetricFamily(
            "variant_autoscaler_desired_replicas",
            "The operator's decision for every variant, whatever its actuation mode.",
            labels=[*WVA_LABELS, "mode"],
        )
        ttft = GaugeMetricFamily(
            "variant_autoscaler_ttft_seconds",
            "Mean time to first token: predicted at the decision, or observed.",
            labels=["variant_name", "namespace", "kind"],
        )
        itl = GaugeMetricFamily(
            "variant_autoscaler_itl_seconds",
            "Mean inter-token latency: predicted at the decision, or observed.",
            labels=["variant_name", "namespace", "kind"],
        )
        for v in self._variants:
            labels = [v.variant_name, v.namespace, v.accelerator]
            ours.add_metric([*labels, v.mode], v.desired_replicas)
            if v.mode == "metrics":
                figures = (float(v.desired_replicas), float(v.current_replicas), v.desired_ratio)
                for gauge, figure in zip((desired, current, ratio), figures, strict=True):
                    gauge.add_metric(labels, figure)
                for gauge, figure in zip(wva_families, figures, strict=True):
                    gauge.add_metric([*labels, *instance], figure)
            for family, kind, value in (
                (ttft, "predicted", v.predicted_ttft_ms),
                (ttft, "observed", v.observed_ttft_ms),
                (itl, "predicted", v.predicted_itl_ms),
                (itl, "observed", v.observed_itl_ms),
            ):
                if value is not None:
                    family.add_metric([v.variant_name, v.namespace, kind], value / 1000.0)
        if self._inferno:
            yield from (desired, current, ratio)
        if self._wva:
            yield from (*wva_families, scalings)
        yield from (ours, ttft, itl)


class Exporter:
    """The registry, the operator's own metrics and the HTTP server that serves them."""

    def __init__(self, *, is_active: Callable[[], bool]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.decisions = DecisionCollector(is_active)  # rendered on its own (see the module docstring)
        r = self.registry
        self.cycle_duration = Histogram(
            "variant_autoscaler_cycle_duration_seconds",
            "Wall time of one full cycle.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0),
            registry=r,
        )
        self.cycles = Counter(
            "variant_autoscaler_cycles", "Completed cycles by result.", ["result"], registry=r
        )
        self.last_cycle_duration = Gauge(
            "variant_autoscaler_last_cycle_duration_seconds",
            "Wall time of the last completed cycle.",
            registry=r,
        )
        self.last_cycle = Gauge(
            "variant_autoscaler_last_cycle_timestamp_seconds",
            "Unix time at which the last cycle completed.",
            registry=r,
        )
        self.variants = Gauge(
            "variant_autoscaler_variants", "Variants handled in the last cycle.", registry=r
        )
        self.optimizer_duration = Gauge(
            "variant_autoscaler_optimizer_duration_seconds", "Solve time of the last plan.", registry=r
        )
        self.optimizer_status = Gauge(
            "variant_autoscaler_optimizer_status",
            "1 for the status of the last plan (optimal, infeasible, error, ...).",
            ["status"],
            registry=r,
        )
        self.promql_queries = Counter(
            "variant_autoscaler_promql_queries", "PromQL queries sent to Prometheus.", registry=r
        )
        self.promql_queries_last_cycle = Gauge(
            "variant_autoscaler_promql_queries_last_cycle", "PromQL queries of the last cycle.", registry=r
        )
        self.status_conflicts = Counter(
            "variant_autoscaler_status_conflicts",
            "Status writes that hit a conflict (HTTP 409) and were retried with a fresh read.",
            registry=r,
        )
        self.status_writes_skipped = Counter(
            "variant_autoscaler_status_writes_skipped",
            "Status writes left out: only figures and timestamps changed (STATUS_REFRESH_INTERVAL).",
            registry=r,
        )
        self.scalings = Counter(
            "inferno_replica_scaling",
            "Replica changes applied by the operator (patch mode).",
            ["variant_name", "namespace", "direction", "reason"],
            registry=r,
        )
        self.leader = Gauge("variant_autoscaler_leader", "1 while this process is the leader.", registry=r)
        # Limited mode: the GPUs the last plan had and gave, per device type and per capped namespace.
        self.gpus = Gauge(
            "variant_autoscaler_gpus",
            "Limited mode, per device type: the GPUs the last plan could give the variants (available: the"
            " inventory less other workloads' pods and cluster quotas) and the GPUs it gave them (planned).",
            ["device", "kind"],
            registry=r,
        )
        self.namespace_gpus = Gauge(
            "variant_autoscaler_namespace_gpus",
            "Per namespace with a GPU quota and device type: its cap, the GPUs its variants hold (held) and"
            " those the last plan gives them (planned).",
            ["namespace", "device", "kind"],
            registry=r,
        )
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.secure = False  # served over HTTPS with authentication and authorization

    def set_optimizer_status(self, status: str) -> None:
        self.optimizer_status.clear()
        self.optimizer_status.labels(status=status).set(1)

    def render(self) -> bytes:
        return generate_latest(self.registry) + self.decisions.render()

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(body=self.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self, host: str, port: int, *, security: MetricsSecurity | None = None) -> int:
        """Serve ``/metrics``; returns the bound port (``port=0`` picks a free one).

        With ``security``: over HTTPS, and only to callers the API server authenticates and authorizes
        (:mod:`variant_autoscaler.adapters.metrics_auth`).
        """
        app = web.Application(middlewares=[security.middleware] if security is not None else [])
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port, ssl_context=security.ssl_context if security else None)
        await site.start()
        self._runner = runner
        server = site._server
        sockets = getattr(server, "sockets", None) or ()
        self.port = sockets[0].getsockname()[1] if sockets else port
        self.secure = security is not None
        scheme = "https" if self.secure else "http"
        logger.info("serving metrics on %s://%s:%s/metrics", scheme, host, self.port)
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
