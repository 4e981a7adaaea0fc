"""variant-autoscaler: SLO- and cost-aware autoscaling for LLM inference servers on Kubernetes."""

__version__ = "0.1.0"
#: Sent with every request: the API server names our field manager after it, Prometheus logs it.
USER_AGENT = f"variant-autoscaler/{__version__}"
