"""Who leads, as ``kubectl get lease`` shows it (``ha/drivers/kubernetes/leaders.py``).

Against the FAKE API server of tests/support/kubeapi (no real kube-apiserver runs here): the
Leases are read the way a Kubernetes user reads them, with a raw GET (httpx) and with
``kubectl get lease`` itself, which the fake serves tables to. The Lease is information only:
these tests check that it follows the election (the active's identity, its epoch, a fresh
renewTime), that a stale ex-leader never writes over a newer one, and that writing it never
holds up the election.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from ha.drivers.kubernetes.leaders import ANNOTATION, ELECTION, lease_name, overwritable
from ha.election import Elector, Lease
from ha.errors import ElectionFailed
from ha.testing import History, Recorder, faults
from tests.support.backends.kubernetes import KubernetesBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PATH = "/svc/Scheduler_1"
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


# --- the name and the overwrite rule (no server) ----------------------------------------------


def test_lease_names_are_dns_names_told_apart_by_the_exact_path() -> None:
    paths = ["/a-b", "/a/b", "/A/b", "/a_b", "/a.b", "/", "/" + "x" * 300, "/ü"]
    names = [lease_name("myapp", p) for p in paths]
    assert len(set(names)) == len(paths)
    for name in names:
        assert SUBDOMAIN.fullmatch(name) and len(name) <= 253, name
        assert name.startswith("myapp-ha-e-")
    assert lease_name("myapp", "/spark/dispatcher").startswith("myapp-ha-e-spark-dispatcher-")
    assert lease_name("myapp", "/a/b") == lease_name("myapp", "/a/b")  # stable


def _lease(path: str | None, holder: str | None, transitions: int) -> dict[str, Any]:
    annotations = {} if path is None else {ELECTION: path}
    spec: dict[str, Any] = {"leaseTransitions": transitions}
    if holder is not None:
        spec["holderIdentity"] = holder
    return {"metadata": {"annotations": annotations}, "spec": spec}


def test_only_an_older_epoch_or_our_own_is_written_over() -> None:
    assert overwritable(_lease("/p", "a", 3), "/p", "b", 4) is None  # older
    assert overwritable(_lease("/p", "b", 4), "/p", "b", 4) is None  # ours: a renewal
    assert overwritable(_lease("/p", None, 4), "/p", "b", 4) is None  # ours, released
    assert "newer" in str(overwritable(_lease("/p", "c", 5), "/p", "b", 4))
    assert "newer" in str(overwritable(_lease("/p", "c", 4), "/p", "b", 4))
    assert "not '/p'" in str(overwritable(_lease("/q", "a", 1), "/p", "b", 4))  # a collision
    assert "not '/p'" in str(overwritable(_lease(None, "a", 1), "/p", "b", 4))  # not ours


# --- against the fake -------------------------------------------------------------------------


@pytest.fixture
def backend(kubernetes_backend: KubernetesBackend) -> KubernetesBackend:
    return kubernetes_backend


def _url(backend: KubernetesBackend, path: str = PATH) -> str:
    namespace = backend.namespace
    name = lease_name(backend.root, path)
    return f"{backend.server.url}/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"


async def read_lease(
    backend: KubernetesBackend, path: str = PATH, *, listed: bool = False
) -> dict[str, Any] | None:
    """The Lease as a raw GET reads it, None while there is none. ``listed``: from a list
    by name (a URL that the faults aimed at the object's own leave alone)."""
    url = _url(backend, path)
    async with httpx.AsyncClient(trust_env=False) as client:
        if listed:
            collection, name = url.rsplit("/", 1)
            selector = {"fieldSelector": f"metadata.name={name}"}
            items = (await client.get(collection, params=selector)).json()["items"]
            return items[0] if items else None
        response = await client.get(url)
    if response.status_code == 404:
        return None
    assert response.status_code == 200, response.text
    lease: dict[str, Any] = response.json()
    return lease


async def shown(
    backend: KubernetesBackend, holder: str, above: int = -1, *, listed: bool = False
) -> dict[str, Any]:
    """Wait until the Lease shows ``holder`` with an epoch above ``above``; the Lease."""
    while True:
        lease = await read_lease(backend, listed=listed)
        spec = (lease or {}).get("spec") or {}
        if spec.get("holderIdentity") == holder and spec.get("leaseTransitions", -1) > above:
            assert lease is not None
            return lease
        await anyio.sleep(0.05)


SESSION = 1.0  # seconds (on 2 busy cores leaders may flip: the tests allow for it)


@asynccontextmanager
async def contender(
    backend: KubernetesBackend, identity: str, history: History
) -> AsyncIterator[Elector]:
    """An elector on a driver of its own, running in the background while the block runs."""
    async with backend.driver(session_timeout=SESSION) as driver:
        elector = Elector(driver, PATH, identity)
        async with anyio.create_task_group() as tg:
            await tg.start(_run, elector, Recorder(identity, history))
            yield elector
            elector.quit()


async def _run(elector: Elector, recorder: Recorder, *, task_status: Any) -> None:
    try:
        await elector.run(recorder, task_status=task_status)
    except ElectionFailed:  # its driver crashed (a fault of the test)
        pass


async def leader(*electors: Elector) -> tuple[Elector, Lease]:
    """The first of ``electors`` found active, and its lease."""
    while True:
        for elector in electors:
            if (lease := elector.lease) is not None:
                return elector, lease
        await anyio.sleep(0.02)


def active_of(history: History, epoch: int) -> str:
    """Who was active with ``epoch`` (the verdict from the contenders' own records)."""
    (who,) = {e.identity for e in history.events if e.kind == "start" and e.epoch == epoch}
    return who


async def shown_after(backend: KubernetesBackend, history: History, epoch: int) -> dict[str, Any]:
    """Wait until the Lease shows a holder with ``epoch`` or a later one; check that it names
    the contender that was active with the epoch it shows. The Lease."""
    while True:
        lease = await read_lease(backend)
        spec = (lease or {}).get("spec") or {}
        if spec.get("holderIdentity") and spec.get("leaseTransitions", -1) >= epoch:
            assert lease is not None
            assert spec["holderIdentity"] == active_of(history, spec["leaseTransitions"])
            return lease
        await anyio.sleep(0.05)


async def kubectl_shows(backend: KubernetesBackend, holder: str) -> None:
    """Wait until ``kubectl get lease -o wide`` shows a holder matching ``holder``. A leader on
    busy cores may pass its local deadline and clear the Lease for a moment before it is made
    active again (the test's fail_after bounds the wait)."""
    while not re.search(holder, await kubectl_wide(backend)):
        await anyio.sleep(0.05)


async def kubectl_wide(backend: KubernetesBackend) -> str:
    name = lease_name(backend.root, PATH)
    command = ["kubectl", "--kubeconfig", str(backend.kubeconfig), "get", "lease", name]
    done = await anyio.run_process([*command, "-o", "wide"])
    return done.stdout.decode()


async def test_the_lease_follows_a_handover_and_a_crash_failover(
    backend: KubernetesBackend,
) -> None:
    history = History()
    with anyio.fail_after(40):
        async with (
            contender(backend, "pod-a", history) as a,
            contender(backend, "pod-b", history) as b,
        ):
            one, first = await leader(a, b)
            lease = await shown_after(backend, history, first.epoch)
            spec = lease["spec"]
            assert spec["leaseDurationSeconds"] == SESSION
            record = json.loads(lease["metadata"]["annotations"][ANNOTATION])
            assert record["holderIdentity"] == spec["holderIdentity"]
            assert record["leaderTransitions"] == spec["leaseTransitions"]
            assert record["leaseDurationSeconds"] == SESSION
            assert set(record) == {
                "holderIdentity",
                "leaseDurationSeconds",
                "acquireTime",
                "renewTime",
                "leaderTransitions",
            }
            while (again := await shown_after(backend, history, first.epoch))["spec"] == spec:
                await anyio.sleep(0.05)  # renewed while it leads: a new renewTime
            if again["spec"]["leaseTransitions"] == spec["leaseTransitions"]:
                assert again["spec"]["renewTime"] > spec["renewTime"]
            if shutil.which("kubectl"):
                await kubectl_shows(backend, r"\bpod-[ab]\b")

            async with contender(backend, "pod-c", history) as c:
                one.quit()  # a graceful handover to the other, the next in the queue
                two, second = await leader(*(e for e in (a, b) if e is not one))
                assert second.epoch > first.epoch
                await shown_after(backend, history, second.epoch)

                await faults(two.driver).crash()  # it dies: pod-c takes over once it expires
                _, third = await leader(c)
                assert third.epoch > second.epoch
                lease = await shown_after(backend, history, third.epoch)
                assert lease["spec"]["holderIdentity"] == "pod-c"
                if shutil.which("kubectl"):
                    await kubectl_shows(backend, r"\bpod-c\b")


async def test_a_stale_ex_leader_never_overwrites_a_newer_holder(
    backend: KubernetesBackend,
) -> None:
    with anyio.fail_after(20):
        async with (
            backend.driver(session_timeout=1.0) as old,  # no elector: renewals only
            backend.driver(session_timeout=1.0) as new,
            backend.driver(session_timeout=1.0) as late,
        ):
            old.show_leader(PATH, b"pod-old", 5)
            await shown(backend, "pod-old")
            new.show_leader(PATH, b"pod-new", 9)
            await shown(backend, "pod-new")
            # the old one's renewal or release carries the version it last wrote: refused
            # (409); a renewal then re-reads, sees epoch 9 and stops. One that never wrote
            # reads first and does not write.
            old.hide_leader(PATH, 5)  # (or its renewal came first: either must not land)
            late.show_leader(PATH, b"pod-late", 7)
            while PATH in old._leaders.terms or PATH in late._leaders.terms:
                await anyio.sleep(0.05)
            renewals = 0
            last = ""
            while renewals < 2:  # two of pod-new's renewals, and nothing else
                lease = await read_lease(backend)
                assert lease is not None
                assert lease["spec"]["holderIdentity"] == "pod-new"
                assert lease["spec"]["leaseTransitions"] == 9
                if lease["spec"]["renewTime"] != last:
                    renewals, last = renewals + 1, lease["spec"]["renewTime"]
                await anyio.sleep(0.05)
            new.hide_leader(PATH, 9)  # the holder's own release clears the holder
            while (lease := await read_lease(backend)) and lease["spec"].get("holderIdentity"):
                await anyio.sleep(0.05)
            assert lease is not None and lease["spec"]["leaseTransitions"] == 9


async def test_a_release_never_creates_a_deleted_lease_anew(backend: KubernetesBackend) -> None:
    """A Lease is created by a PUT when there is none (the Lease strategy allows create on
    update), so a release written after someone deleted the Lease would bring it back, empty.
    Every write carries the uid of the Lease it read or wrote: the server refuses it (409)
    and the deleted Lease stays deleted."""
    server = backend.server
    name = lease_name(backend.root, PATH)
    url = _url(backend).removeprefix(server.url)
    with anyio.fail_after(20):
        async with backend.driver(session_timeout=1.0) as driver:  # no elector: writes only
            driver.show_leader(PATH, b"pod-a", 3)
            await shown(backend, "pod-a")
            server.fail(None, 503, verb="update", path=name)  # the release cannot land yet
            try:
                driver.hide_leader(PATH, 3)
                assert server.request("DELETE", url)[0] == 200  # a user deletes the Lease
            finally:
                server.reset_faults()
            while PATH in driver._leaders.terms:  # released: tried again until done
                await anyio.sleep(0.05)
            assert await read_lease(backend) is None


async def test_writing_the_lease_never_holds_up_the_election(
    backend: KubernetesBackend, caplog: pytest.LogCaptureFixture
) -> None:
    server = backend.server
    name = lease_name(backend.root, PATH)
    history = History()
    caplog.set_level(logging.WARNING, "ha.drivers.kubernetes")

    def warned() -> list[str]:
        return [r.getMessage() for r in caplog.records if "could not show the leader" in r.msg]

    try:
        with anyio.fail_after(20):
            # refused (RBAC, say): every read of the Lease fails; the election goes on, the
            # failure is logged once, and the Lease comes once the API server lets it
            server.fail(None, 403, verb="get", path=name)
            async with contender(backend, "pod-a", history) as a:
                await a.wait_active()
                while not warned():
                    await anyio.sleep(0.02)
                assert await read_lease(backend, listed=True) is None
                server.reset_faults()
                server.fail(2, 403, verb="get", path=name)  # two more, said nothing of
                await shown(backend, "pod-a", listed=True)
            terms = [e for e in history.events if e.kind == "start" and e.identity == "pod-a"]
            assert 1 <= len(warned()) <= len(terms), warned()  # once a term
            assert "forbid" in warned()[0].lower()

            # slow: every read of the Lease is answered long after the driver gave up on it
            server.delay(5.0, verb="get", path=name)
            async with contender(backend, "pod-b", history) as b:
                await b.wait_active()
                lease = await read_lease(backend, listed=True)
                assert lease is not None and lease["spec"].get("holderIdentity") != "pod-b"
                server.reset_faults()
                await shown(backend, "pod-b", listed=True)
    finally:
        server.reset_faults()
