"""Proof that the FAKE API server speaks the Kubernetes API to a client it was not written
with: the official ``kubernetes`` Python client's ``LeaderElection`` with a ``LeaseLock``
(the client-go algorithm: poll, compare the record, take over after the holder's duration)
elects a leader, and a second candidate takes over once the first stops renewing. No real
apiserver runs here. The client is synchronous, so this runs in threads, once."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.kubeapi.process import FakeKubeApi

kubernetes = pytest.importorskip(
    "kubernetes", reason="the official kubernetes client is not installed (pip install -e .[dev])"
)
from kubernetes.leaderelection import electionconfig  # noqa: E402
from kubernetes.leaderelection.leaderelection import LeaderElection  # noqa: E402
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock  # noqa: E402


@pytest.fixture
def default_client(kube_api: FakeKubeApi) -> Iterator[None]:
    """LeaseLock builds its API object from the client's default configuration."""
    previous = kubernetes.client.Configuration.get_default_copy()
    configuration = kubernetes.client.Configuration()
    configuration.host = kube_api.url
    kubernetes.client.Configuration.set_default(configuration)
    try:
        yield
    finally:
        kubernetes.client.Configuration.set_default(previous)


def holder(kube_api: FakeKubeApi, namespace: str) -> Any:
    code, lease = kube_api.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/election"
    )
    assert code == 200, lease
    return lease["spec"]["holderIdentity"]


@pytest.mark.usefixtures("default_client")
def test_leader_election_with_a_lease_lock(kube_api: FakeKubeApi, kube_namespace: str) -> None:
    events: queue.Queue[tuple[str, str]] = queue.Queue()

    def candidate(identity: str) -> tuple[LeaseLock, threading.Thread]:
        lock = LeaseLock("election", kube_namespace, identity)
        config = electionconfig.Config(
            lock,
            lease_duration=2,
            renew_deadline=1.5,
            retry_period=1,
            onstarted_leading=lambda: events.put(("leading", identity)),
            onstopped_leading=lambda: events.put(("stopped", identity)),
        )
        thread = threading.Thread(target=LeaderElection(config).run, daemon=True)
        thread.start()
        return lock, thread

    lock_a, thread_a = candidate("a")
    assert events.get(timeout=10) == ("leading", "a")
    assert holder(kube_api, kube_namespace) == "a"
    lock_b, thread_b = candidate("b")
    try:
        # while a renews, b polls and stays a follower (a lease duration and more)
        with pytest.raises(queue.Empty):
            events.get(timeout=2.2)
        assert holder(kube_api, kube_namespace) == "a"
        lock_a.update = lambda *args: False  # a stops renewing, as a stalled process would
        seen = {events.get(timeout=10), events.get(timeout=10)}
        assert seen == {("stopped", "a"), ("leading", "b")}
        assert holder(kube_api, kube_namespace) == "b"
    finally:
        for lock in (lock_a, lock_b):  # both stop touching the server, and so end
            lock.get = lambda *args: (False, SimpleNamespace(body="", reason="stopped"))
            lock.update = lambda *args: False
        thread_a.join(timeout=10)
        thread_b.join(timeout=10)


@pytest.mark.usefixtures("default_client")
def test_watch_and_conflicts_through_the_official_client(
    kube_api: FakeKubeApi, kube_namespace: str
) -> None:
    # CoordinationV1Api: CoreV1Api takes seconds to import, for the same proof
    api = kubernetes.client.CoordinationV1Api()
    spec = kubernetes.client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=2)
    body = kubernetes.client.V1Lease(metadata={"name": "l"}, spec=spec)
    created = api.create_namespaced_lease(kube_namespace, body)
    created.spec.holder_identity = "b"
    replaced = api.replace_namespaced_lease("l", kube_namespace, created)
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    with pytest.raises(kubernetes.client.ApiException) as conflict:
        api.replace_namespaced_lease("l", kube_namespace, created)  # the stale version
    assert conflict.value.status == 409
    watch = kubernetes.watch.Watch()
    events = [
        (event["type"], event["object"].metadata.name, event["object"].spec.holder_identity)
        for event in watch.stream(api.list_namespaced_lease, kube_namespace, timeout_seconds=1)
    ]
    assert events == [("ADDED", "l", "b")]  # then the server ended the watch
