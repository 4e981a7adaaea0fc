"""The engine: one global cycle, every interval — read the cluster and the metrics, plan every variant
at once, decide per variant, write.

* :mod:`.cycle` — :class:`Engine`: the triggers, the loop, one cycle's reads (ConfigMaps, scale
  targets, HPAs, the fixed PromQL set, the GPU inventory), the plan, and per variant the pure decision
  (:mod:`variant_autoscaler.core.decision`) between its reads and its writes;
* :mod:`.configs` — one cycle's configuration: every WVA generation's ConfigMaps, and the config file;
* :mod:`.annotated` — WVA v0.9's annotated HPAs and ScaledObjects, listed each cycle as variants;
* :mod:`.translate` — from API objects to the planner's and the decision's inputs;
* :mod:`.learning` — profiles learned online: the pod windows, per variant the estimator and the choice
  of profile, the annotated objects' state in one ConfigMap;
* :mod:`.actuate` — the writes: scale and batch patches, status writes, Events, each on the version read
  and only while leading;
* :mod:`.zero` — the fast loop that scales variants from zero on the inference gateway's queue;
* :mod:`.runtime` — the process's resources, started and stopped by the kopf handlers.

The engine knows nothing of kopf (``handlers.py`` wires it).
"""

from variant_autoscaler.engine.cycle import CycleReport, Engine, VariantOutcome
from variant_autoscaler.engine.runtime import Runtime

__all__ = ["CycleReport", "Engine", "Runtime", "VariantOutcome"]
