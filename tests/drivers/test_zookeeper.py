"""The ZooKeeper driver against real ZooKeeper servers, under asyncio and trio.

Faults come from the real thing: a fault proxy in front of the server for one client's network,
a second client taking over a session to expire it, killed and restarted server processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import anyio
import pytest

import ha.drivers
from ha.drivers.base import (
    Check,
    ConnectionEvent,
    ConnectionState,
    Create,
    Delete,
    NodeEvent,
    NodeEventKind,
    SetData,
    Stat,
)
from ha.drivers.zookeeper import ZooKeeperDriver
from ha.errors import (
    AccessDenied,
    BadVersion,
    ConfigurationError,
    ConnectionLost,
    NodeExists,
    NoNode,
    NotEmpty,
    TransactionFailed,
    Unavailable,
)
from tests.support.backends.zookeeper import (
    ZooKeeperBackend,
    ZooKeeperEnsemble,
    ZooKeeperServer,
    expire_session,
    free_port,
)
from tests.support.faultproxy import FaultProxy

pytestmark = pytest.mark.timeout(60)
T = TypeVar("T")


def live(test: T) -> T:
    """An async test against a real server (under asyncio and trio)."""
    return pytest.mark.anyio(pytest.mark.zookeeper(test))  # type: ignore[no-any-return]


S = ConnectionState
WAIT = 15.0  # seconds an awaited event may take before the test fails (a hang, not a timing)


class Recorder:
    """A subscriber that keeps every event and lets a test wait for the next ones."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self._read = 0
        self._changed: anyio.Event | None = None

    def __call__(self, event: Any) -> None:
        self.events.append(event)
        if self._changed is not None:
            self._changed.set()

    async def next(self) -> Any:
        with anyio.fail_after(WAIT):
            while self._read >= len(self.events):
                self._changed = anyio.Event()
                await self._changed.wait()
        event = self.events[self._read]
        self._read += 1
        return event

    async def until(self, predicate: Callable[[Any], bool]) -> Any:
        """Skip events until one matches; return it."""
        while True:
            event = await self.next()
            if predicate(event):
                return event

    def pending(self) -> list[Any]:
        return self.events[self._read :]


def is_state(*states: ConnectionState) -> Callable[[Any], bool]:
    return lambda event: isinstance(event, ConnectionEvent) and event.state in states


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with FaultProxy() as proxy:
        yield proxy


# --- configuration (no server) ----------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "zk://",
        "zk:///chroot",
        "zk://host:notaport/x",
        "zk://host:0",
        "zk://host:70000",
        "zk://:2181",
        "zk://h1:2181,,h2:2181",
        "zk://[::1/x",
        "zk://h:2181/a//b",
        "zk://h:2181/a?session_timeout=abc",
        "zk://h:2181/a?session_timeout=-1",
        "zk://h:2181/a?bogus=1",
        "zk://h:2181/a?create_chroot=maybe",
        "zk://h:2181/a?acl=world",
        "zk://h:2181/a?acl=creator",  # creator ACLs without credentials
        "zk://h:2181/a?auth=nocolon",
        "zk://h:2181/a#frag",
        "zookeeper://h:2181/a",
        "http://h:2181/a",
    ],
)
def test_malformed_url_is_a_configuration_error(url: str) -> None:
    with pytest.raises(ConfigurationError):
        ZooKeeperDriver.from_url(url)


def test_url_options_and_keywords() -> None:
    driver = ZooKeeperDriver.from_url(
        "zk://u:p%40ss@h1:2181,h2,[::1]:2182/app/ha/?session_timeout=5&acl=creator"
        "&create_chroot=no",
        connect_timeout=2,
        session_timeout="3.5",
    )
    assert driver.hosts == "h1:2181,h2:2181,[::1]:2182"
    assert driver.chroot == "/app/ha"
    assert driver.options.auth == "u:p@ss"
    assert driver.options.acl == "creator"
    assert driver.options.create_chroot is False
    assert driver.session_timeout == 3.5  # keywords win over the URL
    assert driver.options.connect_timeout == 2.0
    assert driver.session_id is None and not driver.connected


