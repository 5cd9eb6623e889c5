"""Kubernetes for the tests: the driver against a FAKE API server with apiserver semantics.

No real kube-apiserver can run on these machines (see tests/support/kubeapi), so every
Kubernetes test talks HTTP to the fake of ``tests/support/kubeapi``, a process of its own on
loopback, through a kubeconfig file written for it (the driver's ``?kubeconfig=`` option):
the same code path as a laptop's ``~/.kube/config``.

Fixtures:

- ``kubernetes_backend``: a ``tests.support.backends.Backend`` on the shared fake
  (``kube_api``), with a fresh namespace and root name per test. A Hypothesis test on it runs
  only with ``-m slow`` (or HA_SLOW=1): its examples share one root, whose ConfigMap every
  operation reads and writes whole, so a 150-example run takes minutes on the fake.
- ``kubernetes_private``: a ``KubernetesBackend`` on a fake of the test's own
  (``private_kube_api``), which the test may kill, pause, restart or compact.

``KubernetesNet`` is a ``tests.support.harness.Net`` on the shared fake, for the elector
scenarios.
"""

from __future__ import annotations

import itertools
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import MemoryNet
from tests.support.kubeapi.process import FakeKubeApi

__all__ = (
    "KubernetesBackend",
    "KubernetesNet",
    "kubernetes_backend",
    "kubernetes_private",
    "write_kubeconfig",
)

_names = itertools.count()


def write_kubeconfig(directory: Path, server: str, namespace: str = "default") -> Path:
    """A kubeconfig whose current context points at ``server`` (plain http: the fake)."""
    path = directory / f"kubeconfig-{uuid.uuid4().hex[:8]}"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        "contexts:\n- name: fake\n"
        f"  context: {{cluster: fake, user: tester, namespace: {namespace}}}\n"
        f"clusters:\n- name: fake\n  cluster: {{server: '{server}'}}\n"
        "users:\n- name: tester\n  user: {token: not-checked-by-the-fake}\n"
    )
    return path


class KubernetesBackend:
    """The ``Backend`` of tests/support/backends: a fresh namespace and name per test."""

    name = "kubernetes"
    cross_process = True

    def __init__(
        self, server: FakeKubeApi, directory: Path, op_timeout: float | None = None
    ) -> None:
        self.server = server
        self.op_timeout = op_timeout  # the drivers' default (None: theirs)
        self.namespace = f"t-{uuid.uuid4().hex[:10]}"
        self.root = f"r{next(_names)}"
        server.create_namespace(self.namespace)
        self.kubeconfig = write_kubeconfig(directory, server.url, self.namespace)

    def url(self) -> str:
        return f"k8s://{self.namespace}/{self.root}?kubeconfig={self.kubeconfig}"

    def driver(self, **options: Any) -> Any:
        """An unstarted driver on this test's root (``server``: another URL, e.g. a proxy)."""
        from ha.drivers.kubernetes import KubernetesDriver

        server = options.pop("server", None)
        url = self.url()
        if server is not None:
            config = write_kubeconfig(self.kubeconfig.parent, server, self.namespace)
            url = f"k8s://{self.namespace}/{self.root}?kubeconfig={config}"
        options.setdefault("session_timeout", 2.0)
        options.setdefault("connect_timeout", 5.0)
        if self.op_timeout is not None:
            options.setdefault("op_timeout", self.op_timeout)
        return KubernetesDriver.from_url(url, **options)

    def close(self) -> None:
        self.server.request("DELETE", f"/api/v1/namespaces/{self.namespace}")


def _slow_selected(request: pytest.FixtureRequest) -> bool:
    return "slow" in (request.config.getoption("markexpr") or "") or bool(os.environ.get("HA_SLOW"))


@pytest.fixture
def kubernetes_backend(
    kube_api: FakeKubeApi, tmp_path: Path, request: pytest.FixtureRequest
) -> Any:
    op_timeout = None
    if hasattr(request.function, "hypothesis"):
        if not _slow_selected(request):
            pytest.skip(
                "a Hypothesis test on the Kubernetes fake takes minutes (every operation reads"
                " and writes the root's whole ConfigMap): select with -m slow or HA_SLOW=1"
            )
        op_timeout = 5.0  # minutes of load on 2 shared cores: a slow answer is not the test
    backend = KubernetesBackend(kube_api, tmp_path, op_timeout)
    yield backend
    if kube_api.running:
        backend.close()


@pytest.fixture
def kubernetes_private(private_kube_api: FakeKubeApi, tmp_path: Path) -> KubernetesBackend:
    return KubernetesBackend(private_kube_api, tmp_path)


class KubernetesNet(MemoryNet):
    """A ``tests.support.harness.Net`` on the shared fake, a fresh namespace per net. Every
    fault is the driver's own, through ``ha.testing.faults`` as on memory (hence the base
    class): crash, expire (the Lease taken away), cut_off/restore (``partition``/``heal``),
    disconnect/reconnect, freeze/thaw, transient/fatal (``fail_next``)."""

    name = "kubernetes"
    session_timeout = 1.0

    def __init__(self, server: FakeKubeApi, directory: Path) -> None:
        self.backend = KubernetesBackend(server, directory)

    def driver(self, session_timeout: float | None = None) -> Any:  # type: ignore[override]
        return self.backend.driver(session_timeout=session_timeout or self.session_timeout)

    def close(self) -> None:
        if self.backend.server.running:
            self.backend.close()
