"""The Kubernetes driver's own behaviour, against a FAKE API server.

No real kube-apiserver can run on these machines: every test here talks HTTP to the fake of
tests/support/kubeapi, a process of its own that follows the API server's semantics for
ConfigMaps and Leases (resourceVersion and uid preconditions, a Lease created by a PUT,
404/409/410/422, watches and their resumption) and injects faults the way client-go's fake
clientset reactors do. What the driver shares with every backend is in test_contract.py and
test_faults.py; here: its errors in one line, 409 storms, a watch resumed past the server's
history (410), peers reaping a silent session, a late renewal after the reap, a renewal
refused, writes whose answer is lost, and a restart of the server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import ha
import ha.drivers
from ha.drivers.base import ConnectionState, NodeEvent, NodeEventKind
from ha.drivers.kubernetes import KubernetesDriver
from ha.errors import (
    AccessDenied,
    BadVersion,
    ConfigurationError,
    ConnectionLost,
    CorruptData,
    DriverError,
    Unavailable,
)
from ha.testing import faults
from tests.support.backends.kubernetes import KubernetesBackend, KubernetesNet, write_kubeconfig
from tests.support.harness import cluster, wait_for
from tests.support.kubeapi.process import FakeKubeApi

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

S = ConnectionState
WAIT = 15.0  # a hang guard, never a latency check


async def wait_until(condition: Any) -> None:
    with anyio.fail_after(WAIT):
        while not condition():
            await anyio.sleep(0.01)


def states(driver: KubernetesDriver) -> list[ConnectionState]:
    seen: list[ConnectionState] = []
    driver.subscribe(None, lambda event: seen.append(event.state))
    return seen


def lease_path(backend: KubernetesBackend, driver: KubernetesDriver) -> str:
    assert driver.session_id is not None
    name = driver.settings.lease(driver.session_id)
    return f"/apis/coordination.k8s.io/v1/namespaces/{backend.namespace}/leases/{name}"


# --- errors in one line -------------------------------------------------------------------------


async def test_an_unreachable_server_is_unavailable_in_one_line(tmp_path: Any) -> None:
    config = write_kubeconfig(tmp_path, "http://127.0.0.1:9")  # nothing listens there
    driver = ha.drivers.connect(f"k8s://ns/app?kubeconfig={config}", connect_timeout=0.3)
    with pytest.raises(
        Unavailable, match=r"could not reach the Kubernetes API at http://127.0.0.1:9"
    ) as info:
        await driver.start()
    assert "\n" not in str(info.value)


async def test_rbac_refusals_name_the_verb_and_the_resource(
    kubernetes_backend: KubernetesBackend,
) -> None:
    server, ns = kubernetes_backend.server, kubernetes_backend.namespace
    server.fail(1, 403, verb="create", path=f"/namespaces/{ns}/leases")
    with pytest.raises(AccessDenied, match=f"denied create on leases in namespace {ns} \\(403"):
        await kubernetes_backend.driver().start()
    server.fail(1, 401, verb="get", path=f"/namespaces/{ns}/configmaps")
    with pytest.raises(AccessDenied, match="denied get on configmaps .*credentials were refused"):
        await kubernetes_backend.driver().start()
    async with kubernetes_backend.driver() as driver:
        server.fail(1, 403, verb="update", path=f"/namespaces/{ns}/configmaps")
        with pytest.raises(AccessDenied, match="denied update on configmaps"):
            await driver.create("/x")
        await driver.create("/x")  # the next one goes through


async def test_a_missing_namespace_is_a_configuration_error(
    kubernetes_backend: KubernetesBackend,
) -> None:
    url = kubernetes_backend.url().replace(kubernetes_backend.namespace, "no-such-ns", 1)
    with pytest.raises(ConfigurationError, match="namespace 'no-such-ns' does not exist"):
        await KubernetesDriver.from_url(url).start()


async def test_a_foreign_configmap_under_our_name_is_corrupt_data(
    kubernetes_backend: KubernetesBackend,
) -> None:
    backend = kubernetes_backend
    body = {"metadata": {"name": f"{backend.root}-ha"}, "data": {"color": "blue"}}
    status, _ = backend.server.request(
        "POST", f"/api/v1/namespaces/{backend.namespace}/configmaps", body
    )
    assert status == 201
    with pytest.raises(CorruptData, match="does not hold an ha tree") as info:
        await backend.driver().start()
    assert "\n" not in str(info.value)


async def test_the_one_mebibyte_limit_is_a_clear_error_and_nothing_is_written(
    kubernetes_backend: KubernetesBackend,
) -> None:
    async with kubernetes_backend.driver() as driver:
        await driver.create("/small", b"x" * 1000)
        with pytest.raises(DriverError, match="over the 1 MiB a Kubernetes ConfigMap may hold"):
            await driver.create("/big", b"x" * (1024 * 1024))
        assert await driver.exists("/big") is None
        await driver.set("/small", b"still works")


# --- conflicts ----------------------------------------------------------------------------------


async def test_a_409_storm_is_re_read_and_re_checked(kubernetes_backend: KubernetesBackend) -> None:
    """Five sessions increment one counter by compare-and-set while the server also refuses
    some writes with 409: each conflict is read again, and only a real version mismatch
    reaches the caller (as BadVersion, retried here by the caller)."""
    backend = kubernetes_backend
    backend.server.fail(10, 409, verb="update", path=f"/namespaces/{backend.namespace}/configmaps")
    drivers = [backend.driver() for _ in range(5)]
    mismatches = 0
    async with drivers[0] as first:
        await first.create("/counter", b"0")
        for driver in drivers[1:]:
            await driver.start()
        try:

            async def bump(driver: KubernetesDriver, times: int) -> None:
                nonlocal mismatches
                for _ in range(times):
                    while True:
                        data, stat = await driver.get("/counter")
                        try:
                            await driver.set("/counter", b"%d" % (int(data) + 1), stat.version)
                            break
                        except BadVersion:
                            mismatches += 1

            async with anyio.create_task_group() as tg:
                for driver in drivers:
                    tg.start_soon(bump, driver, 6)
        finally:
            for driver in drivers[1:]:
                await driver.aclose()
        data, stat = await first.get("/counter")
    assert int(data) == 30 and stat.version == 30  # every increment landed once
    assert backend.server.stats()["requests"]  # the storm reached the server


async def test_a_write_whose_answer_is_lost_may_have_landed(
    kubernetes_backend: KubernetesBackend,
) -> None:
    backend = kubernetes_backend
    async with backend.driver() as driver:
        backend.server.fail(
            1, 500, verb="update", path=f"/namespaces/{backend.namespace}/", apply=True
        )
        with pytest.raises(ConnectionLost):
            await driver.create("/maybe", b"1")
        assert await driver.exists("/maybe") is not None  # it did land: outcome unknown


# --- watches ------------------------------------------------------------------------------------


async def test_a_watch_resumed_past_the_history_re_reads_and_diffs(
    kubernetes_private: KubernetesBackend,
) -> None:
    """The watch of a cut-off driver resumes from a resourceVersion the server has compacted
    away: 410 Expired, then the tree read again and the difference reported."""
    backend = kubernetes_private
    async with backend.driver() as watcher, backend.driver() as writer:
        await writer.create("/x", b"0")
        await writer.create("/gone")
        events: list[NodeEvent] = []
        for path in ("/x", "/gone", "/new"):
            watcher.subscribe(path, events.append)
        await watcher.exists("/x")
        await writer.set("/x", b"1")
        await wait_until(lambda: NodeEvent("/x", NodeEventKind.CHANGED) in events)
        faults(watcher).partition()
        await writer.set("/x", b"2")
        await writer.delete("/gone")
        await writer.create("/new")
        backend.server.compact()
        events.clear()
        faults(watcher).heal()
        await wait_until(lambda: len(events) >= 3)
        assert sorted(events, key=lambda e: e.path) == [
            NodeEvent("/gone", NodeEventKind.DELETED),
            NodeEvent("/new", NodeEventKind.CREATED),
            NodeEvent("/x", NodeEventKind.CHANGED),
        ]
        assert watcher.resyncs >= 1
        await writer.set("/x", b"3")  # and the watch goes on from the fresh version
        await wait_until(lambda: len(events) >= 4)
        assert events[3] == NodeEvent("/x", NodeEventKind.CHANGED)


async def test_a_change_after_subscribe_survives_a_410_that_found_the_watch_behind(
    kubernetes_private: KubernetesBackend,
) -> None:
    """Found by the server-restart test (1 run in 10): the watch had not yet read a node's
    creation when the server lost its history, so the re-read after the 410 knew the node
    only as new and reported CREATED alone; the change written after ``subscribe``, which
    a driver never misses, was gone. Here the watch is held behind by a partition and the
    history compacted away: the re-read must report CREATED, then CHANGED."""
    backend = kubernetes_private
    async with backend.driver() as watcher, backend.driver() as writer:
        await watcher.exists("/")
        faults(watcher).partition()
        await wait_until(watcher._watches.stream_ended.is_set)  # its watch reads nothing more
        await writer.create("/p", b"0")
        events: list[NodeEvent] = []
        watcher.subscribe("/p", events.append)  # after the creation, before the change
        await writer.set("/p", b"1")
        backend.server.compact()
        faults(watcher).heal()
        await wait_until(lambda: bool(events))  # a re-read reports all it found at once
        assert watcher.resyncs >= 1
        assert events == [
            NodeEvent("/p", NodeEventKind.CREATED),
            NodeEvent("/p", NodeEventKind.CHANGED),
        ]


async def test_one_410_costs_one_re_read_when_another_object_was_written_last(
    kubernetes_private: KubernetesBackend,
) -> None:
    """The server's history after a restart (or a compaction) starts at its newest version,
    which any write of another object (a Lease renewal) puts past the tree's own. The
    re-read used to GET the tree and resume from the tree's version: 410 again, re-read
    again, dozens of times a second until the tree was next written (63 in a second here,
    from each driver, just as the server came back). Now the re-read is a watch from the
    current state, and the changes after it follow on that watch."""
    backend = kubernetes_private
    async with backend.driver() as watcher, backend.driver() as writer:
        await watcher.exists("/")
        faults(watcher).partition()
        await wait_until(watcher._watches.stream_ended.is_set)
        await writer.create("/x", b"0")
        events: list[NodeEvent] = []
        watcher.subscribe("/x", events.append)
        configmaps = f"/api/v1/namespaces/{backend.namespace}/configmaps"
        status, _ = backend.server.request("POST", configmaps, {"metadata": {"name": "not-ha"}})
        assert status == 201  # written after the tree: the history will start past the tree
        backend.server.compact()
        faults(watcher).heal()
        await wait_until(lambda: bool(events))
        await writer.set("/x", b"1")
        await wait_until(lambda: len(events) >= 2)
        assert events == [
            NodeEvent("/x", NodeEventKind.CREATED),
            NodeEvent("/x", NodeEventKind.CHANGED),
        ]
        assert watcher.resyncs == 1


async def test_a_re_read_after_a_410_tells_events_in_the_order_of_the_writes(
    kubernetes_private: KubernetesBackend,
) -> None:
    """As test_contract's order test, across a 410: a pause written before the leader's exit
    must be heard of first (a standby acts on the order: c0e73ce), though the re-read finds
    only the end state. The last write's paths used to come first, then the others by name:
    /other, /leader (the exit), /pause."""
    backend = kubernetes_private
    async with backend.driver() as watcher, backend.driver() as writer:
        events: list[NodeEvent] = []
        for path in ("/pause", "/leader", "/other"):
            watcher.subscribe(path, events.append)
        await writer.create("/leader")
        await writer.create("/other")
        await wait_until(lambda: len(events) == 2)  # the watch has caught up
        events.clear()
        faults(watcher).partition()
        await wait_until(watcher._watches.stream_ended.is_set)
        await writer.create("/pause")
        await writer.set("/other", b"1")
        await writer.delete("/leader")
        await writer.set("/other", b"2")
        backend.server.compact()
        faults(watcher).heal()
        await wait_until(lambda: bool(events))
        assert events == [
            NodeEvent("/pause", NodeEventKind.CREATED),
            NodeEvent("/other", NodeEventKind.CHANGED),
            NodeEvent("/leader", NodeEventKind.DELETED),
        ]


async def test_watches_closed_by_the_server_resume_without_losing_an_event(
    kubernetes_backend: KubernetesBackend,
) -> None:
    backend = kubernetes_backend
    async with backend.driver() as watcher, backend.driver() as writer:
        events: list[NodeEvent] = []
        watcher.subscribe("/x", events.append)
        await writer.create("/x", b"0")
        # the watch has caught up once it told the creation (subscribed after it, the watch
        # could still be behind, and deliver that CREATED from before subscribe: 1 run in 10)
        await wait_until(lambda: bool(events))
        assert events == [NodeEvent("/x", NodeEventKind.CREATED)]
        events.clear()
        for round_ in range(1, 4):
            backend.server.close_watches(abrupt=round_ % 2 == 0)
            await writer.set("/x", b"%d" % round_)
            await wait_until(lambda: len(events) >= round_)  # noqa: B023
        assert events == [NodeEvent("/x", NodeEventKind.CHANGED)] * 3
        assert watcher.resyncs == 0  # resumed from its version: no re-read needed


# --- sessions -----------------------------------------------------------------------------------


async def test_a_silent_session_is_reaped_by_an_observer(
    kubernetes_backend: KubernetesBackend,
) -> None:
    """A crashed client's Lease is timed by its peer on the peer's own clock, deleted with a
    precondition, and its ephemeral nodes struck off the tree (client-go style expiry)."""
    backend = kubernetes_backend
    async with backend.driver(session_timeout=1.0) as observer:
        owner = backend.driver(session_timeout=1.0)
        await owner.start()
        await owner.create("/e", ephemeral=True)
        path = lease_path(backend, owner)
        contact = owner.last_contact
        await faults(owner).crash()
        await wait_until(lambda: observer.reaped >= 1)
        assert anyio.current_time() >= contact + owner.session_timeout
        assert await observer.exists("/e") is None
        assert backend.server.request("GET", path)[0] == 404  # its Lease is gone
        tree = await observer._store.read()
        assert owner.session_id not in tree.sessions  # struck off: no late create can land
        await owner.aclose()


async def test_a_renewal_refused_by_409_is_an_expiry(kubernetes_backend: KubernetesBackend) -> None:
    """Someone else wrote our Lease (another holder took it): the renewal's 409, then a read
    showing another holder, end the session; its ephemeral nodes go and a new session opens."""
    backend = kubernetes_backend
    async with backend.driver(session_timeout=1.0) as driver, backend.driver() as observer:
        seen = states(driver)
        old = driver.session_id
        await driver.create("/e", ephemeral=True)
        path = lease_path(backend, driver)
        status, lease = backend.server.request("GET", path)
        lease["spec"]["holderIdentity"] = "someone-else"
        assert backend.server.request("PUT", path, lease)[0] == 200
        await wait_until(lambda: S.CONNECTED in seen)
        assert seen[:2] == [S.EXPIRED, S.CONNECTED]
        assert driver.session_id not in (None, old)
        with anyio.fail_after(WAIT):
            while await observer.exists("/e") is not None:
                await anyio.sleep(0.01)
        await driver.create("/e", ephemeral=True)  # in the new session
        stat = await observer.exists("/e")
        assert stat is not None and stat.ephemeral_owner == driver.session_id


async def test_a_renewal_whose_answer_was_lost_keeps_the_session(
    kubernetes_backend: KubernetesBackend,
) -> None:
    """A renewal that landed but whose answer was lost leaves a stale resourceVersion: the
    next renewal's 409 is followed by a read showing the Lease still ours, and it goes on."""
    backend = kubernetes_backend
    async with backend.driver(session_timeout=1.0) as driver:
        seen = states(driver)
        session = driver.session_id
        path = lease_path(backend, driver).split("/namespaces/")[1]
        backend.server.fail(1, 500, verb="update", path=path, apply=True)
        before = driver.last_contact
        await wait_until(lambda: driver.last_contact > before + driver.session_timeout)
        assert driver.session_id == session and S.EXPIRED not in seen


