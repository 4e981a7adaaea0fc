"""What a request to the Kubernetes API may name: a variant acts only in its own namespace.

Every URL the client builds is made of checked parts: namespaces must be DNS-1123 labels, object names
DNS-1123 subdomains, kinds CamelCase identifiers and API versions ``group/version`` or ``v1``, as Kubernetes
itself requires (the rules of :mod:`variant_autoscaler.api.names`, which the CRD and the models use too;
the client does not rely on them having run); anything else is refused before any request
(:class:`InvalidReferenceError`). Every path
segment is percent-quoted as well, so nothing in a name can add a segment, a ``..`` or a query. An object
the API server returns from another namespace than the one asked for is refused
(:class:`NamespaceMismatchError`).
"""

from __future__ import annotations

import urllib.parse

from variant_autoscaler.api.names import is_api_version, is_dns1123_label, is_dns1123_subdomain, is_kind
from variant_autoscaler.errors import KubeError


class InvalidReferenceError(KubeError):
    """A namespace, name, kind or API version that Kubernetes would not allow: refused before any request."""


class NamespaceMismatchError(KubeError):
    """The object the API server returned is not in the namespace asked for (or in none): refused."""


def check_namespace(namespace: str) -> str:
    """``namespace`` if it is a valid namespace name, else :class:`InvalidReferenceError`."""
    if not is_dns1123_label(namespace):
        raise InvalidReferenceError(f"{namespace!r} is not a valid namespace name (a DNS-1123 label)")
    return namespace


def check_name(name: str, what: str = "object") -> str:
    """``name`` if it is a valid object name (a DNS-1123 subdomain), else :class:`InvalidReferenceError`."""
    if not is_dns1123_subdomain(name):
        raise InvalidReferenceError(
            f"{name!r} is not a valid {what} name (lowercase letters, digits, '-' and '.', at most 253)"
        )
    return name


def check_kind(kind: str) -> str:
    if not is_kind(kind):
        raise InvalidReferenceError(
            f"{kind!r} is not a valid kind (letters and digits, starting with a letter)"
        )
    return kind


def check_api_version(api_version: str) -> str:
    """``v1`` or ``group/version``: a DNS-1123 subdomain group and a DNS-1035 label version."""
    if not is_api_version(api_version):
        raise InvalidReferenceError(f"{api_version!r} is not a valid apiVersion (group/version or v1)")
    return api_version


def segment(part: str) -> str:
    """One URL path segment, percent-quoted: no ``/``, ``..`` or ``%`` of it can change the path."""
    return urllib.parse.quote(part, safe="")


def api_prefix(api_version: str) -> str:
    """``/api/v1`` or ``/apis/GROUP/VERSION``, checked and quoted."""
    check_api_version(api_version)
    if "/" not in api_version:
        return f"/api/{segment(api_version)}"
    group, version = api_version.split("/")
    return f"/apis/{segment(group)}/{segment(version)}"


def ns_part(namespace: str) -> str:
    """A namespace as a path segment, checked and quoted."""
    return segment(check_namespace(namespace))


def name_part(name: str, what: str = "object") -> str:
    """An object name as a path segment, checked and quoted."""
    return segment(check_name(name, what))
