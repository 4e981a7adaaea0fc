"""The informer: list, then watch from the list's version; bookmarks, relists on 410, failures, sync.

A scripted API server (a transport): each call must be the next step of the script; once the script
is done, a watch blocks like an idle one and the test stops the informer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from variant_autoscaler.adapters.kube import Credentials, KubeClient
from variant_autoscaler.controller.informer import Informer, slim
from variant_autoscaler.errors import KubeError

NS_A = "/apis/llmd.ai/v1alpha1/namespaces/a/variantautoscalings"
NS_B = "/apis/llmd.ai/v1alpha1/namespaces/b/variantautoscalings"


def va(name: str, version: str, ns: str = "a", **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": version}, **extra}


def listing(version: str, *items: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    body = {
        "apiVersion": "llmd.ai/v1alpha1",
        "kind": "VariantAutoscalingList",
        "metadata": {"resourceVersion": version},
        "items": list(items),
    }
    return 200, body


class ScriptedApi:
    """Answers each path's LISTs and WATCHes in the order of its script: ("list"|"watch", path, answer)."""

    def __init__(self, *steps: tuple[str, str, Any]) -> None:
        self.scripts: dict[str, list[tuple[str, Any]]] = {}
        for kind, path, answer in steps:
            self.scripts.setdefault(path, []).append((kind, answer))
        self.calls: list[tuple[str, str, dict[str, str]]] = []
        self.done = asyncio.Event()

    def _next(self, kind: str, path: str, params: Mapping[str, str] | None) -> Any:
        self.calls.append((kind, path, dict(params or {})))
        script = self.scripts.get(path)
        assert script, f"unexpected {kind} {path} after its script"
        want, answer = script.pop(0)
        assert kind == want, f"got {kind} {path}, the script says {want}"
        return answer

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None,
        content: bytes | None,
        headers: Mapping[str, str],
    ) -> tuple[int, bytes]:
        status, body = self._next("list", path, params)
        return status, json.dumps(body).encode()

    async def lines(
        self, path: str, *, params: Mapping[str, str], headers: Mapping[str, str], read_timeout: float
    ) -> AsyncIterator[tuple[int, bytes]]:
        if not self.scripts.get(path):
            self.calls.append(("watch", path, dict(params)))
            if not any(self.scripts.values()):
                self.done.set()
            await asyncio.Event().wait()  # an idle watch, until the test cancels the informer
        answer = self._next("watch", path, params)
        if isinstance(answer, int):
            yield answer, b'{"kind":"Status","message":"watch refused"}'
            return
        for event in answer:
            yield 200, json.dumps(event).encode()

    async def aclose(self) -> None:
        return None


async def run(api: ScriptedApi, *paths: str) -> tuple[Informer, list[tuple[str | None, str]]]:
    seen: list[tuple[str | None, str]] = []
    kube = KubeClient(Credentials(host="https://k8s.test", verify=True), transport=api, retries=0)
    informer = Informer(
        kube,
        paths or (NS_A,),
        what="VariantAutoscalings",
        on_event=lambda kind, obj: seen.append((kind, obj["metadata"]["name"])),
        backoff_seconds=0.001,
    )
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(api.done.wait(), 5)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    return informer, seen


async def test_lists_then_watches_from_the_listed_version_and_resumes_after_a_bookmark() -> None:
    managed = {"managedFields": [{"manager": "kubectl"}]}
    modified = va("x", "12", spec={"modelID": "new"})
    modified["metadata"].update(managed)
    api = ScriptedApi(
        ("list", NS_A, listing("10", va("x", "5"), va("y", "6"))),
        (
            "watch",
            NS_A,
            [
                {"type": "ADDED", "object": va("z", "11")},
                {"type": "MODIFIED", "object": modified},
                {"type": "DELETED", "object": va("y", "13")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}},
            ],
        ),
    )
    informer, seen = await run(api)
    assert seen == [(None, "x"), (None, "y"), ("ADDED", "z"), ("MODIFIED", "x"), ("DELETED", "y")]
    watches = [params for kind, _, params in api.calls if kind == "watch"]
    assert watches[0]["resourceVersion"] == "10" and watches[0]["allowWatchBookmarks"] == "true"
    assert watches[1]["resourceVersion"] == "20"  # the server closed the first watch: resume, no relist
    assert [kind for kind, _, _ in api.calls] == ["list", "watch", "watch"]  # the last one idles
    by_name = {obj["metadata"]["name"]: obj for obj in informer.values()}
    assert sorted(by_name) == ["x", "z"]
    assert by_name["x"]["spec"] == {"modelID": "new"} and "managedFields" not in by_name["x"]["metadata"]


