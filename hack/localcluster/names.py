"""Names shared by the harness, its pod runner and the tests (labels and annotations on pods)."""

from __future__ import annotations

#: Pods with this label set to "true" are run as local processes by the pod runner.
RUN_LABEL = "localcluster.variant-autoscaler.io/run"
#: The pod runner annotates a serving pod with the local address of its process ("127.0.0.1:<port>").
ENDPOINT_ANNOTATION = "localcluster.variant-autoscaler.io/endpoint"
#: Prefix of the harness's own labels and annotations (not copied into Prometheus target labels).
OWN_PREFIX = "localcluster.variant-autoscaler.io/"
