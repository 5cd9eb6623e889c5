"""The FAKE API server's discovery documents and server-side tables, and kubectl against it
(the way Kubernetes users look at Leases). No real apiserver runs here."""

from __future__ import annotations

import shutil
import subprocess

import httpx
import pytest

from tests.support.kubeapi.paths import lease, leases
from tests.support.kubeapi.process import FakeKubeApi

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


@pytest.mark.anyio
async def test_discovery_documents(http: httpx.AsyncClient) -> None:
    api = (await http.get("/api")).json()
    assert api["kind"] == "APIVersions" and api["versions"] == ["v1"]
    groups = (await http.get("/apis")).json()
    assert [group["name"] for group in groups["groups"]] == ["coordination.k8s.io"]
    core = (await http.get("/api/v1")).json()
    by_name = {resource["name"]: resource for resource in core["resources"]}
    assert by_name["configmaps"]["kind"] == "ConfigMap" and by_name["configmaps"]["namespaced"]
    assert by_name["namespaces"]["namespaced"] is False
    assert "watch" in by_name["configmaps"]["verbs"]
    coordination = (await http.get("/apis/coordination.k8s.io/v1")).json()
    assert coordination["groupVersion"] == "coordination.k8s.io/v1"
    assert [r["kind"] for r in coordination["resources"]] == ["Lease"]
    version = (await http.get("/version")).json()
    assert version["major"] == "1" and version["gitVersion"].endswith("-fake")
    assert (await http.get("/healthz")).text == "ok"
    assert (await http.get("/apis/apps/v1/deployments")).status_code == 404


@pytest.mark.anyio
async def test_tables_print_the_lease_holder(http: httpx.AsyncClient, kube_namespace: str) -> None:
    await http.post(leases(kube_namespace), json=lease("l", holderIdentity="pod-1"))
    printed = (await http.get(leases(kube_namespace), headers={"Accept": TABLE})).json()
    assert printed["kind"] == "Table"
    assert [column["name"] for column in printed["columnDefinitions"]] == ["Name", "Holder", "Age"]
    (row,) = printed["rows"]
    assert row["cells"][:2] == ["l", "pod-1"]
    assert row["object"]["metadata"]["namespace"] == kube_namespace


def kubectl(server: FakeKubeApi, *args: str) -> str:
    done = subprocess.run(
        ["kubectl", f"--server={server.url}", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed here")
def test_kubectl_gets_describes_and_deletes_leases(
    kube_api: FakeKubeApi, kube_namespace: str
) -> None:
    body = lease("election", holderIdentity="pod-7")
    code, _ = kube_api.request("POST", leases(kube_namespace), body)
    assert code == 201
    listed = kubectl(kube_api, "get", "lease", "-A")
    row = next(line.split() for line in listed.splitlines() if kube_namespace in line)
    assert row[:3] == [kube_namespace, "election", "pod-7"]
    assert listed.splitlines()[0].split() == ["NAMESPACE", "NAME", "HOLDER", "AGE"]
    holder = kubectl(
        kube_api,
        "-n",
        kube_namespace,
        "get",
        "lease",
        "election",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    )
    assert holder == "pod-7"
    described = kubectl(kube_api, "-n", kube_namespace, "describe", "lease", "election")
    assert "Holder Identity:" in described and "pod-7" in described
    kubectl(kube_api, "-n", kube_namespace, "delete", "lease", "election")
    code, _ = kube_api.request("GET", f"{leases(kube_namespace)}/election")
    assert code == 404
