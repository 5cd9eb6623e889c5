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
    NodeEvent,
    NodeEventKind,
)
from ha.drivers.zookeeper import ZooKeeperDriver
from ha.errors import (
    AccessDenied,
    ConfigurationError,
    ConnectionLost,
    Unavailable,
)
from ha.testing import faults
from tests.support.backends.zookeeper import (
    ZooKeeperBackend,
    ZooKeeperEnsemble,
    ZooKeeperServer,
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


# --- transactions -----------------------------------------------------------------------------


# --- node events ------------------------------------------------------------------------------


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


def _session_left_running(zk: Any) -> list[str]:
    """What a closed driver's session still holds: its background task, its kazoo client."""
    session = zk._session
    return [name for name in ("_background", "client") if getattr(session, name) is not None]


@live
async def test_a_start_cancelled_at_once_leaves_nothing_running(
    zookeeper_backend: ZooKeeperBackend,
) -> None:
    zk = zookeeper_backend.driver()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await zk.start()  # cancelled at its first await
    assert _session_left_running(zk) == []
    with pytest.raises(ConnectionLost):
        await zk.get("/")


@live
async def test_a_close_while_starting_ends_the_start() -> None:
    port = free_port()  # nobody listens: the start waits for its session
    zk = ZooKeeperDriver.from_url(f"zk://127.0.0.1:{port}/x", connect_timeout=WAIT * 4)
    failed: list[BaseException] = []

    async def start() -> None:
        try:
            await zk.start()
        except Exception as exc:
            failed.append(exc)

    with anyio.fail_after(WAIT):  # not the connect timeout: the close ends the wait
        async with anyio.create_task_group() as tg:
            tg.start_soon(start)
            await anyio.sleep(0.3)
            await zk.aclose()
    assert [type(exc) for exc in failed] == [ConnectionLost]
    assert _session_left_running(zk) == []


@live
async def test_close_stops_the_client_after_the_sessions_tasks_died(
    zookeeper_backend: ZooKeeperBackend,
) -> None:
    zk = zookeeper_backend.driver()
    await zk.start()

    async def bug() -> None:  # a bug in the pump or the probe
        raise RuntimeError("a session task failed")

    zk._session._tg.start_soon(bug)
    await anyio.sleep(0.2)
    await zk.aclose()  # the client is stopped all the same: it kept the session alive
    assert _session_left_running(zk) == [] and zk.session_id is None


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
    # (here a write) is sent at least tick_time after it, and another through the leader is
    # sent after that one's answer and answered: its touch then reached the leader while the
    # session lived (ha/drivers/zookeeper/contact.py)
    async with zookeeper_backend.driver(tick_time=0.05) as zk:
        before = anyio.current_time()
        await zk.exists("/")
        await anyio.sleep(0.06)
        await zk.create("/written")
        await zk.create("/second")
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
async def test_an_unanswered_connection_does_not_cost_the_session(
    zookeeper_backend: ZooKeeperBackend, proxy: FaultProxy, zookeeper_server: ZooKeeperServer
) -> None:
    # a restarting or stalled server takes the connection and never answers the session
    # request; kazoo alone waits a whole session timeout for that answer, and the session is
    # gone by the time it tries again, although the server was back at once
    link = proxy.link(("127.0.0.1", zookeeper_server.port))
    zk = zookeeper_backend.driver(via=link.hosts, session_timeout=6.0)
    seen = Recorder()
    zk.subscribe(None, seen)
    async with zk:
        await seen.next()
        session = zk.session_id
        link.blackhole()
        assert await seen.next() == ConnectionEvent(S.DISCONNECTED, session)
        with anyio.fail_after(WAIT):
            while not link.held:  # the next session request went into the hole
                await anyio.sleep(0.01)
        link.accept()
        assert await seen.next() == ConnectionEvent(S.RECONNECTED, session)


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
async def test_injected_faults_hook(zookeeper_backend: ZooKeeperBackend) -> None:
    async with zookeeper_backend.driver() as zk:
        faults(zk).fail_next(2)
        for _ in range(2):
            with pytest.raises(ConnectionLost, match="injected"):
                await zk.exists("/")
        faults(zk).fail_next(1, transient=False)
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
    # the longest session the test server grants: a restarted server gives restored sessions
    # their timeout again from its start, and a JVM starting on a loaded machine (CI runs two
    # test workers) answered the reconnection too late for 10 s
    zk = ZooKeeperDriver.from_url(
        f"zk://{server.hosts}/r", session_timeout=20, op_timeout=0.5, connect_timeout=5
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
