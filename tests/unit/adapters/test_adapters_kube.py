"""The Kubernetes client: error mapping, retries, paging, discovery, status patches; target parsing."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import httpx
import pytest

from variant_autoscaler import __version__
from variant_autoscaler.adapters.kube import (
    CallableTransport,
    Credentials,
    ForbiddenError,
    InvalidError,
    KubeClient,
    NotFoundError,
    find_max_num_seqs,
    hpa_targets,
    parse_selector,
    selector_matches,
    target_from_deployment,
    target_from_scale,
    with_max_num_seqs,
)
from variant_autoscaler.adapters.refs import (
    InvalidReferenceError,
    NamespaceMismatchError,
    check_api_version,
    check_kind,
    check_name,
    check_namespace,
    segment,
)
from variant_autoscaler.errors import ConflictError, KubeError


class Token:
    api_key: ClassVar[dict[str, str]] = {"BearerToken": "bearer s3cret"}
    refreshed = 0

    def refresh_api_key_hook(self, _cfg: Any) -> None:
        Token.refreshed += 1


def _client(handler: Any) -> KubeClient:
    return KubeClient(
        Credentials(host="https://k8s.test", verify=True, token_source=Token()),
        transport=CallableTransport.from_httpx(handler),
        backoff=0.0,
    )


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (409, ConflictError),
        (404, NotFoundError),
        (403, ForbiddenError),
        (422, InvalidError),
        (400, KubeError),
    ],
)
async def test_http_errors_map_to_our_errors(code: int, error: type[Exception]) -> None:
    client = _client(lambda r: httpx.Response(code, json={"kind": "Status", "message": "nope"}))
    with pytest.raises(error, match="nope"):
        await client.request("GET", "/api/v1/namespaces/x/configmaps/y")


async def test_retries_5xx_and_transport_errors_then_gives_up() -> None:
    calls = []

    def flaky(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            raise httpx.ConnectError("reset", request=request)
        if len(calls) == 2:
            return httpx.Response(503, json={"message": "etcd leader changed"})
        return httpx.Response(200, json={"ok": True})

    assert await _client(flaky).request("GET", "/x") == {"ok": True}
    assert len(calls) == 3
    always = _client(lambda r: httpx.Response(500, json={"message": "boom"}))
    with pytest.raises(KubeError, match="HTTP 500"):
        await always.request("GET", "/x")


async def test_auth_header_and_token_refresh() -> None:
    seen = []
    client = _client(lambda r: seen.append(r.headers["authorization"]) or httpx.Response(200, json={}))
    before = Token.refreshed
    await client.request("GET", "/x")
    assert seen == ["Bearer s3cret"] and Token.refreshed == before + 1


async def test_requests_name_the_operator_as_user_agent() -> None:
    # The API server names the field manager of a write after the User-Agent's product.
    seen = []
    client = _client(lambda r: seen.append(r.headers["user-agent"]) or httpx.Response(200, json={}))
    await client.request("PUT", "/x", body={})
    assert seen == [f"variant-autoscaler/{__version__}"]


async def test_list_follows_continue_tokens() -> None:
    def pages(request: httpx.Request) -> httpx.Response:
        assert request.url.params["limit"] == "500"
        if request.url.params.get("continue") == "t1":
            return httpx.Response(200, json={"items": [{"n": 3}], "metadata": {}})
        return httpx.Response(200, json={"items": [{"n": 1}, {"n": 2}], "metadata": {"continue": "t1"}})

    assert [i["n"] for i in await _client(pages).list_deployments("ns")] == [1, 2, 3]


async def test_status_patch_is_a_merge_patch_with_resource_version() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"metadata": {"resourceVersion": "8"}})

    await _client(handler).patch_va_status("ns", "va", {"observedGeneration": 2}, "7")
    (req,) = seen
    assert req.method == "PATCH"
    assert req.url.path == "/apis/llmd.ai/v1alpha1/namespaces/ns/variantautoscalings/va/status"
    assert req.headers["content-type"] == "application/merge-patch+json"
    assert json.loads(req.content) == {
        "status": {"observedGeneration": 2},
        "metadata": {"resourceVersion": "7"},
    }


async def test_status_write_with_the_current_object_is_a_put_of_the_merged_status() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    current = {
        "apiVersion": "llmd.ai/v1alpha1",
        "kind": "VariantAutoscaling",
        "metadata": {"name": "va", "namespace": "ns", "resourceVersion": "6", "managedFields": [{}]},
        "spec": {"modelID": "m"},
        "status": {"observedGeneration": 1, "actuation": {"applied": True}, "lastMetricsTime": "t"},
    }
    status = {"observedGeneration": 2, "actuation": {"mode": "patch"}, "lastMetricsTime": None}
    await _client(handler).patch_va_status("ns", "va", status, "7", current=current)
    (req,) = seen
    assert req.method == "PUT"
    assert req.url.path == "/apis/llmd.ai/v1alpha1/namespaces/ns/variantautoscalings/va/status"
    sent = json.loads(req.content)
    assert sent["metadata"] == {"name": "va", "namespace": "ns", "resourceVersion": "7"}
    assert sent["spec"] == current["spec"]
    assert sent["status"] == {"observedGeneration": 2, "actuation": {"applied": True, "mode": "patch"}}


async def test_discovery_finds_plural_of_any_scalable_kind() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.url.path == "/apis/leaderworkerset.x-k8s.io/v1":
            return httpx.Response(
                200,
                json={
                    "resources": [
                        {"name": "leaderworkersets", "kind": "LeaderWorkerSet", "namespaced": True},
                        {"name": "leaderworkersets/scale", "kind": "Scale", "namespaced": True},
                    ]
                },
            )
        if request.url.path.endswith("/scale"):
            assert json.loads(request.content) == {"spec": {"replicas": 3}}
            return httpx.Response(200, json={"spec": {"replicas": 3}})
        return httpx.Response(404, json={"message": "no such group"})

    client = _client(handler)
    await client.patch_scale("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "ns", "lws", 3)
    await client.patch_scale("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "ns", "lws", 3)
    assert calls.count("/apis/leaderworkerset.x-k8s.io/v1") == 1  # cached
    assert "/apis/leaderworkerset.x-k8s.io/v1/namespaces/ns/leaderworkersets/lws/scale" in calls
    with pytest.raises(NotFoundError):
        await client.resource_path("example.com/v1", "Widget", "ns")


_APPS = {
    "resources": [
        {"name": "deployments", "kind": "Deployment", "namespaced": True},
        {"name": "statefulsets", "kind": "StatefulSet", "namespaced": True},
        {"name": "statefulsets/scale", "kind": "Scale", "namespaced": True},
    ]
}


def _recording(answer: Any = None) -> tuple[KubeClient, list[httpx.Request]]:
    """A client whose API server serves apps/v1 discovery and answers everything else with ``answer``."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/apis/apps/v1":
            return httpx.Response(200, json=_APPS)
        return httpx.Response(200, json=answer if answer is not None else {})

    return _client(handler), seen