def test_scheme_table_builds_the_zookeeper_driver() -> None:
    driver = ha.drivers.connect("zk://127.0.0.1:2181/x?session_timeout=2")
    assert isinstance(driver, ZooKeeperDriver)
    assert driver.capabilities.name == "zookeeper"
    assert driver.capabilities.sessions == "session"
    assert driver.capabilities.cross_host and driver.capabilities.push_watches


# --- nodes ------------------------------------------------------------------------------------


@live
async def test_create_get_set_delete_children(zookeeper_backend: ZooKeeperBackend) -> None:
    async with zookeeper_backend.driver() as zk:
        assert await zk.create("/a", b"one") == "/a"
        data, stat = await zk.get("/a")
        assert (data, stat.version, stat.ephemeral_owner) == (b"one", 0, None)
        stat = await zk.set("/a", b"two", version=0)
        assert stat.version == 1
        assert (await zk.get("/a"))[0] == b"two"
        assert (await zk.set("/a", b"three")).version == 2  # -1: any version
        assert await zk.create("/a/b/c", b"deep", makepath=True) == "/a/b/c"
        await zk.create("/a/z")
        assert await zk.children("/a") == ["b", "z"]
        assert (await zk.exists("/a")) == Stat(
            2,
            None,
            (await zk.exists("/a")).mtime,
            num_children=2,  # type: ignore[union-attr]
        )
        await zk.delete("/a/z", version=0)
        assert await zk.exists("/a/z") is None
        await zk.delete("/a", recursive=True)
        assert await zk.exists("/a") is None
        assert await zk.children("/") == []


@live
async def test_node_errors(zookeeper_backend: ZooKeeperBackend) -> None:
    async with zookeeper_backend.driver() as zk:
        await zk.create("/n", b"x")
        with pytest.raises(NodeExists):
            await zk.create("/n")
        with pytest.raises(NoNode):
            await zk.create("/missing/child")
        with pytest.raises(NoNode):
            await zk.get("/missing")
        with pytest.raises(NoNode):
            await zk.children("/missing")
        with pytest.raises(NoNode):
            await zk.set("/missing", b"")
        with pytest.raises(BadVersion) as bad:
            await zk.set("/n", b"y", version=7)
        assert (bad.value.path, bad.value.expected) == ("/n", 7)
        with pytest.raises(BadVersion):
            await zk.delete("/n", version=3)
        await zk.create("/n/child")
        with pytest.raises(NotEmpty):
            await zk.delete("/n")
        with pytest.raises(BadVersion):
            await zk.delete("/n", version=5, recursive=True)
        assert await zk.exists("/n/child") is not None  # nothing of the subtree went
        await zk.create("/eph", ephemeral=True)
        with pytest.raises(NoNode):
            await zk.create("/eph/child")
        with pytest.raises(ConfigurationError):
            await zk.get("relative")
        assert await zk.exists("/missing") is None


@live
async def test_bytes_round_trip_unchanged(zookeeper_backend: ZooKeeperBackend) -> None:
    blobs = [b"", b"\x00", bytes(range(256)), b"\xff\xfe not utf-8 \xc3\x28", b"\x00" * 100_000]
    async with zookeeper_backend.driver() as zk:
        for index, blob in enumerate(blobs):
            await zk.create(f"/b{index}", blob)
            assert (await zk.get(f"/b{index}"))[0] == blob
            await zk.set(f"/b{index}", bytearray(blob[::-1]))
            assert (await zk.get(f"/b{index}"))[0] == blob[::-1]


@live
async def test_ephemeral_owner_is_the_session_and_goes_with_it(
    zookeeper_backend: ZooKeeperBackend,
) -> None:
    async with zookeeper_backend.driver() as watcher:
        owner = zookeeper_backend.driver()
        seen = Recorder()
        owner.subscribe(None, seen)
        await owner.start()
        try:
            await owner.create("/lock", b"me", ephemeral=True)
            stat = await watcher.exists("/lock")
            assert stat is not None and stat.ephemeral_owner == owner.session_id
            assert watcher.session_id != owner.session_id
        finally:
            await owner.aclose()
        assert await watcher.exists("/lock") is None  # gone at once, not after the timeout
        assert [e.state for e in seen.events] == [S.CONNECTED, S.CLOSED]
        assert owner.session_id is None and not owner.connected