async def test_a_late_renewal_never_brings_back_a_reaped_session(
    kubernetes_backend: KubernetesBackend,
) -> None:
    """Issue 27: a holder cut off past its session (a partition, or a pause: its renewals go
    unanswered) is reaped by a peer, its Lease deleted and its session struck off the tree.
    Back, its late renewal reaches a server that creates a missing Lease on a PUT (Leases
    allow create on update): the renewal's uid precondition must refuse it (409), and the
    holder must see EXPIRED and open a new session, never RECONNECTED to the struck-off one.
    (Before the fix the renewal re-created the Lease, 201, and the next one reconnected.)"""
    backend = kubernetes_backend
    async with backend.driver(session_timeout=1.0) as observer:
        async with backend.driver(session_timeout=1.0) as holder:
            seen = states(holder)
            old = holder.session_id
            await holder.create("/e", ephemeral=True)
            path = lease_path(backend, holder)
            faults(holder).partition()
            await wait_until(lambda: observer.reaped >= 1)
            assert backend.server.request("GET", path)[0] == 404
            assert old not in (await observer._store.read()).sessions
            faults(holder).heal()
            await wait_until(lambda: S.CONNECTED in seen or S.RECONNECTED in seen)
            assert seen == [S.DISCONNECTED, S.EXPIRED, S.CONNECTED]
            assert holder.session_id not in (None, old)
            assert backend.server.request("GET", path)[0] == 404  # never created anew
            await holder.create("/e", ephemeral=True)  # in the new session
            stat = await observer.exists("/e")
            assert stat is not None and stat.ephemeral_owner == holder.session_id