async def test_list_items_get_the_kind_of_their_list() -> None:
    api = ScriptedApi(("list", NS_A, listing("3", va("x", "2"))))
    informer, _ = await run(api)
    (obj,) = informer.values()
    assert (obj["apiVersion"], obj["kind"]) == ("llmd.ai/v1alpha1", "VariantAutoscaling")


async def test_a_410_relists_and_reports_what_vanished_meanwhile() -> None:
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}
    api = ScriptedApi(
        ("list", NS_A, listing("10", va("x", "5"), va("y", "6"))),
        ("watch", NS_A, [gone]),
        ("list", NS_A, listing("30", va("x", "25"), va("w", "28"))),
    )
    informer, seen = await run(api)
    assert seen[2:] == [("DELETED", "y"), (None, "x"), (None, "w")]
    assert sorted(o["metadata"]["name"] for o in informer.values()) == ["w", "x"]
    assert api.calls[-1][2]["resourceVersion"] == "30"
    assert informer.relists == 2


async def test_values_wait_for_every_path_and_say_why_not() -> None:
    api = ScriptedApi(
        ("list", NS_A, listing("1", va("x", "1"))),
        ("list", NS_B, (403, {"kind": "Status", "message": "forbidden: cannot list"})),
        ("watch", NS_A, []),
        ("list", NS_B, listing("2", va("y", "2", ns="b"))),
    )
    kube = KubeClient(Credentials(host="https://k8s.test", verify=True), transport=api, retries=0)
    informer = Informer(kube, (NS_A, NS_B), what="VariantAutoscalings", backoff_seconds=0.05)
    task = asyncio.create_task(informer.run())
    try:
        for _ in range(200):
            if informer.last_error:
                break
            await asyncio.sleep(0.001)
        with pytest.raises(KubeError, match=r"not listed yet from .*namespaces/b.*forbidden: cannot list"):
            informer.values()
        assert not informer.synced
        await asyncio.wait_for(informer.wait_synced(), 5)
        assert sorted(o["metadata"]["name"] for o in informer.values()) == ["x", "y"]
        assert informer.last_error is None
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@pytest.mark.parametrize(
    "refusal",
    [500, [{"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "etcd is sick"}}]],
    ids=["http-500", "error-event"],
)
async def test_a_failed_watch_backs_off_and_relists(refusal: Any) -> None:
    api = ScriptedApi(
        ("list", NS_A, listing("1", va("x", "1"))),
        ("watch", NS_A, refusal),
        ("list", NS_A, listing("4", va("x", "3"))),
    )
    informer, seen = await run(api)
    assert seen == [(None, "x"), (None, "x")]
    assert informer.values()[0]["metadata"]["resourceVersion"] == "3"


def test_an_informer_needs_a_path() -> None:
    kube = KubeClient(Credentials(host="https://k8s.test", verify=True))
    with pytest.raises(ValueError, match="at least one"):
        Informer(kube, (), what="VariantAutoscalings")


def test_slim_drops_managed_fields_and_kubectls_copy_without_touching_the_event() -> None:
    annotations = {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "keep": "me"}
    meta = {"name": "va", "managedFields": [{"manager": "kubectl"}], "annotations": annotations}
    body = {"metadata": meta, "spec": {"modelID": "m"}}
    out = slim(body)
    assert out["metadata"] == {"name": "va", "annotations": {"keep": "me"}}
    assert out["spec"] is body["spec"]
    assert meta["annotations"] is annotations and "managedFields" in meta