# --- transactions -----------------------------------------------------------------------------


@live
async def test_transaction_applies_every_op(zookeeper_backend: ZooKeeperBackend) -> None:
    async with zookeeper_backend.driver() as zk:
        await zk.create("/epoch", b"1")
        await zk.create("/old")
        results = await zk.transaction(
            [
                Check("/epoch", 0),
                SetData("/epoch", b"2", 0),
                Create("/new", b"n", ephemeral=True),
                Delete("/old", 0),
            ]
        )
        assert results[0] is None and results[3] is None
        assert isinstance(results[1], Stat) and results[1].version == 1
        assert results[2] == "/new"
        assert (await zk.get("/epoch"))[0] == b"2"
        assert (await zk.exists("/new")).ephemeral_owner == zk.session_id  # type: ignore[union-attr]
        assert await zk.exists("/old") is None
        assert await zk.transaction([]) == []


@live
@pytest.mark.parametrize(
    ("failing", "cause"),
    [
        (Check("/epoch", 5), BadVersion),
        (SetData("/epoch", b"x", 9), BadVersion),
        (Check("/absent"), NoNode),
        (Create("/taken"), NodeExists),
        (Delete("/taken"), NotEmpty),
        (Delete("/absent"), NoNode),
    ],
    ids=["check", "set", "check-missing", "create", "delete-not-empty", "delete-missing"],
)
async def test_transaction_is_all_or_nothing(
    zookeeper_backend: ZooKeeperBackend, failing: Any, cause: type[Exception]
) -> None:
    async with zookeeper_backend.driver() as zk:
        await zk.create("/epoch", b"1")
        await zk.create("/taken/child", makepath=True)
        ops = [SetData("/epoch", b"2"), Create("/fresh", b"f"), failing, Create("/after")]
        with pytest.raises(TransactionFailed) as failed:
            await zk.transaction(ops)
        assert failed.value.index == 2
        assert isinstance(failed.value.cause, cause)
        assert failed.value.cause.path == failing.path  # type: ignore[attr-defined]
        data, stat = await zk.get("/epoch")
        assert (data, stat.version) == (b"1", 0)
        assert await zk.exists("/fresh") is None and await zk.exists("/after") is None


# --- node events ------------------------------------------------------------------------------


@live
async def test_node_events_for_subscribed_paths(zookeeper_backend: ZooKeeperBackend) -> None:
    async with zookeeper_backend.driver() as zk, zookeeper_backend.driver() as other:
        x, y = Recorder(), Recorder()
        sub_x = zk.subscribe("/x", x)
        zk.subscribe("/y", y)
        await zk.exists("/x")  # the watch is armed by a request sent before this one
        await other.create("/x", b"1")
        assert await x.next() == NodeEvent("/x", NodeEventKind.CREATED)
        await other.set("/x", b"2")
        assert await x.next() == NodeEvent("/x", NodeEventKind.CHANGED)
        await other.delete("/x")
        assert await x.next() == NodeEvent("/x", NodeEventKind.DELETED)
        sub_x.close()
        await other.create("/x")
        await other.create("/y")
        assert await y.next() == NodeEvent("/y", NodeEventKind.CREATED)
        assert x.pending() == []  # nothing after unsubscribing
        assert zk.watched_paths() == ["/y"]


@live
async def test_transaction_events_and_replaced_node(zookeeper_backend: ZooKeeperBackend) -> None:
    async with zookeeper_backend.driver() as zk, zookeeper_backend.driver() as other:
        await zk.create("/lock", b"a")
        seen = Recorder()
        zk.subscribe("/lock", seen)
        await zk.exists("/lock")
        # deleted and created again in one multi: one firing, seen as both
        await other.transaction([Delete("/lock"), Create("/lock", b"b")])
        assert [await seen.next(), await seen.next()] == [
            NodeEvent("/lock", NodeEventKind.DELETED),
            NodeEvent("/lock", NodeEventKind.CREATED),
        ]


