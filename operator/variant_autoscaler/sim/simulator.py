"""The discrete-event simulation of a cluster under one autoscaling policy.

Time is virtual (seconds from 0). The event loop merges two streams: the requests of every model,
pre-generated and sorted, and a heap of timed events (replica wake-ups, pods becoming ready, drains
ending, node failures, scrapes, report samples, timeout sweeps and the policy's decision ticks).

The cluster, as Kubernetes would run it:

* **Nodes** of each pool hold whole accelerators; a pod needs ``acc_count`` units on one node.
* **Deployments** (one per variant) keep ``desired`` pods alive. New pods are *pending* until the
  scheduler (first fit, oldest pod first) finds room, then *starting* for the model's start-up time,
  then *ready*. Scale-down deletes pending pods first, then starting ones, then the newest ready ones;
  a deleted ready pod stops receiving requests and *drains* its in-flight requests for at most
  ``drain_grace_s`` (the rest are dropped), holding its accelerators until it is gone.
* **Failures** take nodes away: their pods die with their requests, the Deployment recreates them
  elsewhere if there is room.
* **Routing** sends each request to a ready pod of its model (any variant): the one with the fewest
  outstanding requests per batch slot, or round-robin. With no ready pod the request waits at the
  gateway. A client gives up (the request is *dropped*) when it has had no token ``request_timeout_s``
  after it arrived.
* **Metrics** are cumulative counters per variant, scraped every ``scrape_interval_s`` together with
  the gauges (running, waiting, KV-cache usage); policies read windowed rates of the scrapes.

Cost accrues from the moment a pod is bound to a node until its accelerators are released.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

from variant_autoscaler.errors import ConfigError
from variant_autoscaler.sim.cluster import (
    DROP_KILLED,
    DROP_NONE,
    DROP_REJECTED,
    DROP_TIMEOUT,
    Node,
    Pod,
    PodState,
    RunResult,
    SlowedServer,
    columns,
    merge_arrivals,
    scenario_arrivals,
)
from variant_autoscaler.sim.observe import Action, ModelView, Observation, PolicyContext, VariantView
from variant_autoscaler.sim.replica import Completion, ServerFactory, engine_server
from variant_autoscaler.sim.scenario import Scenario
from variant_autoscaler.sim.traffic import Arrivals

if TYPE_CHECKING:
    from variant_autoscaler.sim.policies import Policy

__all__ = [
    "DROP_KILLED",
    "DROP_NONE",
    "DROP_REJECTED",
    "DROP_TIMEOUT",
    "RunResult",
    "Simulation",
    "scenario_arrivals",
    "simulate",
]

# Heap event kinds; the value orders events that share a time stamp.
_WAKE, _READY, _DRAIN_END, _FAIL, _RECOVER, _SWEEP, _SCRAPE, _SAMPLE, _POLICY = range(9)
# After the end, requests already admitted may run this long beyond the client timeout.
_TAIL_S = 3600.0


class Simulation:
    """One run of one policy over one scenario. Build, then :meth:`run` once."""

    def __init__(
        self,
        scenario: Scenario,
        policy: Policy,
        server_factory: ServerFactory,
        arrivals: Mapping[str, Arrivals] | None = None,
    ) -> None:
        self.sc = scenario
        self.policy = policy
        self.factory = server_factory
        self.arrivals = dict(arrivals) if arrivals is not None else scenario_arrivals(scenario)
        missing = [m.model_id for m in scenario.models if m.model_id not in self.arrivals]
        if missing:
            raise ConfigError(f"no arrivals for model(s) {', '.join(missing)}")
        st = scenario.settings
        self.timeout = st.request_timeout_s
        self.grace = st.drain_grace_s
        self.tick = st.replica_tick_s
        self.round_robin = st.routing == "round-robin"
        self.now = 0.0
        self._seq = 0
        self._heap: list[tuple[float, int, int, object]] = []
        self._events = 0

        # Static tables.
        self.models = [m.model_id for m in scenario.models]
        self.model_index = {m: i for i, m in enumerate(self.models)}
        self.var_names = [v.name for v in scenario.variants]
        self.var_model = [self.model_index[v.model] for v in scenario.variants]
        self.var_acc = [v.accelerator for v in scenario.variants]
        mspec = scenario.model_by_id
        self.var_profile = [mspec[v.model].profile(v.accelerator) for v in scenario.variants]
        unit = {a.name: a.unit_cost for a in scenario.accelerators}
        self.var_unit_cost = [
            unit[v.accelerator] * p.acc_count
            for v, p in zip(scenario.variants, self.var_profile, strict=True)
        ]
        self.startup = [
            0.0 if policy.ignores_startup else mspec[v.model].startup_s for v in scenario.variants
        ]
        self.model_vars: list[list[int]] = [[] for _ in self.models]
        for i, m in enumerate(self.var_model):
            self.model_vars[m].append(i)

        # Requests.
        t, mi, ins, outs = merge_arrivals(scenario, self.arrivals)
        self.arr_t = t
        self.arr_t_list: list[float] = t.tolist()
        self.arr_m: list[int] = mi.tolist()
        self.arr_in: list[int] = ins.tolist()
        self.arr_out: list[int] = outs.tolist()
        n = len(t)
        self.req_var = [-1] * n
        self.req_first = [math.nan] * n
        self.req_finish = [math.nan] * n
        self.req_drop = [DROP_NONE] * n
        self.req_pod: list[Pod | None] = [None] * n

        # Cluster.
        self.nodes: list[Node] = []
        for pool in scenario.pools:
            for k in range(pool.count):
                self.nodes.append(Node(pool.name, k, pool.accelerator, pool.gpus))
        self.pods: list[Pod] = []
        self.active: dict[Pod, None] = {}  # pods bound to a node (starting, ready, draining)
        self.var_pods: list[list[Pod]] = [[] for _ in self.var_names]  # alive: not draining, not gone
        self.ready_by_model: list[list[Pod]] = [[] for _ in self.models]
        self.rr_next = [0] * len(self.models)
        self.pending: list[Pod] = []
        self.desired = [v.initial_replicas for v in scenario.variants]
        self.var_batch = [p.max_batch_size for p in self.var_profile]
        self.gateway: list[deque[int]] = [deque() for _ in self.models]

        # Accounting.
        self.gpu_s = [0.0] * len(self.var_names)
        self.cost_acc = [0.0] * len(self.var_names)
        self.ups = [0] * len(self.var_names)
        self.downs = [0] * len(self.var_names)
        self.decisions = 0
        # Counters per variant: arrived, success, prompt tokens, generation tokens, ttft sum,
        # decode-time sum, decode-token count.
        self.counters = [[0.0] * 7 for _ in self.var_names]
        self.scrape_t: list[float] = []
        self.scrape_c: list[list[list[float]]] = []
        self.scrape_g: list[list[tuple[float, float, float]]] = []
        self.series_t: list[float] = []
        self.series_desired: list[list[int]] = []
        self.series_ready: list[list[int]] = []
        self.series_alloc: list[list[int]] = []
        self.series_cost: list[float] = []
        self.series_gateway: list[list[int]] = []
        self._seed_counter = 0
        # Stepping: the paused event loop, requests arrived so far, the nodes each slowdown degraded.
        self._loop: Iterator[bool] | None = None
        self.arrived = 0
        self._cpu0 = self._wall0 = 0.0
        self._slowed: dict[int, list[Node]] = {}

    # ------------------------------------------------------------------------------------ plumbing
    def _push(self, when: float, kind: int, obj: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when, kind, self._seq, obj))

    def _schedule_wake(self, pod: Pod) -> None:
        """Wake a busy pod at its engine's next event, but not sooner than one tick from now."""
        server = pod.server
        assert server is not None
        when = server.next_event_time()
        if when == math.inf:
            pod.wake = math.inf  # any entry in the heap is now stale
            return
        at = max(when, self.now + self.tick)
        if self.now < pod.wake <= at:
            return  # an earlier wake-up is already due
        pod.wake = at
        self._push(at, _WAKE, pod)

    # ----------------------------------------------------------------------------------- requests
    def _complete(self, pod: Pod, done: list[Completion]) -> None:
        c = self.counters[pod.var]
        for rid, first, finish in done:
            self.req_first[rid] = first
            self.req_finish[rid] = finish
            self.req_pod[rid] = None
            out = self.arr_out[rid]
            c[1] += 1.0
            c[2] += self.arr_in[rid]
            c[3] += out
            c[4] += first - self.arr_t_list[rid]
            if out > 1:
                c[5] += finish - first
                c[6] += out - 1
        pod.outstanding -= len(done)
        if pod.state == PodState.DRAINING and pod.outstanding == 0:
            self._terminate(pod)

    def _route(self, m: int) -> Pod | None:
        pods = self.ready_by_model[m]
        if not pods:
            return None
        if self.round_robin:
            k = self.rr_next[m] % len(pods)
            self.rr_next[m] = k + 1
            return pods[k]
        best = pods[0]
        best_score = best.outstanding * best.inv_batch
        for pod in pods:
            score = pod.outstanding * pod.inv_batch
            if score < best_score:
                best, best_score = pod, score
        return best

    def _dispatch(self, rid: int, pod: Pod) -> None:
        server = pod.server
        assert server is not None
        done = server.advance(self.now)
        if done:
            self._complete(pod, done)
        self.req_var[rid] = pod.var
        self.counters[pod.var][0] += 1.0
        if not server.submit(rid, self.now, self.arr_in[rid], self.arr_out[rid]):
            self.req_drop[rid] = DROP_REJECTED
            return
        pod.outstanding += 1
        self.req_pod[rid] = pod
        self._schedule_wake(pod)

    def _on_arrival(self, rid: int) -> None:
        m = self.arr_m[rid]
        pod = self._route(m)
        if pod is None:
            self.gateway[m].append(rid)
        else:
            self._dispatch(rid, pod)

    def _flush_gateway(self, m: int) -> None:
        queue = self.gateway[m]
        cutoff = self.now - self.timeout
        while queue:
            rid = queue[0]
            if self.arr_t_list[rid] <= cutoff:
                queue.popleft()
                self.req_drop[rid] = DROP_TIMEOUT
                continue
            pod = self._route(m)
            if pod is None:
                return
            queue.popleft()
            self._dispatch(rid, pod)

    def _drop_all(self, pod: Pod, code: int) -> None:
        if pod.server is None:
            return
        for rid in pod.server.in_flight():
            if math.isnan(self.req_finish[rid]):
                self.req_drop[rid] = code
                self.req_first[rid] = math.nan
                self.req_pod[rid] = None
        pod.outstanding = 0

    # ---------------------------------------------------------------------------------------- pods
    def _new_pod(self, var: int) -> Pod:
        pod = Pod(len(self.pods), var, self.now, self.var_batch[var])
        self.pods.append(pod)
        self.var_pods[var].append(pod)
        self.pending.append(pod)
        return pod

    def _place(self, pod: Pod, warm: bool = False) -> bool:
        need = self.var_profile[pod.var].acc_count
        acc = self.var_acc[pod.var]
        for node in self.nodes:
            if node.healthy and node.acc == acc and node.free >= need:
                node.free -= need
                node.pods[pod] = None
                self.active[pod] = None
                pod.node = node
                pod.placed = self.now
                pod.state = PodState.STARTING
                delay = 0.0 if warm else self.startup[pod.var]
                if delay <= 0:
                    self._make_ready(pod)
                else:
                    self._push(self.now + delay, _READY, pod)
                return True
        return False

    def _schedule_pending(self) -> None:
        if not self.pending:
            return
        still: list[Pod] = []
        for pod in self.pending:
            if pod.state == PodState.PENDING and not self._place(pod):
                still.append(pod)
        self.pending = still

    def _make_ready(self, pod: Pod) -> None:
        if pod.state != PodState.STARTING:
            return
        self._seed_counter += 1
        pod.server = self.factory(
            self.var_profile[pod.var], pod.max_batch, self.sc.seed * 1_000_003 + self._seed_counter
        )
        if pod.node is not None and pod.node.slow != 1.0:
            pod.server = SlowedServer(pod.server, self.now, pod.node.slow)
        pod.state = PodState.READY
        pod.ready_at = self.now
        m = self.var_model[pod.var]
        self.ready_by_model[m].append(pod)
        self._flush_gateway(m)

    def _release(self, pod: Pod) -> None:
        node = pod.node
        if node is not None:
            node.free += self.var_profile[pod.var].acc_count
            node.pods.pop(pod, None)
            self.active.pop(pod, None)
            pod.node = None
            held = max(0.0, min(self.now, self.sc.duration_s) - pod.placed)  # cost stops at the end
            units = self.var_profile[pod.var].acc_count
            self.gpu_s[pod.var] += held * units
            self.cost_acc[pod.var] += held * self.var_unit_cost[pod.var] / 3600.0

    def _unready(self, pod: Pod) -> None:
        if pod.state == PodState.READY:
            self.ready_by_model[self.var_model[pod.var]].remove(pod)

    def _terminate(self, pod: Pod) -> None:
        if pod.state == PodState.GONE:
            return
        self._unready(pod)
        if pod in self.var_pods[pod.var]:
            self.var_pods[pod.var].remove(pod)
        pod.state = PodState.GONE
        pod.wake = math.inf
        self._release(pod)
        pod.server = None
        self._schedule_pending()

    def _delete(self, pod: Pod) -> None:
        """Delete a pod as the ReplicaSet would: at once unless it is serving, then drain."""
        self.var_pods[pod.var].remove(pod)
        if pod.state == PodState.READY and pod.outstanding > 0 and self.grace > 0:
            assert pod.server is not None
            done = pod.server.advance(self.now)
            self._unready(pod)
            pod.state = PodState.DRAINING
            if done:
                self._complete(pod, done)
            if pod.state == PodState.DRAINING:
                self._push(self.now + self.grace, _DRAIN_END, pod)
            return
        if pod.state == PodState.READY:
            assert pod.server is not None
            done = pod.server.advance(self.now)
            if done:
                self._complete(pod, done)
            self._drop_all(pod, DROP_KILLED)
        self._terminate(pod)

    def _reconcile(self, var: int) -> None:
        alive = self.var_pods[var]
        want = self.desired[var]
        if len(alive) < want:
            for _ in range(want - len(alive)):
                self._new_pod(var)
            self._schedule_pending()
        elif len(alive) > want:
            order = {PodState.PENDING: 0, PodState.STARTING: 1, PodState.READY: 2}
            victims = sorted(alive, key=lambda p: (order[p.state], -p.created, -p.pid))
            for pod in victims[: len(alive) - want]:
                if pod.state == PodState.PENDING:
                    pod.state = PodState.GONE
                    alive.remove(pod)
                else:
                    self._delete(pod)
            self.pending = [p for p in self.pending if p.state == PodState.PENDING]

    # -------------------------------------------------------------------------------------- events
    def _on_wake(self, pod: Pod, when: float) -> None:
        if pod.wake != when or pod.server is None:
            return  # superseded
        pod.wake = math.inf
        done = pod.server.advance(self.now)
        if done:
            self._complete(pod, done)
        if pod.server is not None:
            self._schedule_wake(pod)

    def _on_drain_end(self, pod: Pod) -> None:
        if pod.state != PodState.DRAINING:
            return
        assert pod.server is not None
        done = pod.server.advance(self.now)
        if done:
            self._complete(pod, done)
        if pod.state == PodState.DRAINING:
            self._drop_all(pod, DROP_KILLED)
            self._terminate(pod)

    def _on_failure(self, index: int, recover: bool) -> None:
        fail = self.sc.failures[index]
        nodes = [n for n in self.nodes if n.pool == fail.pool]
        if fail.slowdown is not None:
            self._on_slowdown(index, fail.slowdown, nodes, recover)
            return
        if recover:
            revived = [n for n in nodes if not n.healthy][: fail.count]
            for node in revived:
                node.healthy = True
                node.free = node.gpus
            self._schedule_pending()
            return
        victims = [n for n in nodes if n.healthy][: fail.count]
        touched: set[int] = set()
        for node in victims:
            node.healthy = False
            for pod in list(node.pods):
                if pod.server is not None:
                    done = pod.server.advance(self.now)
                    if done:
                        self._complete(pod, done)
                self._drop_all(pod, DROP_KILLED)
                touched.add(pod.var)
                self._terminate(pod)
            node.free = 0
        for var in sorted(touched):
            self._reconcile(var)

    def _on_slowdown(self, index: int, factor: float, nodes: list[Node], recover: bool) -> None:
        """Nodes degraded (or back to normal): their replicas run ``factor`` times slower meanwhile."""
        if recover:
            targets = self._slowed.pop(index, [])
            factor = 1.0
        else:
            targets = [n for n in nodes if n.healthy and n.slow == 1.0][: self.sc.failures[index].count]
            self._slowed[index] = targets
        for node in targets:
            node.slow = factor
            for pod in list(node.pods):
                if pod.server is None:
                    continue
                done = pod.server.advance(self.now)
                if done:
                    self._complete(pod, done)
                server = pod.server
                if pod.state == PodState.GONE or server is None:
                    continue  # a draining pod that has just finished its last request
                if isinstance(server, SlowedServer):
                    server.set_factor(self.now, factor)
                else:
                    pod.server = SlowedServer(server, self.now, factor)
                self._schedule_wake(pod)

    def _on_sweep(self) -> None:
        cutoff = self.now - self.timeout
        for queue in self.gateway:
            while queue and self.arr_t_list[queue[0]] <= cutoff:
                rid = queue.popleft()
                self.req_drop[rid] = DROP_TIMEOUT
        for pod in list(self.active):
            server = pod.server
            if server is None or server.num_waiting == 0:
                continue
            done = server.advance(self.now)
            if done:
                self._complete(pod, done)
                if pod.state == PodState.GONE:
                    continue
            expired = server.expire(self.now, self.arr_t_list, self.timeout)
            if expired:
                for rid in expired:
                    self.req_drop[rid] = DROP_TIMEOUT
                    self.req_pod[rid] = None
                pod.outstanding -= len(expired)
                if pod.state == PodState.DRAINING and pod.outstanding == 0:
                    self._terminate(pod)
                    continue
                self._schedule_wake(pod)

    def _on_scrape(self) -> None:
        gauges: list[tuple[float, float, float]] = []
        for pods in self.var_pods:
            running = waiting = kv = 0.0
            ready = 0
            for pod in pods:
                server = pod.server
                if server is None:
                    continue
                done = server.advance(self.now)
                if done:
                    self._complete(pod, done)
                    self._schedule_wake(pod)
                running += server.num_running
                waiting += server.num_waiting
                kv += server.kv_usage
                ready += 1
            gauges.append((running, waiting, kv / ready if ready else 0.0))
        self.scrape_t.append(self.now)
        self.scrape_c.append([list(c) for c in self.counters])
        self.scrape_g.append(gauges)

    def _on_sample(self) -> None:
        self.series_t.append(self.now)
        self.series_desired.append(list(self.desired))
        ready = [0] * len(self.var_names)
        alloc = [0] * len(self.var_names)
        cost_now = sum(self.cost_acc)
        for pod in self.active:
            if pod.node is not None:
                alloc[pod.var] += 1
                cost_now += (self.now - pod.placed) * self.var_unit_cost[pod.var] / 3600.0
            if pod.state == PodState.READY:
                ready[pod.var] += 1
        self.series_ready.append(ready)
        self.series_alloc.append(alloc)
        self.series_cost.append(cost_now)
        self.series_gateway.append([len(q) for q in self.gateway])

    def _first_scrape(self, window: float) -> int:
        """The index of the first scrape within ``window`` s of the last one (the last when none)."""
        i1 = len(self.scrape_t) - 1
        i0 = i1
        if i1 >= 0:
            t1 = self.scrape_t[i1]
            while i0 > 0 and self.scrape_t[i0 - 1] >= t1 - window - 1e-9:
                i0 -= 1
        return i0

    def observe(self) -> Observation:
        """What a real autoscaler would see now (from the last scrape)."""
        window = self.sc.settings.rate_window_s
        views: dict[str, VariantView] = {}
        n = len(self.scrape_t)
        i1 = n - 1
        i0 = self._first_scrape(window)
        # The burst guard's short window: half the rate window, as long as it spans two scrapes.
        short = window / 2.0
        j0 = self._first_scrape(short) if short >= 2.0 * self.sc.settings.scrape_interval_s else i1
        for var, name in enumerate(self.var_names):
            pods = self.var_pods[var]
            ready = sum(1 for p in pods if p.state == PodState.READY)
            starting = sum(1 for p in pods if p.state == PodState.STARTING)
            ready_at = tuple(p.placed + self.startup[var] for p in pods if p.state == PodState.STARTING)
            pending = sum(1 for p in pods if p.state == PodState.PENDING)
            ok = n >= 2 and i0 < i1
            success = arrival = 0.0
            avg_in = avg_out = ttft = itl = None
            running = waiting = kv = growth = 0.0
            if n:
                running, waiting, kv = self.scrape_g[i1][var]
                growth = waiting - self.scrape_g[i0][var][1]
            if ok:
                c1 = self.scrape_c[i1][var]
                c0 = self.scrape_c[i0][var]
                dt = self.scrape_t[i1] - self.scrape_t[i0]
                d = [a - b for a, b in zip(c1, c0, strict=True)]
                arrival = d[0] / dt * 60.0
                success = d[1] / dt * 60.0
                if d[1] > 0:
                    avg_in = d[2] / d[1]
                    avg_out = d[3] / d[1]
                    ttft = d[4] / d[1] * 1000.0
                if d[6] > 0:
                    itl = d[5] / d[6] * 1000.0
            short_success = short_growth = None
            if ok and j0 < i1:
                short_success = (
                    (self.scrape_c[i1][var][1] - self.scrape_c[j0][var][1])
                    / (self.scrape_t[i1] - self.scrape_t[j0])
                    * 60.0
                )
                short_growth = waiting - self.scrape_g[j0][var][1]
            views[name] = VariantView(
                name=name,
                model=self.models[self.var_model[var]],
                accelerator=self.var_acc[var],
                desired=self.desired[var],
                ready=ready,
                starting=starting,
                pending=pending,
                max_batch=self.var_batch[var],
                success_rpm=success,
                arrival_rpm=arrival,
                avg_input_tokens=avg_in,
                avg_output_tokens=avg_out,
                avg_ttft_ms=ttft,
                avg_itl_ms=itl,
                waiting=waiting,
                waiting_growth=growth,
                running=running,
                kv_usage=kv,
                metrics_ok=ok,
                starting_ready_at=ready_at,
                success_rpm_short=short_success,
                waiting_growth_short=short_growth,
            )
        capacity: dict[str, int] = {a.name: 0 for a in self.sc.accelerators}
        allocated: dict[str, int] = {a.name: 0 for a in self.sc.accelerators}
        for node in self.nodes:
            if node.healthy:
                capacity[node.acc] += node.gpus
                allocated[node.acc] += node.gpus - node.free
        return Observation(
            now=self.now,
            variants=views,
            capacity=capacity,
            allocated=allocated,
            gateway_waiting={m: len(q) for m, q in zip(self.models, self.gateway, strict=True)},
            models={m: ModelView.of(m, self.arrivals[m], self.now, self.scrape_t) for m in self.models},
        )

    def apply(self, actions: Mapping[str, Action]) -> None:
        for name, action in sorted(actions.items()):
            try:
                var = self.var_names.index(name)
            except ValueError:
                raise ConfigError(f"policy {self.policy.name} acted on unknown variant {name!r}") from None
            spec = self.sc.variants[var]
            want = max(0, action.replicas)
            if spec.max_replicas is not None:
                want = min(want, spec.max_replicas)
            if action.max_batch is not None and action.max_batch >= 1:
                self.var_batch[var] = min(action.max_batch, self.var_profile[var].max_batch_size)
            if want > self.desired[var]:
                self.ups[var] += 1
            elif want < self.desired[var]:
                self.downs[var] += 1
            if want != self.desired[var]:
                self.desired[var] = want
                self._reconcile(var)

    # ----------------------------------------------------------------------------------------- run
    def run(self) -> RunResult:
        """Run the whole scenario, the policy deciding at each of its decision times."""
        self.begin()
        while self.next_decision():
            self.apply(self.policy.decide(self.observe()))
        return self.finish()

    def begin(self) -> None:
        """Set the cluster up at time 0 (the policy's initial replicas, warm) and schedule the events.

        Then :meth:`next_decision` runs the cluster to each decision time in turn, :meth:`observe`
        and :meth:`apply` make the decision (the policy's, or anyone's: a learning environment steps
        the simulation this way), and :meth:`finish` collects the result. :meth:`run` does all of it
        with ``policy.decide``.
        """
        if self._loop is not None:
            raise RuntimeError("a Simulation runs once")
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()
        sc = self.sc
        st = sc.settings
        end = sc.duration_s
        initial = self.policy.start(PolicyContext(scenario=sc, arrivals=self.arrivals))
        if initial:
            for name, replicas in initial.items():
                if name not in self.var_names:
                    raise ConfigError(f"policy {self.policy.name} set unknown variant {name!r}")
                self.desired[self.var_names.index(name)] = max(0, replicas)
        for var in range(len(self.var_names)):
            for _ in range(self.desired[var]):
                self._new_pod(var)
        # Warm start: whatever fits is ready at t = 0.
        still: list[Pod] = []
        for pod in self.pending:
            if not self._place(pod, warm=True):
                still.append(pod)
        self.pending = still

        def every(period: float, kind: int, first: float) -> None:
            k = first
            while k < end:
                self._push(k, kind, None)
                k += period

        every(st.scrape_interval_s, _SCRAPE, 0.0)
        every(st.sample_interval_s, _SAMPLE, 0.0)
        sweep = min(5.0, self.timeout / 4.0)
        k = 0.0
        while k < end + self.timeout + sweep:  # sweeps go on while the last requests finish
            self._push(k, _SWEEP, None)
            k += sweep
        every(self.policy.interval_s, _POLICY, self.policy.interval_s)
        for i, fail in enumerate(sc.failures):
            if fail.at_s < end:
                self._push(fail.at_s, _FAIL, i)
            if fail.recover_s is not None and fail.recover_s < end:
                self._push(fail.recover_s, _RECOVER, i)
        self._loop = self._events_until_done()

    def next_decision(self) -> bool:
        """Run the cluster to its next decision time: True there (observe, then apply), False once the
        run is over (every request has finished or given up; then :meth:`finish`)."""
        if self._loop is None:
            raise RuntimeError("begin() first")
        return next(self._loop, False)

    def _events_until_done(self) -> Iterator[bool]:
        """The event loop, pausing (yielding) at each decision time."""
        end = self.sc.duration_s
        hard_stop = end + self.timeout + _TAIL_S
        heap = self._heap
        arr_t = self.arr_t_list
        n_arr = len(arr_t)
        ai = 0
        events = 0
        pop = heapq.heappop
        while True:
            next_arrival = arr_t[ai] if ai < n_arr else math.inf
            if heap and heap[0][0] <= next_arrival:
                when, kind, _, obj = pop(heap)
                if when > hard_stop:
                    break
                if when >= end and kind not in (_WAKE, _DRAIN_END, _SWEEP):
                    continue
                self.now = when
                events += 1
                if kind == _WAKE:
                    assert isinstance(obj, Pod)
                    self._on_wake(obj, when)
                elif kind == _READY:
                    assert isinstance(obj, Pod)
                    self._make_ready(obj)
                elif kind == _DRAIN_END:
                    assert isinstance(obj, Pod)
                    self._on_drain_end(obj)
                elif kind == _SCRAPE:
                    self._on_scrape()
                elif kind == _SAMPLE:
                    self._on_sample()
                elif kind == _SWEEP:
                    self._on_sweep()
                elif kind == _POLICY:
                    self.decisions += 1
                    self.arrived = ai
                    self._events = events
                    yield True
                elif kind in (_FAIL, _RECOVER):
                    assert isinstance(obj, int)
                    self._on_failure(obj, kind == _RECOVER)
                if when >= end and not self._busy():
                    break
            elif ai < n_arr:
                self.now = next_arrival
                events += 1
                self._on_arrival(ai)
                ai += 1
            else:
                break
        self.arrived = ai
        self._events = events

    def _busy(self) -> bool:
        return any(p.outstanding > 0 for p in self.active if p.server is not None)

    def finish(self) -> RunResult:
        """The result of the run (after :meth:`next_decision` returned False)."""
        end = self.sc.duration_s
        self.now = max(self.now, end)
        # Requests never served: still at the gateway, or stuck on a pod past the end.
        for queue in self.gateway:
            for rid in queue:
                self.req_drop[rid] = DROP_TIMEOUT
            queue.clear()
        for rid, pod in enumerate(self.req_pod):
            if pod is not None and math.isnan(self.req_finish[rid]):
                self.req_drop[rid] = DROP_TIMEOUT
        # Cost stops at the end of the scenario.
        for pod in self.active:
            if pod.node is not None:
                held = end - pod.placed
                if held > 0:
                    units = self.var_profile[pod.var].acc_count
                    self.gpu_s[pod.var] += held * units
                    self.cost_acc[pod.var] += held * self.var_unit_cost[pod.var] / 3600.0
                pod.node = None
        first = np.asarray(self.req_first, dtype=np.float64)
        finish = np.asarray(self.req_finish, dtype=np.float64)
        drop = np.asarray(self.req_drop, dtype=np.int64)
        outs = np.asarray(self.arr_out, dtype=np.int64)
        # A client that got no token within its timeout has gone, whatever the server did later.
        late = (drop == DROP_NONE) & ((first - self.arr_t) > self.timeout)
        drop[late] = DROP_TIMEOUT
        served = drop == DROP_NONE
        ttft = np.where(served, first - self.arr_t, np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            itl = np.where(
                served, np.where(outs > 1, (finish - first) / np.maximum(outs - 1, 1), 0.0), np.nan
            )
        series: dict[str, object] = {
            "t": self.series_t,
            "desired": columns(self.series_desired, self.var_names),
            "ready": columns(self.series_ready, self.var_names),
            "allocated": columns(self.series_alloc, self.var_names),
            "cost": self.series_cost,
            "gateway_waiting": columns(self.series_gateway, self.models),
        }
        return RunResult(
            policy=self.policy.name,
            scenario=self.sc,
            variants=tuple(self.var_names),
            models=tuple(self.models),
            arrival_s=self.arr_t,
            model_idx=np.asarray(self.arr_m, dtype=np.int64),
            variant_idx=np.asarray(self.req_var, dtype=np.int64),
            input_tokens=np.asarray(self.arr_in, dtype=np.int64),
            output_tokens=outs,
            ttft_s=ttft,
            itl_s=itl,
            dropped=drop,
            gpu_seconds=dict(zip(self.var_names, self.gpu_s, strict=True)),
            cost=dict(zip(self.var_names, self.cost_acc, strict=True)),
            scale_ups=dict(zip(self.var_names, self.ups, strict=True)),
            scale_downs=dict(zip(self.var_names, self.downs, strict=True)),
            series=series,
            decisions=self.decisions,
            events=self._events,
            cpu_s=time.process_time() - self._cpu0,
            wall_s=time.perf_counter() - self._wall0,
        )


def simulate(
    scenario: Scenario,
    policy: Policy,
    server_factory: ServerFactory | None = None,
    arrivals: Mapping[str, Arrivals] | None = None,
) -> RunResult:
    """Run ``policy`` over ``scenario``; replicas are emulator engines unless a factory is given."""
    factory = engine_server if server_factory is None else server_factory
    return Simulation(scenario, policy, factory, arrivals).run()
