"""The Kubernetes API edge, by job: :mod:`.credentials`, :mod:`.transport`, :mod:`.client` (the
reads and writes the cycle needs) and :mod:`.targets` (scale targets as the engine sees them).

Every URL is built from parts checked and percent-quoted by :mod:`variant_autoscaler.adapters.refs`.
"""

from __future__ import annotations

from variant_autoscaler.adapters.kube.client import (
    ForbiddenError,
    InvalidError,
    KubeClient,
    ListResult,
    NotFoundError,
    merge_patch,
    now_rfc3339,
)
from variant_autoscaler.adapters.kube.credentials import (
    Credentials,
    load_credentials,
)
from variant_autoscaler.adapters.kube.targets import (
    MAX_NUM_SEQS_FLAG,
    ScaleTarget,
    find_max_num_seqs,
    hpa_targets,
    parse_selector,
    selector_matches,
    target_from_deployment,
    target_from_scale,
    with_max_num_seqs,
)
from variant_autoscaler.adapters.kube.transport import (
    JSON,
    JSON_PATCH,
    MERGE_PATCH,
    AiohttpTransport,
    CallableTransport,
    HandlerFn,
    HttpTransport,
    TransportFailure,
)

__all__ = [
    "JSON",
    "JSON_PATCH",
    "MAX_NUM_SEQS_FLAG",
    "MERGE_PATCH",
    "AiohttpTransport",
    "CallableTransport",
    "Credentials",
    "ForbiddenError",
    "HandlerFn",
    "HttpTransport",
    "InvalidError",
    "KubeClient",
    "ListResult",
    "NotFoundError",
    "ScaleTarget",
    "TransportFailure",
    "find_max_num_seqs",
    "hpa_targets",
    "load_credentials",
    "merge_patch",
    "now_rfc3339",
    "parse_selector",
    "selector_matches",
    "target_from_deployment",
    "target_from_scale",
    "with_max_num_seqs",
]