@live
async def test_no_event_lost_when_a_subscriber_reacts_at_once(
    zookeeper_backend: ZooKeeperBackend,
) -> None:
    # a standby re-creates the lock as soon as it hears of its deletion, and so on: each
    # reaction lands right after an event, while the watch is being set again
    async with zookeeper_backend.driver() as zk, zookeeper_backend.driver() as other:
        seen = Recorder()
        zk.subscribe("/lock", seen)
        await zk.exists("/lock")
        for _ in range(5):
            await other.create("/lock")
            assert await seen.next() == NodeEvent("/lock", NodeEventKind.CREATED)
            await zk.set("/lock", b"mine")
            assert await seen.next() == NodeEvent("/lock", NodeEventKind.CHANGED)
            await other.delete("/lock")
            assert await seen.next() == NodeEvent("/lock", NodeEventKind.DELETED)
            await zk.create("/lock")
            assert await seen.next() == NodeEvent("/lock", NodeEventKind.CREATED)
            await zk.delete("/lock")
            assert await seen.next() == NodeEvent("/lock", NodeEventKind.DELETED)


# --- chroot -----------------------------------------------------------------------------------


@live
async def test_chroot_is_created_and_isolates(
    zookeeper_backend: ZooKeeperBackend, zookeeper_server: ZooKeeperServer
) -> None:
    chroot = zookeeper_backend.chroot
    root = ZooKeeperDriver.from_url(f"zk://{zookeeper_server.hosts}", session_timeout=2)
    async with root:
        assert await root.exists(chroot) is None
        async with zookeeper_backend.driver() as zk:
            assert await root.exists(chroot) is not None
            await zk.create("/inside", b"i")
            assert await zk.children("/") == ["inside"]
            assert (await root.get(f"{chroot}/inside"))[0] == b"i"
            seen = Recorder()
            zk.subscribe("/inside", seen)
            await zk.exists("/inside")
            await root.set(f"{chroot}/inside", b"j")
            assert await seen.next() == NodeEvent("/inside", NodeEventKind.CHANGED)
            results = await zk.transaction([Create("/t"), Check("/t")])
            assert results == ["/t", None]


@live
async def test_missing_chroot_refused_when_not_allowed(
    zookeeper_backend: ZooKeeperBackend,
) -> None:
    zk = zookeeper_backend.driver(create_chroot=False)
    with pytest.raises(ConfigurationError, match="does not exist"):
        await zk.start()
    assert not zk.connected
    await zk.aclose()  # harmless after a failed start


# --- connection faults ------------------------------------------------------------------------


@live
async def test_unreachable_server_is_unavailable() -> None:
    port = free_port()  # nobody listens there
    zk = ZooKeeperDriver.from_url(f"zk://127.0.0.1:{port}/x", connect_timeout=0.5)
    with pytest.raises(Unavailable, match=f"127.0.0.1:{port}.*0.5 s"):
        await zk.start()
    with pytest.raises(ConnectionLost):
        await zk.get("/x")


@live
async def test_operations_outside_start_and_close_are_connection_lost(
    zookeeper_backend: ZooKeeperBackend,
) -> None:
    zk = zookeeper_backend.driver()
    with pytest.raises(ConnectionLost):
        await zk.exists("/")
    async with zk:
        with pytest.raises(RuntimeError):
            await zk.start()
    with pytest.raises(ConnectionLost):
        await zk.exists("/")


@live
async def test_granted_session_timeout_is_reported(zookeeper_backend: ZooKeeperBackend) -> None:
    # the test server caps sessions at 20 s: a driver asking for 60 s must not believe in 60
    async with zookeeper_backend.driver(session_timeout=60) as zk:
        assert zk.session_timeout == 20.0
    async with zookeeper_backend.driver(session_timeout=1.5) as zk:
        assert zk.session_timeout == 1.5


@live
async def test_last_contact_follows_replies(zookeeper_backend: ZooKeeperBackend) -> None:
    # a reply dates the contact (at its request's send time) once a request through the leader
    # (here a write) is sent at least tick_time after it: its touch then reached the leader
    async with zookeeper_backend.driver(tick_time=0.05) as zk:
        before = anyio.current_time()
        await zk.exists("/")
        await anyio.sleep(0.06)
        await zk.create("/written")
        assert before <= zk.last_contact <= anyio.current_time()


