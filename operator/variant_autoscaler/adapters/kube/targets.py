"""Scale targets as the engine sees them (pure parsing of API objects): a Deployment or any kind with a
``/scale`` subresource, its serving container's ``--max-num-seqs``, the HPAs that own targets, and label
selectors."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from variant_autoscaler.adapters.inventory import pod_gpu_requests


@dataclass(frozen=True, slots=True)
class ScaleTarget:
    """The parts of a scale target (a Deployment, or any kind with ``/scale``) the cycle uses."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str | None
    spec_replicas: int
    status_replicas: int
    ready_replicas: int | None
    selector: Mapping[str, Any] = field(default_factory=dict)
    # The serving container's --max-num-seqs, its index and its args (Deployments only).
    max_num_seqs: int | None = None
    container_index: int | None = None
    container_args: tuple[str, ...] | None = None
    args_field: str = "args"
    # "Kind/name" of a controller that owns the target (it would fight a direct patch), if any.
    controller: str | None = None
    # The version read: a scale patch is made on this version only (no overwriting a later change).
    resource_version: str | None = None
    # The GPUs one replica requests (its pod template's, all vendors; None: no template or no GPU).
    gpus_per_replica: int | None = None


MAX_NUM_SEQS_FLAG = "--max-num-seqs"


def find_max_num_seqs(args: Sequence[str]) -> int | None:
    """The value of ``--max-num-seqs`` in a container's args (``--flag N`` or ``--flag=N``)."""
    for i, arg in enumerate(args):
        value: str | None = None
        if arg == MAX_NUM_SEQS_FLAG and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(MAX_NUM_SEQS_FLAG + "="):
            value = arg.split("=", 1)[1]
        if value is not None:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def with_max_num_seqs(args: Sequence[str], batch: int) -> list[str]:
    """``args`` with ``--max-num-seqs`` set to ``batch`` (replaced in place, or appended)."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == MAX_NUM_SEQS_FLAG and i + 1 < len(out):
            out[i + 1] = str(batch)
            return out
        if arg.startswith(MAX_NUM_SEQS_FLAG + "="):
            out[i] = f"{MAX_NUM_SEQS_FLAG}={batch}"
            return out
    return [*out, MAX_NUM_SEQS_FLAG, str(batch)]


def _controller_of(meta: Mapping[str, Any]) -> str | None:
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            return f"{ref.get('kind')}/{ref.get('name')}"
    return None


def template_gpus(obj: Mapping[str, Any]) -> int | None:
    """The GPUs one replica of ``obj`` requests, from its ``spec.template`` (None: none stated)."""
    template = (obj.get("spec") or {}).get("template")
    if not isinstance(template, Mapping):
        return None
    return sum(pod_gpu_requests(template).values()) or None


def target_from_deployment(body: Mapping[str, Any]) -> ScaleTarget:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    max_num_seqs = index = None
    args: tuple[str, ...] | None = None
    args_field = "args"
    for i, container in enumerate(containers):
        for fld in ("args", "command"):
            found = find_max_num_seqs(container.get(fld) or ())
            if found is not None:
                max_num_seqs, index, args, args_field = found, i, tuple(container.get(fld) or ()), fld
                break
        if index is not None:
            break
    if index is None and containers:
        index, args = 0, tuple(containers[0].get("args") or ())
    replicas = spec.get("replicas")
    return ScaleTarget(
        api_version=str(body.get("apiVersion") or "apps/v1"),
        kind=str(body.get("kind") or "Deployment"),
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=meta.get("uid"),
        spec_replicas=int(replicas) if replicas is not None else 1,
        status_replicas=int(status.get("replicas") or 0),
        ready_replicas=int(status.get("readyReplicas") or 0),
        selector=dict(spec.get("selector") or {}),
        max_num_seqs=max_num_seqs,
        container_index=index,
        container_args=args,
        args_field=args_field,
        controller=_controller_of(meta),
        resource_version=meta.get("resourceVersion"),
        gpus_per_replica=template_gpus(body),
    )


def target_from_scale(
    api_version: str, kind: str, obj: Mapping[str, Any], scale: Mapping[str, Any]
) -> ScaleTarget:
    """A target of any kind, from the object (for its uid and owner) and its ``/scale`` subresource."""
    meta = obj.get("metadata") or {}
    spec = scale.get("spec") or {}
    status = scale.get("status") or {}
    obj_status = obj.get("status") or {}
    ready = obj_status.get("readyReplicas")
    # The pods' selector, for the GPU inventory (which GPUs are held by our own pods): the object's
    # spec.selector where it has one (StatefulSet, ReplicaSet), else the /scale subresource's string.
    selector = (obj.get("spec") or {}).get("selector")
    if not isinstance(selector, Mapping):
        selector = parse_selector(str(status.get("selector") or ""))
    return ScaleTarget(
        api_version=api_version,
        kind=kind,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=meta.get("uid"),
        spec_replicas=int(spec.get("replicas") or 0),
        status_replicas=int(status.get("replicas") or 0),
        ready_replicas=int(ready) if ready is not None else None,
        selector=dict(selector),
        controller=_controller_of(meta),
        # /scale carries the object's own resourceVersion.
        resource_version=(scale.get("metadata") or {}).get("resourceVersion") or meta.get("resourceVersion"),
        gpus_per_replica=template_gpus(obj),  # a StatefulSet's or ReplicaSet's; other kinds: unknown
    )


def hpa_targets(hpas: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], str]:
    """(namespace, kind, name) of each HPA's scale target -> the HPA's name."""
    out: dict[tuple[str, str, str], str] = {}
    for hpa in hpas:
        meta = hpa.get("metadata") or {}
        ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        if ref.get("kind") and ref.get("name"):
            out[(str(meta.get("namespace") or ""), str(ref["kind"]), str(ref["name"]))] = str(
                meta.get("name")
            )
    return out


_SET_EXPR = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def parse_selector(text: str) -> dict[str, Any]:
    """A label selector in its string form (``/scale``'s ``status.selector``: ``a=b,c in (d,e),!f``) as a
    LabelSelector; ``{}`` (selects nothing) when empty or not understood."""
    labels: dict[str, str] = {}
    expressions: list[dict[str, Any]] = []
    # Split on the commas outside parentheses.
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    for raw in parts:
        part = raw.strip()
        if not part:
            continue
        match = _SET_EXPR.match(part)
        if match:
            values = [v.strip() for v in match.group(3).split(",") if v.strip()]
            op = "In" if match.group(2) == "in" else "NotIn"
            expressions.append({"key": match.group(1), "operator": op, "values": values})
        elif "!=" in part:
            key, value = (x.strip() for x in part.split("!=", 1))
            expressions.append({"key": key, "operator": "NotIn", "values": [value]})
        elif "=" in part:
            key, value = (x.strip() for x in part.replace("==", "=").split("=", 1))
            labels[key] = value
        elif part.startswith("!"):
            expressions.append({"key": part[1:].strip(), "operator": "DoesNotExist"})
        elif " " not in part:
            expressions.append({"key": part, "operator": "Exists"})
        else:
            return {}  # not a selector we understand: select nothing rather than too much
    out: dict[str, Any] = {}
    if labels:
        out["matchLabels"] = labels
    if expressions:
        out["matchExpressions"] = expressions
    return out


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector (matchLabels and matchExpressions) selects ``labels``; empty selects none."""
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    for expr in expressions:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if op == "In" and (not present or labels[key] not in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True