TRAVERSALS = [
    "../../victim-ns/statefulsets/victim",
    "..",
    ".",
    "victim/scale",
    "victim%2F..%2F..",
    "Victim",
    "victim?dryRun=All",
    "victim#x",
    "",
    "a" * 254,
    "-victim",
    "victim\n",
]


@pytest.mark.parametrize("name", TRAVERSALS)
async def test_a_target_name_that_is_not_a_kubernetes_name_is_refused_before_any_request(name: str) -> None:
    client, seen = _recording()
    for call in (
        client.get_object("apps/v1", "StatefulSet", "team-a", name),
        client.get_scale("apps/v1", "StatefulSet", "team-a", name),
        client.patch_scale("apps/v1", "StatefulSet", "team-a", name, 3),
        client.json_patch("apps/v1", "Deployment", "team-a", name, [{"op": "add", "path": "/x", "value": 1}]),
    ):
        with pytest.raises(InvalidReferenceError, match="not a valid"):
            await call
    assert [r.url.path for r in seen if r.url.path != "/apis/apps/v1"] == []


@pytest.mark.parametrize("namespace", ["../victim-ns", "Team-A", "", "a" * 64, "team.a", "team/a"])
async def test_a_namespace_that_is_not_a_namespace_name_is_refused_before_any_request(namespace: str) -> None:
    client, seen = _recording()
    with pytest.raises(InvalidReferenceError):
        await client.get_object("apps/v1", "StatefulSet", namespace, "web")
    if namespace:  # "" lists every namespace (the cluster-wide list)
        with pytest.raises(InvalidReferenceError):
            await client.list_deployments(namespace)
    with pytest.raises(InvalidReferenceError):
        await client.patch_va_status(namespace, "va", {}, None)
    with pytest.raises(InvalidReferenceError):
        await client.create_event(namespace, {})
    with pytest.raises(InvalidReferenceError):
        await client.get_configmap(namespace, "cm")
    assert seen == []


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [
        ("apps/v1/namespaces/victim-ns/statefulsets", "StatefulSet"),
        ("../../api/v1", "StatefulSet"),
        ("apps/v1", "StatefulSet/scale"),
        ("apps/v1", "../Secret"),
        ("", "StatefulSet"),
        ("apps/V1", "StatefulSet"),
    ],
)
async def test_an_invalid_kind_or_api_version_is_refused_before_any_request(
    api_version: str, kind: str
) -> None:
    client, seen = _recording()
    with pytest.raises(InvalidReferenceError):
        await client.get_scale(api_version, kind, "team-a", "web")
    assert seen == []