@live
async def test_dropped_connection_reconnects_in_the_same_session(
    zookeeper_backend: ZooKeeperBackend, proxy: FaultProxy, zookeeper_server: ZooKeeperServer
) -> None:
    link = proxy.link(("127.0.0.1", zookeeper_server.port))
    async with zookeeper_backend.driver() as other:
        zk = zookeeper_backend.driver(via=link.hosts)
        seen = Recorder()
        zk.subscribe(None, seen)
        node = Recorder()
        zk.subscribe("/mine", node)
        async with zk:
            assert (await seen.next()).state == S.CONNECTED
            session = zk.session_id
            await zk.create("/mine", ephemeral=True)
            assert (await node.next()).kind == NodeEventKind.CREATED
            link.drop()
            assert await seen.next() == ConnectionEvent(S.DISCONNECTED, session)
            assert await seen.next() == ConnectionEvent(S.RECONNECTED, session)
            assert zk.connected and zk.session_id == session
            assert await other.exists("/mine") is not None  # the session kept its node
            await other.set("/mine", b"changed")  # the watch was armed again
            assert await node.next() == NodeEvent("/mine", NodeEventKind.CHANGED)


@live
async def test_short_freeze_within_the_session_keeps_it(
    zookeeper_backend: ZooKeeperBackend, proxy: FaultProxy, zookeeper_server: ZooKeeperServer
) -> None:
    link = proxy.link(("127.0.0.1", zookeeper_server.port))
    zk = zookeeper_backend.driver(via=link.hosts, session_timeout=2.0)
    seen = Recorder()
    zk.subscribe(None, seen)
    async with zk:
        await seen.next()
        session = zk.session_id
        link.pause()
        # kazoo notices after two thirds of the timeout without a ping answer; the server
        # would expire the session only after the full timeout
        assert await seen.next() == ConnectionEvent(S.DISCONNECTED, session)
        assert not zk.connected
        link.resume()
        assert await seen.next() == ConnectionEvent(S.RECONNECTED, session)
        await zk.create("/after", ephemeral=True)


@live
async def test_freeze_past_the_timeout_expires_then_opens_a_new_session(
    zookeeper_backend: ZooKeeperBackend, proxy: FaultProxy, zookeeper_server: ZooKeeperServer
) -> None:
    link = proxy.link(("127.0.0.1", zookeeper_server.port))
    async with zookeeper_backend.driver() as observer:
        zk = zookeeper_backend.driver(via=link.hosts, session_timeout=1.0)
        seen = Recorder()
        zk.subscribe(None, seen)
        async with zk:
            await seen.next()
            old = zk.session_id
            await zk.create("/lock", ephemeral=True)
            gone = Recorder()
            observer.subscribe("/lock", gone)
            await observer.exists("/lock")
            link.pause()
            assert await seen.next() == ConnectionEvent(S.DISCONNECTED, old)
            frozen_contact = zk.last_contact
            # the server ends the session: the observer sees the ephemeral node go
            assert await gone.next() == NodeEvent("/lock", NodeEventKind.DELETED)
            # ... while the cut-off client still only knows it is disconnected
            assert seen.pending() == [] and zk.session_id == old
            assert zk.last_contact == frozen_contact
            link.resume()
            assert await seen.next() == ConnectionEvent(S.EXPIRED, old)
            new = await seen.next()
            assert new.state == S.CONNECTED and new.session_id not in (None, old)
            assert zk.session_id == new.session_id
            assert await zk.exists("/lock") is None
            await zk.create("/lock", ephemeral=True)


@live
async def test_forced_expiry(zookeeper_backend: ZooKeeperBackend) -> None:
    zk = zookeeper_backend.driver()
    seen, node = Recorder(), Recorder()
    zk.subscribe(None, seen)
    zk.subscribe("/lock", node)
    async with zk:
        await seen.next()
        old = zk.session_id
        await zk.create("/lock", ephemeral=True)
        assert (await node.next()).kind == NodeEventKind.CREATED
        await expire_session(zk)
        expired = await seen.until(is_state(S.EXPIRED, S.CONNECTED, S.RECONNECTED))
        assert expired == ConnectionEvent(S.EXPIRED, old)
        new = await seen.next()
        assert new.state == S.CONNECTED and new.session_id != old
        # the watch came back with the new session and reports what changed meanwhile
        assert await node.next() == NodeEvent("/lock", NodeEventKind.DELETED)
        await zk.create("/lock", ephemeral=True)
        assert (await zk.exists("/lock")).ephemeral_owner == new.session_id  # type: ignore[union-attr]


