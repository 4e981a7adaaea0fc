"""A discrete-event simulator of a GPU cluster serving LLMs, to measure autoscaling policies.

Not part of the operator's decision path: nothing in ``core``, ``api``, ``adapters``, ``engine`` or
``handlers`` imports it. It drives the emulator's continuous-batching engine
(:mod:`vllm_emulator.engine`) as every replica, and the operator's own planner and replica policy as
the ``ours`` policy. ``variant-autoscaler simulate`` is its command line; docs/simulator.md its guide.

Main entry points: :func:`~variant_autoscaler.sim.runner.run_policies` (several policies over one
scenario), :func:`~variant_autoscaler.sim.simulator.simulate` (one policy),
:func:`~variant_autoscaler.sim.report.build_report` (the JSON report) and
:func:`~variant_autoscaler.sim.config.load_scenario` (scenario files).
"""
