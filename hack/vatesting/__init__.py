"""Test support for variant-autoscaler's suites and benchmarks (installed by ``make install``).

* :mod:`vatesting.fakes` — in-memory fakes of the Kubernetes API and Prometheus (as httpx transports)
  and a :class:`~vatesting.fakes.Harness` running the engine against them;
* :mod:`vatesting.harness` — the operator as a process against the local cluster's real API server;
* :mod:`vatesting.e2e` — the end-to-end suite's drivers (load, Kubernetes helpers, result tables);
* :mod:`vatesting.sim` — a hand-computable replica and tiny scenarios for the simulator's tests;
* :mod:`vatesting.profiles` — one factory for performance profiles in every shape the code takes;
* :mod:`vatesting.wva` — every WVA generation's manifests (tests/data/wva-generations), the CRD's schema
  as a validator, and hypothesis strategies for VariantAutoscalings with the status written for them.
"""
