"""The root error class of the emulator and the load generator.

``vllm_emulator`` is independent of ``variant_autoscaler``, so it has its own root.
"""

from __future__ import annotations


class EmulatorError(Exception):
    """Root of every error raised by vllm_emulator."""


class ConfigError(EmulatorError, ValueError):
    """Invalid configuration: a flag, an environment variable or a distribution spec."""


class EngineError(EmulatorError, ValueError):
    """A call the engine cannot honour (time going backwards, a request that can never fit)."""
