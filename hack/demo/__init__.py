"""``make demo``: variant-autoscaler on the local cluster, under a load schedule, live (docs/demo.md).

Run with ``.venv/bin/python -m demo`` (installed by ``make install``). Modules:

* :mod:`demo.run` — the demo itself: cluster, operator, variants, schedule, live table, plot, teardown;
* :mod:`demo.traffic` — load through a Deployment's serving pods with per-request SLO accounting (also
  used by tests/e2e);
* :mod:`demo.manifests` — the emulator Deployments, VariantAutoscalings and WVA's HPA (also tests/e2e);
* :mod:`demo.live` — the table refreshed in place; :mod:`demo.plot` — the PNG.
"""
