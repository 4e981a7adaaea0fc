"""Kubernetes name rules, as patterns for the CRD and the pydantic models and as pure checks.

A name that comes from a user's object (a VA's ``scaleTargetRef``, an annotated HPA's or ScaledObject's
target) must never be able to become a path: the rules below admit no ``/`` and no empty ``.``-separated
part, so ``../../victim-ns/statefulsets/victim`` is refused before any request is built.
"""

from __future__ import annotations

import re

__all__ = [
    "API_VERSION_PATTERN",
    "DNS1123_LABEL_PATTERN",
    "DNS1123_SUBDOMAIN_PATTERN",
    "KIND_PATTERN",
    "is_api_version",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "is_kind",
]

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
#: An object name of every kind with a scale subresource (built in or custom): at most 253 characters.
DNS1123_SUBDOMAIN_PATTERN = rf"^{_LABEL}(\.{_LABEL})*$"
#: A namespace name: at most 63 characters.
DNS1123_LABEL_PATTERN = rf"^{_LABEL}$"
#: ``group/version`` or ``version`` (the core group); versions are DNS-1035 labels (``v1``, ``v1beta2``).
API_VERSION_PATTERN = rf"^({_LABEL}(\.{_LABEL})*/)?[a-z]([-a-z0-9]*[a-z0-9])?$"
#: A kind: CamelCase letters and digits.
KIND_PATTERN = r"^[A-Za-z][A-Za-z0-9]*$"

_SUBDOMAIN = re.compile(DNS1123_SUBDOMAIN_PATTERN)
_DNS_LABEL = re.compile(DNS1123_LABEL_PATTERN)
_API_VERSION = re.compile(API_VERSION_PATTERN)
_KIND = re.compile(KIND_PATTERN)


def is_dns1123_subdomain(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 253 and _SUBDOMAIN.fullmatch(value) is not None


def is_dns1123_label(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 63 and _DNS_LABEL.fullmatch(value) is not None


def is_api_version(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 317 and _API_VERSION.fullmatch(value) is not None


def is_kind(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 63 and _KIND.fullmatch(value) is not None
