"""The FAKE API server's PATCH: merge, strategic merge, JSON patch, 415 for apply, and the
resourceVersion check inside a patch; raw HTTP on asyncio and trio (no real apiserver here)."""

from __future__ import annotations

import httpx
import pytest

from tests.support.kubeapi.paths import config_maps, lease, leases

pytestmark = pytest.mark.anyio

MERGE = {"Content-Type": "application/merge-patch+json"}
STRATEGIC = {"Content-Type": "application/strategic-merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}


async def test_merge_and_strategic_merge(http: httpx.AsyncClient, kube_namespace: str) -> None:
    url = f"{config_maps(kube_namespace)}/c"
    body = {"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}
    created = (await http.post(config_maps(kube_namespace), json=body)).json()
    merged = await http.patch(url, json={"data": {"a": None, "c": "3"}}, headers=MERGE)
    assert merged.status_code == 200
    assert merged.json()["data"] == {"b": "2", "c": "3"}
    assert int(merged.json()["metadata"]["resourceVersion"]) > int(
        created["metadata"]["resourceVersion"]
    )
    strategic = await http.patch(url, json={"data": {"d": "4"}}, headers=STRATEGIC)
    assert strategic.json()["data"] == {"b": "2", "c": "3", "d": "4"}


async def test_resource_version_in_a_patch_is_checked(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    created = (await http.post(leases(kube_namespace), json=lease("l"))).json()
    url = f"{leases(kube_namespace)}/l"
    version = created["metadata"]["resourceVersion"]
    first = {"metadata": {"resourceVersion": version}, "spec": {"holderIdentity": "b"}}
    assert (await http.patch(url, json=first, headers=MERGE)).status_code == 200
    again = {"metadata": {"resourceVersion": version}, "spec": {"holderIdentity": "c"}}
    conflict = await http.patch(url, json=again, headers=MERGE)
    assert conflict.status_code == 409 and conflict.json()["reason"] == "Conflict"
    assert (await http.get(url)).json()["spec"]["holderIdentity"] == "b"


async def test_json_patch(http: httpx.AsyncClient, kube_namespace: str) -> None:
    await http.post(leases(kube_namespace), json=lease("l", leaseTransitions=1))
    url = f"{leases(kube_namespace)}/l"
    operations = [
        {"op": "test", "path": "/spec/holderIdentity", "value": "a"},
        {"op": "replace", "path": "/spec/holderIdentity", "value": "b"},
        {"op": "add", "path": "/metadata/labels", "value": {"x": "y"}},
        {"op": "copy", "from": "/spec/leaseTransitions", "path": "/spec/leaseDurationSeconds"},
        {"op": "remove", "path": "/spec/leaseTransitions"},
    ]
    patched = await http.patch(url, json=operations, headers=JSON_PATCH)
    assert patched.status_code == 200, patched.text
    spec = patched.json()["spec"]
    assert spec == {"holderIdentity": "b", "leaseDurationSeconds": 1}
    failed_test = [{"op": "test", "path": "/spec/holderIdentity", "value": "a"}]
    assert (await http.patch(url, json=failed_test, headers=JSON_PATCH)).status_code == 422
    missing = [{"op": "replace", "path": "/spec/nothing/here", "value": 1}]
    assert (await http.patch(url, json=missing, headers=JSON_PATCH)).status_code == 422
    malformed = [{"op": "jump", "path": "/spec"}]
    assert (await http.patch(url, json=malformed, headers=JSON_PATCH)).status_code == 400
    invalid = [{"op": "replace", "path": "/spec/leaseDurationSeconds", "value": 0}]
    assert (await http.patch(url, json=invalid, headers=JSON_PATCH)).status_code == 422
    renamed = [{"op": "replace", "path": "/metadata/name", "value": "other"}]
    assert (await http.patch(url, json=renamed, headers=JSON_PATCH)).status_code == 400


async def test_apply_and_unknown_types_are_415(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    await http.post(leases(kube_namespace), json=lease("l"))
    url = f"{leases(kube_namespace)}/l"
    for media_type in ("application/apply-patch+yaml", "application/json", "text/plain"):
        answer = await http.patch(url, content=b"{}", headers={"Content-Type": media_type})
        assert answer.status_code == 415, media_type
        assert answer.json()["reason"] == "UnsupportedMediaType"
