"""The FAKE API server's update and delete rules, each pinned to where kube-apiserver applies
it (kubernetes/kubernetes; no real apiserver runs here). Raw HTTP, on asyncio and trio.

Kinds differ in two strategy switches that ``Store.Update``
(staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go) reads:
``AllowCreateOnUpdate`` and ``AllowUnconditionalUpdate``. A Lease has the first and not the
second (pkg/registry/coordination/lease/strategy.go); a ConfigMap the reverse
(pkg/registry/core/configmap/strategy.go). That one difference is what let a paused holder's
late renewal re-create its reaped Lease (issue 27): these tests keep the fake honest about it.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.kubeapi.paths import config_maps, lease, leases

pytestmark = pytest.mark.anyio

MERGE = {"Content-Type": "application/merge-patch+json"}


def renewal(current: dict[str, Any], holder: str) -> dict[str, Any]:
    """``current`` with another holder, its metadata (uid, resourceVersion) kept."""
    return dict(current, spec={**current["spec"], "holderIdentity": holder})


async def test_a_put_creates_a_missing_lease_ignoring_its_resource_version(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    """lease/strategy.go ``AllowCreateOnUpdate`` is true: ``Store.Update`` takes its create
    branch (``existingResourceVersion == 0``), which never compares the body's
    resourceVersion, and the handler answers 201 (endpoints/handlers/update.go)."""
    url = f"{leases(kube_namespace)}/fresh"
    body = lease("fresh")
    body["metadata"] = {"name": "fresh", "resourceVersion": "1"}  # long stale: ignored
    created = await http.put(url, json=body)
    assert created.status_code == 201, created.text
    made = created.json()
    assert made["metadata"]["uid"] and made["metadata"]["creationTimestamp"]
    assert made["metadata"]["resourceVersion"] != "1"
    assert (await http.get(url)).json() == made
    # the same on Events (event/strategy.go), and a missing namespace is still 404
    involved = {"kind": "Pod", "name": "p", "namespace": kube_namespace}  # events.go: the same
    event = {"metadata": {"name": "e"}, "involvedObject": involved}
    put_event = await http.put(f"/api/v1/namespaces/{kube_namespace}/events/e", json=event)
    assert put_event.status_code == 201, put_event.text
    elsewhere = await http.put(f"{leases('no-such-namespace')}/l", json=lease("l"))
    assert elsewhere.status_code == 404
    assert elsewhere.json()["message"] == 'namespaces "no-such-namespace" not found'


async def test_a_put_never_creates_a_config_map(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    """configmap/strategy.go ``AllowCreateOnUpdate`` is false: ``Store.Update`` answers
    NotFound when there is no object."""
    url = f"{config_maps(kube_namespace)}/tree"
    answer = await http.put(url, json={"metadata": {"name": "tree"}, "data": {"a": "b"}})
    assert answer.status_code == 404
    assert answer.json()["message"] == 'configmaps "tree" not found'
    assert (await http.get(url)).status_code == 404


async def test_a_uid_in_a_put_is_a_precondition_that_refuses_a_reaped_lease(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    """rest/update.go ``defaultUpdatedObjectInfo.Preconditions`` makes the body's
    ``metadata.uid`` a precondition; storage/etcd3/store.go ``GuaranteedUpdate`` checks it
    (``Preconditions.Check``) before the update function runs, against an empty object when
    there is none, and ``InterpretUpdateError`` turns it into 409 Conflict. So a renewal
    carrying its Lease's uid never re-creates a reaped Lease, nor writes over one created
    anew under the same name. (A real server's answer, quoted in cert-manager's issue
    tracker: "StorageError: invalid object, Code: 4, Key: /registry/..., ResourceVersion: 0,
    AdditionalErrorMsg: Precondition failed: UID in precondition: d699..., UID in object
    meta: ".)"""
    url = f"{leases(kube_namespace)}/l"
    held = (await http.post(leases(kube_namespace), json=lease("l"))).json()
    uid = held["metadata"]["uid"]
    assert (await http.delete(url)).status_code == 200  # a peer reaped it
    late = await http.put(url, json=renewal(held, "late"))
    assert late.status_code == 409, late.text
    assert late.json()["reason"] == "Conflict"
    assert late.json()["message"] == (
        f'Operation cannot be fulfilled on leases.coordination.k8s.io "l": StorageError:'
        f" invalid object, Code: 4, Key: /registry/leases/{kube_namespace}/l,"
        f" ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition:"
        f" {uid}, UID in object meta: "
    )
    assert (await http.get(url)).status_code == 404  # nothing created
    # the name taken again by someone else: the late renewal is refused as well
    other = (await http.post(leases(kube_namespace), json=lease("l", holderIdentity="b"))).json()
    again = await http.put(url, json=renewal(held, "late"))
    assert again.status_code == 409
    assert f"UID in object meta: {other['metadata']['uid']}" in again.json()["message"]
    assert (await http.get(url)).json() == other
    # the uid checked first: a right version does not help a wrong uid
    wrong = renewal(other, "late")
    wrong["metadata"] = {**other["metadata"], "uid": uid}
    assert "UID in precondition" in (await http.put(url, json=wrong)).json()["message"]
    # the right uid and version: a renewal
    renewed = await http.put(url, json=renewal(other, "b2"))
    assert renewed.status_code == 200 and renewed.json()["spec"]["holderIdentity"] == "b2"


async def test_a_lease_update_needs_a_resource_version_a_config_map_does_not(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    """lease/strategy.go ``AllowUnconditionalUpdate`` is false: ``Store.Update`` answers 422
    for a PUT without ``metadata.resourceVersion`` (its message names the resource,
    "leases.coordination.k8s.io"), and 409 for a stale one; configmap/strategy.go's is true:
    the PUT overwrites whatever is there."""
    url = f"{leases(kube_namespace)}/l"
    created = (await http.post(leases(kube_namespace), json=lease("l"))).json()
    blind = await http.put(url, json=lease("l", holderIdentity="b"))
    assert blind.status_code == 422, blind.text
    assert blind.json()["reason"] == "Invalid"
    assert blind.json()["message"] == (
        'leases.coordination.k8s.io "l" is invalid: metadata.resourceVersion: Invalid value:'
        " 0x0: must be specified for an update"
    )
    assert blind.json()["details"]["causes"][0]["field"] == "metadata.resourceVersion"
    current = await http.put(url, json=renewal(created, "b"))
    assert current.status_code == 200
    stale = await http.put(url, json=renewal(created, "c"))
    assert stale.status_code == 409
    assert "the object has been modified" in stale.json()["message"]
    cm = f"{config_maps(kube_namespace)}/c"
    await http.post(config_maps(kube_namespace), json={"metadata": {"name": "c"}})
    overwrite = await http.put(cm, json={"metadata": {"name": "c"}, "data": {"k": "v"}})
    assert overwrite.status_code == 200 and overwrite.json()["data"] == {"k": "v"}


async def test_a_patch_never_creates_even_a_lease(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    """endpoints/handlers/patch.go: with no stored object a merge or JSON patch has nothing
    to apply to (``createNewObject`` is NotFound); only server-side apply creates."""
    url = f"{leases(kube_namespace)}/ghost"
    answer = await http.patch(url, json={"spec": {"holderIdentity": "x"}}, headers=MERGE)
    assert answer.status_code == 404
    assert answer.json()["message"] == 'leases.coordination.k8s.io "ghost" not found'
    assert (await http.get(url)).status_code == 404


async def test_delete_preconditions_name_the_kind_and_check_the_uid_first(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    """rest/delete.go ``BeforeDelete`` checks ``DeleteOptions.preconditions``: the uid, then
    the resourceVersion, each a 409 whose message qualifies the Kind ("Lease.coordination..."),
    not the resource. A missing object is 404 whatever the preconditions (registry/store.go
    ``Store.Delete`` reads it first)."""
    url = f"{leases(kube_namespace)}/l"
    created = (await http.post(leases(kube_namespace), json=lease("l"))).json()
    uid, version = created["metadata"]["uid"], created["metadata"]["resourceVersion"]
    both_wrong = {"preconditions": {"uid": "not-it", "resourceVersion": "1"}}
    refused = await http.request("DELETE", url, json=both_wrong)
    assert refused.status_code == 409
    assert refused.json()["message"] == (
        'Operation cannot be fulfilled on Lease.coordination.k8s.io "l": the UID in the'
        f" precondition (not-it) does not match the UID in record ({uid}). The object might"
        " have been deleted and then recreated"
    )
    stale = {"preconditions": {"uid": uid, "resourceVersion": "1"}}
    refused = await http.request("DELETE", url, json=stale)
    assert refused.status_code == 409
    assert refused.json()["message"] == (
        'Operation cannot be fulfilled on Lease.coordination.k8s.io "l": the ResourceVersion'
        f" in the precondition (1) does not match the ResourceVersion in record ({version})."
        " The object might have been modified"
    )
    fresh = {"preconditions": {"uid": uid, "resourceVersion": version}}
    assert (await http.request("DELETE", url, json=fresh)).status_code == 200
    gone = await http.request("DELETE", url, json=fresh)
    assert gone.status_code == 404
