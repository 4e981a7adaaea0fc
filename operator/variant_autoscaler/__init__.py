"""variant-autoscaler: SLO- and cost-aware autoscaling for LLM inference servers on Kubernetes."""

__version__ = "0.1.0"
