"""Tests of the FAKE Kubernetes API server (tests/support/kubeapi): no real kube-apiserver can
run on these machines, so these tests pin, over raw HTTP, each apiserver semantic the fake
claims, on asyncio and trio."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.support.kubeapi.process import FakeKubeApi

# plain HTTP only: a context without loaded certificates spares each client the CA bundle
NO_TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


@pytest.fixture
async def http(kube_api: FakeKubeApi) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=kube_api.url, timeout=10, verify=NO_TLS) as client:
        yield client


# Servers with their own settings, started once for the session (module scope would start
# them once per anyio backend, as pytest groups the tests by backend)


@pytest.fixture(scope="session")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeKubeApi]:
    """3 events of history per resource, bookmarks every 0.2 s, and 0.5 s of waiting for a
    future resourceVersion (instead of 100 to 1000, 60 s and 3 s)."""
    server = FakeKubeApi(
        tmp_path_factory.mktemp("kubeapi-tuned"),
        history=3,
        history_max=3,
        bookmark_interval=0.2,
        fresh_wait=0.5,
    )
    server.start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture(scope="session")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeKubeApi]:
    """HTTPS, and a credential needed: a token, a password or a client certificate."""
    server = FakeKubeApi(
        tmp_path_factory.mktemp("kubeapi-tls"),
        tls=True,
        tokens=("s3cret",),
        basic=("admin:pw",),
        client_certificates=True,
    )
    server.start()
    try:
        yield server
    finally:
        server.remove()
