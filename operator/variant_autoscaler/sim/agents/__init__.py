"""Trained agents shipped with the simulator (JSON parameter files of variant_autoscaler.sim.agent)."""
