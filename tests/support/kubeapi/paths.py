"""Paths and bodies of the FAKE API server's objects as the raw-HTTP tests write them."""

from __future__ import annotations

import httpx


def leases(namespace: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


def config_maps(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps"


def lease(name: str, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 2, **spec},
    }


async def invalid(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["reason"] == "Invalid" and body["kind"] == "Status"
    return [cause["field"] for cause in body["details"]["causes"]]
