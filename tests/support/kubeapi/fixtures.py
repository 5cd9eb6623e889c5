"""pytest plugin: the FAKE Kubernetes API server (no real apiserver can run on these machines).

Fixtures:

- ``kube_api`` (session): one ``FakeKubeApi`` shared by every test; do not kill, pause or
  restart it, and undo the faults you set (``kube_namespace`` does that for you).
- ``private_kube_api``: a server of the test's own, for tests that kill, pause, restart or
  compact it.
- ``kube_namespace``: a fresh namespace on ``kube_api`` (deleted, and faults reset, afterwards).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kubeapi.process import FakeKubeApi

__all__ = ("kube_api", "kube_namespace", "private_kube_api")


def _served(directory: Path) -> Iterator[FakeKubeApi]:
    server = FakeKubeApi(directory)
    server.start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture(scope="session")
def kube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeKubeApi]:
    yield from _served(tmp_path_factory.mktemp("kubeapi"))


@pytest.fixture
def private_kube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeKubeApi]:
    yield from _served(tmp_path_factory.mktemp("kubeapi-private"))


@pytest.fixture
def kube_namespace(kube_api: FakeKubeApi) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    kube_api.create_namespace(name)
    try:
        yield name
    finally:
        kube_api.reset_faults()
        kube_api.request("DELETE", f"/api/v1/namespaces/{name}")
