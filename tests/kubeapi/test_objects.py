"""The FAKE API server's object semantics (create, get, update, delete, lists, namespaces),
each as kube-apiserver behaves; raw HTTP on asyncio and trio. No real apiserver runs here."""

from __future__ import annotations

import anyio
import httpx
import pytest

from tests.support.kubeapi.paths import config_maps, lease, leases

pytestmark = pytest.mark.anyio


async def test_create_assigns_opaque_increasing_resource_versions(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    first = await http.post(leases(kube_namespace), json=lease("one"))
    second = await http.post(config_maps(kube_namespace), json={"metadata": {"name": "two"}})
    assert first.status_code == second.status_code == 201
    one, two = first.json(), second.json()
    # one global counter across kinds, a string on the wire
    assert isinstance(one["metadata"]["resourceVersion"], str)
    assert int(two["metadata"]["resourceVersion"]) > int(one["metadata"]["resourceVersion"])
    assert one["metadata"]["namespace"] == kube_namespace
    assert one["metadata"]["uid"] and one["metadata"]["creationTimestamp"]
    assert one["kind"] == "Lease" and one["apiVersion"] == "coordination.k8s.io/v1"
    got = await http.get(f"{leases(kube_namespace)}/one")
    assert got.json() == one


async def test_create_existing_is_409_already_exists(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    assert (await http.post(leases(kube_namespace), json=lease("x"))).status_code == 201
    again = await http.post(leases(kube_namespace), json=lease("x"))
    assert again.status_code == 409
    body = again.json()
    assert (body["kind"], body["status"], body["reason"], body["code"]) == (
        "Status",
        "Failure",
        "AlreadyExists",
        409,
    )
    assert body["details"] == {"name": "x", "group": "coordination.k8s.io", "kind": "leases"}


async def test_missing_object_is_404_for_get_put_patch_delete(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    # a ConfigMap is not created by a PUT (a Lease is: test_updates.py)
    url = f"{config_maps(kube_namespace)}/ghost"
    answers = [
        await http.get(url),
        await http.put(url, json={"metadata": {"name": "ghost"}}),
        await http.patch(
            url, json={"data": {}}, headers={"Content-Type": "application/merge-patch+json"}
        ),
        await http.delete(url),
    ]
    for answer in answers:
        assert answer.status_code == 404
        assert answer.json()["reason"] == "NotFound"
        assert answer.json()["message"] == 'configmaps "ghost" not found'


async def test_put_with_stale_resource_version_is_409_conflict(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    created = (await http.post(leases(kube_namespace), json=lease("l"))).json()
    current = dict(created, spec={**created["spec"], "holderIdentity": "b"})
    renewed = await http.put(f"{leases(kube_namespace)}/l", json=current)
    assert renewed.status_code == 200
    assert int(renewed.json()["metadata"]["resourceVersion"]) > int(
        created["metadata"]["resourceVersion"]
    )
    stale = dict(created, spec={**created["spec"], "holderIdentity": "c"})
    conflict = await http.put(f"{leases(kube_namespace)}/l", json=stale)
    assert conflict.status_code == 409
    assert conflict.json()["reason"] == "Conflict"
    assert "the object has been modified" in conflict.json()["message"]
    got = (await http.get(f"{leases(kube_namespace)}/l")).json()
    assert got["spec"]["holderIdentity"] == "b"


async def test_put_without_resource_version_overwrites_a_config_map(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    # ConfigMaps allow unconditional updates (Leases do not: test_updates.py)
    url = f"{config_maps(kube_namespace)}/c"
    await http.post(config_maps(kube_namespace), json={"metadata": {"name": "c"}})
    await http.put(url, json={"metadata": {"name": "c"}, "data": {"k": "b"}})
    blind = await http.put(url, json={"metadata": {"name": "c"}, "data": {"k": "c"}})
    assert blind.status_code == 200
    assert blind.json()["data"] == {"k": "c"}


async def test_update_that_changes_nothing_keeps_the_resource_version(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    created = (
        await http.post(
            config_maps(kube_namespace), json={"metadata": {"name": "c"}, "data": {"k": "v"}}
        )
    ).json()
    same = await http.put(f"{config_maps(kube_namespace)}/c", json=created)
    assert same.status_code == 200
    assert same.json()["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_update_keeps_uid_and_creation_time(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    created = (
        await http.post(config_maps(kube_namespace), json={"metadata": {"name": "c"}})
    ).json()
    updated = await http.put(
        f"{config_maps(kube_namespace)}/c", json={"metadata": {"name": "c"}, "data": {"a": "b"}}
    )
    assert updated.json()["metadata"]["uid"] == created["metadata"]["uid"]
    assert (
        updated.json()["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]
    )
    wrong_uid = {"metadata": {"name": "c", "uid": "not-it"}, "data": {}}
    assert (await http.put(f"{config_maps(kube_namespace)}/c", json=wrong_uid)).status_code == 409


async def test_name_or_namespace_differing_from_url_is_400(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    await http.post(leases(kube_namespace), json=lease("l"))
    other_name = await http.put(f"{leases(kube_namespace)}/l", json=lease("m"))
    assert other_name.status_code == 400
    assert other_name.json()["reason"] == "BadRequest"
    assert "does not match the name on the URL" in other_name.json()["message"]
    body = lease("n")
    body["metadata"] = {"name": "n", "namespace": "elsewhere"}  # type: ignore[index]
    other_namespace = await http.post(leases(kube_namespace), json=body)
    assert other_namespace.status_code == 400


async def test_wrong_kind_bad_json_and_resource_version_on_create(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    wrong_kind = await http.post(config_maps(kube_namespace), json=lease("l"))
    assert wrong_kind.status_code == 400
    not_json = await http.post(
        config_maps(kube_namespace), content=b"{nope", headers={"Content-Type": "application/json"}
    )
    assert not_json.status_code == 400
    with_version = await http.post(
        config_maps(kube_namespace), json={"metadata": {"name": "c", "resourceVersion": "5"}}
    )
    assert with_version.status_code == 500  # what the real storage layer answers
    assert "resourceVersion should not be set" in with_version.json()["message"]


async def test_delete_preconditions(http: httpx.AsyncClient, kube_namespace: str) -> None:
    created = (await http.post(leases(kube_namespace), json=lease("l"))).json()
    url = f"{leases(kube_namespace)}/l"
    renewed = (
        await http.put(url, json=dict(created, spec={**created["spec"], "holderIdentity": "b"}))
    ).json()
    stale = {"preconditions": {"resourceVersion": created["metadata"]["resourceVersion"]}}
    refused = await http.request("DELETE", url, json=stale)
    assert refused.status_code == 409 and refused.json()["reason"] == "Conflict"
    wrong_uid = await http.request("DELETE", url, json={"preconditions": {"uid": "x"}})
    assert wrong_uid.status_code == 409
    fresh = {
        "preconditions": {
            "resourceVersion": renewed["metadata"]["resourceVersion"],
            "uid": created["metadata"]["uid"],
        }
    }
    deleted = await http.request("DELETE", url, json=fresh)
    assert deleted.status_code == 200
    assert deleted.json()["kind"] == "Status" and deleted.json()["status"] == "Success"
    assert deleted.json()["details"]["uid"] == created["metadata"]["uid"]
    assert (await http.get(url)).status_code == 404


async def test_namespaces(http: httpx.AsyncClient, kube_namespace: str) -> None:
    assert (await http.get("/api/v1/namespaces/default")).status_code == 200
    missing = await http.post(leases("no-such-namespace"), json=lease("l"))
    assert missing.status_code == 404
    assert missing.json()["message"] == 'namespaces "no-such-namespace" not found'
    made = await http.post("/api/v1/namespaces", json={"metadata": {"name": f"{kube_namespace}-b"}})
    assert made.status_code == 201 and made.json()["status"]["phase"] == "Active"
    assert (await http.post(leases(f"{kube_namespace}-b"), json=lease("l"))).status_code == 201
    # deleting a namespace deletes what is in it
    assert (await http.delete(f"/api/v1/namespaces/{kube_namespace}-b")).status_code == 200
    assert (await http.get(f"{leases(kube_namespace + '-b')}/l")).status_code == 404
    bad = await http.post("/api/v1/namespaces", json={"metadata": {"name": "Bad_Name"}})
    assert bad.status_code == 422


async def test_lists_with_selectors_and_pages(http: httpx.AsyncClient, kube_namespace: str) -> None:
    for name, role in (("a", "x"), ("b", "y"), ("c", "x")):
        body = {"metadata": {"name": name, "labels": {"role": role}}}
        assert (await http.post(config_maps(kube_namespace), json=body)).status_code == 201
    listed = (await http.get(config_maps(kube_namespace))).json()
    assert listed["kind"] == "ConfigMapList" and listed["apiVersion"] == "v1"
    assert [item["metadata"]["name"] for item in listed["items"]] == ["a", "b", "c"]
    newest = max(int(item["metadata"]["resourceVersion"]) for item in listed["items"])
    assert int(listed["metadata"]["resourceVersion"]) >= newest

    async def names(**params: str) -> list[str]:
        answer = await http.get(config_maps(kube_namespace), params=params)
        assert answer.status_code == 200, answer.text
        return [item["metadata"]["name"] for item in answer.json()["items"]]

    assert await names(labelSelector="role=x") == ["a", "c"]
    assert await names(labelSelector="role!=x") == ["b"]
    assert await names(labelSelector="role in (y, z)") == ["b"]
    assert await names(labelSelector="role notin (y)") == ["a", "c"]
    assert await names(labelSelector="!role") == []
    assert await names(labelSelector="role,role=y") == ["b"]
    assert await names(fieldSelector="metadata.name=b") == ["b"]
    assert await names(fieldSelector="metadata.name!=b") == ["a", "c"]
    bad_field = await http.get(config_maps(kube_namespace), params={"fieldSelector": "data.k=v"})
    assert bad_field.status_code == 400
    page = (await http.get(config_maps(kube_namespace), params={"limit": "2"})).json()
    assert [item["metadata"]["name"] for item in page["items"]] == ["a", "b"]
    rest = await names(limit="2", **{"continue": page["metadata"]["continue"]})
    assert rest == ["c"]
    everywhere = (await http.get("/api/v1/configmaps", params={"labelSelector": "role=y"})).json()
    assert {item["metadata"]["namespace"] for item in everywhere["items"]} >= {kube_namespace}


async def test_delete_collection_with_a_selector(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    for name, role in (("a", "x"), ("b", "y"), ("c", "x")):
        body = {"metadata": {"name": name, "labels": {"role": role}}}
        await http.post(config_maps(kube_namespace), json=body)
    deleted = await http.delete(config_maps(kube_namespace), params={"labelSelector": "role=x"})
    assert deleted.status_code == 200
    assert [item["metadata"]["name"] for item in deleted.json()["items"]] == ["a", "c"]
    left = (await http.get(config_maps(kube_namespace))).json()["items"]
    assert [item["metadata"]["name"] for item in left] == ["b"]


async def test_malformed_parameters_are_400_and_unknown_paths_404(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    for params in ({"limit": "many"}, {"labelSelector": "a in (b"}, {"continue": "garbage"}):
        answer = await http.get(config_maps(kube_namespace), params=params)
        assert answer.status_code == 400, params
        assert answer.json()["kind"] == "Status"
    watch = {"watch": "true", "timeoutSeconds": "soon"}
    assert (await http.get(config_maps(kube_namespace), params=watch)).status_code == 400
    for path in (
        "/api/v1/configmaps/x",
        "/api/v2/configmaps",
        f"{config_maps(kube_namespace)}/c/status",
    ):
        assert (await http.get(path)).status_code == 404, path


async def test_concurrent_updates_from_one_version_let_exactly_one_through(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    created = (await http.post(leases(kube_namespace), json=lease("l"))).json()
    codes: list[int] = []

    async def update(holder: str) -> None:
        body = dict(created, spec={**created["spec"], "holderIdentity": holder})
        codes.append((await http.put(f"{leases(kube_namespace)}/l", json=body)).status_code)

    async with anyio.create_task_group() as tasks:
        for index in range(8):
            tasks.start_soon(update, f"h{index}")
    assert sorted(codes) == [200] + [409] * 7
