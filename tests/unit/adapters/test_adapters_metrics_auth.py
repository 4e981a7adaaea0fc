"""Secure metrics: who gets /metrics (TokenReview then SubjectAccessReview), caching, errors, settings."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from localcluster.pki import CertificateAuthority
from variant_autoscaler.adapters.kube import CallableTransport, Credentials, KubeClient
from variant_autoscaler.adapters.metrics_auth import MetricsSecurity, metrics_security
from variant_autoscaler.errors import ConfigError
from variant_autoscaler.settings import Settings

READER = {"username": "system:serviceaccount:monitoring:prometheus", "uid": "u1", "groups": ["g"]}
STRANGER = {"username": "system:serviceaccount:default:default", "uid": "u2", "groups": []}


class FakeAuthAPI:
    """TokenReviews and SubjectAccessReviews, as the API server answers them."""

    def __init__(self) -> None:
        self.tokens = {"reader-token": READER, "stranger-token": STRANGER}
        self.readers = {READER["username"]}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.down = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.calls.append((request.url.path, body["spec"]))
        if self.down:
            return httpx.Response(503, json={"message": "etcd"})
        if request.url.path.endswith("/tokenreviews"):
            user = self.tokens.get(body["spec"]["token"])
            status = {"authenticated": True, "user": user} if user else {"authenticated": False}
            return httpx.Response(201, json={"status": status})
        spec = body["spec"]
        allowed = spec["user"] in self.readers and spec["nonResourceAttributes"] == {
            "path": "/metrics",
            "verb": "get",
        }
        return httpx.Response(201, json={"status": {"allowed": allowed}})


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    ca = CertificateAuthority(tmp_path_factory.mktemp("ca"), "test-ca")
    pair = ca.issue("metrics", "variant-autoscaler", ip_addresses=("127.0.0.1",), server=True)
    return str(pair.cert), str(pair.key)


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def _security(api: FakeAuthAPI, cert: tuple[str, str], clock: Clock | None = None) -> MetricsSecurity:
    kube = KubeClient(
        Credentials(host="https://k8s.test", verify=True),
        transport=CallableTransport.from_httpx(api),
        retries=0,
    )
    return MetricsSecurity(kube, cert_file=cert[0], key_file=cert[1], clock=clock or Clock())


async def test_who_gets_the_metrics(cert: tuple[str, str]) -> None:
    api = FakeAuthAPI()
    security = _security(api, cert)
    assert (await security.check("Bearer reader-token"))[0] == 200
    assert (await security.check("bearer  reader-token "))[0] == 200  # the scheme is case-insensitive
    assert (await security.check("Bearer stranger-token")) == (
        403,
        f"{STRANGER['username']} may not get /metrics",
    )
    for header in (None, "", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "reader-token"):
        assert (await security.check(header))[0] == 401, header
    assert (await security.check("Bearer forged"))[0] == 401
    # The review asks exactly what controller-runtime's filter asks: get on the non-resource URL.
    (_, sar) = next(c for c in api.calls if c[0].endswith("subjectaccessreviews"))
    assert sar == {
        "user": READER["username"],
        "uid": "u1",
        "groups": ["g"],
        "extra": {},
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


async def test_answers_are_cached_briefly_and_denials_more_briefly(cert: tuple[str, str]) -> None:
    api, clock = FakeAuthAPI(), Clock()
    security = _security(api, cert, clock)
    for _ in range(5):
        assert (await security.check("Bearer reader-token"))[0] == 200
        assert (await security.check("Bearer forged"))[0] == 401
    assert len(api.calls) == 3  # one TokenReview each, one SubjectAccessReview
    clock.now += 11  # denials expire first
    await security.check("Bearer forged")
    await security.check("Bearer reader-token")
    assert len(api.calls) == 4
    api.readers.clear()  # access revoked: noticed once the minute is over
    clock.now += 60
    assert (await security.check("Bearer reader-token"))[0] == 403


async def test_an_api_server_that_does_not_answer_serves_nothing(cert: tuple[str, str]) -> None:
    api = FakeAuthAPI()
    api.down = True
    assert (await _security(api, cert).check("Bearer reader-token"))[0] == 503


def test_settings(cert: tuple[str, str], tmp_path: Path) -> None:
    kube = KubeClient(
        Credentials(host="https://k8s.test", verify=True),
        transport=CallableTransport.from_httpx(FakeAuthAPI()),
    )
    assert metrics_security(Settings(), kube) is None
    with pytest.raises(ConfigError, match="WVA_METRICS_CERT_FILE"):
        metrics_security(Settings(metrics_secure=True), kube)
    with pytest.raises(ConfigError, match="serving certificate"):
        metrics_security(
            Settings(
                metrics_secure=True, metrics_cert_file=str(tmp_path / "no.crt"), metrics_key_file=cert[1]
            ),
            kube,
        )
    secure = metrics_security(
        Settings(metrics_secure=True, metrics_cert_file=cert[0], metrics_key_file=cert[1]), kube
    )
    assert secure is not None and secure.ssl_context.minimum_version.name == "TLSv1_2"


def test_a_renewed_certificate_is_loaded_without_a_restart(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "ca", "test-ca")
    first = ca.issue("first", "variant-autoscaler", ip_addresses=("127.0.0.1",), server=True)
    second = ca.issue("second", "variant-autoscaler", ip_addresses=("127.0.0.1",), server=True)
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    crt.write_bytes(first.cert_pem())
    key.write_bytes(first.key_pem())
    clock = Clock()
    security = _security(FakeAuthAPI(), (str(crt), str(key)), clock)
    loaded = security._loaded
    crt.write_bytes(second.cert_pem())
    key.write_bytes(second.key_pem())

    os.utime(crt, (clock.now + 5, clock.now + 5))
    os.utime(key, (clock.now + 5, clock.now + 5))
    security._reload_if_changed()  # checked at most once a minute
    assert security._loaded == loaded
    clock.now += 61
    security._reload_if_changed()
    assert security._loaded != loaded
    key.write_text("not a key")  # a half-written renewal: the loaded one stays
    os.utime(key, (clock.now + 99, clock.now + 99))
    clock.now += 61
    security._reload_if_changed()
    assert security._loaded is not None
