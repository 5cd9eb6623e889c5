"""The FAKE API server's fault hooks and process life: injected 500/429/504/409, writes that
land but fail, delays, restart on the same port and state, SIGSTOP. Raw HTTP on asyncio and
trio; no real apiserver runs here."""

from __future__ import annotations

import httpx
import pytest

from tests.support.kubeapi.paths import config_maps, lease, leases
from tests.support.kubeapi.process import FakeKubeApi

pytestmark = pytest.mark.anyio


async def test_fail_the_next_requests(
    http: httpx.AsyncClient, kube_api: FakeKubeApi, kube_namespace: str
) -> None:
    kube_api.fail(2, 500)
    for _ in range(2):
        answer = await http.get(leases(kube_namespace))
        assert answer.status_code == 500 and answer.json()["reason"] == "InternalError"
    assert (await http.get(leases(kube_namespace))).status_code == 200


async def test_fail_only_matching_requests(
    http: httpx.AsyncClient, kube_api: FakeKubeApi, kube_namespace: str
) -> None:
    kube_api.fail(1, 429, verb="create", path="/leases", retry_after=3)
    # neither a list nor a ConfigMap create matches
    assert (await http.get(leases(kube_namespace))).status_code == 200
    body = {"metadata": {"name": "c"}}
    assert (await http.post(config_maps(kube_namespace), json=body)).status_code == 201
    throttled = await http.post(leases(kube_namespace), json=lease("l"))
    assert throttled.status_code == 429
    assert throttled.headers["retry-after"] == "3"
    assert throttled.json()["details"]["retryAfterSeconds"] == 3
    assert (await http.get(f"{leases(kube_namespace)}/l")).status_code == 404  # not carried out
    kube_api.fail(1, 403, verb="list")
    forbidden = await http.get(leases(kube_namespace))
    assert forbidden.status_code == 403 and forbidden.json()["reason"] == "Forbidden"
    kube_api.fail(1, 504, verb="PUT")
    created = (await http.post(leases(kube_namespace), json=lease("l"))).json()
    timed_out = await http.put(f"{leases(kube_namespace)}/l", json=created)
    assert timed_out.status_code == 504 and timed_out.json()["reason"] == "Timeout"


async def test_conflict_storm(
    http: httpx.AsyncClient, kube_api: FakeKubeApi, kube_namespace: str
) -> None:
    created = (await http.post(leases(kube_namespace), json=lease("l"))).json()
    kube_api.fail(3, 409, verb="update")
    url = f"{leases(kube_namespace)}/l"
    codes = [(await http.put(url, json=created)).status_code for _ in range(4)]
    assert codes == [409, 409, 409, 200]


async def test_applied_then_failed_is_an_unknown_outcome(
    http: httpx.AsyncClient, kube_api: FakeKubeApi, kube_namespace: str
) -> None:
    created = (await http.post(leases(kube_namespace), json=lease("l"))).json()
    kube_api.fail(1, 500, verb="update", apply=True)
    url = f"{leases(kube_namespace)}/l"
    changed = dict(created, spec={**created["spec"], "holderIdentity": "b"})
    assert (await http.put(url, json=changed)).status_code == 500
    # the write landed although its client was told it failed
    assert (await http.get(url)).json()["spec"]["holderIdentity"] == "b"


async def test_delay_makes_a_client_time_out_after_the_write_landed(
    http: httpx.AsyncClient, kube_api: FakeKubeApi, kube_namespace: str
) -> None:
    kube_api.delay(5, count=1, verb="create")
    with pytest.raises(httpx.ReadTimeout):
        await http.post(leases(kube_namespace), json=lease("l"), timeout=0.3)
    assert (await http.get(f"{leases(kube_namespace)}/l")).status_code == 200


async def test_stats_count_requests_per_verb(
    http: httpx.AsyncClient, kube_api: FakeKubeApi, kube_namespace: str
) -> None:
    before = kube_api.stats()
    await http.post(leases(kube_namespace), json=lease("l"))
    await http.get(f"{leases(kube_namespace)}/l")
    after = kube_api.stats()
    assert after["requests"]["create"] == before["requests"].get("create", 0) + 1
    assert after["requests"]["get"] == before["requests"].get("get", 0) + 1
    assert after["resourceVersion"] == before["resourceVersion"] + 1


async def test_admin_input_errors_are_400(http: httpx.AsyncClient) -> None:
    assert (await http.post("/_fake/fail", json={"code": "teapot"})).status_code == 400
    assert (await http.post("/_fake/nothing", json={})).status_code == 404
    assert (await http.get("/_fake/fail")).status_code == 405
