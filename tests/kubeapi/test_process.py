"""The FAKE API server as a process: restart on the same port and state (SIGKILL, then start
again), SIGSTOP. These test the process, not an event loop, so they run once, synchronously.
No real apiserver runs here."""

from __future__ import annotations

import httpx
import pytest

from tests.support.kubeapi.paths import config_maps, lease, leases
from tests.support.kubeapi.process import FakeKubeApi


def test_restart_keeps_objects_and_versions(private_kube_api: FakeKubeApi) -> None:
    server = private_kube_api
    port = server.port
    with httpx.Client(base_url=server.url) as http:
        created = http.post(leases("default"), json=lease("l")).json()
        body = dict(created, spec={**created["spec"], "holderIdentity": "b"})
        updated = http.put(f"{leases('default')}/l", json=body).json()
        http.post(config_maps("default"), json={"metadata": {"name": "gone"}})
        http.delete(f"{config_maps('default')}/gone")
        before = http.get(config_maps("default")).json()["metadata"]["resourceVersion"]
    for _ in range(2):  # twice: the second start reads the first one's snapshot and log
        server.restart()  # SIGKILL, then start on the same port and state file
        assert server.port == port
        # a new client: the old one's kept-alive connection died with the server
        with httpx.Client(base_url=server.url) as http:
            got = http.get(f"{leases('default')}/l")
            assert got.status_code == 200 and got.json() == updated
            assert http.get(f"{config_maps('default')}/gone").status_code == 404
            listed = http.get(config_maps("default")).json()
            assert listed["metadata"]["resourceVersion"] == before
            # the counter goes on from where it was
            fresh = {"metadata": {"generateName": "c"}}
            other = http.post(config_maps("default"), json=fresh).json()
            assert int(other["metadata"]["resourceVersion"]) == int(before) + 1
            before = other["metadata"]["resourceVersion"]
            # the watch history is gone: watching from before the restart's version is 410
            stale = http.get(
                leases("default"),
                params={"watch": "true", "resourceVersion": created["metadata"]["resourceVersion"]},
            )
            assert stale.json()["object"]["code"] == 410


def test_paused_server_answers_nothing_until_resumed(private_kube_api: FakeKubeApi) -> None:
    server = private_kube_api
    with httpx.Client(base_url=server.url) as http:
        server.pause()
        try:
            with pytest.raises(httpx.TimeoutException):
                http.get(leases("default"), timeout=0.3)
        finally:
            server.resume()
        assert http.get(leases("default"), timeout=10).status_code == 200