@live
async def test_injected_faults_hook(zookeeper_backend: ZooKeeperBackend) -> None:
    async with zookeeper_backend.driver() as zk:
        zk._fail_next(2)
        for _ in range(2):
            with pytest.raises(ConnectionLost, match="injected"):
                await zk.exists("/")
        zk._fail_next(1, transient=False)
        with pytest.raises(AccessDenied, match="injected"):
            await zk.exists("/")
        assert await zk.exists("/") is not None


# --- access control ---------------------------------------------------------------------------


@live
async def test_creator_acl_denies_others(zookeeper_backend: ZooKeeperBackend) -> None:
    owner = zookeeper_backend.driver(auth="alice:secret", acl="creator")
    async with owner:
        await owner.create("/private/data", b"s", makepath=True)
        assert (await owner.get("/private/data"))[0] == b"s"
        for auth in (None, "alice:wrong", "mallory:secret"):
            async with zookeeper_backend.driver(auth=auth) as intruder:
                with pytest.raises(AccessDenied, match="denied access to /private/data"):
                    await intruder.get("/private/data")
                with pytest.raises(AccessDenied):
                    await intruder.set("/private/data", b"x")
                with pytest.raises(AccessDenied):
                    await intruder.create("/private/more")
                with pytest.raises(AccessDenied):
                    await intruder.transaction([Check("/private/data"), Create("/private/t")])
                assert await intruder.exists("/private/data") is not None  # exists needs no right
        async with zookeeper_backend.driver(auth="alice:secret") as again:
            assert (await again.get("/private/data"))[0] == b"s"
        assert not AccessDenied.transient


# --- servers going away -----------------------------------------------------------------------


@live
async def test_server_restart_keeps_session_and_data(zookeeper_server_factory: Any) -> None:
    server: ZooKeeperServer = zookeeper_server_factory()
    zk = ZooKeeperDriver.from_url(
        f"zk://{server.hosts}/r", session_timeout=10, op_timeout=0.5, connect_timeout=5
    )
    seen = Recorder()
    zk.subscribe(None, seen)
    async with zk:
        await seen.next()
        session = zk.session_id
        await zk.create("/durable", b"d")
        await zk.create("/eph", ephemeral=True)
        server.stop()
        assert await seen.next() == ConnectionEvent(S.DISCONNECTED, session)
        with pytest.raises(ConnectionLost):
            await zk.get("/durable")
        server.start()
        assert await seen.next() == ConnectionEvent(S.RECONNECTED, session)
        assert (await zk.get("/durable"))[0] == b"d"
        assert (await zk.exists("/eph")).ephemeral_owner == session  # type: ignore[union-attr]


@live
@pytest.mark.timeout(90)
async def test_ensemble_member_loss(zookeeper_ensemble: ZooKeeperEnsemble) -> None:
    # no host shuffling: the driver talks to member 0, which is then killed
    zk = ZooKeeperDriver.from_url(
        zookeeper_ensemble.url("/loss"), session_timeout=4, randomize_hosts=False
    )
    other = ZooKeeperDriver.from_url(f"zk://{zookeeper_ensemble.servers[2].hosts}/loss")
    seen = Recorder()
    zk.subscribe(None, seen)
    async with zk, other:
        await seen.next()
        session = zk.session_id
        await zk.create("/eph", ephemeral=True)
        zookeeper_ensemble.stop(0)
        assert await seen.next() == ConnectionEvent(S.DISCONNECTED, session)
        assert await seen.next() == ConnectionEvent(S.RECONNECTED, session)
        await zk.set("/eph", b"written after the loss")
        assert (await other.get("/eph"))[0] == b"written after the loss"
        assert (await other.exists("/eph")).ephemeral_owner == session  # type: ignore[union-attr]
