"""Leader changes told to Kubernetes (``ha/drivers/kubernetes/announce.py``): an Event per term
begun and ended, as client-go's leader election records them, and the role label of each
process's pod (``?pod=NAME``), which the Service of deploy/kubernetes selects on.

Against the FAKE API server of tests/support/kubeapi, which validates Events as kube-apiserver
does (``legacyValidateEvent``) and serves Pod objects; two real electors hand over, under
asyncio and trio. Read back the way a user reads them: raw GETs of the Events and the pods.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from ha.drivers.kubernetes.announce import ROLE
from ha.drivers.kubernetes.leaders import lease_name
from ha.election import Elector, State
from ha.testing import History, Recorder
from tests.support.backends.kubernetes import KubernetesBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PATH = "/web"


async def get(backend: KubernetesBackend, path: str) -> Any:
    async with httpx.AsyncClient(base_url=backend.server.url, trust_env=False) as client:
        answer = await client.get(f"/api/v1/namespaces/{backend.namespace}/{path}")
    assert answer.status_code == 200, answer.text
    return answer.json()


async def roles(backend: KubernetesBackend) -> dict[str, str | None]:
    pods = (await get(backend, "pods"))["items"]
    return {p["metadata"]["name"]: (p["metadata"].get("labels") or {}).get(ROLE) for p in pods}


async def messages(backend: KubernetesBackend) -> list[str]:
    found = (await get(backend, "events"))["items"]
    found.sort(key=lambda e: e["metadata"]["name"])  # LEASE.<nanoseconds in hex>: in order
    return [e["message"] for e in found if e["reason"] == "LeaderElection"]


async def until(check: Any, value: Any) -> None:
    with anyio.fail_after(20):
        while (await check()) != value:
            await anyio.sleep(0.05)


async def test_events_and_pod_roles_follow_a_handover(
    kubernetes_backend: KubernetesBackend,
) -> None:
    backend = kubernetes_backend
    for pod in ("pod-0", "pod-1"):
        body = {"metadata": {"name": pod, "labels": {"app": "myapp"}}, "spec": {"containers": []}}
        backend.server.request("POST", f"/api/v1/namespaces/{backend.namespace}/pods", body)
    history = History()
    da, db = backend.driver(pod="pod-0"), backend.driver(pod="pod-1")
    async with da, db, anyio.create_task_group() as tg:
        a, b = Elector(da, PATH, "pod-0"), Elector(db, PATH, "pod-1")
        tg.start_soon(a.run, Recorder("pod-0", history))
        first = await a.wait_active()
        tg.start_soon(b.run, Recorder("pod-1", history))
        await b.wait_state(State.STANDBY)
        await until(lambda: roles(backend), {"pod-0": "active", "pod-1": "standby"})
        await until(lambda: messages(backend), [f"pod-0 became leader (epoch {first.epoch})"])

        a.quit()  # a graceful handover
        second = await b.wait_active()
        await until(lambda: roles(backend), {"pod-0": "standby", "pod-1": "active"})
        await until(
            lambda: messages(backend),
            [
                f"pod-0 became leader (epoch {first.epoch})",
                f"pod-0 stopped leading (epoch {first.epoch})",
                f"pod-1 became leader (epoch {second.epoch})",
            ],
        )
        event = (await get(backend, "events"))["items"][-1]
        assert event["involvedObject"] == {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "name": lease_name(backend.root, PATH),
            "namespace": backend.namespace,
        }
        assert event["type"] == "Normal" and event["source"] == {"component": "ha"}
        assert event["reportingComponent"] == "ha"
        assert event["metadata"]["name"].startswith(lease_name(backend.root, PATH) + ".")
        b.quit()
        await b.wait_state(State.NEUTRAL)
        tg.cancel_scope.cancel()


async def test_a_driver_labels_its_pod_standby_from_its_start(
    kubernetes_backend: KubernetesBackend,
) -> None:
    """A container restarted in a pod labelled active (its process killed while it led) takes
    the label off before it can be Ready again."""
    backend = kubernetes_backend
    body = {"metadata": {"name": "pod-0", "labels": {ROLE: "active"}}, "spec": {"containers": []}}
    backend.server.request("POST", f"/api/v1/namespaces/{backend.namespace}/pods", body)
    async with backend.driver(pod="pod-0"):
        await until(lambda: roles(backend), {"pod-0": "standby"})
