"""The FAKE API server takes Events as kube-apiserver does through core/v1
(pkg/apis/core/validation/events.go, ``legacyValidateEvent``), and serves Pods' objects for
label patches; raw HTTP on asyncio and trio (no real apiserver here)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.kubeapi.paths import invalid

pytestmark = pytest.mark.anyio


def events(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/events"


def event(name: str, **fields: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "reason": "LeaderElection", **fields}


async def test_an_event_about_an_object_of_another_namespace_is_refused(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    url = events(kube_namespace)
    mine = {"kind": "Lease", "name": "l", "namespace": kube_namespace}
    assert (await http.post(url, json=event("a", involvedObject=mine))).status_code == 201
    theirs = {**mine, "namespace": "elsewhere"}
    assert await invalid(await http.post(url, json=event("b", involvedObject=theirs))) == [
        "involvedObject.namespace"
    ]
    # no namespace on the object: only in "default" (a cluster-scoped object's events)
    nowhere = {"kind": "Node", "name": "n"}
    assert await invalid(await http.post(url, json=event("c", involvedObject=nowhere))) == [
        "involvedObject.namespace"
    ]
    in_default = event(f"c-{kube_namespace}", involvedObject=nowhere)  # one server per session
    assert (await http.post(events("default"), json=in_default)).status_code == 201


async def test_an_event_with_an_event_time_needs_its_reporter_action_and_reason(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    url = events(kube_namespace)
    mine = {"kind": "Lease", "name": "l", "namespace": kube_namespace}
    at = "2026-01-02T03:04:05.000000Z"
    bare = {"metadata": {"name": "d"}, "involvedObject": mine, "eventTime": at}
    assert sorted(await invalid(await http.post(url, json=bare))) == [
        "action",
        "reason",
        "reportingComponent",
        "reportingInstance",
    ]
    full = event(
        "d",
        involvedObject=mine,
        eventTime=at,
        action="Elect",
        reportingComponent="ha",
        reportingInstance="pod-1",
        message="x" * 1025,
    )
    assert await invalid(await http.post(url, json=full)) == ["message"]
    full["message"] = "pod-1 became leader"
    assert (await http.post(url, json=full)).status_code == 201
    cut = {**full, "metadata": {"name": "e"}, "eventTime": "2026-01-02T03:04:05Z"}
    assert (await http.post(url, json=cut)).status_code == 400  # a MicroTime needs 6 digits


async def test_a_pods_labels_take_a_merge_patch(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    url = f"/api/v1/namespaces/{kube_namespace}/pods"
    pod = {"metadata": {"name": "p", "labels": {"app": "x"}}, "spec": {"containers": []}}
    assert (await http.post(url, json=pod)).status_code == 201
    patch = {"metadata": {"labels": {"ha.io/role": "active"}}}
    plain = await http.patch(f"{url}/p", json=patch)  # application/json: no patch type
    assert plain.status_code == 415
    merged = await http.patch(
        f"{url}/p", json=patch, headers={"Content-Type": "application/merge-patch+json"}
    )
    assert merged.status_code == 200, merged.text
    assert merged.json()["metadata"]["labels"] == {"app": "x", "ha.io/role": "active"}
    missing = await http.patch(
        f"{url}/q", json=patch, headers={"Content-Type": "application/merge-patch+json"}
    )
    assert missing.status_code == 404  # a patch never creates