def test_kubernetes_name_rules() -> None:
    assert check_namespace("team-a") == "team-a" and check_namespace("a" * 63)
    assert check_name("vllm.granite-13b") and check_name("a" * 253)
    assert check_kind("LeaderWorkerSet") and check_api_version("v1")
    assert check_api_version("leaderworkerset.x-k8s.io/v1") and check_api_version("apps/v1beta2")
    for bad in ("a/b/c", "v1/", "/v1", "apps/1"):
        with pytest.raises(InvalidReferenceError):
            check_api_version(bad)
    # Quoting is the second line: nothing in a segment can add a segment or a query.
    assert segment("../a/b?c#d%") == "..%2Fa%2Fb%3Fc%23d%25"


async def test_an_object_from_another_namespace_is_refused() -> None:
    elsewhere = {"metadata": {"name": "web", "namespace": "victim-ns", "resourceVersion": "1"}}
    client, _ = _recording(elsewhere)
    with pytest.raises(NamespaceMismatchError, match="'victim-ns', not 'team-a'"):
        await client.get_object("apps/v1", "StatefulSet", "team-a", "web")
    with pytest.raises(NamespaceMismatchError):
        await client.get_scale("apps/v1", "StatefulSet", "team-a", "web")
    nowhere = {"metadata": {"name": "web", "resourceVersion": "1"}}  # no namespace: cluster-scoped
    client, _ = _recording(nowhere)
    with pytest.raises(NamespaceMismatchError, match="None"):
        await client.get_object("apps/v1", "StatefulSet", "team-a", "web")
    here = {"metadata": {"name": "web", "namespace": "team-a"}}
    client, seen = _recording(here)
    assert await client.get_scale("apps/v1", "StatefulSet", "team-a", "web") == here
    assert seen[-1].url.path == "/apis/apps/v1/namespaces/team-a/statefulsets/web/scale"


async def test_a_cluster_scoped_kind_is_never_a_target() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/apis/example.com/v1":
            return httpx.Response(
                200, json={"resources": [{"name": "widgets", "kind": "Widget", "namespaced": False}]}
            )
        raise AssertionError(f"no request beyond discovery expected: {request.url}")

    client = _client(handler)
    with pytest.raises(NamespaceMismatchError, match="cluster-scoped"):
        await client.patch_scale("example.com/v1", "Widget", "team-a", "w", 3)
    with pytest.raises(NamespaceMismatchError, match="cluster-scoped"):
        await client.get_object("example.com/v1", "Widget", "team-a", "w")


def _deployment(**spec: Any) -> dict[str, Any]:
    container = {"name": "vllm", "args": ["--model", "m", "--max-num-seqs", "64"]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns", "uid": "u1"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"spec": {"containers": [{"name": "sidecar"}, container]}},
            **spec,
        },
        "status": {"replicas": 3, "readyReplicas": 2},
    }


def test_target_from_deployment() -> None:
    t = target_from_deployment(_deployment())
    assert (t.spec_replicas, t.status_replicas, t.ready_replicas) == (3, 3, 2)
    assert t.max_num_seqs == 64 and t.container_index == 1 and t.uid == "u1"
    assert t.controller is None and t.selector == {"matchLabels": {"app": "d"}}
    owned = _deployment()
    owned["metadata"]["ownerReferences"] = [{"kind": "InferenceService", "name": "isvc", "controller": True}]
    assert target_from_deployment(owned).controller == "InferenceService/isvc"
    unset = _deployment()
    del unset["spec"]["replicas"]
    assert target_from_deployment(unset).spec_replicas == 1  # the API default


