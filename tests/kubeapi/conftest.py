"""Tests of the FAKE Kubernetes API server (tests/support/kubeapi): no real kube-apiserver can
run on these machines, so these tests pin, over raw HTTP, each apiserver semantic the fake
claims, on asyncio and trio."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.support.kubeapi.process import FakeKubeApi


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


# plain HTTP only: a context without loaded certificates spares each client the CA bundle
NO_TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


@pytest.fixture
async def http(kube_api: FakeKubeApi) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=kube_api.url, timeout=10, verify=NO_TLS) as client:
        yield client
