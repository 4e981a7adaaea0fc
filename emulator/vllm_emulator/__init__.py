"""vllm_emulator: a vLLM stand-in with a continuous-batching latency model and vLLM's metrics."""

__version__ = "0.1.0"
