"""What only the etcd driver does: its URL, an unreachable cluster, the granted TTL, endpoint
failover, a compacted watch, foreign data, nodes etcd writes once per transaction, a server
restart. The driver contract itself is tested in test_contract.py (backend ``etcd``).

Every test runs under asyncio and trio against a real etcd (tests/support/backends/etcd.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import ha.drivers
from ha.drivers.base import ConnectionState, Create, Delete, NodeEvent, NodeEventKind, SetData
from ha.drivers.etcd import EtcdDriver
from ha.drivers.etcd.watches import _UNKNOWN
from ha.errors import (
    AccessDenied,
    ConfigurationError,
    ConnectionLost,
    CorruptData,
    NoNode,
    NotEmpty,
    TransactionFailed,
    Unavailable,
)
from ha.testing import faults
from tests.support.backends.etcd import EtcdBackend, EtcdCluster, EtcdServer, make_certs
from tests.support.backends.zookeeper import free_port
from tests.support.etcd_calls import transactions

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

CREATED, CHANGED, DELETED = NodeEventKind.CREATED, NodeEventKind.CHANGED, NodeEventKind.DELETED


class Seen:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def __call__(self, event: Any) -> None:
        self.events.append(event)

    async def until(self, count: int, within: float = 15.0) -> list[Any]:
        with anyio.fail_after(within):
            while len(self.events) < count:
                await anyio.sleep(0.01)
        return self.events


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("etcd:///prefix", "no etcd endpoints"),
        ("etcd://h1:2379,h2:0/p", "malformed etcd endpoint 'h2:0'"),
        ("etcd://h1:99999", "malformed etcd endpoint"),
        ("etcd://[::1/p", "malformed"),
        ("etcd://h1/a//b", "empty segment"),
        ("etcd://h1/p?nope=1", "unknown option 'nope'"),
        ("etcd://h1/p?session_timeout=soon", "session_timeout must be a number"),
        ("etcd://h1/p?session_timeout=0", "positive"),
        ("etcd://h1/p?user=me", "need both user and password"),
        ("etcd://me@h1/p", "USER:PASSWORD@HOST"),
        ("etcd://h1/p?key=/k.pem", "needs cert"),
        ("zk://h1/p", "expected etcd://"),
    ],
)
def test_url_errors_are_one_clear_line(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as error:
        EtcdDriver.from_url(url)
    assert "\n" not in str(error.value)


def test_url_parts_and_options() -> None:
    driver = EtcdDriver.from_url(
        "etcd://me:s%40cret@10.0.0.1,[::1]:2380/app/ha?session_timeout=5&op_timeout=1",
        connect_timeout=2,
    )
    settings = driver.settings
    assert settings.endpoints == ("http://10.0.0.1:2379", "http://[::1]:2380")
    assert settings.prefix == "/app/ha" and settings.op_timeout == 1.0
    assert (settings.options.user, settings.options.password) == ("me", "s@cret")
    assert settings.options.connect_timeout == 2.0 and driver.session_timeout == 5.0
    secure = EtcdDriver.from_url("etcd://h1/p?ca=/ca.pem&cert=/c.pem&key=/k.pem").settings
    assert secure.endpoints == ("https://h1:2379",) and secure.secure
    assert type(ha.drivers.connect("etcd://h1")) is EtcdDriver


async def test_an_unreachable_cluster_is_a_clear_error() -> None:
    port = free_port()  # nobody listens there
    driver = EtcdDriver.from_url(f"etcd://127.0.0.1:{port}/p", connect_timeout=0.5)
    with pytest.raises(Unavailable, match=f"could not reach etcd at 127.0.0.1:{port} within 0.5 s"):
        await driver.start()
    await driver.aclose()  # harmless after a failed start


async def test_the_granted_ttl_is_the_session_timeout(etcd_backend: EtcdBackend) -> None:
    # etcd counts TTLs in whole seconds: 0.3 s is asked as 1 s, 1.5 s as 2 s; the server may
    # raise a TTL to its minimum (1 s with the fixture's timers, 2 s with etcd's defaults)
    for asked, granted in ((0.3, 1.0), (1.5, 2.0)):
        driver = etcd_backend.driver(session_timeout=asked)
        assert driver.session_timeout == asked
        async with driver:
            assert driver.session_timeout == granted
            reply = etcd_backend.server.call("lease/timetolive", {"ID": str(driver.session_id)})
            assert int(reply["grantedTTL"]) == granted


async def test_the_second_endpoint_serves_when_the_first_is_down(
    etcd_backend: EtcdBackend,
) -> None:
    dead = f"127.0.0.1:{free_port()}"
    async with etcd_backend.driver(via=f"{dead},{etcd_backend.hosts}") as driver:
        await driver.create("/via", b"second")
        assert (await driver.get("/via"))[0] == b"second"
        assert driver.settings.endpoints[0].endswith(dead)


async def test_compaction_during_a_watch_loses_no_event(
    etcd_server_factory: Any,
) -> None:
    server: EtcdServer = etcd_server_factory()
    backend = EtcdBackend(server)
    async with backend.driver() as other:
        for path in ("/replaced", "/changed", "/deleted"):
            await other.create(path, b"1")
        driver = backend.driver()  # its watch begins after those creations
        await driver.start()
        seen = {path: Seen() for path in ("/new", "/replaced", "/changed", "/deleted", "/same")}
        for path, events in seen.items():
            driver.subscribe(path, events)
        # the subscriptions' first reads are done (a fixed sleep was too short under load)
        with anyio.fail_after(15):
            while any(seen is _UNKNOWN for seen in driver._watches.seen.values()):
                await anyio.sleep(0.01)
        faults(driver).disconnect()  # the watch stops where it was
        try:
            await other.create("/new")
            await other.transaction([Delete("/replaced"), Create("/replaced", b"2")])
            await other.set("/changed", b"2")
            await other.delete("/deleted")
            server.compact()  # the watch cannot resume from where it stopped
        finally:
            faults(driver).reconnect()
        assert await seen["/new"].until(1) == [NodeEvent("/new", CREATED)]
        assert await seen["/replaced"].until(2) == [
            NodeEvent("/replaced", DELETED),
            NodeEvent("/replaced", CREATED),
        ]
        assert await seen["/changed"].until(1) == [NodeEvent("/changed", CHANGED)]
        assert await seen["/deleted"].until(1) == [NodeEvent("/deleted", DELETED)]
        # and the watch goes on from the revision it read
        await other.set("/new", b"x")
        assert (await seen["/new"].until(2))[1] == NodeEvent("/new", CHANGED)
        assert seen["/same"].events == []
        await driver.aclose()


async def test_events_read_again_after_a_compaction_keep_the_order_of_the_writes(
    etcd_server_factory: Any,
) -> None:
    # what a compaction made the watch miss is read again: a pause written before a leader's
    # exit must still come first (a standby acts on that order); deletions leave no revision,
    # so they come last (before this, events came in the order of subscription)
    server: EtcdServer = etcd_server_factory()
    backend = EtcdBackend(server)
    async with backend.driver() as other:
        for path in ("/leader", "/b", "/a"):
            await other.create(path, b"1")
        driver = backend.driver()
        await driver.start()
        seen = Seen()
        for path in ("/leader", "/a", "/b", "/pause"):
            driver.subscribe(path, seen)
        with anyio.fail_after(15):
            while any(known is _UNKNOWN for known in driver._watches.seen.values()):
                await anyio.sleep(0.01)
        faults(driver).disconnect()
        try:
            await other.create("/pause")
            await other.set("/b", b"2")
            await other.set("/a", b"2")
            await other.delete("/leader")
            server.compact()
        finally:
            faults(driver).reconnect()
        assert await seen.until(4) == [
            NodeEvent("/pause", CREATED),
            NodeEvent("/b", CHANGED),
            NodeEvent("/a", CHANGED),
            NodeEvent("/leader", DELETED),
        ]
        await driver.aclose()


async def test_foreign_data_under_the_prefix_is_corrupt(etcd_backend: EtcdBackend) -> None:
    import base64

    key = base64.b64encode(f"{etcd_backend.prefix}/001/foreign".encode()).decode()
    etcd_backend.server.call("kv/put", {"key": key, "value": base64.b64encode(b"hi").decode()})
    async with etcd_backend.driver() as driver:
        with pytest.raises(CorruptData, match="/foreign"):
            await driver.get("/foreign")
        assert await driver.children("/") == ["foreign"]


async def test_a_node_written_twice_in_one_transaction_counts_both(
    etcd_backend: EtcdBackend,
) -> None:
    # etcd takes one write per key per transaction: the versions and creation numbers that it
    # cannot count are kept in the node's incarnation record (ha.drivers.etcd.keys)
    async with etcd_backend.driver() as driver:
        await driver.create("/n", b"0")
        created = (await driver.get("/n"))[1].created
        await driver.transaction([SetData("/n", b"1"), SetData("/n", b"2"), SetData("/n", b"3")])
        stat = (await driver.get("/n"))[1]
        assert (stat.version, stat.created) == (3, created)
        assert (await driver.set("/n", b"4", 3)).version == 4
        await driver.transaction([Delete("/n", 4), Create("/n", b"again")])
        again = (await driver.get("/n"))[1]
        assert again.version == 0 and again.created > created
        await driver.transaction([SetData("/n", b"a"), SetData("/n", b"b")])
        assert (await driver.set("/n", b"c")).version == 3
        assert (await driver.get("/n"))[1].created == again.created
        await driver.delete("/n", 3)
        await driver.create("/n")  # a plain node again: nothing left of the record
        fresh = (await driver.get("/n"))[1]
        assert fresh.version == 0 and fresh.created > again.created


async def test_a_server_restart_keeps_the_session(etcd_server_factory: Any) -> None:
    server: EtcdServer = etcd_server_factory()
    backend = EtcdBackend(server)
    events = Seen()
    driver = backend.driver(session_timeout=2.0)
    driver.subscribe(None, events)
    async with driver:
        await driver.create("/mine", ephemeral=True)
        session = driver.session_id
        server.stop()  # SIGKILL: etcd renews every lease to its full TTL when it comes back
        await events.until(2)
        server.start()
        await events.until(3)
        states = [event.state for event in events.events]
        assert states == [
            ConnectionState.CONNECTED,
            ConnectionState.DISCONNECTED,
            ConnectionState.RECONNECTED,
        ]
        assert driver.session_id == session
        assert (await driver.exists("/mine")).ephemeral_owner == session  # type: ignore[union-attr]


async def test_credentials_and_permissions(etcd_server_factory: Any) -> None:
    import base64

    server: EtcdServer = etcd_server_factory()

    def key(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    server.call("auth/user/add", {"name": "root", "password": "rootpw"})
    server.call("auth/role/add", {"name": "root"})  # etcd enables auth only with a root
    server.call("auth/user/grant", {"user": "root", "role": "root"})
    server.call("auth/user/add", {"name": "app", "password": "apppw"})
    server.call("auth/role/add", {"name": "app"})
    server.call(
        "auth/role/grant",
        {
            "name": "app",
            "perm": {"permType": "READWRITE", "key": key("/app/"), "range_end": key("/app0")},
        },
    )
    server.call("auth/user/grant", {"user": "app", "role": "app"})
    server.call("auth/enable", {})
    async with EtcdDriver.from_url(f"etcd://app:apppw@{server.hosts}/app") as driver:
        await driver.create("/mine", b"1", ephemeral=True)
        assert (await driver.get("/mine"))[0] == b"1"
    wrong = EtcdDriver.from_url(f"etcd://app:nope@{server.hosts}/app", connect_timeout=2)
    with pytest.raises(AccessDenied, match="^etcd rejected the credentials") as denied:
        await wrong.start()
    assert not denied.value.transient
    async with EtcdDriver.from_url(f"etcd://app:apppw@{server.hosts}/other") as elsewhere:
        with pytest.raises(AccessDenied, match="to app on the prefix /other") as refused:
            await elsewhere.create("/x")
        assert "\n" not in str(refused.value)


async def test_a_frozen_server_then_the_session_goes_on_or_expires(
    etcd_server_factory: Any,
) -> None:
    # SIGSTOP for longer than the lease: on SIGCONT etcd either renews the lease from the
    # keepalives that waited in its socket or expires it first; the driver reports either
    server: EtcdServer = etcd_server_factory()
    events = Seen()
    driver = EtcdBackend(server).driver(session_timeout=1.0)
    driver.subscribe(None, events)
    async with driver:
        await driver.create("/mine", ephemeral=True)
        old = driver.session_id
        server.pause()
        try:
            await events.until(2)  # DISCONNECTED: the keepalives go unanswered
            await anyio.sleep(driver.session_timeout * 1.5)
        finally:
            server.resume()
        with anyio.fail_after(15):
            while not driver.connected:
                await anyio.sleep(0.01)
        states = [event.state for event in events.events]
        assert states[1] is ConnectionState.DISCONNECTED
        if driver.session_id == old:
            assert states[2:] == [ConnectionState.RECONNECTED]
            assert await driver.exists("/mine") is not None
        else:
            assert states[2:] == [ConnectionState.EXPIRED, ConnectionState.CONNECTED]
            assert await driver.exists("/mine") is None
        await driver.create("/after", ephemeral=True)
        assert (await driver.get("/after"))[1].ephemeral_owner == driver.session_id


async def test_losing_the_member_in_use_keeps_the_session(etcd_cluster: EtcdCluster) -> None:
    # the driver talks to the leader first; killed, the others elect a leader, which renews
    # every lease to its full TTL, and the driver's requests and watch move to them
    first = etcd_cluster.leader()
    order = [first] + [i for i in range(3) if i != first]
    hosts = ",".join(etcd_cluster.servers[i].hosts for i in order)
    others = ",".join(etcd_cluster.servers[i].hosts for i in order[1:])
    events, watched = Seen(), Seen()
    driver = EtcdDriver.from_url(f"etcd://{hosts}/ha", session_timeout=2.0)
    driver.subscribe(None, events)
    async with driver, EtcdDriver.from_url(f"etcd://{others}/ha", op_timeout=0.5) as other:
        await driver.create("/mine", ephemeral=True)
        driver.subscribe("/n", watched)
        await driver.exists("/n")
        session = driver.session_id
        etcd_cluster.stop(first)
        with anyio.fail_after(20):
            while True:  # an operation may fail while the others elect a leader
                try:
                    await other.create("/n")
                    break
                except ConnectionLost:
                    await anyio.sleep(0.05)
        assert await watched.until(1) == [NodeEvent("/n", CREATED)]
        assert (await driver.get("/mine"))[1].ephemeral_owner == session
        assert driver.session_id == session
        states = {event.state for event in events.events}
        assert ConnectionState.EXPIRED not in states


async def test_tls_with_a_client_certificate(etcd_server_factory: Any, tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    server: EtcdServer = etcd_server_factory(certs)
    tls = f"ca={certs / 'ca.pem'}&cert={certs / 'client.pem'}&key={certs / 'client.key'}"
    url = f"etcd://{server.hosts}/tls"
    async with (
        EtcdDriver.from_url(f"{url}?{tls}") as driver,
        EtcdDriver.from_url(f"{url}?{tls}") as other,
    ):
        seen = Seen()
        driver.subscribe("/n", seen)
        await driver.exists("/n")
        await other.create("/n", b"over tls", ephemeral=True)
        assert await seen.until(1) == [NodeEvent("/n", CREATED)]
        assert (await driver.get("/n"))[0] == b"over tls"
    # no client certificate: the server refuses the handshake, and the error says why
    without = EtcdDriver.from_url(f"{url}?ca={certs / 'ca.pem'}", connect_timeout=2)
    with pytest.raises(AccessDenied, match="refused the TLS connection") as refused:
        await without.start()
    assert "\n" not in str(refused.value)
    # a server whose certificate the CA does not vouch for: not reached, and why
    untrusted = EtcdDriver.from_url(f"{url}?tls=true", connect_timeout=0.5)
    with pytest.raises(Unavailable, match="CERTIFICATE_VERIFY_FAILED") as unverified:
        await untrusted.start()
    assert "\n" not in str(unverified.value)


async def test_a_transaction_of_deletes_is_one_round_trip(etcd_backend: EtcdBackend) -> None:
    async with etcd_backend.driver() as driver:
        for path in ("/a", "/b", "/c", "/c/d"):
            await driver.create(path)
        before = transactions(etcd_backend)
        assert await driver.transaction([Delete("/a"), Delete("/b")]) == [None, None]
        assert transactions(etcd_backend) - before == 1  # a graceful exit's crumb and node
        # what one transaction's compares cannot say goes the long way, in the ops' order
        with pytest.raises(TransactionFailed) as failed:
            await driver.transaction([Delete("/c"), Delete("/c/d")])
        assert (failed.value.index, type(failed.value.cause)) == (0, NotEmpty)
        with pytest.raises(TransactionFailed) as failed:
            await driver.transaction([Delete("/c/d"), Delete("/a")])
        assert (failed.value.index, type(failed.value.cause)) == (1, NoNode)
        assert await driver.transaction([Delete("/c/d"), Delete("/c")]) == [None, None]
        assert await driver.children("/") == []