async def test_an_active_whose_renewals_were_refused_until_reaped_rejoins(
    private_kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    """Issue 27, through the elector: the fake refuses the active's renewals (503, its fault
    hooks) until a peer has reaped its session and leads, then lets them through. The late
    renewal must not re-create the reaped Lease: the old active sees EXPIRED, opens a new
    session and rejoins as a standby. Before the fix ``Elector.run`` raised "the Kubernetes
    session is gone" (a reconnection to the session struck off the tree)."""
    net = KubernetesNet(private_kube_api, tmp_path)
    async with cluster(net) as c:
        a = await c.add("a")
        await wait_for(c.settled)
        b = await c.add("b")
        await wait_for(lambda: b.state is ha.State.STANDBY)
        seen = states(a.driver)
        old = a.driver.session_id
        path = lease_path(net.backend, a.driver)
        private_kube_api.fail(None, 503, verb="update", path=path.split("/namespaces/")[1])
        try:
            await wait_for(lambda: b.state is ha.State.ACTIVE, within=WAIT)
            assert private_kube_api.request("GET", path)[0] == 404  # reaped
        finally:
            private_kube_api.reset_faults()

        def rejoined() -> bool:
            return a.state is ha.State.STANDBY and a.driver.session_id != old

        await wait_for(lambda: rejoined() or a.done.is_set(), within=WAIT)
        assert a.error is None and rejoined()
        assert S.EXPIRED in seen and S.RECONNECTED not in seen
        assert [n.name for n in c.active()] == ["b"]


async def test_closing_deletes_the_lease_and_the_ephemeral_nodes(
    kubernetes_backend: KubernetesBackend,
) -> None:
    backend = kubernetes_backend
    async with backend.driver() as observer:
        async with backend.driver() as driver:
            await driver.create("/e", ephemeral=True)
            path = lease_path(backend, driver)
            assert backend.server.request("GET", path)[0] == 200
        assert backend.server.request("GET", path)[0] == 404
        assert await observer.exists("/e") is None


async def test_a_close_in_a_cancelled_scope_still_clears_the_session(
    kubernetes_backend: KubernetesBackend,
) -> None:
    """Found by the chaos rounds (an unclosed socket after the harness cancelled its observer):
    a driver closed while its caller is being cancelled (``async with`` under a cancelled
    scope) still ends its watch, deletes its Lease, strikes its ephemeral nodes and closes
    its connections, as a close outside a cancelled scope does."""
    backend = kubernetes_backend
    async with backend.driver() as observer:
        driver = backend.driver()
        with anyio.CancelScope() as scope:
            async with driver:
                await driver.create("/e", ephemeral=True)
                await driver.exists("/e")  # its watch is reading
                path = lease_path(backend, driver)
                scope.cancel()
                await anyio.sleep_forever()
        assert driver.session_id is None
        assert backend.server.request("GET", path)[0] == 404  # not left to the reapers
        assert await observer.exists("/e") is None


# --- the server ---------------------------------------------------------------------------------


# It failed 1 run in 10 (the CHANGED written after the restart not seen) until the re-read
# after a 410 reported a change behind a creation the watch had missed: reproduced every time
# by test_a_change_after_subscribe_survives_a_410_that_found_the_watch_behind.
async def test_a_restart_of_the_server_keeps_session_nodes_and_events(
    kubernetes_private: KubernetesBackend,
) -> None:
    """The fake killed and started again on its state (as a control plane whose etcd lives
    on): the driver reconnects within its session, its nodes are there, its watch resumes
    (by re-reading: the restarted server has no history)."""
    backend = kubernetes_private
    async with backend.driver(session_timeout=2.0) as driver:
        seen = states(driver)
        session = driver.session_id
        await driver.create("/e", ephemeral=True)
        await driver.create("/p", b"0")
        events: list[NodeEvent] = []
        driver.subscribe("/p", events.append)
        await driver.exists("/p")
        await anyio.to_thread.run_sync(backend.server.restart)
        await driver.set("/p", b"1")
        await wait_until(lambda: NodeEvent("/p", NodeEventKind.CHANGED) in events)
        assert driver.session_id == session and S.EXPIRED not in seen
        assert (await driver.exists("/e")) is not None


async def test_a_paused_server_disconnects_then_the_session_goes_on(
    kubernetes_private: KubernetesBackend,
) -> None:
    """SIGSTOP for less than the session: renewals go unanswered (DISCONNECTED), then the
    thawed server answers them (RECONNECTED) and nobody expired the session meanwhile."""
    backend = kubernetes_private
    async with backend.driver(session_timeout=2.0) as driver:
        seen = states(driver)
        session = driver.session_id
        backend.server.pause()
        try:
            await wait_until(lambda: S.DISCONNECTED in seen)
        finally:
            backend.server.resume()
        await wait_until(lambda: S.RECONNECTED in seen)
        assert driver.session_id == session and seen == [S.DISCONNECTED, S.RECONNECTED]
        assert (await driver.exists("/")) is not None