def test_the_gpus_one_replica_requests_come_from_the_pod_template() -> None:
    assert target_from_deployment(_deployment()).gpus_per_replica is None  # none requested
    body = _deployment()
    containers = body["spec"]["template"]["spec"]["containers"]
    containers[1]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    containers[0]["resources"] = {"requests": {"amd.com/gpu": 1}}
    assert target_from_deployment(body).gpus_per_replica == 3
    sts = target_from_scale(
        "apps/v1",
        "StatefulSet",
        {"metadata": {"name": "s", "namespace": "ns"}, "spec": body["spec"]},
        {"spec": {"replicas": 1}, "status": {"replicas": 1}},
    )
    assert sts.gpus_per_replica == 3
    lws = target_from_scale(
        "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", {"metadata": {"name": "l"}, "spec": {}}, {}
    )
    assert lws.gpus_per_replica is None  # no spec.template: unknown


def test_target_from_scale() -> None:
    t = target_from_scale(
        "apps/v1",
        "StatefulSet",
        {"metadata": {"name": "s", "namespace": "ns", "uid": "u"}, "status": {"readyReplicas": 1}},
        {"spec": {"replicas": 2}, "status": {"replicas": 2}},
    )
    assert (t.kind, t.spec_replicas, t.ready_replicas, t.uid) == ("StatefulSet", 2, 1, "u")
    assert t.selector == {}  # none anywhere: selects nothing
    # The object's own selector where it has one, else the /scale subresource's string form.
    sts = target_from_scale(
        "apps/v1",
        "StatefulSet",
        {"metadata": {"name": "s"}, "spec": {"selector": {"matchLabels": {"app": "s"}}}},
        {"spec": {"replicas": 2}, "status": {"replicas": 2, "selector": "app=other"}},
    )
    assert selector_matches(sts.selector, {"app": "s"})
    lws = target_from_scale(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        {"metadata": {"name": "l"}, "spec": {}},
        {"spec": {"replicas": 1}, "status": {"replicas": 1, "selector": "app=l,role in (leader, worker)"}},
    )
    assert selector_matches(lws.selector, {"app": "l", "role": "worker"})
    assert not selector_matches(lws.selector, {"app": "l", "role": "x"})


@pytest.mark.parametrize(
    ("text", "selector"),
    [
        ("", {}),
        ("app=d", {"matchLabels": {"app": "d"}}),
        ("app==d, tier = a", {"matchLabels": {"app": "d", "tier": "a"}}),
        (
            "app=d,env notin (dev,test),gpu,!spot,zone!=b",
            {
                "matchLabels": {"app": "d"},
                "matchExpressions": [
                    {"key": "env", "operator": "NotIn", "values": ["dev", "test"]},
                    {"key": "gpu", "operator": "Exists"},
                    {"key": "spot", "operator": "DoesNotExist"},
                    {"key": "zone", "operator": "NotIn", "values": ["b"]},
                ],
            },
        ),
        ("app d e", {}),  # not understood: selects nothing
    ],
)
def test_parse_selector(text: str, selector: dict[str, object]) -> None:
    assert parse_selector(text) == selector


@pytest.mark.parametrize(
    ("args", "value", "updated"),
    [
        (["--max-num-seqs", "64"], 64, ["--max-num-seqs", "16"]),
        (["--max-num-seqs=64", "--x"], 64, ["--max-num-seqs=16", "--x"]),
        (["--model", "m"], None, ["--model", "m", "--max-num-seqs", "16"]),
        (["--max-num-seqs", "lots"], None, ["--max-num-seqs", "16"]),
    ],
)
def test_max_num_seqs(args: list[str], value: int | None, updated: list[str]) -> None:
    assert find_max_num_seqs(args) == value
    assert with_max_num_seqs(args, 16) == updated


def test_hpa_targets_and_selectors() -> None:
    hpas = [
        {
            "metadata": {"name": "h", "namespace": "ns"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "d"}},
        }
    ]
    assert hpa_targets(hpas) == {("ns", "Deployment", "d"): "h"}
    sel = {
        "matchLabels": {"app": "d"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}],
    }
    assert selector_matches(sel, {"app": "d", "tier": "a"})
    assert not selector_matches(sel, {"app": "d", "tier": "b"})
    assert not selector_matches(sel, {"app": "d"})
    assert not selector_matches({}, {"app": "d"})  # an empty selector is not ours
    assert selector_matches({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}, {"a": "b"})
    assert not selector_matches({"matchExpressions": [{"key": "x", "operator": "Exists"}]}, {"a": "b"})
